"""What the report draws, prepared with polars: lanes, Gantt segments, exposed pieces, breakdowns.

Takes a :class:`~timeline.run.Run` (every event, its overlap, its one matching of the collectives,
each collective's dimension) and gives a :class:`ReportData` of declared frames; no bokeh here, so
everything the plots show is tested as data.

- A *view* is one iteration across ranks (``ProfilerStep#N``; one ``whole_trace`` view for ranks
  without steps). Each rank's segments are clipped to its own window of the view.
- A *lane* is one row of the Gantt chart: a GPU stream of a GPU rank, a CPU thread of a CPU-only
  rank, a tensor of a Horovod timeline, and, on ranks whose exposure is known, one ``exposed comm``
  lane holding the rank's exposed communication ``comm − (compute − wait)`` (the analyzer's sets and
  formulas, through :func:`~timeline.analysis.intervals.formula_intervals`): its total length in a
  view is exactly the analyzer's ``exposed_comm_ns``.
- Communication segments are drawn pale ("hidden"); the exposed pieces of each communication lane
  (its communication ∩ the rank's exposed intervals) are drawn over them in red.
- :func:`level_of_detail` merges what is shorter than a pixel into one bar per lane and pixel-sized
  bin, which says how many events it holds, so a view with 200,000 events draws a few thousand
  bars and nothing is dropped silently.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import polars as pl

from timeline.analysis.collectives import CollectiveMatch
from timeline.analysis.dimensions import exposure_by
from timeline.analysis.horovod_phases import horovod_wire_sets
from timeline.analysis.intervals import clip_to_windows, formula_intervals
from timeline.analysis.iterations import activity_sets, rank_modes

# The overlap module's set names and formulas: exposed communication is measured exactly as the
# analyzer measures it (comm ∧ ¬working, with working = compute ∧ ¬wait).
from timeline.analysis.overlap import _FORMULAS, _SETS, Overlap
from timeline.report.whatif_view import WhatIfSweep
from timeline.schema import WINDOW, validate
from timeline.units import format_ns

if TYPE_CHECKING:
    from timeline.executors import LocalExecutor
    from timeline.results.collectives import CollectivesReport
    from timeline.results.diagnosis import DiagnosisReport
    from timeline.results.diff import Diff
    from timeline.run import Run

__all__ = [
    "BARS_SCHEMA",
    "BREAKDOWN_PARTS",
    "BREAKDOWN_SCHEMA",
    "LANES_SCHEMA",
    "LANE_ROLES",
    "SEGMENTS_SCHEMA",
    "STYLE",
    "STYLES",
    "VIEWS_SCHEMA",
    "ReportData",
    "bar_label",
    "build_report_data",
    "default_view",
    "format_ns",
    "level_of_detail",
    "prepare_report_data",
    "view_bars",
    "view_levels",
    "whatif_of",
]

STYLES: tuple[str, ...] = (
    "compute",  # GPU kernels that are not communication; CPU operators on CPU-only ranks
    "communication (hidden)",  # communication: the parts not overdrawn in red ran under compute
    "exposed communication",  # communication while no compute ran: the step waited on the network
    "memcpy/memset",  # GPU copies and fills; Horovod fusion-buffer copies
    "sync/wait",  # stream/event synchronisation; CPU ops waiting on a collective
    "negotiation",  # Horovod NEGOTIATE_<OP>
    "queue",  # Horovod QUEUE
    "wait for data",  # Horovod WAIT_FOR_DATA / WAIT_FOR_OTHER_TENSOR_DATA
    "wire (exposure unknown)",  # Horovod NCCL_*/MPI_*/GLOO_* phases: no compute to compare with
    "other",  # Horovod INIT_* and anything else
)
"""How a Gantt bar is drawn (colour and legend entry), in legend order."""
STYLE = pl.Enum(STYLES)

LANE_ROLES: tuple[str, ...] = ("exposed", "comm", "compute", "copy", "other", "tensor")
"""What a lane holds, in the order lanes of one rank are listed."""
_ROLE = pl.Enum(LANE_ROLES)

LANES_SCHEMA = pl.Schema(
    {
        "lane_id": pl.Int32(),
        "rank": pl.Int32(),
        "mode": pl.String(),
        "role": _ROLE,
        "group": pl.String(),  # the outer label of the lane: "rank 3"
        "label": pl.String(),  # the inner label: "stream 24 · comm", "thread 10009 · comm", a tensor name
    }
)
"""One row per Gantt lane, in display order (top to bottom)."""

VIEWS_SCHEMA = pl.Schema(
    {
        "view": pl.Int32(),
        "iteration": pl.Int64(),
        "window": WINDOW,
        "label": pl.String(),
        "start_ns": pl.Int64(),  # the earliest window start of the view's ranks: the Gantt's time origin
        "end_ns": pl.Int64(),  # the latest window end
        "step_ns": pl.Int64(),  # the longest step of the view's ranks
        "exposed_comm_ns": pl.Int64(),  # the most exposed communication of a rank (null: unknown)
        "ranks": pl.UInt32(),
    }
)
"""One row per view (an iteration across ranks), sorted by start."""

_SEGMENT_COLUMNS: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "lane_id": pl.Int32(),
    "style": STYLE,
    "start_ns": pl.Int64(),
    "end_ns": pl.Int64(),
    "dur_ns": pl.Int64(),  # busy time: the duration, or for a merged bar the sum of its events' durations
    "count": pl.Int64(),  # how many events (or exposed pieces) the bar holds
    "name": pl.String(),
    "collective": pl.String(),
    "in_bytes": pl.Int64(),
    "exposed_ns": pl.Int64(),  # exposed time of the collective(s); null where unknown or not communication
    "dimension": pl.String(),  # the mesh dimension of a collective (timeline.analysis.dimensions); else null
}

SEGMENTS_SCHEMA = pl.Schema({"view": pl.Int32(), **_SEGMENT_COLUMNS})
"""One row per drawn event (clipped to its rank's window of the view) or exposed piece."""

BARS_SCHEMA = pl.Schema(_SEGMENT_COLUMNS)
"""What one Gantt draws: segments, with those shorter than a pixel merged (:func:`level_of_detail`)."""

BREAKDOWN_PARTS: tuple[str, ...] = (
    "compute_only_ns",  # compute while no communication ran
    "hidden_comm_ns",  # communication under compute
    "exposed_comm_ns",  # communication while no compute ran
    "other_busy_ns",  # memcpy/memset outside compute and communication
    "idle_ns",
    "unknown_comm_ns",  # Horovod: communication whose exposure the timeline cannot tell
    "unknown_ns",  # Horovod: the rest of the step (compute or idle: not in the timeline)
)
"""The parts a step is split into; on every row they sum to ``step_ns``."""

BREAKDOWN_SCHEMA = pl.Schema(
    {
        "view": pl.Int32(),
        "rank": pl.Int32(),
        "iteration": pl.Int64(),
        "mode": pl.String(),
        "step_ns": pl.Int64(),
        **{part: pl.Int64() for part in BREAKDOWN_PARTS},
    }
)
"""One row per view and rank: the step split into :data:`BREAKDOWN_PARTS`."""

_GPU_KINDS = ("compute", "communication", "memcpy", "memset", "sync")
_CPU_KINDS = ("cpu_op", "communication", "sync")
_HOROVOD_KINDS = ("negotiation", "queue", "wait", "memcpy", "communication", "other")
_EXPOSED = "exposed communication"
_RUN_PIXELS = 8  # the longest run of merged segments, in pixels
_CACHED_BARS = 32  # results of view_bars kept for the next session or zoom


@dataclass(frozen=True)
class ReportData:
    """Everything the report shows, as declared polars frames.

    Attributes
    ----------
    lanes
        :data:`LANES_SCHEMA`, display order.
    views
        :data:`VIEWS_SCHEMA`: the iterations the selector offers.
    segments
        :data:`SEGMENTS_SCHEMA`: every drawn event and exposed piece, clipped to its view.
    breakdown
        :data:`BREAKDOWN_SCHEMA`: each step split into compute, hidden and exposed communication, idle.
    overlap
        The analysis the report was made from.
    omitted
        Columns ``kind`` and ``events``: events the Gantt does not draw (CPU-side events of GPU
        ranks, annotations, instant markers, events outside every iteration window), counted.
    collectives
        The collectives matched across ranks
        (:func:`~timeline.analysis.collectives.match_collectives`, with the overlap analysis'
        windows); None for fewer than two measured ranks (one rank, Horovod timelines).
    collectives_report
        What the collectives section draws: the run's collectives report
        (:func:`~timeline.results.collectives.build_collectives_report`, what ``timeline
        collectives`` prints, without its per-rank rows); None where ``collectives`` is None or no
        profiler trace holds communication.
    whatif
        The what-if sweep of the dashboard's "What-if" tab
        (:func:`~timeline.report.whatif_view.whatif_sweep`), or its future while a helper process
        computes it (:func:`~timeline.report.whatif_view.submit_whatif_sweep`: the dashboard waits
        for it last, :func:`whatif_of`); None: no such tab.
    compare
        ``timeline diff BASE NEW``'s result (:class:`~timeline.results.diff.Diff`, NEW this
        trace's run) shown in the "Compare" tab (``--compare BASE``); None: no such tab.
    diagnosis
        The diagnosis (:class:`~timeline.results.diagnosis.DiagnosisReport`) the report opens with
        (:mod:`timeline.report.findings_view`); None: no findings panel.
    dimensions
        The communication per dimension × iteration × rank
        (:func:`~timeline.analysis.dimensions.exposure_by`) with the ``view`` of each row; None when
        the traces know no process group.
    bars_cache
        The last results of :func:`view_bars` (every browser session of ``timeline serve`` opens
        on the same view): not part of the data.
    """

    lanes: pl.DataFrame
    views: pl.DataFrame
    segments: pl.DataFrame
    breakdown: pl.DataFrame
    overlap: Overlap
    omitted: pl.DataFrame
    collectives: CollectiveMatch | None = None
    collectives_report: CollectivesReport | None = None
    whatif: WhatIfSweep | Future[WhatIfSweep] | None = None
    compare: Diff | None = None
    diagnosis: DiagnosisReport | None = None
    dimensions: pl.DataFrame | None = None
    bars_cache: dict[tuple[object, ...], pl.DataFrame] = field(
        default_factory=dict, repr=False, compare=False
    )


def _exposed(s: Mapping[str, pl.Expr]) -> pl.Expr:
    """Exposed communication: communication while no compute ran (the analyzer's formulas)."""
    return _FORMULAS["comm_ns"](s) & ~_FORMULAS["compute_ns"](s)


def _views(overlap: Overlap) -> pl.DataFrame:
    """One view per iteration number (ranks without steps share one ``whole_trace`` view)."""
    rows = overlap.iterations
    if rows.height == 0:
        return pl.DataFrame(schema=VIEWS_SCHEMA)
    grouped = (
        rows.group_by("iteration", "window")
        .agg(
            start_ns=pl.col("start_ns").min(),
            end_ns=pl.col("end_ns").max(),
            step_ns=pl.col("step_ns").max(),
            exposed_comm_ns=pl.col("exposed_comm_ns").max(),
            ranks=pl.col("rank").n_unique(),
        )
        .sort("start_ns", "iteration", nulls_last=True)
        .with_columns(view=pl.int_range(pl.len(), dtype=pl.Int32))
    )
    slowest = grouped.get_column("step_ns").arg_max()
    labels = []
    for i, row in enumerate(grouped.iter_rows(named=True)):
        whole = row["iteration"] is None
        name = "whole trace · span" if whole else f"iteration {row['iteration']} · step"
        label = f"{name} {format_ns(row['step_ns'])}"
        if row["exposed_comm_ns"] is not None:
            label += f" · exposed {format_ns(row['exposed_comm_ns'])}"
        if i == slowest and grouped.height > 1:
            label += " (slowest)"
        labels.append(label)
    return validate(
        grouped.with_columns(label=pl.Series(labels, dtype=pl.String)), VIEWS_SCHEMA, what="views"
    )


def _keyed_windows(overlap: Overlap, views: pl.DataFrame, drawn: pl.DataFrame) -> pl.DataFrame:
    """Return the iteration windows with their view: ``rank``, ``window_id`` (the view), bounds.

    A ``whole_trace`` window spans the rank's measured activity; for the Gantt it is widened to
    every drawn event of the rank (a Horovod negotiation starts long before the first wire phase).
    """
    extents = drawn.group_by("rank").agg(_first=pl.col("start_ns").min(), _last=pl.col("end_ns").max())
    whole = pl.col("window") == "whole_trace"
    return (
        overlap.windows.join(
            views.select("iteration", "window", "view"),
            on=["iteration", "window"],
            how="inner",
            nulls_equal=True,
        )
        .join(extents, on="rank", how="left")
        .select(
            "rank",
            window_id=pl.col("view"),
            w_start=pl.when(whole)
            .then(pl.min_horizontal("start_ns", "_first"))
            .otherwise(pl.col("start_ns")),
            w_end=pl.when(whole).then(pl.max_horizontal("end_ns", "_last")).otherwise(pl.col("end_ns")),
        )
    )


def _drawn_events(events: pl.DataFrame, modes: pl.DataFrame) -> pl.DataFrame:
    """Return the events the Gantt draws, with their lane key, label, role and style."""
    frame = events.with_row_index("event").join(modes, on="rank", how="inner")
    kind = pl.col("kind")
    gpu = (pl.col("mode") == "gpu") & pl.col("device").is_not_null() & kind.is_in(_GPU_KINDS)
    cpu = (
        (pl.col("mode") == "cpu")
        & pl.col("device").is_null()
        & kind.is_in(_CPU_KINDS)
        & (pl.col("source") == "kineto")
    )
    horovod = (pl.col("mode") == "horovod") & kind.is_in(_HOROVOD_KINDS)
    frame = frame.filter(gpu | cpu | horovod)
    devices = frame.filter(pl.col("mode") == "gpu").group_by("rank").agg(_devices=pl.col("device").n_unique())
    frame = frame.join(devices, on="rank", how="left")
    stream = pl.coalesce("stream", "tid")
    base = (
        pl.when(pl.col("mode") == "gpu")
        .then(
            pl.when(pl.col("_devices") > 1)
            .then(pl.format("gpu {} stream {}", pl.col("device"), stream))
            .otherwise(pl.format("stream {}", stream))
        )
        .when(pl.col("mode") == "cpu")
        .then(pl.format("thread {}", pl.col("tid")))
        .otherwise(pl.coalesce(pl.col("tensor").cast(pl.String), pl.format("tensor {}", pl.col("pid"))))
    )
    sort_key = (
        pl.when(pl.col("mode") == "gpu")
        .then(pl.col("device").cast(pl.Int64) * 1_000_000_000 + stream.fill_null(0))
        .when(pl.col("mode") == "cpu")
        .then(pl.col("tid"))
        .otherwise(pl.col("pid"))
    )
    return frame.with_columns(
        _base=base,
        _sort=sort_key.fill_null(0),
        style=_style(),
    )


def _style() -> pl.Expr:
    """Return the drawing style of an event: by its Horovod phase, or by its kind in a profiler trace."""
    kind = pl.col("kind")
    horovod_style = (
        pl.when(kind == "negotiation")
        .then(pl.lit("negotiation"))
        .when(kind == "queue")
        .then(pl.lit("queue"))
        .when(kind == "wait")
        .then(pl.lit("wait for data"))
        .when(kind == "memcpy")
        .then(pl.lit("memcpy/memset"))
        .when(kind == "communication")
        .then(pl.lit("wire (exposure unknown)"))
        .otherwise(pl.lit("other"))
    )
    kineto_style = (
        pl.when(kind.is_in(["compute", "cpu_op"]))
        .then(pl.lit("compute"))
        .when(kind == "communication")
        .then(pl.lit("communication (hidden)"))
        .when(kind.is_in(["memcpy", "memset"]))
        .then(pl.lit("memcpy/memset"))
        .otherwise(pl.lit("sync/wait"))
    )
    return pl.when(pl.col("mode") == "horovod").then(horovod_style).otherwise(kineto_style).cast(STYLE)


def _lanes(drawn: pl.DataFrame, exposed_ranks: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Return the lanes table and the lane of each ``(rank, _base)``."""
    kind = pl.col("kind")
    per_lane = drawn.group_by("rank", "mode", "_base").agg(
        _sort=pl.col("_sort").min(),
        role=pl.when(pl.col("mode").first() == "horovod")
        .then(pl.lit("tensor"))
        .when((kind == "communication").any())
        .then(pl.lit("comm"))
        .when(kind.is_in(["compute", "cpu_op"]).any())
        .then(pl.lit("compute"))
        .when(kind.is_in(["memcpy", "memset"]).any())
        .then(pl.lit("copy"))
        .otherwise(pl.lit("other")),
    )
    per_lane = per_lane.with_columns(
        label=pl.when(pl.col("role") == "tensor")
        .then(pl.col("_base"))
        .otherwise(pl.format("{} · {}", pl.col("_base"), pl.col("role")))
    )
    exposed = exposed_ranks.select(
        "rank",
        "mode",
        _base=pl.lit(None, dtype=pl.String),
        _sort=pl.lit(0, dtype=pl.Int64),
        role=pl.lit("exposed"),
        label=pl.lit("exposed comm"),
    )
    lanes = (
        pl.concat([exposed, per_lane.select(exposed.columns)], how="vertical_relaxed")
        .with_columns(pl.col("role").cast(_ROLE), group=pl.format("rank {}", pl.col("rank")))
        .sort("rank", "role", "_sort", "label")
        .with_columns(lane_id=pl.int_range(pl.len(), dtype=pl.Int32))
    )
    keys = lanes.filter(pl.col("_base").is_not_null()).select("rank", "_base", "lane_id")
    return validate(lanes, LANES_SCHEMA, what="lanes"), keys


def _clip(rows: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """Clip spans to the windows (splitting at boundaries); place zero-length events by their start."""
    spans = rows.filter(pl.col("end_ns") > pl.col("start_ns"))
    points = rows.filter(pl.col("end_ns") <= pl.col("start_ns"))
    clipped = clip_to_windows(spans, windows, by=["rank"])
    located = (
        points.sort("start_ns")
        .join_asof(
            windows.sort("w_start"),
            left_on="start_ns",
            right_on="w_start",
            by="rank",
            strategy="backward",
            check_sortedness=False,
        )
        .filter(pl.col("window_id").is_not_null() & (pl.col("start_ns") < pl.col("w_end")))
        .drop("w_start", "w_end")
    )
    return pl.concat([clipped, located.select(clipped.columns)], how="vertical_relaxed")


def _breakdown(overlap: Overlap, views: pl.DataFrame) -> pl.DataFrame:
    rows = overlap.iterations.join(
        views.select("iteration", "window", "view"), on=["iteration", "window"], how="inner", nulls_equal=True
    )
    horovod = pl.col("mode") == "horovod"
    known = ~horovod

    def part(expr: pl.Expr, when: pl.Expr) -> pl.Expr:
        return pl.when(when).then(expr).otherwise(0).fill_null(0)

    frame = rows.with_columns(
        compute_only_ns=part(pl.col("compute_ns") - pl.col("hidden_comm_ns"), known),
        hidden_comm_ns=part(pl.col("hidden_comm_ns"), known),
        exposed_comm_ns=part(pl.col("exposed_comm_ns"), known),
        other_busy_ns=pl.col("other_busy_ns").fill_null(0),
        idle_ns=part(pl.col("idle_ns"), known),
        unknown_comm_ns=part(pl.col("comm_ns"), horovod),
        unknown_ns=part(pl.col("step_ns") - pl.col("comm_ns") - pl.col("other_busy_ns"), horovod),
    )
    return validate(frame.sort("view", "rank"), BREAKDOWN_SCHEMA, what="breakdown")


def prepare_report_data(run: Run) -> ReportData:
    """Return the lanes, views, segments and breakdowns the report draws, from the run's facts.

    Every event of every rank is drawn (:meth:`~timeline.run.Run.all_events`: rank by rank, read
    again in this process); the collectives are the run's one matching (:attr:`~timeline.run.Run.matched`,
    shown when at least two ranks' communication is measured, as its collectives report), each
    collective's dimension its group's (:attr:`~timeline.run.Run.labels`).

    Returns
    -------
    ReportData
        Declared frames; the exposed segments of a rank in a view sum to the analyzer's
        ``exposed_comm_ns`` of that rank and iteration.

    Examples
    --------
    >>> import timeline  # doctest: +SKIP
    >>> data = prepare_report_data(timeline.analyze("sample_traces/ddp_gloo"))  # doctest: +SKIP
    """
    events, overlap = run.all_events().events, run.overlap
    modes = rank_modes(events)
    views = _views(overlap)
    drawn = _drawn_events(events, modes)
    windows = _keyed_windows(overlap, views, drawn)
    views = _views_with_spans(views, windows)
    exposed, exposed_ranks = _exposed_time(events, modes, windows)
    lanes, lane_keys = _lanes(drawn, exposed_ranks)
    labels = (
        run.labels.unique(["rank", "start_ns", "end_ns"], keep="first", maintain_order=True)
        if run.has_groups
        else None
    )
    base = _clip(_event_rows(drawn, lane_keys, overlap, labels), windows)
    segments = _assemble_segments(base, _exposed_overlays(base, exposed, lanes))
    measured = modes.filter(pl.col("mode").is_in(["gpu", "cpu"])).height
    report = None
    if measured >= 2 and run.kineto_communication:
        from timeline.results.collectives import build_collectives_report

        report = build_collectives_report(run, rank_rows=False)
    return ReportData(
        lanes=lanes,
        views=views,
        segments=segments,
        breakdown=_breakdown(overlap, views),
        overlap=overlap,
        omitted=_omitted_events(events, drawn, base),
        collectives=run.matched if measured >= 2 else None,
        collectives_report=report,
        dimensions=None if labels is None else _dimension_rows(overlap, labels, views),
    )


def whatif_of(data: ReportData) -> WhatIfSweep | None:
    """Return the report's what-if sweep, waiting for it if a helper process still computes it."""
    return data.whatif.result() if isinstance(data.whatif, Future) else data.whatif


def build_report_data(
    run: Run, *, compare: Diff | None = None, helper: LocalExecutor | None = None
) -> ReportData:
    """Return everything the report shows of a run: the Gantt's data, its findings and its "What-if" tab.

    The findings are the run's diagnosis (:attr:`~timeline.run.Run.diagnosis`), the "What-if" tab
    replays the run's graph (:func:`~timeline.report.whatif_view.whatif_sweep`); ``compare``: the
    "Compare" tab's diff (``timeline diff BASE RUN``'s result), None without. ``helper``: a started
    :class:`~timeline.executors.LocalExecutor` that replays the graph while this process prepares
    and draws the rest (``whatif`` is then its future, :func:`whatif_of`).
    """
    from dataclasses import replace

    from timeline.report.whatif_view import submit_whatif_sweep, whatif_sweep
    from timeline.results.diagnosis import build_diagnosis

    # with a helper (started), the sweep runs there while the rest is prepared and drawn here
    whatif = whatif_sweep(run) if helper is None else submit_whatif_sweep(run, helper)
    data = prepare_report_data(run)
    return replace(data, whatif=whatif, compare=compare, diagnosis=build_diagnosis(run.diagnosis))


def _dimension_rows(overlap: Overlap, labels: pl.DataFrame, views: pl.DataFrame) -> pl.DataFrame:
    """Return the exposure per dimension × iteration × rank, with the view each row is shown in."""
    return exposure_by(overlap, labels).join(
        views.select("iteration", "view"), on="iteration", how="inner", nulls_equal=True
    )


def _views_with_spans(views: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """Give each view the span of its windows on every rank, and validate the views."""
    spans = windows.group_by("window_id").agg(start_ns=pl.col("w_start").min(), end_ns=pl.col("w_end").max())
    return validate(
        views.drop("start_ns", "end_ns").join(spans, left_on="view", right_on="window_id", how="left"),
        VIEWS_SCHEMA,
        what="views",
    )


def _exposed_time(
    events: pl.DataFrame, modes: pl.DataFrame, windows: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Compute each rank's exposed communication in each view, and the ranks that communicate.

    The analyzer's sets, clipped to the same windows, and the analyzer's formula. Returns the
    exposed intervals and the ranks with communication (with their mode), by rank.
    """
    # with the Horovod wire phases of a rank whose profiler trace is loaded, as the analyzer measures them
    profiled, wire = activity_sets(events, modes), horovod_wire_sets(events, modes)[0]
    sets = pl.concat([profiled, wire.select(profiled.columns)], how="vertical_relaxed").join(
        modes.filter(pl.col("mode") != "horovod"), on="rank", how="semi"
    )
    exposed = formula_intervals(
        clip_to_windows(sets, windows, by=["rank"]), by=["rank", "window_id"], sets=_SETS, formula=_exposed
    )
    exposed_ranks = (
        sets.filter(pl.col("set") == "comm").select("rank").unique().join(modes, on="rank").sort("rank")
    )
    return exposed, exposed_ranks


def _event_rows(
    drawn: pl.DataFrame, lane_keys: pl.DataFrame, overlap: Overlap, labels: pl.DataFrame | None
) -> pl.DataFrame:
    """Place the drawn events on their lanes, with each collective's exposed time and dimension."""
    exposure = overlap.collectives.select("rank", "name", "start_ns", "end_ns", "exposed_ns").unique(
        ["rank", "name", "start_ns", "end_ns"]
    )
    dimensions = (
        labels.select("rank", "start_ns", "end_ns", "dimension")
        if labels is not None
        else pl.DataFrame(
            schema={
                "rank": pl.Int32(),
                "start_ns": pl.Int64(),
                "end_ns": pl.Int64(),
                "dimension": pl.String(),
            }
        )
    )
    return (
        drawn.join(lane_keys, on=["rank", "_base"], how="inner")
        .join(dimensions, on=["rank", "start_ns", "end_ns"], how="left", maintain_order="left")
        .with_columns(name=pl.col("name").cast(pl.String))
        .join(exposure, on=["rank", "name", "start_ns", "end_ns"], how="left")
        .select(
            "event",
            "rank",
            "lane_id",
            "style",
            "start_ns",
            "end_ns",
            "name",
            collective=pl.col("collective").cast(pl.String),
            in_bytes="in_bytes",
            exposed_ns=pl.when(pl.col("kind") == "communication").then(pl.col("exposed_ns")),
            dimension=pl.when(pl.col("kind") == "communication").then(pl.col("dimension")),
        )
    )


def _exposed_overlays(base: pl.DataFrame, exposed: pl.DataFrame, lanes: pl.DataFrame) -> pl.DataFrame:
    """Build the exposed-time segments: the rank's exposed strip and each communication lane's pieces.

    A communication lane's exposed pieces are its communication ∩ the rank's exposed time.
    """
    exposed_lane = lanes.filter(pl.col("role") == "exposed").select("rank", "lane_id")
    strip = exposed.join(exposed_lane, on="rank", how="inner").select(
        "rank", "lane_id", "window_id", "start_ns", "end_ns"
    )
    comm = base.filter(pl.col("style") == "communication (hidden)")
    comm_lanes = comm.select("rank", "lane_id").unique()
    pieces = formula_intervals(
        pl.concat(
            [
                comm.select("rank", "window_id", "lane_id", "start_ns", "end_ns", set=pl.lit("lane")),
                exposed.join(comm_lanes, on="rank", how="inner").select(
                    "rank", "window_id", "lane_id", "start_ns", "end_ns", set=pl.lit("exposed")
                ),
            ]
        ),
        by=["rank", "window_id", "lane_id"],
        sets=["lane", "exposed"],
        formula=lambda s: s["lane"] & s["exposed"],
    )
    return pl.concat([strip, pieces.select(strip.columns)]).with_columns(
        event=pl.lit(None, dtype=pl.UInt32),
        style=pl.lit(_EXPOSED).cast(STYLE),
        name=pl.lit(_EXPOSED),
        collective=pl.lit(None, dtype=pl.String),
        in_bytes=pl.lit(None, dtype=pl.Int64),
        exposed_ns=pl.col("end_ns") - pl.col("start_ns"),
        dimension=pl.lit(None, dtype=pl.String),
    )


def _assemble_segments(base: pl.DataFrame, overlays: pl.DataFrame) -> pl.DataFrame:
    """Stack the event segments and the exposed overlays by view, rank, lane and start; validate them."""
    segments = (
        pl.concat([base, overlays.select(base.columns)], how="vertical_relaxed")
        .rename({"window_id": "view"})
        .with_columns(dur_ns=pl.col("end_ns") - pl.col("start_ns"), count=pl.lit(1, dtype=pl.Int64))
        .sort("view", "rank", "lane_id", "start_ns")
    )
    return validate(segments, SEGMENTS_SCHEMA, what="segments")


def _omitted_events(events: pl.DataFrame, drawn: pl.DataFrame, base: pl.DataFrame) -> pl.DataFrame:
    """Count the events the report leaves out, by kind, and those outside every iteration window."""
    outside = drawn.height - base.get_column("event").n_unique()
    omitted = (
        events.with_row_index("event")
        .join(drawn.select("event"), on="event", how="anti")
        .group_by(kind=pl.col("kind").cast(pl.String))
        .agg(events=pl.len().cast(pl.Int64))
    )
    if outside > 0:
        extra = pl.DataFrame({"kind": ["outside every iteration window"], "events": [outside]})
        omitted = pl.concat([omitted, extra], how="vertical_relaxed")
    return omitted.sort("events", "kind", descending=[True, False])


def bar_label(name: str | None, count: int) -> str:
    """Return what a bar's tooltip calls it: the event name, or ``N events, mostly NAME`` if merged."""
    text = name if name is not None else "-"
    return text if count <= 1 else f"{count:,} events, mostly {text}"


def default_view(data: ReportData) -> int:
    """Return the view to show first: the slowest iteration (the longest step of any rank)."""
    if data.views.height == 0:
        return 0
    return int(data.views.get_column("step_ns").arg_max() or 0)


def level_of_detail(segments: pl.DataFrame, *, start_ns: int, end_ns: int, pixels: int) -> pl.DataFrame:
    """Return the bars to draw for ``[start_ns, end_ns)`` on ``pixels`` pixels.

    Segments at least one pixel long are kept as they are. Shorter ones are merged, per lane, into
    runs: a run continues while the next short segment starts less than a pixel after the run's
    end, and at most 8 pixels, so a dense stretch of tiny kernels becomes a few bars, a gap of a
    pixel or more stays visible, and how densely a stretch is covered (``dur_ns`` over the bar's
    length, which the Gantt shows as opacity) is kept at 8-pixel resolution. A merged bar has
    ``count`` the number of segments it holds, ``dur_ns`` the sum of their durations, the style
    and name of the segments holding most of that time (``name`` is that dominant name:
    :func:`bar_label` says "N events, mostly NAME"), and the sums of their bytes and exposed time.
    Exposed pieces are merged apart from the events they are drawn over. Nothing outside the range
    is kept.

    Parameters
    ----------
    segments
        Rows of :data:`SEGMENTS_SCHEMA` or :data:`BARS_SCHEMA`.
    start_ns, end_ns
        The visible time range (absolute ns).
    pixels
        How many pixels span the range.

    Returns
    -------
    pl.DataFrame
        :data:`BARS_SCHEMA`, exposed pieces last (drawn on top), each part sorted by start.
    """
    span = max(end_ns - start_ns, 1)
    bin_ns = max(1, -(-span // max(pixels, 1)))
    visible = segments.filter((pl.col("end_ns") >= start_ns) & (pl.col("start_ns") < end_ns)).with_columns(
        _top=pl.col("style") == _EXPOSED
    )
    whole = visible.filter(pl.col("dur_ns") >= bin_ns)
    small = (
        visible.filter(pl.col("dur_ns") < bin_ns)
        .with_columns(_chunk=(pl.col("start_ns") - start_ns) // (_RUN_PIXELS * bin_ns))
        .sort("lane_id", "_top", "start_ns")  # a lane is on one rank; chunks follow start
    )
    merged = _merged_runs(_with_runs(small, start_ns=start_ns, bin_ns=bin_ns))
    columns = [*BARS_SCHEMA.names(), "_top"]
    bars = pl.concat([whole.select(columns), merged.select(columns)], how="vertical_relaxed")
    return validate(bars.sort("_top", "start_ns", "lane_id"), BARS_SCHEMA, what="bars")


def _with_runs(small: pl.DataFrame, *, start_ns: int, bin_ns: int) -> pl.DataFrame:
    """Return ``small`` (sorted by lane and start) with ``_run``, the run of short segments each joins."""
    # Runs without window functions: in the sorted frame, lift each (lane, chunk) group above the
    # previous one by ``lift`` so that one running maximum of the ends serves every group.
    group = pl.struct(["rank", "lane_id", "_top", "_chunk"]).rle_id().cast(pl.Int64)
    end = pl.col("end_ns") - start_ns
    last_end = small.select(pl.col("end_ns").max()).item()
    lift = max((start_ns if last_end is None else int(last_end)) - start_ns, 0) + bin_ns + 1
    reach = (end + group * lift).cum_max().shift(1) - group * lift
    first = group != group.shift(1)
    return small.with_columns(
        _run=(first.fill_null(True) | (pl.col("start_ns") - start_ns - reach >= bin_ns))
        .cast(pl.UInt32)
        .cum_sum()
    )


def _merged_runs(small: pl.DataFrame) -> pl.DataFrame:
    """Return one bar per run of ``small``: its extent, its sums, the style and name of most of its time."""
    keys = ["rank", "lane_id", "_top", "_run"]
    dominant = (
        small.group_by([*keys, "style", "name"], maintain_order=True)
        .agg(_busy=pl.col("dur_ns").sum() * 4 + pl.col("count").sum().clip(0, 3))
        .group_by(keys, maintain_order=True)
        .agg(
            style=pl.col("style").get(pl.col("_busy").arg_max()),
            name=pl.col("name").get(pl.col("_busy").arg_max()),
        )
    )
    return (
        small.group_by(keys)
        .agg(
            start_ns=pl.col("start_ns").min(),
            end_ns=pl.col("end_ns").max(),
            dur_ns=pl.col("dur_ns").sum(),
            count=pl.col("count").sum(),
            _collectives=pl.col("collective").drop_nulls().unique(),
            _dimensions=pl.col("dimension").drop_nulls().unique(),
            in_bytes=pl.when(pl.col("in_bytes").is_not_null().any()).then(pl.col("in_bytes").sum()),
            exposed_ns=pl.when(pl.col("exposed_ns").is_not_null().any()).then(pl.col("exposed_ns").sum()),
        )
        .join(dominant, on=keys, how="inner")
        .with_columns(collective=_one_or_mixed("_collectives"), dimension=_one_or_mixed("_dimensions"))
    )


def _one_or_mixed(values: str) -> pl.Expr:
    """Return the one value of the list column ``values``, ``mixed`` for several, null for none."""
    found = pl.col(values)
    return (
        pl.when(found.list.len() == 1)
        .then(found.list.first())
        .when(found.list.len() > 1)
        .then(pl.lit("mixed"))
    )


def view_bars(
    data: ReportData,
    view: int,
    *,
    ranks: Sequence[int] | None = None,
    start_ns: int | None = None,
    end_ns: int | None = None,
    pixels: int = 1600,
) -> pl.DataFrame:
    """Return the bars of one view for a time range (default: the whole view) and some ranks.

    Parameters
    ----------
    data
        The prepared report data.
    view
        A view id (row of ``data.views``).
    ranks
        The ranks to keep (default: all).
    start_ns, end_ns
        The visible range, absolute ns (default: the view's span).
    pixels
        The plot width: the number of bins of :func:`level_of_detail`.
    """
    key = (view, None if ranks is None else tuple(sorted(ranks)), start_ns, end_ns, pixels)
    cached = data.bars_cache.get(key)
    if cached is not None:
        return cached
    span = data.views.filter(pl.col("view") == view)
    if span.height == 0:
        return pl.DataFrame(schema=BARS_SCHEMA)
    lo = span.item(0, "start_ns") if start_ns is None else start_ns
    hi = span.item(0, "end_ns") if end_ns is None else end_ns
    rows = data.segments.filter(pl.col("view") == view)
    if ranks is not None:
        rows = rows.filter(pl.col("rank").is_in(list(ranks)))
    bars = level_of_detail(rows, start_ns=lo, end_ns=hi, pixels=pixels)
    while len(data.bars_cache) >= _CACHED_BARS:
        data.bars_cache.pop(next(iter(data.bars_cache)))
    data.bars_cache[key] = bars
    return bars


def view_levels(
    data: ReportData, view: int, *, pixels: int = 1600, factor: int = 8, max_rows: int = 150_000
) -> tuple[pl.DataFrame, list[int]]:
    """Return one view's bars at several resolutions, for refining on zoom without a server.

    Level ``k`` is :func:`level_of_detail` of the whole view on ``pixels × factor**k`` pixels; a
    viewer showing a range ``r`` wide on ``pixels`` pixels draws the coarsest level whose bin is at
    most ``r / pixels``. Levels are added until one holds every segment unmerged (bin 0), or until
    the next would take the levels past ``max_rows`` rows: then the finest level still merges what
    is shorter than its bin, and its bars say how many events they hold.

    Returns
    -------
    tuple[pl.DataFrame, list[int]]
        :data:`BARS_SCHEMA` + ``level`` (Int32), and the bin width in ns of each level (0: unmerged).
    """
    span = data.views.filter(pl.col("view") == view)
    rows = data.segments.filter(pl.col("view") == view)
    if span.height == 0 or rows.height == 0:
        return pl.DataFrame(schema={**BARS_SCHEMA, "level": pl.Int32()}), [0]
    lo, hi = span.item(0, "start_ns"), span.item(0, "end_ns")
    width = max(hi - lo, 1)
    levels: list[pl.DataFrame] = []
    bins: list[int] = []
    total = 0
    k = 0
    while True:
        n = pixels * factor**k
        bin_ns = max(1, -(-width // n))
        bars = level_of_detail(rows, start_ns=lo, end_ns=hi, pixels=n)
        raw = bars.get_column("count").max() == 1 or bin_ns <= 1
        if levels and total + bars.height > max_rows:
            break
        levels.append(bars.with_columns(level=pl.lit(k, dtype=pl.Int32)))
        bins.append(0 if raw else bin_ns)
        total += bars.height
        if raw:
            break
        k += 1
    return pl.concat(levels), bins
