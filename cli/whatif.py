"""``timeline whatif``: predict iteration time and scaling on other links, world sizes, buckets, compression.

Reads the options into one :class:`~timeline.whatif.settings.Settings`, builds the run's dependency
graph, then :func:`timeline.results.whatif.build_whatif_report` checks it by replaying the trace
under its own conditions (the self-replay error), sweeps the settings and, with ``--target-sf``,
searches the bandwidth or compression ratio that reaches a scaling factor. A seed paper's backward
profile (``.bk.log``) is refused: ``timeline seed`` simulates it (:mod:`cli.seed`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

import typer

from cli.common import OutputFlags, RunFlags, echo_warnings, emit, inputs_of, open_run, user_errors
from cli.options import (
    CacheDirOption,
    CommKernelOption,
    DimensionOption,
    ExecutorOption,
    IncludePythonOption,
    IterationRangeOption,
    IterationsOption,
    JsonOption,
    MarkdownOption,
    NoCacheOption,
    NoColorOption,
    PathsArgument,
    RankOption,
    RankRegexOption,
    RanksOption,
    RayAddressOption,
    VerboseOption,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from rich.console import Console

    from timeline.results.whatif import WhatIfReport
    from timeline.run import Inputs
    from timeline.whatif.settings import DimensionValues, Settings

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
    str,
    typer.Option(
        "--buckets",
        help="Gradient bucketing, comma-separated: measured (the trace's own), ddp:<cap MiB>[:<first MiB>], "
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
IterationAlias = Annotated[
    list[int] | None,
    typer.Option("--iteration", hidden=True, help="The old name of --iterations; repeatable."),
]


def whatif_command(
    paths: PathsArgument,
    bandwidth: BandwidthOption = None,
    world_size: WorldSizeOption = None,
    compression: CompressionOption = "1",
    buckets: BucketsOption = "measured",
    efficiency: EfficiencyOption = None,
    link_gbps: LinkGbpsOption = None,
    latency: LatencyOption = None,
    algorithm: AlgorithmOption = "ring",
    codec_gbps: CodecGbpsOption = None,
    target_sf: TargetSfOption = None,
    iterations: IterationsOption = None,
    iteration: IterationAlias = None,
    ranks: RanksOption = None,
    json_output: JsonOption = False,
    markdown: MarkdownOption = None,
    no_color: NoColorOption = False,
    verbose: VerboseOption = False,
    dimension: DimensionOption = None,
    rank: RankOption = None,
    rank_regex: RankRegexOption = None,
    comm_kernel: CommKernelOption = None,
    include_python: IncludePythonOption = False,
    iteration_range: IterationRangeOption = None,
    executor: ExecutorOption = None,
    ray_address: RayAddressOption = None,
    no_cache: NoCacheOption = False,
    cache_dir: CacheDirOption = None,
) -> None:
    """Predict iteration time, exposed communication and scaling factor under other conditions.

    Replays the run's dependency graph (compute, gradient-ready times, collectives, waits) with
    other link bandwidths, world sizes, bucket sizes and compression ratios; first checks that the
    measured conditions reproduce the measured iteration time (self-replay error). A seed paper
    backward profile (PROFILE.bk.log) is for 'timeline seed'. --iterations: the figures are
    averages over those iterations of the replay of the whole run; --ranks: the run of those ranks
    alone is replayed.

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
        dimension=dimension,
        ranks=ranks,
    )
    given = _WhatifOptions(
        bandwidth=bandwidth,
        world_size=world_size,
        compression=compression,
        buckets=buckets,
        efficiency=efficiency,
        link_gbps=link_gbps,
        latency=latency,
        algorithm=algorithm,
        codec_gbps=codec_gbps,
        target_sf=target_sf,
        iterations=iterations,
        iteration=iteration,
    )
    out = OutputFlags(json_output=json_output, markdown=markdown, no_color=no_color)
    _whatif(paths, flags, given, out, verbose=verbose)


@dataclass(frozen=True, kw_only=True)
class _WhatifOptions:
    """The what-if options as given: what to sweep, the measured link, the cost model, the iterations.

    ``link_gbps``: the link the trace ran on (not ``RunFlags.link_gbps``, the link utilisation is
    measured against); ``iteration``: ``--iteration``, the old name of ``--iterations``.
    """

    bandwidth: list[str] | None
    world_size: str | None
    compression: str
    buckets: str
    efficiency: str | None
    link_gbps: str | None
    latency: str | None
    algorithm: str
    codec_gbps: float | None
    target_sf: float | None
    iterations: str | None
    iteration: list[int] | None

    def settings(self) -> Settings:
        """Return the settings to sweep, checked (:func:`~timeline.whatif.settings.parse_settings`)."""
        from timeline.selection import parse_numbers
        from timeline.whatif.settings import parse_settings

        chosen = parse_numbers(self.iterations, "--iterations")
        if self.iteration:
            chosen = tuple(sorted({*(chosen or ()), *self.iteration}))
        return parse_settings(
            bandwidth=self.bandwidth,
            world_size=self.world_size,
            compression=self.compression,
            buckets=self.buckets,
            algorithm=self.algorithm,
            latency=self.latency,
            codec_gbps=self.codec_gbps,
            target_sf=self.target_sf,
            iterations=chosen,
        )


def _whatif(
    paths: list[str], flags: RunFlags, given: _WhatifOptions, out: OutputFlags, *, verbose: bool
) -> None:
    """Print the what-if report of the run of ``paths`` under the settings ``given``."""
    with user_errors():
        _refuse_backward_profiles(paths)
        from timeline.selection import parse_numbers
        from timeline.whatif.settings import parse_measured_links

        settings = given.settings()
        measured = parse_measured_links(given.link_gbps)
        inputs = inputs_of(paths, flags)
        selected = parse_numbers(flags.ranks, "--ranks")
        report = _whatif_report(
            inputs, settings, measured, efficiency=given.efficiency, dimension=flags.dimension, ranks=selected
        )
    echo_warnings(report.warnings)

    def draw(console: Console) -> None:
        from timeline.render.terminal.whatif import render_whatif_report

        render_whatif_report(report, console, verbose=verbose)

    emit(report, draw, out, title="timeline whatif")


def _refuse_backward_profiles(paths: list[str]) -> None:
    """Refuse a seed paper's backward profile: ``timeline seed`` simulates it.

    Raises
    ------
    UsageError
        A path ending in ``.bk.log``.
    """
    from timeline.errors import UsageError
    from timeline.whatif.seed import is_backward_profile

    for path in paths:
        if is_backward_profile(path):
            msg = (
                f"{path}: a seed backward profile, not a trace; use timeline seed {path} --single-step-ms MS "
                "--bandwidth LIST --world-size LIST (see 'timeline seed --help')"
            )
            raise UsageError(msg)


def _whatif_report(
    inputs: Inputs,
    settings: Settings,
    measured: tuple[float | None, DimensionValues],
    *,
    efficiency: str | None,
    dimension: Sequence[str] | None,
    ranks: tuple[int, ...] | None = None,
) -> WhatIfReport:
    """Read the run's what-if graph with the measured links, pick the efficiency, and build the report.

    ``measured``: ``--link-gbps`` read (the link of every collective, the links of named dimensions).
    ``ranks``: replay the run of these ranks alone (``--ranks``).

    Raises
    ------
    TimelineError
        Bad input, a dimension the trace lacks, a bad efficiency.
    """
    from dataclasses import replace

    from timeline.analysis.dimension_labels import parse_dimension_overrides
    from timeline.run import RunOptions
    from timeline.whatif.settings import check_dimensions, check_named, choose_efficiency

    link, by_dimension = measured
    options = RunOptions(
        link_gbps=link, dimensions=parse_dimension_overrides(list(dimension or [])), ranks=ranks
    )
    built = open_run(inputs, options, first=lambda run: run.graph).graph
    check_named([("--link-gbps", d) for d, _ in by_dimension], built.dimensions)
    built = replace(built, dimension_links=by_dimension)
    check_dimensions(settings, built.dimensions)
    named = [gbps for _, pairs in settings.links for _, gbps in pairs]
    chosen, note = choose_efficiency(
        efficiency,
        link_known=built.link_gbps is not None or bool(by_dimension),
        bandwidths=[*settings.bandwidths, *named],
        target=settings.target_sf is not None,
    )
    if note is not None:
        typer.echo(f"note: {note}", err=True)
    # imported after the load (it imports polars): a large trace is read as policy says
    from timeline.results.whatif import build_whatif_report, link_source_of

    given = link is not None or bool(by_dimension)
    source = link_source_of(built, given=given)
    return build_whatif_report(built, replace(settings, efficiency=chosen), link_source=source)
