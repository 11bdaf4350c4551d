"""Launch gaps: the device idle because the host had not launched the next kernel yet (GPU ranks).

Takes the canonical events frame; gives the launch-bound gaps of every GPU rank
(:func:`launch_gap_intervals`: ``rank``, ``start_ns``, ``end_ns``). On a GPU rank the device's busy
time is the union of its activities (kernels, collectives, copies, memsets, on every stream).
Between two busy blocks ``[g0, g1)`` the device is idle; the gap is *launch-bound* when it is short
(at most ``max_gap_ns``, 100 µs by default) and the activity that ends it was launched by a runtime
call (same ``correlation``) that ended after ``g0``: the device had nothing left to run while the
host was still launching. Longer gaps are idle time of another kind (input, host synchronisation).
"""

from __future__ import annotations

import polars as pl

from timeline.analysis.iterations import rank_modes

__all__ = ["DEFAULT_MAX_GAP_NS", "launch_gap_intervals"]

DEFAULT_MAX_GAP_NS = 100_000
"""The longest device gap counted as waiting for a launch (100 µs)."""

_DEVICE_KINDS = ("compute", "communication", "memcpy", "memset")


def launch_gap_intervals(events: pl.DataFrame, *, max_gap_ns: int = DEFAULT_MAX_GAP_NS) -> pl.DataFrame:
    """Return every launch-bound device gap of the GPU ranks: ``rank``, ``start_ns``, ``end_ns``.

    Sorted by rank and start. The diagnosis counts a gap in the window its start falls in.
    """
    modes = rank_modes(events)
    gpu = modes.filter(pl.col("mode") == "gpu").get_column("rank").implode()
    # one query for the blocks (their launches' correlations are read), one for the gaps
    blocks = (
        events.lazy()
        .filter(
            pl.col("rank").is_in(gpu)
            & pl.col("device").is_not_null()
            & pl.col("kind").is_in(_DEVICE_KINDS)
            & (pl.col("end_ns") > pl.col("start_ns"))
        )
        .select("rank", "start_ns", "end_ns", "correlation")
        .sort("rank", "start_ns", "end_ns")
        .with_columns(_busy_until=pl.col("end_ns").cum_max().shift(1).over("rank"))
        .filter(pl.col("_busy_until").is_not_null() & (pl.col("start_ns") > pl.col("_busy_until")))
        .collect(engine="in-memory")
    )
    # only the launches of the activities that end a gap are joined: the others are not grouped
    launches = (
        events.lazy()
        .filter(
            pl.col("rank").is_in(gpu)
            & (pl.col("kind") == "runtime")
            & pl.col("correlation").is_in(blocks.get_column("correlation").drop_nulls().implode())
        )
        .group_by("rank", "correlation")
        .agg(_launched=pl.col("end_ns").min())
    )
    return (
        blocks.lazy()
        .join(launches, on=["rank", "correlation"], how="left")
        .filter(
            (pl.col("start_ns") - pl.col("_busy_until") <= max_gap_ns)
            & (pl.col("_launched") > pl.col("_busy_until"))
        )
        .select("rank", start_ns="_busy_until", end_ns="start_ns")
        .sort("rank", "start_ns")
        .collect(engine="in-memory")
    )
