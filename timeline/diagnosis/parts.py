"""The what-if graph parts of the iterations a diagnosis replays, rank by rank.

Takes events, their iteration windows and each rank's diagnosed iterations
(:func:`~timeline.diagnosis.facts.chosen_by_rank`); gives the graph parts of the events around those
iterations (:func:`diagnosis_parts`). They depend on one rank's events only, so a rank-by-rank task
computes exactly what the in-memory road computes for that rank: the two roads replay the same
graph. A rank's graph is built from its events that overlap its chosen windows or the time before
each since its ``ProfilerStep`` began on the CPU (where the step's launches lie), with those windows
only
(:func:`timeline.whatif.graph.graph_parts`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import msgspec
import polars as pl

from timeline.analysis.launches import launch_gap_intervals

if TYPE_CHECKING:
    from timeline.whatif.graph import GraphParts

__all__ = ["DiagnosisParts", "chosen_launch_gaps", "diagnosis_parts"]

LAUNCH_GAPS_SCHEMA = pl.Schema(
    {"rank": pl.Int32(), "iteration": pl.Int64(), "start_ns": pl.Int64(), "end_ns": pl.Int64()}
)


class DiagnosisParts(msgspec.Struct, frozen=True, eq=False):
    """What the diagnosis needs of some ranks' events beyond the overlap.

    Their share of the graph of the diagnosed iterations, and their launch-bound device gaps there.

    Attributes
    ----------
    graph
        :func:`~timeline.whatif.graph.graph_parts` of the events around the diagnosed iterations.
    launch_gaps
        :func:`chosen_launch_gaps`: ``rank``, ``iteration``, ``start_ns``, ``end_ns``.
    """

    graph: GraphParts
    launch_gaps: pl.DataFrame


def _kept_windows(windows: pl.DataFrame, chosen: Mapping[int, list[int]]) -> pl.DataFrame:
    """Return each rank's chosen windows; every window of a rank that chose none (no ``ProfilerStep``)."""
    pairs = [(rank, iteration) for rank, its in chosen.items() for iteration in its]
    keys = pl.DataFrame(
        {"rank": [p[0] for p in pairs], "iteration": [p[1] for p in pairs]},
        schema={"rank": pl.Int32, "iteration": pl.Int64},
    )
    kept = windows.lazy().join(keys.lazy(), on=["rank", "iteration"], how="inner")
    others = windows.lazy().filter(~pl.col("rank").is_in([int(r) for r in chosen]))
    return pl.concat([kept, others]).sort("rank", "start_ns").collect(engine="in-memory")


def chosen_launch_gaps(
    events: pl.DataFrame, windows: pl.DataFrame, chosen: Mapping[int, list[int]]
) -> pl.DataFrame:
    """Return the launch-bound gaps that start in a diagnosed window, with its iteration.

    :func:`~timeline.analysis.launches.launch_gap_intervals`, located: ``rank``, ``iteration``,
    ``start_ns``, ``end_ns``.
    """
    gaps = launch_gap_intervals(events)
    if gaps.height == 0:
        return LAUNCH_GAPS_SCHEMA.to_frame()
    kept = _kept_windows(windows, chosen).lazy().select("rank", "iteration", _w0="start_ns", _w1="end_ns")
    return (
        gaps.lazy()
        .sort("start_ns")
        .join_asof(
            kept.sort("_w0"),
            left_on="start_ns",
            right_on="_w0",
            by="rank",
            strategy="backward",
            check_sortedness=False,
        )
        .filter(pl.col("_w0").is_not_null() & (pl.col("start_ns") < pl.col("_w1")))
        .select(LAUNCH_GAPS_SCHEMA.names())
        .cast(LAUNCH_GAPS_SCHEMA)
        .sort("rank", "start_ns")
        .collect(engine="in-memory")
    )


def _event_bounds(events: pl.DataFrame, kept: pl.DataFrame) -> pl.DataFrame:
    """Return per kept window the events' span to read: ``rank``, ``_lo``, ``_hi``.

    From the start of the iteration's ``ProfilerStep#N`` on the CPU (where the launches of its device
    work begin, before the projected window when the device lagged), else from one step length
    before the window, to the window's end.
    """
    steps = (
        events.filter(
            (pl.col("kind") == "annotation") & pl.col("name").cast(pl.String).str.starts_with("ProfilerStep#")
        )
        .select(
            "rank",
            "start_ns",
            iteration=pl.col("name").cast(pl.String).str.extract(r"#(\d+)$").cast(pl.Int64),
        )
        .group_by("rank", "iteration")
        .agg(_cpu=pl.col("start_ns").min())
    )
    return kept.join(steps, on=["rank", "iteration"], how="left").select(
        "rank",
        _lo=pl.min_horizontal(
            "start_ns", pl.col("_cpu").fill_null(2 * pl.col("start_ns") - pl.col("end_ns"))
        ),
        _hi="end_ns",
    )


def diagnosis_parts(
    events: pl.DataFrame, windows: pl.DataFrame, chosen: Mapping[int, list[int]], *, launch_gaps: bool = True
) -> DiagnosisParts:
    """Return the graph parts and the launch gaps of the chosen iterations of every rank of ``events``.

    A rank without chosen iterations (no ``ProfilerStep``) keeps all its events and windows.

    Parameters
    ----------
    events
        The events of one rank or more (those the overlap reads suffice: ``overlap_only``).
    windows
        Their iteration windows (``Overlap.windows``).
    chosen
        Per rank, the iterations to keep (:func:`~timeline.diagnosis.facts.chosen_by_rank`).
    launch_gaps
        Also measure the launch gaps (else an empty frame: the caller measures them).
    """
    from timeline.whatif.graph import graph_parts  # the what-if engine: only when a graph is built

    gaps = chosen_launch_gaps(events, windows, chosen) if launch_gaps else LAUNCH_GAPS_SCHEMA.to_frame()
    if not any(chosen.values()):
        return DiagnosisParts(graph=graph_parts(events, windows=windows), launch_gaps=gaps)
    kept = _kept_windows(windows, chosen)
    restricted = [int(r) for r in chosen]
    bounds = _event_bounds(events, kept.filter(pl.col("rank").is_in(restricted)))
    selected = events.filter(~pl.col("rank").is_in(restricted) | _near(events, bounds))
    return DiagnosisParts(graph=graph_parts(selected, windows=kept), launch_gaps=gaps)


_FEW_BOUNDS = 8
"""Up to this many spans, :func:`_near` tests each (a rank's task has one to three) instead of joining
(each test reads every event: beyond a few spans the join, which pairs an event with its rank's only,
costs less)."""


def _near(events: pl.DataFrame, bounds: pl.DataFrame) -> pl.Expr:
    """Return whether an event overlaps a span of its rank (a row of ``bounds``: end ≥ _lo, start < _hi).

    The spans (``rank``, ``_lo``, ``_hi``) tested one by one when few, else joined.
    """
    if bounds.height <= _FEW_BOUNDS:
        return pl.any_horizontal(
            pl.lit(False),
            *(
                (pl.col("rank") == rank) & (pl.col("end_ns") >= lo) & (pl.col("start_ns") < hi)
                for rank, lo, hi in bounds.select("rank", "_lo", "_hi").iter_rows()
            ),
        )
    near = (
        events.with_row_index("_row")
        .join(bounds, on="rank", how="inner")
        .filter((pl.col("end_ns") >= pl.col("_lo")) & (pl.col("start_ns") < pl.col("_hi")))
        .get_column("_row")
        .unique()
    )
    return pl.int_range(pl.len(), dtype=pl.UInt32).is_in(near.implode())
