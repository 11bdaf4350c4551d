"""The files timeline writes: never one it reads, always whole, and nothing left behind when it fails.

Every option that writes a file (``convert -o``, ``report -o``, ``check --junit``/``--markdown``/
``--init``, ``diff --markdown``, the Perfetto export) goes through this module:

- :func:`check_output` refuses an output that is one of the files the command reads (its traces,
  the budget file, the baseline or ``--compare`` run), the same file under another name (a symbolic
  or hard link), a directory of inputs, or anything inside a Parquet dataset being read; and an
  existing output that is not a regular file (a directory, a FIFO, a device). It runs before anything
  is read, so a mistyped option fails at once.
- :func:`write_output` writes through a new file beside the target (``.NAME.partial-XXXXXXXX``,
  created, never opened if it exists, never through a link) and renames it over the target once
  complete: a full disk, a read-only file system, Ctrl-C, SIGTERM or SIGHUP leave the target as it
  was and no partial file behind. A failure to write is a :class:`~timeline.errors.UsageError`
  naming the file and the reason (``No space left on device``).
- :func:`signals_deferred` holds Ctrl-C, SIGTERM and SIGHUP for the few instructions that create
  or rename a partial file and record it, so that an interruption never falls between the two.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import signal
import stat
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import BinaryIO, TypeVar

from timeline.errors import UsageError, shown
from timeline.globs import glob_paths, has_magic
from timeline.inputs import is_dataset, is_trace_name
from timeline.paths import check_path, special_kind

__all__ = [
    "DEFERRED_SIGNALS",
    "check_output",
    "create_beside",
    "is_output_error",
    "output_error",
    "signals_deferred",
    "write_output",
    "written_beside",
]

DEFERRED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""The signals that end a command and are held while a partial file is created or renamed."""

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_T = TypeVar("_T")
_OS_ERROR = re.compile(r"\(os error (\d+)\)")
"""How polars (Rust's ``std::io::Error``) ends the message of an error of the system."""


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold Ctrl-C, SIGTERM and SIGHUP until the block ends; then deliver those that came meanwhile.

    The handlers are swapped for one that records the signal, then put back and the recorded signals
    raised again (:func:`signal.raise_signal`): their own handler runs then, as if they had just
    arrived. Outside the main thread (where no Python handler runs) nothing is changed.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []

    def record(signum: int, frame: object) -> None:
        pending.append(signum)

    previous = {sig: signal.signal(sig, record) for sig in DEFERRED_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for signum in dict.fromkeys(pending):
            signal.raise_signal(signum)


def check_output(
    output: str | Path, *, reads: Sequence[str | Path], option: str, any_kind: bool = False
) -> Path:
    """Refuse an output that is (or is inside) what the command reads, or that is not a regular file.

    Parameters
    ----------
    output
        The file to write.
    reads
        What the command reads, as given: trace files, directories, glob patterns, datasets, the
        budget file, baselines.
    option
        The option that names ``output`` (``--junit``), for the messages.
    any_kind
        Leave an existing output that is not a regular file to the caller (``convert``, whose
        ``--force`` rules decide what a dataset directory may replace).

    Returns
    -------
    Path
        ``output``.

    Raises
    ------
    UsageError
        A path the system cannot name; the output is one of the inputs (through links too) or inside
        a dataset read; an existing output that is a directory, a FIFO, a device or a socket.
    """
    target = Path(output)
    check_path(target, what=option)
    if not any_kind:
        _check_kind(target, option)
    read = _read_by(target, reads)
    if read is not None:
        what = "one of the inputs" if read == "" else f"inside {shown(read)}, which is read"
        msg = f"{shown(output)}: is {what}; choose another output file (inputs are never modified)"
        raise UsageError(msg)
    return target


def _check_kind(target: Path, option: str) -> None:
    """Refuse an existing ``target`` that is not a regular file (links followed)."""
    try:
        mode = target.stat().st_mode  # through a link: what would be written to
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        msg = f"{shown(target)}: cannot be examined ({exc.strerror or exc}); choose another {option}"
        raise UsageError(msg) from None
    if mode is not None and not stat.S_ISREG(mode):
        kind = special_kind(mode)
        raise UsageError(f"{shown(target)}: is {kind}; {option} writes a file: choose another {option}")


def _read_by(target: Path, reads: Sequence[str | Path]) -> str | None:
    """Return ``""`` when ``target`` is a file read, the folder read that holds it, or None."""
    resolved = target.resolve()
    identity = _identity(target)
    for raw in reads:
        for path, tree in _places(raw):
            place = path.resolve()
            if place == resolved or (identity is not None and _identity(path) == identity):
                return ""
            if tree and place in resolved.parents:
                return str(path)
    return None


def _places(raw: str | Path) -> Iterator[tuple[Path, bool]]:
    """Yield what reading ``raw`` reads: ``(path, whether anything inside it is read too)``.

    A pattern gives its matches; a directory itself, the files its reader takes as traces
    (:func:`timeline.inputs.is_trace_name`), and (a Parquet dataset, a ``rank=N`` folder of one)
    everything in it. Errors are left to the reader, which reports them.
    """
    text = os.fspath(raw)
    try:
        check_path(text)
    except UsageError:
        return
    if has_magic(text) and not Path(text).exists():
        try:
            matches = glob_paths(text)
        except UsageError:
            return
        for match in matches:
            yield from _places(match)
        return
    path = Path(text)
    try:
        is_dir = path.is_dir()
    except OSError:
        return
    if not is_dir:
        yield path, False
        return
    yield path, is_dataset(path) or path.resolve().name.startswith("rank=")
    try:
        members = [p for p in path.iterdir() if is_trace_name(p.name)]
    except OSError:
        return
    for member in members:
        yield member, False


def _identity(path: Path) -> tuple[int, int] | None:
    """Return the device and inode of what ``path`` names (links followed), or None."""
    try:
        info = path.stat()
    except OSError:
        return None
    return info.st_dev, info.st_ino


def is_output_error(exc: BaseException) -> OSError | None:
    """Return the :class:`OSError` behind a failed write (the exception, its cause, or polars' own), or None.

    polars reports the error of a file it writes (to a path, or to a Python file object) as a
    ``ComputeError`` whose message ends with the system's error, ``... (os error 28)``: that number
    is read back into an :class:`OSError`.
    """
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return None
        if isinstance(seen, OSError):
            return seen
        if type(seen).__module__.startswith("polars"):
            found = _OS_ERROR.search(str(seen))
            if found is not None:
                number = int(found.group(1))
                return OSError(number, os.strerror(number))
        seen = seen.__cause__ or seen.__context__
    return None


def _why(exc: OSError) -> str:
    """Return the reason of a failed write, with the fix for the usual ones."""
    reason = exc.strerror or str(exc)
    if exc.errno == errno.ENOSPC or exc.errno == errno.EDQUOT:
        return f"{reason}: free some space or write elsewhere"
    if exc.errno == errno.EROFS:
        return f"{reason}: write elsewhere"
    return reason


def output_error(target: str | Path, exc: OSError) -> UsageError:
    """Return the error of a failed write of ``target``: ``FILE: cannot write (reason)``."""
    return UsageError(f"{shown(target)}: cannot write ({_why(exc)})")


def create_beside(target: Path, create: Callable[[Path], _T]) -> tuple[Path, _T]:
    """Create something new beside ``target``, named ``.NAME.partial-XXXXXXXX``, with ``create(path)``.

    ``create`` must fail with ``FileExistsError`` when the name exists (``mkdir``, ``O_EXCL``): then
    another name is tried, so nothing that was there is ever opened, followed or removed. Call it
    inside :func:`signals_deferred`, with the result recorded for removal before the block ends.

    Raises
    ------
    UsageError
        A directory that cannot be written.
    """
    for _ in range(16):
        path = target.with_name(f".{target.name}.partial-{secrets.token_hex(4)}")
        try:
            return path, create(path)
        except FileExistsError:
            continue
        except OSError as exc:
            raise output_error(target, exc) from None
    raise UsageError(f"{shown(target.parent)}: cannot create a new file there (every name tried exists)")


def _new_file(path: Path) -> int:
    """Create ``path`` and open it for writing: never an existing file, never through a link."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    return os.open(path, flags, 0o666)


@contextmanager
def written_beside(target: Path) -> Iterator[tuple[Path, BinaryIO]]:
    """Yield a new partial file beside ``target`` open for writing; on leaving, rename it over ``target``.

    Whatever ends the block early (an error, Ctrl-C, a signal) removes the partial file and leaves
    ``target`` as it was. The partial file is flushed to the disk before the rename, so a full disk
    is found before the target is replaced.

    Raises
    ------
    UsageError
        Writing failed (the reason: ``No space left on device``, ``Read-only file system``).
    """
    partial: Path | None = None
    handle: BinaryIO | None = None
    try:
        with signals_deferred():
            partial, descriptor = create_beside(target, _new_file)
            handle = os.fdopen(descriptor, "wb")
        yield partial, handle
        handle.flush()
        os.fsync(handle.fileno())
        handle.close()
        with signals_deferred():
            partial.replace(target)
            partial = None
    except Exception as exc:
        failed = is_output_error(exc)
        if failed is None:
            raise
        raise output_error(target, failed) from None
    finally:
        if handle is not None and not handle.closed:
            _close_quietly(handle)
        if partial is not None:
            partial.unlink(missing_ok=True)


def _close_quietly(handle: BinaryIO) -> None:
    """Close a partial file being abandoned; its own error (a full disk's) is not the one to report."""
    with suppress(OSError):
        handle.close()


def write_output(target: str | Path, data: bytes | str, *, check: Callable[[], None] | None = None) -> Path:
    """Write ``data`` (text as UTF-8) to ``target`` whole, through a partial file renamed over it.

    Parameters
    ----------
    target
        The file to write (checked first with :func:`check_output`).
    data
        Its content.
    check
        Called once the content is written, before the rename: raises when ``target`` may no
        longer be replaced (it changed meanwhile).

    Returns
    -------
    Path
        ``target``.

    Raises
    ------
    UsageError
        The folder does not exist or cannot be written, the disk is full, the file system read-only.
    """
    path = Path(target)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    with written_beside(path) as (_, handle):
        handle.write(raw)
        if check is not None:
            check()
    return path
