"""Parquet datasets partitioned by rank: written rank by rank, read lazily.

``timeline convert PATH... -o OUT_DIR --partition-by-rank`` writes ``OUT_DIR/rank=N/part-0.parquet``
(hive partitioning): the canonical events of rank ``N``, sorted by start, zstd-compressed, with that
rank's rows of the file table and the load warnings in the file's metadata, as
:meth:`timeline.trace.Trace.write_parquet` writes them. Each file is written by the task that parsed
it, so no process holds more than one rank. Every command reads such a directory back
(:func:`timeline.inputs.expand_datasets` turns it into its part files); the analyses reduce it rank
by rank (:func:`timeline.execution.analyze_files`); :func:`scan_dataset` gives a polars ``LazyFrame`` over all
ranks for your own queries.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from timeline.errors import UsageError
from timeline.execution.reduce import load_unit
from timeline.executors import Executor, LocalExecutor, named_progress
from timeline.importers.result import ImportOptions
from timeline.inputs import (
    PathsLike,
    Unit,
    check_claims,
    dataset_parts,
    expand_inputs,
    is_dataset,
    plan_units,
    unit_claims,
)
from timeline.trace import Trace

__all__ = ["Written", "scan_dataset", "write_dataset"]


def scan_dataset(path: str | Path) -> pl.LazyFrame:
    """Return a lazy frame over every rank of a dataset (:data:`timeline.schema.EVENTS_SCHEMA`).

    Filters on ``rank`` read only the matching partitions.

    Examples
    --------
    >>> from timeline.execution import scan_dataset  # doctest: +SKIP
    >>> per_rank = (  # doctest: +SKIP
    ...     scan_dataset("run.parquet.d")
    ...     .filter(pl.col("kind") == "communication")
    ...     .group_by("rank")
    ...     .agg(pl.col("dur_ns").sum())
    ...     .collect(engine="streaming")
    ... )
    """
    return pl.scan_parquet([str(p) for p in dataset_parts(path)], hive_partitioning=False)


@dataclass(frozen=True)
class Written:
    """What :func:`write_dataset` wrote."""

    path: Path
    events: int
    ranks: tuple[int, ...]
    files: pl.DataFrame
    warnings: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class _WriteTask:
    unit: Unit
    index: int
    scratch: Path


@dataclass(frozen=True, kw_only=True)
class _UnitWritten:
    files: pl.DataFrame
    warnings: tuple[str, ...]
    claims: tuple[tuple[int, str], ...]
    horovod: tuple[str, ...]
    parts: tuple[tuple[int, Path], ...]
    events: int


def _write_unit(task: _WriteTask) -> _UnitWritten:
    """Load one unit and write its events, rank by rank, into the scratch directory (a task)."""
    unit = task.unit
    trace = load_unit(unit)
    claims, horovod = unit_claims(unit.paths, trace.files)
    ranks = sorted(trace.events.get_column("rank").unique().drop_nulls().to_list())
    parts: list[tuple[int, Path]] = []
    for i, rank in enumerate(ranks):
        events = trace.events.filter(pl.col("rank") == rank)
        # each file row goes with its own rank; the unit's warnings with its first rank
        files = trace.files.filter(pl.col("rank") == rank)
        if i == 0:
            orphans = ~pl.col("rank").is_in(ranks) | pl.col("rank").is_null()
            files = pl.concat([files, trace.files.filter(orphans)])
        directory = task.scratch / f"rank={rank}"
        directory.mkdir(exist_ok=True)
        target = directory / f"unit-{task.index}.parquet"
        Trace(events=events, files=files, warnings=trace.warnings if i == 0 else ()).write_parquet(target)
        parts.append((rank, target))
    return _UnitWritten(
        files=trace.files,
        warnings=trace.warnings,
        claims=claims,
        horovod=horovod,
        parts=tuple(parts),
        events=trace.events.height,
    )


def write_dataset(
    paths: PathsLike,
    output: str | Path,
    *,
    executor: Executor | None = None,
    options: ImportOptions | None = None,
    rank: int | None = None,
    rank_regex: str | None = None,
    force: bool = False,
    progress: Callable[[str, int, int], None] | None = None,
) -> Written:
    """Convert traces into a Parquet dataset partitioned by rank, one rank per task.

    The dataset is written into a scratch directory beside ``output`` and renamed when complete.

    Parameters
    ----------
    paths
        As for :func:`timeline.trace.load`.
    output
        The dataset directory to write.
    executor
        Where the tasks run (default: local processes; Ray workers must see ``output``'s directory).
    options, rank, rank_regex
        As for :func:`timeline.trace.load`.
    force
        Replace an existing dataset (never a directory that is not one).
    progress
        Called as ``progress(label, done, total)`` after each task.

    Raises
    ------
    TimelineError
        Bad input, as :func:`timeline.trace.load` raises it; an existing output without ``force``.
    """
    target = Path(output)
    path_list = expand_inputs(paths, rank=rank)
    resolved = target.resolve()
    if any(resolved == p or resolved in p.parents for p in path_list):
        msg = (
            f"{output}: holds some of the inputs; choose another output directory (inputs are never modified)"
        )
        raise UsageError(msg)
    if target.exists():
        if not force:
            raise UsageError(f"{output}: exists; pass --force to overwrite it")
        if target.is_dir() and any(target.iterdir()) and not is_dataset(target):
            msg = f"{output}: a directory that is not a timeline dataset; choose another output directory"
            raise UsageError(msg)
    if not target.parent.exists():
        raise UsageError(f"{target.parent}: no such directory")
    units = plan_units(path_list, options=options, rank=rank, rank_regex=rank_regex)
    if executor is None:
        executor = LocalExecutor()
    scratch = target.parent / f".{target.name}.partial-{os.getpid()}"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir()
    tasks = [_WriteTask(unit=u, index=i, scratch=scratch) for i, u in enumerate(units)]

    report = named_progress(progress, [unit.paths[0].name for unit in units])

    try:
        written = list(executor.map(_write_unit, tasks, progress=report))
        check_claims([w.horovod for w in written], [w.claims for w in written])
        # part-0, part-1 … per rank, in the order of the inputs
        counts: dict[int, int] = {}
        for w in written:
            for part_rank, part in w.parts:
                n = counts.get(part_rank, 0)
                part.rename(part.with_name(f"part-{n}.parquet"))
                counts[part_rank] = n + 1
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
        scratch.rename(target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    files = pl.concat([w.files for w in written], how="vertical")
    return Written(
        path=target,
        events=sum(w.events for w in written),
        ranks=tuple(sorted(counts)),
        files=files,
        warnings=tuple(x for w in written for x in w.warnings),
    )
