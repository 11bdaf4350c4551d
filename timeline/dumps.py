"""The Flight Recorder dumps of a job: every rank's entries, group progress and groups, in frames.

:func:`load_dumps` takes files, directories or glob patterns (:mod:`timeline.inputs`), reads each
dump (:func:`timeline.importers.flight_recorder.parse_flight_recorder`: pickle with every class
refused, or JSON; gzip recognised), gives each the rank its file name states (torch's writer names a
dump ``<prefix><rank>`` and writes no rank inside it: :func:`timeline.inputs.rank_from_dump_name`),
refuses two dumps of one rank, and gives :class:`Dumps`. The analysis of what they show is
:mod:`timeline.analysis.flight_recorder`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from timeline import arguments, policy
from timeline.errors import RankError, UsageError
from timeline.importers.files import read_trace_bytes
from timeline.importers.flight_recorder import (
    FLIGHT_ENTRIES_SCHEMA,
    FLIGHT_GROUPS_SCHEMA,
    FLIGHT_STATUS_SCHEMA,
    MAX_DUMP_BYTES,
    DumpResult,
    parse_flight_recorder,
)
from timeline.inputs import PathsLike, claim_rank, expand_inputs, rank_from_dump_name, split_dumps
from timeline.paths import path_text

__all__ = ["DUMP_FILES_SCHEMA", "Dumps", "load_dumps", "read_dump"]

DUMP_FILES_SCHEMA = pl.Schema(
    {
        "rank": pl.Int32(),
        "path": pl.String(),
        "rank_from": pl.String(),
        "encoding": pl.String(),
        "version": pl.String(),
        "comm_lib_version": pl.String(),
        "entries": pl.Int64(),
    }
)
"""One row per dump: its rank and where the rank came from, pickle or JSON, its version, the
communication library's version, and how many entries it holds."""


@dataclass(frozen=True)
class Dumps:
    """The Flight Recorder dumps of one job.

    Attributes
    ----------
    entries, status, groups
        Every rank's rows of :data:`~timeline.importers.flight_recorder.FLIGHT_ENTRIES_SCHEMA`,
        :data:`~timeline.importers.flight_recorder.FLIGHT_STATUS_SCHEMA` and
        :data:`~timeline.importers.flight_recorder.FLIGHT_GROUPS_SCHEMA`, ``rank`` filled in.
    files
        One row per dump (:data:`DUMP_FILES_SCHEMA`).
    warnings
        Recoverable oddities, each counted once.
    """

    entries: pl.DataFrame
    status: pl.DataFrame
    groups: pl.DataFrame
    files: pl.DataFrame
    warnings: tuple[str, ...] = field(default=())

    @property
    def ranks(self) -> list[int]:
        """The ranks with a dump, sorted."""
        return sorted(self.files.get_column("rank").to_list())


def read_dump(path: Path) -> DumpResult:
    """Read and parse one dump file (gzip recognised by content), within :data:`MAX_DUMP_BYTES`.

    Raises
    ------
    TimelineError
        Unreadable, damaged, too large, a pickle asking for a class, not a 2.x dump.
    """
    from timeline.importers.files import TextTooLargeError

    warnings: list[str] = []
    try:
        data = read_trace_bytes(path, warnings, limit=MAX_DUMP_BYTES)
    except TextTooLargeError:
        msg = (
            f"{path}: more than {MAX_DUMP_BYTES // 1024**2} MiB, more than a Flight Recorder dump holds "
            "(MAX_DUMP_BYTES); not a dump torch writes"
        )
        raise UsageError(msg) from None
    result = parse_flight_recorder(data, source=path_text(path))
    result.warnings[:0] = warnings
    return result


def _read_all(paths: list[Path], progress: Callable[[str, int, int], None] | None) -> list[DumpResult]:
    """Parse dumps, in worker processes when they are large enough to pay (:mod:`timeline.policy`)."""
    workers = os.cpu_count() or 1
    if not policy.parses_in_parallel(paths, workers=workers):
        out = []
        for i, path in enumerate(paths, 1):
            out.append(read_dump(path))
            if progress:
                progress(path.name, i, len(paths))
        return out
    from timeline.executors import LocalExecutor, named_progress

    executor = LocalExecutor(min(workers, len(paths)))
    report = named_progress(progress, [p.name for p in paths])
    return list(executor.map(read_dump, paths, progress=report))


def load_dumps(
    paths: PathsLike,
    *,
    rank: int | None = None,
    rank_regex: str | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> Dumps:
    """Load the Flight Recorder dumps of one job.

    Parameters
    ----------
    paths
        Dump files, directories holding them, or glob patterns.
    rank
        The rank of a single dump whose name states none.
    rank_regex
        A regex with one group of digits that finds the rank in file names.
    progress
        Called as ``progress(name, done, total)`` after each dump.

    Raises
    ------
    TypeError
        An argument of the wrong type, named (bytes are not a path).
    TimelineError
        A missing input, a file that is not a dump, a dump whose rank cannot be told, two dumps of
        one rank, a pickle asking for a class, a dump of another major version.
    """
    checked = arguments.check_paths(paths)
    rank = arguments.check_rank(rank)
    arguments.check_optional_text(rank_regex, argument="rank_regex")
    path_list = expand_inputs(checked, rank=rank)
    dumps, others = split_dumps(path_list)
    if others:
        msg = (
            f"{others[0]}: not a Flight Recorder dump (pickle or JSON); pass the dumps of one job, "
            "or give profiler traces to the commands that read them"
        )
        raise UsageError(msg)
    parsed = _read_all(dumps, progress)
    return _combine(parsed, dumps, rank=rank, rank_regex=rank_regex)


def _dump_rank(
    result: DumpResult, path: Path, *, rank: int | None, rank_regex: str | None
) -> tuple[int, str]:
    """Return the rank of a dump: ``--rank``, a rank inside the dump, or its file name."""
    if rank is not None:
        return rank, "--rank"
    if result.rank is not None:
        return result.rank, "dump"
    named = rank_from_dump_name(path, rank_regex=rank_regex)
    if named is None:
        msg = (
            f"{path}: no rank: a Flight Recorder dump states none and its name ends in no rank number; "
            "keep torch's names (<prefix><rank>, e.g. nccl_trace_rank_3), pass --rank-regex, or --rank N "
            "for a single dump"
        )
        raise RankError(msg)
    return named, "--rank-regex" if rank_regex else "file name"


def _combine(
    parsed: Sequence[DumpResult], paths: Sequence[Path], *, rank: int | None, rank_regex: str | None
) -> Dumps:
    """Return the dumps together: ranks resolved and claimed once each, frames concatenated."""
    owner: dict[int, Path] = {}
    entries, status, groups, rows = [], [], [], []
    warnings: list[str] = []
    for result, path in zip(parsed, paths, strict=True):
        r, rank_from = _dump_rank(result, path, rank=rank, rank_regex=rank_regex)
        if r > 2**31 - 1:
            raise RankError(f"{path}: rank {r} (from the {rank_from}) is not a rank; rename the dump")
        claim_rank(owner, r, path, {})
        warnings.extend(result.warnings)
        with_rank = pl.lit(r, dtype=pl.Int32).alias("rank")
        entries.append(result.entries.with_columns(with_rank))
        status.append(result.status.with_columns(with_rank))
        groups.append(result.groups.with_columns(with_rank))
        rows.append(
            {
                "rank": r,
                "path": path_text(path),
                "rank_from": rank_from,
                "encoding": result.encoding,
                "version": result.version,
                "comm_lib_version": result.comm_lib_version,
                "entries": result.entries.height,
            }
        )
    files = pl.DataFrame(rows, schema=DUMP_FILES_SCHEMA).sort("rank")
    versions = sorted(set(files.get_column("version").drop_nulls().to_list()))
    if len(versions) > 1:
        warnings.append(f"the dumps are of versions {', '.join(versions)}: dumps of one job share a torch")
    return Dumps(
        entries=pl.concat([pl.DataFrame(schema=FLIGHT_ENTRIES_SCHEMA), *entries]).sort("rank", "record_id"),
        status=pl.concat([pl.DataFrame(schema=FLIGHT_STATUS_SCHEMA), *status]).sort("rank", "pg_id"),
        groups=pl.concat([pl.DataFrame(schema=FLIGHT_GROUPS_SCHEMA), *groups]).sort("rank", "pg_name"),
        files=files,
        warnings=tuple(warnings),
    )
