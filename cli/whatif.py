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
    DimensionOption,
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
    list[str] | None,
    typer.Option(
        "--bandwidth",
        "-b",
        help="Link bandwidths to predict, one direction, comma-separated: 10,25,40,100Gbps (a unit on "
        "the last applies to all), presets (100gbe, ib-hdr), 'measured'. Per dimension of the process "
        "groups, one setting: tp=nvlink4,dp=25Gbps (a bare link: every other dimension). Repeatable: "
        "each -b adds its settings. Default: the measured link.",
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
    str | None,
    typer.Option(
        "--buckets",
        help="Gradient bucketing, comma-separated: measured, ddp:<cap MiB>[:<first MiB>], "
        "fusion:<MiB>[:<cycle ms>] (Horovod). Rebuilt from the gradient-ready times. Default: measured "
        "(a trace), fusion:64:5 (a .bk.log backward profile).",
        show_default=False,
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
        help="The link the trace ran on (Gbit/s or a preset); per dimension: tp=nvlink4,dp=25 (a bare link: "
        "every other dimension). Default: the capture manifest's link_gbps.",
        show_default=False,
    ),
]
LatencyOption = Annotated[
    str | None,
    typer.Option(
        "--latency",
        help="Latency of one step of a collective: 5us, 0.2ms, 0; at most 1 hour. Each collective's fixed "
        "cost becomes its steps times it, in place of the one fitted from the trace (default: as measured). "
        "Per dimension: tp=1us,dp=20us (a bare value: every other dimension).",
    ),
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
SingleStepMsOption = Annotated[
    float | None,
    typer.Option(
        "--single-step-ms",
        help="With a seed backward profile (.bk.log): the one-GPU iteration time in ms (T_single); needed.",
        show_default=False,
    ),
]
VectorAddCostOption = Annotated[
    str | None,
    typer.Option(
        "--vector-add-cost",
        help="With a seed backward profile (.bk.log): the GPU vector-add cost table (rows bytes,seconds); "
        "default: cuda_vec_add.log one folder above the profile's, else reductions count as free (a note "
        "says so).",
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
    buckets: BucketsOption = None,
    efficiency: EfficiencyOption = None,
    link_gbps: LinkGbpsOption = None,
    latency: LatencyOption = None,
    algorithm: AlgorithmOption = "ring",
    codec_gbps: CodecGbpsOption = None,
    target_sf: TargetSfOption = None,
    iteration: IterationOption = None,
    single_step_ms: SingleStepMsOption = None,
    vector_add_cost: VectorAddCostOption = None,
    json_output: JsonOption = False,
    dimension: DimensionOption = None,
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
    measured conditions reproduce the measured iteration time (self-replay error). A seed paper
    backward profile (PROFILE.bk.log, with --single-step-ms) runs the paper's simulator instead.

    Exit codes: 0 success, 2 bad input or usage (one 'error:' line on stderr), 3 a bug in timeline,
    130 interrupted.
    """
    from timeline.whatif.seed import is_backward_profile

    if any(is_backward_profile(path) for path in paths):
        trace_options = {
            "--efficiency": efficiency,
            "--link-gbps": link_gbps,
            "--iteration": iteration,
            "--dimension": dimension,
            "--rank": rank,
            "--rank-regex": rank_regex,
            "--comm-kernel": comm_kernel,
            "--include-python": include_python or None,
            "--executor": executor,
            "--ray-address": ray_address,
        }
        given = [option for option, value in trace_options.items() if value is not None]
        with user_errors():
            _seed_whatif(
                paths,
                given,
                single_step_ms=single_step_ms,
                vector_add_cost=vector_add_cost,
                bandwidth=bandwidth,
                world_size=world_size,
                compression=compression,
                buckets=buckets,
                algorithm=algorithm,
                latency=latency,
                codec_gbps=codec_gbps,
                target_sf=target_sf,
                json_output=json_output,
            )
        return
    with user_errors():
        from dataclasses import replace

        from timeline.analysis.dimension_labels import parse_dimension_overrides
        from timeline.errors import UsageError
        from timeline.whatif.settings import (
            check_dimensions,
            check_named,
            choose_efficiency,
            parse_measured_links,
            parse_settings,
        )

        for option, value in (("--single-step-ms", single_step_ms), ("--vector-add-cost", vector_add_cost)):
            if value is not None:
                raise UsageError(f"{option}: applies to a seed backward profile (PROFILE.bk.log) only")
        settings = parse_settings(
            bandwidth=bandwidth,
            world_size=world_size,
            compression=compression,
            buckets=buckets if buckets is not None else "measured",
            algorithm=algorithm,
            latency=latency,
            codec_gbps=codec_gbps,
            target_sf=target_sf,
        )
        measured_link, measured_by_dimension = parse_measured_links(link_gbps)
        inputs = inputs_of(paths, rank, rank_regex, comm_kernel, include_python, executor, ray_address)
        built = graph(inputs, link_gbps=measured_link, overrides=parse_dimension_overrides(dimension or []))
        check_named([("--link-gbps", d) for d, _ in measured_by_dimension], built.dimensions)
        built = replace(built, dimension_links=measured_by_dimension)
        link_source = (
            "--link-gbps"
            if link_gbps is not None
            else ("capture manifest" if built.link_gbps is not None else "not recorded")
        )
        check_dimensions(settings, built.dimensions)
        named = [gbps for _, pairs in settings.links for _, gbps in pairs]
        chosen, note = choose_efficiency(
            efficiency,
            link_known=built.link_gbps is not None or bool(measured_by_dimension),
            bandwidths=[*settings.bandwidths, *named],
        )
        if note is not None:
            typer.echo(f"note: {note}", err=True)
        # imported after the load (it imports polars): a large trace is read as policy says
        from timeline.results.whatif import build_whatif_report

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
            dimension_bandwidths=settings.dimension_bandwidths,
            dimension_latencies=settings.dimension_latencies,
        )
    echo_warnings(report["warnings"])
    if json_output:
        from timeline.render.json import render_json

        typer.echo(render_json(report))
        return
    from timeline.render.terminal.whatif import render_whatif_report

    render_whatif_report(report, console(150))


def _seed_whatif(
    paths: list[str],
    given: list[str],
    *,
    single_step_ms: float | None,
    vector_add_cost: str | None,
    json_output: bool,
    bandwidth: list[str] | None,
    world_size: str | None,
    compression: str,
    buckets: str | None,
    algorithm: str,
    latency: str | None,
    codec_gbps: float | None,
    target_sf: float | None,
) -> None:
    """Run the seed paper's simulator on one backward profile and print its report."""
    from timeline.errors import UsageError
    from timeline.results.whatif import build_seed_report
    from timeline.whatif.seed import (
        FREE_ADDS,
        find_vector_add_cost,
        read_backward_profile,
        read_vector_add_cost,
        seed_grid,
    )
    from timeline.whatif.settings import parse_settings

    if len(paths) != 1:
        raise UsageError(f"{', '.join(paths)}: give one backward profile (.bk.log) alone, without traces")
    if given:
        raise UsageError(f"{given[0]}: applies to traces, not to a seed backward profile (.bk.log)")
    settings = parse_settings(
        bandwidth=bandwidth,
        world_size=world_size,
        compression=compression,
        buckets=buckets if buckets is not None else "fusion:64:5",
        algorithm=algorithm,
        latency=latency,
        codec_gbps=codec_gbps,
        target_sf=target_sf,
    )
    if settings.dimensions:
        option, dimension = settings.dimensions[0]
        msg = (
            f"{option} {dimension}=…: per-dimension settings apply to traces with process groups, "
            "not to a seed backward profile (.bk.log)"
        )
        raise UsageError(msg)
    grid = seed_grid(settings, single_step_ms=single_step_ms)
    profile = read_backward_profile(paths[0])
    table = vector_add_cost if vector_add_cost is not None else find_vector_add_cost(paths[0])
    add_cost = read_vector_add_cost(table) if table is not None else FREE_ADDS
    report = build_seed_report(
        profile,
        source=paths[0],
        single_s=grid.single_s,
        bandwidths=grid.bandwidths_gbps,
        world_sizes=grid.world_sizes,
        compressions=grid.compressions,
        buckets=grid.buckets,
        add_cost=add_cost,
        add_cost_source=str(table) if table is not None else None,
    )
    for note in report["notes"]:
        typer.echo(f"note: {note}", err=True)
    if json_output:
        from timeline.render.json import render_json

        typer.echo(render_json(report))
        return
    from timeline.render.terminal.whatif import render_seed_report

    render_seed_report(report, console(150))
