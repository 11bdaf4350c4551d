"""The measured facts a diagnosis reads: which iterations, their step, each rank's share of them.

Takes the overlap analysis (and the collectives matched across ranks, when there are several
ranks) and gives a :class:`Facts`: the diagnosed iterations, the measured step, and per rank and
iteration the overlap's figures and the wait each rank caused at the synchronising collectives.
Every evidence number of a finding is an aggregate of these rows: a mean over the diagnosed
iterations, rounded to the nanosecond.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import polars as pl

from timeline.diagnosis.thresholds import CUT_STEP_SHARE, MAX_RANK_EVENTS
from timeline.stats import median

if TYPE_CHECKING:
    from timeline.analysis.collectives import CollectiveMatch
    from timeline.analysis.overlap import Overlap
    from timeline.trace import Trace

__all__ = [
    "Facts",
    "choose_iterations",
    "chosen_by_rank",
    "cut_iterations",
    "facts_of",
    "horovod_only",
    "mean_int",
    "replayed_iterations",
]


def replayed_iterations(iterations: list[int], events: int) -> list[int]:
    """Return the iterations a rank diagnoses: all, or the middle ones when it has many events.

    With more than :data:`MAX_RANK_EVENTS` communication events, the consecutive iterations around
    the middle one (by number) that hold about that many at the rank's mean per iteration, at least
    the middle one: a few noisy iterations do not decide (#37), and the replay stays cheap.

    Examples
    --------
    >>> replayed_iterations([2, 3, 4], 24), replayed_iterations([2, 3, 4, 5, 6], 2020)
    ([2, 3, 4], [4])
    >>> replayed_iterations(list(range(40)), 600)  # 15 a step: the 16 around the middle
    [12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27]
    """
    ordered = sorted(iterations)
    if len(ordered) <= 1 or events <= MAX_RANK_EVENTS:
        return ordered
    keep = max(1, MAX_RANK_EVENTS * len(ordered) // events)
    first = max(0, len(ordered) // 2 - keep // 2)
    return ordered[first : first + keep]


def horovod_only(trace: Trace, overlap: Overlap) -> bool:
    """Whether every rank of the analysis is a Horovod timeline's (no profiler trace at all).

    Such a trace has its own diagnosis (:mod:`timeline.diagnosis.horovod`, imported only then).
    """
    modes = set(overlap.ranks.get_column("mode").to_list())
    return bool(modes) and modes == {"horovod"} and trace.events.height > 0


def chosen_by_rank(windows: pl.DataFrame, collectives: pl.DataFrame) -> dict[int, list[int]]:
    """Return each rank's diagnosed iterations (:func:`replayed_iterations`).

    Parameters
    ----------
    windows
        The iteration windows (``Overlap.windows``): ``profiler_step`` rows count.
    collectives
        The communication events located in iterations (``Overlap.collectives``).
    """
    steps = windows.filter((pl.col("window") == "profiler_step") & pl.col("iteration").is_not_null())
    by_rank: dict[int, list[int]] = defaultdict(list)
    for rank, iteration in steps.select("rank", "iteration").iter_rows():
        by_rank[rank].append(iteration)
    counts: dict[int, int] = defaultdict(int)
    located = collectives.filter(pl.col("iteration").is_not_null()).group_by("rank").agg(pl.len().alias("_n"))
    for rank, n in located.iter_rows():
        counts[rank] = int(n)
    return {rank: replayed_iterations(its, counts[rank]) for rank, its in by_rank.items()}


_COLUMNS = (
    "rank",
    "iteration",
    "start_ns",
    "end_ns",
    "step_ns",
    "compute_ns",
    "comm_ns",
    "hidden_comm_ns",
    "exposed_comm_ns",
    "other_busy_ns",
    "idle_ns",
)


def mean_int(values: Iterable[float]) -> int:
    """Return the mean of the values, rounded to an integer (0 for none)."""
    items = list(values)
    return round(sum(items) / len(items)) if items else 0


@dataclass(frozen=True)
class Facts:
    """What was measured in the diagnosed iterations.

    Attributes
    ----------
    rows
        One row per rank and diagnosed iteration (the overlap's per-iteration figures, ranks
        with known exposure only): ``rank``, ``iteration``, ``start_ns``, ``end_ns``, ``step_ns``,
        ``compute_ns``, ``comm_ns``, ``hidden_comm_ns``, ``exposed_comm_ns``, ``other_busy_ns``,
        ``idle_ns``.
    iterations
        The diagnosed ``ProfilerStep`` numbers; ``(None,)`` when the trace has none (each rank's
        whole trace is one window).
    step_ns
        The measured step: the median over the diagnosed iterations of the median over ranks.
    caused
        ``(iteration, rank)`` → the wait the rank caused at the synchronising collectives of the
        iteration: over those it started last, the others' ``wait_ns`` summed
        (:mod:`timeline.analysis.stragglers`); empty with one rank.
    waited
        ``(iteration, rank)`` → the rank's ``wait_ns`` summed over the synchronising collectives.
    late
        ``(iteration, rank)`` → how late the rank arrived: over the synchronising collectives of the
        iteration it started last, the largest gap between its start and the latest start of the
        other ranks (what it would have to arrive earlier by for no one to wait for it).
    behind
        ``(iteration, rank)`` → how far behind the median rank it arrived: over the synchronising
        collectives of the iteration, the largest gap between its start and the median start.
    arrivals
        Per synchronising collective of the diagnosed iterations: its iteration, its last rank and
        each rank's start (:meth:`late_behind` reads them).
    """

    rows: pl.DataFrame
    iterations: tuple[int | None, ...]
    step_ns: int
    caused: Mapping[tuple[int | None, int], int] = field(default_factory=dict)
    waited: Mapping[tuple[int | None, int], int] = field(default_factory=dict)
    late: Mapping[tuple[int | None, int], int] = field(default_factory=dict)
    behind: Mapping[tuple[int | None, int], int] = field(default_factory=dict)
    arrivals: Mapping[int, tuple[int | None, int, tuple[tuple[int, int], ...]]] = field(default_factory=dict)

    def late_behind(self, group: set[int]) -> dict[tuple[int | None, int], int]:
        """Return how late each rank of ``group`` arrived behind every rank outside it, per iteration.

        ``(iteration, rank)`` → over the synchronising collectives of the iteration a rank of the
        group started last, the largest gap between the rank's start and the latest start of the
        ranks outside the group: what it would have to arrive earlier by for no rank outside the
        group to wait for it. With one rank, :attr:`late`.
        """
        out: dict[tuple[int | None, int], int] = {}
        for iteration, last, starts in self.arrivals.values():
            outside = [s for r, s in starts if r not in group]
            if last not in group or not outside:
                continue
            latest = max(outside)
            for rank, start in starts:
                if rank in group:
                    key = (iteration, rank)
                    out[key] = max(out.get(key, 0), max(0, start - latest))
        return out

    @property
    def ranks(self) -> tuple[int, ...]:
        """The ranks diagnosed, sorted."""
        return tuple(sorted(set(self.rows.get_column("rank").to_list())))

    def value(self, rank: int, iteration: int | None, column: str) -> int:
        """Return one figure of one rank in one iteration (0 when the rank has no such row)."""
        return self._table[column].get((iteration, rank), 0)

    def rank_mean(self, rank: int, column: str) -> int:
        """Return a rank's figure, mean per diagnosed iteration."""
        return mean_int(self.value(rank, i, column) for i in self.iterations)

    def median_mean(self, column: str, *, ranks: Iterable[int] | None = None) -> int:
        """Return the mean over iterations of the median over ``ranks`` (default: all) of a figure."""
        chosen = list(self.ranks if ranks is None else ranks)
        if not chosen:
            return 0
        return mean_int(median(self.value(r, i, column) for r in chosen) for i in self.iterations)

    def min_mean(self, column: str) -> int:
        """Return the mean over iterations of the smallest value over ranks of a figure."""
        return mean_int(min(self.value(r, i, column) for r in self.ranks) for i in self.iterations)

    def share(self, ns: float) -> float:
        """Return ``ns`` as a share of the measured step (0 when the step is 0)."""
        return ns / self.step_ns if self.step_ns > 0 else 0.0

    @property
    def _table(self) -> dict[str, dict[tuple[int | None, int], int]]:
        cached: dict[str, dict[tuple[int | None, int], int]] | None = self.__dict__.get("_cache")
        if cached is None:
            cached = {c: {} for c in _COLUMNS[2:]}
            for row in self.rows.iter_rows(named=True):
                key = (row["iteration"], row["rank"])
                for c in _COLUMNS[2:]:
                    cached[c][key] = int(row[c] or 0)
            object.__setattr__(self, "_cache", cached)
        return cached


def cut_iterations(overlap: Overlap) -> dict[int, tuple[int, int, int]]:
    """Return the iterations the profiler's window cut: per iteration, the rank, its step, its median step.

    A rank's first or last ``ProfilerStep`` iteration (of two or more) is cut when its step is
    shorter than :data:`CUT_STEP_SHARE` of the median step of the rank's other iterations, or when it
    has no compute while they have some: the profiler started or stopped inside it (a 49 µs
    fragment after a 9.29 ms step). ``{iteration: (rank, step_ns, median_ns)}``, the rank whose
    fragment is shortest.
    """
    rows = (
        overlap.iterations.filter((pl.col("window") == "profiler_step") & pl.col("iteration").is_not_null())
        .filter(pl.col("mode") != "horovod")
        .select("rank", "iteration", "step_ns", "compute_ns")
        .sort("rank", "iteration")
    )
    by_rank: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    for rank, iteration, step, compute in rows.iter_rows():
        by_rank[rank].append((iteration, int(step or 0), int(compute or 0)))
    cut: dict[int, tuple[int, int, int]] = {}
    for rank, its in by_rank.items():
        if len(its) < 2:
            continue
        for k in {0, len(its) - 1}:
            iteration, step, compute = its[k]
            others = [it for j, it in enumerate(its) if j != k]
            typical = round(median(s for _, s, _ in others))
            no_compute = compute == 0 and median(c for _, _, c in others) > 0
            if (step < CUT_STEP_SHARE * typical or no_compute) and (
                iteration not in cut or step < cut[iteration][1]
            ):
                cut[iteration] = (rank, step, typical)
    return cut


def choose_iterations(overlap: Overlap) -> tuple[pl.DataFrame, tuple[int | None, ...]]:
    """Return the rows to diagnose and their iterations.

    The iterations every rank with known exposure (Horovod-only ranks have none) chose
    (:func:`chosen_by_rank`), less those the profiler's window cut (:func:`cut_iterations`).
    Without iterations common to every rank, each rank's whole trace is one window (iteration None).
    """
    known = overlap.iterations.filter(pl.col("mode") != "horovod")
    ranks = set(known.get_column("rank").to_list())
    chosen = chosen_by_rank(overlap.windows.filter(pl.col("rank").is_in(sorted(ranks))), overlap.collectives)
    common = sorted(set.intersection(*(set(chosen.get(r, [])) for r in ranks))) if ranks else []
    cut = cut_iterations(overlap)
    if any(i not in cut for i in common):
        common = [i for i in common if i not in cut]
    if not common:
        whole = known.filter(pl.col("window") == "whole_trace")
        return whole.select(_COLUMNS), (None,)
    rows = known.filter((pl.col("window") == "profiler_step") & pl.col("iteration").is_in(common))
    return rows.select(_COLUMNS).sort("iteration", "rank"), tuple(common)


def facts_of(
    overlap: Overlap,
    *,
    match: CollectiveMatch | None = None,
    chosen: tuple[pl.DataFrame, tuple[int | None, ...]] | None = None,
) -> Facts:
    """Return the facts of an overlap analysis (and of its collectives matched across ranks).

    Parameters
    ----------
    overlap
        The overlap analysis.
    match
        :func:`~timeline.analysis.collectives.match_collectives` of the same events (a
        ``CollectiveMatch``), or None with one rank, or when cross-rank times cannot be trusted.
    chosen
        :func:`choose_iterations` of ``overlap``, when already computed.
    """
    rows, iterations = choose_iterations(overlap) if chosen is None else chosen
    step = 0
    if rows.height:
        per_iteration = rows.group_by("iteration").agg(pl.col("step_ns").median().alias("_t"))
        step = round(median(per_iteration.get_column("_t").to_list()))
    caused: dict[tuple[int | None, int], int] = defaultdict(int)
    waited: dict[tuple[int | None, int], int] = defaultdict(int)
    late: dict[tuple[int | None, int], int] = defaultdict(int)
    behind: dict[tuple[int | None, int], int] = defaultdict(int)
    arrivals: dict[int, tuple[int | None, int, tuple[tuple[int, int], ...]]] = {}
    if match is not None:
        arrivals = _waits(match, set(iterations), caused, waited, (late, behind))
    return Facts(
        rows=rows,
        iterations=iterations,
        step_ns=step,
        caused=dict(caused),
        waited=dict(waited),
        late=dict(late),
        behind=dict(behind),
        arrivals=arrivals,
    )


def _waits(
    match: CollectiveMatch,
    iterations: set[int | None],
    caused: dict[tuple[int | None, int], int],
    waited: dict[tuple[int | None, int], int],
    lateness: tuple[dict[tuple[int | None, int], int], dict[tuple[int | None, int], int]],
) -> dict[int, tuple[int | None, int, tuple[tuple[int, int], ...]]]:
    """Sum, per iteration and rank, the wait caused and spent at synchronising collectives; the lateness.

    Returns each collective's iteration, last rank and starts (:attr:`Facts.arrivals`).
    """
    sync = match.collectives.filter(pl.col("synchronising") & (pl.col("ranks") > 1)).select(
        "collective_id", "last_rank"
    )
    per_rank = match.ranks.join(sync, on="collective_id", how="inner").select(
        "collective_id", "iteration", "rank", "last_rank", "wait_ns", "start_ns"
    )
    whole = iterations == {None}
    starts: dict[int, list[tuple[int, int]]] = defaultdict(list)
    meta: dict[int, tuple[int | None, int]] = {}
    for collective, iteration, rank, last, wait, start in per_rank.iter_rows():
        key_iteration = None if whole else iteration
        if key_iteration not in iterations:
            continue
        waited[(key_iteration, rank)] += int(wait or 0)
        if rank != last:
            caused[(key_iteration, last)] += int(wait or 0)
        starts[collective].append((rank, start))
        meta[collective] = (key_iteration, last)
    late, behind = lateness
    for collective, members in starts.items():
        key_iteration, last = meta[collective]
        own = [s for r, s in members if r == last]
        others = [s for r, s in members if r != last]
        if own and others:
            key = (key_iteration, last)
            late[key] = max(late.get(key, 0), max(0, own[0] - max(others)))
        middle = median(s for _r, s in members)
        for rank, start in members:
            if start > middle:
                key = (key_iteration, rank)
                behind[key] = max(behind.get(key, 0), round(start - middle))
    return {c: (meta[c][0], meta[c][1], tuple(members)) for c, members in starts.items()}
