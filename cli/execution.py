"""How the analysing commands load their inputs: in memory, or rank by rank (``--executor``).

``timeline analyze``, ``check``, ``collectives`` and ``whatif`` read their inputs through
:func:`analyze_inputs`: in memory for small inputs, rank by rank (:func:`timeline.execution.analyze_files`)
for a Parquet dataset, several large files, one very large trace, or when ``--executor`` /
``--ray-address`` ask for it; the results are the same either way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Annotated, Protocol, TypeVar

import polars as pl
import typer

from cli.common import echo_warnings, import_options, input_paths, is_pattern, load_trace, progress_bar
from timeline.analysis.alignment import apply_clock_offsets, estimate_clock_offsets
from timeline.analysis.overlap import Overlap, compute_overlap
from timeline.errors import UsageError
from timeline.execution import Analysis, analyze_files, graph_files, is_dataset, make_executor, shift_overlap
from timeline.execution.executors import Executor, ExecutorName
from timeline.importers.files import expand_paths
from timeline.trace import STREAM_MIN_BYTES, Trace, text_size
from timeline.whatif.graph import TraceGraph, trace_graph


class _Loaded(Protocol):
    """What a rank-by-rank function returns: at least the load warnings."""

    @property
    def warnings(self) -> tuple[str, ...]:
        """The load warnings."""
        ...


T = TypeVar("T", bound=_Loaded)

__all__ = [
    "Analysed",
    "ExecutorOption",
    "Inputs",
    "RayAddressOption",
    "align_events",
    "analyze_by_rank",
    "analyze_inputs",
    "graph_inputs",
    "inputs_of",
    "make_runner",
    "wants_rank_by_rank",
]

ExecutorOption = Annotated[
    str | None,
    typer.Option(
        "--executor",
        help="Analyse rank by rank in parallel tasks: 'local' (processes on this machine) or 'ray' (Ray "
        "tasks; needs timeline[ray]). Same results; memory bounded by one rank per worker. Default: local "
        "for a Parquet dataset, several files of 24 MiB or more, or one trace of 128 MiB of JSON or more; "
        "else in memory.",
        show_default=False,
    ),
]
RayAddressOption = Annotated[
    str | None,
    typer.Option(
        "--ray-address",
        help="The Ray cluster to run on (ray://HEAD:10001, HEAD:6379, or auto); implies --executor ray. "
        "Default: RAY_ADDRESS, else a Ray instance started on this machine.",
        show_default=False,
    ),
]

_PARALLEL_MIN_BYTES = 24 * 1024 * 1024  # as timeline.trace.load: below this, one process is faster


def wants_rank_by_rank(paths: list[str], *, executor: str | None, ray_address: str | None) -> bool:
    """Whether ``timeline analyze`` reduces rank by rank.

    When asked (``--executor``, ``--ray-address``), for a Parquet dataset partitioned by rank, and
    for several files holding 24 MiB or more on disk (what ``load`` would parse in parallel anyway);
    the results are the same either way. A single trace of 128 MiB of JSON or more is reduced the
    same way, its chunks decoded in parallel, keeping only the events the overlap reads.
    """
    if executor is not None or ray_address is not None:
        return True
    if any(is_dataset(p) for p in paths if not is_pattern(p)):
        return True
    try:
        files = expand_paths(paths)
    except UsageError:
        return False  # the in-memory path reports it
    if len(files) == 1:
        # one trace of 128 MiB of JSON or more: only the events the overlap reads are kept
        return files[0].suffix != ".parquet" and text_size(files[0]) >= STREAM_MIN_BYTES
    return sum(f.stat().st_size for f in files) >= _PARALLEL_MIN_BYTES


@dataclass(frozen=True)
class Analysed:
    """Inputs analysed in memory or rank by rank: what the commands read.

    Attributes
    ----------
    trace
        In memory: every event. Rank by rank: the communication events only (or none, when they
        were not asked for), with the full file table and warnings.
    overlap
        The overlap analysis (after alignment with ``--align``).
    offsets
        The clock offsets (``--align``), else None.
    rank_by_rank
        Whether the inputs were reduced rank by rank.
    """

    trace: Trace
    overlap: Overlap
    offsets: pl.DataFrame | None
    rank_by_rank: bool
    analysis: Analysis | None = None

    def full_ranks(self, ranks: list[int]) -> Trace:
        """Return every event of these ranks (aligned as the rest): the trace itself in memory."""
        if self.analysis is None:
            return self.trace
        loaded = self.analysis.load_ranks(ranks)
        if self.offsets is None:
            return loaded
        return replace(loaded, events=apply_clock_offsets(loaded.events, self.offsets))


@dataclass(frozen=True, kw_only=True)
class Inputs:
    """What a command reads, and how: its ``PATH...`` and the options shared by the loading commands."""

    paths: list[str]
    rank: int | None = None
    rank_regex: str | None = None
    comm_kernels: list[str] | None = None
    include_python: bool = False
    executor: str | None = None
    ray_address: str | None = None

    @property
    def rank_by_rank(self) -> bool:
        """Whether they are read rank by rank (:func:`wants_rank_by_rank`)."""
        return wants_rank_by_rank(self.paths, executor=self.executor, ray_address=self.ray_address)

    def load(self) -> Trace:
        """Load every event, in memory, with a progress bar; print the load warnings."""
        return load_trace(
            self.paths,
            rank=self.rank,
            rank_regex=self.rank_regex,
            comm_kernels=self.comm_kernels,
            include_python=self.include_python,
        )

    def run(self, run: Callable[..., T]) -> T:
        """Call a rank-by-rank function (``analyze_files``, ``graph_files``) on the inputs.

        With a progress bar, on the executor asked for; prints the load warnings it returns.
        """
        with progress_bar() as report:
            result = run(
                input_paths(self.paths),
                executor=make_runner(self.executor, self.ray_address),
                options=import_options(self.comm_kernels, self.include_python),
                rank=self.rank,
                rank_regex=self.rank_regex,
                progress=report,
            )
        echo_warnings(result.warnings)
        return result


def inputs_of(
    paths: list[str],
    rank: int | None,
    rank_regex: str | None,
    comm_kernels: list[str] | None,
    include_python: bool,
    executor: str | None,
    ray_address: str | None,
    /,
) -> Inputs:
    """Return the :class:`Inputs` of a command's ``PATH...`` and shared options, in that order."""
    return Inputs(
        paths=paths,
        rank=rank,
        rank_regex=rank_regex,
        comm_kernels=comm_kernels,
        include_python=include_python,
        executor=executor,
        ray_address=ray_address,
    )


def analyze_inputs(inputs: Inputs, *, align: bool = False, communication: bool = True) -> Analysed:
    """Load and analyse the inputs of a command: rank by rank when that is asked for or pays, else in memory.

    ``communication``: the rank-by-rank path keeps every rank's communication events (the cross-rank
    analyses read them; ``--align`` needs them whatever this says).

    Raises
    ------
    TimelineError
        Bad input, an unknown executor, ``ray`` missing.
    """
    if inputs.rank_by_rank:
        return analyze_by_rank(inputs, align=align, communication=communication)
    trace = inputs.load()
    offsets = None
    if align:
        trace, offsets = align_events(trace)
    return Analysed(trace=trace, overlap=compute_overlap(trace.events), offsets=offsets, rank_by_rank=False)


def analyze_by_rank(inputs: Inputs, *, align: bool, communication: bool = True) -> Analysed:
    """Analyse rank by rank; the trace to summarise holds the communication events only.

    Raises
    ------
    TimelineError
        Bad input, an unknown executor, ``ray`` missing.
    """
    analysis = inputs.run(partial(analyze_files, communication=communication or align))
    trace = analysis.as_trace()
    overlap = analysis.overlap
    offsets = None
    if align:
        trace, offsets = align_events(trace)
        overlap = shift_overlap(overlap, offsets)
    return Analysed(trace=trace, overlap=overlap, offsets=offsets, rank_by_rank=True, analysis=analysis)


def graph_inputs(inputs: Inputs, *, link_gbps: float | None) -> TraceGraph:
    """Return the what-if graph of the inputs: built from per-rank parts when read rank by rank.

    Raises
    ------
    TimelineError
        Bad input, an unknown executor, ``ray`` missing, no rank with compute events.
    """
    if inputs.rank_by_rank:
        # each task reduces a rank to its graph parts: no process holds every rank's events
        return inputs.run(graph_files).graph(link_gbps=link_gbps)
    return trace_graph(inputs.load(), link_gbps=link_gbps)


def align_events(trace: Trace) -> tuple[Trace, pl.DataFrame]:
    """Return the trace with every rank's events on the reference clock, and the estimated offsets.

    Raises
    ------
    UsageError
        If the trace holds no profiler traces (a Horovod timeline alone has one clock).
    """
    if trace.events.filter(pl.col("source") == "kineto").height == 0:
        msg = (
            "--align needs the PyTorch profiler traces of several ranks; "
            "a Horovod timeline alone has one clock"
        )
        raise UsageError(msg)
    offsets = estimate_clock_offsets(trace.events)
    return replace(trace, events=apply_clock_offsets(trace.events, offsets)), offsets


def make_runner(executor: str | None, ray_address: str | None) -> Executor:
    """Return the executor ``--executor`` and ``--ray-address`` ask for (default: local processes).

    Raises
    ------
    UsageError
        An unknown executor, ``--ray-address`` with the local executor, ``ray`` missing.
    """
    name = executor or ("ray" if ray_address is not None else "local")
    if name not in ("local", "ray"):
        raise UsageError(f"--executor {name!r}: unknown executor; use local or ray")
    chosen: ExecutorName = "ray" if name == "ray" else "local"
    return make_executor(chosen, ray_address=ray_address)
