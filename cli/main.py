"""The ``timeline`` application: registers each command; heavy imports stay inside the commands.

Importing this module imports typer and the command modules only (no polars, no rich, no library
module but :mod:`timeline.errors`), so ``timeline --help`` starts fast. :func:`main` builds only
the command it is asked to run (typer builds every registered command's options when it starts:
about 15 ms for all of them); :data:`app` has every command.

Every command ends with one of the exit codes of :data:`EXIT_CODES` (``docs/cli.md``): the
application's group, :class:`TimelineGroup`, is the one boundary that turns what reaches it into
them (a usage error into one ``error:`` line, an unexpected exception into its traceback and a
line asking for a bug report, Ctrl-C into ``interrupted``).
"""

from __future__ import annotations

import errno
import gc
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from cli.analyze import analyze_command
from cli.capture import capture_command
from cli.check import check_command
from cli.collectives import collectives_command
from cli.common import be_quiet, interrupted
from cli.convert import convert_command
from cli.diff import diff_command
from cli.init import init_command
from cli.report import report_command, serve_command
from cli.seed import seed_command
from cli.whatif import whatif_command
from timeline.errors import one_line

__all__ = [
    "COMMANDS",
    "EXIT_CODES",
    "TimelineGroup",
    "app",
    "exit_now",
    "main",
    "make_app",
    "run",
    "version_line",
]

EXIT_CODES: Mapping[int, str] = {
    0: "done",
    1: "timeline check: a budget is exceeded (or has no data to be measured on)",
    2: "bad input or usage: one 'error:' line on stderr",
    3: "an internal error (a bug in timeline): its traceback and a line asking for a report",
    130: "interrupted (Ctrl-C)",
    141: "stdout was closed before the output was written (a pipe into head)",
}
"""Every exit code a command ends with, and what it means (``docs/cli.md`` lists the same)."""

# typer raises click's exceptions (typer >= 0.28: its own copy of click): found from the class it exports.
_USAGE_ERROR: type[Exception] = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
_CLICK_EXCEPTION: type[Exception] = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException"
)
_ISSUES = "to the timeline maintainers"
"""Where to report a bug (the project publishes no issue tracker address)."""


def _usage_line(exc: Exception) -> str:
    """Return click's message of a usage error as one ``error:`` line: what, in lower case, and the help."""
    message = " ".join(str(exc.format_message()).split()).rstrip(".")  # type: ignore[attr-defined]
    message = message[:1].lower() + message[1:]
    message = message.replace(". Did you mean", "; did you mean")  # click's guess is the fix
    ctx = getattr(exc, "ctx", None)
    if ctx is not None and not message.endswith("?"):
        message += f"; see '{ctx.command_path} --help'"
    return f"error: {one_line(message)}"


def _internal_error() -> int:
    """Print the traceback of the exception being handled and the bug-report line; return exit code 3."""
    import traceback

    from timeline import __version__

    traceback.print_exc()
    typer.echo(
        f"error: internal error in timeline {__version__}: this is a bug, please report it {_ISSUES}",
        err=True,
    )
    return 3


def _stdout_closed() -> int:
    """Point stdout at /dev/null (nothing more can reach the closed pipe); return exit code 141."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
    return 141


class TimelineGroup(TyperGroup):
    """The application's group: the command line's one boundary, where every exit code is decided.

    - a usage error of click (an unknown option, ``--top -5``): one ``error:`` line, exit code 2;
    - Ctrl-C (``KeyboardInterrupt``, ``typer.Abort``): ``interrupted``, exit code 130;
    - stdout closed by its reader (``| head``): exit code 141, no message;
    - any other exception is a bug: its traceback, then
      ``error: internal error in timeline X.Y: this is a bug, please report it ...``, exit code 3.

    A command's own bad-input errors are turned into ``error:`` lines by
    :func:`cli.common.user_errors` before they get here.
    """

    def invoke(self, ctx: Any) -> Any:
        """Run the command; Ctrl-C and a closed stdout end it here with their exit codes."""
        be_quiet(False)  # --quiet is a command's; a process that runs several starts each loud
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            interrupted()
        except OSError as exc:
            if exc.errno != errno.EPIPE:
                raise
            raise typer.Exit(_stdout_closed()) from None

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        """Run the application and exit with one of :data:`EXIT_CODES` (``standalone_mode=False``: return)."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        try:
            done = super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
            code = done if isinstance(done, int) else 0
        except _USAGE_ERROR as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":  # ``timeline`` alone: the help, as usage
                exc.show()  # type: ignore[attr-defined]
            else:
                typer.echo(_usage_line(exc), err=True)
            code = 2
        except _CLICK_EXCEPTION as exc:  # a click error of another kind (a file option it opens)
            message = " ".join(str(exc.format_message()).split())  # type: ignore[attr-defined]
            typer.echo(f"error: {one_line(message)}", err=True)
            code = 2
        except (typer.Abort, KeyboardInterrupt):
            typer.echo("interrupted", err=True)
            code = 130
        except Exception:
            code = _internal_error()
        sys.exit(code)


COMMANDS: Mapping[str, Callable[..., Any]] = {
    "analyze": analyze_command,
    "convert": convert_command,
    # serve/report import bokeh and holoviews inside the command functions, never at registration.
    "serve": serve_command,
    "report": report_command,
    "check": check_command,
    "init": init_command,
    "collectives": collectives_command,
    "diff": diff_command,
    "capture": capture_command,
    "whatif": whatif_command,
    "seed": seed_command,
}
"""The commands, in the order ``timeline --help`` lists them."""


def _group() -> None:
    """Keep a one-command application a group: ``timeline NAME ...`` as with every command."""


def version_line() -> str:
    """Return what ``timeline --version`` prints: the distribution's version, polars' and Python's.

    Read from the installed distributions' metadata: no polars import. A source checkout that is not
    installed says so, with the package's own version.
    """
    import platform
    from importlib.metadata import PackageNotFoundError, version

    try:
        ours = version("timeline-comm")
    except PackageNotFoundError:
        from timeline import __version__

        ours = f"{__version__} (source checkout, not installed)"
    try:
        polars = version("polars")
    except PackageNotFoundError:
        polars = "not installed"
    return f"timeline-comm {ours}, polars {polars}, Python {platform.python_version()}"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(version_line())
        raise typer.Exit(0)


def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Print timeline's version (the timeline-comm distribution) and polars' and exit.",
        ),
    ] = False,
) -> None:
    """Answer whether communication is the bottleneck of your distributed training job.

    Exposed vs hidden communication from PyTorch profiler traces and Horovod timelines. Output
    follows the terminal's width (COLUMNS, or 120 columns when piped); NO_COLOR or --no-color
    turns styles off. Shell completion: timeline --install-completion.
    """


def make_app(names: list[str] | None = None) -> typer.Typer:
    """Return the application with these commands (default: all of them)."""
    built = typer.Typer(
        name="timeline",
        help="Is communication the bottleneck of your distributed training job? "
        "Exposed vs hidden communication from PyTorch profiler traces and Horovod timelines.",
        no_args_is_help=True,
        # typer's --install-completion and --show-completion (bash, zsh, fish, PowerShell)
        add_completion=names is None,
        pretty_exceptions_enable=False,
        cls=TimelineGroup,
        # click's plain help: typer's rich help formatter costs 0.1-0.2 s of imports (markdown, pygments)
        rich_markup_mode=None,
    )
    chosen = list(COMMANDS) if names is None else names
    for name in chosen:
        built.command(name)(COMMANDS[name])
    if names is None:
        built.callback()(_root)
    elif len(chosen) == 1:
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
    # (timeline.workers.GC_THRESHOLDS, which its worker processes take, not imported here: --help)
    gc.set_threshold(500_000, 20, 20)
    try:
        main()
    except SystemExit as done:
        exit_now(done.code)
        raise


# Modules whose clean-up at exit matters: a Ray instance this process started, a report server.
_NEEDS_TEARDOWN = ("ray", "bokeh", "tornado")


def _workers_released() -> bool:
    """Whether the worker processes this process started, if any, are stopped and their queues released."""
    workers = sys.modules.get("timeline.workers")
    return workers is None or not workers.pools_started() or workers.release_at_exit()


def exit_now(code: int | str | None) -> None:
    """End the process with ``code`` without the interpreter's teardown, when nothing needs it.

    Python's teardown of polars and the modules a command imported takes 30-50 ms (more after a
    large trace: its frames are freed one by one), after the command's output is complete; with
    worker processes, it also waits for theirs. It is skipped only when no module that cleans up at
    exit was imported (:data:`_NEEDS_TEARDOWN`); stdout and stderr are flushed first, and worker
    processes, their work done, are stopped and their queues released
    (:func:`timeline.workers.release_at_exit`). Returns (and the caller exits normally) otherwise.
    """
    if any(module in sys.modules for module in _NEEDS_TEARDOWN) or isinstance(code, str):
        return  # a message to print: the normal exit prints it
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return  # a closed or broken stream: the normal exit reports it
    if not _workers_released():
        return
    os._exit(0 if code is None else code)
