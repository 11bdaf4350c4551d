"""Analyse traces rank by rank and combine the small per-rank results.

Takes trace files (one per rank, or a Parquet dataset partitioned by rank) and gives the same
:class:`~timeline.analysis.overlap.Overlap`, file table and warnings as :func:`timeline.trace.load`
followed by :func:`~timeline.analysis.overlap.compute_overlap`, while no process ever holds more than
one rank's events: each task loads one *unit* (a file; the successive windows of one rank listed in
a capture manifest; a converted Parquet file) and reduces it at once to

- its overlap rows (per rank, per iteration, per collective) and iteration windows: every overlap
  figure is computed within a rank, so analysing rank by rank and concatenating is exact;
- its *communication events* (:func:`communication_events`): what the analyses that compare ranks
  (collectives matched across ranks, clock alignment, link utilisation) read, plus one event per rank
  that keeps the rank's measurement mode; a few thousand rows per rank (left out when no analysis
  compares ranks).

The tasks run on an :class:`~timeline.executors.Executor`: local processes or Ray tasks.
Each task packs its results (pickled frames, ISA-L deflate), the caller keeps them packed as they
come and unpacks them once, in rank order (:func:`run_units`, with a :class:`Sink` per kind of
result: the what-if graph's parts go the same way, :mod:`timeline.execution.graphs`). Ranks spread
over several units (a Horovod timeline, written by rank 0 for every worker, beside per-rank profiler
traces) are detected after the first pass and reduced again together.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

import msgspec
import polars as pl
from isal import isal_zlib

from timeline.analysis.iterations import rank_modes
from timeline.analysis.overlap import Overlap, overlap_with_modes
from timeline.analysis.selection import restrict, restrict_events
from timeline.errors import UsageError
from timeline.executors import Executor, LocalExecutor, named_progress
from timeline.importers.result import ImportOptions
from timeline.inputs import PathsLike, Unit, check_claims, plan_inputs, unit_claims
from timeline.plausibility import CLOCKS_SCHEMA
from timeline.policy import small_input
from timeline.schema import FILES_SCHEMA, PROCESS_GROUPS_SCHEMA
from timeline.selection import Selection
from timeline.trace import Trace, check_part_files, load_part

if TYPE_CHECKING:
    from timeline.diagnosis.parts import DiagnosisParts
    from timeline.whatif.graph import GraphParts, TraceGraph

__all__ = [
    "Analysis",
    "RankReduction",
    "UnitReduction",
    "analyze_files",
    "communication_events",
    "load_unit",
    "overlap_events",
    "reduce_unit",
    "shift_overlap",
]


@dataclass(frozen=True, kw_only=True)
class UnitReduction:
    """What every task returns for its unit, whatever else it reduces the unit to.

    Attributes
    ----------
    paths
        The unit's files.
    files
        Its rows of the file table (:data:`timeline.schema.FILES_SCHEMA`).
    warnings
        Its load warnings, in order.
    claims
        ``(rank, file)`` for each rank the unit's files claim (for the duplicate-rank check).
    horovod
        The Horovod timelines among the unit's files.
    event_ranks
        The ranks its events belong to.
    clocks
        Where its files' events lie, on which clock (:data:`timeline.plausibility.CLOCKS_SCHEMA`),
        for the clock check across units.
    groups
        The process groups its files declare (:attr:`timeline.trace.Trace.groups`): a few rows.
    """

    paths: tuple[Path, ...]
    files: pl.DataFrame
    warnings: tuple[str, ...]
    claims: tuple[tuple[int, str], ...]
    horovod: tuple[str, ...]
    event_ranks: tuple[int, ...]
    clocks: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=CLOCKS_SCHEMA))
    groups: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=PROCESS_GROUPS_SCHEMA))


@dataclass(frozen=True, kw_only=True)
class RankReduction(UnitReduction):
    """What an overlap task returns for one unit: small frames, never the unit's events.

    Attributes
    ----------
    overlap
        The overlap analysis of its events.
    communication
        :func:`communication_events` of its events (none when the unit was asked for none).
    """

    overlap: Overlap
    communication: pl.DataFrame
    graph_parts: DiagnosisParts | None = None


@dataclass(frozen=True)
class Analysis:
    """The overlap analysis of traces reduced rank by rank.

    Attributes
    ----------
    overlap
        Equal to ``compute_overlap(load(paths).events)``.
    files
        Equal to ``load(paths).files``.
    warnings
        The load warnings.
    communication
        The communication events of every rank and one event per rank that keeps its mode
        (:func:`communication_events`): enough for ``match_collectives``,
        ``estimate_clock_offsets`` and ``analyze_horovod``, which give the same results on it as on
        all the events.
    clocks, clock_note, groups
        As ``load(paths)``'s (:attr:`timeline.trace.Trace.clock_note`, :attr:`~timeline.trace.Trace.groups`).
    """

    overlap: Overlap
    files: pl.DataFrame
    warnings: tuple[str, ...]
    communication: pl.DataFrame
    units: tuple[tuple[Unit, tuple[int, ...]], ...] = ()
    """Each unit that was reduced, with the ranks of its events (for :meth:`load_ranks`)."""
    clocks: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=CLOCKS_SCHEMA))
    clock_note: str | None = None
    groups: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=PROCESS_GROUPS_SCHEMA))
    graph_parts: tuple[DiagnosisParts, ...] | None = None
    """What the diagnosis needs of each unit beyond the overlap (asked for with ``graph=True``): the
    what-if graph parts and the launch gaps of the iterations it diagnoses; else None."""

    def graph(self, *, link_gbps: float | None = None, offsets: pl.DataFrame | None = None) -> TraceGraph:
        """Return the what-if graph of :attr:`graph_parts` (the in-memory diagnosis builds the same).

        ``offsets``: the clock offsets the events were aligned by (``--align``).

        Raises
        ------
        UsageError
            The units were reduced without their graph parts.
        TraceContentError
            No rank with compute events.
        """
        from timeline.whatif.graph import graph_from_parts

        if self.graph_parts is None:
            raise UsageError("the rank-by-rank analysis was run without graph parts: pass graph=True")
        parts = [p.graph for p in self.graph_parts]
        if offsets is not None:
            parts = [shift_parts(p, offsets) for p in parts]
        return graph_from_parts(parts, files=self.files, link_gbps=link_gbps)

    def launch_gaps(self, *, offsets: pl.DataFrame | None = None) -> pl.DataFrame | None:
        """Return the launch gaps of the diagnosed iterations of every unit (None without ``graph=True``).

        ``offsets``: the clock offsets the events were aligned by (``--align``).
        """
        if self.graph_parts is None:
            return None
        gaps = pl.concat([p.launch_gaps for p in self.graph_parts], how="vertical")
        return gaps if offsets is None else _shifted(gaps, offsets)

    def as_trace(self) -> Trace:
        """Return a :class:`~timeline.trace.Trace` whose events are :attr:`communication`.

        The file table and warnings are the full trace's; the events are enough for the analyses
        that compare ranks, not for the per-rank ones (use :attr:`overlap`).
        """
        return Trace(
            events=self.communication,
            files=self.files,
            warnings=self.warnings,
            clocks=self.clocks,
            clock_note=self.clock_note,
            groups=self.groups,
        )

    def load_ranks(self, ranks: Sequence[int]) -> Trace:
        """Load every event of some ranks, in this process: the units that hold them, as ``load`` would.

        For the analyses that need one rank's events in full (the rank that wrote a Horovod timeline,
        a few ranks to draw): the events are those of ``load(paths)`` for these ranks, the file
        table and warnings those of the units loaded.

        Raises
        ------
        TimelineError
            A unit's files changed since they were reduced and are now bad input.
        """
        wanted = set(ranks)
        chosen = [unit for unit, held in self.units if wanted.intersection(held)]
        if not chosen:
            return Trace(events=self.communication.clear(), files=self.files.clear(), warnings=())
        merged = replace(chosen[0], paths=tuple(p for unit in chosen for p in unit.paths), workers=1)
        trace = load_unit(merged)
        events, _ = restrict_events(trace.events, merged.selection)
        return replace(trace, events=events.filter(pl.col("rank").is_in(sorted(wanted))))


def communication_events(events: pl.DataFrame) -> pl.DataFrame:
    """Return the events the cross-rank analyses read, and one more per rank that keeps its mode.

    Kept: every communication event of the profiler traces (collective kernels, CPU-side collective
    ops), every Horovod event, and per rank the first event that makes
    :func:`~timeline.analysis.iterations.rank_modes` measure it as it does on all the events (a GPU
    kernel on GPU ranks, any profiler event on CPU-only ranks). Order is kept.

    Parameters
    ----------
    events
        The canonical events frame.

    Returns
    -------
    pl.DataFrame
        A subset of ``events`` (same schema, same order).
    """
    return _communication_events(events, rank_modes(events))


def _communication_events(events: pl.DataFrame, modes: pl.DataFrame) -> pl.DataFrame:
    """:func:`communication_events` with ``rank_modes(events)`` already computed."""
    kind, source = pl.col("kind"), pl.col("source")
    mode = pl.col("mode")
    gpu_marker = pl.col("device").is_not_null() & kind.is_in(["compute", "communication"])
    cpu_marker = (source == "kineto") & (kind != "instant")
    marks = pl.when(mode == "gpu").then(gpu_marker).when(mode == "cpu").then(cpu_marker).otherwise(False)
    flagged = events.with_row_index("_i").join(modes, on="rank", how="left", maintain_order="left")
    first = flagged.filter(marks).group_by("rank").agg(pl.col("_i").min()).get_column("_i")
    keep = (
        ((kind == "communication") & (source == "kineto"))
        | (source == "horovod")
        | pl.col("_i").is_in(first.implode())
    )
    return flagged.filter(keep).drop("_i", "mode")


def overlap_events(events: pl.DataFrame) -> pl.DataFrame:
    """Return the events the overlap analysis reads; the same results as on all the events.

    On GPU ranks only GPU activities, the runtime calls that launched one (they place the activity
    in the step that launched it; found by ``correlation``) and annotations (``ProfilerStep#N``)
    are read: CPU operators, often half of the events, and runtime calls that launch nothing
    (queries, event waits: half of the rest) are left out. CPU-only and Horovod ranks keep
    everything.
    """
    return _overlap_events(events, rank_modes(events))


def _overlap_events(events: pl.DataFrame, modes: pl.DataFrame) -> pl.DataFrame:
    """:func:`overlap_events` with ``rank_modes(events)`` already computed (the result's modes too)."""
    gpu_ranks = modes.filter(pl.col("mode") == "gpu").get_column("rank")
    if gpu_ranks.len() == 0:
        return events
    on_gpu = pl.col("device").is_not_null()
    # the correlations of every GPU activity, whatever its rank: a superset of each rank's own
    launched = events.filter(on_gpu).get_column("correlation").drop_nulls().unique()
    read = (
        on_gpu
        | (pl.col("source") == "horovod")  # wire phases measured against the rank's compute
        | (pl.col("kind") == "annotation")
        | ((pl.col("kind") == "runtime") & pl.col("correlation").is_in(launched.implode()))
    )
    return events.filter(~pl.col("rank").is_in(gpu_ranks.implode()) | read)


def shift_overlap(overlap: Overlap, offsets: pl.DataFrame, *, horovod_writer: int = 0) -> Overlap:
    """Return the overlap analysis of events moved by ``apply_clock_offsets``, without the events.

    Every figure of a rank is measured within the rank, so moving a rank's events by its clock
    offset moves its windows, iterations and collectives by the same amount and changes nothing
    else. Horovod-only ranks move by the offset of the rank that wrote the timeline, as
    ``apply_clock_offsets`` moves Horovod events.

    Parameters
    ----------
    overlap
        The analysis of the events before alignment.
    offsets
        ``rank`` and ``offset_ns`` (:func:`~timeline.analysis.alignment.estimate_clock_offsets`).
    horovod_writer
        The rank that wrote the Horovod timeline.
    """
    table = offsets.select(pl.col("rank").cast(pl.Int32), _offset=pl.col("offset_ns").cast(pl.Int64))
    writer = table.filter(pl.col("rank") == horovod_writer).get_column("_offset").to_list()
    writer_offset = writer[0] if writer and writer[0] is not None else 0
    modes = overlap.ranks.select("rank", _horovod=pl.col("mode") == "horovod")

    def shifted(frame: pl.DataFrame) -> pl.DataFrame:
        offset = (
            pl.when(pl.col("_horovod").fill_null(False))
            .then(pl.lit(writer_offset, dtype=pl.Int64))
            .otherwise(pl.col("_offset").fill_null(0))
        )
        return (
            frame.join(table, on="rank", how="left", maintain_order="left")
            .join(modes, on="rank", how="left", maintain_order="left")
            .with_columns(start_ns=pl.col("start_ns") - offset, end_ns=pl.col("end_ns") - offset)
            .select(frame.columns)
        )

    return Overlap(
        ranks=shifted(overlap.ranks),
        iterations=shifted(overlap.iterations),
        collectives=shifted(overlap.collectives),
        windows=shifted(overlap.windows),
        comm=shifted(overlap.comm),
        warnings=overlap.warnings,
    )


def _shifted(frame: pl.DataFrame, offsets: pl.DataFrame) -> pl.DataFrame:
    """Return a frame with ``rank`` and times, each time of a rank minus its clock offset."""
    times = [c for c in ("start_ns", "end_ns", "ready_ns") if c in frame.columns]
    if not times or frame.height == 0:
        return frame
    table = offsets.select(pl.col("rank").cast(pl.Int32), _offset=pl.col("offset_ns").cast(pl.Int64))
    joined = frame.join(table, on="rank", how="left", maintain_order="left")
    return joined.with_columns(pl.col(c) - pl.col("_offset").fill_null(0) for c in times).select(
        frame.columns
    )


def shift_parts(parts: GraphParts, offsets: pl.DataFrame) -> GraphParts:
    """Return graph parts moved as ``apply_clock_offsets`` moves events (a rank's times minus its offset)."""
    return msgspec.structs.replace(
        parts,
        windows=_shifted(parts.windows, offsets),
        compute=_shifted(parts.compute, offsets),
        waits=_shifted(parts.waits, offsets),
        comm=_shifted(parts.comm, offsets),
        markers=_shifted(parts.markers, offsets),
        accumulate_grad=_shifted(parts.accumulate_grad, offsets),
    )


def reduce_unit(unit: Unit) -> RankReduction:
    """Load one unit and reduce it to its overlap rows and communication events (a task).

    Raises
    ------
    TimelineError
        Bad input, as :func:`timeline.trace.load` raises it.
    """
    # CPU operators of GPU ranks are skipped: the overlap never reads them
    return _reduction(
        unit.paths,
        load_unit(unit, overlap_only=True),
        communication=unit.communication,
        graph=unit.graph,
        selection=unit.selection,
    )


def load_unit(unit: Unit, *, overlap_only: bool = False) -> Trace:
    """Load the files of one unit, as :func:`timeline.trace.load` with the unit's options.

    The checks across the run's files (world sizes, clocks) are :func:`run_units`'.
    """
    return load_part(
        unit.paths,
        options=replace(unit.options, overlap_only=overlap_only),
        rank=unit.rank,
        rank_regex=unit.rank_regex,
        workers=unit.workers,
        only_file=unit.only_file,
    )


def _reduction(
    paths: tuple[Path, ...], trace: Trace, *, communication: bool, graph: bool, selection: Selection
) -> RankReduction:
    events = trace.events
    claims, horovod = unit_claims(paths, trace.files)
    event_ranks = tuple(events.get_column("rank").unique().drop_nulls().sort().to_list())
    # the modes of the overlap events are those of all the events: each rank keeps what decides its mode
    modes = rank_modes(events)
    overlap = overlap_with_modes(_overlap_events(events, modes), modes)
    # --ranks, --iterations: as the in-memory read restricts the run's (timeline.run.Run)
    events, overlap = restrict(events, overlap, selection)
    parts = None
    if graph:
        from timeline.diagnosis.facts import chosen_by_rank
        from timeline.diagnosis.parts import diagnosis_parts

        parts = diagnosis_parts(events, overlap.windows, chosen_by_rank(overlap.windows, overlap.collectives))
    return RankReduction(
        paths=paths,
        files=trace.files,
        warnings=trace.warnings,
        claims=claims,
        horovod=horovod,
        event_ranks=event_ranks,
        clocks=trace.clocks,
        groups=trace.groups,
        overlap=overlap,
        communication=_communication_events(events, modes) if communication else events.clear(),
        graph_parts=parts,
    )


def _shared_rank_groups(event_ranks: Sequence[tuple[int, ...]]) -> list[list[int]]:
    """Return groups of unit indexes whose events share a rank (union-find over ranks)."""
    parent = list(range(len(event_ranks)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first_holder: dict[int, int] = {}
    for i, ranks in enumerate(event_ranks):
        for rank in ranks:
            if rank in first_holder:
                parent[find(i)] = find(first_holder[rank])
            else:
                first_holder[rank] = i
    groups: dict[int, list[int]] = {}
    for i in range(len(event_ranks)):
        groups.setdefault(find(i), []).append(i)
    return [g for g in groups.values() if len(g) > 1]


_VIEWS = ("ranks", "iterations", "collectives", "windows", "comm", "communication")
_BLOCK_UNITS = 64
"""Units unpacked into one contiguous block at a time when the results are combined."""


R = TypeVar("R", bound=UnitReduction)
R_contra = TypeVar("R_contra", bound=UnitReduction, contravariant=True)


class Sink(Protocol[R_contra]):
    """Where :func:`run_units` puts what it keeps of each unit's result (a frame, graph parts…)."""

    def add(self, result: R_contra) -> None:
        """Keep the result of the next unit, in unit order."""
        ...

    def regroup(self, group: Sequence[int], ranks: frozenset[int], result: R_contra) -> None:
        """Put the result of the units of ``group`` reduced together in place of theirs.

        ``ranks``: the ranks those units' events share (every rank of their events).
        """
        ...


class Collected:
    """What every task returns, for the units in order: file rows, warnings, rank claims, ranks, clocks.

    Units whose events share a rank (a Horovod timeline beside per-rank traces) are reduced again
    together (:func:`run_units`): their merged result takes the place of the first, the others are
    emptied, so that every rank's results come from one unit. :attr:`clock_note` is the warning of
    the clock check across every unit (:func:`timeline.trace.check_part_files`), last of
    :meth:`all_warnings`.
    """

    def __init__(self) -> None:
        self.files: list[list[tuple[object, ...]]] = []
        self.warnings: list[tuple[str, ...]] = []
        self.claims: list[tuple[tuple[int, str], ...]] = []
        self.horovod: list[tuple[str, ...]] = []
        self.event_ranks: list[tuple[int, ...]] = []
        self.units: list[tuple[Unit, tuple[int, ...]]] = []
        self.clocks: list[pl.DataFrame] = []
        self.groups: list[pl.DataFrame] = []
        self.clock_note: str | None = None

    def add(self, unit: Unit, result: UnitReduction) -> None:
        """Keep a unit's file rows, warnings, claims, ranks and clocks."""
        self.files.append(result.files.rows())
        self.warnings.append(result.warnings)
        self.claims.append(result.claims)
        self.horovod.append(result.horovod)
        self.event_ranks.append(result.event_ranks)
        self.units.append((unit, result.event_ranks))
        self.clocks.append(result.clocks)
        self.groups.append(result.groups)

    def regroup(self, group: Sequence[int], merged: Unit, result: UnitReduction) -> None:
        """Put the merged unit's result in place of the first of ``group``; empty the others."""
        first, *rest = group
        self.files[first], self.warnings[first] = result.files.rows(), result.warnings
        self.units[first] = (merged, result.event_ranks)
        self.event_ranks[first] = result.event_ranks
        self.clocks[first] = result.clocks
        self.groups[first] = result.groups
        for i in rest:
            self.files[i], self.warnings[i] = [], ()
            self.units[i], self.event_ranks[i] = (self.units[i][0], ()), ()
            self.clocks[i] = result.clocks.clear()
            self.groups[i] = result.groups.clear()

    def clocks_frame(self) -> pl.DataFrame:
        """Return the clock rows of every unit, in unit order."""
        return pl.concat(self.clocks, how="vertical") if self.clocks else pl.DataFrame(schema=CLOCKS_SCHEMA)

    def check_files(self) -> None:
        """Check every unit's files together, as ``load`` checks a run's files; keep the clock warning.

        Raises
        ------
        RankError
            A rank outside the world, world sizes that disagree.
        """
        self.clock_note = check_part_files(self.files_frame(), self.clocks_frame())

    def groups_frame(self) -> pl.DataFrame:
        """Return the process groups every unit declared, sorted by rank (as ``load`` sorts them)."""
        if not self.groups:
            return pl.DataFrame(schema=PROCESS_GROUPS_SCHEMA)
        return pl.concat(self.groups, how="vertical").sort("rank", maintain_order=True)

    def files_frame(self) -> pl.DataFrame:
        """Return the file table of every unit, in unit order."""
        return pl.DataFrame([row for unit in self.files for row in unit], schema=FILES_SCHEMA, orient="row")

    def all_warnings(self) -> tuple[str, ...]:
        """Return the load warnings of every unit, in unit order, then the clock warning.

        A warning several units give (the ranks of one Nsight Systems export, read in one unit each,
        warn about their file alike) is kept once, where it first comes.
        """
        note = () if self.clock_note is None else (self.clock_note,)
        return (*dict.fromkeys(w for unit in self.warnings for w in unit), *note)

    def held_units(self) -> tuple[tuple[Unit, tuple[int, ...]], ...]:
        """Return each unit with the ranks of its events (a merged unit once), for ``load_ranks``."""
        return tuple((unit, ranks) for unit, ranks in self.units if ranks)


def run_units(
    units: list[Unit],
    task: Callable[[Unit], R],
    sink: Sink[R],
    executor: Executor,
    progress: Callable[[str, int, int], None] | None,
) -> Collected:
    """Run ``task`` over the units, giving each result to ``sink`` as it comes; check the files together.

    As :func:`timeline.trace.load` checks a run's files: rank claims, ranks within one world size,
    clocks that agree (the warning is :attr:`Collected.clock_note`).

    Raises
    ------
    TimelineError
        A unit's bad input (the first in unit order), several Horovod timelines, a rank claimed twice,
        a rank outside the world, world sizes that disagree.
    """
    report = named_progress(progress, [unit.paths[0].name for unit in units])

    collected = Collected()
    for unit, result in zip(units, executor.map(task, units, progress=report), strict=True):
        collected.add(unit, result)
        sink.add(result)
        del result
    check_claims(collected.horovod, collected.claims)
    for group in _shared_rank_groups(collected.event_ranks):
        # e.g. a Horovod timeline (every worker's collectives) beside per-rank profiler traces
        ranks = frozenset(rank for i in group for rank in collected.event_ranks[i])
        paths = tuple(p for i in group for p in collected.units[i][0].paths)
        merged = replace(collected.units[group[0]][0], paths=paths, workers=1)
        result = task(merged)
        collected.regroup(group, merged, result)
        sink.regroup(group, ranks, result)
    collected.check_files()
    return collected


@dataclass(frozen=True, kw_only=True)
class _PackedReduction(UnitReduction):
    """A :class:`RankReduction` packed by the task itself (:func:`_pack`), with its overlap's warnings."""

    packed: bytes
    overlap_warnings: tuple[str, ...] = ()


def _reduce_packed(unit: Unit) -> _PackedReduction:
    """:func:`reduce_unit`, its frames packed in the task (a tenth of the bytes to send, in parallel)."""
    reduction = reduce_unit(unit)
    shared = {f.name: getattr(reduction, f.name) for f in fields(UnitReduction)}  # what every task returns
    return _PackedReduction(**shared, packed=_pack(reduction), overlap_warnings=reduction.overlap.warnings)


class _OverlapViews:
    """The overlap views (and communication events) of every unit, kept packed until the end.

    Each task pickles and compresses its unit's frames (ISA-L deflate, level 1; 0.2 ms): a rank's
    few hundred rows of collectives and communication events take about a tenth of their size that
    way, to send and to keep, in one allocation. At the end they are unpacked a block of units at a
    time, the units in order of their first rank, so that the rows come out sorted by rank when each
    unit holds one rank. Every rank's rows come from one unit, so stacking the units' rows and
    sorting them by rank, stably, gives the rows of the in-memory analysis in its order.
    """

    def __init__(self) -> None:
        self.packed: list[bytes | None] = []
        self.first_rank: list[int] = []
        self.warnings: list[tuple[str, ...]] = []
        self.parts: list[DiagnosisParts | None] = []

    def add(self, result: _PackedReduction) -> None:
        self.packed.append(result.packed)
        self.warnings.append(result.overlap_warnings)
        self.first_rank.append(result.event_ranks[0] if result.event_ranks else -1)

    def regroup(self, group: Sequence[int], ranks: frozenset[int], result: _PackedReduction) -> None:
        first, *rest = group
        self.packed[first] = result.packed
        self.warnings[first] = result.overlap_warnings
        self.first_rank[first] = result.event_ranks[0] if result.event_ranks else -1
        for i in rest:
            self.packed[i], self.warnings[i] = None, ()

    def stacked(self) -> dict[str, pl.DataFrame]:
        """Return every view of every unit, sorted by rank; the packed bytes are released as they go."""
        order = sorted(range(len(self.packed)), key=lambda i: self.first_rank[i])
        blocks: dict[str, list[pl.DataFrame]] = {view: [] for view in _VIEWS}
        self.parts = [None] * len(self.packed)
        for begin in range(0, len(order), _BLOCK_UNITS):
            unpacked = []
            for i in order[begin : begin + _BLOCK_UNITS]:
                data, self.packed[i] = self.packed[i], None
                if data is not None:
                    frames, self.parts[i] = _unpack(data)
                    unpacked.append(frames)
            for k, view in enumerate(_VIEWS):
                if unpacked:
                    blocks[view].append(pl.concat([u[k] for u in unpacked], how="vertical", rechunk=True))
            del unpacked
        stacked = {}
        for view in _VIEWS:
            frames = blocks.pop(view)
            frame = pl.concat(frames, how="vertical") if len(frames) > 1 else frames[0]
            del frames
            sorted_frame = (
                frame if frame.get_column("rank").is_sorted() else frame.sort("rank", maintain_order=True)
            )
            stacked[view] = sorted_frame
        return stacked


def _pack(reduction: RankReduction) -> bytes:
    frames = [_view(reduction, view) for view in _VIEWS]
    payload = (frames, reduction.graph_parts)
    return bytes(isal_zlib.compress(pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL), 1))


def _unpack(data: bytes) -> tuple[list[pl.DataFrame], DiagnosisParts | None]:
    payload: tuple[list[pl.DataFrame], DiagnosisParts | None] = pickle.loads(isal_zlib.decompress(data))
    return payload


def _view(reduction: RankReduction, view: str) -> pl.DataFrame:
    frame: pl.DataFrame = (
        reduction.communication if view == "communication" else getattr(reduction.overlap, view)
    )
    return frame


def analyze_files(
    paths: PathsLike,
    *,
    executor: Executor | None = None,
    options: ImportOptions | None = None,
    rank: int | None = None,
    rank_regex: str | None = None,
    communication: bool = True,
    graph: bool = False,
    selection: Selection | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> Analysis:
    """Analyse traces rank by rank on an executor; the same results as loading them all at once.

    Parameters
    ----------
    paths
        Files, directories, glob patterns, or Parquet datasets written by ``timeline convert``
        (``OUT_DIR/rank=N/part-0.parquet``).
    executor
        Where the per-rank tasks run; default: a :class:`LocalExecutor` over all cores (in-process
        for less than 24 MiB of input).
    options
        Classification rules and whether to keep ``python_function`` events.
    rank, rank_regex
        As for :func:`timeline.trace.load`.
    communication
        Keep every rank's communication events (:attr:`Analysis.communication`), which the analyses
        that compare ranks read; ``False`` when only the overlap is wanted: the driver then holds the
        overlap rows alone (an empty frame in their place).
    graph
        Also keep each unit's what-if graph parts of the iterations the diagnosis replays
        (:attr:`Analysis.graph_parts`): ``Analysis.graph()`` then equals the graph the in-memory
        diagnosis builds (:func:`timeline.diagnosis.diagnosis.diagnosis_graph`).
    selection
        Keep only these ranks and iterations (:mod:`timeline.selection`), in each task.
    progress
        Called as ``progress(label, done, total)`` after each task.

    Returns
    -------
    Analysis
        ``overlap`` equals ``compute_overlap(load(paths).events)``; ``files`` and ``warnings`` equal
        the loaded trace's. Each task's results are added as it ends, so the driver holds the
        reduced results and never a rank's events it did not load itself.

    Raises
    ------
    TimelineError
        Bad input, as :func:`timeline.trace.load` raises it.

    Examples
    --------
    >>> from timeline.execution import RayExecutor, analyze_files  # doctest: +SKIP
    >>> analysis = analyze_files("traces/", executor=RayExecutor("auto"))  # doctest: +SKIP
    >>> analysis.overlap.ranks.select("rank", "exposed_comm_ratio")  # doctest: +SKIP
    """
    units = plan_inputs(paths, options=options, rank=rank, rank_regex=rank_regex)
    executor = executor if executor is not None else default_executor(units)
    chosen = selection if selection is not None else Selection()
    units = [
        replace(u, communication=communication, graph=graph, selection=chosen)
        for u in local_unit(units, executor)
    ]
    views = _OverlapViews()
    collected = run_units(units, _reduce_packed, views, executor, progress)
    return _analysis_of(collected, views, graph=graph)


def _analysis_of(collected: Collected, views: _OverlapViews, *, graph: bool) -> Analysis:
    """Return the :class:`Analysis` of the units run: their views stacked, their files and warnings."""
    stacked = views.stacked()
    parts = tuple(p for p in views.parts if p is not None) if graph else None
    return Analysis(
        overlap=Overlap(
            ranks=stacked["ranks"],
            iterations=stacked["iterations"],
            collectives=stacked["collectives"],
            windows=stacked["windows"],
            comm=stacked["comm"],
            warnings=tuple(w for unit in views.warnings for w in unit),
        ),
        files=collected.files_frame(),
        warnings=collected.all_warnings(),
        communication=stacked["communication"],
        units=collected.held_units(),
        clocks=collected.clocks_frame(),
        clock_note=collected.clock_note,
        groups=collected.groups_frame(),
        graph_parts=parts,
    )


def default_executor(units: Sequence[Unit]) -> Executor:
    """All cores, or this process alone for input too small for workers to pay (:mod:`timeline.policy`)."""
    small = small_input([p for u in units for p in u.paths])
    return LocalExecutor(1 if small else None)


def local_unit(units: list[Unit], executor: Executor) -> list[Unit]:
    """One unit on the local executor runs here: a large trace's chunks are decoded by all its workers."""
    if len(units) == 1 and isinstance(executor, LocalExecutor):
        return [replace(units[0], workers=executor.workers)]
    return units
