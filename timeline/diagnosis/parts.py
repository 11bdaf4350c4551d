"""The what-if graph parts of the iterations a diagnosis replays, rank by rank.

Takes events, their iteration windows and each rank's diagnosed iterations
(:func:`~timeline.diagnosis.facts.chosen_by_rank`); gives the graph parts of the events around those
iterations (:func:`diagnosis_parts`). They depend on one rank's events only, so a rank-by-rank task
computes exactly what the in-memory road computes for that rank: the two roads replay the same
graph. A rank's graph is built from its events that overlap its chosen windows or the step before
each (where the step's launches may lie), with those windows only
(:func:`timeline.whatif.graph.graph_parts`).
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from timeline.whatif.graph import GraphParts, graph_parts

__all__ = ["diagnosis_parts"]

def diagnosis_parts(events: pl.DataFrame, windows: pl.DataFrame, chosen: Mapping[int, list[int]]) -> GraphParts:
    """Return the graph parts of the chosen iterations of every rank of ``events``.

    A rank without chosen iterations (no ``ProfilerStep``) keeps all its events and windows.

    Parameters
    ----------
    events
        The events of one rank or more (those the overlap reads suffice: ``overlap_only``).
    windows
        Their iteration windows (``Overlap.windows``).
    chosen
        Per rank, the iterations to keep (:func:`chosen_by_rank`).
    """
    pairs = [(rank, iteration) for rank, its in chosen.items() for iteration in its]
    if not pairs:
        return graph_parts(events, windows=windows)
    keys = pl.DataFrame(
        {"rank": [p[0] for p in pairs], "iteration": [p[1] for p in pairs]},
        schema={"rank": pl.Int32, "iteration": pl.Int64},
    )
    kept = windows.join(keys, on=["rank", "iteration"], how="inner")
    restricted = [int(r) for r in chosen]
    others = windows.filter(~pl.col("rank").is_in(restricted))
    bounds = kept.select("rank", _lo=2 * pl.col("start_ns") - pl.col("end_ns"), _hi="end_ns")
    near = (
        events.with_row_index("_row")
        .join(bounds, on="rank", how="inner")
        .filter((pl.col("end_ns") >= pl.col("_lo")) & (pl.col("start_ns") < pl.col("_hi")))
        .get_column("_row")
        .unique()
    )
    rows = events.with_row_index("_row")
    selected = rows.filter(~pl.col("rank").is_in(restricted) | pl.col("_row").is_in(near.implode())).drop("_row")
    return graph_parts(selected, windows=pl.concat([kept, others]).sort("rank", "start_ns"))
