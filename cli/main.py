"""The ``timeline`` application: registers each command; heavy imports stay inside the commands.

Importing this module imports typer and the command modules only (no polars, no rich, no library
module but :mod:`timeline.errors`), so ``timeline --help`` starts fast. :func:`main` builds only
the command it is asked to run (typer builds every registered command's options when it starts:
about 15 ms for all of them); :data:`app` has every command.

Every command ends with one of the exit codes of :data:`EXIT_CODES` (``docs/cli.md``): the
application's group, :class:`TimelineGroup`, is the one boundary that turns what reaches it into
them (a usage error into one ``error:`` line, an unexpected exception into its traceback and a
line asking for a bug report, Ctrl-C into ``interrupted``, SIGTERM and SIGHUP into ``terminated``).
"""

from __future__ import annotations

import codecs
import errno
import gc
import io
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from typing import Annotated, Any, BinaryIO

import typer
from typer.core import TyperGroup

from cli.analyze import analyze_command
from cli.cache import cache_command
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
from timeline.errors import Terminated, one_line

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
    129: "ended by SIGHUP (the terminal closed): as Ctrl-C, 'terminated (SIGHUP)'",
    130: "interrupted (Ctrl-C)",
    141: "stdout was closed before the output was written (a pipe into head)",
    143: "ended by SIGTERM (a scheduler, timeout, CI): as Ctrl-C, 'terminated (SIGTERM)'",
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


TERMINATING = (signal.SIGTERM, signal.SIGHUP)
"""The signals that end a command as Ctrl-C does (:class:`~timeline.errors.Terminated`)."""


def _terminate(signum: int, frame: object) -> None:
    raise Terminated(signum)


@contextmanager
def _terminations() -> Iterator[None]:
    """End the command on SIGTERM or SIGHUP as on Ctrl-C, with exit code 143 or 129 (128 + the signal).

    Python's default for both is to die at once: worker processes, the resource tracker, shared
    memory and partial files were left behind. A signal ignored when the command starts (``nohup``
    ignores SIGHUP) stays ignored; the handlers in place before are put back when the command ends.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for sig in TERMINATING:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            previous[sig] = signal.signal(sig, _terminate)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _no_rust_backtraces() -> None:
    """Turn off the backtrace polars' Rust code prints when it panics (``RUST_BACKTRACE`` set by the user).

    A damaged Parquet file can make polars panic; timeline reports that as one ``error:`` line,
    which a Rust backtrace of dozens of lines on stderr would bury. Rust reads the variable at its
    first panic; the command's worker processes inherit it.
    """
    for name in ("RUST_BACKTRACE", "POLARS_BACKTRACE"):
        if os.environ.get(name, "0") != "0":
            os.environ[name] = "0"


_ESCAPE = "timeline-escape"
"""The codec error handler of the command's stdout and stderr (:func:`_escaped`)."""


def _escaped(error: UnicodeError) -> tuple[str, int]:
    r"""Escape what an encoding cannot hold: a byte of a name not UTF-8 as ``\xff``, others as Python."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    return "".join(map(_escaped_character, error.object[error.start : error.end])), error.end


def _escaped_character(c: str) -> str:
    if "\udc80" <= c <= "\udcff":  # a byte Python decoded as a lone surrogate
        return f"\\x{ord(c) - 0xDC00:02x}"
    return c.encode("ascii", "backslashreplace").decode()


def _escape_unprintable_output() -> None:
    """Write what the output's encoding cannot hold escaped (a name that is not UTF-8), never fail on it."""
    codecs.register_error(_ESCAPE, _escaped)
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None and getattr(stream, "errors", None) in ("strict", "backslashreplace"):
            reconfigure(errors=_ESCAPE)


class _StdoutError(OSError):
    """A write to stdout failed (not a closed pipe: that is :class:`BrokenPipeError`)."""


class _GuardedWriter(io.BufferedIOBase):
    """stdout's binary buffer, whose failed writes raise :class:`_StdoutError` (and a closed pipe, as before).

    An :class:`OSError` from anywhere else is a bug (exit code 3); one from stdout is the place the
    output was sent to (a full disk, ``/dev/full``): one ``error:`` line, exit code 2.
    """

    def __init__(self, raw: BinaryIO) -> None:
        super().__init__()
        self._raw = raw

    def write(self, data: Any) -> int:
        try:
            return self._raw.write(data)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise _StdoutError(exc.errno, exc.strerror) from exc

    def flush(self) -> None:
        try:
            self._raw.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise _StdoutError(exc.errno, exc.strerror) from exc

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._raw.fileno()

    def isatty(self) -> bool:
        return self._raw.isatty()

    def close(self) -> None:
        """Flush, and leave the real stdout open (the interpreter closes it)."""
        if not self.closed:
            with suppress(OSError, ValueError):
                self.flush()
        super().close()


@contextmanager
def _guarded_stdout() -> Iterator[None]:
    """Replace the process's stdout, while the command runs, by one whose failed writes say so."""
    stream = sys.stdout
    buffer = getattr(stream, "buffer", None)
    if stream is not sys.__stdout__ or buffer is None or not isinstance(stream, io.TextIOWrapper):
        yield  # a test runner's stdout: left as it is
        return
    stream.flush()
    sys.stdout = io.TextIOWrapper(
        _GuardedWriter(buffer),
        encoding=stream.encoding,
        errors=_ESCAPE if stream.errors in ("strict", "backslashreplace") else stream.errors,
        line_buffering=stream.line_buffering,
    )
    try:
        yield
    finally:
        guarded, sys.stdout = sys.stdout, stream
        with suppress(OSError, ValueError):
            guarded.flush()


class TimelineGroup(TyperGroup):
    """The application's group: the command line's one boundary, where every exit code is decided.

    - a usage error of click (an unknown option, ``--top -5``): one ``error:`` line, exit code 2;
    - Ctrl-C (``KeyboardInterrupt``, ``typer.Abort``): ``interrupted``, exit code 130;
    - SIGTERM and SIGHUP (:class:`~timeline.errors.Terminated`, raised by the handlers
      :func:`_terminations` installs): as Ctrl-C, ``terminated (SIGTERM)``, exit code 143 (129);
    - stdout closed by its reader (``| head``): exit code 141, no message;
    - stdout that cannot be written (a full disk, ``/dev/full``): one ``error:`` line, exit code 2;
    - any other exception is a bug: its traceback, then
      ``error: internal error in timeline X.Y: this is a bug, please report it ...``, exit code 3.

    A command's own bad-input errors are turned into ``error:`` lines by
    :func:`cli.common.user_errors` before they get here.
    """

    def invoke(self, ctx: Any) -> Any:
        """Run the command; Ctrl-C and a closed stdout end it here with their exit codes."""
        be_quiet(False)  # --quiet is a command's; a process that runs several starts each loud
        try:
            done = super().invoke(ctx)
            sys.stdout.flush()  # what is left to write fails here, where its exit code is decided
            return done
        except KeyboardInterrupt:
            interrupted()
        except _StdoutError as exc:  # a full disk, /dev/full, an I/O error: said once, the rest dropped
            _stdout_closed()
            typer.echo(f"error: cannot write to stdout ({exc.strerror or exc})", err=True)
            raise typer.Exit(2) from None
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
        _escape_unprintable_output()
        _no_rust_backtraces()
        try:
            with _terminations(), _guarded_stdout():
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
        except Terminated as exc:  # SIGTERM or SIGHUP while the command line starts or ends
            typer.echo(exc.message, err=True)
            code = exc.exit_code
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
    "cache": cache_command,
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
