"""Inputs → analysed: the one road every analysing command and :func:`timeline.analyze` take.

Takes what a user gives (:class:`Inputs`: paths and the loading options) and gives the loaded and
analysed run (:class:`Analysed`), reading in memory or rank by rank as :mod:`timeline.policy`
decides (or as asked: an executor, a Ray address); the results are the same either way. The
what-if graph goes the same way (:func:`graph_inputs`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from timeline import arguments, policy
from timeline.errors import TimelineError, UsageError
from timeline.importers.result import ImportOptions
from timeline.importers.rules import ClassificationRules
from timeline.inputs import input_paths

# Nothing above imports polars: a command decides how to read its inputs (and starts the workers of
# a rank-by-rank analysis) before this process imports polars and the analyses.
if TYPE_CHECKING:
    import polars as pl

    from timeline.analysis.overlap import Overlap
    from timeline.diagnosis.verdict import Diagnosis
    from timeline.execution.reduce import Analysis
    from timeline.executors import Executor, LocalExecutor
    from timeline.render.html import Result
    from timeline.trace import Trace
    from timeline.whatif.graph import TraceGraph

__all__ = ["Analysed", "Inputs", "align_events", "analyze", "analyze_inputs", "graph_inputs", "make_runner"]

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
    """What an analysis reads, and how: paths and the loading options shared by every command.

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
    """

    paths: Sequence[str]
    rank: int | None = None
    rank_regex: str | None = None
    comm_kernels: Sequence[str] = ()
    include_python: bool = False
    executor: str | None = None
    ray_address: str | None = None

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
        return ImportOptions(rules=rules, include_python=self.include_python)

    def load(self, *, progress: Progress | None = None, overlap_only: bool = False) -> Trace:
        """Load every event, in memory (:func:`timeline.load`).

        ``overlap_only``: only the events the overlap analysis reads (the same overlap, a smaller
        frame; the file table still counts every event). A single trace decoded in two halves
        (:func:`timeline.policy.reads_in_halves`) has its helper process started here, before this
        process imports polars.
        """
        helper = self._half_helper()
        try:
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
                helper=helper,
            )
        finally:
            if helper is not None:
                helper.stop()  # not needed after all (the file was read otherwise)

    def _half_helper(self) -> LocalExecutor | None:
        """Return a local executor with its helper process starting, if one trace is read in halves."""
        paths = input_paths(self.paths)
        if not policy.reads_in_halves(paths):
            return None
        from timeline.executors import LocalExecutor

        helper = LocalExecutor(2)
        helper.start(preload="timeline.importers.stream")
        return helper if helper.started else None

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


@dataclass(frozen=True)
class Analysed:
    """Inputs analysed in memory or rank by rank: what the commands read.

    Attributes
    ----------
    trace
        In memory: every event (only those the overlap reads, when communication events were not
        asked for). Rank by rank: the communication events only (or none, when they were not asked
        for). The file table and warnings are always the full load's.
    overlap
        The overlap analysis (after alignment with ``align``).
    offsets
        The clock offsets (``align``), else None.
    rank_by_rank
        Whether the inputs were reduced rank by rank.
    analysis
        Rank by rank: the per-rank reduction (to load some ranks in full again).
    """

    trace: Trace
    overlap: Overlap
    offsets: pl.DataFrame | None
    rank_by_rank: bool
    analysis: Analysis | None = None

    @property
    def warnings(self) -> tuple[str, ...]:
        """The load warnings."""
        return self.trace.warnings

    def summary(self, *, top: int = 10, link_gbps: float | None = None, findings: bool = True) -> Result:
        """Return the summary ``timeline analyze`` prints (:func:`~timeline.results.summary.build_summary`).

        A :class:`~timeline.render.html.Result`: the plain data (``.to_dict()``), shown as HTML
        tables in a notebook. ``findings``: with the verdict and the findings (:meth:`diagnosis`).
        """
        from timeline.render.html import Result

        return Result(self.summary_data(top=top, link_gbps=link_gbps, findings=findings))

    def summary_data(
        self,
        *,
        top: int = 10,
        link_gbps: float | None = None,
        findings: bool = True,
        dimensions: Mapping[str, str] | None = None,
        gpus_per_node: int | None = None,
    ) -> dict[str, Any]:
        """Return the summary as plain data (``timeline analyze --json``): :meth:`summary`'s data.

        ``dimensions`` (``--dimension``) and ``gpus_per_node`` (``--gpus-per-node``) attribute the
        groups of the communication per dimension and of the diagnosis, computed once for both
        (:meth:`dimension_exposure`).
        """
        from timeline.results.summary import build_summary

        exposure = self.dimension_exposure(dimensions=dimensions, gpus_per_node=gpus_per_node)
        diagnosis = (
            self.diagnosis(
                link_gbps=link_gbps, dimensions=dimensions, gpus_per_node=gpus_per_node, exposure=exposure
            )
            if findings
            else None
        )
        return build_summary(
            self.trace,
            self.overlap,
            top=top,
            offsets=self.offsets,
            link_gbps=link_gbps,
            diagnosis=diagnosis,
            overrides=dimensions,
            gpus_per_node=gpus_per_node,
            exposure=exposure,
        )

    def diagnosis(
        self,
        *,
        link_gbps: float | None = None,
        codec_gbps: float | None = None,
        dimensions: Mapping[str, str] | None = None,
        gpus_per_node: int | None = None,
        exposure: pl.DataFrame | None = None,
    ) -> Diagnosis:
        """Return what limits the job and what would fix it (:func:`timeline.diagnosis.diagnosis`).

        In memory the what-if graph is built from the loaded events; read rank by rank, from the
        graph parts the tasks returned when they were asked for (``analyze_inputs(findings=True)``),
        else the diagnosis says in its notes what it left out. ``dimensions`` (``--dimension``) and
        ``gpus_per_node`` attribute groups and name dimensions as the exposure per dimension does;
        ``exposure``: that exposure, when computed already with them (:meth:`dimension_exposure`).
        """
        from timeline.analysis.groups import shared_clocks
        from timeline.diagnosis.diagnosis import diagnose

        graph = gaps = None
        if self.analysis is not None and self.analysis.graph_parts is not None:
            analysis, offsets = self.analysis, self.offsets
            graph = lambda: analysis.graph(link_gbps=link_gbps, offsets=offsets)  # noqa: E731 - built when used
            gaps = analysis.launch_gaps(offsets=offsets)
        return diagnose(
            self.trace,
            self.overlap,
            link_gbps=link_gbps,
            graph=graph,
            codec_gbps=codec_gbps,
            complete=not self.rank_by_rank,
            launch_gaps=gaps,
            dimensions=dimensions,
            exposure=exposure,
            clocks=shared_clocks(
                self.trace.files,
                gpus_per_node=gpus_per_node,
                offsets=self.offsets,
                comparable=self.trace.clock_note is None,
            ),
        )

    def dimension_exposure(
        self, *, dimensions: Mapping[str, str] | None = None, gpus_per_node: int | None = None
    ) -> pl.DataFrame | None:
        """Return the communication per dimension × iteration × rank, or None when no event names a group.

        :func:`~timeline.results.dimensions.dimension_exposure_of` with the clocks of the analysis:
        computed once, it serves the summary (``build_summary(exposure=)``) and the diagnosis
        (:meth:`diagnosis`), as ``timeline analyze`` does.
        """
        from timeline.results.dimensions import dimension_exposure_of, has_groups

        if not has_groups(self.trace):
            return None
        return dimension_exposure_of(
            self.trace, self.overlap, offsets=self.offsets, overrides=dimensions, gpus_per_node=gpus_per_node
        )

    def collectives(
        self,
        *,
        link_gbps: float | None = None,
        dimensions: Mapping[str, str] | None = None,
        gpus_per_node: int | None = None,
    ) -> Result:
        """Return the report ``timeline collectives`` prints (collectives matched across ranks).

        :func:`~timeline.results.collectives.build_collectives_report` as a
        :class:`~timeline.render.html.Result` (shown as HTML tables in a notebook). ``dimensions``:
        description → dimension label (``--dimension``); ``gpus_per_node``: ranks per node
        (``--gpus-per-node``).

        Raises
        ------
        UsageError
            No communication events in the traces.
        """
        from timeline.render.html import Result
        from timeline.results.collectives import build_collectives_report

        report = build_collectives_report(
            self.trace,
            link_gbps=link_gbps,
            offsets=self.offsets,
            overlap=self.overlap,
            writer_trace=lambda writer: self.full_ranks([writer]),
            overrides=dimensions,
            gpus_per_node=gpus_per_node,
        )
        return Result(report)

    def _repr_html_(self) -> str:
        """Return the summary as HTML tables: what a Jupyter notebook shows for an analysis."""
        return self.summary()._repr_html_()

    def full_ranks(self, ranks: list[int]) -> Trace:
        """Return every event of these ranks (aligned as the rest): the trace itself in memory."""
        if self.analysis is None:
            return self.trace
        loaded = self.analysis.load_ranks(ranks)
        if self.offsets is None:
            return loaded
        from timeline.analysis.alignment import apply_clock_offsets

        return replace(loaded, events=apply_clock_offsets(loaded.events, self.offsets))


def analyze_inputs(
    inputs: Inputs,
    *,
    align: bool = False,
    communication: bool = True,
    findings: bool = False,
    progress: Progress | None = None,
    warn: Warn | None = None,
) -> Analysed:
    """Load and analyse inputs: rank by rank when that is asked for or pays, else in memory.

    ``communication``: keep the events the cross-rank analyses read (``align`` needs them whatever
    this says); without them the trace holds only what the overlap reads (in memory: the events the
    overlap analysis reads; rank by rank: none). ``findings``: keep what the diagnosis reads
    (:meth:`Analysed.diagnosis`): in memory the overlap's events suffice; rank by rank the
    communication events, and each task's what-if graph parts. ``warn``: called with the load
    warnings as soon as the inputs are read (before anything else can fail).

    Raises
    ------
    TimelineError
        Bad input, an unknown executor, ``ray`` missing.
    """
    if inputs.rank_by_rank:
        return _analyze_by_rank(
            inputs, align=align, communication=communication, findings=findings, progress=progress, warn=warn
        )
    # without the cross-rank analyses, CPU operators of GPU ranks (often half the events) are skipped
    trace = inputs.load(progress=progress, overlap_only=not (communication or align))
    from timeline.analysis.overlap import compute_overlap

    if warn is not None:
        warn(trace.warnings)
    offsets = None
    if align:
        trace, offsets = align_events(trace)
    return Analysed(trace=trace, overlap=compute_overlap(trace.events), offsets=offsets, rank_by_rank=False)


def analyze(
    paths: Sequence[str | Path] | str | Path,
    *,
    rank: int | None = None,
    rank_regex: str | None = None,
    comm_kernels: Sequence[str] = (),
    include_python: bool = False,
    executor: str | None = None,
    ray_address: str | None = None,
    align: bool = False,
    progress: Progress | None = None,
) -> Analysed:
    """Load and analyse traces: in memory, or rank by rank when that pays (:mod:`timeline.policy`).

    What every analysing command does before it builds its result; the figures are the same either
    way (rank by rank, :attr:`Analysed.trace` holds the communication events only).

    Parameters
    ----------
    paths
        Files, directories, glob patterns, Parquet files and datasets.
    rank, rank_regex, comm_kernels, include_python
        As for :func:`timeline.load` (``comm_kernels``: extra communication kernel regexes).
    executor, ray_address
        Read rank by rank on ``local`` processes or ``ray`` (a Ray address implies it).
    align
        Put every rank's events on rank 0's clock first (ranks on different hosts).
    progress
        Called as ``progress(label, done, total)`` after each file or rank.

    Returns
    -------
    Analysed

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
    >>> analysed = timeline.analyze("runs/exp1/")  # doctest: +SKIP
    >>> timeline.build_summary(analysed.trace, analysed.overlap)["worst"]  # doctest: +SKIP
    """
    raw = arguments.check_paths(paths)
    inputs = Inputs(
        paths=[str(p) for p in raw],
        rank=arguments.check_rank(rank),
        rank_regex=arguments.check_optional_text(rank_regex, argument="rank_regex"),
        comm_kernels=arguments.check_patterns(comm_kernels, argument="comm_kernels"),
        include_python=arguments.check_flag(include_python, argument="include_python"),
        executor=arguments.check_optional_text(executor, argument="executor"),
        ray_address=arguments.check_optional_text(ray_address, argument="ray_address"),
    )
    arguments.check_flag(align, argument="align")
    return analyze_inputs(inputs, align=align, progress=progress)


def _analyze_by_rank(
    inputs: Inputs,
    *,
    align: bool,
    communication: bool,
    findings: bool,
    progress: Progress | None,
    warn: Warn | None,
) -> Analysed:
    """Analyse rank by rank; the trace to summarise holds the communication events only."""
    executor = inputs.runner(preload="timeline.execution.reduce")
    from timeline.execution.reduce import analyze_files, shift_overlap

    analysis = inputs.run(
        partial(analyze_files, communication=communication or align or findings, graph=findings),
        executor=executor,
        progress=progress,
    )
    if warn is not None:
        warn(analysis.warnings)
    trace = analysis.as_trace()
    overlap = analysis.overlap
    offsets = None
    if align:
        trace, offsets = align_events(trace)
        overlap = shift_overlap(overlap, offsets)
    return Analysed(trace=trace, overlap=overlap, offsets=offsets, rank_by_rank=True, analysis=analysis)


def graph_inputs(
    inputs: Inputs,
    *,
    link_gbps: float | None,
    progress: Progress | None = None,
    warn: Warn | None = None,
    overrides: Mapping[str, str] | None = None,
) -> TraceGraph:
    """Return the what-if graph of the inputs (``overrides``: description → dimension label).

    Built from per-rank parts when read rank by rank: no process holds every rank's events.
    ``warn``: called with the load warnings as soon as the inputs are read.

    Raises
    ------
    TimelineError
        Bad input, an unknown executor, ``ray`` missing, no rank with compute events.
    """
    if inputs.rank_by_rank:
        executor = inputs.runner(preload="timeline.execution.graphs")
        from timeline.execution.graphs import graph_files

        parts = inputs.run(graph_files, executor=executor, progress=progress)
        if warn is not None:
            warn(parts.warnings)
        return parts.graph(link_gbps=link_gbps, overrides=overrides)
    trace = inputs.load(progress=progress)  # first: it may start a helper before polars is imported
    if warn is not None:
        warn(trace.warnings)
    from timeline.whatif.graph import trace_graph

    return trace_graph(trace, link_gbps=link_gbps, overrides=overrides)


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
