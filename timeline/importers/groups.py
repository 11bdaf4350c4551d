"""The process groups a profiler trace declares: ``distributedInfo.pg_config`` → a frame.

Takes a trace's ``distributedInfo`` (a decoded JSON object) and gives one row per process group the
rank's trace lists (:data:`timeline.schema.PROCESS_GROUPS_SCHEMA`, ``rank`` null: the loader fills
it in). Three generations are read (``docs/FORMATS``: torch's ``_get_all_pg_configs``, and Kineto's
on-demand writer, ``ChromeTraceLogger::addOnDemandDistMetadata``):

- ``{pg_name, uid, backend_config, pg_size, ranks}`` (torch 2.2-2.3: no description);
- ``{pg_name, pg_desc, backend_config, pg_size, ranks}`` (torch >= 2.4), ``ranks`` a JSON list;
- the same with ``ranks`` a string (``"[0, 1]"``, possibly cut with ``...`` by Kineto's
  ``formatList``) in traces taken on demand.

A rank's ``pg_config`` lists the groups of its own ``pg_map``: the groups it belongs to when the
profiler started. :func:`parse_ranks` reads a rank list in any of its spellings.
"""

from __future__ import annotations

import re
from typing import Any

import polars as pl

from timeline.schema import PROCESS_GROUPS_SCHEMA

__all__ = ["declared_groups", "parse_ranks"]

_INT = re.compile(r"-?\d+")
_INT32_MAX = 2**31 - 1


def parse_ranks(value: Any) -> tuple[list[int], bool] | None:
    """Return the ranks a ``ranks`` value lists, and whether the list was cut short; None if unreadable.

    A JSON list of integers, or a string such as ``"[0, 1, 2]"``, ``"[0, 2, 4, ...]"`` (Kineto cuts
    long lists with ``...``: the ranks before it are known, the rest are not) or ``"0,1"``.

    Examples
    --------
    >>> parse_ranks([0, 2]), parse_ranks("[0, 1, ...]"), parse_ranks("n/a")
    (([0, 2], False), ([0, 1], True), None)
    """
    if isinstance(value, list):
        if all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= _INT32_MAX for v in value):
            return list(value), False
        return None
    if not isinstance(value, str):
        return None
    text = value.strip()
    truncated = "..." in text or "…" in text
    body = text.replace("...", "").replace("…", "").strip().removeprefix("[").removesuffix("]")
    parts = [p.strip() for p in body.split(",") if p.strip()]
    if not all(_INT.fullmatch(p) for p in parts):
        return None
    ranks = [int(p) for p in parts]
    if not all(0 <= r <= _INT32_MAX for r in ranks) or not (ranks or truncated):
        return None
    return ranks, truncated


def _text(value: Any) -> str | None:
    """Return a name, description or backend as text (names are sometimes written as numbers)."""
    if value is None or isinstance(value, (dict, list, bool)):
        return None
    return str(value)


def _size(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.strip().isdecimal():
        value = int(value)
    return value if isinstance(value, int) and 0 < value <= _INT32_MAX else None


def declared_groups(info: Any) -> pl.DataFrame:
    """Return the process groups of ``distributedInfo.pg_config``, one row each (``rank`` null).

    Entries that are not objects, or have no ``pg_name``, are left out; a ``ranks`` value that cannot
    be read gives an empty rank list with ``ranks_truncated`` true (the members are unknown). The
    size is ``pg_size``, else the length of a complete rank list.

    Parameters
    ----------
    info
        The trace's ``distributedInfo`` (anything: a trace without one gives an empty frame).

    Returns
    -------
    pl.DataFrame
        :data:`timeline.schema.PROCESS_GROUPS_SCHEMA`.
    """
    config = info.get("pg_config") if isinstance(info, dict) else None
    rows: list[dict[str, Any]] = []
    for entry in config if isinstance(config, list) else []:
        if not isinstance(entry, dict) or _text(entry.get("pg_name")) is None:
            continue
        raw = entry.get("ranks")
        parsed = parse_ranks(raw)
        ranks, truncated = parsed if parsed is not None else ([], True)
        size = _size(entry.get("pg_size"))
        if size is None and not truncated:
            size = len(ranks) or None
        rows.append(
            {
                "rank": None,
                "pg_name": _text(entry.get("pg_name")),
                "pg_desc": _text(entry.get("pg_desc")),
                "ranks": ranks,
                "ranks_text": raw if isinstance(raw, str) else None,
                "ranks_truncated": truncated,
                "pg_size": size,
                "backend": _text(entry.get("backend_config")),
            }
        )
    return pl.DataFrame(rows, schema=PROCESS_GROUPS_SCHEMA)
