"""The tables and the prose every terminal renderer draws with rich, fitted to the console's width.

:func:`print_table` draws a table of :class:`~timeline.render.terminal.layout.Col` columns on a
console of any width from :data:`~timeline.render.terminal.layout.MIN_WIDTH` columns up, as
:func:`~timeline.render.terminal.layout.fit_columns` fits it: the columns that matter least are left
out first (and named in one line below the table), headers wrap at spaces, numbers are never cut.
:func:`print_prose` wraps a paragraph at the console's width with a hanging indent, never inside a
word. :func:`titled_table` is the older, unfitted table.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from timeline.render.terminal.layout import MIN_WIDTH, Col, abbreviated, fit_columns, left_out_line

__all__ = ["MIN_WIDTH", "Col", "print_prose", "print_table", "titled_table"]


def print_table(
    console: Console,
    title: str,
    columns: Sequence[Col],
    rows: Sequence[Sequence[str]],
    *,
    markup: bool = False,
) -> None:
    """Draw a table that fits the console: its title (wrapped), the table, the columns left out.

    ``markup``: the cells hold rich markup (styles); else they are shown as they are. The names of
    an abbreviating column too long for it are shortened
    (:func:`~timeline.render.terminal.layout.abbreviate`), shown without their styles.
    """
    plain = [[Text.from_markup(c).plain if markup else c for c in row] for row in rows]
    shown, widths = fit_columns(columns, plain, console.width)
    width_of = dict(zip(shown, widths, strict=True))
    rows = [
        [
            escape(abbreviated(plain[r][i], width_of[i]))
            if columns[i].abbreviate and i in width_of
            else cell
            if markup
            else escape(cell)
            for i, cell in enumerate(row)
        ]
        for r, row in enumerate(rows)
    ]
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
        print_prose(console, escape(left_out_line(left_out)), hang=1)


_GLUE = "\ue000"
"""Stands for a space that must not break (between a number and its unit) while a paragraph is wrapped."""
_NUMBER_AND_UNIT = re.compile(
    r"(?<=\d) (?=(?:ns|µs|ms|s|KiB|MiB|GiB|TiB|B|kB|MB|GB|TB|Gbit/s|GB/s|B/s|%|×)(?![\w/]))"
)


def print_prose(console: Console, text: str, *, indent: int = 0, hang: int = 2, markup: bool = True) -> None:
    """Print a paragraph wrapped at the console's width: ``indent`` spaces first, ``hang`` more after.

    Lines break at spaces, never between a number and its unit (``10.90 ms``); a word longer than a
    whole line is the only one ever folded. ``markup``: the text holds rich markup; else it is
    printed as it is.
    """
    body = Text.from_markup(text) if markup else Text(text)
    glued = Text(_NUMBER_AND_UNIT.sub(_GLUE, body.plain), style=body.style, spans=list(body.spans))
    room = max(console.width - indent - hang, 20)
    lines = glued.wrap(console, room, overflow="fold")
    for k, line in enumerate(lines):
        line.rstrip()
        whole = Text(line.plain.replace(_GLUE, " "), style=line.style, spans=list(line.spans))
        pad = " " * (indent if k == 0 else indent + hang)
        console.print(Text(pad) + whole, soft_wrap=True)


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
