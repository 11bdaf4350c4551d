"""Plausibility checks of a loaded trace: times no profiler wrote, steps counted twice, clocks apart.

Takes the events of one file once its ranks are known and gives them back without the rows no
analysis should read, with one counted warning per file, rank and reason (:func:`check_events`);
takes where each file's times lie on which clock (:func:`clock_rows`) and gives the warning for
ranks whose times cannot be compared (:func:`clock_note`). :func:`timeline.load` and the
rank-by-rank reduction (:func:`timeline.execution.reduce.run_units`) both call them, so both roads
leave out the same rows and say the same. The definitions (every limit is a constant below):

- **a time outside the trace**: an event whose start lies more than
  ``max(1 day, 10 × (p75 − p25))`` from the median start of its rank's events (percentiles of the
  starts, nearest rank), e.g. one kernel 200 years in the future or a negative ``ts`` among epoch
  times. Real traces span seconds to a few days; the median event is always kept.
- **a duration longer than the trace**: an event (after the check above) longer than
  ``max(1 s, 10 × (last start − first start))`` of its rank: its own start is inside the rank's
  span, its end far beyond anything else the rank recorded. On the public traces the longest
  event (the profiler's own ``PyTorch Profiler`` span) is at most 1.7 times the span of starts.
- **a step counted twice**: a ``ProfilerStep#N`` span nested in another step of its rank, or a
  later span of a step number seen before on the rank
  (:func:`timeline.analysis.iterations.redundant_steps`).
- **clocks that disagree**: files whose times count from different origins (:data:`Clock`: the
  Unix epoch, machine boot, an unknown origin), or ranks whose time ranges (first to last event
  start) are more than 1 hour apart. Skews, arrival order and stragglers compare ranks' times:
  they are left out (:func:`without_cross_rank_times`, :func:`without_stragglers`) until
  ``--align`` puts every rank on one clock (:func:`aligned_clock_note`).

Each left-out row is counted in a warning naming the file and the rank; the rows are not in
``Trace.events``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar

import polars as pl

from timeline.errors import TraceContentError
from timeline.units import format_ns

if TYPE_CHECKING:
    from timeline.analysis.collectives import CollectiveMatch
    from timeline.analysis.stragglers import Stragglers

__all__ = [
    "CLOCKS_SCHEMA",
    "CLOCK_GAP_NS",
    "LONG_EVENT_FACTOR",
    "LONG_EVENT_MIN_NS",
    "OUTLIER_MIN_NS",
    "OUTLIER_SPREAD_FACTOR",
    "aligned_clock_note",
    "check_events",
    "check_step_numbers",
    "clock_note",
    "clock_rows",
    "long_events",
    "time_outliers",
    "without_cross_rank_times",
    "without_stragglers",
]

_SECOND_NS = 1_000_000_000
OUTLIER_MIN_NS = 86_400 * _SECOND_NS
"""An event starting within 1 day of its rank's median start is never a time outside the trace."""
OUTLIER_SPREAD_FACTOR = 10
"""… nor within 10 interquartile ranges of the rank's starts (timelines of multi-day runs)."""
LONG_EVENT_MIN_NS = _SECOND_NS
"""An event up to 1 s long is never longer than the trace (a trace of a few events)."""
LONG_EVENT_FACTOR = 10
"""… nor one up to 10 times the span of its rank's starts (the public traces: at most 1.7)."""
CLOCK_GAP_NS = 3_600 * _SECOND_NS
"""Ranks whose time ranges are more than 1 hour apart are not on one clock."""

CLOCKS_SCHEMA = pl.Schema(
    {
        "path": pl.String(),
        "rank": pl.Int32(),
        "source": pl.String(),
        "clock": pl.String(),
        "first_ns": pl.Int64(),
        "last_ns": pl.Int64(),
    }
)
"""One row per file, rank and source: what the times count from, and the first and last start."""

_ORIGINS = {
    "epoch": "the Unix epoch",
    "relative": "an unknown origin (no baseTimeNanoseconds or timeline header)",
    "boot": "machine boot",
}
_LEFT_OUT = (
    "skews, arrival order and stragglers across ranks are left out "
    "(--align puts every rank on one clock from their collectives)"
)


def _duration(ns: float) -> str:
    """Format a limit for people: ``1 day``, ``2.5 h``, ``12.0 min``, else :func:`format_ns`."""
    if ns >= OUTLIER_MIN_NS:
        days = ns / OUTLIER_MIN_NS
        return "1 day" if days == 1 else f"{days:.1f} days"
    if ns >= CLOCK_GAP_NS:
        return f"{ns / CLOCK_GAP_NS:.1f} h"
    if ns >= 60 * _SECOND_NS:
        return f"{ns / (60 * _SECOND_NS):.1f} min"
    return format_ns(ns)


def _flagged(
    events: pl.DataFrame, stats: pl.DataFrame, flag: Callable[[pl.Expr, pl.Expr], pl.Expr]
) -> pl.DataFrame:
    """Return the rows where ``flag(limit, centre)`` holds, with their rank and limit.

    ``stats``: one row per rank with ``limit_ns`` and ``centre_ns`` (Float64), read per row as a
    constant for a one-rank file (the usual case), else through the rank.
    """
    if stats.height == 1:
        limit, centre = pl.lit(stats.item(0, "limit_ns")), pl.lit(stats.item(0, "centre_ns"))
    else:
        ranks = stats.get_column("rank")
        limit = pl.col("rank").replace_strict(ranks, stats.get_column("limit_ns"), default=None)
        centre = pl.col("rank").replace_strict(ranks, stats.get_column("centre_ns"), default=None)
    rows = events.select(flag(limit, centre).fill_null(False)).to_series().arg_true()
    found = pl.DataFrame({"event": rows, "rank": events.get_column("rank").gather(rows)})
    return found.join(stats.select("rank", "limit_ns"), on="rank", how="left", maintain_order="left")


def time_outliers(events: pl.DataFrame) -> pl.DataFrame:
    """Return the events whose start lies outside their rank's trace, with the limit they passed.

    Outside: more than ``max(OUTLIER_MIN_NS, OUTLIER_SPREAD_FACTOR × (p75 − p25))`` from the
    median start of the rank's events (quantiles of the starts, nearest rank, so the median event is
    always inside).

    Returns
    -------
    pl.DataFrame
        Columns ``event`` (UInt32: the row in ``events``), ``rank`` and ``limit_ns`` (Float64).
    """
    empty = pl.DataFrame(schema={"event": pl.UInt32, "rank": pl.Int32, "limit_ns": pl.Float64})
    start = events.get_column("start_ns")
    low, high = start.min(), start.max()
    if not isinstance(low, int) or not isinstance(high, int) or high - low <= OUTLIER_MIN_NS:
        return empty  # every start lies within a day of every other: within a day of the median
    starts = pl.col("start_ns")
    spread = starts.quantile(0.75, "nearest") - starts.quantile(0.25, "nearest")
    stats = events.group_by("rank").agg(
        limit_ns=pl.max_horizontal(pl.lit(float(OUTLIER_MIN_NS)), OUTLIER_SPREAD_FACTOR * spread),
        centre_ns=starts.quantile(0.5, "nearest"),
    )
    # in float: a start near the ends of Int64 minus the median overflows an integer
    return _flagged(events, stats, lambda limit, centre: (starts.cast(pl.Float64) - centre).abs() > limit)


def long_events(events: pl.DataFrame) -> pl.DataFrame:
    """Return the events longer than their rank's trace, with the limit they passed.

    Longer: ``dur_ns > max(LONG_EVENT_MIN_NS, LONG_EVENT_FACTOR × (last start − first start))``
    over the rank's events.

    Returns
    -------
    pl.DataFrame
        Columns ``event`` (UInt32: the row in ``events``), ``rank`` and ``limit_ns`` (Float64).
    """
    empty = pl.DataFrame(schema={"event": pl.UInt32, "rank": pl.Int32, "limit_ns": pl.Float64})
    longest = events.get_column("dur_ns").max()
    if not isinstance(longest, int) or longest <= LONG_EVENT_MIN_NS:
        return empty
    starts = pl.col("start_ns").cast(pl.Float64)
    stats = events.group_by("rank").agg(
        limit_ns=pl.max_horizontal(
            pl.lit(float(LONG_EVENT_MIN_NS)), LONG_EVENT_FACTOR * (starts.max() - starts.min())
        ),
        centre_ns=pl.lit(0.0),
    )
    return _flagged(events, stats, lambda limit, _: pl.col("dur_ns") > limit)


def _drop(events: pl.DataFrame, rows: pl.Series) -> pl.DataFrame:
    """Return ``events`` without the rows at the indexes ``rows``."""
    mask = pl.repeat(False, events.height, dtype=pl.Boolean, eager=True).scatter(rows, True)
    return events.filter(~mask)


def _time_warnings(flagged: pl.DataFrame, *, source: str, what: str) -> list[str]:
    """Return one warning per rank of ``flagged`` (``time_outliers`` or ``long_events`` rows)."""
    per_rank = flagged.group_by("rank").agg(n=pl.len(), limit=pl.col("limit_ns").min()).sort("rank")
    return [
        f"{source}: rank {row['rank']}: left out {row['n']} event(s) "
        + what.format(limit=_duration(row["limit"]))
        for row in per_rank.iter_rows(named=True)
    ]


def _step_warnings(redundant: pl.DataFrame, *, source: str) -> list[str]:
    """Return one warning per rank and reason of ``redundant_steps`` rows."""
    grouped = (
        redundant.group_by("rank", "reason")
        .agg(n=pl.len(), steps=pl.col("iteration").unique(maintain_order=True).head(3))
        .sort("rank", "reason")
    )
    out = []
    for row in grouped.iter_rows(named=True):
        steps = ", ".join(f"ProfilerStep#{n}" for n in row["steps"]) + (", …" if row["n"] > 3 else "")
        if row["reason"] == "nested":
            why = "nested in (or copies of) another step of the rank; the enclosing step is the iteration"
        else:
            why = "whose number appeared earlier on the rank; the first span of each number is the iteration"
        out.append(
            f"{source}: rank {row['rank']}: left out {row['n']} ProfilerStep#N span(s) ({steps}) {why}"
        )
    return out


_STEP_PREFIX = "ProfilerStep#"
_STEP_NUMBER = re.compile(r"\d+")  # as the iteration pattern reads it: any Unicode digit
_INT64_MAX = 2**63 - 1


def check_step_numbers(events: pl.DataFrame, *, source: str) -> None:
    """Check that every ``ProfilerStep#N`` number is one the iteration columns (Int64) can hold.

    Every format's steps pass here (Kineto, Horovod timeline, Nsight Systems, Parquet) before
    :func:`~timeline.analysis.iterations.redundant_steps` reads their numbers.

    Raises
    ------
    TraceContentError
        A step number beyond 2**63 - 1, or written with other than ASCII digits.
    """
    names = events.get_column("name").unique().cast(pl.String).drop_nulls()
    for name in names.filter(names.str.starts_with(_STEP_PREFIX)).to_list():
        digits = name[len(_STEP_PREFIX) :]
        if not _STEP_NUMBER.fullmatch(digits):
            continue  # not a step marker (ProfilerStep#3 (copy), ...): an ordinary annotation
        if digits.isascii() and len(digits) <= 19 and int(digits) <= _INT64_MAX:
            continue
        shown = digits if len(digits) <= 40 else digits[:37] + "..."
        msg = (
            f"{source}: step number {shown} of a ProfilerStep# annotation is out of range: steps are "
            f"numbered with ASCII digits from 0 to {_INT64_MAX:,}; fix the step count of the profiler "
            "schedule"
        )
        raise TraceContentError(msg)


def check_events(events: pl.DataFrame, *, source: str) -> tuple[pl.DataFrame, list[str]]:
    """Return the events without those no analysis should read, and a counted warning per rank and reason.

    Step numbers the iteration columns cannot hold are an error (:func:`check_step_numbers`).
    In order: times outside the trace (:func:`time_outliers`), durations longer than the trace
    (:func:`long_events`, measured on what the first check kept), steps counted twice
    (:func:`~timeline.analysis.iterations.redundant_steps`).

    Parameters
    ----------
    events
        The canonical events of one file, ranks filled in.
    source
        The file, to name in the warnings.

    Returns
    -------
    tuple[pl.DataFrame, list[str]]
        The kept events (same schema and order) and the warnings.
    """
    from timeline.analysis.iterations import redundant_steps

    warnings: list[str] = []
    if events.height == 0:
        return events, warnings
    check_step_numbers(events, source=source)
    outside = time_outliers(events)
    if outside.height:
        warnings += _time_warnings(
            outside,
            source=source,
            what="starting more than {limit} from the median start of the rank's events (corrupt timestamps)",
        )
        events = _drop(events, outside.get_column("event"))
    too_long = long_events(events)
    if too_long.height:
        warnings += _time_warnings(
            too_long,
            source=source,
            what="longer than {limit} (10 times the span of the rank's event starts, at least 1 s): "
            "durations the trace cannot hold",
        )
        events = _drop(events, too_long.get_column("event"))
    redundant = redundant_steps(events)
    if redundant.height:
        warnings += _step_warnings(redundant, source=source)
        events = _drop(events, redundant.get_column("event"))
    return events, warnings


def clock_rows(
    events: pl.DataFrame, *, path: str, clock: str | Mapping[tuple[int, str], str]
) -> pl.DataFrame:
    """Return where a file's events lie and on which clock, per rank and source (:data:`CLOCKS_SCHEMA`).

    ``clock``: the file's clock, or (a converted Parquet file) the clock of each ``(rank, source)``
    as its file table says; a pair it does not name gets null.
    """
    grouped = (
        events.group_by("rank", "source")
        .agg(first_ns=pl.col("start_ns").min(), last_ns=pl.col("start_ns").max())
        .sort("rank", "source")
    )
    rows = []
    for row in grouped.iter_rows(named=True):
        source = str(row["source"])
        on = clock if isinstance(clock, str) else clock.get((row["rank"], source))
        rows.append({**row, "path": path, "source": source, "clock": on})
    return pl.DataFrame(rows, schema=CLOCKS_SCHEMA) if rows else pl.DataFrame(schema=CLOCKS_SCHEMA)


def clock_note(clocks: pl.DataFrame) -> str | None:
    """Return why the ranks' times cannot be compared, or None when they can.

    Parameters
    ----------
    clocks
        :data:`CLOCKS_SCHEMA` rows of every file of a run (:func:`clock_rows`).

    Returns
    -------
    str | None
        A warning line: two files on different clocks, or two ranks whose time ranges are more
        than :data:`CLOCK_GAP_NS` apart (the widest such gap is named).
    """
    known = clocks.filter(pl.col("clock").is_not_null() & pl.col("first_ns").is_not_null())
    if known.height < 2:
        return None
    # the first file of each clock, the epoch first: the file named first is one that is not on it
    firsts = (
        known.unique("clock", keep="first", maintain_order=True)
        .with_row_index("_order")
        .sort(pl.col("clock") != "epoch", "_order")
    )
    if firsts.height > 1:
        a, b = firsts.row(0, named=True), firsts.row(1, named=True)
        return (
            f"{b['path']}: its times count from {_ORIGINS.get(b['clock'], b['clock'])} but those of "
            f"{a['path']} from {_ORIGINS.get(a['clock'], a['clock'])}: the ranks' clocks are not "
            f"comparable; {_LEFT_OUT}"
        )
    # sorted by first start: a gap is where a range starts after every earlier range has ended
    gaps = (
        known.sort("first_ns", "path", "rank")
        # in float: the times of a hostile file may lie near both ends of Int64
        .with_columns(_gap=pl.col("first_ns").cast(pl.Float64) - pl.col("last_ns").cum_max().shift(1))
        .with_row_index("_i")
    )
    widest = gaps.filter(pl.col("_gap").is_not_null()).sort("_gap", descending=True, maintain_order=True)
    if widest.height == 0 or widest.item(0, "_gap") <= CLOCK_GAP_NS:
        return None
    after = widest.row(0, named=True)
    before_rows = gaps.filter(pl.col("_i") < after["_i"]).sort(
        "last_ns", descending=True, maintain_order=True
    )
    before = before_rows.row(0, named=True)
    return (
        f"{after['path']}: rank {after['rank']}'s events start {_duration(after['_gap'])} after those of "
        f"rank {before['rank']} ({before['path']}) end: the ranks' clocks disagree (more than "
        f"{_duration(CLOCK_GAP_NS)} apart); {_LEFT_OUT}"
    )


def aligned_clock_note(note: str | None, offsets: pl.DataFrame) -> str | None:
    """Return what is left of ``note`` once the clocks are aligned with ``offsets``.

    None when every rank with collectives got an offset (``estimate_clock_offsets``): their times
    are then on one clock, whatever each counted from.
    """
    if note is None or offsets.get_column("offset_ns").null_count() == 0:
        return None
    return note


M = TypeVar("M", bound="CollectiveMatch")


def without_cross_rank_times(match: M) -> M:
    """Return a collective match without the figures that compare ranks' times.

    For ranks whose clocks disagree (:func:`clock_note`): the first and last start and end across
    ranks, the skews (a send/receive pair's too), the first and last rank, and each rank's arrival
    and end lag become null;
    durations, transfer, wait and bandwidth (each measured on one rank's clock) stay.
    """
    cross = ("first_start_ns", "last_start_ns", "first_end_ns", "last_end_ns", "start_skew_ns", "end_skew_ns")
    collectives = match.collectives.with_columns(
        pl.lit(None, dtype=match.collectives.schema[name]).alias(name)
        for name in (*cross, "first_rank", "last_rank")
    )
    ranks = match.ranks.with_columns(
        pl.lit(None, dtype=match.ranks.schema[name]).alias(name)
        for name in ("arrival_lag_ns", "end_lag_ns", "last")
    )
    # a send's and its receive's starts are on two ranks' clocks: their difference is not a time
    pairs = match.point_to_point.with_columns(start_skew_ns=pl.lit(None, dtype=pl.Int64))
    return replace(match, collectives=collectives, ranks=ranks, point_to_point=pairs)


S = TypeVar("S", bound="Stragglers")


def without_stragglers(stragglers: S) -> S:
    """Return stragglers without rows: who arrived last is unknown when the ranks' clocks disagree."""
    return replace(stragglers, iterations=stragglers.iterations.clear(), ranks=stragglers.ranks.clear())
