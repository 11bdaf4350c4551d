"""The replays a diagnosis makes: the graph of its iterations, re-timed with each fix.

Takes the run's what-if graph (:class:`~timeline.whatif.graph.TraceGraph`) and the diagnosed
iterations; gives, for a changed graph (:mod:`timeline.whatif.transform`) or a scenario
(:class:`~timeline.whatif.engine.Scenario`), the predicted step:

``predicted = measured step × replayed step with the fix / replayed step as measured``

each replayed step being the mean over the diagnosed iterations of the median over ranks of the
replayed window (:func:`~timeline.whatif.engine.window_lengths`). The self-replay reproduces the
measured step (``docs/whatif.md``), so the ratio is the replay's prediction; it also cancels what a
graph restricted to a few iterations loses at their edges. Also: the idle intervals of a rank's
windows (what a contraction removes first) and the bandwidth at which communication hides.
"""

from __future__ import annotations

import bisect
import itertools
import math
import operator
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import msgspec

from timeline.analysis.intervals import total_ns
from timeline.diagnosis.thresholds import HIDE_TOLERANCE
from timeline.stats import median

if TYPE_CHECKING:
    from timeline.whatif.bucketing import BucketPolicy
    from timeline.whatif.engine import Efficiency, Prediction, Scenario
    from timeline.whatif.graph import TraceGraph

__all__ = ["Intervals", "Replayer", "WindowCut"]

Intervals = tuple[tuple[int, int], ...]
"""Disjoint ``[start_ns, end_ns)`` intervals, by start."""


_INFINITE_GBPS = 1e9
"""A link this fast makes every transfer's bandwidth term vanish (its latency term stays)."""


class WindowCut(msgspec.Struct, frozen=True):
    """Time to remove from one rank's window: idle first (earliest first), then compute.

    Attributes
    ----------
    rank, window_id
        The window.
    idle_ns
        Idle time to remove (at most the window's idle intervals).
    compute_ns
        Compute time to remove: each compute interval of the window loses the same fraction, from
        its end.
    before_ns
        Time to remove just before the window starts: the whole window happens that much earlier.
    exact
        Intervals removed as they are (the device's launch gaps).
    spare
        Intervals the idle time is not taken from (launch gaps, when the idle removed is another kind).
    compute_until
        ``(boundary_ns, amount)`` pairs, by boundary: ``amount`` of the compute time is taken from
        the compute between the previous boundary (the window's start) and this one, each interval
        there losing the same fraction, from its end (the work that made a rank late at the
        collective starting at the boundary); the rest of ``compute_ns`` from every compute interval
        of the window, as without them.
    """

    rank: int
    window_id: int
    idle_ns: int
    compute_ns: int = 0
    before_ns: int = 0
    exact: tuple[tuple[int, int], ...] = ()
    spare: tuple[tuple[int, int], ...] = ()
    compute_until: tuple[tuple[int, int], ...] = ()


class Replayer:
    """Replays of a graph restricted to the diagnosed iterations.

    Parameters
    ----------
    graph
        The run's graph (with the link, when known).
    iterations
        The diagnosed iterations (``(None,)``: the whole graph, which has no iterations).
    step_ns
        The measured step the predictions scale.
    """

    def __init__(self, graph: TraceGraph, iterations: Sequence[int | None], step_ns: int) -> None:
        from timeline.whatif.engine import window_rows
        from timeline.whatif.transform import restrict

        wanted = [i for i in iterations if i is not None]
        self.graph = restrict(graph, wanted) if wanted else graph
        self.step_ns = step_ns
        self._rows = window_rows(self.graph)
        self._replayed: dict[Scenario | None, float] = {}  # the graph's own replays, by scenario
        self.windows = {
            row["window_id"]: row
            for row in self.graph.windows.select(
                "window_id", "rank", "iteration", "start_ns", "end_ns"
            ).iter_rows(named=True)
        }
        self.self_step = self.replayed_step()

    @property
    def error_ratio(self) -> float:
        """How far the self-replay is from the measured step (the median over iterations of its windows)."""
        measured = self._step({w: r["end_ns"] - r["start_ns"] for w, r in self.windows.items()})
        return abs(self.self_step - measured) / measured if measured > 0 else 0.0

    def _step(self, lengths: Mapping[int, int]) -> float:
        """Return the mean over iterations of the median over ranks: ``timeline whatif``'s iteration time.

        The replayed steps a prediction's ratio is made of are aggregated as the what-if report does,
        so that a finding's ratio is ``timeline whatif``'s for the same fix.
        """
        by_iteration: dict[int | None, list[int]] = defaultdict(list)
        for window_id, row in self.windows.items():
            if window_id in lengths:
                by_iteration[row["iteration"]].append(lengths[window_id])
        medians = [round(median(v)) for v in by_iteration.values()]
        return sum(medians) / len(medians) if medians else 0.0

    def replayed_step(self, graph: TraceGraph | None = None, scenario: Scenario | None = None) -> float:
        """Return the replayed step (median over iterations of the median over ranks) of a graph.

        The graph's own replay of a scenario is made once (rules and the bandwidth search ask again).
        """
        from timeline.whatif.engine import window_lengths

        if graph is not None:  # a changed graph: its windows are recomputed (a contraction moves them)
            return self._step(window_lengths(graph, scenario=scenario))
        if scenario not in self._replayed:
            self._replayed[scenario] = self._step(
                window_lengths(self.graph, scenario=scenario, windows=self._rows)
            )
        return self._replayed[scenario]

    def predict(self, graph: TraceGraph | None = None, scenario: Scenario | None = None) -> int:
        """Return the predicted step of a changed graph or a scenario, scaled to the measured step."""
        if self.self_step <= 0:
            return self.step_ns
        return round(self.step_ns * self.replayed_step(graph, scenario) / self.self_step)

    def predict_buckets(
        self, policies: Sequence[BucketPolicy], scenario: Scenario | None = None
    ) -> list[tuple[int, Prediction]]:
        """Return, per bucketing policy, the predicted step (scaled) and the replay it comes from.

        The replays are :func:`timeline.whatif.sweeps.predict_buckets`'s, what ``timeline whatif
        --buckets`` prints: the ``Prediction``'s ``iteration_ns`` is its figure for these iterations.
        """
        from timeline.whatif.sweeps import predict_buckets

        out = []
        for prediction in predict_buckets(self.graph, policies, scenario=scenario):
            lengths = dict(
                zip(
                    prediction.windows.get_column("window_id").to_list(),
                    prediction.windows.get_column("predicted_ns").to_list(),
                    strict=True,
                )
            )
            scaled = (
                self.step_ns if self.self_step <= 0 else self.step_ns * self._step(lengths) / self.self_step
            )
            out.append((round(scaled), prediction))
        return out

    def single_step(self) -> int:
        """Return ``T_single`` scaled likewise: the step without any communication."""
        from timeline.whatif.engine import Scenario

        return self.predict(scenario=Scenario(communication=False))

    # -- contractions -----------------------------------------------------------------------------

    def window_of(self, rank: int, iteration: int | None) -> int | None:
        """Return the window id of a rank's diagnosed iteration, or None."""
        for window_id, row in self.windows.items():
            if row["rank"] == rank and row["iteration"] == iteration:
                return int(window_id)
        return None

    def contracted(self, cuts: Sequence[WindowCut]) -> TraceGraph:
        """Return the graph with each cut's idle and compute time removed (:func:`contract`).

        The idle intervals are taken earliest first until the cut's idle time is reached.
        """
        from timeline.whatif.transform import contract

        removals: dict[int, list[tuple[int, int]]] = defaultdict(list)
        for cut in cuts:
            row = self.windows.get(cut.window_id)
            if row is None:
                continue
            start, end = row["start_ns"], row["end_ns"]
            if cut.idle_ns > 0:
                busy = itertools.chain(
                    self._clipped("compute", cut.rank, start, end),
                    self._clipped("ops", cut.rank, start, end),
                    cut.spare,
                )
                removals[cut.rank] += _first_idle(busy, start, end, cut.idle_ns)
            removals[cut.rank] += list(cut.exact)
            if cut.compute_ns > 0:
                compute = self._clipped("compute", cut.rank, start, end)
                left, since = cut.compute_ns, start
                for boundary, amount in cut.compute_until:
                    segment = [
                        (max(a, since), min(b, boundary)) for a, b in compute if b > since and a < boundary
                    ]
                    taken = _tails(segment, min(amount, left))
                    removals[cut.rank] += taken
                    left -= total_ns(taken)
                    compute = _without(compute, taken)
                    since = max(since, boundary)
                removals[cut.rank] += _tails(compute, left)
            before = min(cut.before_ns, self._idle_before(cut.rank, start))
            if before > 0:
                removals[cut.rank].append((start - before, start))
        return contract(self.graph, dict(removals))

    def late_arrivals(
        self, rank: int, window_id: int, *, group: set[int] | None = None
    ) -> list[tuple[int, int]]:
        """Return the rank's late arrivals in a window: ``(start_ns, late_ns)`` by start.

        One per synchronising collective of the window the rank started after every rank outside
        ``group`` (every other rank when None): its start and how long after the latest of them.
        """
        key = None if group is None else tuple(sorted(group))
        cache: dict[object, dict[tuple[int, int | None], list[tuple[int, int]]]] = self.__dict__.setdefault(
            "_arrivals", {}
        )
        if key not in cache:
            arrivals: dict[tuple[int, int | None], list[tuple[int, int]]] = defaultdict(list)
            ops = {o.op_id: o for o in self.graph.ops}
            for instance in self.graph.instances:
                if not instance.synchronising:
                    continue
                members = [ops[i] for i in instance.ops if i in ops]
                for o in members:
                    outside = [
                        m.start_ns
                        for m in members
                        if m.op_id != o.op_id and (group is None or m.rank not in group)
                    ]
                    if outside and o.start_ns > max(outside):
                        arrivals[(o.rank, o.window_id)].append((o.start_ns, o.start_ns - max(outside)))
            for found in arrivals.values():
                found.sort()
            cache[key] = arrivals
        return list(cache[key].get((rank, window_id), ()))

    def dispatch_gaps(self, rank: int, window_id: int, max_gap_ns: int) -> tuple[tuple[int, int], ...]:
        """Return the short gaps between a rank's activities inside one of its windows, in order.

        The gaps of at most ``max_gap_ns`` between two busy blocks (compute intervals and
        collectives) that both lie in the window; the gap before the window's first activity is
        never one of them.
        """
        row = self.windows.get(window_id)
        if row is None:
            return ()
        start, end = row["start_ns"], row["end_ns"]
        busy = sorted(
            itertools.chain(
                self._clipped("compute", rank, start, end), self._clipped("ops", rank, start, end)
            )
        )
        gaps: list[tuple[int, int]] = []
        at: int | None = None
        for a, b in busy:
            if b <= a:
                continue
            if at is not None and at < a <= at + max_gap_ns:
                gaps.append((at, a))
            at = b if at is None else max(at, b)
        return tuple(gaps)

    def _idle_before(self, rank: int, start: int) -> int:
        """Return how long the rank was idle just before ``start``: since its last compute or collective.

        A cut before a window takes only that time: earlier, the rank's time belongs to another window
        (contracting it would move that window's work). Unbounded (the window's start) when nothing
        of the rank starts before it.
        """
        ends = []
        for kind in ("compute", "ops"):
            starts, kind_ends = self._by_rank(kind, rank)
            ends += kind_ends[: bisect.bisect_left(starts, start)]  # those that start before it
        return max(0, start - max(ends)) if ends else start

    def _clipped(self, kind: str, rank: int, start: int, end: int) -> list[tuple[int, int]]:
        """Return a rank's compute intervals or collectives that overlap ``[start, end)``, clipped, by start.

        Compute intervals are disjoint (a union); collectives may overlap each other.
        """
        starts, ends = self._by_rank(kind, rank)
        last = bisect.bisect_left(starts, end)
        if kind != "compute":
            spans = zip(starts[:last], ends[:last], strict=True)
            return [(max(a, start), min(b, end)) for a, b in spans if b > start]
        # disjoint and by start: only the first can end by ``start``, and only the first and last
        # need clipping (the others lie inside the span)
        first = max(0, bisect.bisect_right(starts, start) - 1)
        if first < last and ends[first] <= start:
            first += 1
        clipped = list(zip(starts[first:last], ends[first:last], strict=True))
        if clipped:
            clipped[0] = (max(clipped[0][0], start), clipped[0][1])
            clipped[-1] = (clipped[-1][0], min(clipped[-1][1], end))
        return clipped

    def _by_rank(self, kind: str, rank: int) -> tuple[list[int], list[int]]:
        """Return a rank's compute intervals or collectives, sorted by start: their starts and ends."""
        cache: dict[str, dict[int, tuple[list[int], list[int]]]] | None = self.__dict__.get("_rank_cache")
        if cache is None:
            compute = self.graph.compute
            cache = {
                "compute": _by_start(
                    *(compute.get_column(c).to_list() for c in ("rank", "start_ns", "end_ns"))
                ),
                "ops": _by_start(
                    [o.rank for o in self.graph.ops],
                    [o.start_ns for o in self.graph.ops],
                    [o.end_ns for o in self.graph.ops],
                ),
            }
            self.__dict__["_rank_cache"] = cache
        return cache[kind].get(rank, ([], []))

    # -- the bandwidth that hides communication ---------------------------------------------------

    def hide_bandwidth_gbps(self, *, rtol: float = 0.25, efficiency: Efficiency = "full") -> float | None:
        """Return the link (Gbit/s) at which the step is within 1 % of an infinite link's.

        ``efficiency="full"``: every collective uses the whole link (the verdict's hide bandwidth);
        ``"observed"``: each keeps the share of the link it reached (``slow_link``'s faster link,
        which needs the measured link on the graph).

        The search starts from the bandwidth that would carry the diagnosed iterations' bits in
        their measured step (below it the link alone takes longer than the step),
        goes up a decade at a time until the step is within :data:`HIDE_TOLERANCE` of the step on an
        infinitely fast link, then bisects that decade on a log scale to ``rtol``. None when no
        collective has bytes (nothing scales with the link).
        """
        from timeline.whatif.engine import Scenario

        bits = self._bits()
        if bits <= 0:
            return None
        full = Scenario(efficiency=efficiency, bandwidth_gbps=_INFINITE_GBPS)
        target = self.replayed_step(scenario=full) * (1 + HIDE_TOLERANCE)

        def hidden(gbps: float) -> bool:
            return self.replayed_step(scenario=replace(full, bandwidth_gbps=gbps)) <= target

        # below the bandwidth that carries the bits in the step, the link alone is longer than the step
        low = high = max(bits / max(self.self_step, 1.0), 1e-6)  # bits per ns: Gbit/s
        if hidden(low):
            return low
        while not hidden(high):
            if high >= _INFINITE_GBPS:
                return None
            low, high = high, min(high * 10, _INFINITE_GBPS)
        while high / low > 1 + rtol:
            mid = math.sqrt(low * high)
            if hidden(mid):
                high = mid
            else:
                low = mid
        return high

    def _bits(self) -> float:
        """Return the link bits of the diagnosed collectives, per rank and iteration (bus convention)."""
        from timeline.whatif.costs import bandwidth_bits

        total = 0.0
        for op in self.graph.ops:
            if op.nbytes is not None:
                total += bandwidth_bits(op.collective, op.nbytes, op.group_size)
        iterations = {row["iteration"] for row in self.windows.values()}
        ranks = {row["rank"] for row in self.windows.values()}
        return total / max(1, len(iterations)) / max(1, len(ranks))


def _by_start(
    ranks: Sequence[int], starts: Sequence[int], ends: Sequence[int]
) -> dict[int, tuple[list[int], list[int]]]:
    """Return per rank the intervals' starts and ends, by start (ties in their given order)."""
    spans: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for rank, start, end in zip(ranks, starts, ends, strict=True):
        spans[rank].append((start, end))
    by_rank = {}
    for rank, pairs in spans.items():
        pairs.sort(key=operator.itemgetter(0))
        by_rank[rank] = ([a for a, _ in pairs], [b for _, b in pairs])
    return by_rank


def _first_idle(busy: Iterable[tuple[int, int]], start: int, end: int, amount: int) -> list[tuple[int, int]]:
    """Return the first ``amount`` ns of ``[start, end)`` that no busy interval covers, earliest first.

    ``busy`` in any order, overlapping or not (empty intervals ignored).

    Examples
    --------
    >>> _first_idle([(3, 6), (2, 4), (8, 9)], 0, 10, 5)
    [(0, 2), (6, 8), (9, 10)]
    >>> _first_idle([(3, 6)], 0, 10, 4)
    [(0, 3), (6, 7)]
    """
    out: list[tuple[int, int]] = []
    left, at = amount, start
    if left <= 0 or at >= end:
        return out
    for a, b in sorted(busy):
        if b <= a or b <= at:  # empty, or inside what is already passed
            continue
        if a > at:
            take = min(a, end) - at
            if take >= left:
                out.append((at, at + left))
                return out
            out.append((at, at + take))
            left -= take
        at = b
        if at >= end:
            return out
    if end > at:
        out.append((at, at + min(end - at, left)))
    return out


def _without(
    intervals: Sequence[tuple[int, int]], removed: Sequence[tuple[int, int]]
) -> list[tuple[int, int]]:
    """Return disjoint ``intervals`` less the ``removed`` parts (each inside one of them), in order.

    Examples
    --------
    >>> _without([(0, 10), (20, 30)], [(6, 10), (25, 30)])
    [(0, 6), (20, 25)]
    """
    out = []
    cuts = sorted(removed)
    for a, b in intervals:
        at = a
        for c, d in cuts:
            if d <= a or c >= b:
                continue
            if c > at:
                out.append((at, c))
            at = max(at, d)
        if at < b:
            out.append((at, b))
    return out


def _tails(intervals: Sequence[tuple[int, int]], amount: int) -> list[tuple[int, int]]:
    """Return the same fraction of each interval, from its end, adding up to ``amount`` ns (at most all)."""
    total = total_ns(intervals)
    if amount <= 0 or total <= 0:
        return []
    fraction = min(1.0, amount / total)
    return [(b - round((b - a) * fraction), b) for a, b in intervals if b > a]
