"""Communication per dimension: the ``dimensions`` key of ``timeline analyze --json`` and its table.

Takes a :class:`~timeline.trace.Trace` (its communication events, process groups, file table and
clock note) and its :class:`~timeline.analysis.overlap.Overlap`, and gives the exposure per
dimension × iteration × rank (:func:`dimension_exposure_of`, the one computation the summary, the
budgets and the report read) and its plain-data summary (:func:`dimension_summary`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from timeline.analysis.dimensions import ExposureKey, communication_labels, exposure_by, named_dimensions
from timeline.analysis.groups import shared_clocks
from timeline.analysis.overlap import Overlap
from timeline.trace import Trace

__all__ = ["dimension_exposure_of", "dimension_summary", "has_groups", "labels_of"]

_ROW_FIELDS = ("dimension", "iteration", "rank", "comm_ns", "hidden_ns", "exposed_ns", "exclusive_exposed_ns")


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


def dimension_summary(exposure: pl.DataFrame, overlap: Overlap) -> dict[str, Any] | None:
    """Return the ``dimensions`` key of the summary, or None when no communication names a dimension.

    ``rows``: one per dimension, iteration and rank
    (:data:`~timeline.analysis.schemas.DIMENSION_EXPOSURE_SCHEMA`);
    ``totals``: one per dimension, the sums of its rows, ``mean_exposed_ns`` (its exposed time over
    every rank × iteration window of the analysis, windows where it ran nothing counting 0),
    ``max_exposed_ns`` (its worst rank and iteration) and ``hidden_comm_ratio`` (hidden over comm).
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
    return {"rows": exposure.select(_ROW_FIELDS).to_dicts(), "totals": totals.to_dicts()}
