"""Writing the run manifest: ``manifest.json`` next to the traces of one captured run.

Takes what one rank knows about itself (host, files written) and the run's settings; gives a
small JSON file that lists every rank and every trace file. Ranks do not talk to each other to
write it: each rank merges its own entry into the file under an exclusive lock on the run
folder (``flock``), so a rank that crashes never blocks the others. Entries of ranks outside
the current world size are dropped on merge.

The layout, its types (:class:`Manifest`, :class:`RankEntry`, …) and the one reader
(:func:`read_manifest`) are in :mod:`timeline.importers.manifest`, which the analysis side reads
without importing capture; they are re-exported here.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import msgspec

from timeline.importers.manifest import (
    MANIFEST_FORMAT,
    MANIFEST_NAME,
    Manifest,
    RankEntry,
    Schedule,
    Versions,
    read_manifest,
)

__all__ = [
    "MANIFEST_FORMAT",
    "MANIFEST_NAME",
    "Manifest",
    "RankEntry",
    "Schedule",
    "Versions",
    "merge_rank_entry",
    "read_manifest",
    "trace_file_name",
    "write_rank_entry",
]


def trace_file_name(rank: int, first_step: int, last_step: int) -> str:
    """Return the name of a trace file: ``rank<N>.<first>-<last>.pt.trace.json.gz``.

    Parameters
    ----------
    rank
        Global rank.
    first_step, last_step
        The ``ProfilerStep#`` numbers of the first and last recorded step.

    Returns
    -------
    str
        The file name.

    Examples
    --------
    >>> trace_file_name(3, 2, 4)
    'rank3.2-4.pt.trace.json.gz'
    """
    return f"rank{rank}.{first_step}-{last_step}.pt.trace.json.gz"


def merge_rank_entry(existing: Manifest | None, run: Manifest, entry: RankEntry) -> Manifest:
    """Return ``run`` with ``entry`` and the other ranks' entries of ``existing`` merged in.

    The run-level fields come from ``run`` (the writer's view); entries of ``existing`` for other
    ranks below ``run.world_size`` are kept; ``files`` lists every rank's files, by rank.

    Parameters
    ----------
    existing
        The manifest on disk, if any.
    run
        The run-level fields as the writing rank sees them (its ``ranks`` and ``files`` are ignored).
    entry
        The writing rank's own entry.

    Returns
    -------
    Manifest
        The merged manifest.
    """
    by_rank: dict[int, RankEntry] = {}
    if existing is not None:
        by_rank.update((e.rank, e) for e in existing.ranks if 0 <= e.rank < run.world_size)
    by_rank[entry.rank] = entry
    ranks = [by_rank[r] for r in sorted(by_rank)]
    files = [name for e in ranks for name in e.files]
    return msgspec.structs.replace(run, ranks=ranks, files=files)


def write_rank_entry(run_dir: Path, run: Manifest, entry: RankEntry) -> Manifest:
    """Merge ``entry`` into ``run_dir/manifest.json`` under a lock and write it atomically.

    Parameters
    ----------
    run_dir
        The run folder; it must exist.
    run
        The run-level fields (see :func:`merge_rank_entry`).
    entry
        The writing rank's entry.

    Returns
    -------
    Manifest
        What was written.
    """
    path = run_dir / MANIFEST_NAME
    with _locked(run_dir):
        merged = merge_rank_entry(read_manifest(path), run, entry)
        data = msgspec.json.format(msgspec.json.encode(merged), indent=2) + b"\n"
        partial = run_dir / f".{MANIFEST_NAME}.{entry.rank}.partial"
        partial.write_bytes(data)
        partial.replace(path)
    return merged


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``folder`` (no lock file needed; a no-op off POSIX)."""
    if sys.platform == "win32":  # pragma: no cover - no flock; ranks of one run rarely share Windows
        yield
        return
    import fcntl  # POSIX only

    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
