"""The events and overlap analysis of the selected ranks and iterations (``--ranks``, ``--iterations``).

Takes a rank's (or a run's) events and overlap analysis and a :class:`timeline.selection.Selection`;
gives those of the selected ranks and iterations, the same way in memory and in each rank-by-rank
task, so that every door gives the same answer (the rules: :mod:`timeline.selection`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import polars as pl

from timeline.errors import UsageError
from timeline.selection import Selection, describe_numbers

if TYPE_CHECKING:
    from timeline.analysis.overlap import Overlap

__all__ = ["check_selected", "restrict", "restrict_events", "select_events", "select_overlap"]


def _ranks_filter(ranks: Sequence[int] | None) -> pl.Expr:
    import polars as pl

    return pl.lit(True) if ranks is None else pl.col("rank").is_in(list(ranks))


def _selected_windows(windows: pl.DataFrame, selection: Selection) -> pl.DataFrame:
    import polars as pl

    kept = windows.filter(_ranks_filter(selection.ranks))
    if selection.iterations is not None:
        kept = kept.filter(pl.col("iteration").is_in(list(selection.iterations)))
    return kept


def _in_windows(frame: pl.DataFrame, windows: pl.DataFrame, *, whole: bool) -> pl.DataFrame:
    """Return the rows of ``frame`` (``rank``, ``start_ns``, ``end_ns``) that overlap one of ``windows``.

    ``whole``: a row is kept when any of it overlaps a window (events); else when it starts inside
    one (intervals already cut at the windows' edges).
    """
    import polars as pl

    if frame.height == 0:
        return frame
    bounds = windows.select(
        pl.col("rank").cast(pl.Int32), w_start=pl.col("start_ns"), w_end=pl.col("end_ns")
    ).sort("w_start")
    key = "end_ns" if whole else "start_ns"
    indexed = frame.with_row_index("_row").with_columns(_key=pl.col(key)).sort("_key")
    joined = indexed.join_asof(
        bounds,
        left_on="_key",
        right_on="w_start",
        by="rank",
        strategy="backward",
        allow_exact_matches=not whole,  # an event that ends where a window starts is not in it
        check_sortedness=False,
    )
    inside = pl.col("w_end") > pl.col("start_ns")
    rows = joined.filter(pl.col("w_start").is_not_null() & inside).get_column("_row").sort()
    return frame[rows]


def _other_steps(events: pl.DataFrame, iterations: Sequence[int]) -> pl.Expr:
    """Whether an event is the ``ProfilerStep#N`` annotation of an iteration that is not selected."""
    import polars as pl

    step = pl.col("name").cast(pl.String).str.extract(r"^ProfilerStep#(\d+)$", 1).cast(pl.Int64)
    return (pl.col("kind") == "annotation") & step.is_not_null() & ~step.is_in(list(iterations))


def select_events(events: pl.DataFrame, windows: pl.DataFrame, selection: Selection) -> pl.DataFrame:
    """Return the events of the selected ranks that overlap a selected window of their rank.

    ``windows``: the iteration windows of every rank, found on all its events. Without an
    iteration selection, every event of the selected ranks.
    """
    kept = events.filter(_ranks_filter(selection.ranks))
    if selection.iterations is None:
        return kept
    chosen = _selected_windows(windows, selection)
    kept = _in_windows(kept, chosen, whole=True)
    return kept.filter(~_other_steps(kept, selection.iterations))


def select_overlap(overlap: Overlap, selection: Selection) -> Overlap:
    """Return the overlap analysis of the selected ranks and iterations (see the module's docstring)."""
    import polars as pl

    if selection.everything:
        return overlap
    windows = _selected_windows(overlap.windows, selection)
    iterations = overlap.iterations.filter(_ranks_filter(selection.ranks))
    collectives = overlap.collectives.filter(_ranks_filter(selection.ranks))
    comm = overlap.comm.filter(_ranks_filter(selection.ranks))
    ranks = overlap.ranks.filter(_ranks_filter(selection.ranks))
    if selection.iterations is not None:
        chosen = list(selection.iterations)
        iterations = iterations.filter(pl.col("iteration").is_in(chosen))
        collectives = collectives.filter(pl.col("iteration").is_in(chosen))
        comm = _in_windows(comm, windows, whole=False)
        ranks = _ranks_of_iterations(iterations, overlap.ranks.schema)
    return replace(
        overlap, ranks=ranks, iterations=iterations, collectives=collectives, windows=windows, comm=comm
    )


_SUMMED = (
    "step_ns",
    "comm_ns",
    "compute_ns",
    "hidden_comm_ns",
    "exposed_comm_ns",
    "other_busy_ns",
    "idle_ns",
)


def _ranks_of_iterations(iterations: pl.DataFrame, schema: pl.Schema) -> pl.DataFrame:
    """Return each rank's row over its selected iterations: sums of their figures, ratios of the sums.

    A figure a rank cannot know in one iteration (a Horovod timeline's compute) is unknown in the sum.
    """
    import polars as pl

    def total(name: str) -> pl.Expr:
        column = pl.col(name)
        return pl.when(column.null_count() > 0).then(None).otherwise(column.sum()).alias(name)

    def ratio(num: str, den: str) -> pl.Expr:
        return pl.when(pl.col(den) > 0).then(pl.col(num) / pl.col(den)).otherwise(None)

    summed = (
        iterations.group_by("rank")
        .agg(
            pl.col("mode").first(),
            pl.col("start_ns").min(),
            pl.col("end_ns").max(),
            *(total(name) for name in _SUMMED),
        )
        .with_columns(
            exposed_comm_ratio=ratio("exposed_comm_ns", "step_ns"),
            hidden_comm_ratio=ratio("hidden_comm_ns", "comm_ns"),
            comm_ratio=ratio("comm_ns", "step_ns"),
            compute_ratio=ratio("compute_ns", "step_ns"),
            idle_ratio=ratio("idle_ns", "step_ns"),
        )
        .sort("rank")
    )
    return summed.select([pl.col(name).cast(dtype) for name, dtype in schema.items()])


def restrict(events: pl.DataFrame, overlap: Overlap, selection: Selection) -> tuple[pl.DataFrame, Overlap]:
    """Return the selected events and overlap of events whose overlap analysis (all of it) is ``overlap``."""
    if selection.everything:
        return events, overlap
    return select_events(events, overlap.windows, selection), select_overlap(overlap, selection)


def restrict_events(events: pl.DataFrame, selection: Selection) -> tuple[pl.DataFrame, pl.DataFrame | None]:
    """Return the selected events of some ranks, and their selected windows (None without iterations).

    The windows are found on all the events (:func:`~timeline.analysis.iterations.assign_iterations`).
    """
    if selection.everything:
        return events, None
    if selection.iterations is None:
        return select_events(events, events.clear(), selection), None
    from timeline.analysis.iterations import assign_iterations

    windows = assign_iterations(events)
    return select_events(events, windows, selection), _selected_windows(windows, selection)


def check_selected(selection: Selection, *, ranks: Sequence[int], windows: pl.DataFrame) -> None:
    """Refuse a selection that keeps nothing: ranks the traces lack, iterations no selected rank has.

    ``ranks``: the ranks the traces hold; ``windows``: the selected windows.

    Raises
    ------
    UsageError
        Naming the option, what the traces hold, and a value that works.
    """
    if selection.ranks is not None:
        missing = sorted(set(selection.ranks) - set(ranks))
        if missing and len(missing) == len(selection.ranks):
            msg = (
                f"--ranks {describe_numbers(selection.ranks)}: the traces hold no such rank; they hold "
                f"ranks {describe_numbers(ranks)} (e.g. --ranks {describe_numbers(ranks[:1] or [0])})"
            )
            raise UsageError(msg)
    if selection.iterations is not None and windows.height == 0:
        msg = (
            f"--iterations {describe_numbers(selection.iterations)}: no selected rank has such an "
            "iteration (ProfilerStep#N); 'timeline analyze' without --iterations lists the iterations"
        )
        raise UsageError(msg)
