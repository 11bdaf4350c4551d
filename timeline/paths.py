r"""Paths a user names, checked before anything is opened: lengths, names that are not UTF-8, special files.

Takes a path from the command line or the library's caller; gives

- :func:`check_path`: one :class:`~timeline.errors.UsageError` for a name over
  :data:`NAME_MAX_BYTES` or a path over :data:`PATH_MAX_BYTES` (the kernel's ``ENAMETOOLONG``,
  which ``Path.is_dir`` and ``Path.exists`` raise rather than answer), or a NUL byte;
- :func:`path_text`: a path as text every frame, JSON document and terminal can hold (a byte of a
  name that is not UTF-8, which Python decodes as a lone surrogate, written ``\xff``);
- :func:`read_regular_file`: the bytes of a file an option names (a budget file, a summary JSON, a
  manifest): a regular file, never a FIFO (which would block) or a device (``/dev/zero`` never ends),
  also through a link, and at most a size limit.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from timeline.errors import TimelineError, UsageError, shown

__all__ = [
    "NAME_MAX_BYTES",
    "PATH_MAX_BYTES",
    "check_path",
    "path_text",
    "read_regular_file",
    "special_kind",
]

NAME_MAX_BYTES = 255
"""The longest file or directory name, in bytes (``NAME_MAX`` of Linux, macOS and the usual file systems)."""
PATH_MAX_BYTES = 4095
"""The longest path, in bytes (Linux's ``PATH_MAX``, 4,096, counts the terminating NUL)."""


def check_path(path: str | Path, *, what: str = "") -> None:
    """Refuse a path the system cannot name: a name or path too long, or a NUL byte.

    Parameters
    ----------
    path
        The path as given (a glob pattern too: its names are checked alike).
    what
        What the path is, for the message (``--junit``); empty for an input.

    Raises
    ------
    UsageError
        The path and what is wrong with it, in one line (the path shortened).
    """
    text = os.fspath(path)
    raw = os.fsencode(text)
    label = f"{what} " if what else ""
    if b"\0" in raw:
        raise UsageError(f"{label}{shown(_shortened(text))}: holds a NUL byte, which no file name can")
    if len(raw) > PATH_MAX_BYTES:
        msg = (
            f"{label}{shown(_shortened(text))}: a path of {len(raw):,} bytes; the system takes at most "
            f"{PATH_MAX_BYTES:,} (PATH_MAX): use a shorter path"
        )
        raise UsageError(msg)
    for name in raw.split(b"/"):
        if len(name) > NAME_MAX_BYTES:
            shown_name = _shortened(os.fsdecode(name))
            msg = (
                f"{label}{shown(_shortened(text))}: the name {shown(shown_name)} has {len(name):,} bytes; "
                f"a file name has at most {NAME_MAX_BYTES} (NAME_MAX): rename it"
            )
            raise UsageError(msg)


def _shortened(text: str, keep: int = 60) -> str:
    """Return ``text``, or its first and last ``keep`` characters around ``...`` when longer."""
    return text if len(text) <= 2 * keep + 3 else f"{text[:keep]}...{text[-keep:]}"


def path_text(path: str | Path) -> str:
    r"""Return a path as text that is valid UTF-8: as is, or with each byte that is not UTF-8 as ``\xNN``.

    A file name is bytes; Python decodes the bytes that are not UTF-8 as lone surrogates, which
    polars, msgspec and a UTF-8 terminal refuse. Frames and results hold this text instead.

    Examples
    --------
    >>> path_text("runs/rank0.json"), path_text(os.fsdecode(b"r\xff.json"))
    ('runs/rank0.json', 'r\\xff.json')
    """
    text = os.fspath(path)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(text).decode("utf-8", "backslashreplace")
    return text


def special_kind(mode: int) -> str | None:
    """Return what a file of this ``st_mode`` is when it is not a regular file (``a FIFO``), else None."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def read_regular_file(path: str | Path, *, limit: int, error: type[TimelineError], what: str) -> bytes:
    """Return the bytes of a regular file of at most ``limit`` bytes (links followed).

    The file is opened without blocking (a FIFO would wait for a writer), its type checked on the
    open descriptor, and at most ``limit + 1`` bytes are read (a file that grows while read is
    refused too).

    Parameters
    ----------
    path
        The file.
    limit
        The most bytes it may hold.
    error
        The error to raise (``BudgetError`` for a budget file).
    what
        What the file is, for the messages (``budget file``).

    Raises
    ------
    TimelineError
        ``error``: missing, unreadable, not a regular file, or larger than ``limit``.
    """
    source = shown(path)
    check_path(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise error(f"{source}: no such {what}") from None
    except OSError as exc:
        raise error(f"{source}: cannot read the {what} ({exc.strerror or exc})") from None
    kind = special_kind(os.fstat(fd).st_mode)
    if kind is not None:
        os.close(fd)
        raise error(f"{source}: is {kind}, not a regular file; pass the {what} itself")
    with os.fdopen(fd, "rb") as handle:
        try:
            data = handle.read(limit + 1)
        except OSError as exc:
            raise error(f"{source}: cannot read the {what} ({exc.strerror or exc})") from None
    if len(data) > limit:
        msg = f"{source}: larger than {limit:,} bytes, the most a {what} may hold; is it the right file?"
        raise error(msg)
    return data
