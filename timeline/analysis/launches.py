"""Launch gaps: the device idle because the host had not launched the next kernel yet (GPU ranks).

Takes the canonical events frame and the iteration windows; gives one row per rank and window
(:data:`LAUNCH_GAPS_SCHEMA`). On a GPU rank the device's busy time is the union of its activities
(kernels, collectives, copies, memsets, on every stream). Between two busy blocks ``[g0, g1)`` the
device is idle; the gap is *launch-bound* when it is short (at most ``max_gap_ns``, 100 µs by
default) and the activity that ends it was launched by a runtime call (same ``correlation``) that
ended after ``g0``: the device had nothing left to run while the host was still launching. Longer
gaps are idle time of another kind (input, host synchronisation). A gap belongs to the window its
start falls in.
"""

from __future__ import annotations

import polars as pl

from timeline.analysis.iterations import rank_modes
from timeline.schema import validate

__all__ = ["DEFAULT_MAX_GAP_NS", "LAUNCH_GAPS_SCHEMA", "compute_launch_gaps"]

DEFAULT_MAX_GAP_NS = 100_000
"""The longest device gap counted as waiting for a launch (100 µs)."""

LAUNCH_GAPS_SCHEMA = pl.Schema(
    {
        "rank": pl.Int32(),
        "iteration": pl.Int64(),
        "launch_gaps": pl.Int64(),
        "launch_gap_ns": pl.Int64(),
    }
)
"""One row per GPU rank and window: the launch-bound gaps in it, their count and total length."""

_DEVICE_KINDS = ("compute", "communication", "memcpy", "memset")


def compute_launch_gaps(
    events: pl.DataFrame, windows: pl.DataFrame, *, max_gap_ns: int = DEFAULT_MAX_GAP_NS
) -> pl.DataFrame:
    """Return, per GPU rank and window, the device's launch-bound idle time.

    Parameters
    ----------
    events
        The canonical events frame (device activities and the runtime calls that launched them).
    windows
        The iteration windows (:data:`timeline.schema.ITERATIONS_SCHEMA`).
    max_gap_ns
        The longest gap that counts.

    Returns
    -------
    pl.DataFrame
        :data:`LAUNCH_GAPS_SCHEMA`, sorted by rank and window start; a window without such a gap
        has a row of zeros; CPU-only and Horovod ranks have none.
    """
    modes = rank_modes(events)
    gpu = modes.filter(pl.col("mode") == "gpu").get_column("rank")
    device = (
        events.filter(
            pl.col("rank").is_in(gpu.implode())
            & pl.col("device").is_not_null()
            & pl.col("kind").is_in(_DEVICE_KINDS)
            & (pl.col("end_ns") > pl.col("start_ns"))
        )
        .select("rank", "start_ns", "end_ns", "correlation")
        .sort("rank", "start_ns", "end_ns")
    )
    blocks = device.with_columns(_busy_until=pl.col("end_ns").cum_max().shift(1).over("rank")).filter(
        pl.col("_busy_until").is_not_null() & (pl.col("start_ns") > pl.col("_busy_until"))
    )
    launches = (
        events.filter(
            pl.col("rank").is_in(gpu.implode())
            & (pl.col("kind") == "runtime")
            & pl.col("correlation").is_not_null()
        )
        .group_by("rank", "correlation")
        .agg(_launched=pl.col("end_ns").min())
    )
    gaps = (
        blocks.join(launches, on=["rank", "correlation"], how="left")
        .filter(
            (pl.col("start_ns") - pl.col("_busy_until") <= max_gap_ns)
            & (pl.col("_launched") > pl.col("_busy_until"))
        )
        .select("rank", g0="_busy_until", gap_ns=pl.col("start_ns") - pl.col("_busy_until"))
    )
    kept = windows.filter(pl.col("rank").is_in(gpu.implode())).select(
        "rank", "iteration", "start_ns", "end_ns"
    )
    located = (
        gaps.sort("g0")
        .join_asof(
            kept.sort("start_ns").rename({"start_ns": "_w0", "end_ns": "_w1"}),
            left_on="g0",
            right_on="_w0",
            by="rank",
            strategy="backward",
            check_sortedness=False,
        )
        .filter(pl.col("_w0").is_not_null() & (pl.col("g0") < pl.col("_w1")))
        .group_by("rank", "_w0")
        .agg(launch_gaps=pl.len().cast(pl.Int64), launch_gap_ns=pl.col("gap_ns").sum())
    )
    frame = (
        kept.join(located, left_on=["rank", "start_ns"], right_on=["rank", "_w0"], how="left")
        .with_columns(pl.col("launch_gaps").fill_null(0), pl.col("launch_gap_ns").fill_null(0))
        .sort("rank", "start_ns")
    )
    return validate(frame, LAUNCH_GAPS_SCHEMA, what="launch gaps")
