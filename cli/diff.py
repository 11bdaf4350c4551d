"""``timeline diff BASE NEW``: two runs compared per iteration, rank and collective, against their noise."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Annotated

import typer

from cli.common import (
    OutputFlags,
    RunFlags,
    echo_warnings,
    emit,
    fail,
    inputs_of,
    loading,
    run_options,
    user_errors,
)
from cli.options import (
    AlignOption,
    CacheDirOption,
    CommKernelOption,
    CsvOption,
    IncludePythonOption,
    IterationRangeOption,
    IterationsOption,
    JsonOption,
    LinkOption,
    NoCacheOption,
    NoColorOption,
    RanksOption,
)

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["diff_command"]

_RUN_HELP = (
    "traces (a file, a directory of rank traces, a glob pattern), a Parquet file or dataset, or a "
    "summary JSON from 'timeline analyze --json'."
)


BaseArgument = Annotated[str, typer.Argument(help="The run compared with: " + _RUN_HELP, show_default=False)]
NewArgument = Annotated[str, typer.Argument(help="The run compared: " + _RUN_HELP, show_default=False)]
MarkdownOption = Annotated[
    str | None,
    typer.Option(
        "--markdown",
        help="Write the comparison as markdown (for a pull-request comment) to this file; '-' prints "
        "it instead of the tables.",
        show_default=False,
    ),
]
NoiseKOption = Annotated[
    float,
    typer.Option(
        "--noise-k",
        min=0.0,
        max=1000.0,
        help="A change is beyond the noise when it exceeds this many times its standard error, from the "
        "spread of both runs' per-iteration values (the rule of timeline check's regressions).",
    ),
]


def diff_command(
    base: BaseArgument,
    new: NewArgument,
    json_output: JsonOption = False,
    markdown: MarkdownOption = None,
    noise_k: NoiseKOption = 3.0,
    csv: CsvOption = None,
    link_gbps: LinkOption = None,
    align: AlignOption = False,
    ranks: RanksOption = None,
    iterations: IterationsOption = None,
    comm_kernel: CommKernelOption = None,
    include_python: IncludePythonOption = False,
    iteration_range: IterationRangeOption = None,
    no_cache: NoCacheOption = False,
    cache_dir: CacheDirOption = None,
    no_color: NoColorOption = False,
) -> None:
    """Compare two runs: step time, compute, exposed and hidden communication, busbw, and their noise.

    Iterations are paired by position (each run's sorted), ranks by number, collectives by kind.
    --ranks and --iterations select both runs alike (iterations by their numbers in each run); a
    summary JSON cannot be selected from. See docs/diff.md.

    Exit codes: 0 success, 2 bad input or usage (one 'error:' line on stderr), 3 a bug in timeline,
    130 interrupted.
    """
    flags = RunFlags(
        comm_kernels=comm_kernel,
        include_python=include_python,
        iteration_range=iteration_range,
        no_cache=no_cache,
        cache_dir=cache_dir,
        align=align,
        link_gbps=link_gbps,
        ranks=ranks,
        iterations=iterations,
    )
    out = OutputFlags(json_output=json_output, markdown=markdown, csv=csv, no_color=no_color)
    _diff(base, new, flags, out, noise_k=noise_k)


def _diff(base: str, new: str, flags: RunFlags, out: OutputFlags, *, noise_k: float) -> None:
    """Print the comparison of the runs ``base`` and ``new`` (and write ``--markdown FILE``)."""
    markdown = out.markdown
    if out.json_output and markdown == "-":
        fail("--json prints JSON on stdout; it cannot be combined with --markdown -")
    with user_errors():
        from timeline.budgets.runs import read_run
        from timeline.outputs import check_output, write_output
        from timeline.render.markdown import render_diff_markdown
        from timeline.results.diff import build_diff

        if markdown is not None and markdown != "-":
            check_output(markdown, reads=[base, new], option="--markdown")
        inputs = inputs_of([base], flags)
        options = run_options(flags)
        runs = []
        for path in (base, new):
            with loading() as (progress, warn):
                run = read_run(
                    replace(inputs, paths=[path]), options, match=True, progress=progress, warn=warn
                )
                runs.append(run)
        diff = build_diff(runs[0], runs[1], k=noise_k)
        if markdown is not None and markdown != "-":
            write_output(markdown, render_diff_markdown(diff))
    echo_warnings(diff.warnings)
    if markdown == "-":
        typer.echo(render_diff_markdown(diff), nl=False)
        return

    def draw(console: Console) -> None:
        from timeline.render.terminal.diff import render_diff

        render_diff(diff, console)

    # the markdown is the comparison's own (render_diff_markdown), printed or written above
    emit(diff, draw, replace(out, markdown=None), title="timeline diff")
