"""``timeline serve`` and ``timeline report``: the interactive Gantt report, served live or exported.

Importing this module imports neither bokeh nor holoviews: both are imported inside the commands,
so ``timeline analyze`` and ``timeline check`` start fast.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli.common import echo_warnings, fail, flight_dumps, flight_inputs, inputs_of, load, loading, user_errors
from cli.options import CommKernelOption, IncludePythonOption, PathsArgument, RankOption, RankRegexOption
from timeline.errors import shown

if TYPE_CHECKING:
    from timeline.execution.session import Inputs
    from timeline.report.data import ReportData
    from timeline.report.server import Listening
    from timeline.trace import Trace

__all__ = ["report_command", "serve_command"]

_REPORT_EXTRA = ("bokeh", "holoviews", "pyarrow")
"""The packages of the ``report`` extra (pyproject.toml): the report's plots and their frames."""


def _require_report_extra(command: str) -> None:
    """Exit with one ``error:`` line, before any trace is read, when the ``report`` extra is missing."""
    from importlib.util import find_spec

    for name in _REPORT_EXTRA:
        try:
            missing = sys.modules[name] is None if name in sys.modules else find_spec(name) is None
        except (ImportError, ValueError):
            missing = True
        if missing:
            fail(
                f"timeline {command} needs the 'report' extra ({name} is not installed): "
                "pip install 'timeline-comm[report]' (in a source checkout: pip install -e '.[report]')"
            )


def _announce(listening: Listening, *, host: str, origins: bool) -> None:
    """Print the URL on stdout; on stderr, who else can reach the report and (``origins``) who may open it."""
    typer.echo(f"serving the timeline report at {listening.url} (Ctrl-C to stop)")
    if listening.network:
        typer.echo(
            f"warning: listening on {', '.join(listening.addresses)} (--host {shown(host)}): any machine "
            "that reaches it can read the report (your job's kernel names, message sizes and timings); "
            "the default --host 127.0.0.1 keeps it on this machine",
            err=True,
        )
    if origins:
        accepted = ", ".join(f"http://{origin}" for origin in listening.origins)
        typer.echo(
            f"note: only pages from {accepted} may open the report (websocket origins); "
            "pass --allow-origin HOST[:PORT] for another name it is opened with",
            err=True,
        )


def _prepare(trace: Trace, compare: dict[str, Any] | None = None) -> ReportData:
    """Return the report's data: the Gantt's, its findings, its "What-if" tab's sweep, the comparison."""
    from dataclasses import replace

    from timeline.analysis.groups import shared_clocks
    from timeline.analysis.overlap import compute_overlap
    from timeline.diagnosis import diagnose
    from timeline.report.data import prepare_report_data
    from timeline.report.whatif_view import whatif_sweep
    from timeline.results.diagnosis import build_diagnosis

    overlap = compute_overlap(trace.events)
    clocks = shared_clocks(trace.files, comparable=trace.clock_note is None)
    data = prepare_report_data(trace.events, overlap, groups=trace.groups, clocks=clocks)
    diagnosis = build_diagnosis(diagnose(trace, overlap))
    return replace(data, whatif=whatif_sweep(trace), compare=compare, diagnosis=diagnosis)


CompareOption = Annotated[
    str | None,
    typer.Option(
        "--compare",
        help="Add a 'Compare' tab: this run against BASE, as 'timeline diff BASE PATH...' compares them "
        "(BASE: traces, a Parquet file or dataset, or a summary JSON from 'timeline analyze --json').",
        metavar="BASE",
        show_default=False,
    ),
]


def _compare(base: str | None, inputs: Inputs) -> dict[str, Any] | None:
    """Return ``timeline diff BASE NEW``'s result, NEW the report's run (all its ranks); None without BASE.

    BASE is read first, so a bad BASE stops before the report's traces are read.
    """
    if base is None:
        return None
    from dataclasses import replace

    from timeline.results.diff import build_diff, read_diff_run

    whole = replace(inputs, rank=None, rank_regex=None)
    runs = []
    for paths in ([base], list(inputs.paths)):
        with loading() as (progress, warn):
            runs.append(read_diff_run(replace(whole, paths=paths), progress=progress, warn=warn))
    diff = build_diff(runs[0], runs[1])
    echo_warnings(diff["warnings"])
    return diff


_DEFAULT_HOST = "127.0.0.1"


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
            "on your network (a warning says so).",
        ),
    ] = _DEFAULT_HOST,
    allow_origin: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-origin",
            help="Another HOST[:PORT] whose pages may open the report (the name it is opened with: a "
            "tunnel, a proxy, a DNS name); repeatable; a HOST alone means on --port. Without it, only the "
            "names of --host (printed when not the default) are accepted; never '*'.",
            show_default=False,
        ),
    ] = None,
    rank: RankOption = None,
    rank_regex: RankRegexOption = None,
    comm_kernel: CommKernelOption = None,
    include_python: IncludePythonOption = False,
    compare: CompareOption = None,
) -> None:
    """Serve the interactive report (per-iteration Gantt of exposed communication) on localhost.

    Prints the URL, serves until Ctrl-C, then stops cleanly.
    Exit codes: 0 success (stopped with Ctrl-C), 2 bad input or usage, or the 'report' extra missing
    (one 'error:' line on stderr), 3 a bug in timeline.
    """
    _require_report_extra("serve")
    with user_errors():
        from timeline.report.server import parse_origins, serve_report

        origins = list(allow_origin or ())
        parse_origins(origins)  # a bad one stops before the traces are read
        flight, paths = _flight(paths, rank, rank_regex, compare)
        if flight is None:
            inputs = inputs_of(paths, rank, rank_regex, comm_kernel, include_python)
            diff = _compare(compare, inputs)
            trace = load(inputs)
        data: ReportData | dict[str, Any] = _prepare(trace, diff) if flight is None else flight
        files = len(flight["dumps"]["ranks"]) if flight is not None else trace.files.height

        def ready(listening: Listening) -> None:
            _announce(listening, host=host, origins=host != _DEFAULT_HOST or bool(origins))

        serve_report(data, host=host, port=port, files=files, allow_origins=origins, on_ready=ready)
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
    compare: CompareOption = None,
) -> None:
    """Write the interactive report as one standalone HTML file, for a CI run or an issue.

    Exit codes: 0 success, 2 bad input or usage, or the 'report' extra missing (one 'error:' line on
    stderr), 3 a bug in timeline, 130 interrupted.
    """
    _require_report_extra("report")
    with user_errors():
        from timeline.inputs import expand_paths
        from timeline.outputs import check_output

        reads = [*paths, *([compare] if compare else [])]
        expand_paths(reads)  # a missing input is named before the output
        check_output(output, reads=reads, option="-o")
        flight, paths = _flight(paths, rank, rank_regex, compare)
        if flight is not None:
            from timeline.report.flight_view import write_flight_report

            written = write_flight_report(flight, output)
        else:
            inputs = inputs_of(paths, rank, rank_regex, comm_kernel, include_python)
            diff = _compare(compare, inputs)
            trace = load(inputs)
            data = _prepare(trace, diff)
            from timeline.report.export import write_report

            written = write_report(data, output, files=trace.files.height)
    typer.echo(f"wrote {shown(written)}")


def _flight(
    paths: list[str], rank: int | None, rank_regex: str | None, compare: str | None
) -> tuple[dict[str, Any] | None, list[str]]:
    """Return the Flight Recorder report when the inputs are dumps, and the inputs the Gantt reads.

    Dumps and traces together: the report draws the traces (``timeline analyze`` reads both).
    """
    dumps, traces = flight_inputs(paths, rank)
    if dumps and traces:
        drawn = f"the report draws the {len(traces)} profiler trace(s)"
        echo_warnings([f"{drawn}; for the {len(dumps)} Flight Recorder dump(s): timeline analyze"])
        return None, [str(p) for p in traces]
    if not dumps:
        return None, paths
    if compare is not None:
        fail("--compare compares profiler traces; the inputs are Flight Recorder dumps")
    from timeline.results.flight_recorder import build_flight_report

    return build_flight_report(flight_dumps(dumps, rank=rank, rank_regex=rank_regex)), paths
