"""``timeline collectives``: collectives matched across ranks, their bandwidth, stragglers, Horovod phases."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from cli.common import (
    console,
    echo_warnings,
    flight_dumps,
    flight_inputs,
    inputs_of,
    open_run,
    run_options,
    user_errors,
)
from cli.options import (
    ROWS_MAX,
    AlignOption,
    CommKernelOption,
    DimensionOption,
    ExecutorOption,
    GpusPerNodeOption,
    IncludePythonOption,
    JsonOption,
    LinkOption,
    PathsArgument,
    RankOption,
    RankRegexOption,
    RayAddressOption,
)

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["collectives_command"]


def collectives_command(
    paths: PathsArgument,
    json_output: JsonOption = False,
    link_gbps: LinkOption = None,
    align: AlignOption = False,
    limit: Annotated[
        int,
        typer.Option(
            "--limit",
            min=1,
            max=ROWS_MAX,
            help="Rows per table (collectives, batches, tensors); --json has all.",
        ),
    ] = 20,
    dimension: DimensionOption = None,
    gpus_per_node: GpusPerNodeOption = None,
    rank: RankOption = None,
    rank_regex: RankRegexOption = None,
    comm_kernel: CommKernelOption = None,
    include_python: IncludePythonOption = False,
    executor: ExecutorOption = None,
    ray_address: RayAddressOption = None,
) -> None:
    """Match every collective across the ranks of its process group: skew, wait vs transfer, bandwidth.

    Process groups and their dimensions, sends paired with receives, link utilisation, stragglers.
    Horovod timelines: per-tensor phases, fused batches and their bandwidth, negotiation wait per rank.
    Flight Recorder dumps: each process group's progress per rank (last enqueued, started, completed)
    and where it stopped.

    Exit codes: 0 success, 2 bad input or usage (one 'error:' line on stderr), 3 a bug in timeline,
    130 interrupted.
    """
    with user_errors():
        dumps, traces = flight_inputs(paths, rank)
    if dumps and not traces:
        _flight_progress(dumps, rank=rank, rank_regex=rank_regex, json_output=json_output, limit=limit)
        return
    with user_errors():
        options = run_options(
            align=align, link_gbps=link_gbps, dimension=dimension, gpus_per_node=gpus_per_node
        )
        inputs = inputs_of(
            paths,
            rank=rank,
            rank_regex=rank_regex,
            comm_kernels=comm_kernel,
            include_python=include_python,
            executor=executor,
            ray_address=ray_address,
        )
        run = open_run(inputs, options)
        report = run.collectives_data(rank_rows=json_output)
    echo_warnings(report.warnings[len(run.warnings) :])
    if json_output:
        from timeline.render.json import render_json

        typer.echo(render_json(report))
        return
    from timeline.render.terminal.collectives import render_collectives_report

    render_collectives_report(report, console(), limit=limit)


def _flight_progress(
    dumps: list[Path], *, rank: int | None, rank_regex: str | None, json_output: bool, limit: int
) -> None:
    """Print the Flight Recorder report of dumps: as JSON, or every group's state and member's progress."""
    with user_errors():
        from timeline.results.flight_recorder import build_flight_report

        flight = build_flight_report(flight_dumps(dumps, rank=rank, rank_regex=rank_regex))
    if json_output:
        from timeline.render.json import render_json

        typer.echo(render_json(flight))
        return
    from timeline.render.terminal.flight_recorder import render_flight_progress

    render_flight_progress(flight, console(), limit=limit)
