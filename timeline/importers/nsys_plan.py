"""How many ranks an Nsight Systems export holds, without polars: what a rank-by-rank plan splits on.

Takes a path and gives the number of (process, CUDA device) pairs that ran kernels, counted by
SQLite itself (``sqlite3``, read-only and immutable), or None for a file that is not such an export
(its reader says why). :func:`timeline.inputs.plan_units` makes one unit of work per rank of an
export, so that no task holds every rank of a large file (:attr:`ImportOptions.held_keys
<timeline.importers.result.ImportOptions.held_keys>`).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from urllib.parse import quote

from timeline.importers.files import SQLITE_MAGIC

__all__ = ["nsys_rank_count"]


def nsys_rank_count(path: Path) -> int | None:
    """Return how many ranks (processes and devices that ran kernels) an export holds; None if not one."""
    try:
        with path.open("rb") as head:
            if head.read(len(SQLITE_MAGIC)) != SQLITE_MAGIC:
                return None
        conn = sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro&immutable=1", uri=True)
    except (OSError, sqlite3.Error):
        return None
    try:
        found = conn.execute(
            "SELECT count(*) FROM (SELECT DISTINCT globalPid, deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL)"
        ).fetchone()
    except sqlite3.Error:
        return None
    finally:
        conn.close()
    return int(found[0]) if found and isinstance(found[0], int) else None
