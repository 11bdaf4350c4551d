"""What every command shares: the error boundary, the progress bar, warnings, and the road to the library.

A command parses its options into one :class:`RunFlags` (which run, how it is read and analysed) and
one :class:`OutputFlags` (how its result is printed), builds the library's
:class:`~timeline.run.Inputs` with :func:`inputs_of` and :class:`~timeline.run.RunOptions` with
:func:`run_options` from the first, opens the one
:class:`~timeline.run.Run` with :func:`open_run` (which draws a progress bar and prints the load
warnings and the run's own), picks a renderer, and exits. Heavy modules
(polars, the analyses) are imported inside these functions, so ``timeline --help`` starts fast.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer

from timeline.errors import Terminated, TimelineError, one_line

if TYPE_CHECKING:
    from rich.console import Console

    from timeline.dumps import Dumps
    from timeline.importers.cache import Cache
    from timeline.run import Inputs, Needs, Run, RunOptions
    from timeline.trace import Trace

__all__ = [
    "PIPED_WIDTH",
    "OutputFlags",
    "RunFlags",
    "be_quiet",
    "cache_of",
    "check_regex",
    "colour_off",
    "console",
    "dumps_only",
    "echo_link_of",
    "echo_warnings",
    "emit",
    "fail",
    "flight_dumps",
    "flight_inputs",
    "inputs_of",
    "interrupted",
    "load",
    "loading",
    "note",
    "open_run",
    "output_width",
    "progress_bar",
    "run_options",
    "user_errors",
]


def fail(message: str) -> NoReturn:
    """Print one ``error:`` line on stderr (characters that do not print escaped) and exit with code 2."""
    typer.echo(f"error: {one_line(message)}", err=True)
    raise typer.Exit(2)


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn bad-input errors into one ``error:`` line and exit code 2; Ctrl-C into exit code 130.

    Anything else is a bug in timeline: :class:`cli.main.TimelineGroup` prints its traceback and
    exits with code 3.
    """
    try:
        yield
    except TimelineError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        interrupted()


def interrupted() -> NoReturn:
    """End a command stopped by Ctrl-C: stop its worker processes, print ``interrupted``, exit code 130.

    Worker processes ignore Ctrl-C (:func:`timeline.workers.worker_environment`): they are
    terminated here, so that the command ends now rather than once their tasks are done. Stopped
    by SIGTERM or SIGHUP (the :class:`~timeline.errors.Terminated` being handled): the same, with
    ``terminated (SIGTERM)`` and exit code 143 (129).
    """
    workers = sys.modules.get("timeline.workers")
    if workers is not None and workers.pools_started():
        workers.stop_workers()
    ending = sys.exc_info()[1]
    if isinstance(ending, Terminated):
        typer.echo(ending.message, err=True)
        raise typer.Exit(ending.exit_code)
    typer.echo("interrupted", err=True)
    raise typer.Exit(130)


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


_QUIET: list[bool] = [False]
"""Whether ``--quiet`` was given: warnings and notes are not printed (errors always are)."""


def be_quiet(quiet: bool) -> None:
    """Print no warnings or notes from now on (``--quiet``): only errors, and what the command must say."""
    _QUIET[0] = quiet


def echo_warnings(warnings: Iterable[str]) -> None:
    """Print warnings on stderr, one ``warning:`` line each (none with ``--quiet``)."""
    if _QUIET[0]:
        return
    for warning in warnings:
        typer.echo(f"warning: {one_line(warning)}", err=True)


def note(text: str) -> None:
    """Print a note on stderr, one ``note:`` line (none with ``--quiet``)."""
    if not _QUIET[0]:
        typer.echo(f"note: {one_line(text)}", err=True)


PIPED_WIDTH = 120
"""The width of output to a file or a pipe, unless ``COLUMNS`` says otherwise: stable for scripts."""


def output_width() -> int:
    """Return the width the terminal renderers fit: ``COLUMNS``, the terminal's, or :data:`PIPED_WIDTH`.

    Never under :data:`~timeline.render.terminal.layout.MIN_WIDTH` (60): a narrower terminal gets
    60-column lines.
    """
    import os
    import shutil

    from timeline.render.terminal.layout import MIN_WIDTH

    given = os.environ.get("COLUMNS", "").strip()
    if given.isdigit() and int(given) > 0:
        width = int(given)
    elif sys.stdout.isatty():
        width = shutil.get_terminal_size((PIPED_WIDTH, 24)).columns
    else:
        width = PIPED_WIDTH
    return max(width, MIN_WIDTH)


def colour_off(no_color: bool = False) -> bool:
    """Return whether output is plain: ``--no-color``, or ``NO_COLOR`` set and not empty (no-color.org)."""
    import os

    return no_color or bool(os.environ.get("NO_COLOR"))


def console(*, no_color: bool = False) -> Console:
    """Return the console the terminal renderers draw on, :func:`output_width` wide.

    Styles (bold, colours) only on a terminal, and never with ``--no-color`` or ``NO_COLOR``
    (:func:`colour_off`): then not one escape code is written. A stdout closed by its reader
    (``| head``) raises :class:`BrokenPipeError`, which the command line's boundary
    (:class:`cli.main.TimelineGroup`) ends with exit code 141; rich's own handling would exit with 1,
    the code of an exceeded budget.
    """
    import errno

    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError(errno.EPIPE, "stdout closed by its reader")

    plain = colour_off(no_color)
    return _Console(
        highlight=False,
        soft_wrap=False,
        width=output_width(),
        no_color=plain,
        color_system=None if plain else "auto",
    )


def write_text(path: str, text: str) -> None:
    """Write a file the user asked for (``--csv``, ``--markdown``): one ``error:`` line when it cannot be.

    Raises
    ------
    UsageError
        The file cannot be written (its folder is missing, it is a directory, no permission).
    """
    from timeline.errors import UsageError, shown

    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{shown(path)}: cannot write ({exc.strerror})") from None


@dataclass(frozen=True, kw_only=True)
class OutputFlags:
    """How a command prints its result: ``--json``, ``--markdown``, ``--csv`` and ``--no-color``."""

    json_output: bool = False
    markdown: str | None = None
    csv: str | None = None
    no_color: bool = False


def emit(
    result: Any, draw: Callable[[Console], None], out: OutputFlags, *, title: str, top: int = 20
) -> None:
    """Print a result as the options ask: JSON, markdown or CSV (``-``), else drawn on the console.

    ``--markdown FILE`` and ``--csv FILE`` are written besides. ``draw`` draws the terminal tables;
    the markdown is :func:`~timeline.render.tabular.render_tables_markdown`'s, under ``title``, the
    first ``top`` rows of each table.
    """
    json_output, markdown, csv = out.json_output, out.markdown, out.csv
    if sum([json_output, markdown == "-", csv == "-"]) > 1:
        fail("--json, --markdown - and --csv - each print on stdout: choose one")
    with user_errors():
        if csv is not None:
            from timeline.render.tabular import render_csv

            text = render_csv(result)
            if csv == "-":
                typer.echo(text, nl=False)
                return
            write_text(csv, text)
        if markdown is not None:
            from timeline.render.tabular import render_tables_markdown

            text = render_tables_markdown(result, title=title, top=top)
            if markdown == "-":
                typer.echo(text, nl=False)
                return
            write_text(markdown, text)
    if json_output:
        from timeline.render.json import render_json

        typer.echo(render_json(result))
        return
    draw(console(no_color=out.no_color))


@dataclass(frozen=True, kw_only=True)
class RunFlags:
    """What a command's options say about its run: the inputs, how they are read, how the run is analysed.

    Built once from the options (a command that lacks an option leaves its default) and passed
    whole: :func:`inputs_of` makes the library's :class:`~timeline.run.Inputs` of it,
    :func:`run_options` its :class:`~timeline.run.RunOptions`. Each field is the option of its name
    (``comm_kernels``: every ``--comm-kernel``), unparsed: each is checked where the command checks it.
    """

    rank: int | None = None
    rank_regex: str | None = None
    comm_kernels: Sequence[str] | None = None
    include_python: bool = False
    iteration_range: str | None = None
    executor: str | None = None
    ray_address: str | None = None
    no_cache: bool = False
    cache_dir: str | None = None
    align: bool = False
    link_gbps: str | None = None
    dimension: Sequence[str] | None = None
    gpus_per_node: int | None = None
    codec_gbps: float | None = None
    ranks: str | None = None
    iterations: str | None = None


def inputs_of(paths: Sequence[str], flags: RunFlags) -> Inputs:
    """Return the library's :class:`Inputs` of a command's ``PATH...`` and loading options.

    ``flags.no_cache``, ``flags.cache_dir``: ``--no-cache`` and ``--cache-dir`` (:func:`cache_of`).

    Raises
    ------
    UsageError
        A ``--comm-kernel`` or ``--iteration-range`` pattern that polars' regex engine cannot match
        with (:func:`check_regex`), a ``TIMELINE_CACHE_LIMIT`` that is not a size.
    """
    from timeline.run import Inputs

    for pattern in flags.comm_kernels or ():
        check_regex(pattern, "--comm-kernel")
    if flags.iteration_range is not None:
        from timeline.importers.nsys_ranges import check_iteration_range

        check_iteration_range(flags.iteration_range)
    return Inputs(
        paths=list(paths),
        rank=flags.rank,
        rank_regex=flags.rank_regex,
        comm_kernels=tuple(flags.comm_kernels or ()),
        include_python=flags.include_python,
        executor=flags.executor,
        ray_address=flags.ray_address,
        iteration_range=flags.iteration_range,
        cache=cache_of(no_cache=flags.no_cache, cache_dir=flags.cache_dir),
    )


def cache_of(*, no_cache: bool = False, cache_dir: str | None = None) -> Cache | None:
    """Return the cache of ``--no-cache`` and ``--cache-dir`` (None: no cache); print its warning.

    A cache folder that cannot be written costs speed only: one ``warning:`` line says so
    (:func:`timeline.importers.cache.open_cache`); a command asks once.

    Raises
    ------
    UsageError
        ``TIMELINE_CACHE_LIMIT`` is not a size.
    """
    if no_cache:
        return None
    from timeline.importers.cache import open_cache

    cache, note = open_cache(cache_dir)
    if note is not None:
        echo_warnings([note])
    return cache


def run_options(flags: RunFlags, *, echo_link: bool = True) -> RunOptions:
    """Return the :class:`RunOptions` of a command's options (links, dimensions and selections parsed).

    ``echo_link``: say the capacity ``--link-gbps`` names (:func:`echo_link`); a command that may not
    use it says it itself once it knows.

    Raises
    ------
    UsageError
        A link, a dimension label, or a ``--ranks``/``--iterations`` list that does not parse.
    """
    from timeline.analysis.dimension_labels import parse_dimension_overrides
    from timeline.analysis.links import parse_link_gbps
    from timeline.run import RunOptions
    from timeline.selection import parse_numbers

    link = parse_link_gbps(flags.link_gbps) if flags.link_gbps is not None else None
    if echo_link:
        echo_link_of(flags.link_gbps, link)
    codec_gbps = flags.codec_gbps
    if codec_gbps is not None:
        from timeline.whatif.settings import check_codec_gbps

        codec_gbps = check_codec_gbps(codec_gbps)
    return RunOptions(
        align=flags.align,
        link_gbps=link,
        dimensions=parse_dimension_overrides(list(flags.dimension or [])),
        gpus_per_node=flags.gpus_per_node,
        codec_gbps=codec_gbps,
        ranks=parse_numbers(flags.ranks, "--ranks"),
        iterations=parse_numbers(flags.iterations, "--iterations"),
    )


def echo_link_of(text: str | None, gbps: float | None) -> None:
    """Say, in a note, the capacity ``--link-gbps TEXT`` names, as every figure derived from it uses it."""
    if text is not None and gbps is not None:
        from timeline.analysis.links import describe_link

        note(describe_link(text, gbps))


def check_regex(pattern: str, option: str) -> None:
    """Check a user's regex as the library does (:func:`timeline.importers.rules.check_pattern`)."""
    from timeline.importers.rules import check_pattern

    check_pattern(pattern, label=option)


@contextmanager
def loading() -> Iterator[tuple[Callable[[str, int, int], None] | None, Callable[[Sequence[str]], None]]]:
    """Yield the ``progress`` and ``warn`` callbacks of a library call that reads inputs.

    The warnings are printed once the progress bar is gone, also when the call fails after loading.
    """
    warnings: list[str] = []
    try:
        with progress_bar() as report:
            yield report, warnings.extend
    finally:
        echo_warnings(warnings)


def load(inputs: Inputs) -> Trace:
    """Load every event of the inputs in memory, with a progress bar; print the load warnings.

    For ``timeline convert``, which writes the events and computes no figure: the run's warning
    that the traces hold fewer ranks than the job (a note on figures that compare ranks) is printed
    by the commands that compute them (:func:`open_run`).
    """
    with loading() as (progress, warn):
        trace = inputs.load(progress=progress)
        warn(trace.warnings)
    return trace


def open_run(
    inputs: Inputs,
    options: RunOptions | None = None,
    *,
    needs: Needs | None = None,
    first: Callable[[Run], object] | None = None,
) -> Run:
    """Open the run of the inputs and read what the command reads first, with a progress bar.

    ``first``: the fact read first (default: the inputs read, :meth:`~timeline.run.Run.read`;
    ``timeline whatif``: the what-if graph, which rank by rank is read on its own). The load
    warnings are printed as soon as the inputs are read, the run's own (a partial run) after them.
    """
    from timeline.run import Run

    with loading() as (progress, warn):
        run = Run(inputs, options, needs=needs, progress=progress, warn=warn)
        if first is None:
            run.read()
        else:
            first(run)
        warn(run.own_warnings)
    return run


def dumps_only(ranks: str | None, iterations: str | None) -> None:
    """Warn that ``--ranks`` and ``--iterations`` select profiler traces, not Flight Recorder dumps."""
    given = [name for name, value in (("--ranks", ranks), ("--iterations", iterations)) if value is not None]
    if given:
        echo_warnings(
            [
                f"{' and '.join(given)} select{'' if len(given) > 1 else 's'} profiler traces; the "
                "inputs are Flight Recorder dumps, "
                "whose every rank and collective the report reads: not used"
            ]
        )


def flight_inputs(paths: Sequence[str], rank: int | None = None) -> tuple[list[Path], list[Path]]:
    """Return ``(dumps, traces)``: the inputs' Flight Recorder dumps and the rest, recognised by content."""
    from timeline.inputs import expand_inputs, input_paths, split_dumps

    return split_dumps(expand_inputs(input_paths(list(paths)), rank=rank))


def flight_dumps(dumps: Sequence[Path], *, rank: int | None = None, rank_regex: str | None = None) -> Dumps:
    """Load Flight Recorder dumps, with a progress bar; print the load warnings."""
    from timeline.dumps import load_dumps

    with loading() as (progress, warn):
        loaded = load_dumps(list(dumps), rank=rank, rank_regex=rank_regex, progress=progress)
        warn(loaded.warnings)
    return loaded
