"""The analysis summary: what ``timeline analyze`` prints and ``--json`` emits, as typed data.

Takes a :class:`~timeline.run.Run` (its trace, overlap, and the facts the summary shows) and gives
a :class:`Summary` (kind ``"summary"``): msgspec Structs whose JSON is the ``--json`` layout, read
back as a baseline by ``timeline check`` and ``timeline diff``. Every figure a renderer shows is a
field here (the per-iteration figures across ranks, the order of the most exposed iterations), so
``--json`` holds it too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import polars as pl

from timeline.analysis.overlap import Overlap
from timeline.arguments import check_optional_int, check_run
from timeline.results.base import Result, Row, rows_of
from timeline.results.collectives import ClockOffset, FileRow, Utilisation, utilisation_summary
from timeline.results.diagnosis import Verdict
from timeline.results.dimensions import DimensionSummary
from timeline.results.findings import Finding
from timeline.results.flight_recorder import FlightReport
from timeline.trace import Trace

if TYPE_CHECKING:
    from timeline.run import Run

__all__ = [
    "READABLE_SUMMARY_VERSIONS",
    "SUMMARY_VERSION",
    "IterationAcrossRanksRow",
    "IterationRow",
    "RankRow",
    "Summary",
    "TopCollectiveRow",
    "build_summary",
    "top_collectives",
    "worst_iteration",
]

SUMMARY_VERSION = 4
"""The layout version of :class:`Summary` (2: ``verdict`` and ``findings`` added; 3: ``dimensions``;
4: ``kind`` and ``timeline`` first, the per-rank rows' ``step_ns`` named ``span_ns``, every key
always present, ``iterations_across_ranks``, ``iterations_by_exposure`` and the dimensions'
``across_ranks`` added)."""

READABLE_SUMMARY_VERSIONS = frozenset({1, 2, 3, 4})
"""Summary layouts ``timeline check`` and ``timeline diff`` read (2 and 3 only add keys; a budget scoped
to a dimension needs 3's ``dimensions``; 4 is decoded into :class:`Summary`)."""

Window = Literal["profiler_step", "whole_trace"]
"""An iteration window: a ``ProfilerStep#N``, or a rank's whole trace when it has none."""


class RankRow(Row, frozen=True, kw_only=True):
    """One rank over its whole trace (:data:`~timeline.schema.RANK_OVERLAP_SCHEMA`).

    ``span_ns`` is the analysis' ``step_ns`` of the rank: the span from its first event to its last
    (every iteration together), named so since layout 4. The ratios are over the span; the
    ``*_ns`` a Horovod timeline cannot know (no compute events) are null.
    """

    rank: int
    mode: str
    span_ns: int
    comm_ns: int
    compute_ns: int | None
    hidden_comm_ns: int | None
    exposed_comm_ns: int | None
    other_busy_ns: int
    idle_ns: int | None
    exposed_comm_ratio: float | None
    hidden_comm_ratio: float | None
    comm_ratio: float | None
    compute_ratio: float | None
    idle_ratio: float | None


class IterationRow(Row, frozen=True, kw_only=True):
    """One rank in one iteration (:data:`~timeline.schema.ITERATION_OVERLAP_SCHEMA`): its step and figures."""

    rank: int
    iteration: int | None
    window: Window
    start_ns: int
    end_ns: int
    step_ns: int
    comm_ns: int
    compute_ns: int | None
    hidden_comm_ns: int | None
    exposed_comm_ns: int | None
    other_busy_ns: int
    idle_ns: int | None
    exposed_comm_ratio: float | None
    hidden_comm_ratio: float | None
    comm_ratio: float | None
    compute_ratio: float | None
    idle_ratio: float | None


class IterationAcrossRanksRow(Row, frozen=True, kw_only=True):
    """One iteration across the ranks that ran it: their mean and longest step, mean and most exposure.

    The means are rounded to the nanosecond; ``exposed_*`` are null when no rank's exposure is known;
    ``worst_rank`` is the rank with the most exposed communication.
    """

    iteration: int | None
    ranks: int
    step_mean_ns: int
    step_max_ns: int
    exposed_mean_ns: int | None
    exposed_max_ns: int | None
    worst_rank: int


class TopCollectiveRow(Row, frozen=True, kw_only=True):
    """One collective × process group × size over every rank (:func:`top_collectives`)."""

    collective: str
    pg_name: str | None
    in_bytes: int | None
    calls: int
    ranks: int
    dur_ns: int
    exposed_ns: int | None
    exposed_ratio: float | None


class Summary(Result, tag="summary", kw_only=True):
    """The summary of a run (``timeline analyze --json``), layout :data:`SUMMARY_VERSION`.

    Layout 4 (from 3): ``kind`` and ``timeline`` come first; ``clock_offsets``, ``utilisation`` and
    ``flight_recorder`` are always present (null without ``--align``, ``--link-gbps``, dumps); the
    per-rank rows' ``step_ns`` (the span of every iteration, not a step) is ``span_ns``;
    ``iterations_across_ranks``, ``iterations_by_exposure`` and ``dimensions.across_ranks`` are new,
    the figures the renderers show. Every other key, value and key order is layout 3's.
    """

    version: int = SUMMARY_VERSION
    files: list[FileRow]
    warnings: list[str]
    windows: dict[str, Window]
    ranks: list[RankRow]
    iterations: list[IterationRow]
    worst: IterationRow | None
    top_collectives: list[TopCollectiveRow]
    dimensions: DimensionSummary | None
    clock_offsets: list[ClockOffset] | None
    utilisation: Utilisation | None
    verdict: Verdict | None
    findings: list[Finding] | None
    # the Flight Recorder report, with its ``matches``, when dumps are analysed with the traces
    flight_recorder: FlightReport | None = None
    iterations_across_ranks: list[IterationAcrossRanksRow]
    iterations_by_exposure: list[int]


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


def worst_iteration(iterations: pl.DataFrame) -> IterationRow | None:
    """Return the rank-iteration with the most exposed communication, or None if none has any."""
    known = iterations.filter(pl.col("exposed_comm_ns").is_not_null())
    if known.height == 0:
        return None
    return rows_of(known.sort(["exposed_comm_ns", "step_ns"], descending=True).head(1), IterationRow)[0]


def iterations_across_ranks(iterations: pl.DataFrame) -> list[IterationAcrossRanksRow]:
    """Return each iteration across ranks: how many, the mean and longest step, the mean and most exposure.

    Means rounded to the nanosecond; the worst rank is the lowest rank with the most exposed
    communication (ranks of unknown exposure last).
    """
    frame = (
        iterations.group_by("iteration")
        .agg(
            ranks=pl.len(),
            step_mean_ns=pl.col("step_ns").mean().round(0).cast(pl.Int64),
            step_max_ns=pl.col("step_ns").max(),
            exposed_mean_ns=pl.col("exposed_comm_ns").mean().round(0).cast(pl.Int64),
            exposed_max_ns=pl.col("exposed_comm_ns").max(),
            worst_rank=pl.col("rank")
            .sort_by("exposed_comm_ns", "rank", descending=[True, False], nulls_last=True)
            .first(),
        )
        .sort("iteration", nulls_last=True)
    )
    return rows_of(frame, IterationAcrossRanksRow)


def iterations_by_exposure(iterations: pl.DataFrame) -> list[int]:
    """Return the positions of the iteration rows, the most exposed communication first.

    Unknown exposure last; ties by rank, then iteration.
    """
    order = (
        iterations.with_row_index("position")
        .sort(
            [
                pl.col("exposed_comm_ns").is_null(),
                pl.col("exposed_comm_ns").fill_null(0),
                "rank",
                "iteration",
            ],
            descending=[False, True, False, False],
            nulls_last=False,
        )
        .get_column("position")
    )
    return [int(p) for p in order]


def build_summary(run: Run, *, top: int = 10, findings: bool = True) -> Summary:
    """Return the summary of a run (``timeline analyze --json``).

    Fields: ``files`` (one per input file), ``warnings`` (the load warnings, one line each:
    repairs, rows the plausibility checks left out, a rank read as 0, clocks that disagree:
    :mod:`timeline.plausibility`; then the run's own, a partial run; then the analysis' own,
    ``Overlap.warnings``: a Horovod timeline left out of its writer's figures; then a link slower
    than some transfers), ``windows`` (``profiler_step`` or ``whole_trace`` per rank), ``ranks``
    (whole-trace rows), ``iterations`` (rank × iteration rows), ``worst`` (the rank-iteration with
    the most exposed communication), ``top_collectives`` (the ``top`` first), ``dimensions`` (the
    communication per dimension × iteration × rank,
    :func:`timeline.results.dimensions.dimension_summary`, null when no communication names a
    dimension), ``clock_offsets`` (with clocks aligned), ``utilisation`` (with the link's
    bandwidth), ``verdict`` and ``findings`` (:mod:`timeline.results.diagnosis`, null with
    ``findings=False``), ``flight_recorder`` (null: the command sets it), then
    ``iterations_across_ranks`` and ``iterations_by_exposure``. Every figure is one of the run's
    facts (:class:`timeline.run.Run`).

    Raises
    ------
    TypeError
        ``run`` not a :class:`~timeline.run.Run`, ``top`` not an int (each named).
    """
    check_run(run)
    check_optional_int(top, argument="top")
    trace, overlap = run.trace, run.overlap
    warnings = [*run.warnings, *overlap.warnings]
    dimensions = _dimension_summary(run)
    utilisation, too_fast = _link_utilisation(run)
    diagnosis = None
    if findings:
        from timeline.results.diagnosis import build_diagnosis

        diagnosis = build_diagnosis(run.diagnosis)
    return Summary(
        files=rows_of(trace.files, FileRow),
        warnings=[*warnings, *too_fast],
        windows=_windows(overlap),
        ranks=rows_of(overlap.ranks.rename({"step_ns": "span_ns"}), RankRow),
        iterations=rows_of(overlap.iterations, IterationRow),
        worst=worst_iteration(overlap.iterations),
        top_collectives=rows_of(
            top_collectives(overlap.collectives, limit=top, continued=_continued_phases(trace)),
            TopCollectiveRow,
        ),
        dimensions=dimensions,
        clock_offsets=None if run.offsets is None else rows_of(run.offsets, ClockOffset),
        utilisation=utilisation,
        verdict=None if diagnosis is None else diagnosis.verdict,
        findings=None if diagnosis is None else diagnosis.findings,
        iterations_across_ranks=iterations_across_ranks(overlap.iterations),
        iterations_by_exposure=iterations_by_exposure(overlap.iterations),
    )


def _dimension_summary(run: Run) -> DimensionSummary | None:
    """Return the communication per dimension of the run, or None when no communication names one."""
    if run.dimension_exposure is None:
        return None
    from timeline.results.dimensions import dimension_summary

    return dimension_summary(run.dimension_exposure, run.overlap)


def _link_utilisation(run: Run) -> tuple[Utilisation | None, list[str]]:
    """Return the link's utilisation (None without its bandwidth) and the warning of transfers above it."""
    if run.options.link_gbps is None:
        return None, []
    utilisation = utilisation_summary(run)
    from timeline.analysis.collectives import implausible_warning

    too_fast = implausible_warning(utilisation.implausible, run.options.link_gbps)
    return utilisation, [] if too_fast is None else [too_fast]


def _windows(overlap: Overlap) -> dict[str, Window]:
    """Return each rank's window kind, keyed by the rank as a string (JSON keys are strings)."""
    rows = overlap.windows.group_by("rank").agg(pl.col("window").first().cast(pl.String)).sort("rank")
    return {str(rank): window for rank, window in rows.iter_rows()}


def _continued_phases(trace: Trace) -> pl.DataFrame | None:
    """Return the wire phases that continue a Horovod call (hierarchical all-reduce), or None."""
    if "horovod" not in trace.files.get_column("format").to_list():
        return None
    from timeline.analysis.horovod_phases import continued_wire_phases

    return continued_wire_phases(trace.events)
