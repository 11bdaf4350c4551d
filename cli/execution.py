"""How the analysing commands load their inputs: in memory, or rank by rank (``--executor``).

``timeline analyze``, ``check``, ``collectives`` and ``whatif`` read their inputs through
:func:`analyze_inputs`: in memory for small inputs, rank by rank (:func:`timeline.execution.analyze_files`)
for a Parquet dataset, several large files, one very large trace, or when ``--executor`` /
``--ray-address`` ask for it; the results are the same either way.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Annotated

import polars as pl
import typer

from cli.common import echo_warnings, import_options, input_paths, is_pattern, load_trace, progress_bar
from timeline.analysis.alignment import apply_clock_offsets, estimate_clock_offsets
from timeline.analysis.overlap import Overlap, compute_overlap
from timeline.errors import UsageError
from timeline.execution import Analysis, analyze_files, is_dataset, make_executor, shift_overlap
from timeline.execution.executors import Executor, ExecutorName
from timeline.importers.files import expand_paths
from timeline.trace import STREAM_MIN_BYTES, Trace, text_size

__all__ = [
    "Analysed",
    "ExecutorOption",
    "RayAddressOption",
    "align_events",
    "analyze_by_rank",
    "analyze_inputs",
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


def analyze_inputs(
    paths: list[str],
    *,
    executor: str | None,
    ray_address: str | None,
    rank: int | None,
    rank_regex: str | None,
    comm_kernels: list[str] | None,
    include_python: bool,
    align: bool = False,
    communication: bool = True,
) -> Analysed:
    """Load and analyse the inputs of a command: rank by rank when that is asked for or pays, else in memory.

    ``communication``: the rank-by-rank path keeps every rank's communication events (the cross-rank
    analyses read them; ``--align`` needs them whatever this says).

    Raises
    ------
    TimelineError
        Bad input, an unknown executor, ``ray`` missing.
    """
    if wants_rank_by_rank(paths, executor=executor, ray_address=ray_address):
        return analyze_by_rank(
            paths,
            executor=executor,
            ray_address=ray_address,
            rank=rank,
            rank_regex=rank_regex,
            comm_kernels=comm_kernels,
            include_python=include_python,
            align=align,
            communication=communication or align,
        )
    trace = load_trace(
        paths, rank=rank, rank_regex=rank_regex, comm_kernels=comm_kernels, include_python=include_python
    )
    offsets = None
    if align:
        trace, offsets = align_events(trace)
    return Analysed(trace=trace, overlap=compute_overlap(trace.events), offsets=offsets, rank_by_rank=False)


def analyze_by_rank(
    paths: list[str],
    *,
    executor: str | None,
    ray_address: str | None,
    rank: int | None,
    rank_regex: str | None,
    comm_kernels: list[str] | None,
    include_python: bool,
    align: bool,
    communication: bool = True,
) -> Analysed:
    """Analyse rank by rank; the trace to summarise holds the communication events only.

    Raises
    ------
    TimelineError
        Bad input, an unknown executor, ``ray`` missing.
    """
    runner = make_runner(executor, ray_address)
    with progress_bar() as report:
        analysis = analyze_files(
            input_paths(paths),
            executor=runner,
            options=import_options(comm_kernels, include_python),
            rank=rank,
            rank_regex=rank_regex,
            communication=communication or align,
            progress=report,
        )
    echo_warnings(analysis.warnings)
    trace = analysis.as_trace()
    overlap = analysis.overlap
    offsets = None
    if align:
        trace, offsets = align_events(trace)
        overlap = shift_overlap(overlap, offsets)
    return Analysed(trace=trace, overlap=overlap, offsets=offsets, rank_by_rank=True, analysis=analysis)


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
