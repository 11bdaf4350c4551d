"""The report of Flight Recorder dumps: every process group's progress per rank, the stopped ranks in red.

Takes the Flight Recorder report (:class:`timeline.results.flight_recorder.FlightReport`) and lays
it out, reading its attributes, never recomputing a figure:

- :func:`progress_cells` (plain data, no bokeh, tested as data): one cell per process group and
  member rank: its state, colour, and its last enqueued, started and completed sequence numbers,
  the number of operations it has not completed, where it stopped, on whom it waits and how far it
  is behind its peers (the report's ``behind``); one row of cells per group, in the report's
  ``order`` (groups where something did not finish first), one column per rank;
- :func:`build_flight_page`: the verdict and findings above a grid of those cells (rank across,
  group down), a hover per cell, a legend of the states; :func:`render_flight_html` and
  :func:`write_flight_report` make it a standalone HTML file (``timeline report DUMPS -o FILE``),
  :mod:`timeline.report.server` serves it (``timeline serve DUMPS``).

bokeh is imported inside the functions that draw, so importing this module costs nothing.
"""

from __future__ import annotations

import html
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from timeline.results.flight_recorder import FlightGroup, FlightReport

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


def group_label(group: FlightGroup) -> str:
    """Return a group's label in the picture: ``74 · expert_model_parallel``."""
    return f"{group.group} · {group.dimension}" if group.dimension else group.group


def _seq(value: int | None) -> str:
    return "-" if value is None else f"#{value}"


def progress_cells(report: FlightReport) -> dict[str, list[str | int]]:
    """Return the cells of the picture: one per group and member rank, groups that did not finish first.

    Columns: ``group`` (the label, :func:`group_label`), ``rank``, ``state``, ``colour``
    (:data:`STATE_COLOURS`), ``enqueued``, ``started``, ``completed`` (``#N`` or ``-``),
    ``outstanding``, ``stop_seq``, ``stop_op``, ``waits_on`` (texts), ``behind`` (the report's: how
    many collectives its peers completed that it did not), ``label`` (``behind`` as drawn in the
    cell, empty for 0) and ``label_colour``, and ``order`` (the group's row, from 0 at the top: the
    report's group ``order``).
    """
    groups = {g.group: g for g in report.groups}
    cells: dict[str, list[str | int]] = {key: [] for key in _CELL_COLUMNS}
    for member in sorted(report.progress, key=lambda m: (groups[m.group].order, m.rank)):
        values: dict[str, str | int] = {
            "group": group_label(groups[member.group]),
            "rank": member.rank,
            "state": member.state,
            "colour": STATE_COLOURS[member.state],
            "enqueued": _seq(member.last_enqueued),
            "started": _seq(member.last_started),
            "completed": _seq(member.last_completed),
            "outstanding": str(member.outstanding),
            "stop_seq": _seq(member.stop_seq),
            "stop_op": member.stop_op or "-",
            "waits_on": ", ".join(str(r) for r in member.waits_on or []) or "-",
            "behind": member.behind,
            "label": str(member.behind) if member.behind else "",
            "label_colour": "#FFFFFF" if member.state in ("not_entered", "not_completed") else "#000000",
            "order": groups[member.group].order,
        }
        for key, value in values.items():
            cells[key].append(value)
    return cells


def _findings_html(report: FlightReport) -> str:
    """Return the verdict and findings as HTML (escaped)."""
    parts = [f"<h2>Why the job stopped</h2><p><b>Verdict:</b> {html.escape(report.verdict.summary)}</p>"]
    for i, finding in enumerate(report.findings, 1):
        ranks = ", ".join(str(r) for r in finding.ranks) if finding.ranks is not None else "unknown"
        parts.append(
            f"<p><b>{i}. {html.escape(finding.cause)}</b> (ranks {html.escape(ranks)}): "
            f"{html.escape(finding.summary)}<br><b>Fix:</b> {html.escape(finding.fix)}</p>"
        )
    dumps = report.dumps
    parts.append(
        f"<p>{len(dumps.ranks)} dumps, version {html.escape(', '.join(dumps.versions) or 'unknown')}, "
        f"{dumps.entries:,} entries; timing {'on' if dumps.timing else 'off'}.</p>"
    )
    return "".join(parts)


def build_flight_page(report: FlightReport) -> Any:
    """Return the page of the dumps (a bokeh layout): verdict, findings, the progress grid, its legend.

    Everything is as wide as the window; the legend is below the grid, never over a cell.
    """
    from bokeh.layouts import column
    from bokeh.models import ColumnDataSource, FactorRange, HoverTool, Range1d
    from bokeh.models.widgets import Div
    from bokeh.plotting import figure

    from timeline.report.layout import MIN_PLOT_WIDTH, STRETCH

    cells = progress_cells(report)
    groups = [group_label(g) for g in sorted(report.groups, key=attrgetter("order"))]
    ranks = sorted({m.rank for m in report.progress})
    source = ColumnDataSource(cells, name="flight_cells")
    height = max(200, 28 * len(groups) + 120)
    plot = figure(
        title="Progress per process group and rank (red: stopped; yellow and orange: waiting)",
        x_range=Range1d(start=min(ranks, default=0) - 0.5, end=max(ranks, default=0) + 0.5),
        y_range=FactorRange(factors=list(reversed(groups))),
        sizing_mode=STRETCH,
        min_width=MIN_PLOT_WIDTH,
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
    _add_state_legend(plot, report, ranks=ranks, groups=groups)
    return column(
        Div(text=_findings_html(report), sizing_mode=STRETCH, name="flight_findings"),
        plot,
        sizing_mode=STRETCH,
        name="flight_page",
    )


def _add_state_legend(plot: Any, report: FlightReport, *, ranks: list[int], groups: list[str]) -> None:
    """Add the legend of the states present below ``plot``: a swatch of each state's colour."""
    from bokeh.models.annotations import Legend, LegendItem

    states = {m.state for m in report.progress}
    present = [s for s in STATE_COLOURS if s in states]
    items = []
    for state in present:
        at_x, at_y = [ranks[0] if ranks else 0], [groups[0] if groups else ""]
        swatch: Any = plot.scatter(
            x=at_x, y=at_y, marker="square", size=0, fill_color=STATE_COLOURS[state], line_color="#666666"
        )
        items.append(LegendItem(label=state.replace("_", " "), renderers=[swatch]))
    plot.add_layout(Legend(items=items, orientation="horizontal", location="top_left"), "below")


def render_flight_html(report: FlightReport, *, title: str = "timeline: Flight Recorder dumps") -> str:
    """Return the page of the dumps as one standalone HTML document (bokeh inlined: opens offline)."""
    from bokeh.document import Document
    from bokeh.embed import file_html

    from timeline.report.export import offline_resources

    document = Document()
    document.add_root(build_flight_page(report))
    return str(file_html(document, resources=offline_resources(), title=title))


def write_flight_report(report: FlightReport, path: str | Path) -> Path:
    """Write the page of the dumps to ``path`` as standalone HTML (``output.write_html``)."""
    from timeline.report.output import write_html

    return write_html(render_flight_html(report), path)
