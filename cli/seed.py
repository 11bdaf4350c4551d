"""``timeline seed``: the seed paper's simulator on one of its one-GPU backward profiles (``.bk.log``).

Reads the profile (:func:`timeline.whatif.seed.read_backward_profile`) and the vector-add cost table
beside it (or ``--vector-add-cost``), checks the grid (:func:`timeline.whatif.seed.seed_grid`), and
prints :func:`timeline.results.whatif.build_seed_report`: one row per bandwidth, world size,
compression ratio and bucket policy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from cli.common import OutputFlags, emit, user_errors
from cli.options import JsonOption, MarkdownOption, NoColorOption

if TYPE_CHECKING:
    from rich.console import Console

    from timeline.results.whatif import SeedReport

__all__ = ["seed_command"]

ProfileArgument = Annotated[
    str,
    typer.Argument(
        help="A backward profile of the seed paper (Zhang et al., NetAI 2020): PROFILE.bk.log.",
        metavar="PROFILE.bk.log",
        show_default=False,
    ),
]
SingleStepMsOption = Annotated[
    float | None,
    typer.Option(
        "--single-step-ms",
        help="The one-GPU iteration time in ms (T_single; the paper's resnet50: 128.1); needed.",
        show_default=False,
    ),
]
BandwidthOption = Annotated[
    list[str] | None,
    typer.Option(
        "--bandwidth",
        "-b",
        help="Link bandwidths, one direction, comma-separated: 10,25,40,100Gbps (a unit on the last "
        "applies to all), presets (100gbe, ib-hdr); repeatable; needed (a profile has no measured link).",
        show_default=False,
    ),
]
WorldSizeOption = Annotated[
    str | None,
    typer.Option(
        "--world-size",
        "-n",
        help="World sizes, comma-separated (16,64), each 1 to 1,048,576; needed.",
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
        help="Gradient bucketing, comma-separated: fusion:<MiB>[:<cycle ms>] (Horovod's, the paper's) or "
        "ddp:<cap MiB>[:<first MiB>].",
    ),
]
VectorAddCostOption = Annotated[
    str | None,
    typer.Option(
        "--vector-add-cost",
        help="The GPU vector-add cost table (rows bytes,seconds); default: cuda_vec_add.log one folder "
        "above the profile's, else reductions count as free (a note says so).",
        show_default=False,
    ),
]


def seed_command(
    profile: ProfileArgument,
    single_step_ms: SingleStepMsOption = None,
    bandwidth: BandwidthOption = None,
    world_size: WorldSizeOption = None,
    compression: CompressionOption = "1",
    buckets: BucketsOption = "fusion:64:5",
    vector_add_cost: VectorAddCostOption = None,
    json_output: JsonOption = False,
    markdown: MarkdownOption = None,
    no_color: NoColorOption = False,
) -> None:
    """Predict the scaling factor of data-parallel training from a one-GPU backward profile.

    Runs the seed paper's simulator (Zhang et al., "Is Network the Bottleneck of Distributed
    Training?", NetAI 2020) on PROFILE.bk.log: buckets all-reduced one at a time on a ring over the
    full link, after the gradients they carry; one row per bandwidth, world size, compression ratio
    and bucket policy. For a trace of your own job, use 'timeline whatif'. A backward profile has
    no ranks and no iterations to select: no --ranks or --iterations.

    Exit codes: 0 success, 2 bad input or usage (one 'error:' line on stderr), 3 a bug in timeline,
    130 interrupted.
    """
    with user_errors():
        report = _seed_report(
            profile,
            single_step_ms=single_step_ms,
            bandwidth=bandwidth,
            world_size=world_size,
            compression=compression,
            buckets=buckets,
            vector_add_cost=vector_add_cost,
        )
    for note in report.notes:
        typer.echo(f"note: {note}", err=True)

    def draw(console: Console) -> None:
        from timeline.render.terminal.whatif import render_seed_report

        render_seed_report(report, console)

    emit(
        report,
        draw,
        OutputFlags(json_output=json_output, markdown=markdown, no_color=no_color),
        title="timeline seed",
    )


def _seed_report(
    profile: str,
    *,
    single_step_ms: float | None,
    bandwidth: list[str] | None,
    world_size: str | None,
    compression: str,
    buckets: str,
    vector_add_cost: str | None,
) -> SeedReport:
    """Read the settings, the profile and its cost table; return the simulator's report.

    Raises
    ------
    TimelineError
        A path that is not a backward profile, bad settings, a malformed profile or cost table.
    """
    from timeline.errors import UsageError
    from timeline.results.whatif import build_seed_report
    from timeline.whatif.seed import (
        FREE_ADDS,
        find_vector_add_cost,
        is_backward_profile,
        read_backward_profile,
        read_vector_add_cost,
        seed_grid,
    )
    from timeline.whatif.settings import parse_settings

    if not is_backward_profile(profile):
        msg = f"{profile}: not a seed backward profile (PROFILE.bk.log); for traces use timeline whatif"
        raise UsageError(msg)
    settings = parse_settings(
        bandwidth=bandwidth,
        world_size=world_size,
        compression=compression,
        buckets=buckets,
        algorithm="ring",
        latency=None,
    )
    if settings.dimensions:
        option, dimension = settings.dimensions[0]
        msg = (
            f"{option} {dimension}=…: per-dimension settings apply to traces with process groups, "
            "not to a seed backward profile (.bk.log)"
        )
        raise UsageError(msg)
    grid = seed_grid(settings, single_step_ms=single_step_ms)
    read = read_backward_profile(profile)
    table = vector_add_cost if vector_add_cost is not None else find_vector_add_cost(profile)
    add_cost = read_vector_add_cost(table) if table is not None else FREE_ADDS
    source = str(table) if table is not None else None
    return build_seed_report(read, grid, source=profile, add_cost=add_cost, add_cost_source=source)
