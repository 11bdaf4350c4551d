"""Communication per dimension: the ``dimensions`` key of ``timeline analyze --json`` and its table.

Takes a :class:`~timeline.trace.Trace` (its communication events, process groups, file table and
clock note) and its :class:`~timeline.analysis.overlap.Overlap`, and gives the exposure per
dimension × iteration × rank (:func:`dimension_exposure_of`, the one computation the summary, the
budgets and the report read) and its typed summary (:func:`dimension_summary`, a
:class:`DimensionSummary`: its rows, its totals per dimension and its figures per dimension and
iteration across ranks).
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec
import polars as pl

from timeline.analysis.dimensions import ExposureKey, communication_labels, exposure_by, named_dimensions
from timeline.analysis.groups import shared_clocks
from timeline.analysis.overlap import Overlap
from timeline.results.base import Row, rows_of
from timeline.trace import Trace

__all__ = [
    "DimensionIterationRow",
    "DimensionRow",
    "DimensionSummary",
    "DimensionTotalRow",
    "dimension_exposure_of",
    "dimension_summary",
    "has_groups",
    "labels_of",
]


class DimensionRow(Row, frozen=True, kw_only=True):
    """One dimension × iteration × rank (:data:`~timeline.analysis.schemas.DIMENSION_EXPOSURE_SCHEMA`)."""

    dimension: str
    iteration: int | None
    rank: int
    comm_ns: int
    hidden_ns: int
    exposed_ns: int
    exclusive_exposed_ns: int


class DimensionTotalRow(Row, frozen=True, kw_only=True):
    """One dimension over every rank and iteration: the sums of its rows, its mean and worst exposure."""

    dimension: str
    comm_ns: int
    hidden_ns: int
    exposed_ns: int
    exclusive_exposed_ns: int
    max_exposed_ns: int
    mean_exposed_ns: int
    hidden_comm_ratio: float | None


class DimensionIterationRow(Row, frozen=True, kw_only=True):
    """One dimension in one iteration, across the ranks that ran it (the mean and worst of their rows)."""

    dimension: str
    iteration: int | None
    ranks: int
    hidden_mean_ns: int
    exposed_mean_ns: int
    exposed_max_ns: int
    worst_rank: int


class DimensionSummary(msgspec.Struct, frozen=True, kw_only=True):
    """The ``dimensions`` key of the summary: rows, totals per dimension, per dimension and iteration.

    ``across_ranks`` (new in summary layout 4) holds what the terminal table of ``timeline analyze``
    shows: the means are rounded to the nanosecond.
    """

    rows: list[DimensionRow]
    totals: list[DimensionTotalRow]
    across_ranks: list[DimensionIterationRow]


def has_groups(trace: Trace) -> bool:
    """Whether the trace says anything of process groups: declared groups or events that name one."""
    if trace.groups.height:
        return True
    events = trace.events
    if "pg_name" not in events.columns:
        return False
    return bool(events.filter(pl.col("kind") == "communication").get_column("pg_name").is_not_null().any())


def labels_of(
    trace: Trace,
    overlap: Overlap,
    *,
    offsets: pl.DataFrame | None = None,
    overrides: Mapping[str, str] | None = None,
    gpus_per_node: int | None = None,
) -> pl.DataFrame:
    """Return the dimension and description of each communication event of an analysed trace.

    :func:`~timeline.analysis.dimensions.communication_labels` with the trace's groups and the
    clocks that compare (:func:`~timeline.analysis.groups.shared_clocks`: the ranks of one node, all
    after ``--align``), as ``timeline collectives`` attributes groups.
    """
    clocks = shared_clocks(
        trace.files, gpus_per_node=gpus_per_node, offsets=offsets, comparable=trace.clock_note is None
    )
    return communication_labels(
        trace.events, groups=trace.groups, overrides=overrides, clocks=clocks, windows=overlap.windows
    )


def dimension_exposure_of(
    trace: Trace,
    overlap: Overlap,
    *,
    offsets: pl.DataFrame | None = None,
    overrides: Mapping[str, str] | None = None,
    gpus_per_node: int | None = None,
    by: ExposureKey = "dimension",
) -> pl.DataFrame:
    """Return the exposure per dimension (or ``pg_desc``) × iteration × rank of an analysed trace.

    :func:`~timeline.analysis.dimensions.exposure_by` of :func:`labels_of`.
    """
    labels = labels_of(trace, overlap, offsets=offsets, overrides=overrides, gpus_per_node=gpus_per_node)
    return exposure_by(overlap, labels, by=by)


def dimension_summary(exposure: pl.DataFrame, overlap: Overlap) -> DimensionSummary | None:
    """Return the ``dimensions`` key of the summary, or None when no communication names a dimension.

    ``rows``: one per dimension, iteration and rank
    (:data:`~timeline.analysis.schemas.DIMENSION_EXPOSURE_SCHEMA`);
    ``totals``: one per dimension, the sums of its rows, ``mean_exposed_ns`` (its exposed time over
    every rank × iteration window of the analysis, windows where it ran nothing counting 0),
    ``max_exposed_ns`` (its worst rank and iteration) and ``hidden_comm_ratio`` (hidden over comm);
    ``across_ranks``: one per dimension and iteration, over the ranks with a row: how many,
    the mean hidden and exposed time (rounded to the nanosecond), the most exposed time and the
    rank that had it (the lowest rank of a tie), by dimension then iteration (null last).
    """
    if not named_dimensions(exposure):
        return None
    windows = max(overlap.iterations.height, 1)
    totals = (
        exposure.group_by("dimension")
        .agg(
            pl.col("comm_ns", "hidden_ns", "exposed_ns", "exclusive_exposed_ns").sum(),
            max_exposed_ns=pl.col("exposed_ns").max(),
        )
        .with_columns(
            mean_exposed_ns=(pl.col("exposed_ns") / windows).round(0).cast(pl.Int64),
            hidden_comm_ratio=pl.when(pl.col("comm_ns") > 0).then(pl.col("hidden_ns") / pl.col("comm_ns")),
        )
        .sort("exposed_ns", "dimension", descending=[True, False])
    )
    per_iteration = (
        exposure.group_by("dimension", "iteration")
        .agg(
            ranks=pl.len(),
            hidden_mean_ns=pl.col("hidden_ns").mean().round(0).cast(pl.Int64),
            exposed_mean_ns=pl.col("exposed_ns").mean().round(0).cast(pl.Int64),
            exposed_max_ns=pl.col("exposed_ns").max(),
            worst_rank=pl.col("rank").sort_by("exposed_ns", "rank", descending=[True, False]).first(),
        )
        .sort("dimension", "iteration", nulls_last=True)
    )
    return DimensionSummary(
        rows=rows_of(exposure, DimensionRow),
        totals=rows_of(totals, DimensionTotalRow),
        across_ranks=rows_of(per_iteration, DimensionIterationRow),
    )
