"""How a table fits a width: which columns it shows and how wide each is; plain-text tables and prose.

Imports nothing but the standard library (``timeline check`` prints its plain table without rich):
:mod:`timeline.render.terminal.tables` draws the boxed tables with rich on the same rules.
A table is columns (:class:`Col`: header, alignment, how much it matters) and rows of formatted
cells. :func:`fit_columns` leaves out the columns that matter least (the highest ``drop`` rank), one
by one, until the table fits, before anything wraps; a header wraps at its spaces; a cell is never
cut, and only a column of names (``wrap=True``) wraps, at spaces, never inside a word.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

__all__ = [
    "MIN_WIDTH",
    "Col",
    "abbreviate",
    "abbreviated",
    "cell_width",
    "counted",
    "fit_columns",
    "left_out_line",
    "plain_table",
    "wrap_plain",
]

MIN_WIDTH = 60
"""The narrowest console the renderers fit (a narrower terminal gets this width)."""

_NEVER = 0
"""``Col.drop`` of a column that is never left out."""
_UNKNOWN = ("-", "")
"""The cells of a figure that is not known."""
_UNKNOWN_FIRST = 1_000_000
"""The rank of a column whose every cell is unknown: left out before any other."""


@dataclass(frozen=True)
class Col:
    """A column of a fitted table.

    Attributes
    ----------
    header
        What its header says (its unit, where its cells are bare numbers).
    justify
        ``right`` for numbers, ``left`` for names.
    drop
        0: always shown; else the larger, the sooner it is left out when the table is too wide.
    wrap
        Its cells may wrap at their spaces (names, lists of ranks); numbers never do.
    abbreviate
        A name longer than the column can be is shortened in its middle, marked ``…`` (its start and
        its end kept: a tensor's or kernel's name), rather than folded; never a number.
    """

    header: str
    justify: Literal["left", "right"] = "right"
    drop: int = _NEVER
    wrap: bool = False
    abbreviate: bool = False


ABBREVIATED_MIN = 12
"""The narrowest an abbreviating column gets (its names shortened to this many characters)."""


def abbreviate(word: str, width: int) -> str:
    """Return a word shortened to ``width`` characters in its middle (a third of its start, the rest its end).

    Examples
    --------
    >>> abbreviate("tower_0/v0/HorovodAllreduce_gradients_AddN_1_0", 20)
    'tower_…ents_AddN_1_0'
    """
    if len(word) <= width:
        return word
    head = (width - 1) // 3
    return word[:head] + "…" + word[len(word) - (width - 1 - head) :]


def abbreviated(cell: str, width: int) -> str:
    """Return a cell whose words longer than ``width`` are abbreviated (:func:`abbreviate`)."""
    return " ".join(abbreviate(word, width) for word in cell.split(" "))


def counted(n: int, noun: str, *, plural: str | None = None) -> str:
    """Return a count with its noun: ``1 rank``, ``2 ranks``, ``3 batches`` (``plural`` when not noun + s).

    Examples
    --------
    >>> counted(1, "rank"), counted(32, "rank"), counted(2, "batch", plural="batches")
    ('1 rank', '32 ranks', '2 batches')
    """
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def cell_width(text: str) -> int:
    """Return how many terminal cells a text takes: 2 for a wide character, 0 for a combining one."""
    return sum(
        0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text
    )


def _longest_word(text: str) -> int:
    return max((cell_width(word) for word in text.split()), default=0)


def _min_width(column: Col, cells: list[str]) -> int:
    """Return the narrowest a column can be: its longest header word and cell (word, if it wraps).

    An abbreviating column: :data:`ABBREVIATED_MIN`, or less when every cell (word) is shorter.
    """
    longest = max((_longest_word(c) if column.wrap else cell_width(c) for c in cells), default=0)
    if column.abbreviate:
        longest = min(longest, ABBREVIATED_MIN)
    return max(_longest_word(column.header), longest, 1)


def _natural_width(column: Col, cells: list[str]) -> int:
    return max(cell_width(column.header), *(cell_width(c) for c in cells), 1)


def _table_width(widths: Sequence[int], *, boxed: bool = True) -> int:
    """Return the width of a table of these column widths.

    Boxed as rich draws it (padding 2 and one rule per column), or plain (two spaces between columns).
    """
    if boxed:
        return sum(widths) + 3 * len(widths) + 1
    return sum(widths) + 2 * max(len(widths) - 1, 0)


def fit_columns(
    columns: Sequence[Col], rows: Sequence[Sequence[str]], width: int, *, boxed: bool = True
) -> tuple[list[int], list[int]]:
    """Return the columns shown (their indices) and their widths, for a table at most ``width`` wide.

    The columns that matter least are left out first (a column of unknowns only, ``-``, before
    any; then the highest ``drop``; of equals, the rightmost), until the table fits with its headers
    wrapped at spaces and its names wrapped at theirs; only then are names abbreviated
    (``abbreviate`` columns), and a table that does not fit even so loses the columns always shown
    from the right too (the first column stays): a cell is never cut. The widths are then narrowed
    as little as needed: headers first, then names.
    ``boxed``: drawn by rich with its rules, else plain text with two spaces between columns.
    """
    cells = [[row[i] for row in rows] for i in range(len(columns))]
    natural = [_natural_width(c, cells[i]) for i, c in enumerate(columns)]
    narrowest = [_min_width(c, cells[i]) for i, c in enumerate(columns)]
    whole_names = [_min_width(replace(c, abbreviate=False), cells[i]) for i, c in enumerate(columns)]
    shown = list(range(len(columns)))
    # a column of unknowns only ("-") says least of all: it goes first, whatever its rank
    rank = [
        _UNKNOWN_FIRST if i > 0 and cells[i] and all(c in _UNKNOWN for c in cells[i]) else c.drop
        for i, c in enumerate(columns)
    ]

    def fits(widths: Sequence[int]) -> bool:
        return _table_width([widths[i] for i in shown], boxed=boxed) <= width

    while not fits(whole_names) and any(rank[i] != _NEVER for i in shown):
        droppable = [i for i in shown if rank[i] != _NEVER]
        shown.remove(max(droppable, key=lambda i: (rank[i], i)))
    while not fits(narrowest) and len(shown) > 1:
        shown.remove(max(shown[1:]))
    widths = [natural[i] for i in shown]
    # narrow the widest first: headers wrapped at their spaces, then names at theirs; never a number
    for floor in (_cells_floor(columns, cells, narrowest), whole_names, narrowest):
        excess = _table_width(widths, boxed=boxed) - width
        while excess > 0:
            slack = [(widths[k] - floor[i], k) for k, i in enumerate(shown) if widths[k] > floor[i]]
            if not slack:
                break
            _, k = max(slack)
            widths[k] -= 1
            excess -= 1
    return shown, widths


def _cells_floor(columns: Sequence[Col], cells: list[list[str]], narrowest: list[int]) -> list[int]:
    """Return the width of each column with its header wrapped and its cells whole."""
    return [max(narrowest[i], *(cell_width(c) for c in cells[i]), 1) for i in range(len(columns))]


def plain_table(columns: Sequence[Col], rows: Sequence[Sequence[str]], width: int | None) -> list[str]:
    """Return the lines of a plain-text table (two spaces between columns), fitted to ``width``.

    Fitted as the boxed tables are (None: every column, at full width), then the line naming the
    columns left out.
    """
    shown = list(range(len(columns)))
    if width is not None:
        shown, _ = fit_columns(columns, rows, width, boxed=False)
    header = [columns[i].header for i in shown]
    body = [[row[i] for i in shown] for row in rows]
    if width is not None:
        _, fitted = fit_columns(columns, rows, width, boxed=False)
        for k, i in enumerate(shown):
            if columns[i].abbreviate:
                body = [[*r[:k], abbreviated(r[k], fitted[k]), *r[k + 1 :]] for r in body]
    widths = [max(cell_width(c) for c in column) for column in zip(header, *body, strict=True)]

    def line(cells: list[str]) -> str:
        padded = [_pad(c, w, columns[i].justify) for i, c, w in zip(shown, cells, widths, strict=True)]
        return "  ".join(padded).rstrip()

    lines = [line(header), *(line(r) for r in body)]
    left_out = [columns[i].header for i in range(len(columns)) if i not in shown]
    if left_out:
        lines += wrap_plain(left_out_line(left_out), width, hang=1)
    return lines


def left_out_line(headers: Sequence[str]) -> str:
    """Return the line that names the columns a table left out to fit its width."""
    return f"(not shown at this width: {', '.join(headers)}; --json has them)"


def wrap_plain(text: str, width: int | None, *, hang: int = 2) -> list[str]:
    """Return a paragraph wrapped at ``width``, hanging indent, broken at spaces only (None: one line)."""
    if width is None:
        return [text]
    import textwrap

    return textwrap.wrap(
        text,
        width=width,
        subsequent_indent=" " * hang,
        break_long_words=False,
        break_on_hyphens=False,
    ) or [""]


def _pad(cell: str, width: int, justify: str) -> str:
    space = " " * (width - cell_width(cell))
    return space + cell if justify == "right" else cell + space
