"""How to read inputs: in memory, in parallel, or rank by rank — decided here, once.

Every command and :func:`timeline.analyze` ask these functions, with these thresholds, so a
notebook and the command line read the same inputs the same way (and give the same results either
way: only time and memory differ).

- :func:`reads_rank_by_rank`: whether an analysis reads its inputs rank by rank (one task per rank,
  on local processes or Ray, no process holding every rank) rather than loading them in memory.
- :func:`parses_in_parallel`: whether loading several files in memory parses them in worker processes.

A Kineto trace itself is decoded one way whatever its size (:mod:`timeline.importers.stream`), and
nothing here depends on what the process has imported.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from timeline.errors import UsageError

__all__ = [
    "PARALLEL_MIN_BYTES",
    "PARALLEL_MIN_FILES",
    "STREAM_MIN_BYTES",
    "parses_in_parallel",
    "reads_rank_by_rank",
    "small_input",
    "text_size",
]

PARALLEL_MIN_BYTES = 24 * 1024 * 1024
"""Bytes on disk from which several files are parsed in worker processes (starting one costs about
0.3 s: it imports polars), and from which an analysis of several files goes rank by rank."""
PARALLEL_MIN_FILES = 256
"""Files from which they are parsed in worker processes whatever their size: each costs about 18 ms
of polars queries however small (5,000 one-event traces took 92 s to parse in one process), well
above what starting the workers costs."""
STREAM_MIN_BYTES = 128 * 1024 * 1024
"""Text size from which an analysis of one trace goes rank by rank (keeping only the events the
overlap reads, which holds a smaller frame)."""
# from this compressed size, gzip is taken as at least 16x (traces pack 10-30x)
_GZIP_MIN_RATIO_BYTES = 16 * 1024 * 1024
# deflate expands a byte into at most about 1032 (RFC 1951: 258 bytes per 2-bit code); a trailer
# recording more than that is not the size of this file's text (a file cut short ends in data)
_DEFLATE_MAX_RATIO = 1032


def text_size(path: Path) -> int:
    """Return about how many bytes of text a file holds once decompressed: a hint, not a promise.

    For gzip, the size its trailer records (modulo 4 GiB; ignored beyond deflate's largest ratio,
    1032, as in a file cut short), at least its compressed size, and at least 16 times that
    once it is 16 MiB or more (traces pack 10-30 times; the trailer wraps beyond 4 GiB). The
    trailer of a damaged or hostile file may say anything: it only picks how a file is read, and
    every reader keeps its own limits (:mod:`timeline.importers.files`).

    Raises
    ------
    UsageError
        The file cannot be read (missing, a directory, no permission).
    """
    try:
        size = path.stat().st_size
        with path.open("rb") as probe:
            if probe.read(2) != b"\x1f\x8b":
                return size
            if size < 18:
                return size
            probe.seek(-4, os.SEEK_END)
            recorded = int.from_bytes(probe.read(4), "little")
    except OSError as exc:
        msg = f"{path}: cannot read: {exc.strerror or exc}; check that it exists and is readable"
        raise UsageError(msg) from exc
    if recorded > _DEFLATE_MAX_RATIO * size:
        recorded = 0  # no deflate stream expands that much: a file cut short, its "trailer" is data
    return max(recorded, 16 * size if size >= _GZIP_MIN_RATIO_BYTES else size)


def parses_in_parallel(paths: Sequence[Path], *, workers: int) -> bool:
    """Whether loading ``paths`` in memory parses them in worker processes.

    Only with more than one worker, for several files holding :data:`PARALLEL_MIN_BYTES` or more,
    or for :data:`PARALLEL_MIN_FILES` files or more, however small.
    """
    if workers <= 1 or len(paths) <= 1:
        return False
    if len(paths) >= PARALLEL_MIN_FILES:
        return True
    return sum(p.stat().st_size for p in paths) >= PARALLEL_MIN_BYTES


def reads_rank_by_rank(paths: Sequence[str | Path], *, executor: str | None, ray_address: str | None) -> bool:
    """Whether an analysis reads ``paths`` rank by rank rather than in memory.

    When asked (an executor or a Ray address), for a Parquet dataset partitioned by rank, for
    several files holding :data:`PARALLEL_MIN_BYTES` or more on disk (what loading would parse in
    parallel anyway), and for a single trace of :data:`STREAM_MIN_BYTES` of JSON or more (keeping
    only the events the overlap reads). The results are the same either way.
    """
    from timeline.inputs import expand_paths, is_dataset, is_pattern

    if executor is not None or ray_address is not None:
        return True
    if any(is_dataset(p) for p in paths if not is_pattern(p)):
        return True
    try:
        files = expand_paths(paths)
    except UsageError:
        return False  # the in-memory path reports it
    if len(files) == 1:
        return files[0].suffix != ".parquet" and text_size(files[0]) >= STREAM_MIN_BYTES
    return sum(f.stat().st_size for f in files) >= PARALLEL_MIN_BYTES


def small_input(paths: Sequence[Path]) -> bool:
    """Whether files are too small for worker processes to pay (less than :data:`PARALLEL_MIN_BYTES`)."""
    return sum(p.stat().st_size for p in paths) < PARALLEL_MIN_BYTES
