"""A loaded trace: the canonical events frame of every rank, and where each rank came from.

:func:`load` takes files, directories or glob patterns (Kineto JSON, Horovod JSON, gzipped or not,
or Parquet from ``timeline convert``), parses them in parallel over all cores, resolves each file's
rank (``distributedInfo.rank``, else the file name, else an error: never a silent rank 0), and gives
a :class:`Trace`.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import polars as pl

from timeline.errors import RankError, TraceContentError, TraceFormatError
from timeline.importers.files import (
    expand_paths,
    manifest_windows,
    rank_from_name,
    read_trace_bytes,
    sniff_format,
)
from timeline.importers.result import FileResult, ImportOptions
from timeline.importers.rules import ClassificationRules
from timeline.schema import EVENTS_SCHEMA, FILES_SCHEMA, validate

__all__ = ["STREAM_MIN_BYTES", "Progress", "Trace", "claim_rank", "load", "parse_file", "text_size"]

Progress = Callable[[str, int, int], None]
"""Called as ``progress(label, done, total)`` after each file is parsed."""

_PARQUET_KEY = "timeline.files"
_PARALLEL_MIN_BYTES = 24 * 1024 * 1024
STREAM_MIN_BYTES = 128 * 1024 * 1024
"""Text size from which a Kineto trace is decoded in parallel worker processes."""
_STREAM_SERIAL_MIN_BYTES = 16 * 1024 * 1024  # decoded in chunks in this process
_STREAM_MIN_GZIP_BYTES = 16 * 1024 * 1024  # gzip packs traces 10-30x
_PARQUET_WARNINGS = "timeline.warnings"


@dataclass(frozen=True)
class Trace:
    """The events of every rank of a run, and the files they came from.

    Attributes
    ----------
    events
        One row per event, :data:`timeline.schema.EVENTS_SCHEMA`, sorted by rank and start.
    files
        One row per file, :data:`timeline.schema.FILES_SCHEMA`.
    warnings
        Recoverable oddities met while loading, each counted once.
    """

    events: pl.DataFrame
    files: pl.DataFrame
    warnings: tuple[str, ...] = field(default=())

    @property
    def ranks(self) -> list[int]:
        """The ranks present, sorted."""
        return sorted(self.files.get_column("rank").unique().drop_nulls().to_list())

    def write_parquet(self, path: str | Path) -> None:
        """Write the events as Parquet, with the file table and warnings in the file's metadata.

        Every command reads such a file back as a trace (``timeline convert``).
        """
        files_json = msgspec.json.encode(self.files.to_dicts()).decode()
        warnings_json = msgspec.json.encode(list(self.warnings)).decode()
        self.events.write_parquet(
            path, compression="zstd", metadata={_PARQUET_KEY: files_json, _PARQUET_WARNINGS: warnings_json}
        )


def parse_file(path: Path, options: ImportOptions, *, workers: int = 1) -> tuple[FileResult, Path]:
    """Read and parse one file of any supported format (runs in a worker process).

    ``workers``: processes that may decode a large trace's chunks in parallel.

    Raises
    ------
    TimelineError
        Bad input, with the file and position in the message.
    """
    warnings: list[str] = []
    source = str(path)
    size = text_size(path)
    if size >= _STREAM_SERIAL_MIN_BYTES:
        # Large traces: decompress and decode in chunks, never holding the whole text in memory
        # (faster too: the polars work of a chunk overlaps the decoding of the next one).
        from timeline.importers.stream import parse_kineto_stream, read_head

        if read_head(path).lstrip(b"\xef\xbb\xbf \t\r\n")[:1] == b"{":  # Kineto: a JSON object
            parallel = workers if size >= STREAM_MIN_BYTES else 1
            try:
                # workers == 1: every core runs a file's parse (or a rank's task); no spare core
                result = parse_kineto_stream(
                    path, source=source, options=options, workers=parallel, spare_core=workers > 1
                )
                return result, path
            except TraceFormatError:
                if size >= STREAM_MIN_BYTES:
                    raise
                # damaged JSON small enough to hold: the whole-file reader repairs what is safe
    data = read_trace_bytes(path, warnings)
    fmt = sniff_format(data, source)
    if fmt == "parquet":
        result = _read_parquet(path)
    elif fmt == "kineto":
        from timeline.importers.kineto import parse_kineto

        result = parse_kineto(data, source=source, options=options)
    else:
        from timeline.importers.horovod import parse_horovod

        result = parse_horovod(data, source=source, options=options)
    result.warnings[:0] = warnings
    return result, path


def text_size(path: Path) -> int:
    """Return about how many bytes of text a file holds once decompressed.

    For gzip, the size its trailer records (modulo 4 GiB), at least 16 times the compressed size
    once that is 16 MiB or more (traces pack 10-30 times; the trailer wraps beyond 4 GiB).
    """
    size = path.stat().st_size
    with path.open("rb") as probe:
        if probe.read(2) != b"\x1f\x8b":
            return size
        if size < 18:
            return size
        probe.seek(-4, os.SEEK_END)
        recorded = int.from_bytes(probe.read(4), "little")
    return max(recorded, 16 * size if size >= _STREAM_MIN_GZIP_BYTES else 0)


def _read_parquet(path: Path) -> FileResult:
    """Read a Parquet file written by :meth:`Trace.write_parquet`."""
    source = str(path)
    try:
        metadata = pl.read_parquet_metadata(path)
        events = pl.read_parquet(path)
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise TraceFormatError(f"{source}: unreadable Parquet file ({exc})") from exc
    if _PARQUET_KEY not in metadata:
        msg = f"{source}: a Parquet file not written by timeline convert; convert the original traces with it"
        raise TraceFormatError(msg)
    missing = [c for c in EVENTS_SCHEMA.names() if c not in events.columns]
    if missing:
        msg = f"{source}: Parquet file lacks columns {missing}; re-run timeline convert with this version"
        raise TraceFormatError(msg)
    files = msgspec.json.decode(metadata[_PARQUET_KEY])
    warnings = msgspec.json.decode(metadata.get(_PARQUET_WARNINGS, "[]"))
    return FileResult(
        events=validate(events, EVENTS_SCHEMA, what=source),
        format="parquet",
        claims_rank=False,
        warnings=[str(w) for w in warnings],
        stored_files=[dict(row) for row in files],
    )


def _can_spawn() -> bool:
    """Whether worker processes can be spawned: not when ``__main__`` is a file that does not exist.

    A script piped to ``python -`` has ``__main__.__file__ == "<stdin>"``, which spawned workers
    would try to re-import: parse serially there instead.
    """
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    return main_file is None or Path(main_file).exists()


def _parse_all(
    paths: list[Path], options: ImportOptions, workers: int, progress: Progress | None
) -> list[tuple[FileResult, Path]]:
    """Parse files, in parallel worker processes when there are several."""
    total = len(paths)
    size = sum(p.stat().st_size for p in paths)
    # Starting a worker costs ~0.3 s (it imports polars): not worth it for small inputs.
    if workers <= 1 or total == 1 or size < _PARALLEL_MIN_BYTES or not _can_spawn():
        out = []
        for i, p in enumerate(paths, 1):
            out.append(parse_file(p, options, workers=workers if total == 1 else 1))
            if progress:
                progress(p.name, i, total)
        return out
    # spawn, not fork: forking a process whose polars thread pool is running can deadlock.
    context = multiprocessing.get_context("spawn")
    results: dict[Path, tuple[FileResult, Path]] = {}
    with ProcessPoolExecutor(max_workers=min(workers, total), mp_context=context) as pool:
        futures: dict[Future[tuple[FileResult, Path]], Path] = {
            pool.submit(parse_file, p, options): p for p in paths
        }
        for done, future in enumerate(as_completed(futures), 1):
            result = future.result()
            results[futures[future]] = result
            if progress:
                progress(futures[future].name, done, total)
    return [results[p] for p in paths]


def load(
    paths: Sequence[str | Path] | str | Path,
    *,
    rank: int | None = None,
    rank_regex: str | None = None,
    rules: ClassificationRules | None = None,
    include_python: bool = False,
    workers: int | None = None,
    progress: Progress | None = None,
    overlap_only: bool = False,
) -> Trace:
    """Load traces of one run into a :class:`Trace`.

    Parameters
    ----------
    paths
        Files, directories or glob patterns: Kineto JSON, Horovod JSON (gzipped or not, recognised by
        content), or Parquet from ``timeline convert`` (a file, or a dataset directory partitioned by
        rank).
    rank
        The rank of a single file that names none (no ``distributedInfo``, no rank in its name).
    rank_regex
        A regex with one group of digits that finds the rank in file names, used when a file's
        ``distributedInfo`` has no rank.
    rules
        Event classification rules (defaults: NCCL/RCCL/HCCL kernels, gloo ops).
    include_python
        Keep ``python_function`` events.
    workers
        Processes to parse files with; default: all cores.
    progress
        Called after each file.
    overlap_only
        Keep only the events the overlap analysis reads (``ImportOptions.overlap_only``): the
        overlap is the same, the events frame smaller; the file table counts every event.

    Returns
    -------
    Trace

    Raises
    ------
    TimelineError
        Bad input: a missing file, unreadable or unknown content, a file with no rank, two files
        claiming one rank, a trace with no events.
    """
    from timeline.execution.dataset import expand_datasets  # a dataset directory: its part files

    path_list = expand_paths(expand_datasets([paths] if isinstance(paths, (str, Path)) else list(paths)))
    if rank is not None and len(path_list) != 1:
        raise RankError(f"--rank applies to a single file; {len(path_list)} files given (use --rank-regex)")
    options = ImportOptions(
        rules=rules or ClassificationRules(), include_python=include_python, overlap_only=overlap_only
    )
    parsed = _parse_all(path_list, options, workers or os.cpu_count() or 1, progress)

    frames: list[pl.DataFrame] = []
    file_rows: list[dict[str, object]] = []
    warnings: list[str] = []
    owner: dict[int, Path] = {}
    # Files a capture manifest lists as successive windows of one rank may share that rank.
    windows: dict[Path, int] = {}
    for directory in {p.parent for p in path_list}:
        windows.update(manifest_windows(directory))
    horovod_files = [p for r, p in parsed if r.format == "horovod"]
    if len(horovod_files) > 1:
        names = ", ".join(str(p) for p in horovod_files[:3])
        msg = (
            f"{names}: several Horovod timelines given; a run has one (written by rank 0): "
            "analyse one run at a time"
        )
        raise RankError(msg)
    for result, path in parsed:
        warnings.extend(result.warnings)
        if result.format == "parquet":
            stored = result.stored_files or []
            for row in stored:
                r = row.get("rank")
                if isinstance(r, int) and row.get("format") != "horovod":
                    claim_rank(owner, r, path, windows)
            file_rows.extend(stored)
            frames.append(result.events)
            continue
        if result.events.height == 0:
            what = (
                "traceEvents holds no events"
                if result.format == "kineto"
                else "the timeline holds no records"
            )
            msg = f"{path}: {what}; nothing to analyse (was the profiler's active window reached?)"
            raise TraceContentError(msg)
        file_rank, rank_from = _resolve_rank(
            result, path, rank=rank, rank_regex=rank_regex, warnings=warnings
        )
        if result.claims_rank:
            claim_rank(owner, file_rank, path, windows)
        events = result.events.with_columns(pl.col("rank").fill_null(file_rank))
        frames.append(events)
        file_rows.append(
            {
                "rank": file_rank,
                "path": str(path),
                "format": result.format,
                "rank_from": rank_from,
                "world_size": result.world_size,
                "backend": result.backend,
                "host": result.host,
                "clock": result.clock,
                "events": events.height + result.skipped,
            }
        )
    events = pl.concat(frames, how="vertical") if len(frames) > 1 else frames[0]
    # one rank (a rank's task): ordered by time alone, which is cheaper than by two keys
    keys = ["start_ns"] if events.get_column("rank").n_unique() == 1 else ["rank", "start_ns"]
    events = events.sort(keys, maintain_order=True)
    files = pl.DataFrame(file_rows, schema=FILES_SCHEMA) if file_rows else pl.DataFrame(schema=FILES_SCHEMA)
    return Trace(events=events, files=files, warnings=tuple(warnings))


def claim_rank(owner: dict[int, Path], rank: int, path: Path, windows: dict[Path, int]) -> None:
    """Record that ``path`` holds ``rank``; two files claiming one rank is an error.

    Unless a capture manifest lists both as windows of that rank (``repeat > 1``).
    """
    other = owner.get(rank)
    if other is not None and windows.get(other) == rank and windows.get(path) == rank:
        return
    if rank in owner and owner[rank] != path:
        msg = (
            f"{path}: rank {rank} is also claimed by {owner[rank]}; "
            "pass the traces of one run only, or fix the ranks with --rank-regex"
        )
        raise RankError(msg)
    owner[rank] = path


def _resolve_rank(
    result: FileResult, path: Path, *, rank: int | None, rank_regex: str | None, warnings: list[str]
) -> tuple[int, str]:
    """Return the rank of a file and where it came from."""
    if not result.claims_rank:
        # A Horovod timeline is written by rank 0 and covers every worker.
        return 0, "horovod writer (rank 0)"
    if rank is not None:
        return rank, "--rank"
    named = rank_from_name(path, rank_regex)
    if result.rank is not None:
        if named is not None and named != result.rank:
            warnings.append(
                f"{path}: file name says rank {named} but distributedInfo.rank is {result.rank}; "
                f"used {result.rank}"
            )
        return result.rank, "distributedInfo"
    if named is not None:
        return named, "--rank-regex" if rank_regex else "file name"
    msg = (
        f"{path}: no rank: the trace has no distributedInfo.rank and the file name has none; "
        "name files rank<N>.json, pass --rank-regex, or --rank N for a single file"
    )
    raise RankError(msg)
