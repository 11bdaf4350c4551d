"""Causes on the ranks' side: ``straggler``, ``imbalance``, ``input_stall``, ``launch_bound``.

Takes a :class:`~timeline.diagnosis.context.Context`; gives at most one finding per cause, with
its evidence and its prediction: the replay with the rank's (or every rank's) time removed
(:meth:`~timeline.diagnosis.replays.Replayer.contracted`), or, without a graph, the stated bound.
Each rule is defined, with its thresholds, in ``docs/diagnosis.md``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from timeline.analysis.intervals import total_ns
from timeline.diagnosis.context import Context, Prediction, finding, predicted
from timeline.diagnosis.facts import mean_int
from timeline.diagnosis.replays import Intervals, WindowCut
from timeline.diagnosis.thresholds import (
    DISPATCH_GAP_MAX_NS,
    IMBALANCE_LATE_SHARE,
    MIN_GAIN,
    MIN_SHARE,
    SLOW_RANK_SHARE,
)
from timeline.results.findings import Evidence, Finding
from timeline.stats import median
from timeline.units import format_ns

__all__ = ["find_imbalance", "find_input_stall", "find_launch_bound", "find_straggler"]


def _caused_by_rank(context: Context) -> dict[int, int]:
    totals: dict[int, int] = defaultdict(int)
    for (_iteration, rank), wait in context.facts.caused.items():
        totals[rank] += wait
    return dict(totals)


def _excess(context: Context, rank: int, iteration: int | None, column: str) -> int:
    """Return a rank's figure in an iteration beyond the other ranks' median (0 when not beyond)."""
    facts = context.facts
    others = [r for r in facts.ranks if r != rank]
    if not others:
        return 0
    middle = median(facts.value(r, iteration, column) for r in others)
    return max(0, round(facts.value(rank, iteration, column) - middle))


def _late_cut(
    context: Context, rank: int, iteration: int | None, *, median: bool = False
) -> tuple[int, int, int]:
    """How a rank's lateness in an iteration is removed: ``(idle, compute, before the window)``.

    Its lateness (behind the latest other rank, :attr:`~timeline.diagnosis.facts.Facts.late`; with
    ``median``, behind the median rank, :attr:`~timeline.diagnosis.facts.Facts.behind`) comes out
    of its idle beyond the other ranks' median first, then out of its compute beyond theirs, and
    what is left out of the time before its window (it started the iteration late).
    """
    late = (context.facts.behind if median else context.facts.late).get((iteration, rank), 0)
    idle = min(late, _excess(context, rank, iteration, "idle_ns"))
    compute = min(late - idle, _excess(context, rank, iteration, "compute_ns"))
    return idle, compute, late - idle - compute


def _cuts(context: Context, ranks: list[int], *, median: bool = False) -> list[WindowCut]:
    """Return the cuts that make each rank arrive on time at the collectives it was late for.

    Per window
    (with ``median``: no later than the median rank).
    """
    replayer = context.replayer
    assert replayer is not None
    cuts = []
    for rank in ranks:
        for iteration in context.facts.iterations:
            window = replayer.window_of(rank, iteration)
            idle, compute, before = _late_cut(context, rank, iteration, median=median)
            if window is not None and idle + compute + before > 0:
                until = _compute_until(replayer.late_arrivals(rank, window), compute, idle + before)
                cuts.append(WindowCut(rank, window, idle, compute, before, compute_until=until))
    return cuts


def _compute_until(
    arrivals: list[tuple[int, int]], compute: int, earlier: int
) -> tuple[tuple[int, int], ...]:
    """Return where a late rank's excess compute comes from: before each collective it was late for.

    ``arrivals``: ``(start_ns, late_ns)`` by start (:meth:`Replayer.late_arrivals`); ``earlier``: the
    idle and the time before the window already removed (the rank starts that much earlier). At each
    late arrival, what is still late after what was taken before it comes out of the compute before
    it (at most what is left of ``compute``).

    Examples
    --------
    >>> _compute_until([(100, 30), (200, 50), (300, 10)], 60, 10)
    ((100, 20), (200, 20))
    """
    until, taken = [], 0
    for start, late in arrivals:
        take = min(max(0, late - earlier - taken), compute - taken)
        if take > 0:
            until.append((start, take))
            taken += take
    return tuple(until)


def _late_prediction(
    context: Context, ranks: list[int], waited_ns: int, *, median: bool = False
) -> Prediction:
    """Replay with the ranks arriving on time; without a graph, the step minus the others' wait."""
    replayer = context.replayer
    if replayer is not None:
        return predicted(
            context, replayer.predict(replayer.contracted(_cuts(context, ranks, median=median))), "replay"
        )
    return predicted(context, context.facts.step_ns - waited_ns, "bound")


def find_straggler(context: Context) -> Finding | None:
    """One rank caused at least half of the waiting at the synchronising collectives.

    Examined when the others' mean wait for it is at least :data:`MIN_SHARE` of the step.
    """
    facts = context.facts
    totals = _caused_by_rank(context)
    total = sum(totals.values())
    ranks = len(facts.ranks)
    if ranks < 2 or total <= 0:
        return None
    slow = max(sorted(totals), key=lambda r: totals[r])
    share = totals[slow] / total
    others = [r for r in facts.ranks if r != slow]
    iterations = len(facts.iterations)
    # what each other rank lost to it per iteration: the wait it caused, shared among them, at most
    # their exposed communication (waits at collectives in flight together overlap in time)
    waited = min(
        round(totals[slow] / (ranks - 1) / iterations), facts.median_mean("exposed_comm_ns", ranks=others)
    )
    if share < SLOW_RANK_SHARE or facts.share(waited) < MIN_SHARE:
        return None
    late_in = [
        i
        for i in facts.iterations
        if i is not None and max(facts.ranks, key=lambda r: (facts.caused.get((i, r), 0), -r)) == slow
    ]
    prediction = _late_prediction(context, [slow], waited)
    if prediction.gain_ratio < MIN_GAIN:
        return None
    evidence: Evidence = {
        "rank": slow,
        "caused_wait_ns": round(totals[slow] / iterations),
        "caused_wait_share_ratio": share,
        "others_wait_ns": waited,
        "others_exposed_comm_ns": facts.median_mean("exposed_comm_ns", ranks=others),
        "idle_ns": facts.rank_mean(slow, "idle_ns"),
        "others_idle_ns": facts.median_mean("idle_ns", ranks=others),
        "compute_ns": facts.rank_mean(slow, "compute_ns"),
        "others_compute_ns": facts.median_mean("compute_ns", ranks=others),
        "late_ns": mean_int(facts.late.get((i, slow), 0) for i in facts.iterations),
        "excess_idle_ns": mean_int(_excess(context, slow, i, "idle_ns") for i in facts.iterations),
        "excess_compute_ns": mean_int(_excess(context, slow, i, "compute_ns") for i in facts.iterations),
        "started_late_ns": mean_int(_late_cut(context, slow, i)[2] for i in facts.iterations),
        "launch_gap_ns": None
        if context.launch_gaps is None
        else mean_int(context.launch_gap(slow, i) for i in facts.iterations),
        "late_iterations": len(late_in),
        "iterations": iterations,
    }
    cause = _what_it_did(evidence)
    return finding(
        "straggler",
        prediction,
        summary=(
            f"rank {slow} arrives late at the collectives ({share:.0%} of the waiting): each other rank "
            f"waits {format_ns(waited)} per iteration for it; {cause}"
        ),
        fix=f"find what delays rank {slow} before its collectives ({_fix_hint(evidence)}) and remove it",
        ranks=(slow,),
        iterations=tuple(late_in) or None,
        evidence=evidence,
    )


def _what_it_did(evidence: Evidence) -> str:
    late = _int(evidence["late_ns"])
    idle, compute, before = (
        _int(evidence[k]) for k in ("excess_idle_ns", "excess_compute_ns", "started_late_ns")
    )
    parts = []
    if idle:
        parts.append(f"idles {format_ns(idle)} more per iteration than the others")
    if compute:
        parts.append(f"computes {format_ns(compute)} more")
    if before:
        parts.append(f"starts its iterations {format_ns(before)} late")
    said = " and ".join(parts) if parts else "its idle and compute time are no longer than the others'"
    return f"it arrives up to {format_ns(late)} after the others; it {said}"


def _int(value: object) -> int:
    return value if isinstance(value, int) else 0


def _fix_hint(evidence: Evidence) -> str:
    idle, compute, before = (
        _int(evidence[k]) for k in ("excess_idle_ns", "excess_compute_ns", "started_late_ns")
    )
    if before > max(idle, compute):
        return "what it does between iterations: checkpointing, logging, evaluation, a slow data loader"
    if idle >= compute:
        return "its idle time: data loading, host synchronisation, another process on its cores"
    return "its longer compute: a larger batch or shard, a slower or throttled device"


def find_imbalance(context: Context, *, straggler: Finding | None) -> Finding | None:
    """Lateness rotates, or several ranks are late: the waiting matters, fixing one rank would not end it."""
    facts = context.facts
    totals = _caused_by_rank(context)
    total = sum(totals.values())
    ranks = len(facts.ranks)
    if straggler is not None or ranks < 2 or total <= 0:
        return None
    waited = min(round(total / (ranks - 1) / len(facts.iterations)), facts.median_mean("exposed_comm_ns"))
    if facts.share(waited) < MIN_SHARE:
        return None
    behind = {r: mean_int(facts.behind.get((i, r), 0) for i in facts.iterations) for r in facts.ranks}
    all_behind = sum(behind.values())
    late = sorted(r for r, v in behind.items() if all_behind > 0 and v >= IMBALANCE_LATE_SHARE * all_behind)
    prediction = _late_prediction(context, list(facts.ranks), waited, median=True)
    if prediction.gain_ratio < MIN_GAIN or not late:
        return None
    evidence: Evidence = {
        "caused_wait_ns": round(total / len(facts.iterations)),
        "others_wait_ns": waited,
        "late_ranks": late,
        "behind_median_ns_by_rank": [behind[r] for r in late],
        "caused_wait_ns_by_rank": [round(totals.get(r, 0) / len(facts.iterations)) for r in late],
        "compute_spread_ns": mean_int(
            max(facts.value(r, i, "compute_ns") for r in facts.ranks)
            - min(facts.value(r, i, "compute_ns") for r in facts.ranks)
            for i in facts.iterations
        ),
        "iterations": len(facts.iterations),
    }
    return finding(
        "imbalance",
        prediction,
        summary=(
            f"ranks {', '.join(map(str, late))} arrive at the collectives up to "
            f"{format_ns(max(behind[r] for r in late))} after the median rank, by turns or together: "
            f"a rank waits {format_ns(waited)} per iteration for whichever is late"
        ),
        fix="balance the work per rank (batch or shard sizes, sequence lengths, embedding tables) so that "
        "ranks reach each collective together",
        ranks=tuple(late),
        iterations=None,
        evidence=evidence,
    )


def find_input_stall(context: Context) -> Finding | None:
    """Every rank idles (launch gaps, CPU ranks' dispatch gaps left out): data loading, host syncs."""
    facts = context.facts

    def common_idle(dispatch: Mapping[tuple[int | None, int], Intervals]) -> dict[int | None, int]:
        """Per iteration, the idle every rank has, less its launch gaps and these dispatch gaps."""
        return {
            i: min(
                max(
                    0,
                    facts.value(r, i, "idle_ns")
                    - context.launch_gap(r, i)
                    - total_ns(dispatch.get((i, r), ())),
                )
                for r in facts.ranks
            )
            for i in facts.iterations
        }

    # without the dispatch gaps first: they need the graph, which an idle-free job never builds
    if not facts.ranks or facts.share(mean_int(common_idle({}).values())) < MIN_SHARE:
        return None
    dispatch = _dispatch_gaps(context)
    common = common_idle(dispatch)
    stall = mean_int(common.values())
    if facts.share(stall) < MIN_SHARE:
        return None
    if context.replayer is not None:
        replayer = context.replayer
        cuts = [
            WindowCut(
                r,
                window,
                common[i],
                spare=context.launch_intervals.get((i, r), ()) + dispatch.get((i, r), ()),
            )
            for i in facts.iterations
            for r in facts.ranks
            if (window := replayer.window_of(r, i)) is not None and common[i] > 0
        ]
        prediction = predicted(context, replayer.predict(replayer.contracted(cuts)), "replay")
    else:
        prediction = predicted(context, facts.step_ns - stall, "bound")
    if prediction.gain_ratio < MIN_GAIN:
        return None
    idle = facts.median_mean("idle_ns")
    evidence = {
        "idle_ns": idle,
        "common_idle_ns": stall,
        "idle_ratio": facts.share(idle),
        "launch_gap_ns": None if context.launch_gaps is None else _median_launch_gap(context),
        "dispatch_gap_ns": (
            None
            if not dispatch
            else mean_int(
                median(total_ns(dispatch.get((i, r), ())) for r in facts.ranks) for i in facts.iterations
            )
        ),
        "iterations": len(facts.iterations),
    }
    return finding(
        "input_stall",
        prediction,
        summary=(
            f"every rank idles at least {format_ns(stall)} per iteration ({facts.share(stall):.0%} of the "
            "step) outside compute and communication"
        ),
        fix="overlap data loading with compute (more DataLoader workers, pinned memory, prefetching) "
        "and remove host synchronisations from the step",
        ranks=None,
        iterations=None,
        evidence=evidence,
    )


def _dispatch_gaps(context: Context) -> dict[tuple[int | None, int], Intervals]:
    """Return per ``(iteration, rank)`` the dispatch gaps of the CPU-only ranks (:data:`DISPATCH_GAP_MAX_NS`).

    Empty without a graph (the idle is then taken whole) or without CPU-only ranks.
    """
    facts = context.facts
    cpu = {int(r) for r, mode in context.overlap.ranks.select("rank", "mode").iter_rows() if mode == "cpu"}
    if context.replayer is None or not cpu.intersection(facts.ranks):
        return {}
    replayer = context.replayer
    return {
        (i, r): replayer.dispatch_gaps(r, window, DISPATCH_GAP_MAX_NS)
        for i in facts.iterations
        for r in facts.ranks
        if r in cpu and (window := replayer.window_of(r, i)) is not None
    }


def _median_launch_gap(context: Context) -> int:
    facts = context.facts
    return mean_int(median(context.launch_gap(r, i) for r in facts.ranks) for i in facts.iterations)


def find_launch_bound(context: Context) -> Finding | None:
    """Return ``launch_bound``: the device idles between kernels while the host launches them (GPU ranks)."""
    facts = context.facts
    if context.launch_gaps is None or not facts.ranks:
        return None
    gaps = _median_launch_gap(context)
    if facts.share(gaps) < MIN_SHARE:
        return None
    bound = [
        r
        for r in facts.ranks
        if facts.share(mean_int(context.launch_gap(r, i) for i in facts.iterations)) >= MIN_SHARE
    ]
    if context.replayer is not None:
        replayer = context.replayer
        cuts = [
            WindowCut(r, window, 0, exact=context.launch_intervals.get((i, r), ()))
            for i in facts.iterations
            for r in facts.ranks
            if (window := replayer.window_of(r, i)) is not None and context.launch_gap(r, i) > 0
        ]
        prediction = predicted(context, replayer.predict(replayer.contracted(cuts)), "replay")
    else:
        prediction = predicted(context, facts.step_ns - gaps, "bound")
    if prediction.gain_ratio < MIN_GAIN:
        return None
    return finding(
        "launch_bound",
        prediction,
        summary=(
            f"the device waits {format_ns(gaps)} per iteration ({facts.share(gaps):.0%} of the step) in "
            "short gaps for the host to launch the next kernel"
        ),
        fix="launch fewer, larger kernels: CUDA graphs (torch.compile mode='reduce-overhead'), fused "
        "kernels, less Python between launches",
        ranks=tuple(bound) or None,
        iterations=None,
        evidence={
            "launch_gap_ns": gaps,
            "launch_gap_ratio": facts.share(gaps),
            "iterations": len(facts.iterations),
        },
    )
