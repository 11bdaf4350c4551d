"""Causes on the ranks' side: ``straggler``, ``imbalance``, ``input_stall``, ``launch_bound``.

Takes a :class:`~timeline.diagnosis.context.Context`; gives at most one finding per cause, with
its evidence and its prediction: the replay with the rank's (or every rank's) time removed
(:meth:`~timeline.diagnosis.replays.Replayer.contracted`), or, without a graph, the stated bound.
Each rule is defined, with its thresholds, in ``docs/diagnosis.md``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from timeline.analysis.intervals import total_ns
from timeline.diagnosis.context import Context, Prediction, finding, predicted
from timeline.diagnosis.facts import mean_int
from timeline.diagnosis.replays import Intervals, WindowCut
from timeline.diagnosis.thresholds import (
    DISPATCH_GAP_MAX_NS,
    IMBALANCE_LATE_SHARE,
    LATE_TOGETHER,
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


def _excess(
    context: Context, rank: int, iteration: int | None, column: str, *, group: set[int] | None = None
) -> int:
    """Return a rank's figure in an iteration beyond the median of the ranks outside ``group``."""
    facts = context.facts
    others = [r for r in facts.ranks if r != rank and (group is None or r not in group)]
    if not others:
        return 0
    middle = median(facts.value(r, iteration, column) for r in others)
    return max(0, round(facts.value(rank, iteration, column) - middle))


_Lateness = Mapping[tuple[int | None, int], int]
"""``(iteration, rank)`` → how much earlier the rank must arrive (``Facts.late_behind``, ``Facts.behind``)."""


def _late_cut(
    context: Context, rank: int, iteration: int | None, lateness: _Lateness, group: set[int] | None = None
) -> tuple[int, int, int]:
    """How a rank's lateness in an iteration is removed: ``(idle, compute, before the window)``.

    Its lateness (``lateness``: behind the latest rank outside its group,
    :meth:`~timeline.diagnosis.facts.Facts.late_behind`; or behind the median rank,
    :attr:`~timeline.diagnosis.facts.Facts.behind`) comes out of its idle beyond the median of the
    ranks outside ``group`` (every other rank when None) first, then out of its compute beyond
    theirs, and what is left out of the time before its window (it started the iteration late).
    """
    late = lateness.get((iteration, rank), 0)
    idle = min(late, _excess(context, rank, iteration, "idle_ns", group=group))
    compute = min(late - idle, _excess(context, rank, iteration, "compute_ns", group=group))
    return idle, compute, late - idle - compute


def _cuts(context: Context, ranks: list[int], lateness: _Lateness, *, group: bool = False) -> list[WindowCut]:
    """Return the cuts that make each rank arrive on time at the collectives it was late for.

    Per window, by ``lateness``; ``group``: the ranks are late together (their excess is over the
    ranks outside them, their late arrivals behind those ranks' latest start).
    """
    replayer = context.replayer
    assert replayer is not None
    together = set(ranks) if group else None
    cuts = []
    for rank in ranks:
        for iteration in context.facts.iterations:
            window = replayer.window_of(rank, iteration)
            idle, compute, before = _late_cut(context, rank, iteration, lateness, together)
            if window is not None and idle + compute + before > 0:
                arrivals = replayer.late_arrivals(rank, window, group=together)
                until = _compute_until(arrivals, compute, idle + before)
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
    context: Context, ranks: list[int], waited_ns: int, lateness: _Lateness, *, group: bool = False
) -> Prediction:
    """Replay with the ranks arriving on time; without a graph, the step minus the others' wait."""
    replayer = context.replayer
    if replayer is not None:
        cuts = _cuts(context, ranks, lateness, group=group)
        return predicted(context, replayer.predict(replayer.contracted(cuts)), "replay")
    return predicted(context, context.facts.step_ns - waited_ns, "bound")


def _late_together(context: Context, slow: int) -> set[int]:
    """Return the slow rank and the ranks late with it (at least :data:`LATE_TOGETHER` as far behind).

    Mean over the diagnosed iterations of each rank's lateness behind the median rank
    (:attr:`~timeline.diagnosis.facts.Facts.behind`); at least one rank stays outside the group.
    """
    facts = context.facts
    behind = {r: mean_int(facts.behind.get((i, r), 0) for i in facts.iterations) for r in facts.ranks}
    group = {slow}
    if behind[slow] > 0:
        group |= {r for r in facts.ranks if behind[r] >= LATE_TOGETHER * behind[slow]}
    if len(group) >= len(facts.ranks):
        return {slow}
    return group


def find_straggler(context: Context) -> Finding | None:
    """One rank caused at least half of the waiting at the synchronising collectives (and ranks late with it).

    Examined when the others' mean wait for it is at least :data:`MIN_SHARE` of the step. The rank
    is the one :func:`timeline.analysis.stragglers.find_stragglers` calls the slow rank; ranks that
    arrive nearly as late (:func:`_late_together`) are named with it, and the fix replayed brings
    them all to the latest of the other ranks.
    """
    facts = context.facts
    totals = _caused_by_rank(context)
    total = sum(totals.values())
    ranks = len(facts.ranks)
    if ranks < 2 or total <= 0:
        return None
    slow = max(sorted(totals), key=lambda r: totals[r])
    share = totals[slow] / total
    group = _late_together(context, slow)
    others = [r for r in facts.ranks if r not in group]
    iterations = len(facts.iterations)
    # what each other rank lost to the group per iteration: the wait it caused, shared among them, at
    # most their exposed communication (waits at collectives in flight together overlap in time)
    caused = sum(totals.get(r, 0) for r in group)
    waited = min(round(caused / len(others) / iterations), facts.median_mean("exposed_comm_ns", ranks=others))
    if share < SLOW_RANK_SHARE or facts.share(waited) < MIN_SHARE:
        return None
    late_in = [
        i
        for i in facts.iterations
        if i is not None and max(facts.ranks, key=lambda r: (facts.caused.get((i, r), 0), -r)) == slow
    ]
    lateness = _straggler_lateness(context, group)
    prediction = _late_prediction(context, sorted(group), waited, lateness, group=len(group) > 1)
    if prediction.gain_ratio < MIN_GAIN:
        return None
    evidence = _straggler_evidence(context, slow, group, facts.late_behind(group))
    evidence.update(
        caused_wait_ns=round(totals[slow] / iterations),
        caused_wait_share_ratio=share,
        others_wait_ns=waited,
        late_iterations=len(late_in),
    )
    cause = _what_it_did(evidence)
    with_it = sorted(group - {slow})
    together = f", ranks {', '.join(map(str, with_it))} nearly as late" if with_it else ""
    return finding(
        "straggler",
        prediction,
        summary=(
            f"rank {slow} arrives late at the collectives ({share:.0%} of the waiting){together}: each other "
            f"rank waits {format_ns(waited)} per iteration for {'them' if with_it else 'it'}; {cause}"
        ),
        fix=f"find what delays rank {slow} before its collectives ({_fix_hint(evidence)}) and remove it",
        ranks=tuple(sorted(group)),
        iterations=tuple(late_in) or None,
        evidence=evidence,
    )


def _straggler_lateness(context: Context, group: set[int]) -> dict[tuple[int | None, int], int]:
    """Return how much of each straggler's time the fix removes per iteration: its excess, or its lateness.

    Its lateness behind the ranks outside its group (:meth:`~timeline.diagnosis.facts.Facts.late_behind`),
    or, when larger, its idle and compute beyond their median (:func:`_excess`): a rank whose extra
    work is hidden in part behind collectives in flight (DDP's buckets) arrives later than the
    others by less than that work, which the fix (the same work as the others) removes whole.
    """
    facts = context.facts
    together = group if len(group) > 1 else None
    lateness = dict(facts.late_behind(group))
    for rank in group:
        for i in facts.iterations:
            excess = _excess(context, rank, i, "idle_ns", group=together)
            excess += _excess(context, rank, i, "compute_ns", group=together)
            lateness[(i, rank)] = max(lateness.get((i, rank), 0), excess)
    return lateness


def _straggler_evidence(context: Context, slow: int, group: set[int], lateness: _Lateness) -> dict[str, Any]:
    """Return a straggler's evidence: its idle, compute and lateness against the ranks outside its group."""
    facts = context.facts
    others = [r for r in facts.ranks if r not in group]
    its = facts.iterations
    together = group if len(group) > 1 else None
    return {
        "rank": slow,
        "late_together_ranks": sorted(group - {slow}),
        "others_exposed_comm_ns": facts.median_mean("exposed_comm_ns", ranks=others),
        "idle_ns": facts.rank_mean(slow, "idle_ns"),
        "others_idle_ns": facts.median_mean("idle_ns", ranks=others),
        "compute_ns": facts.rank_mean(slow, "compute_ns"),
        "others_compute_ns": facts.median_mean("compute_ns", ranks=others),
        "late_ns": mean_int(lateness.get((i, slow), 0) for i in its),
        "excess_idle_ns": mean_int(_excess(context, slow, i, "idle_ns", group=together) for i in its),
        "excess_compute_ns": mean_int(_excess(context, slow, i, "compute_ns", group=together) for i in its),
        "started_late_ns": mean_int(_late_cut(context, slow, i, lateness, together)[2] for i in its),
        "launch_gap_ns": None
        if context.launch_gaps is None
        else mean_int(context.launch_gap(slow, i) for i in its),
        "iterations": len(its),
    }


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
    prediction = _late_prediction(context, list(facts.ranks), waited, facts.behind)
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
    # without the dispatch gaps first: they need the graph, which an idle-free job never builds
    if not facts.ranks or facts.share(mean_int(_common_idle(context, {}).values())) < MIN_SHARE:
        return None
    dispatch = _dispatch_gaps(context)
    common = _common_idle(context, dispatch)
    stall = mean_int(common.values())
    if facts.share(stall) < MIN_SHARE:
        return None
    prediction = _input_stall_prediction(context, common=common, dispatch=dispatch, stall=stall)
    if prediction.gain_ratio < MIN_GAIN:
        return None
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
        evidence=_input_stall_evidence(context, dispatch=dispatch, stall=stall),
    )


def _common_idle(
    context: Context, dispatch: Mapping[tuple[int | None, int], Intervals]
) -> dict[int | None, int]:
    """Per iteration, the idle every rank has, less its launch gaps and these dispatch gaps."""
    facts = context.facts
    return {
        i: min(
            max(
                0,
                facts.value(r, i, "idle_ns") - context.launch_gap(r, i) - total_ns(dispatch.get((i, r), ())),
            )
            for r in facts.ranks
        )
        for i in facts.iterations
    }


def _input_stall_prediction(
    context: Context,
    *,
    common: Mapping[int | None, int],
    dispatch: Mapping[tuple[int | None, int], Intervals],
    stall: int,
) -> Prediction:
    """Return the step predicted with every rank's common idle removed (the replay, else the bound)."""
    facts = context.facts
    if context.replayer is None:
        return predicted(context, facts.step_ns - stall, "bound")
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
    return predicted(context, replayer.predict(replayer.contracted(cuts)), "replay")


def _input_stall_evidence(
    context: Context, *, dispatch: Mapping[tuple[int | None, int], Intervals], stall: int
) -> Evidence:
    """Return the evidence of ``input_stall``: the idle, the common idle and the gaps left out of it."""
    facts = context.facts
    idle = facts.median_mean("idle_ns")
    return {
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
