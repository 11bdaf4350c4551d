"""``timeline check``: fail a CI build when communication overhead goes over budget or regresses.

Exit codes: 0 every budget holds, 1 a budget is exceeded (or has no data to be measured on), 2 bad
input, usage or a bad budget file, 3 a bug in timeline, 130 interrupted. Never imports bokeh or
holoviews, so it starts fast; matches the collectives across ranks only when a budget reads them.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from cli.common import fail, inputs_of, loading, user_errors
from cli.options import (
    CommKernelOption,
    DimensionOption,
    ExecutorOption,
    GpusPerNodeOption,
    IncludePythonOption,
    LinkOption,
    PathsArgument,
    RankOption,
    RankRegexOption,
    RayAddressOption,
)
from timeline.errors import shown

if TYPE_CHECKING:
    from timeline.execution.session import Inputs

__all__ = ["check_command"]


def check_command(
    paths: PathsArgument,
    budget: Annotated[
        Path | None,
        typer.Option(
            "--budget",
            help="Budget file (TOML). Default: ./timeline.toml, else [tool.timeline] in ./pyproject.toml.",
            show_default=False,
        ),
    ] = None,
    baseline: Annotated[
        list[str] | None,
        typer.Option(
            "--baseline",
            help="The run to compare with for the [regression] checks: traces, a Parquet file, or a "
            "summary JSON from 'timeline analyze --json'; repeatable.",
            show_default=False,
        ),
    ] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the verdicts as one JSON object.")
    ] = False,
    junit: Annotated[
        Path | None,
        typer.Option("--junit", help="Write a JUnit XML report to this file.", show_default=False),
    ] = None,
    github: Annotated[
        bool,
        typer.Option("--github", help="Also print GitHub Actions annotations (::error) for failed budgets."),
    ] = False,
    markdown: Annotated[
        str | None,
        typer.Option(
            "--markdown",
            help="Write a markdown summary (for a pull-request comment or $GITHUB_STEP_SUMMARY) to this "
            "file; '-' prints it instead of the table.",
            show_default=False,
        ),
    ] = None,
    init: Annotated[
        bool,
        typer.Option(
            "--init",
            help="Write starter budgets from this run instead of checking it: ./timeline.toml, or --budget "
            "FILE; limits at the run's worst iteration plus a margin from its spread (docs/ci.md).",
        ),
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="With --init: replace a budget file an earlier --init wrote (nothing else is replaced).",
        ),
    ] = False,
    link_gbps: LinkOption = None,
    rank: RankOption = None,
    rank_regex: RankRegexOption = None,
    comm_kernel: CommKernelOption = None,
    include_python: IncludePythonOption = False,
    executor: ExecutorOption = None,
    ray_address: RayAddressOption = None,
    dimension: DimensionOption = None,
    gpus_per_node: GpusPerNodeOption = None,
) -> None:
    """Check a run against communication budgets (and a baseline run); fail the build when one is exceeded.

    Exit codes: 0 every budget holds, 1 a budget is exceeded or has no data,
    2 bad input, usage or a bad budget file (one 'error:' line on stderr), 3 a bug in timeline,
    130 interrupted. See docs/ci.md.
    """
    if json_output and (github or markdown == "-"):
        fail("--json prints JSON on stdout; it cannot be combined with --github or --markdown -")
    if force and not init:
        fail("--force applies to --init only (it lets --init replace a starter budget file)")
    if init:
        used = {
            "--baseline": bool(baseline),
            "--json": json_output,
            "--junit": junit is not None,
            "--github": github,
            "--markdown": markdown is not None,
            "--link-gbps": link_gbps is not None,
            "--dimension": bool(dimension),
            "--gpus-per-node": gpus_per_node is not None,
        }
        extra = [name for name, given in used.items() if given]
        if extra:
            fail(
                f"--init writes a budget file and checks nothing; leave out {', '.join(extra)}, then run "
                "timeline check without --init to check a run"
            )
        with user_errors():
            inputs = inputs_of(paths, rank, rank_regex, comm_kernel, include_python, executor, ray_address)
        _init(budget, force, inputs)
    with user_errors():
        from timeline.analysis.dimension_labels import parse_dimension_overrides
        from timeline.analysis.links import parse_link_gbps
        from timeline.budgets.budget_file import check_links, find_budget_file, read_budget_file
        from timeline.budgets.runs import read_run

        link = parse_link_gbps(link_gbps) if link_gbps is not None else None
        overrides = parse_dimension_overrides(dimension or [])
        budgets = read_budget_file(budget if budget is not None else find_budget_file())
        _check_outputs(junit, markdown, reads=[*paths, budgets.path, *(baseline or [])])
        check_links(budgets, link_gbps=link)  # a missing link stops before the traces are read
        if link is not None and not budgets.needs_link():
            typer.echo(
                f"warning: {shown(budgets.path)} has no link utilisation budget; --link-gbps is not used",
                err=True,
            )
        inputs = inputs_of(paths, rank, rank_regex, comm_kernel, include_python, executor, ray_address)
        # diagnosed when a budget reads a finding, or for the markdown summary's top findings
        diagnose = budgets.needs_findings() or markdown is not None
        with loading() as (progress, warn):
            run = read_run(
                inputs,
                match=budgets.needs_matching(),
                findings=diagnose,
                link_gbps=link,
                dimensions=budgets.needs_dimensions(),
                overrides=overrides,
                gpus_per_node=gpus_per_node,
                progress=progress,
                warn=warn,
            )
        old = None
        if baseline and not budgets.regressions:
            typer.echo(
                f"warning: {shown(budgets.path)} has no [regression] entries; --baseline is not used",
                err=True,
            )
        elif baseline:
            with loading() as (progress, warn):
                old = read_run(
                    replace(inputs, paths=baseline),
                    match=budgets.needs_matching(regressions_only=True),
                    findings=budgets.needs_findings(regressions_only=True),
                    link_gbps=link,
                    dimensions=budgets.needs_dimensions(regressions_only=True),
                    overrides=overrides,
                    gpus_per_node=gpus_per_node,
                    progress=progress,
                    warn=warn,
                )
        # imported once the runs are read (they import polars): a large trace is read as policy says
        from timeline.budgets.evaluation import evaluate_budgets
        from timeline.render.junit import render_junit
        from timeline.render.markdown import render_markdown

        report = evaluate_budgets(budgets, run, baseline=old, link_gbps=link)
        if junit is not None:
            _write(junit, render_junit(report))
        if markdown is not None and markdown != "-":
            _write(Path(markdown), render_markdown(report))
    if json_output:
        from timeline.render.json import render_json
        from timeline.results.verdicts import report_to_dict

        typer.echo(render_json(report_to_dict(report)))
    elif markdown == "-":
        typer.echo(render_markdown(report), nl=False)
    else:
        from timeline.render.terminal.verdicts import render_table

        typer.echo(render_table(report), nl=False)
    if github:
        from timeline.render.github import render_github

        typer.echo(render_github(report), nl=False)
    raise typer.Exit(report.exit_code)


def _init(budget: Path | None, force: bool, inputs: Inputs) -> NoReturn:
    """Write starter budgets derived from a run (``--init``) and exit 0."""
    with user_errors():
        from timeline import __version__
        from timeline.budgets.runs import read_run
        from timeline.budgets.starter import (
            check_starter_target,
            render_starter,
            starter_budgets,
            write_starter,
        )
        from timeline.outputs import check_output

        target = budget if budget is not None else Path("timeline.toml")
        check_starter_target(target, force=force)  # before the run is read: fail at once
        check_output(target, reads=inputs.paths, option="--budget", any_kind=True)
        with loading() as (progress, warn):
            run = read_run(inputs, match=False, progress=progress, warn=warn)
        starter = starter_budgets(run)
        write_starter(target, render_starter(starter, version=__version__), force=force)
    left_out = len(starter.budgets) - len(starter.written)
    note = f" ({left_out} left out: see the file's comments)" if left_out else ""
    count = len(starter.written)
    budgets = f"{count} starter budget{'s' if count != 1 else ''}"
    typer.echo(
        f"wrote {budgets} to {shown(target)}{note}; check a run with: "
        f"timeline check PATH...{'' if budget is None else ' --budget ' + shown(target)}",
        err=True,
    )
    raise typer.Exit(0)


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
