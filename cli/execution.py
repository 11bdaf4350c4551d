"""``--executor`` and ``--ray-address``: the rank-by-rank analysis path of ``timeline analyze``."""

from __future__ import annotations

from typing import Annotated

import polars as pl
import typer

from cli.collectives import align_events
from cli.common import echo_warnings, import_options, input_paths, is_pattern, progress_bar
from timeline.analysis.overlap import Overlap
from timeline.errors import UsageError
from timeline.execution import analyze_files, is_dataset, make_executor, shift_overlap
from timeline.execution.executors import ExecutorName
from timeline.importers.files import expand_paths
from timeline.trace import STREAM_MIN_BYTES, Trace, text_size

__all__ = ["ExecutorOption", "RayAddressOption", "analyze_by_rank", "wants_rank_by_rank"]

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
) -> tuple[Trace, Overlap, pl.DataFrame | None]:
    """Analyse rank by rank; return the trace to summarise (its events: the communication events only).

    Raises
    ------
    TimelineError
        Bad input, an unknown executor, ``ray`` missing.
    """
    name = executor or ("ray" if ray_address is not None else "local")
    if name not in ("local", "ray"):
        raise UsageError(f"--executor {name!r}: unknown executor; use local or ray")
    runner = make_executor(_executor_name(name), ray_address=ray_address)
    with progress_bar() as report:
        analysis = analyze_files(
            input_paths(paths),
            executor=runner,
            options=import_options(comm_kernels, include_python),
            rank=rank,
            rank_regex=rank_regex,
            progress=report,
        )
    echo_warnings(analysis.warnings)
    trace = analysis.as_trace()
    overlap = analysis.overlap
    offsets = None
    if align:
        trace, offsets = align_events(trace)
        overlap = shift_overlap(overlap, offsets)
    return trace, overlap, offsets


def _executor_name(name: str) -> ExecutorName:
    return "ray" if name == "ray" else "local"
