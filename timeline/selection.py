"""The ranks and iterations a run restricts itself to (``--ranks``, ``--iterations``).

Takes the options' text (``0-3,7``) and gives a :class:`Selection`; takes a rank's (or a run's)
events and overlap analysis and gives those of the selected ranks and iterations, the same way in
memory and in each rank-by-rank task, so that every door gives the same answer:

- ``--ranks``: only the events of those ranks are kept;
- ``--iterations``: each rank's iteration windows are found on all its events (as without the
  option); only the selected windows are kept, and the events that overlap one of them (whole, not
  cut at the window's edges). The per-iteration figures are those the run without the option gives;
  a rank's figures over its whole trace become sums over its selected iterations (its ``step_ns``
  the sum of their lengths, its ratios of those sums). A rank with no iteration (one whole-trace
  window) has none to select.

Parsing imports no polars (a command reads its options first); the restrictions import it when
called.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from timeline.errors import UsageError

if TYPE_CHECKING:
    import polars as pl

    from timeline.analysis.overlap import Overlap

__all__ = [
    "SELECTION_MAX",
    "Selection",
    "describe_numbers",
    "parse_numbers",
    "restrict",
    "restrict_events",
    "select_overlap",
]

SELECTION_MAX = 2**31 - 1
"""The largest rank or iteration a selection names."""
_SPAN_MAX = 1_000_000
"""The most numbers one range of a selection spans (``0-999999``)."""


@dataclass(frozen=True)
class Selection:
    """The ranks and the iterations a run keeps; None keeps them all.

    Attributes
    ----------
    ranks
        Rank numbers, sorted, without repeats.
    iterations
        Iteration numbers (``ProfilerStep#N``), sorted, without repeats.
    """

    ranks: tuple[int, ...] | None = None
    iterations: tuple[int, ...] | None = None

    @property
    def everything(self) -> bool:
        """Whether nothing is left out."""
        return self.ranks is None and self.iterations is None

    def describe(self) -> str:
        """Say what is kept: ``ranks 0-3, 7 and iterations 2-4``."""
        parts = []
        if self.ranks is not None:
            parts.append(f"rank{'s' if len(self.ranks) > 1 else ''} {describe_numbers(self.ranks)}")
        if self.iterations is not None:
            many = len(self.iterations) > 1
            parts.append(f"iteration{'s' if many else ''} {describe_numbers(self.iterations)}")
        return " and ".join(parts) or "every rank and iteration"


def parse_numbers(text: str | None, option: str) -> tuple[int, ...] | None:
    """Return the numbers a selection option names: a comma-separated list of numbers and ranges.

    Examples
    --------
    >>> parse_numbers("0-3,7", "--ranks")
    (0, 1, 2, 3, 7)
    >>> parse_numbers(None, "--ranks") is None
    True

    Raises
    ------
    UsageError
        Not a list of non-negative numbers and ``LOW-HIGH`` ranges (the message names the option
        and a value that works).
    """
    if text is None:
        return None
    numbers: set[int] = set()
    for part in text.split(","):
        item = part.strip()
        low, dash, high = item.partition("-")
        if not (low.strip().isdigit() and (not dash or high.strip().isdigit())):
            msg = (
                f"{option} {text!r}: {item!r} is not a number or a range; give numbers and ranges "
                f"separated by commas, e.g. {option} 0-3,7"
            )
            raise UsageError(msg)
        first, last = int(low), int(high) if dash else int(low)
        if last < first:
            raise UsageError(f"{option} {text!r}: the range {item} runs backwards; write it {last}-{first}")
        if last > SELECTION_MAX or last - first >= _SPAN_MAX:
            msg = (
                f"{option} {text!r}: {item} is out of range (at most {_SPAN_MAX:,} numbers, each up to "
                f"{SELECTION_MAX})"
            )
            raise UsageError(msg)
        numbers.update(range(first, last + 1))
    return tuple(sorted(numbers))


def describe_numbers(numbers: Sequence[int]) -> str:
    """Return numbers as ``0-3, 7`` (runs of consecutive numbers as ranges).

    Examples
    --------
    >>> describe_numbers([0, 1, 2, 3, 7])
    '0-3, 7'
    """
    values = sorted(set(numbers))
    if not values:
        return "none"
    parts: list[str] = []
    start = prev = values[0]
    for value in [*values[1:], None]:
        if value is not None and value == prev + 1:
            prev = value
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if value is not None:
            start = prev = value
    return ", ".join(parts)


# ---------------------------------------------------------------------------------------------
# The restriction (imports polars)


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
