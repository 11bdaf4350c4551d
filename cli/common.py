"""What every command shares: the error boundary, trace-loading options, and duration formatting."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from timeline.errors import TimelineError
from timeline.importers.result import ImportOptions
from timeline.importers.rules import ClassificationRules
from timeline.trace import Trace, load
from timeline.units import format_ns, format_ratio

__all__ = [
    "CommKernelOption",
    "IncludePythonOption",
    "PathsArgument",
    "RankOption",
    "RankRegexOption",
    "fail",
    "format_ns",
    "format_ratio",
    "load_trace",
    "user_errors",
]

PathsArgument = Annotated[
    list[str],
    typer.Argument(
        help="Trace files, directories or glob patterns: PyTorch profiler JSON (.json/.json.gz), a Horovod "
        "timeline, or Parquet from 'timeline convert'.",
        show_default=False,
    ),
]
RankOption = Annotated[
    int | None,
    typer.Option(
        "--rank", help="Rank of a single file that names none (no distributedInfo, no rank in its name)."
    ),
]
RankRegexOption = Annotated[
    str | None,
    typer.Option(
        "--rank-regex",
        help=r"Regex with one group of digits that finds the rank in file names, e.g. 'node\d+_gpu(\d+)'.",
    ),
]
CommKernelOption = Annotated[
    list[str] | None,
    typer.Option(
        "--comm-kernel",
        help="Extra regex for communication kernels (custom all-reduce kernels); repeatable.",
    ),
]
IncludePythonOption = Annotated[
    bool, typer.Option("--include-python", help="Keep python_function events (dropped by default).")
]


def fail(message: str) -> NoReturn:
    """Print one ``error:`` line on stderr and exit with code 2."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn bad-input errors into one ``error:`` line and exit code 2; Ctrl-C into exit code 130.

    Anything else is a bug in timeline and keeps its traceback.
    """
    try:
        yield
    except TimelineError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        raise typer.Exit(130) from None


@contextmanager
def progress_bar() -> Iterator[Callable[[str, int, int], None] | None]:
    """Yield a progress callback drawing a bar on stderr (only on a terminal); the bar ends on exit."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(
        TextColumn("loading"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    task: list[Any] = []

    def report(label: str, done: int, total: int) -> None:
        if not task:
            bar.start()
            task.append(bar.add_task(label, total=total))
        bar.update(task[0], completed=done, description=label)

    try:
        yield report
    finally:
        bar.stop()


def echo_warnings(warnings: Iterable[str]) -> None:
    """Print warnings on stderr, one ``warning:`` line each."""
    for warning in warnings:
        typer.echo(f"warning: {warning}", err=True)


def import_options(comm_kernels: list[str] | None, include_python: bool) -> ImportOptions:
    """Return the import options of the load options shared by the commands."""
    return ImportOptions(
        rules=ClassificationRules(extra_comm_kernels=tuple(comm_kernels or ())), include_python=include_python
    )


def input_paths(paths: list[str]) -> list[str | Path]:
    """Return the command line's inputs: glob patterns as given, everything else as a path."""
    return [p if is_pattern(p) else Path(p) for p in paths]


def is_pattern(path: str) -> bool:
    """Whether an input is a glob pattern (``*``, ``?``, ``[``)."""
    return any(c in path for c in "*?[")


def load_trace(
    paths: list[str],
    *,
    rank: int | None = None,
    rank_regex: str | None = None,
    comm_kernels: list[str] | None = None,
    include_python: bool = False,
) -> Trace:
    """Load traces with a progress bar on stderr; print the load warnings there."""
    options = import_options(comm_kernels, include_python)
    with progress_bar() as report:
        trace = load(
            input_paths(paths),
            rank=rank,
            rank_regex=rank_regex,
            rules=options.rules,
            include_python=options.include_python,
            progress=report,
        )
    echo_warnings(trace.warnings)
    return trace
