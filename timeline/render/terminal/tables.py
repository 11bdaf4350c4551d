"""The tables and the prose every terminal renderer draws, fitted to the console's width.

A table is a title, its columns (:class:`Col`: header, alignment, how much it matters) and its rows
of formatted cells. :func:`print_table` draws it on a console of any width from
:data:`MIN_WIDTH` columns up: when it is wider than the console, the columns that matter least
(the highest ``drop`` rank) are left out one by one, and named in one line below the table, before
anything is wrapped; a header wraps at its spaces; a cell is never cut, and only a column of names
(``wrap=True``) wraps, at spaces, never inside a word. Numbers, whose cells never wrap, are
therefore never cut. :func:`print_prose` wraps a paragraph at the console's width with a hanging
indent, never inside a word.

:func:`titled_table` is the older, unfitted table (the summary's renderer still draws it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

__all__ = ["MIN_WIDTH", "Col", "fit_columns", "print_prose", "print_table", "titled_table"]

MIN_WIDTH = 60
"""The narrowest console the renderers fit (a narrower terminal gets this width)."""

_NEVER = 0
"""``Col.drop`` of a column that is never left out."""


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
    """

    header: str
    justify: Literal["left", "right"] = "right"
    drop: int = _NEVER
    wrap: bool = False


def _cell_width(cell: str) -> int:
    return Text.from_markup(cell).cell_len


def _longest_word(text: str) -> int:
    return max((Text(word).cell_len for word in text.split()), default=0)


def _min_width(column: Col, cells: list[str]) -> int:
    """The narrowest a column can be: its longest header word, and its longest cell (word, if it wraps)."""
    plain = [Text.from_markup(c).plain for c in cells]
    longest = max((_longest_word(c) if column.wrap else Text(c).cell_len for c in plain), default=0)
    return max(_longest_word(column.header), longest, 1)


def _natural_width(column: Col, cells: list[str]) -> int:
    return max(Text(column.header).cell_len, *(_cell_width(c) for c in cells), 1)


def _table_width(widths: Sequence[int]) -> int:
    """The width rich draws a boxed table of these column widths in: padding 2 and one rule per column."""
    return sum(widths) + 3 * len(widths) + 1


def fit_columns(columns: Sequence[Col], rows: Sequence[Sequence[str]], width: int) -> tuple[list[int], list[int]]:
    """Return the columns shown (their indices) and their widths, for a table at most ``width`` wide.

    The columns that matter least are left out first (the highest ``drop``; of equals, the
    rightmost), until the table fits at its natural widths or at its narrowest (headers wrapped at
    spaces, wrapping columns at their longest word); then the columns that wrap are narrowed as
    little as needed. A table that does not fit with the columns always shown loses those from the
    right too (the first column stays): a cell is never cut.
    """
    cells = [[row[i] for row in rows] for i in range(len(columns))]
    natural = [_natural_width(c, cells[i]) for i, c in enumerate(columns)]
    narrowest = [_min_width(c, cells[i]) for i, c in enumerate(columns)]
    shown = list(range(len(columns)))

    def fits(widths: Sequence[int]) -> bool:
        return _table_width([widths[i] for i in shown]) <= width

    while not fits(narrowest) and len(shown) > 1:
        droppable = [i for i in shown if columns[i].drop != _NEVER] or shown[1:]
        shown.remove(max(droppable, key=lambda i: (columns[i].drop, i)))
    widths = [natural[i] for i in shown]
    # narrow the widest first: headers wrapped at their spaces, then names at theirs; never a number
    for floor in (_cells_floor(columns, cells, narrowest), narrowest):
        excess = _table_width(widths) - width
        while excess > 0:
            slack = [(widths[k] - floor[i], k) for k, i in enumerate(shown) if widths[k] > floor[i]]
            if not slack:
                break
            _, k = max(slack)
            widths[k] -= 1
            excess -= 1
    return shown, widths


def _cells_floor(columns: Sequence[Col], cells: list[list[str]], narrowest: list[int]) -> list[int]:
    """The width of each column with its header wrapped and its cells whole."""
    return [max(narrowest[i], *(_cell_width(c) for c in cells[i]), 1) for i in range(len(columns))]


def print_table(
    console: Console,
    title: str,
    columns: Sequence[Col],
    rows: Sequence[Sequence[str]],
    *,
    markup: bool = False,
) -> None:
    """Draw a table that fits the console: its title (wrapped), the table, the columns left out.

    ``markup``: the cells hold rich markup (styles); else they are shown as they are.
    """
    if not markup:
        rows = [[escape(c) for c in row] for row in rows]
    shown, widths = fit_columns(columns, rows, console.width)
    if title:
        print_prose(console, f"[bold]{escape(title)}[/bold]", hang=2)
    table = Table(header_style="bold")
    for i, width in zip(shown, widths, strict=True):
        column = columns[i]
        table.add_column(
            Text(column.header, no_wrap=False, overflow="fold"),
            justify=column.justify,
            no_wrap=not column.wrap,
            overflow="fold",
            width=width,
        )
    for row in rows:
        table.add_row(*(row[i] for i in shown))
    console.print(table)
    left_out = [columns[i].header for i in range(len(columns)) if i not in shown]
    if left_out:
        print_prose(console, f"(not shown at this width: {', '.join(left_out)}; --json has them)", hang=1)


def print_prose(console: Console, text: str, *, indent: int = 0, hang: int = 2, markup: bool = True) -> None:
    """Print a paragraph wrapped at the console's width: ``indent`` spaces first, ``hang`` more after.

    Lines break at spaces; a word longer than a whole line is the only one ever folded.
    ``markup``: the text holds rich markup; else it is printed as it is.
    """
    body = Text.from_markup(text) if markup else Text(text)
    room = max(console.width - indent - hang, 20)
    lines = body.wrap(console, room, overflow="fold")
    for k, line in enumerate(lines):
        line.rstrip()
        pad = " " * (indent if k == 0 else indent + hang)
        console.print(Text(pad) + line, soft_wrap=True)


def titled_table(
    title: str, columns: list[str], *, numeric_first: tuple[str, ...], no_wrap: bool = False
) -> Table:
    """Return an empty table with these column headers (not fitted to the console: :func:`print_table` is).

    ``numeric_first``: header prefixes that mark a first column of numbers (right-aligned too).
    ``no_wrap``: cells are never wrapped (long tables of figures).
    """
    table = Table(title=title, title_justify="left", title_style="bold", header_style="bold")
    for i, name in enumerate(columns):
        left = i == 0 and not name.startswith(numeric_first)
        table.add_column(name, justify="left" if left else "right", no_wrap=no_wrap)
    return table
