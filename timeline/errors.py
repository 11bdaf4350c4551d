"""The exceptions timeline raises, and the warnings it collects.

The library never prints or exits: it raises a :class:`TimelineError` subclass whose message starts
with *where* (``rank3.json:12:48:``), says *what* in lower case, and gives the fix when there is one.
The command line turns these into one ``error:`` line and exit code 2.
"""

from __future__ import annotations

import re
import signal

__all__ = [
    "BudgetError",
    "ManifestError",
    "RankError",
    "Terminated",
    "TimelineError",
    "TraceContentError",
    "TraceFormatError",
    "UsageError",
    "one_line",
    "position_of",
    "shown",
]


class TimelineError(Exception):
    """Base class of every error timeline raises for bad input."""


class TraceFormatError(TimelineError):
    """A file is not a trace timeline can read: not JSON, truncated beyond repair, unknown layout."""


class TraceContentError(TimelineError):
    """A trace parses but its content cannot be used: no events, end before start, no timestamps."""


class RankError(TimelineError):
    """The rank of a file cannot be determined, or two files claim the same rank."""


class UsageError(TimelineError):
    """Arguments that cannot work together: a path that does not exist, an empty directory."""


class BudgetError(TimelineError):
    """A budget file cannot be used: unknown metric, wrong type, missing limit."""


class ManifestError(TimelineError):
    """A capture run's ``manifest.json`` cannot be used: unreadable, not JSON, another format, bad fields."""


class Terminated(KeyboardInterrupt):
    """The command was told to end by SIGTERM (a scheduler, ``timeout``, CI) or SIGHUP (a closed terminal).

    A :class:`KeyboardInterrupt`, so that it unwinds exactly as Ctrl-C does (every ``finally`` runs,
    nothing that catches :class:`Exception` swallows it), and the command line ends it as it ends
    Ctrl-C: worker processes stopped, partial files removed, with its own exit code and message.

    Parameters
    ----------
    signum
        The signal received.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, as a shell reports a signal's end: 143 (SIGTERM), 129 (SIGHUP)."""
        return 128 + self.signum

    @property
    def message(self) -> str:
        """What the command line prints: ``terminated (SIGTERM)``."""
        return f"terminated ({signal.Signals(self.signum).name})"


def position_of(data: bytes, offset: int) -> tuple[int, int]:
    """Return the 1-based ``(line, column)`` of byte ``offset`` in ``data``.

    Parameters
    ----------
    data
        The whole file content.
    offset
        A byte offset, clipped into ``[0, len(data)]``.

    Returns
    -------
    tuple[int, int]
        Line and column, both counted from 1; the column counts bytes.
    """
    offset = max(0, min(offset, len(data)))
    line = data.count(b"\n", 0, offset) + 1
    last_newline = data.rfind(b"\n", 0, offset)
    return line, offset - last_newline


def shown(path: object) -> str:
    r"""Return a path (or any value) as it prints in a message: as is, or escaped when it must be.

    A name with a newline, a tab or another character that does not print (a byte that is not
    UTF-8, decoded as a surrogate) is shown as Python's ``repr`` (quoted, ``\n`` escaped), so an
    ``error:`` line stays one line and says exactly which file it means; any other name is shown
    unchanged.

    Examples
    --------
    >>> shown("runs/rank0.json"), shown("a\nb.json")
    ('runs/rank0.json', "'a\\nb.json'")
    """
    text = str(path)
    return text if text.isprintable() else _bytes_escaped(repr(text))


def one_line(message: str) -> str:
    r"""Return a message with every character that does not print escaped (``\n`` for a newline).

    The command line prints every error and warning through it, so that a value the library put in
    a message raw (a path with a newline) never splits the line.

    Examples
    --------
    >>> one_line("a\nb.json: no such file")
    'a\\nb.json: no such file'
    """
    if message.isprintable():
        return message
    return "".join(c if c.isprintable() else _bytes_escaped(repr(c)[1:-1]) for c in message)


# ``repr`` writes a byte of a file name that is not UTF-8 (decoded by Python as a lone surrogate,
# U+DC80-U+DCFF) as ``\udcff``; the byte itself is ``\xff``. Only an escape that is one (an odd
# number of backslashes before it) is rewritten.
_SURROGATE_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*)\\udc([89a-f][0-9a-f])")


def _bytes_escaped(text: str) -> str:
    r"""Return ``repr`` text with each escaped byte that is not UTF-8 written as that byte (``\xff``)."""
    return _SURROGATE_ESCAPE.sub(r"\1\\x\2", text)
