"""How the report's page is laid out: boxes that follow the window, HTML legends, tables that scroll.

Takes nothing of a trace; gives the pieces every view of :mod:`timeline.report` shares so that the
page fits any window from 1280 pixels up and nothing is drawn over anything else:

- :data:`STRETCH`: every box stretches to the width of the window (bokeh's ``stretch_width``);
  plots have a fixed height and a :data:`MIN_PLOT_WIDTH`;
- :func:`legend_html`: a legend as HTML swatches that wrap onto more lines in a narrow window,
  drawn above its plot, never inside the plot's frame (and cheaper than a bokeh ``Legend``, which
  needs a glyph renderer per entry);
- :func:`html_box`: a ``Div`` as wide as its parent, whose content is too (so that it can scroll);
- :func:`scroll_box`: an HTML table in a box of its own that scrolls sideways when the window is
  narrower than the table (its columns never run under the next box);
- :func:`side_by_side`: two boxes in one row that wrap, the second under the first, when the row is
  narrower than both.

No bokeh here: the builders of each view import bokeh themselves.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

__all__ = [
    "BLOCK_CSS",
    "MIN_PLOT_WIDTH",
    "MIN_SIDE_WIDTH",
    "STRETCH",
    "TABLE_WIDTH",
    "html_box",
    "legend_html",
    "scroll_box",
    "side_by_side",
    "wrap_styles",
]

STRETCH: Any = "stretch_width"
"""The sizing mode of every box of the page: as wide as the window (or its parent), fixed height."""
MIN_PLOT_WIDTH = 600
"""The narrowest a full-width plot is drawn (pixels)."""
MIN_SIDE_WIDTH = 560
"""The narrowest a plot sharing a row with another is drawn; two fit side by side in 1280 pixels."""

TABLE_WIDTH = 840
"""The narrowest box of a table beside another: the per-rank table's width, so that two tables share a
row only in a window wide enough for both (else one goes under the other)."""
BLOCK_CSS = ":host .bk-clearfix { display: block; }"
"""A ``Div``'s stylesheet: its content as wide as the ``Div`` (bokeh draws it as wide as the text),
so that a box inside it can scroll."""

_SWATCH = (
    "display:inline-block;width:14px;height:10px;margin-right:4px;vertical-align:baseline;"
    "border:1px solid {line};background:{fill}"
)
_ITEM = "display:inline-block;margin:0 14px 2px 0;white-space:nowrap"


def legend_html(items: Sequence[tuple[str, str, str]], *, note: str = "") -> str:
    """Return a legend as HTML: one swatch and label per ``(label, fill, outline)``, wrapping lines.

    ``note`` (plain text) follows the swatches on a line of its own, in grey.
    """
    entries = "".join(
        f'<span style="{_ITEM}"><span style="{_SWATCH.format(fill=fill, line=line)}"></span>'
        f"{html.escape(label)}</span>"
        for label, fill, line in items
    )
    tail = f'<div style="color:#555;font-size:12px">{html.escape(note)}</div>' if note else ""
    return f'<div style="font-size:12px;line-height:1.5">{entries}</div>{tail}'


def scroll_box(inner: str, *, max_height: int | None = None) -> str:
    """Return ``inner`` (HTML) in a box as wide as its parent that scrolls when ``inner`` is wider.

    ``max_height``: also scroll vertically past that many pixels.
    """
    tall = f"max-height:{max_height}px;overflow-y:auto;" if max_height is not None else ""
    return f'<div style="max-width:100%;overflow-x:auto;{tall}">{inner}</div>'


def html_box(text: str, *, name: str | None = None) -> Any:
    """Return a ``Div`` of HTML as wide as its parent, its content too (:data:`BLOCK_CSS`)."""
    from bokeh.models.widgets import Div

    return Div(text=text, sizing_mode=STRETCH, stylesheets=[BLOCK_CSS], name=name)


def wrap_styles() -> dict[str, str]:
    """Return the CSS of a row whose children wrap onto the next line when they do not fit side by side."""
    return {"flex-wrap": "wrap", "row-gap": "12px", "column-gap": "24px"}


def side_by_side(first: Any, second: Any, *, min_width: int = MIN_SIDE_WIDTH) -> Any:
    """Return a bokeh row of two boxes, each at least ``min_width`` wide, that wraps in a narrow window.

    The second box goes under the first when the row is narrower than both.
    """
    from bokeh.layouts import row

    for box in (first, second):
        box.min_width = min_width
    return row(first, second, sizing_mode=STRETCH, styles=wrap_styles())
