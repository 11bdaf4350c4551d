"""Process groups and the parallelism dimension each one serves.

A process group is named by torch (``pg_name``: ``"0"``, ``"1"``, … or a hash) and described by the
job (``pg_desc``: ``mesh_tp``, ``mesh_dp_shard`` for a DeviceMesh dimension; Megatron's
``TENSOR_MODEL_PARALLEL_GROUP,0``; ``default_pg`` for the world; ``undefined`` when the job gave no
description). The *dimension* of a group is a short label read from its description by one rule,
never from a fixed list of known names, so any mesh dimension a job names gets its own label.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["UNDESCRIBED", "WORLD_DIMENSION", "dimension_of"]

WORLD_DIMENSION = "world"
"""The dimension of the default process group (``default_pg``): every rank of the job."""

UNDESCRIBED = frozenset({"", "undefined", "none", "null", "unknown"})
"""Descriptions that describe nothing: a group with one of them has no dimension (null)."""

_INSTANCE_SUFFIX = re.compile(r"[,:#]\s*\d+$")
_NOT_A_LABEL = re.compile(r"[^0-9a-z]+")


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
