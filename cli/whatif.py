"""``timeline whatif``: predict iteration time and scaling on other links, world sizes, buckets, compression.

Builds the run's dependency graph, then :func:`timeline.results.whatif.build_whatif_report` checks it
by replaying the trace under its own conditions (the self-replay error), sweeps the requested
settings and, with ``--target-sf``, searches the bandwidth or compression ratio that reaches a
scaling factor.
"""

from __future__ import annotations

from typing import Annotated

import typer

from cli.common import console, echo_warnings, graph, inputs_of, user_errors
from cli.options import (
    CommKernelOption,
    ExecutorOption,
    IncludePythonOption,
    JsonOption,
    PathsArgument,
    RankOption,
    RankRegexOption,
    RayAddressOption,
)

__all__ = ["whatif_command"]


BandwidthOption = Annotated[
    str | None,
    typer.Option(
        "--bandwidth",
        "-b",
        help="Link bandwidths to predict, one direction, comma-separated: 10,25,40,100Gbps (a unit on "
        "the "
        "last applies to all), presets (100gbe, ib-hdr), 'measured'. Default: the measured link.",
        show_default=False,
    ),
]
WorldSizeOption = Annotated[
    str | None,
    typer.Option(
        "--world-size",
        "-n",
        help="World sizes to predict, comma-separated (8,64), each 1 to 1,048,576; collectives over the "
        "whole world scale, compute per rank stays (same batch per rank). Default: as measured.",
        show_default=False,
    ),
]
CompressionOption = Annotated[
    str,
    typer.Option("--compression", "-c", help="Gradient compression ratios, comma-separated (1,2,5)."),
]
BucketsOption = Annotated[
    str,
    typer.Option(
        "--buckets",
        help="Gradient bucketing, comma-separated: measured, ddp:<cap MiB>[:<first MiB>], "
        "fusion:<MiB>[:<cycle ms>] (Horovod). Rebuilt from the gradient-ready times.",
    ),
]
EfficiencyOption = Annotated[
    str | None,
    typer.Option(
        "--efficiency",
        help="Fraction of the link collectives achieve: observed (each as in the trace), uniform (one "
        "figure per collective kind), full, or a fraction (0.8). Default: observed when the measured "
        "link is known, else full.",
        show_default=False,
    ),
]
LinkGbpsOption = Annotated[
    str | None,
    typer.Option(
        "--link-gbps",
        help="The link the trace ran on (Gbit/s or a preset); default: the capture manifest's link_gbps.",
        show_default=False,
    ),
]
LatencyOption = Annotated[
    str,
    typer.Option("--latency", help="Latency of one step of a collective (α): 5us, 0.2ms; at most 1 hour."),
]
AlgorithmOption = Annotated[
    str, typer.Option("--algorithm", help="Collective algorithm of the cost model: ring or tree.")
]
CodecGbpsOption = Annotated[
    float | None,
    typer.Option(
        "--codec-gbps",
        help="Compression codec throughput, Gbit/s of gradient for encoding and for decoding (positive); "
        "default: free (an upper bound on what compression gives).",
        show_default=False,
    ),
]
TargetSfOption = Annotated[
    float | None,
    typer.Option(
        "--target-sf",
        help="Also search the bandwidth, and the compression ratio at each bandwidth, that reach this "
        "scaling factor, in (0, 1].",
        show_default=False,
    ),
]
IterationOption = Annotated[
    list[int] | None,
    typer.Option(
        "--iteration", help="Average over these iterations only (ProfilerStep numbers); repeatable."
    ),
]


def whatif_command(
    paths: PathsArgument,
    bandwidth: BandwidthOption = None,
    world_size: WorldSizeOption = None,
    compression: CompressionOption = "1",
    buckets: BucketsOption = "measured",
    efficiency: EfficiencyOption = None,
    link_gbps: LinkGbpsOption = None,
    latency: LatencyOption = "0",
    algorithm: AlgorithmOption = "ring",
    codec_gbps: CodecGbpsOption = None,
    target_sf: TargetSfOption = None,
    iteration: IterationOption = None,
    json_output: JsonOption = False,
    rank: RankOption = None,
    rank_regex: RankRegexOption = None,
    comm_kernel: CommKernelOption = None,
    include_python: IncludePythonOption = False,
    executor: ExecutorOption = None,
    ray_address: RayAddressOption = None,
) -> None:
    """Predict iteration time, exposed communication and scaling factor under other conditions.

    Replays the run's dependency graph (compute, gradient-ready times, collectives, waits) with
    other link bandwidths, world sizes, bucket sizes and compression ratios; first checks that the
    measured conditions reproduce the measured iteration time (self-replay error).

    Exit codes: 0 success, 2 bad input or usage (one 'error:' line on stderr), 3 a bug in timeline,
    130 interrupted.
    """
    with user_errors():
        from timeline.analysis.links import parse_link_gbps
        from timeline.results.whatif import build_whatif_report
        from timeline.whatif.settings import choose_efficiency, parse_settings

        settings = parse_settings(
            bandwidth=bandwidth,
            world_size=world_size,
            compression=compression,
            buckets=buckets,
            algorithm=algorithm,
            latency=latency,
            codec_gbps=codec_gbps,
            target_sf=target_sf,
        )
        measured_link = parse_link_gbps(link_gbps) if link_gbps is not None else None
        inputs = inputs_of(paths, rank, rank_regex, comm_kernel, include_python, executor, ray_address)
        built = graph(inputs, link_gbps=measured_link)
        link_source = (
            "--link-gbps"
            if measured_link is not None
            else ("capture manifest" if built.link_gbps is not None else "not recorded")
        )
        chosen, note = choose_efficiency(
            efficiency, link_known=built.link_gbps is not None, bandwidths=settings.bandwidths
        )
        if note is not None:
            typer.echo(f"note: {note}", err=True)
        report = build_whatif_report(
            built,
            bandwidths=settings.bandwidths,
            world_sizes=settings.world_sizes,
            compressions=settings.compressions,
            buckets=settings.buckets,
            efficiency=chosen,
            latency_s=settings.latency_s,
            algorithm=settings.algorithm,
            codec_gbps=settings.codec_gbps,
            target_sf=settings.target_sf,
            iterations=iteration or None,
            link_source=link_source,
        )
    echo_warnings(report["warnings"])
    if json_output:
        from timeline.render.json import render_json

        typer.echo(render_json(report))
        return
    from timeline.render.terminal.whatif import render_whatif_report

    render_whatif_report(report, console(150))
