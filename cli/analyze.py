"""``timeline analyze``: exposed vs hidden communication per rank, per iteration and per collective."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from cli.common import analyze, console, echo_warnings, flight_dumps, flight_inputs, inputs_of, user_errors
from cli.options import (
    ROWS_MAX,
    AlignOption,
    CodecOption,
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
    dimension: DimensionOption = None,
    gpus_per_node: GpusPerNodeOption = None,
    codec_gbps: CodecOption = None,
    no_findings: Annotated[
        bool,
        typer.Option(
            "--no-findings",
            help="Leave out the verdict and the findings (what limits the job and what would fix it).",
        ),
    ] = False,
) -> None:
    """Measure communication hidden under compute and exposed (stretching the step), per rank and iteration.

    First the verdict and the findings: what limits the job and what would fix it, each fix ranked by
    the gain the what-if replay predicts (docs/diagnosis.md). Given PyTorch Flight Recorder dumps: why
    the job stopped (which ranks, in which group and collective, and how), as a verdict and findings.

    Exit codes: 0 success, 2 bad input or usage (one 'error:' line on stderr), 3 a bug in timeline,
    130 interrupted.
    """
    with user_errors():
        dumps, traces = flight_inputs(paths, rank)
        loaded = flight_dumps(dumps, rank=None if traces else rank, rank_regex=rank_regex) if dumps else None
        flight = None
        if loaded is not None:
            from timeline.results.flight_recorder import build_flight_report

            flight = build_flight_report(loaded)
    if flight is not None and not traces:
        _print(flight, json_output)
        return
    with user_errors():
        from timeline.analysis.dimension_labels import parse_dimension_overrides
        from timeline.analysis.links import parse_link_gbps

        link = parse_link_gbps(link_gbps) if link_gbps is not None else None
        codec = _codec(codec_gbps)
        overrides = parse_dimension_overrides(dimension or [])
        given = [str(p) for p in traces] if flight is not None else paths
        inputs = inputs_of(given, rank, rank_regex, comm_kernel, include_python, executor, ray_address)
        # rank by rank, the communication events are kept (a few thousand rows per rank) for the
        # communication per dimension, the utilisation, --align, dumps and the findings, whose tasks
        # also return the what-if graph's parts
        analysed = analyze(inputs, align=align, communication=True, findings=not no_findings)
        summary = analysed.summary_data(
            top=top,
            link_gbps=link,
            findings=not no_findings,
            dimensions=overrides,
            gpus_per_node=gpus_per_node,
            codec_gbps=codec,
        )
        if flight is not None and loaded is not None:
            from timeline.results.flight_recorder import profiler_matches

            flight["matches"] = profiler_matches(loaded, analysed.trace.events)
            summary["flight_recorder"] = flight
    # the load warnings were printed while loading; the analysis' own follow (transfers faster than the link)
    echo_warnings(summary["warnings"][len(analysed.trace.warnings) :])
    if json_output:
        from timeline.render.json import render_json

        typer.echo(render_json(summary))
        return
    if flight is not None:
        _print(flight, json_output)
    from timeline.render.terminal.summary import render_summary

    render_summary(summary, console(120))


def _codec(codec_gbps: float | None) -> float | None:
    """Return ``--codec-gbps`` checked (the what-if settings are imported only when it is given)."""
    if codec_gbps is None:
        return None
    from timeline.whatif.settings import check_codec_gbps

    return check_codec_gbps(codec_gbps)


def _print(flight: dict[str, Any], json_output: bool) -> None:
    """Print the dumps' report alone (``--json``), or its verdict and findings (and profiler matches)."""
    if json_output:
        from timeline.render.json import render_json

        typer.echo(render_json(flight))
        return
    from timeline.render.terminal.flight_recorder import render_flight_verdict

    render_flight_verdict(flight, console(120))
