"""The analysis summary: what ``timeline analyze`` prints and ``--json`` emits.

Takes a :class:`~timeline.trace.Trace` and its :class:`~timeline.analysis.overlap.Overlap` and
gives plain data (dicts of ints, floats and strings) in a stable layout, so the JSON output can be
read back as a baseline by ``timeline check``.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from timeline.analysis.overlap import Overlap
from timeline.trace import Trace

__all__ = ["SUMMARY_VERSION", "build_summary", "top_collectives", "worst_iteration"]

SUMMARY_VERSION = 1

_RANK_FIELDS = (
    "rank",
    "mode",
    "step_ns",
    "comm_ns",
    "compute_ns",
    "hidden_comm_ns",
    "exposed_comm_ns",
    "other_busy_ns",
    "idle_ns",
    "exposed_comm_ratio",
    "hidden_comm_ratio",
    "comm_ratio",
    "compute_ratio",
    "idle_ratio",
)
_ITERATION_FIELDS = (
    "rank",
    "iteration",
    "window",
    "start_ns",
    "end_ns",
    *_RANK_FIELDS[2:],
)


def top_collectives(collectives: pl.DataFrame, *, limit: int = 10) -> pl.DataFrame:
    """Return the collectives that exposed the most time, grouped by collective, group and size.

    Columns: ``collective``, ``pg_name``, ``in_bytes``, ``calls``, ``ranks``, ``dur_ns``,
    ``exposed_ns``, ``exposed_ratio`` (exposed over duration), sorted by exposed time.
    """
    if collectives.height == 0:
        return pl.DataFrame(
            schema={
                "collective": pl.String,
                "pg_name": pl.String,
                "in_bytes": pl.Int64,
                "calls": pl.UInt32,
                "ranks": pl.UInt32,
                "dur_ns": pl.Int64,
                "exposed_ns": pl.Int64,
                "exposed_ratio": pl.Float64,
            }
        )
    grouped = (
        collectives.lazy()
        .select("collective", "pg_name", "in_bytes", "rank", "dur_ns", "exposed_ns")
        .with_columns(pl.col("collective").fill_null("unknown"))
        .group_by("collective", "pg_name", "in_bytes")
        .agg(
            calls=pl.len(),
            ranks=pl.col("rank").n_unique(),
            dur_ns=pl.col("dur_ns").sum(),
            exposed_ns=pl.col("exposed_ns").sum(),
        )
        # streaming: a row per collective event of every rank is aggregated a morsel at a time
        .collect(engine="streaming")
        .with_columns(
            exposed_ratio=pl.when(pl.col("dur_ns") > 0).then(pl.col("exposed_ns") / pl.col("dur_ns")),
        )
    )
    return grouped.sort(["exposed_ns", "dur_ns"], descending=True, nulls_last=True).head(limit)


def worst_iteration(iterations: pl.DataFrame) -> dict[str, Any] | None:
    """Return the rank-iteration with the most exposed communication, or None if none has any."""
    known = iterations.filter(pl.col("exposed_comm_ns").is_not_null())
    if known.height == 0:
        return None
    row = known.sort(["exposed_comm_ns", "step_ns"], descending=True).row(0, named=True)
    return {k: row[k] for k in _ITERATION_FIELDS}


def _rows(frame: pl.DataFrame, fields: tuple[str, ...]) -> list[dict[str, Any]]:
    return frame.select(fields).with_columns(pl.col(pl.Enum).cast(pl.String)).to_dicts()


def build_summary(
    trace: Trace,
    overlap: Overlap,
    *,
    top: int = 10,
    offsets: pl.DataFrame | None = None,
    link_gbps: float | None = None,
) -> dict[str, Any]:
    """Return the summary of an analysis as plain data (``timeline analyze --json``).

    Keys: ``version``, ``files`` (one entry per input file), ``warnings``, ``windows``
    (``profiler_step`` or ``whole_trace`` per rank), ``ranks`` (whole-trace rows),
    ``iterations`` (rank × iteration rows), ``worst`` (the rank-iteration with the most exposed
    communication), ``top_collectives``; with ``offsets`` (clocks aligned), ``clock_offsets``; with
    ``link_gbps``, ``utilisation`` (:func:`timeline.results.collectives.utilisation_summary`).
    """
    summary = _overlap_summary(trace, overlap, top=top)
    if offsets is not None:
        summary["clock_offsets"] = offsets.to_dicts()
    if link_gbps is not None:
        from timeline.results.collectives import utilisation_summary

        summary["utilisation"] = utilisation_summary(trace, overlap, link_gbps)
    return summary


def _overlap_summary(trace: Trace, overlap: Overlap, *, top: int) -> dict[str, Any]:
    """Return the keys of :func:`build_summary` that every analysis has."""
    windows = (
        overlap.windows.group_by("rank").agg(pl.col("window").first().cast(pl.String)).sort("rank").to_dicts()
    )
    worst = worst_iteration(overlap.iterations)
    return {
        "version": SUMMARY_VERSION,
        "files": trace.files.to_dicts(),
        "warnings": list(trace.warnings),
        "windows": {str(row["rank"]): row["window"] for row in windows},
        "ranks": _rows(overlap.ranks, _RANK_FIELDS),
        "iterations": _rows(overlap.iterations, _ITERATION_FIELDS),
        "worst": worst,
        "top_collectives": top_collectives(overlap.collectives, limit=top).to_dicts(),
    }
