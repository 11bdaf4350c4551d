"""The report of Flight Recorder dumps: every process group's progress per rank, the stopped ranks in red.

Takes the Flight Recorder report (:func:`timeline.results.flight_recorder.build_flight_report`) and
lays it out, never recomputing a figure:

- :func:`progress_cells` (plain data, no bokeh, tested as data): one cell per process group and
  member rank: its state, colour, and its last enqueued, started and completed sequence numbers,
  the number of operations it has not completed, where it stopped and on whom it waits; one row of
  cells per group (groups where something did not finish first), one column per rank;
- :func:`build_flight_page`: the verdict and findings above a grid of those cells (rank across,
  group down), a hover per cell, a legend of the states; :func:`render_flight_html` and
  :func:`write_flight_report` make it a standalone HTML file (``timeline report DUMPS -o FILE``),
  :mod:`timeline.report.server` serves it (``timeline serve DUMPS``).

bokeh is imported inside the functions that draw, so importing this module costs nothing.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

__all__ = [
    "STATE_COLOURS",
    "build_flight_page",
    "group_label",
    "progress_cells",
    "render_flight_html",
    "write_flight_report",
]

STATE_COLOURS = {
    "not_entered": "#D62728",
    "not_completed": "#8C1B1B",
    "waiting": "#F2B134",
    "stalled": "#E6804D",
    "outstanding": "#F7D794",
    "idle": "#CFE3C5",
    "no_dump": "#FFFFFF",
    "unknown": "#BBBBBB",
}
"""The colour of each state: the ranks that stopped in reds, those that wait in yellows and oranges."""
_CELL_COLUMNS = (
    "group",
    "rank",
    "state",
    "colour",
    "enqueued",
    "started",
    "completed",
    "outstanding",
    "stop_seq",
    "stop_op",
    "waits_on",
    "behind",
    "label",
    "label_colour",
    "order",
)
_TOOLTIPS = [
    ("group", "@group"),
    ("rank", "@rank"),
    ("state", "@state"),
    ("enqueued", "@enqueued"),
    ("started", "@started"),
    ("completed", "@completed"),
    ("not completed", "@outstanding"),
    ("stopped at", "@stop_seq @stop_op"),
    ("waits on", "@waits_on"),
    ("behind its peers", "@behind collectives"),
]
_GROUP_ORDER = {"stopped": 0, "stalled": 1, "outstanding": 2, "unknown": 3, "idle": 4}


def group_label(group: dict[str, Any]) -> str:
    """Return a group's label in the picture: ``74 · expert_model_parallel``."""
    return f"{group['group']} · {group['dimension']}" if group["dimension"] else str(group["group"])


def _seq(value: int | None) -> str:
    return "-" if value is None else f"#{value}"


def progress_cells(report: dict[str, Any]) -> dict[str, list[Any]]:
    """Return the cells of the picture: one per group and member rank, groups that did not finish first.

    Columns: ``group`` (the label, :func:`group_label`), ``rank``, ``state``, ``colour``
    (:data:`STATE_COLOURS`), ``enqueued``, ``started``, ``completed`` (``#N`` or ``-``),
    ``outstanding``, ``stop_seq``, ``stop_op``, ``waits_on`` (texts), ``behind`` (the group's
    highest ``last_completed`` minus this rank's: how many collectives its peers completed that it
    did not; 0 for point-to-point groups and unknown progress), ``label`` (``behind`` as drawn in the
    cell, empty for 0) and ``label_colour``, and ``order`` (the group's row, from 0 at the top).
    """
    groups = sorted(
        report["groups"],
        key=lambda g: (
            _GROUP_ORDER[g["state"]],
            g["stop_created_ns"] is None,
            g["stop_created_ns"] or 0,
            g["group"],
        ),
    )
    order = {g["group"]: i for i, g in enumerate(groups)}
    labels = {g["group"]: group_label(g) for g in groups}
    top: dict[str, int] = {}
    for row in report["progress"]:
        if row["seq_kind"] != "p2p" and row["last_completed"] is not None:
            top[row["group"]] = max(top.get(row["group"], 0), row["last_completed"])
    cells: dict[str, list[Any]] = {key: [] for key in _CELL_COLUMNS}
    rows = sorted(report["progress"], key=lambda r: (order[r["group"]], r["rank"]))
    for row in rows:
        completed = row["last_completed"]
        behind = 0
        if row["seq_kind"] != "p2p" and completed is not None:
            behind = top[row["group"]] - completed
        values = {
            "group": labels[row["group"]],
            "rank": row["rank"],
            "state": row["state"],
            "colour": STATE_COLOURS[row["state"]],
            "enqueued": _seq(row["last_enqueued"]),
            "started": _seq(row["last_started"]),
            "completed": _seq(completed),
            "outstanding": "-" if row["outstanding"] is None else str(row["outstanding"]),
            "stop_seq": _seq(row["stop_seq"]),
            "stop_op": row["stop_op"] or "-",
            "waits_on": ", ".join(str(r) for r in row["waits_on"] or []) or "-",
            "behind": behind,
            "label": str(behind) if behind else "",
            "label_colour": "#FFFFFF" if row["state"] in ("not_entered", "not_completed") else "#000000",
            "order": order[row["group"]],
        }
        for key, value in values.items():
            cells[key].append(value)
    return cells


def _findings_html(report: dict[str, Any]) -> str:
    """Return the verdict and findings as HTML (escaped)."""
    parts = [
        f"<h2>Why the job stopped</h2><p><b>Verdict:</b> {html.escape(report['verdict']['summary'])}</p>"
    ]
    for i, finding in enumerate(report["findings"], 1):
        ranks = ", ".join(str(r) for r in finding["ranks"]) if finding["ranks"] is not None else "unknown"
        parts.append(
            f"<p><b>{i}. {html.escape(finding['cause'])}</b> (ranks {html.escape(ranks)}): "
            f"{html.escape(finding['summary'])}<br><b>Fix:</b> {html.escape(finding['fix'])}</p>"
        )
    dumps = report["dumps"]
    parts.append(
        f"<p>{len(dumps['ranks'])} dumps, version {html.escape(', '.join(dumps['versions']) or 'unknown')}, "
        f"{dumps['entries']:,} entries; timing {'on' if dumps['timing'] else 'off'}.</p>"
    )
    return "".join(parts)


def build_flight_page(report: dict[str, Any], *, width: int = 1400) -> Any:
    """Return the page of the dumps (a bokeh layout): verdict, findings, the progress grid, its legend."""
    from bokeh.layouts import column
    from bokeh.models import ColumnDataSource, FactorRange, HoverTool, Range1d
    from bokeh.models.annotations import Legend, LegendItem
    from bokeh.models.widgets import Div
    from bokeh.plotting import figure

    cells = progress_cells(report)
    groups = list(dict.fromkeys(cells["group"]))
    ranks = sorted(set(cells["rank"]))
    source = ColumnDataSource(cells, name="flight_cells")
    height = max(200, 28 * len(groups) + 120)
    plot = figure(
        title="Progress per process group and rank (red: stopped; yellow and orange: waiting)",
        x_range=Range1d(start=min(ranks, default=0) - 0.5, end=max(ranks, default=0) + 0.5),
        y_range=FactorRange(factors=list(reversed(groups))),
        width=width,
        height=height,
        tools="pan,wheel_zoom,reset,save",
        toolbar_location="above",
        name="flight_progress",
    )
    cell = plot.rect(
        x="rank", y="group", width=0.92, height=0.85, source=source, fill_color="colour", line_color="#666666"
    )
    plot.text(
        x="rank",
        y="group",
        text="label",
        text_color="label_colour",
        source=source,
        text_align="center",
        text_baseline="middle",
        text_font_size="9pt",
    )
    plot.add_tools(HoverTool(renderers=[cell], tooltips=_TOOLTIPS))
    plot.xaxis.axis_label = "rank (the number in a cell: collectives its peers completed and it did not)"
    plot.xaxis.ticker = ranks
    present = [s for s in STATE_COLOURS if s in set(cells["state"])]
    items = []
    for state in present:
        at_x, at_y = [ranks[0] if ranks else 0], [groups[0] if groups else ""]
        swatch: Any = plot.scatter(
            x=at_x, y=at_y, marker="square", size=0, fill_color=STATE_COLOURS[state], line_color="#666666"
        )
        items.append(LegendItem(label=state.replace("_", " "), renderers=[swatch]))
    plot.add_layout(Legend(items=items, orientation="horizontal", location="top_left"), "below")
    return column(
        Div(text=_findings_html(report), width=width, name="flight_findings"), plot, name="flight_page"
    )


def render_flight_html(report: dict[str, Any], *, title: str = "timeline: Flight Recorder dumps") -> str:
    """Return the page of the dumps as one standalone HTML document (bokeh inlined: opens offline)."""
    from bokeh.document import Document
    from bokeh.embed import file_html

    from timeline.report.export import offline_resources

    document = Document()
    document.add_root(build_flight_page(report))
    return str(file_html(document, resources=offline_resources(), title=title))


def write_flight_report(report: dict[str, Any], path: str | Path) -> Path:
    """Write the page of the dumps to ``path`` as standalone HTML (``export.write_html``)."""
    from timeline.report.export import write_html

    return write_html(render_flight_html(report), path)
