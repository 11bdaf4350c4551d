"""The dashboard: the Gantt of one iteration, its selector and rank filter, the breakdowns and tables.

Takes :class:`~timeline.report.data.ReportData` and gives one bokeh layout, in one of two modes:

- ``live`` (for :mod:`timeline.report.server`): changing the iteration or the ranks, and every
  zoom or pan of the Gantt, runs a Python callback that re-queries the polars segments for the
  visible window (:func:`~timeline.report.data.view_bars`) and swaps the bars in place;
- ``standalone`` (for :mod:`timeline.report.export`): no Python runs after export, so each
  iteration's bars are embedded at a few resolutions (:func:`~timeline.report.data.view_levels`:
  ``pixels × 8**k`` bins, the last level unmerged) and a ``CustomJS`` callback draws the coarsest
  level that is still finer than a pixel, for the visible window only.

The dashboard opens with the findings panel (:mod:`timeline.report.findings_view`) when the data
holds a diagnosis: selecting a finding selects its iteration and ranks. In both modes a click on a
breakdown bar or heat-map cell selects its iteration in the selector, and the summary table follows
the selector; the page is never reloaded. Below, for two ranks or
more, the collectives section (:mod:`timeline.report.collectives_view`). When the data holds a
what-if sweep, all this is the "Gantt" tab and a "What-if" tab shows the predicted scaling factor
against bandwidth (:mod:`timeline.report.whatif_view`).

Every box is as wide as the window (:mod:`timeline.report.layout`); a job of more than
:data:`MAX_SHOWN_RANKS` ranks opens on that many of them (:func:`default_ranks`).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import polars as pl
from bokeh.document import Document
from bokeh.events import DocumentReady, RangesUpdate, Reset
from bokeh.layouts import column, row
from bokeh.models import ColumnDataSource, CustomJS, TabPanel, Tabs
from bokeh.models.widgets import Div, MultiChoice, Select

from timeline.report.breakdown import (
    Breakdown,
    build_breakdown,
    build_collectives_table,
    build_heatmap,
    build_summary_table,
    summary_tables,
    view_rows,
)
from timeline.report.collectives_view import build_collectives_section
from timeline.report.compare_view import build_compare_panel
from timeline.report.data import (
    STYLES,
    ReportData,
    default_view,
    format_ns,
    view_bars,
    view_levels,
    whatif_of,
)
from timeline.report.findings_view import build_findings_panel
from timeline.report.gantt import (
    BAR_HEIGHT,
    CHROME_PX,
    LANE_PX,
    MIN_HEIGHT,
    PIXELS,
    GanttPlot,
    build_gantt,
    gantt_columns,
    gantt_legend,
    gantt_title,
    lane_factors,
    lane_height,
)
from timeline.report.layout import STRETCH, TABLE_WIDTH, side_by_side
from timeline.report.whatif_view import build_whatif_panel
from timeline.results.summary import worst_iteration

__all__ = ["MAX_SHOWN_RANKS", "Dashboard", "Mode", "build_dashboard", "default_ranks"]

Mode = Literal["live", "standalone"]

MAX_SHOWN_RANKS = 16
"""The most ranks the Gantt shows when the report opens (more are picked in the rank filter)."""

# Shared by the selector and the breakdown: show the selected view's table and select its bars.
_FOLLOW_VIEW_JS = """
const v = Number(select.value);
const rows = [];
const views = breakdown.data.view;
for (let i = 0; i < views.length; i++) { if (views[i] === v) rows.push(i); }
summary.text = tables[v];
const current = breakdown.selected.indices;
if (current.length !== rows.length || current.some((r, i) => r !== rows[i])) {
  breakdown.selected.indices = rows;
}
"""

# A click on a bar or a cell (a source with a "view" column) selects that view.
_TAP_JS = """
const picked = cb_obj.indices;
if (picked.length === 0) return;
const v = String(source.data.view[picked[0]]);
if (select.value !== v) select.value = v;
"""

# Standalone refinement: draw, from the embedded levels of the selected view, the coarsest level
# whose bins are at most one pixel of the visible range, for the visible range and ranks only.
_REFRESH_JS = r"""
const v = Number(select.value);
const meta = views[v];
if (reset) {
  x_range.bounds = [0, meta.span];
  x_range.setv({start: 0, end: meta.span});
  title.text = meta.title;
}
const chosen = new Set(ranks.value.map(Number));
const lo_ms = x_range.start, hi_ms = x_range.end;
const width = Math.max(hi_ms - lo_ms, 1e-9);
const need = width / pixels;
const bins = meta.bins;
let level = bins.length - 1;
for (let k = 0; k < bins.length; k++) { if (bins[k] <= need * 1.001) { level = k; break; } }
const lo = lo_ms - width / 2, hi = hi_ms + width / 2;
const d = stores[v].data;
const out = {y: [], left: [], right: [], style: [], name: [], collective: [], count: [], dur_us: [],
             exposed_us: [], bytes: [], rank: [], height: []};
for (let i = 0; i < d.level.length; i++) {
  if (d.level[i] !== level || d.right[i] < lo || d.left[i] > hi) continue;
  if (!chosen.has(lane_rank[d.lane[i]])) continue;
  const n = d.count[i];
  const name = names[d.name[i]];
  out.y.push(lanes[d.lane[i]]);
  out.left.push(d.left[i]);
  out.right.push(d.right[i]);
  out.style.push(styles[d.style[i]]);
  out.name.push(n > 1 ? String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ",") + " events, mostly " + name : name);
  out.collective.push(d.collective[i] < 0 ? "-" : collectives[d.collective[i]]);
  out.count.push(n);
  out.dur_us.push(d.dur_us[i]);
  out.exposed_us.push(d.exposed_us[i]);
  out.bytes.push(d.bytes[i]);
  out.rank.push(lane_rank[d.lane[i]]);
  // as gantt.bar_height: merged events thinner by how sparsely they cover the bar; exposed never thinned
  const coverage = Math.min(1, Math.max(0, d.dur_us[i] / Math.max((d.right[i] - d.left[i]) * 1000, 0.001)));
  const thin = n > 1 && styles[d.style[i]] !== "exposed communication";
  out.height.push(thin ? bar_height * (min_height + (1 - min_height) * coverage) : bar_height);
}
source.data = out;
if (reset || cb_obj === ranks) {
  const factors = [];
  for (let i = lanes.length - 1; i >= 0; i--) { if (chosen.has(lane_rank[i])) factors.push(lanes[i]); }
  y_range.factors = factors;
  fig.height = chrome + lane_px * Math.max(factors.length, 4);
}
"""


@dataclass(frozen=True)
class Dashboard:
    """The dashboard layout and the models tests and callers reach into.

    Attributes
    ----------
    layout
        The bokeh layout (``name="dashboard"``), or, when the data holds a what-if sweep or a
        comparison, tabs (``name="report_tabs"``): "Gantt" holding that layout, "What-if" the
        :func:`~timeline.report.whatif_view.build_whatif_panel`, "Compare" the
        :func:`~timeline.report.compare_view.build_compare_panel`.
    gantt
        The Gantt chart.
    select
        The iteration selector (``name="iteration_select"``); values are view ids as strings.
    ranks
        The rank filter (``name="rank_filter"``); values are ranks as strings.
    on_ready
        Standalone mode: the callback that draws the first bars, to run on ``DocumentReady``
        (:meth:`document` does); None in live mode.
    """

    layout: Any
    gantt: GanttPlot
    select: Select
    ranks: MultiChoice
    on_ready: CustomJS | None = None

    def document(self) -> Document:
        """Return a new bokeh document holding the dashboard, its first draw wired to ``DocumentReady``."""
        doc = Document()
        doc.add_root(self.layout)
        if self.on_ready is not None:
            doc.js_on_event(DocumentReady, self.on_ready)
        return doc


def _header(data: ReportData, files: int | None, *, shown: int | None) -> str:
    """Return the header's HTML; ``shown``: how many ranks :func:`default_ranks` picked (None: none)."""
    modes = sorted(set(data.lanes.get_column("mode").to_list()))
    ranks = data.lanes.get_column("rank").n_unique()
    parts = [f"<b>timeline report</b>: {ranks} rank(s), measured on {', '.join(modes) or 'nothing'}"]
    if files is not None:
        parts[0] = (
            f"<b>timeline report</b>: {files} file(s), {ranks} rank(s), measured on {', '.join(modes) or '-'}"
        )
    worst = worst_iteration(data.overlap.iterations)
    if worst is not None and worst.exposed_comm_ns:
        where = f"rank {worst.rank}" + (
            f", iteration {worst.iteration}" if worst.iteration is not None else " (whole trace)"
        )
        share = "" if worst.exposed_comm_ratio is None else f", {100 * worst.exposed_comm_ratio:.1f}%"
        parts.append(
            f"worst: {where}: {format_ns(worst.exposed_comm_ns)} of exposed communication"
            f"{share} of its {format_ns(worst.step_ns)} step"
        )
    if "horovod" in modes:
        parts.append(
            "Horovod timeline: communication phases only, no compute events; exposed vs hidden needs the "
            "framework trace of the same run"
        )
    if shown is not None and shown < ranks:
        parts.append(
            f"the Gantt shows {shown} of the {ranks} ranks: the {shown // 2} with the most exposed "
            f"communication in the iteration shown first and the {shown - shown // 2} with the least "
            "(the others wait for them); pick others in Ranks"
        )
    if data.omitted.height:
        counts = ", ".join(f"{n:,} {kind}" for kind, n in data.omitted.iter_rows())
        parts.append(f"not drawn in the Gantt: {counts}")
    return "<br>".join(
        html.escape(p).replace("&lt;b&gt;", "<b>").replace("&lt;/b&gt;", "</b>") for p in parts
    )


def _stores(data: ReportData) -> tuple[list[Any], list[dict[str, Any]], list[str], list[str]]:
    """Embed every view's levels as compact typed columns, names as codes into shared tables."""
    per_view = [
        (view, *view_levels(data, view, pixels=PIXELS)) for view in data.views.get_column("view").to_list()
    ]
    everything = pl.concat([levels.select("name", "collective") for _, levels, _ in per_view])
    names = everything.get_column("name").drop_nulls().unique(maintain_order=True).to_list()
    collectives = everything.get_column("collective").drop_nulls().unique(maintain_order=True).to_list()

    def codes(column: str, table: list[str]) -> pl.Expr:
        return pl.col(column).cast(pl.Enum(table)).to_physical().cast(pl.Int32).fill_null(-1)

    stores: list[Any] = []
    meta: list[dict[str, Any]] = []
    for view, levels, bins in per_view:
        origin = data.views.item(view, "start_ns")
        span = max((data.views.item(view, "end_ns") - origin) / 1e6, 1e-6)
        frame = levels.select(
            level=pl.col("level").cast(pl.Int8),
            lane=pl.col("lane_id").cast(pl.Int16),
            style=pl.col("style").to_physical().cast(pl.UInt8),
            name=codes("name", names),
            collective=codes("collective", collectives).cast(pl.Int16),
            left=(pl.col("start_ns") - origin) / 1e6,
            right=(pl.col("end_ns") - origin) / 1e6,
            count=pl.col("count").cast(pl.Int32),
            dur_us=(pl.col("dur_ns") / 1e3).cast(pl.Float32),
            exposed_us=(pl.col("exposed_ns") / 1e3).cast(pl.Float32).fill_null(float("nan")),
            bytes=pl.col("in_bytes").cast(pl.Float64).fill_null(float("nan")),
        )
        columns = {c: frame.get_column(c).to_numpy() for c in frame.columns}
        stores.append(ColumnDataSource(data=columns, name=f"gantt_levels_{view}"))
        meta.append({"span": span, "bins": [b / 1e6 for b in bins], "title": gantt_title(data, view)})
    return stores, meta, names, collectives


def _wire_standalone(data: ReportData, gantt: GanttPlot, select: Select, ranks: MultiChoice) -> CustomJS:
    stores, meta, names, collectives = _stores(data)
    lanes = [list(f) for f in reversed(lane_factors(data))]
    args = {
        "select": select,
        "ranks": ranks,
        "source": gantt.source,
        "fig": gantt.figure,
        "title": gantt.title,
        "x_range": gantt.x_range,
        "y_range": gantt.y_range,
        "stores": stores,
        "views": meta,
        "names": names,
        "collectives": collectives,
        "styles": list(STYLES),
        "lanes": lanes,
        "lane_rank": data.lanes.get_column("rank").to_list(),
        "pixels": PIXELS,
        "chrome": CHROME_PX,
        "lane_px": LANE_PX,
        "bar_height": BAR_HEIGHT,
        "min_height": MIN_HEIGHT,
    }
    reset = CustomJS(args={**args, "reset": True}, code=_REFRESH_JS)
    refine = CustomJS(args={**args, "reset": False}, code=_REFRESH_JS)
    select.js_on_change("value", reset)
    ranks.js_on_change("value", refine)
    gantt.figure.js_on_event(RangesUpdate, refine)
    gantt.figure.js_on_event(Reset, refine)
    return refine


def _wire_live(data: ReportData, gantt: GanttPlot, select: Select, ranks: MultiChoice) -> None:
    state: dict[str, Any] = {"view": int(select.value), "ranks": [int(r) for r in ranks.value]}

    def redraw(x0_ms: float | None = None, x1_ms: float | None = None) -> None:
        view = state["view"]
        origin = data.views.item(view, "start_ns")
        start = end = None
        if x0_ms is not None and x1_ms is not None:
            width = x1_ms - x0_ms
            start = origin + int((x0_ms - width / 2) * 1e6)
            end = origin + int((x1_ms + width / 2) * 1e6)
        bars = view_bars(
            data,
            view,
            ranks=state["ranks"],
            start_ns=start,
            end_ns=end,
            pixels=PIXELS if start is None else 2 * PIXELS,
        )
        gantt.source.data = gantt_columns(bars, data, origin_ns=origin)

    def on_view(_attr: str, _old: str, new: str) -> None:
        state["view"] = int(new)
        span = max(
            (data.views.item(state["view"], "end_ns") - data.views.item(state["view"], "start_ns")) / 1e6,
            1e-6,
        )
        gantt.x_range.bounds = (0.0, span)
        gantt.x_range.update(start=0.0, end=span)
        gantt.title.text = gantt_title(data, state["view"])
        redraw()

    def on_ranks(_attr: str, _old: list[str], new: list[str]) -> None:
        state["ranks"] = [int(r) for r in new]
        factors = lane_factors(data, ranks=state["ranks"])
        gantt.y_range.factors = factors
        gantt.figure.height = lane_height(len(factors))
        start, end = gantt.x_range.start, gantt.x_range.end
        if isinstance(start, int | float) and isinstance(end, int | float):
            redraw(float(start), float(end))
        else:
            redraw()

    def on_ranges(event: RangesUpdate) -> None:
        if event.x0 is not None and event.x1 is not None:
            redraw(float(event.x0), float(event.x1))

    def on_reset(_event: Reset) -> None:
        redraw()

    select.on_change("value", on_view)
    ranks.on_change("value", on_ranks)
    gantt.figure.on_event(RangesUpdate, on_ranges)
    gantt.figure.on_event(Reset, on_reset)


def build_dashboard(
    data: ReportData,
    *,
    mode: Mode = "standalone",
    files: int | None = None,
    view: int | None = None,
    ranks: Sequence[int] | None = None,
) -> Dashboard:
    """Return the dashboard of a trace: Gantt, iteration selector, rank filter, breakdowns, tables.

    Parameters
    ----------
    data
        The prepared report data.
    mode
        ``live``: Python callbacks (a bokeh server document); ``standalone``: everything embedded,
        JavaScript callbacks.
    files
        How many files the trace came from (for the header).
    view
        The iteration to show first (default: the slowest).
    ranks
        The ranks to show first (default: :func:`default_ranks`, all of them up to
        :data:`MAX_SHOWN_RANKS`).

    Returns
    -------
    Dashboard
        The layout and its models; nothing is shown. Every box stretches to the window's width
        (:mod:`timeline.report.layout`): the header, the findings, the controls, the Gantt's legend
        and the Gantt; the breakdown beside the heat map and the per-rank table beside the top
        collectives, each pair wrapping into one column in a narrow window; the collectives section.
    """
    first = default_view(data) if view is None else view
    all_ranks = data.lanes.get_column("rank").unique().sort().to_list()
    shown = default_ranks(data, first) if ranks is None else [r for r in all_ranks if r in set(ranks)]
    # Standalone: the browser fills the bars from the embedded levels when the document is ready.
    gantt = build_gantt(data, first, ranks=shown, pixels=PIXELS, with_bars=mode == "live")
    select, rank_filter = _view_controls(data, first, shown, all_ranks)
    breakdown = build_breakdown(data)
    heatmap = build_heatmap(data)
    summary = build_summary_table(data, first)
    _follow_selection(data, first, select, breakdown, heatmap, summary)

    on_ready = None
    if data.views.height:
        if mode == "live":
            _wire_live(data, gantt, select, rank_filter)
        else:
            on_ready = _wire_standalone(data, gantt, select, rank_filter)

    header = _header(data, files, shown=len(shown) if ranks is None else None)
    gantt_tab = _gantt_tab(data, gantt, (select, rank_filter), breakdown, (heatmap, summary), header)
    layout = _with_tabs(data, gantt_tab)
    return Dashboard(layout=layout, gantt=gantt, select=select, ranks=rank_filter, on_ready=on_ready)


def _with_tabs(data: ReportData, gantt_tab: Any) -> Any:
    """Return the Gantt's tab alone, or in tabs with the what-if and compare panels when there are any."""
    # Tabs when there is more than the Gantt: the predicted scaling factor vs bandwidth, BASE vs this run.
    panels = [TabPanel(child=gantt_tab, title="Gantt")]
    whatif = whatif_of(data)  # last: a helper process may still be computing it
    if whatif is not None:
        panels.append(TabPanel(child=build_whatif_panel(whatif), title="What-if"))
    if data.compare is not None:
        panels.append(TabPanel(child=build_compare_panel(data.compare), title="Compare"))
    if len(panels) == 1:
        return gantt_tab
    return Tabs(tabs=panels, sizing_mode=STRETCH, name="report_tabs")


def _gantt_tab(
    data: ReportData,
    gantt: GanttPlot,
    controls: tuple[Select, MultiChoice],
    breakdown: Breakdown,
    views: tuple[Any, Div],
    header: str,
) -> Any:
    """Lay out the Gantt tab, top to bottom, every box as wide as the window.

    The header, the findings, the controls, the Gantt's legend and the Gantt; the breakdown beside
    the heat map (``views[0]``); the per-rank table (``views[1]``) beside the top collectives where
    both fit, else one under the other; the collectives section.
    """
    select, ranks = controls
    heatmap, summary = views
    return column(
        Div(text=header, sizing_mode=STRETCH, name="header"),
        *_findings(data, select, ranks),
        row(select, ranks, sizing_mode=STRETCH),
        Div(text=gantt_legend(data), sizing_mode=STRETCH, name="gantt_legend"),
        gantt.figure,
        side_by_side(column(breakdown.legend, breakdown.figure, sizing_mode=STRETCH), heatmap),
        side_by_side(
            column(
                Div(text="<b>Per rank, this iteration</b>", sizing_mode=STRETCH), summary, sizing_mode=STRETCH
            ),
            column(
                Div(text="<b>Top exposed collectives (all ranks, whole trace)</b>", sizing_mode=STRETCH),
                build_collectives_table(data),
                sizing_mode=STRETCH,
            ),
            min_width=TABLE_WIDTH,
        ),
        *_collectives(data, select),
        sizing_mode=STRETCH,
        name="dashboard",
    )


def default_ranks(data: ReportData, view: int) -> list[int]:
    """Return the ranks the Gantt shows first: all of them, or :data:`MAX_SHOWN_RANKS` of a larger job.

    Of more ranks, half are those with the most exposed communication in ``view`` (they wait the
    longest) and half those with the least (the others wait for them), ties to the lower rank;
    sorted by rank.
    """
    ranks: list[int] = data.lanes.get_column("rank").unique().sort().to_list()
    if len(ranks) <= MAX_SHOWN_RANKS:
        return ranks
    exposed = (
        data.breakdown.filter(pl.col("view") == view)
        .select("rank", "exposed_comm_ns")
        .join(pl.DataFrame({"rank": ranks}, schema={"rank": pl.Int32}), on="rank", how="right")
        .with_columns(pl.col("exposed_comm_ns").fill_null(0))
    )
    half = MAX_SHOWN_RANKS // 2
    most = exposed.sort(["exposed_comm_ns", "rank"], descending=[True, False]).head(half)
    least = exposed.join(most, on="rank", how="anti").sort(["exposed_comm_ns", "rank"]).head(half)
    return sorted(pl.concat([most, least]).get_column("rank").to_list())


def _findings(data: ReportData, select: Select, ranks: MultiChoice) -> list[Any]:
    """Return the findings panel (the verdict and each finding), or nothing without a diagnosis."""
    if data.diagnosis is None:
        return []
    return [build_findings_panel(data.diagnosis, data.views, select=select, ranks=ranks)]


def _collectives(data: ReportData, select: Select) -> list[Any]:
    """Return the collectives section (matched collectives, wait vs transfer, wait heat map), if any."""
    section = build_collectives_section(data.collectives_report, data.views, select=select)
    return [] if section is None else [section.layout]


def _view_controls(
    data: ReportData, first: int, shown: list[int], all_ranks: list[int]
) -> tuple[Select, MultiChoice]:
    """Build the iteration selector (on ``first``) and the rank filter (``shown`` of ``all_ranks``)."""
    options: list[str | tuple[Any, str]] = [
        (str(v), label) for v, label in data.views.select("view", "label").iter_rows()
    ]
    select = Select(
        title="Iteration",
        value=str(first),
        options=options or [("0", "none")],
        width=420,
        name="iteration_select",
    )
    rank_filter = MultiChoice(
        title="Ranks",
        value=[str(r) for r in shown],
        options=[str(r) for r in all_ranks],
        sizing_mode=STRETCH,
        min_width=300,
        name="rank_filter",
    )
    return select, rank_filter


def _follow_selection(
    data: ReportData, first: int, select: Select, breakdown: Breakdown, heatmap: Any, summary: Div
) -> None:
    """Keep the breakdown, heat map and summary on the selected iteration, and select on a tap.

    The summary table and the breakdown's selection follow ``select``; tapping a breakdown bar or a
    heat map cell selects its iteration.
    """
    follow = CustomJS(
        args={
            "select": select,
            "breakdown": breakdown.source,
            "summary": summary,
            "tables": summary_tables(data),
        },
        code=_FOLLOW_VIEW_JS,
    )
    select.js_on_change("value", follow)
    breakdown.source.selected.indices = view_rows(data, first)
    breakdown.source.selected.js_on_change(
        "indices", CustomJS(args={"select": select, "source": breakdown.source}, code=_TAP_JS)
    )
    for renderer in heatmap.renderers:
        cells = renderer.data_source
        if "view" in cells.data:
            cells.selected.js_on_change(
                "indices", CustomJS(args={"select": select, "source": cells}, code=_TAP_JS)
            )
