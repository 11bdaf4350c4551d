"""The exceptions timeline raises, and the warnings it collects.

The library never prints or exits: it raises a :class:`TimelineError` subclass whose message starts
with *where* (``rank3.json:12:48:``), says *what* in lower case, and gives the fix when there is one.
The command line turns these into one ``error:`` line and exit code 2.
"""

from __future__ import annotations

__all__ = [
    "BudgetError",
    "ManifestError",
    "RankError",
    "TimelineError",
    "TraceContentError",
    "TraceFormatError",
    "UsageError",
    "position_of",
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
