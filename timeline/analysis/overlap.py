"""Exposed vs hidden communication, per rank, per iteration and per collective.

Takes the canonical events frame (and optionally the iteration windows) and gives the frames of
:data:`timeline.schema.RANK_OVERLAP_SCHEMA`, :data:`timeline.schema.ITERATION_OVERLAP_SCHEMA` and
:data:`timeline.schema.COLLECTIVE_EXPOSURE_SCHEMA`. With ``comm`` the union of communication
intervals over all streams (or gloo threads on CPU-only ranks) and ``compute`` the union of compute
intervals (on CPU-only ranks: CPU operators on the compute threads, every thread but gloo's worker
threads, minus the time spent in calls into c10d and in ops that wait on a collective):

- ``comm_ns = |comm|``, ``compute_ns = |compute|``;
- ``hidden_comm_ns = |comm ∩ compute|``: communication that ran under compute;
- ``exposed_comm_ns = |comm| - |comm ∩ compute|``: communication that stretched the step;
- ``other_busy_ns = |other - comm - compute|`` (GPU memcpy/memset outside comm and compute);
- ``idle_ns = step_ns - |comm ∪ compute ∪ other|``;
- ratios over ``step_ns``, except ``hidden_comm_ratio = hidden / comm``.

All times are exact integer nanoseconds: nothing is rounded. The exact definitions, with their
edge cases, are in ``docs/metrics.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import polars as pl

from timeline.analysis.intervals import (
    Formula,
    _union_lazy,
    covered_within,
    measure_sweep,
    measure_windows,
    sweep,
    sweep_intervals,
)
from timeline.analysis.iterations import (
    _assign_iterations,
    _step_spans,
    activity_sets,
    rank_modes,
    with_iterations,
)
from timeline.analysis.schemas import COMM_INTERVALS_SCHEMA, COMM_STATE
from timeline.arguments import check_events
from timeline.schema import (
    COLLECTIVE_EXPOSURE_SCHEMA,
    ITERATION_OVERLAP_SCHEMA,
    RANK_OVERLAP_SCHEMA,
    validate,
)

__all__ = [
    "Overlap",
    "comm_intervals",
    "compute_collective_exposure",
    "compute_iteration_overlap",
    "compute_overlap",
    "compute_rank_overlap",
    "overlap_with_modes",
]

_SETS = ("comm", "compute", "wait", "other")


def _working(s: Mapping[str, pl.Expr]) -> pl.Expr:
    return s["compute"] & ~s["wait"]


_FORMULAS: dict[str, Formula] = {
    "comm_ns": lambda s: s["comm"],
    "compute_ns": _working,
    "hidden_comm_ns": lambda s: s["comm"] & _working(s),
    "other_busy_ns": lambda s: s["other"] & ~s["comm"] & ~_working(s),
    "busy_ns": lambda s: s["comm"] | _working(s) | s["other"],
}


@dataclass(frozen=True)
class Overlap:
    """The three views of the overlap analysis of one trace.

    Attributes
    ----------
    ranks
        One row per rank over its whole trace (:data:`RANK_OVERLAP_SCHEMA`).
    iterations
        One row per rank and iteration (:data:`ITERATION_OVERLAP_SCHEMA`).
    collectives
        One row per communication event (:data:`COLLECTIVE_EXPOSURE_SCHEMA`).
    windows
        The iteration windows used (:data:`timeline.schema.ITERATIONS_SCHEMA`).
    comm
        The communication of each rank as disjoint intervals, each ``exposed`` or ``hidden``
        (:func:`comm_intervals`, :data:`~timeline.analysis.schemas.COMM_INTERVALS_SCHEMA`): what
        the exposure per dimension (:mod:`timeline.analysis.dimensions`) intersects with each
        dimension's collectives.
    warnings
        Inputs the analysis left out, one line each (a Horovod timeline not on the clock of its
        writer's profiler trace: :func:`~timeline.analysis.horovod_phases.horovod_wire_sets`).
    """

    ranks: pl.DataFrame
    iterations: pl.DataFrame
    collectives: pl.DataFrame
    windows: pl.DataFrame
    comm: pl.DataFrame = field(default_factory=COMM_INTERVALS_SCHEMA.to_frame)
    warnings: tuple[str, ...] = ()


def _finish(measured: pl.LazyFrame, modes: pl.DataFrame) -> pl.LazyFrame:
    """Derive exposed, idle and the ratios; null what a Horovod-only rank cannot know (lazily)."""
    step = pl.col("end_ns") - pl.col("start_ns")
    no_compute = pl.col("mode") == "horovod"

    def unknown_if_horovod(expr: pl.Expr) -> pl.Expr:
        return pl.when(no_compute).then(None).otherwise(expr)

    def ratio(num: str, den: str) -> pl.Expr:
        return pl.when(pl.col(den) > 0).then(pl.col(num) / pl.col(den)).otherwise(None)

    out = measured.join(modes.lazy(), on="rank", how="left").with_columns(step_ns=step)
    out = out.with_columns(
        exposed_comm_ns=unknown_if_horovod(pl.col("comm_ns") - pl.col("hidden_comm_ns")),
        hidden_comm_ns=unknown_if_horovod(pl.col("hidden_comm_ns")),
        compute_ns=unknown_if_horovod(pl.col("compute_ns")),
        idle_ns=unknown_if_horovod(pl.col("step_ns") - pl.col("busy_ns")),
    )
    return out.with_columns(
        exposed_comm_ratio=ratio("exposed_comm_ns", "step_ns"),
        hidden_comm_ratio=ratio("hidden_comm_ns", "comm_ns"),
        comm_ratio=ratio("comm_ns", "step_ns"),
        compute_ratio=ratio("compute_ns", "step_ns"),
        idle_ratio=ratio("idle_ns", "step_ns"),
    )


def _measured_sets(
    events: pl.DataFrame, modes: pl.DataFrame, steps: pl.DataFrame | None = None
) -> tuple[pl.DataFrame, pl.DataFrame, tuple[str, ...]]:
    """Return the profiler's activity sets, those plus Horovod's wire phases merged, and warnings.

    A rank with both a profiler trace and the Horovod timeline it wrote measures Horovod's wire
    phases as communication (:func:`~timeline.analysis.horovod_phases.horovod_wire_sets`).
    """
    sets = activity_sets(events, modes, steps=steps)
    if not (events.get_column("source") == "horovod").any():
        return sets, sets, ()  # no Horovod timeline, no wire phases (and its module is not imported)
    from timeline.analysis.horovod_phases import horovod_wire_sets

    wire, warnings = horovod_wire_sets(events, modes)
    if wire.height == 0:
        return sets, sets, warnings
    return sets, pl.concat([sets, wire.select(sets.columns)], how="vertical_relaxed"), warnings


def _zeros() -> list[pl.Expr]:
    return [pl.col(name).fill_null(0) for name in _FORMULAS]


def compute_rank_overlap(events: pl.DataFrame) -> pl.DataFrame:
    """Return exposed vs hidden communication of each rank over its whole trace.

    The window of a rank spans its first to its last measured activity (communication, compute,
    memcpy/memset).

    Parameters
    ----------
    events
        The canonical events frame.

    Returns
    -------
    pl.DataFrame
        :data:`timeline.schema.RANK_OVERLAP_SCHEMA`, one row per rank, sorted by rank.
    """
    modes = rank_modes(events)
    _, sets, _ = _measured_sets(events, modes)
    return _rank_overlap(modes, sets, _sweep(sets))


def _sweep(sets: pl.DataFrame, windows: pl.DataFrame | None = None) -> pl.DataFrame:
    """Return the one sweep of a rank's sets that every view measures, cut at the windows' edges."""
    cuts = None
    if windows is not None:
        cuts = pl.concat(
            [windows.select("rank", _t="start_ns"), windows.select("rank", _t="end_ns")]
        ).unique()
    return sweep(sets, by=["rank"], sets=_SETS, cuts=cuts)


def _rank_overlap(modes: pl.DataFrame, sets: pl.DataFrame, bounds: pl.DataFrame) -> pl.DataFrame:
    span = sets.lazy().group_by("rank").agg(start_ns=pl.col("start_ns").min(), end_ns=pl.col("end_ns").max())
    measured = measure_sweep(bounds, by=["rank"], sets=_SETS, formulas=_FORMULAS)
    frame = span.join(measured.lazy(), on="rank", how="left").with_columns(_zeros())
    result = _finish(frame, modes).sort("rank").collect(engine="in-memory")
    return validate(result, RANK_OVERLAP_SCHEMA, what="rank overlap")


def compute_iteration_overlap(events: pl.DataFrame, *, windows: pl.DataFrame | None = None) -> pl.DataFrame:
    """Return exposed vs hidden communication of each rank in each iteration.

    Every interval is clipped to the iteration windows, so the iterations of a rank partition its
    time and nothing is counted twice.

    Parameters
    ----------
    events
        The canonical events frame.
    windows
        Iteration windows (:func:`assign_iterations`); computed when not given.

    Returns
    -------
    pl.DataFrame
        :data:`timeline.schema.ITERATION_OVERLAP_SCHEMA`, sorted by rank and window start.
    """
    modes = rank_modes(events)
    profiled, sets, _ = _measured_sets(events, modes)
    if windows is None:
        windows = _assign_iterations(events, modes, profiled)
    return _iteration_overlap(modes, windows, _sweep(sets, windows))


def _iteration_overlap(modes: pl.DataFrame, windows: pl.DataFrame, bounds: pl.DataFrame) -> pl.DataFrame:
    """``bounds``: :func:`_sweep` cut at the edges of ``windows``."""
    keyed = windows.lazy().with_row_index("window_id").with_columns(pl.col("window_id").cast(pl.Int64))
    measured = measure_windows(
        bounds,
        keyed.select("rank", "window_id", w_start="start_ns", w_end="end_ns").collect(engine="in-memory"),
        by=["rank"],
        sets=_SETS,
        formulas=_FORMULAS,
    )
    frame = keyed.join(measured.lazy(), on=["rank", "window_id"], how="left").with_columns(_zeros())
    frame = frame.join(modes.lazy(), on="rank", how="inner").drop("mode")
    result = _finish(frame, modes).sort("rank", "start_ns").collect(engine="in-memory")
    return validate(result, ITERATION_OVERLAP_SCHEMA, what="iteration overlap")


def compute_collective_exposure(events: pl.DataFrame, *, windows: pl.DataFrame | None = None) -> pl.DataFrame:
    """Return how much of each communication event ran under compute.

    ``hidden_ns = |event ∩ compute|`` (compute as in :func:`compute_rank_overlap`),
    ``exposed_ns = dur_ns - hidden_ns``. On Horovod-only ranks both are null.

    Parameters
    ----------
    events
        The canonical events frame.
    windows
        Iteration windows; an event belongs to the window its start falls in.

    Returns
    -------
    pl.DataFrame
        :data:`timeline.schema.COLLECTIVE_EXPOSURE_SCHEMA`, sorted by rank and start.
    """
    modes = rank_modes(events)
    sets = activity_sets(events, modes)
    if windows is None:
        windows = _assign_iterations(events, modes, sets)
    return _collective_exposure(events, modes, sets, windows, _sweep(sets))


def _collective_exposure(
    events: pl.DataFrame, modes: pl.DataFrame, sets: pl.DataFrame, windows: pl.DataFrame, bounds: pl.DataFrame
) -> pl.DataFrame:
    comm = sets.filter(pl.col("set") == "comm")
    working = sweep_intervals(bounds, by=["rank"], sets=_SETS, formula=_working)
    hidden = covered_within(working, comm, by=["rank"], key="event", out="hidden_ns").lazy()
    details = (
        events.lazy()
        .with_row_index("event")
        .filter(pl.col("event").is_in(comm.get_column("event").implode()))  # cast few rows below
        .select(
            "event",
            "rank",
            "start_ns",
            "end_ns",
            "dur_ns",
            "in_bytes",
            "out_bytes",
            name=pl.col("name").cast(pl.String),
            collective=pl.col("collective").cast(pl.String),
            pg_name=pl.col("pg_name").cast(pl.String),
        )
    )
    located = with_iterations(
        comm.lazy()
        .select("event")
        .join(details, on="event")
        .join(hidden, on="event", how="left")
        .join(modes.lazy(), on="rank", how="left"),
        windows,
    )
    horovod = pl.col("mode") == "horovod"
    result = located.with_columns(
        hidden_ns=pl.when(horovod).then(None).otherwise(pl.col("hidden_ns")),
        exposed_ns=pl.when(horovod).then(None).otherwise(pl.col("dur_ns") - pl.col("hidden_ns")),
    ).with_columns(
        exposed_ratio=pl.when(pl.col("dur_ns") > 0).then(pl.col("exposed_ns") / pl.col("dur_ns")),
    )
    ordered = result.sort("rank", "start_ns").collect(engine="in-memory")
    return validate(ordered, COLLECTIVE_EXPOSURE_SCHEMA, what="collective exposure")


def comm_intervals(events: pl.DataFrame) -> pl.DataFrame:
    """Return the communication of each rank as disjoint intervals, each exposed or hidden.

    ``hidden`` where communication ran under compute, ``exposed`` where it did not (the sets and
    formulas of :func:`compute_rank_overlap`): per rank, the lengths of the ``exposed`` intervals add
    up to ``exposed_comm_ns`` and those of the ``hidden`` ones to ``hidden_comm_ns``. Horovod-only
    ranks, where neither is known, have none.

    Parameters
    ----------
    events
        The canonical events frame.

    Returns
    -------
    pl.DataFrame
        :data:`timeline.analysis.schemas.COMM_INTERVALS_SCHEMA`, sorted by rank and start.
    """
    modes = rank_modes(events)
    _, sets, _ = _measured_sets(events, modes)
    return _comm_states(modes, _sweep(sets))


def _comm_states(modes: pl.DataFrame, bounds: pl.DataFrame) -> pl.DataFrame:
    """:func:`comm_intervals` of the one sweep of a rank's sets (cut at window edges or not)."""
    known = pl.Series("rank", [r for r, m in modes.iter_rows() if m != "horovod"], dtype=modes.schema["rank"])
    # one pass over the boundaries: each stretch of communication is hidden or exposed, then the
    # touching stretches of one state are merged
    member = {name: pl.col(f"_c_{name}") > 0 for name in _SETS}
    pieces = (
        bounds.lazy()
        .filter(member["comm"] & (pl.col("_dt") > 0) & pl.col("rank").is_in(known.implode()))
        .select(
            "rank",
            state=pl.when(_working(member)).then(pl.lit("hidden")).otherwise(pl.lit("exposed")),
            start_ns=pl.col("_t"),
            end_ns=pl.col("_t") + pl.col("_dt"),
        )
    )
    frame = (
        _union_lazy(pieces, ["rank", "state"])
        .with_columns(pl.col("state").cast(COMM_STATE))
        .select("rank", "state", "start_ns", "end_ns")
        .sort("rank", "start_ns")
        .collect(engine="in-memory")
    )
    return validate(frame, COMM_INTERVALS_SCHEMA, what="communication intervals")


def compute_overlap(events: pl.DataFrame) -> Overlap:
    """Return all views of the overlap analysis: per rank, per iteration, per collective.

    Parameters
    ----------
    events
        The canonical events frame (``Trace.events``).

    Examples
    --------
    >>> from timeline import load  # doctest: +SKIP
    >>> overlap = compute_overlap(load("sample_traces/ddp_gloo").events)  # doctest: +SKIP
    >>> overlap.ranks.select("rank", "exposed_comm_ns")  # doctest: +SKIP

    Raises
    ------
    TypeError
        ``events`` is not a polars ``DataFrame`` (:func:`timeline.arguments.check_events`).
    UsageError
        ``events`` lacks a column of the events frame, or holds one of another type.
    """
    events = check_events(events)
    return overlap_with_modes(events, rank_modes(events))


def overlap_with_modes(events: pl.DataFrame, modes: pl.DataFrame) -> Overlap:
    """:func:`compute_overlap` with ``modes = rank_modes(events)`` already computed by the caller."""
    # The rank modes, activity sets and one sweep of them are computed once and shared by the views.
    # Iteration windows are the profiler's; the per-collective view lists the profiler's collectives
    # (a fused Horovod batch repeats its wire spans on every tensor: `timeline collectives` has them).
    steps = _step_spans(events)
    profiled, sets, warnings = _measured_sets(events, modes, steps)
    windows = _assign_iterations(events, modes, profiled, steps=steps)
    bounds = _sweep(sets, windows)
    return Overlap(
        ranks=_rank_overlap(modes, sets, bounds),
        iterations=_iteration_overlap(modes, windows, bounds),
        collectives=_collective_exposure(events, modes, profiled, windows, bounds),
        windows=windows,
        comm=_comm_states(modes, bounds),
        warnings=warnings,
    )
