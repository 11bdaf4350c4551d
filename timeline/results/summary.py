"""The analysis summary: what ``timeline analyze`` prints and ``--json`` emits.

Takes a :class:`~timeline.trace.Trace` and its :class:`~timeline.analysis.overlap.Overlap` and
gives plain data (dicts of ints, floats and strings) in a stable layout, so the JSON output can be
read back as a baseline by ``timeline check``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import polars as pl

from timeline.analysis.overlap import Overlap
from timeline.arguments import check_instance, check_optional_int
from timeline.trace import Trace

if TYPE_CHECKING:
    from timeline.diagnosis.verdict import Diagnosis

__all__ = [
    "READABLE_SUMMARY_VERSIONS",
    "SUMMARY_VERSION",
    "build_summary",
    "top_collectives",
    "worst_iteration",
]

SUMMARY_VERSION = 3
"""The layout version of :func:`build_summary` (2: ``verdict`` and ``findings`` added; 3: ``dimensions``)."""

READABLE_SUMMARY_VERSIONS = frozenset({1, 2, 3})
"""Summary layouts ``timeline check`` and ``timeline diff`` read (2 and 3 only add keys; a budget scoped
to a dimension needs 3's ``dimensions``)."""

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


def top_collectives(
    collectives: pl.DataFrame, *, limit: int = 10, continued: pl.DataFrame | None = None
) -> pl.DataFrame:
    """Return the collectives that exposed the most time, grouped by collective, group and size.

    Columns: ``collective``, ``pg_name``, ``in_bytes``, ``calls``, ``ranks``, ``dur_ns``,
    ``exposed_ns``, ``exposed_ratio`` (exposed over duration), sorted by exposed time. ``exposed_ns``
    is null (unknown) when the exposure of any of the group's events is (Horovod timelines have no
    compute to hide it under). ``continued``: spans (``name``, ``start_ns``, ``end_ns``) that continue
    a call (:func:`~timeline.analysis.horovod_phases.continued_wire_phases`): not counted as calls.
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
    frame = collectives.lazy().select("collective", "pg_name", "in_bytes", "rank", "dur_ns", "exposed_ns")
    call = pl.lit(1, dtype=pl.UInt32)
    if continued is not None and continued.height:
        frame = collectives.lazy().join(
            continued.lazy().with_columns(_continued=pl.lit(True)),
            on=["name", "start_ns", "end_ns"],
            how="left",
        )
        call = (~pl.col("_continued").fill_null(False)).cast(pl.UInt32)
    grouped = (
        frame.with_columns(pl.col("collective").fill_null("unknown"), _call=call)
        .group_by("collective", "pg_name", "in_bytes")
        .agg(
            calls=pl.col("_call").sum().cast(pl.UInt32),
            ranks=pl.col("rank").n_unique(),
            dur_ns=pl.col("dur_ns").sum(),
            # unknown (Horovod: no compute events) stays unknown, never a sum of nothing = 0
            exposed_ns=pl.when(pl.col("exposed_ns").is_null().any())
            .then(None)
            .otherwise(pl.col("exposed_ns").sum()),
        )
        # streaming: a row per collective event of every rank is aggregated a morsel at a time
        .collect(engine="streaming")
        .with_columns(
            exposed_ratio=pl.when(pl.col("dur_ns") > 0).then(pl.col("exposed_ns") / pl.col("dur_ns")),
        )
    )
    # ties (equal times: Horovod's µs spans) in a fixed order, whatever order the groups came in
    order = ["exposed_ns", "dur_ns", "in_bytes", "collective", "pg_name"]
    return grouped.sort(order, descending=[True, True, True, False, False], nulls_last=True).head(limit)


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
    diagnosis: Diagnosis | None = None,
    overrides: Mapping[str, str] | None = None,
    gpus_per_node: int | None = None,
    exposure: pl.DataFrame | None = None,
) -> dict[str, Any]:
    """Return the summary of an analysis as plain data (``timeline analyze --json``).

    Keys: ``version``, ``files`` (one entry per input file), ``warnings`` (the load warnings, one
    line each: repairs, rows the plausibility checks left out, a rank read as 0, clocks that
    disagree: :mod:`timeline.plausibility`; then the analysis' own, ``Overlap.warnings``: a Horovod
    timeline left out of its writer's figures), ``windows``
    (``profiler_step`` or ``whole_trace`` per rank), ``ranks`` (whole-trace rows),
    ``iterations`` (rank × iteration rows), ``worst`` (the rank-iteration with the most exposed
    communication), ``top_collectives``; with ``offsets`` (clocks aligned), ``clock_offsets``; with
    ``link_gbps``, ``utilisation`` (:func:`timeline.results.collectives.utilisation_summary`); then
    ``verdict`` and ``findings`` (:mod:`timeline.results.diagnosis`) of the ``diagnosis``, null
    without one; ``dimensions``: the communication per dimension × iteration × rank
    (:func:`timeline.results.dimensions.dimension_summary`; ``overrides``: description → dimension
    label, ``gpus_per_node``: ranks per node, for the group attribution), null when no communication
    names a dimension; ``exposure``: that communication per dimension when computed already, with
    these ``overrides`` and ``gpus_per_node``
    (:func:`timeline.results.dimensions.dimension_exposure_of`: ``timeline analyze`` computes it
    once, for this summary and the diagnosis), else computed here when the trace names groups.

    Raises
    ------
    TypeError
        ``trace`` not a :class:`~timeline.trace.Trace`, ``overlap`` not an
        :class:`~timeline.analysis.overlap.Overlap`, ``top`` not an int (each named).
    """
    check_instance(trace, Trace, argument="trace", fix="pass timeline.load(...) or Analysed.trace")
    check_instance(overlap, Overlap, argument="overlap", fix="pass timeline.compute_overlap(trace.events)")
    check_optional_int(top, argument="top")
    summary = _overlap_summary(trace, overlap, top=top)
    summary["dimensions"] = None
    from timeline.results.dimensions import has_groups

    if exposure is not None or has_groups(trace):
        from timeline.results.dimensions import dimension_exposure_of, dimension_summary

        if exposure is None:
            exposure = dimension_exposure_of(
                trace, overlap, offsets=offsets, overrides=overrides, gpus_per_node=gpus_per_node
            )
        summary["dimensions"] = dimension_summary(exposure, overlap)
    if offsets is not None:
        summary["clock_offsets"] = offsets.to_dicts()
    if link_gbps is not None:
        from timeline.results.collectives import utilisation_summary

        summary["utilisation"] = utilisation_summary(trace, overlap, link_gbps)
        from timeline.analysis.collectives import implausible_warning

        too_fast = implausible_warning(summary["utilisation"]["implausible"], link_gbps)
        if too_fast is not None:
            summary["warnings"].append(too_fast)
    summary["verdict"] = summary["findings"] = None
    if diagnosis is not None:
        from timeline.results.diagnosis import build_diagnosis

        built = build_diagnosis(diagnosis)
        summary["verdict"], summary["findings"] = built["verdict"], built["findings"]
    return summary


def _continued_phases(trace: Trace) -> pl.DataFrame | None:
    """Return the wire phases that continue a Horovod call (hierarchical all-reduce), or None."""
    if "horovod" not in trace.files.get_column("format").to_list():
        return None
    from timeline.analysis.horovod_phases import continued_wire_phases

    return continued_wire_phases(trace.events)


def _overlap_summary(trace: Trace, overlap: Overlap, *, top: int) -> dict[str, Any]:
    """Return the keys of :func:`build_summary` that every analysis has."""
    windows = (
        overlap.windows.group_by("rank").agg(pl.col("window").first().cast(pl.String)).sort("rank").to_dicts()
    )
    worst = worst_iteration(overlap.iterations)
    return {
        "version": SUMMARY_VERSION,
        "files": trace.files.to_dicts(),
        "warnings": [*trace.warnings, *overlap.warnings],
        "windows": {str(row["rank"]): row["window"] for row in windows},
        "ranks": _rows(overlap.ranks, _RANK_FIELDS),
        "iterations": _rows(overlap.iterations, _ITERATION_FIELDS),
        "worst": worst,
        "top_collectives": top_collectives(
            overlap.collectives, limit=top, continued=_continued_phases(trace)
        ).to_dicts(),
    }
