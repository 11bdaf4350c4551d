"""The table every terminal renderer draws.

A bold left-aligned title, the first column left-aligned unless it holds numbers, every other column
right-aligned.
"""

from __future__ import annotations

from rich.table import Table

__all__ = ["titled_table"]


def titled_table(
    title: str, columns: list[str], *, numeric_first: tuple[str, ...], no_wrap: bool = False
) -> Table:
    """Return an empty table with these column headers.

    ``numeric_first``: header prefixes that mark a first column of numbers (right-aligned too).
    ``no_wrap``: cells are never wrapped (long tables of figures).
    """
    table = Table(title=title, title_justify="left", title_style="bold", header_style="bold")
    for i, name in enumerate(columns):
        left = i == 0 and not name.startswith(numeric_first)
        table.add_column(name, justify="left" if left else "right", no_wrap=no_wrap)
    return table
