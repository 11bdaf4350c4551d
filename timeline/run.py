"""One run: what the user gave, read once, and every fact about it, computed once when first asked for.

:class:`Run` is what every command, the report, the budgets, the diff, the notebook view and
:func:`timeline.analyze` read. It is built from :class:`Inputs` (what to read, and how) and
:class:`RunOptions` (what shapes the answers: clock alignment, the link, dimension labels, ranks per
node, the codec's speed). It reads in memory or rank by rank (local processes, Ray) as
:mod:`timeline.policy` decides, or as asked; the facts are the same either way. Each fact is a
cached property computed from the run's other facts, never with arguments of its own: the world
size, which clocks compare, the one matching of collectives (groups, clocks and world size
together), the stragglers, the utilisation, the exposure per dimension, the what-if graphs and the
diagnosis.

Nothing here imports polars at import time: a command decides how to read its inputs (and starts the
workers of a rank-by-rank analysis) before its process imports polars and the analyses.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

from timeline import policy
from timeline.errors import TimelineError, UsageError
from timeline.importers.result import ImportOptions
from timeline.importers.rules import ClassificationRules
from timeline.inputs import input_paths
from timeline.selection import Selection

if TYPE_CHECKING:
    import polars as pl

    from timeline.analysis.collectives import CollectiveMatch
    from timeline.analysis.overlap import Overlap
    from timeline.analysis.stragglers import Stragglers
    from timeline.diagnosis.verdict import Diagnosis
    from timeline.execution.graphs import GraphAnalysis
    from timeline.execution.reduce import Analysis
    from timeline.executors import Executor
    from timeline.importers.cache import Cache
    from timeline.render.html import Result
    from timeline.results.collectives import CollectivesReport
    from timeline.results.summary import Summary
    from timeline.trace import Trace
    from timeline.whatif.graph import TraceGraph

__all__ = [
    "Inputs",
    "Needs",
    "Run",
    "RunOptions",
    "align_events",
    "analyze",
    "make_runner",
    "partial_run_note",
]

Progress = Callable[[str, int, int], None]
"""Called as ``progress(label, done, total)`` after each file or rank."""
Warn = Callable[[Sequence[str]], None]
"""Called with the load warnings as soon as they are known."""


class _Loaded(Protocol):
    """What a rank-by-rank function returns: at least the load warnings."""

    @property
    def warnings(self) -> tuple[str, ...]:
        """The load warnings."""
        ...


T = TypeVar("T", bound=_Loaded)


@dataclass(frozen=True, kw_only=True)
class Inputs:
    """What a run reads, and how: paths and the loading options shared by every command.

    Attributes
    ----------
    paths
        Files, directories, glob patterns, Parquet files and datasets.
    rank, rank_regex
        As for :func:`timeline.load`.
    comm_kernels
        Extra regexes for communication kernels.
    include_python
        Keep ``python_function`` events.
    executor
        ``local`` or ``ray``: read rank by rank on it (default: as :mod:`timeline.policy` decides).
    ray_address
        The Ray cluster to run on (implies ``executor="ray"``).
    iteration_range
        ``--iteration-range``: the regex whose NVTX ranges are an Nsight Systems export's iterations.
    cache
        Where each trace file's frame is cached (:func:`timeline.importers.cache.open_cache`), in
        memory and rank by rank alike; None: no cache.
    """

    paths: Sequence[str]
    rank: int | None = None
    rank_regex: str | None = None
    comm_kernels: Sequence[str] = ()
    include_python: bool = False
    executor: str | None = None
    ray_address: str | None = None
    iteration_range: str | None = None
    cache: Cache | None = None

    @property
    def rank_by_rank(self) -> bool:
        """Whether they are read rank by rank (:func:`timeline.policy.reads_rank_by_rank`)."""
        return policy.reads_rank_by_rank(
            input_paths(self.paths), executor=self.executor, ray_address=self.ray_address
        )

    @property
    def options(self) -> ImportOptions:
        """The importers' options."""
        rules = ClassificationRules(extra_comm_kernels=tuple(self.comm_kernels))
        return ImportOptions(
            rules=rules,
            include_python=self.include_python,
            iteration_range=self.iteration_range,
            cache=self.cache,
        )

    def load(self, *, progress: Progress | None = None, overlap_only: bool = False) -> Trace:
        """Load every event, in memory (:func:`timeline.load`).

        ``overlap_only``: only the events the overlap analysis reads (the same overlap, a smaller
        frame; the file table still counts every event).
        """
        from timeline.trace import load

        options = self.options
        return load(
            input_paths(self.paths),
            rank=self.rank,
            rank_regex=self.rank_regex,
            rules=options.rules,
            include_python=options.include_python,
            progress=progress,
            overlap_only=overlap_only,
            iteration_range=options.iteration_range,
            cache=self.cache,
        )

    def runner(self, *, preload: str) -> Executor:
        """Return the executor of a rank-by-rank analysis, its helper processes already starting.

        Local helpers start importing ``preload`` (the module of the tasks) while this process
        imports polars and the analyses: done first thing, that hides most of a helper's start.
        """
        from timeline.executors import LocalExecutor
        from timeline.inputs import plan_inputs

        executor = make_runner(self.executor, self.ray_address)
        if isinstance(executor, LocalExecutor):
            try:
                several = len(plan_inputs(input_paths(self.paths), rank=self.rank)) > 1
            except TimelineError:
                several = False  # the analysis reports it
            if several:
                executor.start(preload=preload)
        return executor

    def run(self, run: Callable[..., T], *, executor: Executor, progress: Progress | None = None) -> T:
        """Call a rank-by-rank function (``analyze_files``, ``graph_files``) on the inputs."""
        return run(
            input_paths(self.paths),
            executor=executor,
            options=self.options,
            rank=self.rank,
            rank_regex=self.rank_regex,
            progress=progress,
        )


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """What shapes a run's answers beyond its inputs: the same options give the same facts through every door.

    Attributes
    ----------
    align
        Put every rank's events on rank 0's clock first (ranks on different hosts: ``--align``).
    link_gbps
        The link's one-direction bandwidth in Gbit/s (``--link-gbps``): link utilisation, the
        collectives faster than the link, ``slow_link`` and ``link_underused``.
    dimensions
        Process group description → dimension label (``--dimension``).
    gpus_per_node
        Ranks per node (``--gpus-per-node``), else the hosts the traces name.
    codec_gbps
        The compression codec's throughput (encode and decode, each), for ``compression``.
    ranks, iterations
        Keep only these ranks' events and these iterations' windows (``--ranks``, ``--iterations``;
        None: all), in memory and rank by rank alike (:mod:`timeline.selection`).
    """

    align: bool = False
    link_gbps: float | None = None
    dimensions: Mapping[str, str] = field(default_factory=dict)
    gpus_per_node: int | None = None
    codec_gbps: float | None = None
    ranks: tuple[int, ...] | None = None
    iterations: tuple[int, ...] | None = None

    @property
    def selection(self) -> Selection:
        """The ranks and iterations kept."""
        return Selection(ranks=self.ranks, iterations=self.iterations)


@dataclass(frozen=True, kw_only=True)
class Needs:
    """Which facts a command will read, so that a rank-by-rank read keeps what they are computed from.

    Only the speed depends on it: a fact asked for that a rank-by-rank read did not keep is
    computed all the same, from the inputs read again. In memory every event is kept, except with
    ``communication=False`` (the events the overlap reads, for a command that compares no ranks).

    Attributes
    ----------
    communication
        The communication events (matching, alignment, the exposure per dimension, the diagnosis).
    graph
        The diagnosis' what-if graph parts and launch gaps (rank by rank: built in each task).
    every_event
        Every event of every rank (the report draws them): read in memory, unless an executor or a
        Ray address is given.
    """

    communication: bool = True
    graph: bool = False
    every_event: bool = False


@dataclass(frozen=True)
class _Read:
    """The inputs as read: the trace, its overlap, the clock offsets, and rank by rank the reduction."""

    trace: Trace
    overlap: Overlap
    offsets: pl.DataFrame | None
    analysis: Analysis | None = None


class Run:
    """One run: its inputs, its options, and every fact about it, each computed once.

    Build it with :func:`analyze` (the library) or ``Run(inputs, options)``; the inputs are read
    when a fact first needs them (:meth:`read`), in memory or rank by rank as
    :attr:`rank_by_rank` says.

    Parameters
    ----------
    inputs
        What to read, and how.
    options
        What shapes the answers (:class:`RunOptions`).
    needs
        Which facts will be read (:class:`Needs`): what a rank-by-rank read keeps.
    progress
        Called as ``progress(label, done, total)`` after each file or rank while reading.
    warn
        Called with the load warnings as soon as the inputs are read (before anything else can fail).
    """

    def __init__(
        self,
        inputs: Inputs,
        options: RunOptions | None = None,
        *,
        needs: Needs | None = None,
        progress: Progress | None = None,
        warn: Warn | None = None,
    ) -> None:
        self.inputs = inputs
        self.options = options if options is not None else RunOptions()
        self.needs = needs if needs is not None else Needs()
        asked = inputs.executor is not None or inputs.ray_address is not None
        in_memory = not inputs.paths or (self.needs.every_event and not asked)
        self.rank_by_rank = False if in_memory else inputs.rank_by_rank
        self._progress = progress
        self._warn = warn

    @classmethod
    def from_trace(cls, trace: Trace, options: RunOptions | None = None) -> Run:
        """Return the run of a trace already loaded in memory (:func:`timeline.load`, a test's builder).

        ``options.align`` aligns its clocks as a read would.
        """
        from timeline.analysis.overlap import compute_overlap

        run = cls(Inputs(paths=[]), options)
        run.rank_by_rank = False
        selection = run.options.selection
        if not selection.everything:
            run.__dict__["_read"] = run._selected(trace)
            return run
        offsets = None
        if run.options.align:
            trace, offsets = align_events(trace)
        run.__dict__["_read"] = _Read(trace=trace, overlap=compute_overlap(trace.events), offsets=offsets)
        return run

    def __repr__(self) -> str:
        paths = ", ".join(str(p) for p in self.inputs.paths[:3])
        more = f", … ({len(self.inputs.paths)} paths)" if len(self.inputs.paths) > 3 else ""
        road = "rank by rank" if self.rank_by_rank else "in memory"
        return f"Run([{paths}{more}], {road})"

    # ---------------------------------------------------------------- the read

    def read(self) -> Run:
        """Read the inputs now (they are read when a fact first needs them); return the run."""
        _ = self._read
        return self

    @cached_property
    def _read(self) -> _Read:
        read = self._by_rank(self.needs) if self.rank_by_rank else self._in_memory(self.needs)
        if self._warn is not None:
            self._warn(read.trace.warnings)
        selection = self.options.selection
        if not selection.everything:
            from timeline.analysis.selection import check_selected

            check_selected(selection, ranks=_traced_ranks(read.trace.files), windows=read.overlap.windows)
        if read.overlap.ranks.height == 0:
            _refuse_nothing_measured(read.trace)
        return read

    def _in_memory(self, needs: Needs) -> _Read:
        # without the cross-rank analyses, CPU operators of GPU ranks (often half the events) are skipped
        trace = self.inputs.load(
            progress=self._progress, overlap_only=not (needs.communication or self.options.align)
        )
        if not self.options.selection.everything:
            return self._selected(trace)
        from timeline.analysis.overlap import compute_overlap

        offsets = None
        if self.options.align:
            trace, offsets = align_events(trace)
        return _Read(trace=trace, overlap=compute_overlap(trace.events), offsets=offsets)

    def _selected(self, trace: Trace) -> _Read:
        """Return the read of the selected ranks and iterations of a trace, as the rank-by-rank tasks do.

        The overlap is measured on all the events, then restricted
        (:func:`timeline.analysis.selection.restrict`); the clocks are aligned on the events kept, as
        they are rank by rank.
        """
        from timeline.analysis.overlap import compute_overlap
        from timeline.analysis.selection import restrict
        from timeline.execution.reduce import shift_overlap

        events, overlap = restrict(trace.events, compute_overlap(trace.events), self.options.selection)
        trace, offsets = replace(trace, events=events), None
        if self.options.align:
            trace, offsets = align_events(trace)
            overlap = shift_overlap(overlap, offsets)
        return _Read(trace=trace, overlap=overlap, offsets=offsets)

    def _by_rank(self, needs: Needs) -> _Read:
        executor = self.inputs.runner(preload="timeline.execution.reduce")
        from timeline.execution.reduce import shift_overlap

        align = self.options.align
        analysis = self.inputs.run(
            _reducer(
                communication=needs.communication or align or needs.graph,
                graph=needs.graph,
                selection=self.options.selection,
            ),
            executor=executor,
            progress=self._progress,
        )
        trace, overlap, offsets = analysis.as_trace(), analysis.overlap, None
        if align:
            trace, offsets = align_events(trace)
            overlap = shift_overlap(overlap, offsets)
        return _Read(trace=trace, overlap=overlap, offsets=offsets, analysis=analysis)

    @cached_property
    def _complete(self) -> _Read:
        """The read with every event the facts need: the read itself, or the inputs read again with more."""
        read = self._read
        full = Needs(communication=True, graph=self.needs.graph)
        if self.rank_by_rank or self.needs.communication or self.options.align:
            return read
        return self._in_memory(full)

    @cached_property
    def _with_parts(self) -> _Read:
        """Rank by rank: a read whose tasks returned the diagnosis' graph parts (read again if needed)."""
        read = self._read
        if read.analysis is None or read.analysis.graph_parts is not None:
            return read
        return self._by_rank(Needs(communication=True, graph=True))

    @property
    def trace(self) -> Trace:
        """The trace: in memory every event; rank by rank the communication events only.

        The file table and warnings are always the full load's.
        """
        return self._read.trace

    @property
    def overlap(self) -> Overlap:
        """The overlap analysis (after alignment with ``align``)."""
        return self._read.overlap

    @property
    def offsets(self) -> pl.DataFrame | None:
        """The clock offsets (``align``), else None."""
        return self._read.offsets

    @property
    def analysis(self) -> Analysis | None:
        """Rank by rank: the per-rank reduction (to load some ranks in full again); in memory None."""
        return self._read.analysis

    @property
    def events(self) -> pl.DataFrame:
        """Every event the cross-rank facts read (the communication events rank by rank)."""
        return self._complete.trace.events

    # ---------------------------------------------------------------- facts of the job

    @property
    def files(self) -> pl.DataFrame:
        """One row per input file (:data:`timeline.schema.FILES_SCHEMA`), whichever read gave it.

        Rank by rank, ``timeline whatif`` reads the graph parts alone: their file table is the same.
        """
        if self.rank_by_rank and "_read" not in self.__dict__ and "_graph_read" in self.__dict__:
            return self._graph_read.files
        return self.trace.files

    @cached_property
    def world_size(self) -> int | None:
        """The job's world size the profiler traces record (``distributedInfo``), or None."""
        from timeline.trace import world_size_of_files

        return world_size_of_files(self.files)

    @cached_property
    def traced_ranks(self) -> list[int]:
        """The ranks the input files hold, sorted."""
        return _traced_ranks(self.files)

    @cached_property
    def partial(self) -> str | None:
        """Why the run is partial (fewer traced ranks than the job's world size), else None.

        :func:`partial_run_note` of the run's file table; one of :attr:`warnings`: every command
        that reads the run says it.
        """
        return partial_run_note(self.files)

    @property
    def own_warnings(self) -> tuple[str, ...]:
        """The run's own warnings, beside the load's: a partial run, the ranks and iterations selected."""
        notes: tuple[str, ...] = () if self.partial is None else (self.partial,)
        selection = self.options.selection
        if not selection.everything:
            notes += (
                f"{selection.describe()} selected (--ranks, --iterations): every figure is of the "
                "selection only",
            )
        return notes

    @property
    def warnings(self) -> tuple[str, ...]:
        """The load warnings, then the run's own (a partial run)."""
        return (*self.trace.warnings, *self.own_warnings)

    @cached_property
    def clocks(self) -> pl.DataFrame:
        """Which ranks' times compare (:func:`~timeline.analysis.groups.shared_clocks`).

        The ranks of one node, and after alignment every rank it moved; none when the load found
        clocks that cannot be compared (``trace.clock_note``).
        """
        from timeline.analysis.groups import shared_clocks

        trace = self.trace
        return shared_clocks(
            trace.files,
            gpus_per_node=self.options.gpus_per_node,
            offsets=self.offsets,
            comparable=trace.clock_note is None,
        )

    @cached_property
    def nodes(self) -> pl.DataFrame:
        """``rank`` → ``node`` (:func:`~timeline.analysis.groups.nodes_of`)."""
        from timeline.analysis.groups import nodes_of

        return nodes_of(self.trace.files, gpus_per_node=self.options.gpus_per_node)

    @cached_property
    def has_groups(self) -> bool:
        """Whether the trace says anything of process groups: declared groups or events that name one."""
        from timeline.results.dimensions import has_groups

        return has_groups(self._complete.trace)

    @cached_property
    def kineto_communication(self) -> bool:
        """Whether profiler traces hold communication events (what the matching reads)."""
        import polars as pl

        events = self.events
        return bool(
            events.filter((pl.col("source") == "kineto") & (pl.col("kind") == "communication")).height
        )

    # ---------------------------------------------------------------- collectives

    @cached_property
    def matched(self) -> CollectiveMatch:
        """The one matching of the collectives across ranks (no rows without profiler communication).

        :func:`~timeline.analysis.collectives.match_collectives` within the groups the traces
        declare, with the clocks that compare, the job's world size, the link, the dimension labels
        and the nodes; when the ranks' clocks disagree, the figures that compare ranks' times are
        left out (:func:`~timeline.plausibility.without_cross_rank_times`).
        """
        from timeline.analysis.collectives import match_collectives
        from timeline.plausibility import without_cross_rank_times

        trace = self._complete.trace
        match = match_collectives(
            trace.events,
            windows=self.overlap.windows,
            link_gbps=self.options.link_gbps,
            world_size=self.world_size,
            groups=trace.groups,
            overrides=self.options.dimensions,
            nodes=self.nodes,
            clocks=self.clocks,
        )
        return match if trace.clock_note is None else without_cross_rank_times(match)

    @cached_property
    def stragglers(self) -> Stragglers:
        """The ranks the others wait for, per iteration and overall."""
        from timeline.analysis.stragglers import find_stragglers
        from timeline.plausibility import without_stragglers

        found = find_stragglers(self.matched, iteration_overlap=self.overlap.iterations)
        return found if self.trace.clock_note is None else without_stragglers(found)

    @cached_property
    def utilisation(self) -> pl.DataFrame:
        """Bus bandwidth and link utilisation per iteration of the matched collectives."""
        from timeline.analysis.collectives import compute_iteration_utilisation

        overlap = self.overlap
        return compute_iteration_utilisation(
            self.matched.collectives,
            link_gbps=self.options.link_gbps,
            windows=overlap.windows,
            iteration_overlap=overlap.iterations,
        )

    @cached_property
    def collective_costs(self) -> pl.DataFrame:
        """The α-β cost of each collective kind per process group, fitted from the matched transfers.

        :func:`~timeline.analysis.collective_costs.fit_collective_costs` of the transfer part of each
        matched collective (after its last rank arrived), with the run's link when given.
        """
        from timeline.analysis.collective_costs import fit_collective_costs, transfer_points

        return fit_collective_costs(transfer_points(self.matched), link_gbps=self.options.link_gbps)

    # ---------------------------------------------------------------- dimensions

    @cached_property
    def labels(self) -> pl.DataFrame:
        """The dimension and group description of each communication event the overlap measures."""
        from timeline.analysis.dimensions import communication_labels

        trace = self._complete.trace
        return communication_labels(
            trace.events,
            groups=trace.groups,
            overrides=self.options.dimensions,
            clocks=self.clocks,
            windows=self.overlap.windows,
        )

    @cached_property
    def dimension_exposure(self) -> pl.DataFrame | None:
        """The communication per dimension × iteration × rank, or None when no event names a group."""
        if not self.has_groups:
            return None
        from timeline.analysis.dimensions import exposure_by

        return exposure_by(self.overlap, self.labels, by="dimension")

    @cached_property
    def description_exposure(self) -> pl.DataFrame | None:
        """The communication per group description × iteration × rank, or None when no event names a group."""
        if not self.has_groups:
            return None
        from timeline.analysis.dimensions import exposure_by

        return exposure_by(self.overlap, self.labels, by="pg_desc")

    # ---------------------------------------------------------------- what-if and diagnosis

    @cached_property
    def _graph_read(self) -> GraphAnalysis:
        """Rank by rank: every rank's what-if graph parts, from a read of their own (no overlap needed)."""
        executor = self.inputs.runner(preload="timeline.execution.graphs")
        from functools import partial

        from timeline.execution.graphs import graph_files

        task = partial(graph_files, selection=self.options.selection)
        parts = self.inputs.run(task, executor=executor, progress=self._progress)
        if self._warn is not None and "_read" not in self.__dict__:
            self._warn(parts.warnings)
        return parts

    @cached_property
    def graph(self) -> TraceGraph:
        """The what-if graph of the whole run (``timeline whatif``; rank by rank from per-rank parts).

        Raises
        ------
        TimelineError
            No rank with compute events.
        """
        options = self.options
        if self.rank_by_rank:
            return self._graph_read.graph(link_gbps=options.link_gbps, overrides=options.dimensions)
        trace = self._complete.trace  # read first: nothing imports polars before the load
        from timeline.whatif.graph import trace_graph

        # the selected iterations' windows, found on all the events (rank by rank: in each task)
        windows = self.overlap.windows if options.iterations is not None else None
        return trace_graph(trace, link_gbps=options.link_gbps, overrides=options.dimensions, windows=windows)

    @cached_property
    def diagnosis(self) -> Diagnosis:
        """What limits the job and what would fix it (:func:`timeline.diagnosis.diagnose`)."""
        from timeline.diagnosis.diagnosis import diagnose

        options = self.options
        graph: Callable[[], TraceGraph] | None = None
        gaps = None
        read = self._with_parts if self.rank_by_rank else self._complete
        analysis = read.analysis
        if analysis is not None:
            offsets = self.offsets
            graph = lambda: analysis.graph(link_gbps=options.link_gbps, offsets=offsets)  # noqa: E731
            gaps = analysis.launch_gaps(offsets=offsets)
        return diagnose(
            read.trace,
            self.overlap,
            match=self.matched if self.kineto_communication else None,
            link_gbps=options.link_gbps,
            graph=graph,
            codec_gbps=options.codec_gbps,
            complete=not self.rank_by_rank,
            launch_gaps=gaps,
            dimensions=options.dimensions,
            exposure=self.dimension_exposure,
            clocks=self.clocks,
        )

    # ---------------------------------------------------------------- results

    def summary_data(self, *, top: int = 10, findings: bool = True) -> Summary:
        """Return the summary of ``timeline analyze`` (:class:`~timeline.results.summary.Summary`)."""
        from timeline.results.summary import build_summary

        return build_summary(self, top=top, findings=findings)

    def summary(self, *, top: int = 10, findings: bool = True) -> Result:
        """Return the summary ``timeline analyze`` prints, shown as HTML tables in a notebook."""
        from timeline.render.html import Result

        return Result(self.summary_data(top=top, findings=findings))

    def collectives_data(self, *, rank_rows: bool = True) -> CollectivesReport:
        """Return the report ``timeline collectives`` prints (its ``--json`` layout).

        Raises
        ------
        UsageError
            No communication events in the traces.
        """
        from timeline.results.collectives import build_collectives_report

        return build_collectives_report(self, rank_rows=rank_rows)

    def collectives(self) -> Result:
        """Return the report ``timeline collectives`` prints, shown as HTML tables in a notebook.

        Raises
        ------
        UsageError
            No communication events in the traces.
        """
        from timeline.render.html import Result

        return Result(self.collectives_data())

    def _repr_html_(self) -> str:
        """Return the summary as HTML tables: what a Jupyter notebook shows for a run."""
        return self.summary()._repr_html_()

    def full_ranks(self, ranks: Sequence[int]) -> Trace:
        """Return every event of these ranks (aligned as the rest): the trace itself in memory."""
        analysis = self.analysis
        if analysis is None:
            return self._complete.trace
        loaded = analysis.load_ranks(list(ranks))
        if self.offsets is None:
            return loaded
        from timeline.analysis.alignment import apply_clock_offsets

        return replace(loaded, events=apply_clock_offsets(loaded.events, self.offsets))

    def all_events(self) -> Trace:
        """Return every event of every rank (rank by rank: read again, in this process)."""
        if self.analysis is None:
            return self._complete.trace
        return self.full_ranks(self.overlap.ranks.get_column("rank").to_list())


def _traced_ranks(files: pl.DataFrame) -> list[int]:
    ranks: list[int] = sorted(files.get_column("rank").unique().drop_nulls().to_list())
    return ranks


def _files_in_folder(paths: Sequence[str]) -> str:
    """``FOLDER: the N input files (a.json, b.json, …)``: where several inputs are, for a message."""
    import os

    from timeline.errors import shown

    folder = os.path.commonpath([str(Path(p).absolute().parent) for p in paths])
    names = [shown(Path(p).name) for p in paths]
    listed = ", ".join(names[:3]) + (", …" if len(names) > 3 else "")
    return f"{shown(folder)}: the {len(paths)} input files ({listed})"


def _refuse_nothing_measured(trace: Trace) -> None:
    """Refuse inputs in which no rank has anything to measure (an error, never "measured on nothing").

    Raises
    ------
    TraceContentError
        Naming the file (or how many), what its events are, and what to give instead.
    """
    from timeline.errors import TraceContentError, shown

    paths = trace.files.get_column("path").to_list()
    where = shown(paths[0]) if len(paths) == 1 else _files_in_folder(paths)
    kinds = sorted({str(kind) for kind in trace.events.get_column("kind").unique().to_list()})
    held = f"its {trace.events.height:,} events are of kinds {', '.join(kinds)}" if kinds else "no events"
    msg = (
        f"{where}: no rank has compute, communication or memory copies to measure ({held}); give the "
        "profiler traces of the ranks, or a Horovod timeline that holds its operations' phases"
    )
    raise TraceContentError(msg)


def partial_run_note(files: pl.DataFrame) -> str | None:
    """Return why a run is partial, from its file table, or None when its traces hold every rank.

    A run is partial when its profiler traces record a world size (``distributedInfo``) larger than
    the number of ranks the files hold; a run with a Horovod timeline never is (the timeline records
    every rank's negotiation and wire phases).
    """
    from timeline.trace import world_size_of_files

    world, ranks = world_size_of_files(files), _traced_ranks(files)
    if world is None or not ranks or len(ranks) >= world:
        return None
    if "horovod" in files.get_column("format").to_list():
        return None
    return (
        f"partial run: the traces hold {len(ranks)} of the job's {world} ranks ({_rank_list(ranks)}); "
        "figures that compare ranks (collectives, stragglers, the diagnosis) rest on the traced ranks only"
    )


def _reducer(*, communication: bool, graph: bool, selection: Selection) -> Callable[..., Analysis]:
    """Return :func:`~timeline.execution.reduce.analyze_files` with what its tasks keep."""
    from functools import partial

    from timeline.execution.reduce import analyze_files

    return partial(analyze_files, communication=communication, graph=graph, selection=selection)


def _rank_list(ranks: Sequence[int]) -> str:
    """Return ranks as ``0-3, 5, 7`` (runs of consecutive ranks as ranges)."""
    parts: list[str] = []
    start = prev = ranks[0]
    for rank in [*ranks[1:], None]:
        if rank is not None and rank == prev + 1:
            prev = rank
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if rank is not None:
            start = prev = rank
    return ", ".join(parts)


def analyze(
    paths: Sequence[str | Path] | str | Path,
    *,
    rank: int | None = None,
    rank_regex: str | None = None,
    comm_kernels: Sequence[str] = (),
    include_python: bool = False,
    executor: str | None = None,
    ray_address: str | None = None,
    iteration_range: str | None = None,
    align: bool = False,
    link_gbps: float | None = None,
    dimensions: Mapping[str, str] | None = None,
    gpus_per_node: int | None = None,
    codec_gbps: float | None = None,
    ranks: Sequence[int] | None = None,
    iterations: Sequence[int] | None = None,
    progress: Progress | None = None,
    cache: bool | str | Path | Cache = True,
) -> Run:
    """Read and analyse traces: the run ``timeline analyze`` prints, in memory or rank by rank.

    The same :class:`Run` every command reads: its facts (:attr:`Run.overlap`,
    :attr:`Run.matched`, :attr:`Run.diagnosis`, …) and results (:meth:`Run.summary`,
    :meth:`Run.collectives`) are the same in memory and rank by rank.

    Parameters
    ----------
    paths
        Files, directories, glob patterns, Parquet files and datasets.
    rank, rank_regex, comm_kernels, include_python, iteration_range
        As for :func:`timeline.load` (``comm_kernels``: extra communication kernel regexes;
        ``iteration_range``: the NVTX ranges that are an Nsight Systems export's iterations).
    executor, ray_address
        Read rank by rank on ``local`` processes or ``ray`` (a Ray address implies it).
    align, link_gbps, dimensions, gpus_per_node, codec_gbps, ranks, iterations
        The :class:`RunOptions`.
    progress
        Called as ``progress(label, done, total)`` after each file or rank.
    cache
        Read each trace file's frame from the cache, and write it there after its first read
        (:mod:`timeline.importers.cache`): True the default folder, a path another, False none. A
        folder that cannot be written gives a :class:`~timeline.importers.cache.CacheWarning`.

    Returns
    -------
    Run
        Read already (bad input raises here).

    Raises
    ------
    TypeError
        An argument of the wrong type, named: ``analyze(b"run/")`` (bytes are not a path),
        ``comm_kernels="gemm"`` (a str, not a list of patterns: pass ``["gemm"]``).
    TimelineError
        Bad input, an unknown executor, ``ray`` missing.

    Examples
    --------
    >>> import timeline  # doctest: +SKIP
    >>> run = timeline.analyze("runs/exp1/")  # doctest: +SKIP
    >>> run.diagnosis.summary  # doctest: +SKIP
    """
    from timeline import arguments
    from timeline.importers.cache import resolve_cache

    raw = arguments.check_paths(paths)
    inputs = Inputs(
        paths=[str(p) for p in raw],
        rank=arguments.check_rank(rank),
        rank_regex=arguments.check_optional_text(rank_regex, argument="rank_regex"),
        comm_kernels=arguments.check_patterns(comm_kernels, argument="comm_kernels"),
        include_python=arguments.check_flag(include_python, argument="include_python"),
        executor=arguments.check_optional_text(executor, argument="executor"),
        ray_address=arguments.check_optional_text(ray_address, argument="ray_address"),
        iteration_range=arguments.check_optional_text(iteration_range, argument="iteration_range"),
        cache=resolve_cache(cache),
    )
    options = RunOptions(
        align=arguments.check_flag(align, argument="align"),
        link_gbps=link_gbps,
        dimensions=dict(dimensions or {}),
        gpus_per_node=arguments.check_optional_int(gpus_per_node, argument="gpus_per_node"),
        codec_gbps=codec_gbps,
        ranks=None if ranks is None else tuple(sorted(set(ranks))),
        iterations=None if iterations is None else tuple(sorted(set(iterations))),
    )
    return Run(inputs, options, needs=Needs(communication=True, graph=True), progress=progress).read()


def align_events(trace: Trace) -> tuple[Trace, pl.DataFrame]:
    """Return the trace with every rank's events on the reference clock, and the estimated offsets.

    Raises
    ------
    UsageError
        If the trace holds no profiler traces (a Horovod timeline alone has one clock).
    """
    import polars as pl

    from timeline.analysis.alignment import apply_clock_offsets, estimate_clock_offsets

    if trace.events.filter(pl.col("source") == "kineto").height == 0:
        msg = (
            "--align needs the PyTorch profiler traces of several ranks; "
            "a Horovod timeline alone has one clock"
        )
        raise UsageError(msg)
    from timeline.analysis.groups import shared_clocks
    from timeline.plausibility import aligned_clock_note

    # the ranks of one host compare before alignment: their gloo collectives' groups by timing too
    clocks = shared_clocks(trace.files, comparable=trace.clock_note is None)
    offsets = estimate_clock_offsets(trace.events, groups=trace.groups, clocks=clocks)
    # every rank with collectives on the reference clock: their times compare, whatever each counted from
    note = aligned_clock_note(trace.clock_note, offsets)
    return replace(trace, events=apply_clock_offsets(trace.events, offsets), clock_note=note), offsets


def make_runner(executor: str | None, ray_address: str | None) -> Executor:
    """Return the executor ``executor`` and ``ray_address`` ask for (default: local processes).

    Raises
    ------
    UsageError
        An unknown executor, a Ray address with the local executor, ``ray`` missing.
    """
    from timeline.executors import make_executor

    name = executor or ("ray" if ray_address is not None else "local")
    if name not in ("local", "ray"):
        raise UsageError(f"--executor {name!r}: unknown executor; use local or ray")
    return make_executor("ray" if name == "ray" else "local", ray_address=ray_address)
