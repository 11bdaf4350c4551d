"""``timeline serve`` and ``timeline report``: the interactive Gantt report, served live or exported.

Importing this module imports neither bokeh nor holoviews: both are imported inside the commands,
so ``timeline analyze`` and ``timeline check`` start fast.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cli.common import (
    RunFlags,
    echo_warnings,
    fail,
    flight_dumps,
    flight_inputs,
    inputs_of,
    loading,
    open_run,
    run_options,
    user_errors,
)
from cli.options import (
    AlignOption,
    CacheDirOption,
    CodecOption,
    CommKernelOption,
    IncludePythonOption,
    IterationRangeOption,
    IterationsOption,
    LinkOption,
    NoCacheOption,
    PathsArgument,
    RankOption,
    RankRegexOption,
    RanksOption,
)
from timeline.errors import shown

if TYPE_CHECKING:
    from timeline.executors import LocalExecutor
    from timeline.report.data import ReportData
    from timeline.report.server import Listening
    from timeline.results.diff import Diff
    from timeline.results.flight_recorder import FlightReport
    from timeline.run import Inputs, RunOptions

__all__ = ["report_command", "serve_command"]

_REPORT_EXTRA = ("bokeh",)
"""The packages of the ``report`` extra (pyproject.toml): the report's plots."""


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


def _compare(base: str | None, inputs: Inputs, options: RunOptions) -> Diff | None:
    """Return ``timeline diff BASE NEW``'s result, NEW the report's run (all its ranks); None without BASE.

    BASE is read first, so a bad BASE stops before the report's traces are read.
    """
    if base is None:
        return None
    from dataclasses import replace

    from timeline.budgets.runs import read_run
    from timeline.results.diff import build_diff

    whole = replace(inputs, rank=None, rank_regex=None)
    runs = []
    for paths in ([base], list(inputs.paths)):
        with loading() as (progress, warn):
            runs.append(
                read_run(replace(whole, paths=paths), options, match=True, progress=progress, warn=warn)
            )
    diff = build_diff(runs[0], runs[1])
    echo_warnings(diff.warnings)
    return diff


@contextmanager
def _helper(*preloads: str) -> Iterator[LocalExecutor | None]:
    """Yield a helper process, started now, that imports ``preloads`` while this process reads the traces.

    The report hands it work in order (the what-if sweep, then drawing the page) once the traces
    are read, and goes on meanwhile. None on one core; stopped when the command is done.
    """
    import os

    if (os.cpu_count() or 1) < 2:
        yield None
        return
    from timeline.executors import LocalExecutor
    from timeline.workers import preload_module

    helper = LocalExecutor(2)
    helper.start(preload=preloads[0])
    for module in preloads[1:] if helper.started else ():
        helper.submit(preload_module, module)
    try:
        yield helper
    finally:
        helper.stop()


def _report_data(
    inputs: Inputs, options: RunOptions, compare: str | None, helper: LocalExecutor | None
) -> tuple[ReportData, int]:
    """Return the report's data of the inputs' run (and the comparison with ``compare``), and its files.

    With a ``helper``, its ``whatif`` is the future of the sweep the helper replays.
    """
    from timeline.report.data import build_report_data
    from timeline.run import Needs

    diff = _compare(compare, inputs, options)
    run = open_run(inputs, options, needs=Needs(communication=True, graph=True, every_event=True))
    return build_report_data(run, compare=diff, helper=helper), run.trace.files.get_column("path").n_unique()


_DEFAULT_HOST = "127.0.0.1"
SWEEP_PRELOAD = "timeline.whatif.sweeps"
"""The module the what-if sweep's helper imports first (polars and the replay)."""

PortOption = Annotated[
    int, typer.Option("--port", min=0, max=65535, help="Port to listen on (0: any free port).")
]
HostOption = Annotated[
    str,
    typer.Option(
        "--host",
        help="Address to listen on. The default 127.0.0.1 keeps the report reachable from this machine "
        "only: it shows your job's kernel names, message sizes and timings. Pass 0.0.0.0 to share it "
        "on your network (a warning says so).",
    ),
]
AllowOriginOption = Annotated[
    list[str] | None,
    typer.Option(
        "--allow-origin",
        help="Another HOST[:PORT] whose pages may open the report (the name it is opened with: a "
        "tunnel, a proxy, a DNS name); repeatable; a HOST alone means on --port. Without it, only the "
        "names of --host (printed when not the default) are accepted; never '*'.",
        show_default=False,
    ),
]
OutputOption = Annotated[
    Path,
    typer.Option(
        "-o", "--output", help="The HTML file to write (standalone: opens offline).", show_default=False
    ),
]


def serve_command(
    paths: PathsArgument,
    port: PortOption = 5006,
    host: HostOption = _DEFAULT_HOST,
    allow_origin: AllowOriginOption = None,
    link_gbps: LinkOption = None,
    align: AlignOption = False,
    ranks: RanksOption = None,
    iterations: IterationsOption = None,
    rank: RankOption = None,
    rank_regex: RankRegexOption = None,
    comm_kernel: CommKernelOption = None,
    include_python: IncludePythonOption = False,
    iteration_range: IterationRangeOption = None,
    compare: CompareOption = None,
    codec_gbps: CodecOption = None,
    no_cache: NoCacheOption = False,
    cache_dir: CacheDirOption = None,
) -> None:
    """Serve the interactive report (per-iteration Gantt of exposed communication) on localhost.

    Prints the URL, serves until Ctrl-C, then stops cleanly. It serves a page, not a result to
    print: no --json or --markdown ('timeline analyze' prints them).
    Exit codes: 0 success (stopped with Ctrl-C), 2 bad input or usage, or the 'report' extra missing
    (one 'error:' line on stderr), 3 a bug in timeline.
    """
    _require_report_extra("serve")
    flags = RunFlags(
        rank=rank,
        rank_regex=rank_regex,
        comm_kernels=comm_kernel,
        include_python=include_python,
        iteration_range=iteration_range,
        no_cache=no_cache,
        cache_dir=cache_dir,
        align=align,
        link_gbps=link_gbps,
        codec_gbps=codec_gbps,
        ranks=ranks,
        iterations=iterations,
    )
    _serve(paths, flags, host=host, port=port, allow_origin=allow_origin, compare=compare)


def _serve(
    paths: list[str],
    flags: RunFlags,
    *,
    host: str,
    port: int,
    allow_origin: list[str] | None,
    compare: str | None,
) -> None:
    """Serve the report of the run of ``paths`` (or of its Flight Recorder dumps) until Ctrl-C."""
    with user_errors():
        from dataclasses import replace

        from timeline.report.data import whatif_of
        from timeline.report.server import parse_origins, serve_report

        origins = list(allow_origin or ())
        parse_origins(origins)  # a bad one stops before the traces are read
        flight, paths = _flight(paths, flags.rank, flags.rank_regex, compare)
        options = run_options(flags)
        data: ReportData | FlightReport
        if flight is None:
            inputs = inputs_of(paths, flags)
            with _helper(SWEEP_PRELOAD) as sweeper:
                data, files = _report_data(inputs, options, compare, sweeper)
                data = replace(data, whatif=whatif_of(data))  # the helper's sweep, before it stops
        else:
            data, files = flight, len(flight.dumps.ranks)

        def ready(listening: Listening) -> None:
            _announce(listening, host=host, origins=host != _DEFAULT_HOST or bool(origins))

        serve_report(data, host=host, port=port, files=files, allow_origins=origins, on_ready=ready)
    typer.echo("stopped", err=True)


def report_command(
    paths: PathsArgument,
    output: OutputOption,
    link_gbps: LinkOption = None,
    align: AlignOption = False,
    ranks: RanksOption = None,
    iterations: IterationsOption = None,
    rank: RankOption = None,
    rank_regex: RankRegexOption = None,
    comm_kernel: CommKernelOption = None,
    include_python: IncludePythonOption = False,
    iteration_range: IterationRangeOption = None,
    compare: CompareOption = None,
    codec_gbps: CodecOption = None,
    no_cache: NoCacheOption = False,
    cache_dir: CacheDirOption = None,
) -> None:
    """Write the interactive report as one standalone HTML file, for a CI run or an issue.

    It writes a page, not a result to print: no --json or --markdown ('timeline analyze' prints them).

    Exit codes: 0 success, 2 bad input or usage, or the 'report' extra missing (one 'error:' line on
    stderr), 3 a bug in timeline, 130 interrupted.
    """
    _require_report_extra("report")
    flags = RunFlags(
        rank=rank,
        rank_regex=rank_regex,
        comm_kernels=comm_kernel,
        include_python=include_python,
        iteration_range=iteration_range,
        no_cache=no_cache,
        cache_dir=cache_dir,
        align=align,
        link_gbps=link_gbps,
        codec_gbps=codec_gbps,
        ranks=ranks,
        iterations=iterations,
    )
    _report(paths, flags, output=output, compare=compare)


def _report(paths: list[str], flags: RunFlags, *, output: Path, compare: str | None) -> None:
    """Write the report of the run of ``paths`` (or of its Flight Recorder dumps) to ``output``."""
    with user_errors():
        from timeline.inputs import expand_paths
        from timeline.outputs import check_output

        reads = [*paths, *([compare] if compare else [])]
        expand_paths(reads)  # a missing input is named before the output
        check_output(output, reads=reads, option="-o")
        flight, paths = _flight(paths, flags.rank, flags.rank_regex, compare)
        options = run_options(flags)
        if flight is not None:
            from timeline.report.flight_view import write_flight_report

            written = write_flight_report(flight, output)
        else:
            inputs = inputs_of(paths, flags)
            # A helper starts now and imports bokeh and the what-if engine while the traces are
            # read; it then replays the what-if sweep and draws the page from the data prepared here.
            from timeline.report.drawing import PRELOAD, draw_report
            from timeline.report.output import writable

            writable(output)  # a mistyped -o fails before the traces are read
            with _helper(PRELOAD, SWEEP_PRELOAD) as helper:
                data, files = _report_data(inputs, options, compare, helper)
                written = draw_report(data, output, files=files, helper=helper)
    typer.echo(f"wrote {shown(written)}")


def _flight(
    paths: list[str], rank: int | None, rank_regex: str | None, compare: str | None
) -> tuple[FlightReport | None, list[str]]:
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
