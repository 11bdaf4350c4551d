"""A loaded trace: the canonical events frame of every rank, and where each rank came from.

:func:`load` takes files, directories or glob patterns (Kineto JSON, Horovod JSON, gzipped or not,
or Parquet from ``timeline convert``), parses them (in parallel over all cores when that pays, as
:mod:`timeline.policy` decides), resolves each file's rank (:mod:`timeline.inputs`:
``distributedInfo.rank``, else the file name; the only input file naming none is rank 0, with a
warning; among several files, an error), leaves out the events no analysis should read (times and
durations the trace cannot hold, step spans counted twice: :mod:`timeline.plausibility`, each with a
counted warning), checks the ranks against the world size, says when the ranks' clocks disagree,
and gives a :class:`Trace`. Parsing is the importers' (:func:`timeline.importers.parse.parse_file`);
worker processes are :class:`timeline.executors.LocalExecutor`'s.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import polars as pl

from timeline import arguments, policy
from timeline.errors import TraceContentError
from timeline.importers.result import FileResult, ImportOptions
from timeline.importers.rules import ClassificationRules
from timeline.inputs import (
    PathsLike,
    capture_windows,
    check_world,
    claim_rank,
    expand_inputs,
    resolve_held_ranks,
    resolve_rank,
    several_timelines_error,
)
from timeline.paths import path_text
from timeline.plausibility import CLOCKS_SCHEMA, check_events, clock_note, clock_rows
from timeline.schema import FILES_SCHEMA, PROCESS_GROUPS_SCHEMA

if TYPE_CHECKING:
    from timeline.importers.cache import Cache

__all__ = ["Progress", "Trace", "check_part_files", "load", "load_part", "world_size_of_files"]

Progress = Callable[[str, int, int], None]
"""Called as ``progress(label, done, total)`` after each file is parsed."""


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
    clocks
        Per file, rank and source: its clock and first and last event start
        (:data:`timeline.plausibility.CLOCKS_SCHEMA`).
    clock_note
        Why the ranks' times cannot be compared (:func:`timeline.plausibility.clock_note`: clocks
        with different origins, or more than an hour apart), else None. Also one of ``warnings``.
        The analyses that compare ranks' times leave those figures out while it is set.
    groups
        The process groups each rank's trace declares (``distributedInfo.pg_config``), one row per
        rank and group: :data:`timeline.schema.PROCESS_GROUPS_SCHEMA`, sorted by rank. The group
        model (:mod:`timeline.analysis.groups`) reads it with the events.
    """

    events: pl.DataFrame
    files: pl.DataFrame
    warnings: tuple[str, ...] = field(default=())
    clocks: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=CLOCKS_SCHEMA))
    clock_note: str | None = None
    groups: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=PROCESS_GROUPS_SCHEMA))

    @property
    def ranks(self) -> list[int]:
        """The ranks present, sorted."""
        return sorted(self.files.get_column("rank").unique().drop_nulls().to_list())

    def write_parquet(self, path: str | Path) -> None:
        """Write the events as Parquet, with the file table, warnings and content digest in its metadata.

        Every command reads such a file back as a trace, and refuses it if its content no longer
        matches the digest (``timeline convert``). Writes to ``path`` as given: ``timeline convert``
        writes with :func:`timeline.execution.dataset.write_parquet_file`, which never replaces what
        timeline did not write.
        """
        from timeline.importers.parquet import write_parquet

        write_parquet(path, events=self.events, files=self.files, warnings=self.warnings, groups=self.groups)


def world_size_of_files(files: pl.DataFrame) -> int | None:
    """Return the job's world size a file table (``Trace.files``) records for the profiler traces, or None.

    The largest ``distributedInfo.world_size`` of the files that are not Horovod timelines (a
    timeline's writer stands for all its ranks): the one definition every fact of a run reads.
    """
    sizes = files.filter(pl.col("format") != "horovod").get_column("world_size").drop_nulls()
    return None if sizes.is_empty() else int(sizes.max())  # type: ignore[arg-type]


def _parse_all(
    paths: list[Path], options: ImportOptions, workers: int, progress: Progress | None
) -> list[FileResult]:
    """Parse files, in parallel worker processes when :func:`timeline.policy.parses_in_parallel`."""
    from timeline.importers.parse import parse_file, parse_one

    total = len(paths)
    if not policy.parses_in_parallel(paths, workers=workers):
        out = []
        alone = total == 1  # a single file has every worker
        for i, p in enumerate(paths, 1):
            out.append(parse_file(p, options, workers=workers if alone else 1))
            if progress:
                progress(p.name, i, total)
        return out
    from timeline.executors import LocalExecutor, named_progress

    executor = LocalExecutor(min(workers, total))
    report = named_progress(progress, [p.name for p in paths])
    return list(executor.map(parse_one, [(p, options) for p in paths], progress=report))


def load(
    paths: PathsLike,
    *,
    rank: int | None = None,
    rank_regex: str | None = None,
    rules: ClassificationRules | None = None,
    include_python: bool = False,
    workers: int | None = None,
    progress: Progress | None = None,
    overlap_only: bool = False,
    iteration_range: str | None = None,
    cache: bool | str | Path | Cache | None = None,
) -> Trace:
    """Load traces of one run into a :class:`Trace`, every event in memory.

    For a run too large to hold, :func:`timeline.analyze` reads rank by rank when that pays.

    Parameters
    ----------
    paths
        Files, directories or glob patterns: Kineto JSON, Horovod JSON (gzipped or not, recognised by
        content), or Parquet from ``timeline convert`` (a file, or a dataset directory partitioned by
        rank).
    rank
        The rank of a single file that names none (no ``distributedInfo``, no rank in its name);
        without it such a file is rank 0, with a warning.
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
    iteration_range
        A regex searched in the names of Nsight Systems exports' NVTX ranges: the ranges it matches
        are the iterations (``--iteration-range``; :mod:`timeline.importers.nsys_ranges`).
    cache
        Read each trace file's frame from the cache, and write it there after its first read
        (:mod:`timeline.importers.cache`): True the default folder, a path another, a
        :class:`~timeline.importers.cache.Cache`; None or False (the default): no cache. The same
        result either way. A folder that cannot be written gives a
        :class:`~timeline.importers.cache.CacheWarning`.

    Returns
    -------
    Trace

    Raises
    ------
    TypeError
        An argument of the wrong type, named (``load(b"run/")``: bytes are not a path).
    TimelineError
        Bad input: a missing file, unreadable or unknown content, a file with no rank among several,
        two files claiming one rank, a rank outside the world size, files that disagree on the world
        size, a trace with no events.
    """
    from timeline.importers.cache import resolve_cache

    checked = arguments.check_paths(paths)
    rank = arguments.check_rank(rank)
    arguments.check_optional_text(rank_regex, argument="rank_regex")
    if rules is not None:
        fix = "pass timeline.ClassificationRules(...) or leave it out"
        arguments.check_instance(rules, ClassificationRules, argument="rules", fix=fix)
    arguments.check_flag(include_python, argument="include_python")
    arguments.check_optional_int(workers, argument="workers")
    arguments.check_optional_text(iteration_range, argument="iteration_range")
    path_list = expand_inputs(checked, rank=rank)
    options = ImportOptions(
        rules=rules or ClassificationRules(),
        include_python=include_python,
        overlap_only=overlap_only,
        iteration_range=iteration_range,
        cache=resolve_cache(cache),
    )
    parsed = _parse_all(path_list, options, workers or os.cpu_count() or 1, progress)
    return _combine(parsed, path_list, rank=rank, rank_regex=rank_regex, only_file=len(path_list) == 1)


def load_part(
    paths: Sequence[Path],
    *,
    options: ImportOptions,
    rank: int | None = None,
    rank_regex: str | None = None,
    workers: int = 1,
    only_file: bool = False,
) -> Trace:
    """Load some files of a run (a unit of work of a rank-by-rank analysis), as :func:`load` would.

    Ranks are resolved and the events checked file by file as :func:`load` does; the checks across
    the run's files (world sizes, clocks: :func:`check_part_files`) are the caller's, once every
    part is loaded. ``only_file``: these are the only files of the inputs (a file naming no rank is
    then rank 0).

    Raises
    ------
    TimelineError
        Bad input, as :func:`load` raises it.
    """
    path_list = expand_inputs(list(paths), rank=rank)
    parsed = _parse_all(path_list, options, workers, None)
    return _combine(parsed, path_list, rank=rank, rank_regex=rank_regex, only_file=only_file, part=True)


def check_part_files(files: pl.DataFrame, clocks: pl.DataFrame) -> str | None:
    """Check the files of a whole run, loaded in parts; return the clock warning, if any.

    What :func:`load` checks across files: ranks within the world size, one world size
    (:func:`timeline.inputs.check_world`), clocks that agree
    (:func:`timeline.plausibility.clock_note`).

    Raises
    ------
    RankError
        A rank outside the world, world sizes that disagree.
    """
    check_world(files)
    return clock_note(clocks)


def _combine(
    parsed: Sequence[FileResult],
    path_list: list[Path],
    *,
    rank: int | None,
    rank_regex: str | None,
    only_file: bool,
    part: bool = False,
) -> Trace:
    """Combine the parsed files into one trace: ranks resolved and claimed, events checked and sorted.

    ``part``: the files are part of a run (:func:`load_part`): the checks across the run's files are
    left to the caller.
    """
    horovod_files = [p for r, p in zip(parsed, path_list, strict=True) if r.format == "horovod"]
    if len(horovod_files) > 1:
        raise several_timelines_error(horovod_files)
    warnings: list[str] = []
    owner: dict[int, Path] = {}
    # Files a capture manifest lists as successive windows of one rank may share that rank.
    windows = capture_windows(path_list)
    parts: list[_Part] = []
    for result, path in zip(parsed, path_list, strict=True):
        warnings.extend(result.warnings)
        parts.append(
            _file_part(
                result,
                path,
                rank=rank,
                rank_regex=rank_regex,
                only_file=only_file,
                claims=(owner, windows),
                warnings=warnings,
            )
        )
    frames = [piece.events for piece in parts]
    events = pl.concat(frames, how="vertical") if len(frames) > 1 else frames[0]
    # one rank (a rank's task): ordered by time alone, which is cheaper than by two keys
    keys = ["start_ns"] if events.get_column("rank").n_unique() == 1 else ["rank", "start_ns"]
    events = events.sort(keys, maintain_order=True)
    file_rows = [row for piece in parts for row in piece.rows]
    files = pl.DataFrame(file_rows, schema=FILES_SCHEMA) if file_rows else pl.DataFrame(schema=FILES_SCHEMA)
    spans = pl.concat([piece.clocks for piece in parts], how="vertical")
    note = None if part else check_part_files(files, spans)
    if note is not None:
        warnings.append(note)
    groups = [piece.groups for piece in parts if piece.groups is not None]
    declared = (
        pl.concat(groups, how="vertical").sort("rank", maintain_order=True)
        if groups
        else pl.DataFrame(schema=PROCESS_GROUPS_SCHEMA)
    )
    return Trace(
        events=events, files=files, warnings=tuple(warnings), clocks=spans, clock_note=note, groups=declared
    )


class _Part(NamedTuple):
    """One file's share of a trace: its events (checked), files rows, clock spans and groups."""

    events: pl.DataFrame
    rows: list[dict[str, object]]
    clocks: pl.DataFrame
    groups: pl.DataFrame | None


def _file_part(
    result: FileResult,
    path: Path,
    *,
    rank: int | None,
    rank_regex: str | None,
    only_file: bool,
    claims: tuple[dict[int, Path], dict[Path, int]],
    warnings: list[str],
) -> _Part:
    """Return a parsed file's share of the trace, its ranks claimed, its events checked.

    ``claims``: the file that claimed each rank so far, and the capture windows that may share one.
    """
    owner, windows = claims
    if result.format == "parquet":
        stored = result.stored_files or []
        for row in stored:
            r = row.get("rank")
            if isinstance(r, int) and row.get("format") != "horovod":
                claim_rank(owner, r, path, windows)
        events, found = check_events(result.events, source=path_text(path))
        warnings.extend(found)
        on: dict[tuple[int, str], str] = {
            (row["rank"], str(row["format"])): row["clock"]
            for row in stored
            if isinstance(row.get("rank"), int) and isinstance(row.get("clock"), str)
        }
        return _Part(events, list(stored), clock_rows(events, path=path_text(path), clock=on), result.groups)
    if result.held_ranks is not None:
        held_events, rows, held_groups = _held_file(
            result, path, rank=rank, rank_regex=rank_regex, warnings=warnings, only_file=only_file
        )
        for row in rows:
            claim_rank(owner, int(str(row["rank"])), path, windows)
        held_events, found = check_events(held_events, source=str(path))
        warnings.extend(found)
        return _Part(
            held_events, rows, clock_rows(held_events, path=str(path), clock=result.clock), held_groups
        )
    file_rank, events, row = _rank_file(
        result, path, rank=rank, rank_regex=rank_regex, warnings=warnings, only_file=only_file
    )
    if result.claims_rank:
        claim_rank(owner, file_rank, path, windows)
    events, found = check_events(events, source=path_text(path))
    warnings.extend(found)
    groups = (
        None if result.groups is None else result.groups.with_columns(rank=pl.lit(file_rank, dtype=pl.Int32))
    )
    return _Part(events, [row], clock_rows(events, path=path_text(path), clock=result.clock), groups)


def _rank_file(
    result: FileResult,
    path: Path,
    *,
    rank: int | None,
    rank_regex: str | None,
    warnings: list[str],
    only_file: bool,
) -> tuple[int, pl.DataFrame, dict[str, object]]:
    """Return one parsed trace file's rank, its events with the rank filled in, and its file-table row.

    Raises
    ------
    TraceContentError
        A file with no events.
    RankError
        A file whose rank nothing states.
    """
    if result.events.height == 0:
        what = "traceEvents holds no events" if result.format == "kineto" else "the timeline holds no records"
        msg = f"{path}: {what}; nothing to analyse (was the profiler's active window reached?)"
        raise TraceContentError(msg)
    file_rank, rank_from = resolve_rank(
        result, path, rank=rank, rank_regex=rank_regex, warnings=warnings, only_file=only_file
    )
    events = result.events.with_columns(pl.col("rank").fill_null(file_rank))
    row: dict[str, object] = {
        "rank": file_rank,
        "path": path_text(path),
        "format": result.format,
        "rank_from": rank_from,
        "world_size": result.world_size,
        "backend": result.backend,
        "host": result.host,
        "clock": result.clock,
        "events": events.height + result.skipped,
    }
    return file_rank, events, row


def _held_file(
    result: FileResult,
    path: Path,
    *,
    rank: int | None,
    rank_regex: str | None,
    warnings: list[str],
    only_file: bool,
) -> tuple[pl.DataFrame, list[dict[str, object]], pl.DataFrame]:
    """Return the events, file-table rows and process groups of a file holding several ranks, ranks resolved.

    An Nsight Systems export: its events' ``rank`` column holds each rank's key until
    :func:`timeline.inputs.resolve_held_ranks` names the ranks; one file-table row per rank.
    """
    resolved = resolve_held_ranks(
        result, path, rank=rank, rank_regex=rank_regex, warnings=warnings, only_file=only_file
    )
    ranks = {key: r for key, (r, _) in resolved.items()}
    events = result.events.with_columns(pl.col("rank").replace_strict(ranks, return_dtype=pl.Int32))
    rows: list[dict[str, object]] = [
        {
            "rank": ranks[h.key],
            "path": str(path),
            "format": result.format,
            "rank_from": resolved[h.key][1],
            "world_size": h.world_size if h.world_size is not None else result.world_size,
            "backend": result.backend,
            "host": h.host,
            "clock": result.clock,
            "events": h.events,
        }
        for h in sorted(result.held_ranks or [], key=lambda h: ranks[h.key])
        if h.loaded  # a rank-by-rank task's part of the file: its ranks only
    ]
    groups = result.groups if result.groups is not None else pl.DataFrame(schema=PROCESS_GROUPS_SCHEMA)
    loaded = [h.key for h in result.held_ranks or [] if h.loaded]
    groups = (
        groups.filter(pl.col("rank").is_in(loaded))
        .with_columns(
            pl.col("rank").replace_strict(ranks, return_dtype=pl.Int32),
            pl.col("ranks").list.eval(pl.element().replace_strict(ranks, return_dtype=pl.Int32)),
        )
        .sort("rank", maintain_order=True)
    )
    return events, rows, groups
