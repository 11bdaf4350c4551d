"""The ``timeline`` application: registers each command; heavy imports stay inside the commands.

Importing this module imports typer and the command modules only (no polars, no rich, no library
module but :mod:`timeline.errors`), so ``timeline --help`` starts fast. :func:`main` builds only
the command it is asked to run (typer builds every registered command's options when it starts:
about 15 ms for all of them); :data:`app` has every command.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

import typer

from cli.analyze import analyze_command
from cli.capture import capture_command
from cli.check import check_command
from cli.collectives import collectives_command
from cli.convert import convert_command
from cli.report import report_command, serve_command
from cli.whatif import whatif_command

__all__ = ["COMMANDS", "app", "exit_now", "main", "make_app", "run"]

COMMANDS: Mapping[str, Callable[..., Any]] = {
    "analyze": analyze_command,
    "convert": convert_command,
    # serve/report import bokeh and holoviews inside the command functions, never at registration.
    "serve": serve_command,
    "report": report_command,
    "check": check_command,
    "collectives": collectives_command,
    "capture": capture_command,
    "whatif": whatif_command,
}
"""The commands, in the order ``timeline --help`` lists them."""


def _group() -> None:
    """Keep a one-command application a group: ``timeline NAME ...`` as with every command."""


def make_app(names: list[str] | None = None) -> typer.Typer:
    """Return the application with these commands (default: all of them)."""
    built = typer.Typer(
        name="timeline",
        help="Is communication the bottleneck of your distributed training job? "
        "Exposed vs hidden communication from PyTorch profiler traces and Horovod timelines.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        # click's plain help: typer's rich help formatter costs 0.1-0.2 s of imports (markdown, pygments)
        rich_markup_mode=None,
    )
    chosen = list(COMMANDS) if names is None else names
    for name in chosen:
        built.command(name)(COMMANDS[name])
    if len(chosen) == 1:
        built.callback()(_group)
    return built


app = make_app()


def main() -> None:
    """Run the command line: only the command named on it is built, or all for ``--help`` and mistakes.

    Ends with :class:`SystemExit`, as a typer application does.
    """
    name = sys.argv[1] if len(sys.argv) > 1 else None
    if name is not None and name in COMMANDS:
        make_app([name])()
    else:
        app()


def run() -> None:
    """Run the ``timeline`` command: :func:`main`, then end the process at once (:func:`exit_now`).

    The installed command's entry point; code that calls :func:`main` and goes on after it (a
    ``finally``, a test) keeps the normal exit.
    """
    # A command allocates many long-lived objects (modules, decoded traces) and few cycles: the
    # collector's default gen-0 threshold (700) runs hundreds of collections for nothing.
    gc.set_threshold(50_000, 20, 20)
    try:
        main()
    except SystemExit as done:
        exit_now(done.code)
        raise


# Modules whose clean-up at exit matters: a Ray instance this process started, a report server.
_NEEDS_TEARDOWN = ("ray", "bokeh", "tornado")


def _workers_started() -> bool:
    """Whether this process started worker processes: their queues' semaphores are released at exit."""
    workers = sys.modules.get("timeline.workers")
    return workers is not None and bool(workers.pools_started())


def exit_now(code: int | str | None) -> None:
    """End the process with ``code`` without the interpreter's teardown, when nothing needs it.

    Python's teardown of polars and the modules a command imported takes 30-50 ms (more after a
    large trace: its frames are freed one by one), after the command's output is complete. It is
    skipped only when no module that cleans up at exit was imported (:data:`_NEEDS_TEARDOWN`) and
    no worker process was started (multiprocessing releases their queues at exit); stdout and
    stderr are flushed first. Returns (and the caller exits normally) otherwise.
    """
    if any(module in sys.modules for module in _NEEDS_TEARDOWN) or _workers_started():
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return  # a closed or broken stream: the normal exit reports it
    if isinstance(code, str):
        return  # a message to print: the normal exit prints it
    os._exit(0 if code is None else code)
