"""``timeline serve`` and ``timeline report``: the interactive Gantt report, served live or exported.

Importing this module imports neither bokeh nor holoviews: both are imported inside the commands,
so ``timeline analyze`` and ``timeline check`` start fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cli.common import fail, inputs_of, load, user_errors
from cli.options import CommKernelOption, IncludePythonOption, PathsArgument, RankOption, RankRegexOption

if TYPE_CHECKING:
    from timeline.report.data import ReportData
    from timeline.trace import Trace

__all__ = ["report_command", "serve_command"]


def _prepare(trace: Trace) -> ReportData:
    from timeline.analysis.overlap import compute_overlap
    from timeline.report.data import prepare_report_data

    return prepare_report_data(trace.events, compute_overlap(trace.events))


def serve_command(
    paths: PathsArgument,
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, help="Port to listen on (0: any free port).")
    ] = 5006,
    host: Annotated[
        str,
        typer.Option(
            "--host",
            help="Address to listen on. The default 127.0.0.1 keeps the report reachable from this machine "
            "only: it shows your job's kernel names, message sizes and timings. Pass 0.0.0.0 to share it "
            "on your network.",
        ),
    ] = "127.0.0.1",
    rank: RankOption = None,
    rank_regex: RankRegexOption = None,
    comm_kernel: CommKernelOption = None,
    include_python: IncludePythonOption = False,
) -> None:
    """Serve the interactive report (per-iteration Gantt of exposed communication) on localhost.

    Prints the URL, serves until Ctrl-C, then stops cleanly.
    Exit codes: 0 success (stopped with Ctrl-C), 2 bad input (one 'error:' line on stderr).
    """
    with user_errors():
        trace = load(inputs_of(paths, rank, rank_regex, comm_kernel, include_python))
        data = _prepare(trace)
        from timeline.report.server import serve_report

        def ready(url: str) -> None:
            typer.echo(f"serving the timeline report at {url} (Ctrl-C to stop)")

        serve_report(data, host=host, port=port, files=trace.files.height, on_ready=ready)
    typer.echo("stopped", err=True)


def report_command(
    paths: PathsArgument,
    output: Annotated[
        Path,
        typer.Option(
            "-o", "--output", help="The HTML file to write (standalone: opens offline).", show_default=False
        ),
    ],
    rank: RankOption = None,
    rank_regex: RankRegexOption = None,
    comm_kernel: CommKernelOption = None,
    include_python: IncludePythonOption = False,
) -> None:
    """Write the interactive report as one standalone HTML file, for a CI run or an issue.

    Exit codes: 0 success, 2 bad input (one 'error:' line on stderr).
    """
    with user_errors():
        from timeline.inputs import expand_paths

        if output.resolve() in {p.resolve() for p in expand_paths(paths)}:
            fail(f"{output}: is one of the inputs; choose another output file (inputs are never modified)")
        trace = load(inputs_of(paths, rank, rank_regex, comm_kernel, include_python))
        data = _prepare(trace)
        from timeline.report.export import write_report

        written = write_report(data, output, files=trace.files.height)
    typer.echo(f"wrote {written}")
