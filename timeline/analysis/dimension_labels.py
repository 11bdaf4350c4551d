"""Dimension labels of process groups: from their descriptions, and as the user renames them.

Without polars (the command line parses ``--dimension`` before it loads anything, and a bad label
fails fast). :mod:`timeline.analysis.groups` re-exports every name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from timeline.errors import UsageError

__all__ = ["UNDESCRIBED", "WORLD_DIMENSION", "dimension_of", "parse_dimension_overrides"]

WORLD_DIMENSION = "world"
"""The dimension of the default process group (``default_pg``): every rank of the job."""

UNDESCRIBED = frozenset({"", "undefined", "none", "null", "unknown"})
"""Descriptions that describe nothing: a group with one of them has no dimension (null)."""

_INSTANCE_SUFFIX = re.compile(r"[,:#]\s*\d+$")
_NOT_A_LABEL = re.compile(r"[^0-9a-z]+")
_LABEL = re.compile(r"[A-Za-z0-9_.-]+")


def dimension_of(desc: str | None, *, overrides: Mapping[str, str] | None = None) -> str | None:
    """Return the dimension label of a process group from its description, or None when it has none.

    The rule, in order: a description the user mapped in ``overrides`` (by its exact text) takes
    their label; a description in :data:`UNDESCRIBED` has no dimension; ``default_pg`` is
    :data:`WORLD_DIMENSION`; otherwise the description is lower-cased, a trailing instance index
    (``,0``, ``:1``, ``#2``) is dropped, then a leading ``mesh_`` and a trailing ``_group``, and
    every run of characters other than letters and digits becomes one ``_``.

    Parameters
    ----------
    desc
        The group's description (``pg_desc`` / ``Process Group Description``).
    overrides
        Description → label, given by the user (``--dimension mesh_dp_replicate=ddp``).

    Examples
    --------
    >>> dimension_of("mesh_tp"), dimension_of("mesh_dp_shard"), dimension_of("default_pg")
    ('tp', 'dp_shard', 'world')
    >>> dimension_of("EXPERT_MODEL_PARALLEL_GROUP,0"), dimension_of("undefined")
    ('expert_model_parallel', None)
    >>> dimension_of("mesh_dp", overrides={"mesh_dp": "fsdp"})
    'fsdp'
    """
    if desc is None:
        return None
    if overrides and desc in overrides:
        return overrides[desc]
    text = desc.strip().lower()
    if text in UNDESCRIBED:
        return None
    if text == "default_pg":
        return WORLD_DIMENSION
    text = _INSTANCE_SUFFIX.sub("", text)
    text = text.removeprefix("mesh_")
    text = text.removesuffix("_group")
    label = _NOT_A_LABEL.sub("_", text).strip("_")
    return label or None


def parse_dimension_overrides(values: Sequence[str]) -> dict[str, str]:
    """Parse ``--dimension DESCRIPTION=LABEL`` values into description → label.

    Raises
    ------
    UsageError
        A value without ``=``, with an empty side, a label of other than letters, digits, ``_``,
        ``.``, ``-``, or one description given two labels.

    Examples
    --------
    >>> parse_dimension_overrides(["mesh_dp_replicate=ddp", "mesh_dp_shard=fsdp"])
    {'mesh_dp_replicate': 'ddp', 'mesh_dp_shard': 'fsdp'}
    """
    overrides: dict[str, str] = {}
    for value in values:
        desc, sep, label = value.partition("=")
        desc, label = desc.strip(), label.strip()
        if not sep or not desc or not label:
            msg = (
                f"--dimension {value!r}: expected DESCRIPTION=LABEL, the group description as the trace "
                "writes it and the label to show (--dimension mesh_dp_replicate=ddp)"
            )
            raise UsageError(msg)
        if not _LABEL.fullmatch(label):
            msg = f"--dimension {value!r}: a label is letters, digits, '_', '.' or '-' (e.g. ddp, tp_intra)"
            raise UsageError(msg)
        if overrides.get(desc, label) != label:
            msg = f"--dimension: description {desc!r} is given two labels ({overrides[desc]!r}, {label!r})"
            raise UsageError(msg)
        overrides[desc] = label
    return overrides
