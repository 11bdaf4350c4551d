"""``timeline analyze``: exposed vs hidden communication per rank, per iteration and per collective."""

from __future__ import annotations

from typing import Annotated

import typer

from cli.common import analyze, console, echo_warnings, flight_inputs, flight_report, inputs_of, user_errors
from cli.options import (
    ROWS_MAX,
    AlignOption,
    CommKernelOption,
    ExecutorOption,
    IncludePythonOption,
    JsonOption,
    LinkOption,
    PathsArgument,
    RankOption,
    RankRegexOption,
    RayAddressOption,
)

__all__ = ["analyze_command"]


def analyze_command(
    paths: PathsArgument,
    json_output: JsonOption = False,
    top: Annotated[
        int, typer.Option("--top", min=1, max=ROWS_MAX, help="How many top exposed collectives to list.")
    ] = 10,
    rank: RankOption = None,
    rank_regex: RankRegexOption = None,
    comm_kernel: CommKernelOption = None,
    include_python: IncludePythonOption = False,
    link_gbps: LinkOption = None,
    align: AlignOption = False,
    executor: ExecutorOption = None,
    ray_address: RayAddressOption = None,
) -> None:
    """Measure communication hidden under compute and exposed (stretching the step), per rank and iteration.

    Given PyTorch Flight Recorder dumps: why the job stopped (which ranks, in which group and
    collective, and how), as a verdict and findings.

    Exit codes: 0 success, 2 bad input or usage (one 'error:' line on stderr), 3 a bug in timeline,
    130 interrupted.
    """
    with user_errors():
        dumps, traces = flight_inputs(paths, rank)
        if dumps and not traces:
            report = flight_report(dumps, rank=rank, rank_regex=rank_regex)
    if dumps and not traces:
        if json_output:
            from timeline.render.json import render_json

            typer.echo(render_json(report))
            return
        from timeline.render.terminal.flight_recorder import render_flight_verdict

        render_flight_verdict(report, console(120))
        return
    with user_errors():
        from timeline.analysis.links import parse_link_gbps

        link = parse_link_gbps(link_gbps) if link_gbps is not None else None
        inputs = inputs_of(paths, rank, rank_regex, comm_kernel, include_python, executor, ray_address)
        # rank by rank, the communication events are kept only for the utilisation (and --align)
        analysed = analyze(inputs, align=align, communication=link is not None)
        from timeline.results.summary import build_summary

        summary = build_summary(
            analysed.trace, analysed.overlap, top=top, offsets=analysed.offsets, link_gbps=link
        )
    # the load warnings were printed while loading; the analysis' own follow (transfers faster than the link)
    echo_warnings(summary["warnings"][len(analysed.trace.warnings) :])
    if json_output:
        from timeline.render.json import render_json

        typer.echo(render_json(summary))
        return
    from timeline.render.terminal.summary import render_summary

    render_summary(summary, console(120))
