"""``timeline analyze``: exposed vs hidden communication per rank, per iteration and per collective."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

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
    CodecOption,
    CommKernelOption,
    CsvOption,
    DimensionOption,
    ExecutorOption,
    GpusPerNodeOption,
    IncludePythonOption,
    IterationRangeOption,
    IterationsOption,
    JsonOption,
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
    VerboseOption,
)

if TYPE_CHECKING:
    from pathlib import Path

    from rich.console import Console

    from timeline.dumps import Dumps
    from timeline.results.flight_recorder import FlightReport

__all__ = ["analyze_command"]

NoFindingsOption = Annotated[
    bool,
    typer.Option(
        "--no-findings",
        help="Leave out the verdict and the findings (what limits the job and what would fix it).",
    ),
]


def analyze_command(
    paths: PathsArgument,
    json_output: JsonOption = False,
    markdown: MarkdownOption = None,
    csv: CsvOption = None,
    top: TopOption = None,
    ranks: RanksOption = None,
    iterations: IterationsOption = None,
    rank: RankOption = None,
    rank_regex: RankRegexOption = None,
    comm_kernel: CommKernelOption = None,
    include_python: IncludePythonOption = False,
    iteration_range: IterationRangeOption = None,
    link_gbps: LinkOption = None,
    align: AlignOption = False,
    executor: ExecutorOption = None,
    ray_address: RayAddressOption = None,
    no_cache: NoCacheOption = False,
    cache_dir: CacheDirOption = None,
    dimension: DimensionOption = None,
    gpus_per_node: GpusPerNodeOption = None,
    codec_gbps: CodecOption = None,
    no_findings: NoFindingsOption = False,
    verbose: VerboseOption = False,
    no_color: NoColorOption = False,
) -> None:
    """Measure communication hidden under compute and exposed (stretching the step), per rank and iteration.

    First the verdict and the findings: what limits the job and what would fix it, each fix ranked by
    the gain the what-if replay predicts (docs/diagnosis.md). Given PyTorch Flight Recorder dumps: why
    the job stopped (which ranks, in which group and collective, and how), as a verdict and findings
    (--ranks and --iterations select profiler traces, not dumps). --top: the top exposed collectives
    listed (default 10).

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
        codec_gbps=codec_gbps,
        ranks=ranks,
        iterations=iterations,
    )
    out = OutputFlags(json_output=json_output, markdown=markdown, csv=csv, no_color=no_color)
    _analyze(paths, flags, out, top=10 if top is None else top, no_findings=no_findings, verbose=verbose)


def _analyze(
    paths: list[str], flags: RunFlags, out: OutputFlags, *, top: int, no_findings: bool, verbose: bool
) -> None:
    """Print the summary of the run of ``paths`` (with its dumps' report), or the Flight Recorder dumps'."""
    with user_errors():
        loaded, flight, traces = _flight_of(paths, flags.rank, flags.rank_regex)
    if flight is not None and not traces:
        dumps_only(flags.ranks, flags.iterations)
        _print(flight, out, verbose=verbose)
        return
    with user_errors():
        from timeline.run import Needs

        options = run_options(flags)
        inputs = inputs_of([str(p) for p in traces] if flight is not None else paths, flags)
        # rank by rank, the communication events are kept (a few thousand rows per rank) for the
        # communication per dimension, the utilisation, --align, dumps and the findings, whose tasks
        # also return the what-if graph's parts
        run = open_run(inputs, options, needs=Needs(communication=True, graph=not no_findings))
        summary = run.summary_data(top=top, findings=not no_findings)
        if flight is not None and loaded is not None:
            from timeline.results.flight_recorder import profiler_matches

            flight.matches = profiler_matches(loaded, run.trace.events)
            summary.flight_recorder = flight
    # the load warnings and the run's were printed while loading; the analysis' own follow
    echo_warnings(summary.warnings[len(run.warnings) :])

    def draw(console: Console) -> None:
        if flight is not None:
            from timeline.render.terminal.flight_recorder import render_flight_verdict

            render_flight_verdict(flight, console)
        from timeline.render.terminal.summary import render_summary

        render_summary(summary, console, verbose=verbose)

    emit(summary, draw, out, title="timeline analyze", top=top)


def _flight_of(
    paths: list[str], rank: int | None, rank_regex: str | None
) -> tuple[Dumps | None, FlightReport | None, list[Path]]:
    """Return the inputs' Flight Recorder dumps and their report (None without dumps), and the traces."""
    dumps, traces = flight_inputs(paths, rank)
    if not dumps:
        return None, None, traces
    from timeline.results.flight_recorder import build_flight_report

    loaded = flight_dumps(dumps, rank=None if traces else rank, rank_regex=rank_regex)
    return loaded, build_flight_report(loaded), traces


def _print(flight: FlightReport, out: OutputFlags, *, verbose: bool) -> None:
    """Print the dumps' report alone, as --json, --markdown or --csv ask, else its verdict and findings."""

    def draw(console: Console) -> None:
        from timeline.render.terminal.flight_recorder import render_flight_verdict

        render_flight_verdict(flight, console, verbose=verbose)

    emit(flight, draw, out, title="Flight Recorder dumps")
