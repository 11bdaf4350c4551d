"""``timeline collectives``: collectives matched across ranks, their bandwidth, stragglers, Horovod phases."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cli.common import (
    OutputFlags,
    RunFlags,
    dumps_only,
    echo_warnings,
    emit,
    flight_dumps,
    flight_inputs,
    inputs_of,
    open_run,
    run_options,
    user_errors,
)
from cli.options import (
    AlignOption,
    CacheDirOption,
    CommKernelOption,
    CsvOption,
    DimensionOption,
    ExecutorOption,
    GpusPerNodeOption,
    IncludePythonOption,
    IterationRangeOption,
    IterationsOption,
    JsonOption,
    LimitAlias,
    LinkOption,
    MarkdownOption,
    NoCacheOption,
    NoColorOption,
    PathsArgument,
    RankOption,
    RankRegexOption,
    RanksOption,
    RayAddressOption,
    TopOption,
    top_of,
)

if TYPE_CHECKING:
    from pathlib import Path

    from rich.console import Console

__all__ = ["collectives_command"]


def collectives_command(
    paths: PathsArgument,
    json_output: JsonOption = False,
    markdown: MarkdownOption = None,
    csv: CsvOption = None,
    link_gbps: LinkOption = None,
    align: AlignOption = False,
    top: TopOption = None,
    limit: LimitAlias = None,
    ranks: RanksOption = None,
    iterations: IterationsOption = None,
    dimension: DimensionOption = None,
    gpus_per_node: GpusPerNodeOption = None,
    rank: RankOption = None,
    rank_regex: RankRegexOption = None,
    comm_kernel: CommKernelOption = None,
    include_python: IncludePythonOption = False,
    iteration_range: IterationRangeOption = None,
    executor: ExecutorOption = None,
    ray_address: RayAddressOption = None,
    no_cache: NoCacheOption = False,
    cache_dir: CacheDirOption = None,
    no_color: NoColorOption = False,
) -> None:
    """Match every collective across the ranks of its process group: skew, wait vs transfer, bandwidth.

    Process groups and their dimensions, sends paired with receives, link utilisation, stragglers.
    Horovod timelines: per-tensor phases, fused batches and their bandwidth, negotiation wait per rank.
    Flight Recorder dumps: each process group's progress per rank (last enqueued, started, completed)
    and where it stopped (--ranks and --iterations select profiler traces, not dumps).

    Exit codes: 0 success, 2 bad input or usage (one 'error:' line on stderr), 3 a bug in timeline,
    130 interrupted.
    """
    flags = RunFlags(
        rank=rank,
        rank_regex=rank_regex,
        comm_kernels=comm_kernel,
        include_python=include_python,
        iteration_range=iteration_range,
        executor=executor,
        ray_address=ray_address,
        no_cache=no_cache,
        cache_dir=cache_dir,
        align=align,
        link_gbps=link_gbps,
        dimension=dimension,
        gpus_per_node=gpus_per_node,
        ranks=ranks,
        iterations=iterations,
    )
    out = OutputFlags(json_output=json_output, markdown=markdown, csv=csv, no_color=no_color)
    _collectives(paths, flags, out, rows=top_of(top, limit, 20))


def _collectives(paths: list[str], flags: RunFlags, out: OutputFlags, *, rows: int) -> None:
    """Print the collectives report of the run of ``paths``, or the progress in its Flight Recorder dumps."""
    with user_errors():
        dumps, traces = flight_inputs(paths, flags.rank)
    if dumps and not traces:
        dumps_only(flags.ranks, flags.iterations)
        _flight_progress(dumps, rank=flags.rank, rank_regex=flags.rank_regex, limit=rows, out=out)
        return
    with user_errors():
        options = run_options(flags)
        inputs = inputs_of(paths, flags)
        run = open_run(inputs, options)
        report = run.collectives_data(rank_rows=out.json_output or out.csv is not None)
    echo_warnings(report.warnings[len(run.warnings) :])

    def draw(console: Console) -> None:
        from timeline.render.terminal.collectives import render_collectives_report

        render_collectives_report(report, console, limit=rows)

    emit(report, draw, out, title="timeline collectives", top=rows)


def _flight_progress(
    dumps: list[Path], *, rank: int | None, rank_regex: str | None, limit: int, out: OutputFlags
) -> None:
    """Print the Flight Recorder report of dumps: as JSON, or every group's state and member's progress."""
    with user_errors():
        from timeline.results.flight_recorder import build_flight_report

        flight = build_flight_report(flight_dumps(dumps, rank=rank, rank_regex=rank_regex))

    def draw(console: Console) -> None:
        from timeline.render.terminal.flight_recorder import render_flight_progress

        render_flight_progress(flight, console, limit=limit)

    emit(flight, draw, out, title="Flight Recorder dumps", top=limit)
