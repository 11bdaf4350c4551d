"""Parquet datasets partitioned by rank: written rank by rank, read lazily.

``timeline convert PATH... -o OUT_DIR --partition-by-rank`` writes ``OUT_DIR/rank=N/part-0.parquet``
(hive partitioning): the canonical events of rank ``N``, sorted by start, zstd-compressed, with that
rank's rows of the file table and the load warnings in the file's metadata, as
:meth:`timeline.trace.Trace.write_parquet` writes them. Each file is written by the task that parsed
it, so no process holds more than one rank. Every command reads such a directory back
(:func:`timeline.inputs.expand_datasets` turns it into its part files); the analyses reduce it rank
by rank (:func:`timeline.execution.analyze_files`); :func:`scan_dataset` gives a polars ``LazyFrame`` over all
ranks for your own queries. :func:`write_parquet_file` writes a whole trace as one Parquet file.

Both writers put what they write beside the output and rename it into place, and replace only
what timeline wrote (:func:`check_output`): an existing dataset (every entry a ``rank=N`` directory
of ``part-K.parquet`` files written by timeline) or empty directory for a dataset, a Parquet file
written by timeline for a file. Anything else (another file, a FIFO, a device, another directory, a
symbolic link) is refused and left as it is; nothing is written through a link or into a FIFO.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, TypeVar

import polars as pl

from timeline.errors import UsageError
from timeline.execution.reduce import load_unit
from timeline.executors import Executor, LocalExecutor, named_progress
from timeline.importers.parquet import write_parquet, written_by_timeline
from timeline.importers.result import ImportOptions
from timeline.inputs import (
    PathsLike,
    Unit,
    check_claims,
    dataset_parts,
    expand_inputs,
    plan_units,
    unit_claims,
)
from timeline.outputs import (
    create_beside,
    is_output_error,
    output_error,
    signals_deferred,
    written_beside,
)
from timeline.paths import special_kind
from timeline.trace import Trace

__all__ = [
    "Written",
    "check_file_output",
    "check_output",
    "scan_dataset",
    "write_dataset",
    "write_file",
    "write_parquet_file",
]

_PARTITION = re.compile(r"^rank=\d+$")
_PART = re.compile(r"^part-\d+\.parquet$")
"""The names :func:`write_dataset` gives its directories and files."""
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_T = TypeVar("_T")


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
        groups = trace.groups.filter(pl.col("rank") == rank)
        warnings = trace.warnings if i == 0 else ()
        with target.open("wb") as handle:  # a file object: polars takes no path that is not UTF-8
            write_parquet(handle, events=events, files=files, warnings=warnings, groups=groups)
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
        Replace an existing dataset written by timeline, or an empty directory (never anything else:
        :func:`check_output`).
    progress
        Called as ``progress(label, done, total)`` after each task.

    Raises
    ------
    TimelineError
        Bad input, as :func:`timeline.trace.load` raises it; an existing output without ``force``,
        or one that timeline did not write.
    """
    target = Path(output)
    path_list = expand_inputs(paths, rank=rank)
    _check_target(target, path_list, force=force, given=output)
    units = plan_units(path_list, options=options, rank=rank, rank_regex=rank_regex)
    report = named_progress(progress, [unit.paths[0].name for unit in units])
    written, counts = _write_in_scratch(
        units, target, executor=executor or LocalExecutor(), report=report, force=force
    )
    return Written(
        path=target,
        events=sum(w.events for w in written),
        ranks=tuple(sorted(counts)),
        files=pl.concat([w.files for w in written], how="vertical"),
        warnings=tuple(x for w in written for x in w.warnings),
    )


def _write_in_scratch(
    units: Sequence[Unit],
    target: Path,
    *,
    executor: Executor,
    report: Callable[[int, int], None] | None,
    force: bool,
) -> tuple[list[_UnitWritten], dict[int, int]]:
    """Write every unit's parts in a scratch folder beside ``target``, then rename it ``target``.

    Returns what each unit wrote and the count of parts per rank; the scratch folder never stays.
    """
    scratch: Path | None = None
    try:
        with signals_deferred():  # an interruption never falls between the mkdir and the record
            scratch, _ = create_beside(target, _new_directory)
        tasks = [_WriteTask(unit=u, index=i, scratch=scratch) for i, u in enumerate(units)]
        written = _written_units(executor, tasks, target, report)
        check_claims([w.horovod for w in written], [w.claims for w in written])
        counts = _number_parts(written)
        check_output(target, dataset=True, force=force)  # again: it may have changed meanwhile
        _replace_directory(scratch, target)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    return written, counts


def _check_target(target: Path, path_list: Sequence[Path], *, force: bool, given: str | Path) -> None:
    """Refuse an output that holds inputs, one timeline may not replace, or one with no parent folder.

    ``given``: the output as the user wrote it, for the message.
    """
    resolved = target.resolve()
    if any(resolved == p or resolved in p.parents for p in path_list):
        msg = (
            f"{given}: holds some of the inputs; choose another output directory (inputs are never modified)"
        )
        raise UsageError(msg)
    check_output(target, dataset=True, force=force)
    if not target.parent.exists():
        raise UsageError(f"{target.parent}: no such directory")


def _number_parts(written: Sequence[_UnitWritten]) -> dict[int, int]:
    """Name each rank's parts part-0, part-1 … in the order of the inputs; return the count per rank."""
    counts: dict[int, int] = {}
    for w in written:
        for part_rank, part in w.parts:
            n = counts.get(part_rank, 0)
            part.rename(part.with_name(f"part-{n}.parquet"))
            counts[part_rank] = n + 1
    return counts


def _written_units(
    executor: Executor, tasks: list[_WriteTask], target: Path, report: Callable[[int, int], None] | None
) -> list[_UnitWritten]:
    """Run the tasks that write each unit's parts; a failure to write (a full disk) is one error."""
    try:
        return list(executor.map(_write_unit, tasks, progress=report))
    except Exception as exc:
        failed = is_output_error(exc)
        if failed is None:
            raise
        raise output_error(target, failed) from None


def write_parquet_file(trace: Trace, output: str | Path, *, force: bool = False) -> None:
    """Write a trace as one Parquet file (:meth:`timeline.trace.Trace.write_parquet`), atomically.

    The file is written beside ``output`` under a new name (created, never opened if it exists) and
    renamed over it when complete.

    Parameters
    ----------
    trace
        What to write.
    output
        The Parquet file to write.
    force
        Replace an existing Parquet file written by timeline (never anything else: :func:`check_output`).

    Raises
    ------
    UsageError
        An existing output without ``force``, or one that timeline did not write; a directory that
        cannot be written.
    """
    target = Path(output)
    _write_beside(
        target,
        lambda handle: write_parquet(
            handle, events=trace.events, files=trace.files, warnings=trace.warnings, groups=trace.groups
        ),
        check=lambda: check_output(target, dataset=False, force=force),
    )


def _write_beside(target: Path, write: Callable[[BinaryIO], object], *, check: Callable[[], None]) -> None:
    """Write a new file beside ``target`` with ``write`` and rename it over ``target``.

    ``check`` (which raises when ``target`` may not be replaced) runs before and again after writing:
    the output may have changed meanwhile. Through :func:`timeline.outputs.written_beside`: a failure
    to write (a full disk) is one error, and nothing is left under any name.
    """
    check()
    with written_beside(target) as (_, handle):
        write(handle)
        check()


def check_output(output: str | Path, *, dataset: bool, force: bool) -> None:
    """Refuse an output that exists, unless it is what timeline wrote and ``force`` is given.

    What may be replaced: for a dataset (``dataset``), a dataset written by timeline or an empty
    directory; for a file, a Parquet file written by timeline. Anything else is refused even with
    ``force``: a file of other content, a FIFO, a device, another directory, a symbolic link
    (whatever it points to). Nothing is opened but regular files, and never through a link.

    Raises
    ------
    UsageError
        What the output is and why it is refused, with the fix.
    """
    kind, place = ("a dataset", "directory") if dataset else ("a Parquet file", "file")
    _check_existing(
        output,
        force=force,
        refused=lambda target, mode: _not_replaceable(target, mode, dataset=dataset),
        replaces=f"{kind} written by timeline convert",
        place=place,
    )


def _check_existing(
    output: str | Path,
    *,
    force: bool,
    refused: Callable[[Path, int], str | None],
    replaces: str,
    place: str,
) -> None:
    """Refuse an existing ``output`` that ``refused`` names (by its ``lstat`` mode), or without ``force``."""
    target = Path(output)
    try:
        mode = target.lstat().st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise UsageError(f"{output}: cannot be examined: {exc.strerror or exc}") from exc
    what = refused(target, mode)
    if what is not None:
        raise UsageError(
            f"{output}: exists and is {what}; --force replaces only {replaces}; choose another output {place}"
        )
    if not force:
        raise UsageError(f"{output}: exists; pass --force to overwrite it")


def _not_replaceable(
    target: Path, mode: int, *, dataset: bool, recognise: Callable[[bytes], bool] | None = None
) -> str | None:
    """Say what ``target`` (of ``lstat`` mode ``mode``) is when timeline did not write it; else None."""
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        return special_kind(mode)  # a FIFO, a device, a socket
    if dataset:
        if not stat.S_ISDIR(mode):
            return "a file, not a directory"
        return None if _written_dataset(target) else "a directory that is not a timeline dataset"
    if stat.S_ISDIR(mode):
        return "a directory"
    written = written_by_timeline(target) if recognise is None else recognise(_head_of(target))
    return None if written else "a file that timeline did not write"


def _head_of(path: Path) -> bytes:
    """Return the first 4 KiB of a regular file, never through a link nor from a FIFO; b"" otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return b""
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return b""
        try:
            return handle.read(4096)
        except OSError:
            return b""


def check_file_output(
    output: str | Path, *, force: bool, recognise: Callable[[bytes], bool], kind: str
) -> None:
    """:func:`check_output` for a file of another format: only a file ``recognise`` knows is replaced.

    Parameters
    ----------
    output
        The file to write.
    force
        Replace a file that timeline wrote.
    recognise
        Whether the first 4 KiB of an existing file are of a file timeline wrote in this format.
    kind
        What such a file is, for the message (``a trace written by timeline convert --to perfetto``).

    Raises
    ------
    UsageError
        What the output is and why it is refused, with the fix.
    """
    _check_existing(
        output,
        force=force,
        refused=lambda target, mode: _not_replaceable(target, mode, dataset=False, recognise=recognise),
        replaces=kind,
        place="file",
    )


def write_file(
    data: bytes, output: str | Path, *, force: bool, recognise: Callable[[bytes], bool], kind: str
) -> None:
    """Write ``data`` to ``output`` atomically, replacing only what :func:`check_file_output` allows.

    Written beside ``output`` under a new name (created, never opened if it exists) and renamed over it
    when complete.

    Raises
    ------
    UsageError
        As :func:`check_file_output`; a directory that cannot be written.
    """
    target = Path(output)
    _write_beside(
        target,
        lambda handle: handle.write(data),
        check=lambda: check_file_output(target, force=force, recognise=recognise, kind=kind),
    )


def _written_dataset(directory: Path) -> bool:
    """Whether a directory is empty, or holds only what :func:`write_dataset` writes.

    That is ``rank=N`` directories (not links), each of ``part-K.parquet`` files written by timeline.
    """
    try:
        for partition in directory.iterdir():
            if not _PARTITION.match(partition.name) or not stat.S_ISDIR(partition.lstat().st_mode):
                return False
            parts = list(partition.iterdir())
            if not parts or not all(_PART.match(p.name) and written_by_timeline(p) for p in parts):
                return False
    except OSError:
        return False
    return True


def _new_directory(path: Path) -> None:
    path.mkdir()


def _replace_directory(scratch: Path, target: Path) -> None:
    """Rename ``scratch`` to ``target``; an existing ``target`` is moved aside first, then deleted."""
    if not os.path.lexists(target):
        scratch.rename(target)
        return
    with signals_deferred():  # the old dataset is never left aside, whole or in part, by an interruption
        aside, _ = create_beside(target, _new_directory)
        moved = aside / target.name
        target.rename(moved)  # a rename moves a link itself, never what it points to
        try:
            scratch.rename(target)
        except OSError:
            moved.rename(target)
            aside.rmdir()
            raise
        shutil.rmtree(aside)
