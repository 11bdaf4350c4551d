"""``timeline check``: fail a CI build when communication overhead goes over budget or regresses.

Exit codes: 0 every budget holds, 1 a budget is exceeded (or has no data to be measured on), 2 bad
input, usage or a bad budget file, 3 a bug in timeline, 130 interrupted. Never imports bokeh or
holoviews, so it starts fast; matches the collectives across ranks only when a budget reads them.
Starter budgets are ``timeline init``'s (``cli/init.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cli.common import (
    RunFlags,
    be_quiet,
    echo_link_of,
    echo_warnings,
    fail,
    inputs_of,
    loading,
    output_width,
    run_options,
    user_errors,
)
from cli.options import (
    AlignOption,
    CacheDirOption,
    CodecOption,
    CommKernelOption,
    DimensionOption,
    ExecutorOption,
    GpusPerNodeOption,
    IncludePythonOption,
    IterationRangeOption,
    IterationsOption,
    LinkOption,
    NoCacheOption,
    NoColorOption,
    PathsArgument,
    QuietOption,
    RankOption,
    RankRegexOption,
    RanksOption,
    RayAddressOption,
)

if TYPE_CHECKING:
    from timeline.budgets.checking import CheckPlan
    from timeline.budgets.frames import MetricFrames
    from timeline.results.diagnosis import DiagnosisReport
    from timeline.results.verdicts import CheckReport
    from timeline.run import Inputs

__all__ = ["check_command"]

BudgetOption = Annotated[
    Path | None,
    typer.Option(
        "--budget",
        help="Budget file (TOML). Default: ./timeline.toml, else [tool.timeline] in ./pyproject.toml.",
        show_default=False,
    ),
]
BaselineOption = Annotated[
    list[str] | None,
    typer.Option(
        "--baseline",
        help="The run to compare with for the [regression] checks: traces, a Parquet file, or a "
        "summary JSON from 'timeline analyze --json'; repeatable.",
        show_default=False,
    ),
]
JsonVerdictsOption = Annotated[bool, typer.Option("--json", help="Print the verdicts as one JSON object.")]
JunitOption = Annotated[
    Path | None, typer.Option("--junit", help="Write a JUnit XML report to this file.", show_default=False)
]
GithubOption = Annotated[
    bool, typer.Option("--github", help="Also print GitHub Actions annotations (::error) for failed budgets.")
]


CheckMarkdownOption = Annotated[
    str | None,
    typer.Option(
        "--markdown",
        metavar="FILE",
        help="Write a markdown summary (for a pull-request comment or $GITHUB_STEP_SUMMARY) to this "
        "file; '-' prints it instead of the table.",
        show_default=False,
    ),
]


def check_command(
    paths: PathsArgument,
    budget: BudgetOption = None,
    baseline: BaselineOption = None,
    json_output: JsonVerdictsOption = False,
    junit: JunitOption = None,
    github: GithubOption = False,
    markdown: CheckMarkdownOption = None,
    link_gbps: LinkOption = None,
    align: AlignOption = False,
    ranks: RanksOption = None,
    iterations: IterationsOption = None,
    quiet: QuietOption = False,
    no_color: NoColorOption = False,
    rank: RankOption = None,
    rank_regex: RankRegexOption = None,
    comm_kernel: CommKernelOption = None,
    include_python: IncludePythonOption = False,
    iteration_range: IterationRangeOption = None,
    executor: ExecutorOption = None,
    ray_address: RayAddressOption = None,
    no_cache: NoCacheOption = False,
    cache_dir: CacheDirOption = None,
    dimension: DimensionOption = None,
    gpus_per_node: GpusPerNodeOption = None,
    codec_gbps: CodecOption = None,
    init: Annotated[bool, typer.Option("--init", hidden=True)] = False,
    force: Annotated[bool, typer.Option("--force", hidden=True)] = False,
) -> None:
    """Check a run against communication budgets (and a baseline run); fail the build when one is exceeded.

    Exit codes: 0 every budget holds, 1 a budget is exceeded or has no data,
    2 bad input, usage or a bad budget file (one 'error:' line on stderr), 3 a bug in timeline,
    130 interrupted. Starter budgets: 'timeline init PATH...'. See docs/ci.md. --ranks and
    --iterations select the run and its baseline alike. --quiet: nothing on stdout, and on stderr
    only errors and why a budget failed. The table is plain text: --no-color changes nothing in it.
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
    out = _Outputs(json_output=json_output, junit=junit, github=github, markdown=markdown, quiet=quiet)
    _check(paths, flags, out, budget=budget, baseline=baseline, init=init, force=force)


@dataclass(frozen=True, kw_only=True)
class _Outputs:
    """What ``timeline check`` prints and writes: ``--json``, ``--junit``, ``--github``, ``--markdown``."""

    json_output: bool
    junit: Path | None
    github: bool
    markdown: str | None
    quiet: bool
    """``--quiet``: only why a budget failed, on stderr."""


def _check(
    paths: list[str],
    flags: RunFlags,
    out: _Outputs,
    *,
    budget: Path | None,
    baseline: list[str] | None,
    init: bool,
    force: bool,
) -> None:
    """Check the run of ``paths`` against the budgets, print the verdicts, exit with the check's code."""
    be_quiet(out.quiet)
    if init or force:
        fail(f"{'--init' if init else '--force'} moved: write starter budgets with 'timeline init PATH...'")
    if out.json_output and (out.github or out.markdown == "-"):
        fail("--json prints JSON on stdout; it cannot be combined with --github or --markdown -")
    with user_errors():
        from timeline.budgets.checking import plan_check

        options = run_options(flags, echo_link=False)
        plan = plan_check(budget, options, baseline=baseline or (), markdown=out.markdown is not None)
        _check_outputs(out.junit, out.markdown, reads=[*paths, plan.budgets.path, *(baseline or [])])
        echo_link_of(flags.link_gbps, plan.options.link_gbps)
        echo_warnings(plan.warnings)
        run, old = _read_runs(plan, inputs_of(paths, flags))
        # imported once the runs are read (they import polars): a large trace is read as policy says
        from timeline.budgets.evaluation import evaluate_budgets

        report = evaluate_budgets(plan.budgets, run, baseline=old, link_gbps=plan.link_gbps)
        _write_files(report, out.junit, out.markdown, run.diagnosis)
    if out.quiet:
        _print_failures(report)
    else:
        markdown = out.markdown == "-"
        _print(
            report, json_output=out.json_output, markdown=markdown, github=out.github, diagnosis=run.diagnosis
        )
    raise typer.Exit(report.exit_code)


def _read_runs(plan: CheckPlan, inputs: Inputs) -> tuple[MetricFrames, MetricFrames | None]:
    """Read the run, and its baseline when a budget compares with one, each with its progress bar."""
    with loading() as (progress, warn):
        run = plan.read(inputs, progress=progress, warn=warn)
    old = None
    if plan.baseline:
        with loading() as (progress, warn):
            old = plan.read(inputs, baseline=True, progress=progress, warn=warn)
    return run, old


def _print_failures(report: CheckReport) -> None:
    """Print, on stderr, why each budget that did not hold failed (``--quiet``: nothing else)."""
    from timeline.render.terminal.verdicts import LABELS

    for v in report.verdicts:
        if v.status not in ("pass", "skip"):
            typer.echo(f"{LABELS[v.status]} {v.name}: {v.message}", err=True)


def _write_files(
    report: CheckReport, junit: Path | None, markdown: str | None, diagnosis: DiagnosisReport | None
) -> None:
    """Write the JUnit XML report and the markdown summary files asked for."""
    if junit is not None:
        from timeline.render.junit import render_junit

        _write(junit, render_junit(report))
    if markdown is not None and markdown != "-":
        from timeline.render.markdown import render_markdown

        _write(Path(markdown), render_markdown(report, diagnosis=diagnosis))


def _print(
    report: CheckReport,
    *,
    json_output: bool,
    markdown: bool,
    github: bool,
    diagnosis: DiagnosisReport | None,
) -> None:
    """Print the verdicts on stdout: JSON, markdown or the table; then the GitHub annotations."""
    if json_output:
        from timeline.render.json import render_json

        typer.echo(render_json(report))
    elif markdown:
        from timeline.render.markdown import render_markdown

        typer.echo(render_markdown(report, diagnosis=diagnosis), nl=False)
    else:
        from timeline.render.terminal.verdicts import render_table

        typer.echo(render_table(report, width=output_width()), nl=False)
    if github:
        from timeline.render.github import render_github

        typer.echo(render_github(report), nl=False)


def _check_outputs(junit: Path | None, markdown: str | None, *, reads: list[str | Path]) -> None:
    """Refuse a --junit or --markdown file that the check reads (a trace, the budget file, a baseline)."""
    from timeline.outputs import check_output

    if junit is not None:
        check_output(junit, reads=reads, option="--junit")
    if markdown is not None and markdown != "-":
        check_output(markdown, reads=reads, option="--markdown")


def _write(path: Path, text: str) -> None:
    """Write a report whole (:func:`timeline.outputs.write_output`): a failure leaves no file."""
    from timeline.outputs import write_output

    write_output(path, text)
