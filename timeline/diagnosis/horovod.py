"""The diagnosis of a Horovod timeline alone: what the timeline supports, and what it cannot tell.

Takes a trace whose only events are a Horovod timeline; gives a
:class:`~timeline.diagnosis.diagnosis.Diagnosis`. A timeline records rank 0's operations and every
rank's readiness ticks, but no compute, so:

- ``straggler``: the negotiations' readiness ticks show who the others wait for
  (:func:`~timeline.analysis.horovod_phases.compute_negotiation_wait`); its gain is a bound, the
  union of the intervals in which the others had submitted a tensor and waited for it;
- ``slow_link`` / ``link_underused``: the fused batches' wire time against the link, replayed on the
  graph derived from the timeline (:mod:`timeline.whatif.horovod_graph`);
- ``bucketing``: fusion and cycle time, a replay sweep of Horovod's fusion policy.

What needs the framework's trace (exposed communication, input stalls, launch gaps, overlap with
the backward pass) is said in the notes.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

import polars as pl

from timeline.analysis.horovod_phases import analyze_horovod
from timeline.analysis.intervals import merged, total_ns
from timeline.diagnosis.context import Context, finding, predicted
from timeline.diagnosis.facts import Facts, horovod_only, mean_int, replayed_iterations
from timeline.diagnosis.thresholds import (
    LINK_UNDERUSED_RATIO,
    MIN_GAIN,
    MIN_SHARE,
    SLOW_RANK_SHARE,
)
from timeline.diagnosis.verdict import Diagnosis
from timeline.errors import TimelineError
from timeline.results.findings import COMMUNICATION_CAUSES, Finding, ranked
from timeline.stats import median
from timeline.units import format_ns

if TYPE_CHECKING:
    from timeline.analysis.overlap import Overlap
    from timeline.diagnosis.replays import Replayer
    from timeline.trace import Trace

__all__ = ["FUSION_POLICIES", "HOROVOD_NOTES", "diagnose_horovod", "horovod_only"]

HOROVOD_NOTES = (
    "a Horovod timeline has no compute: exposed communication, input_stall, launch_bound, imbalance and "
    "no_overlap need the framework's trace",
    "the step is the period of the training loop derived from the timeline (the all-reduce tensor "
    "negotiated most often), or the whole timeline without one",
)
"""What a Horovod timeline alone cannot tell the diagnosis."""

_EXAMINED = ("straggler", "bucketing", "slow_link", "link_underused")
"""What a Horovod timeline alone lets the diagnosis examine (the notes say why not the others)."""

FUSION_POLICIES = ((64, 1.0), (64, 5.0), (128, 5.0), (16, 1.0))
"""``bucketing`` on a Horovod timeline: the fusion threshold (MiB) and cycle time (ms) replayed."""


def diagnose_horovod(trace: Trace, *, link_gbps: float | None = None) -> Diagnosis:
    """Return the diagnosis of a Horovod timeline alone (findings with the notes of what it lacks)."""
    from timeline.analysis.horovod_phases import framework_advice, horovod_framework

    events = trace.events
    first, *rest = HOROVOD_NOTES
    notes = [f"{first} ({framework_advice(horovod_framework(events))})", *rest]
    analysis = analyze_horovod(events, link_gbps=link_gbps)
    replayer, facts = _replays(trace, link_gbps, notes)
    if facts is None:
        return Diagnosis(findings=(), communication_bound=False, summary=_empty(), notes=tuple(notes))
    context = Context(
        facts=facts,
        overlap=_no_overlap(),
        events=events,
        match=None,
        replays=lambda: replayer,
        link_gbps=link_gbps,
        notes=notes,
    )
    totals = analysis.totals.row(0, named=True)
    found = [
        _straggler(context, analysis.negotiation),
        _link(context, totals),
        _fusion(context),
    ]
    findings = ranked(f for f in found if f is not None)
    top = next((f for f in findings if f.predicted_gain_ratio is not None), None)
    bound = top is not None and top.cause in COMMUNICATION_CAUSES
    hide = replayer.hide_bandwidth_gbps() if replayer is not None else None
    return Diagnosis(
        findings=tuple(findings),
        communication_bound=bound,
        summary=_summary(facts, top, totals),
        step_ns=facts.step_ns,
        iterations=None
        if facts.iterations == (None,)
        else tuple(i for i in facts.iterations if i is not None),
        model_intensity_ns_per_byte=None,
        hide_bandwidth_gbps=hide,
        exposed_comm_ratio=None,
        link_gbps=link_gbps,
        replay_error_ratio=None if replayer is None else replayer.error_ratio,
        notes=tuple(notes),
        examined=tuple(
            c for c in _EXAMINED if c not in context.unexamined and (replayer is not None or c == "straggler")
        ),
    )


def _empty() -> str:
    return "Nothing to diagnose: the Horovod timeline holds no operation to time."


def _no_overlap() -> Overlap:
    from timeline.analysis.overlap import Overlap
    from timeline.schema import (
        COLLECTIVE_EXPOSURE_SCHEMA,
        ITERATION_OVERLAP_SCHEMA,
        ITERATIONS_SCHEMA,
        RANK_OVERLAP_SCHEMA,
    )

    return Overlap(
        ranks=RANK_OVERLAP_SCHEMA.to_frame(),
        iterations=ITERATION_OVERLAP_SCHEMA.to_frame(),
        collectives=COLLECTIVE_EXPOSURE_SCHEMA.to_frame(),
        windows=ITERATIONS_SCHEMA.to_frame(),
    )


def _replays(trace: Trace, link_gbps: float | None, notes: list[str]) -> tuple[Replayer | None, Facts | None]:
    """Return the timeline's derived graph and its windows as facts (step per window, nothing else)."""
    from timeline.diagnosis.replays import Replayer
    from timeline.whatif.graph import trace_graph

    try:
        graph = trace_graph(trace, link_gbps=link_gbps)
    except TimelineError as exc:
        notes.append(f"no replay ({exc})")
        return None, None
    notes.extend(graph.notes)
    windows = graph.windows
    iterations: tuple[int | None, ...] = (None,)
    if graph.has_iterations:
        numbers = replayed_iterations(windows.get_column("iteration").drop_nulls().to_list(), len(graph.ops))
        iterations = tuple(numbers)
        windows = windows.filter(pl.col("iteration").is_in(numbers))
    rows = windows.select(
        "rank",
        "iteration",
        "start_ns",
        "end_ns",
        step_ns=pl.col("end_ns") - pl.col("start_ns"),
        **{
            c: pl.lit(0, dtype=pl.Int64)
            for c in ("compute_ns", "comm_ns", "hidden_comm_ns", "exposed_comm_ns")
        },
        other_busy_ns=pl.lit(0, dtype=pl.Int64),
        idle_ns=pl.lit(0, dtype=pl.Int64),
    )
    if iterations == (None,):
        rows = rows.with_columns(iteration=pl.lit(None, dtype=pl.Int64))
    step = mean_int(rows.get_column("step_ns").to_list())
    facts = Facts(rows=rows, iterations=iterations, step_ns=step)
    if step <= 0:
        return None, None
    return Replayer(graph, iterations, step), facts


def _straggler(context: Context, negotiation: pl.DataFrame) -> Finding | None:
    """Return the rank whose late readiness the others waited for in the negotiations (a bound)."""
    facts = context.facts
    if negotiation.height < 2:
        return None
    caused = dict(
        zip(
            negotiation.get_column("rank").to_list(),
            negotiation.get_column("caused_wait_ns").to_list(),
            strict=True,
        )
    )
    total = sum(caused.values())
    if total <= 0:
        return None
    late = max(sorted(caused), key=lambda r: caused[r])
    share = caused[late] / total
    waited = _waiting_union(context, late)
    if share < SLOW_RANK_SHARE or facts.share(waited) < MIN_SHARE:
        return None
    prediction = predicted(context, facts.step_ns - waited, "bound")
    if prediction.gain_ratio < MIN_GAIN:
        return None
    row = negotiation.filter(pl.col("rank") == late).row(0, named=True)
    return finding(
        "straggler",
        prediction,
        summary=(
            f"rank {late} submits its tensors last ({share:.0%} of the negotiation wait, last in "
            f"{row['times_last']} negotiations): the others wait up to {format_ns(waited)} per iteration "
            "for it"
        ),
        fix=f"find what delays rank {late}'s backward pass or input (its framework trace shows it)",
        ranks=(late,),
        evidence={
            "rank": late,
            "caused_wait_ns": int(row["caused_wait_ns"]),
            "caused_wait_share_ratio": share,
            "times_last": int(row["times_last"]),
            "negotiations": int(row["negotiations"]),
            "others_wait_ns": waited,
        },
    )


def _waiting_union(context: Context, late: int) -> int:
    """Return how long the others waited for ``late`` per iteration, its negotiations unioned.

    Per iteration, the union of ``[median of the other ranks' ticks, the late rank's tick)`` over
    the negotiations it was last in: how long the others had submitted a tensor and waited for it.
    """
    events = context.events
    ticks = events.filter(
        (pl.col("source") == "horovod")
        & (pl.col("kind") == "instant")
        & pl.col("pid").is_not_null()
        & pl.col("rank").is_not_null()
        & pl.col("name").cast(pl.String).str.contains(r"^\d+$")
    ).select("pid", "rank", "start_ns")
    negotiations = (
        events.filter(
            (pl.col("source") == "horovod") & (pl.col("kind") == "negotiation") & pl.col("pid").is_not_null()
        )
        .select("pid", _n0="start_ns", _n1="end_ns")
        .sort("_n0")
    )
    located = (
        ticks.sort("start_ns")
        .join_asof(
            negotiations,
            left_on="start_ns",
            right_on="_n0",
            by="pid",
            strategy="backward",
            check_sortedness=False,
        )
        .filter(pl.col("_n0").is_not_null() & (pl.col("start_ns") <= pl.col("_n1")))
    )
    spans: list[tuple[int, int]] = []
    for (_pid, _n0), group in located.group_by("pid", "_n0"):
        times = dict(
            zip(group.get_column("rank").to_list(), group.get_column("start_ns").to_list(), strict=True)
        )
        others = [t for r, t in times.items() if r != late]
        if late not in times or not others or times[late] < max(others):
            continue
        spans.append((round(median(others)), times[late]))
    return mean_int(_union_in_windows(context, spans).values()) if spans else 0


def _union_in_windows(context: Context, spans: list[tuple[int, int]]) -> dict[int | None, int]:
    """Return the union length of the spans falling in each diagnosed window (by start)."""
    rows = context.facts.rows.select("iteration", "start_ns", "end_ns").iter_rows()
    per: dict[int | None, list[tuple[int, int]]] = defaultdict(list)
    bounds = list(rows)
    for a, b in spans:
        for iteration, w0, w1 in bounds:
            if w0 <= a < w1:
                per[iteration].append((a, min(b, w1)))
                break
    return {iteration: total_ns(merged(per.get(iteration, []))) for iteration, _w0, _w1 in bounds}


def _link(context: Context, totals: dict[str, object]) -> Finding | None:
    """Wire time against the link: ``link_underused`` below half of it, else ``slow_link`` (replayed)."""
    link = context.link_gbps
    if link is None:
        context.note(
            "slow_link and link_underused need the link's bandwidth (--link-gbps): not examined",
            causes=("slow_link", "link_underused"),
        )
        return None
    utilisation = totals.get("link_utilisation_ratio")
    span, wire = totals.get("span_ns"), totals.get("wire_ns")
    if (
        not isinstance(utilisation, float)
        or not isinstance(span, int)
        or not isinstance(wire, int)
        or span <= 0
    ):
        return None
    if wire / span < MIN_SHARE or context.replayer is None:
        return None
    from timeline.whatif.engine import Scenario

    replayer = context.replayer
    underused = utilisation < LINK_UNDERUSED_RATIO
    # slow_link: the link from which it no longer limits the step, at the efficiency the batches reached
    faster = None if underused else replayer.hide_bandwidth_gbps(efficiency="observed")
    if not underused and faster is None:
        return None
    scenario = Scenario(efficiency="full") if underused else Scenario(bandwidth_gbps=faster)
    prediction = predicted(context, replayer.predict(scenario=scenario), "replay")
    if prediction.gain_ratio < MIN_GAIN:
        return None
    verb = "reach only" if underused else "run at"
    return finding(
        "link_underused" if underused else "slow_link",
        prediction,
        summary=(
            f"the fused batches' transfers {verb} {utilisation:.0%} of the {link:g} Gbit/s link; the wire "
            f"is busy {wire / span:.0%} of the timeline"
        ),
        fix="find what keeps transfers below the link (NCCL_DEBUG=INFO, HOROVOD_HIERARCHICAL_ALLREDUCE)"
        if underused
        else f"a faster link: from about {faster:.3g} Gbit/s (replayed) it no longer limits the step; or "
        "less data on it (compression)",
        evidence={
            "link_gbps": link,
            "busbw_gbps": utilisation * link,
            "link_utilisation_ratio": min(utilisation, 1.0),
            "wire_ns": wire,
            "wire_ratio": wire / span,
        }
        | ({} if faster is None else {"faster_link_gbps": faster}),
    )


def _fusion(context: Context) -> Finding | None:
    """Fusion threshold and cycle time: the best of a replay sweep of Horovod's fusion policy."""
    replayer = context.replayer
    if replayer is None or not replayer.graph.gradients:
        return None
    from timeline.whatif.bucketing import FusionBuckets
    from timeline.whatif.engine import Scenario

    policies = [
        FusionBuckets(fusion_bytes=mib * 2**20, cycle_ns=round(ms * 1e6)) for mib, ms in FUSION_POLICIES
    ]
    steps = [replayer.predict(scenario=Scenario(buckets=p)) for p in policies]
    best = min(range(len(policies)), key=lambda k: (steps[k], k))
    prediction = predicted(context, steps[best], "replay")
    if prediction.gain_ratio < MIN_GAIN:
        return None
    ops = replayer.graph.ops
    mib, ms = FUSION_POLICIES[best]
    return finding(
        "bucketing",
        prediction,
        summary=(
            f"{len(ops)} fused batches for {len(replayer.graph.gradients)} tensors; fusion of {mib} MiB "
            f"every {ms:g} ms is predicted to shorten the step"
        ),
        fix=f"HOROVOD_FUSION_THRESHOLD={mib * 2**20} HOROVOD_CYCLE_TIME={ms:g}",
        evidence={
            "batches": len(ops),
            "tensors": len(replayer.graph.gradients),
            "fusion_mib": [p[0] for p in FUSION_POLICIES],
            "cycle_ms": [str(p[1]) for p in FUSION_POLICIES],
            "predicted_step_by_policy_ns": [min(s, context.facts.step_ns) for s in steps],
        },
    )


def _summary(facts: Facts, top: Finding | None, totals: dict[str, object]) -> str:
    step = format_ns(facts.step_ns)
    wire = totals.get("wire_ratio")
    wire_text = f"the wire is busy {wire:.0%} of the timeline" if isinstance(wire, float) else "no wire time"
    if top is None or top.predicted_gain_ratio is None or top.predicted_gain_ratio < MIN_GAIN:
        return (
            f"No cause found that would save {MIN_GAIN:.0%} of the {step} step ({wire_text}); a Horovod "
            "timeline alone cannot tell exposed communication."
        )
    head = "Communication-bound" if top.cause in COMMUNICATION_CAUSES else "Not communication-bound"
    return (
        f"{head}: the largest cause is {top.cause} ({top.summary}); fixing it is predicted to save "
        f"{top.predicted_gain_ratio:.0%} of the {step} step ({wire_text})."
    )
