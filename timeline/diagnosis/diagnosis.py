"""The diagnosis: what limits a job and what would fix it, each fix ranked by the gain the replay predicts.

Takes a loaded trace and its overlap analysis (and the link's bandwidth when known, the what-if
graph when it was built elsewhere); gives a :class:`Diagnosis`: the findings sorted by predicted
gain (:func:`~timeline.results.findings.ranked`), the verdict (``communication_bound``, one
sentence with the share of the step at stake), the job's model intensity and the link bandwidth
at which its communication would hide. ``docs/diagnosis.md`` defines every cause, its rule and
how its gain is computed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import polars as pl

from timeline.diagnosis.communication import (
    find_bucketing,
    find_compression,
    find_exposed_dimension,
    find_link,
    find_no_overlap,
    gradient_bytes,
)
from timeline.diagnosis.context import Context
from timeline.diagnosis.facts import Facts, facts_of
from timeline.diagnosis.ranks import find_imbalance, find_input_stall, find_launch_bound, find_straggler
from timeline.diagnosis.thresholds import MIN_GAIN, MIN_SHARE, REPLAY_ERROR
from timeline.errors import TimelineError
from timeline.results.findings import CAUSES, COMMUNICATION_CAUSES, Finding, ranked
from timeline.units import format_ns

if TYPE_CHECKING:
    from timeline.analysis.collectives import CollectiveMatch
    from timeline.analysis.overlap import Overlap
    from timeline.diagnosis.replays import Replayer
    from timeline.trace import Trace
    from timeline.whatif.graph import TraceGraph

__all__ = ["DIAGNOSED_CAUSES", "NOTHING", "Diagnosis", "diagnose", "diagnosis_graph", "headline"]

NOTHING = "Nothing to diagnose: no rank's compute and communication were measured."
"""The summary of a diagnosis without a rank to diagnose."""

DIAGNOSED_CAUSES = (
    "straggler",
    "imbalance",
    "input_stall",
    "launch_bound",
    "no_overlap",
    "bucketing",
    "slow_link",
    "link_underused",
    "compression",
    "exposed_dimension",
)
"""The causes this diagnosis examines (the others of :data:`~timeline.results.findings.CAUSES` come
from the Flight Recorder's dumps)."""


@dataclass(frozen=True)
class Diagnosis:
    """What limits a job, and what would fix it.

    Attributes
    ----------
    findings
        Sorted by predicted gain, largest first (:func:`~timeline.results.findings.ranked`).
    communication_bound
        Whether the finding with the largest gain has a communication cause
        (:data:`~timeline.results.findings.COMMUNICATION_CAUSES`).
    summary
        One sentence answering "is communication my bottleneck, and what would fix it?".
    step_ns
        The measured step the gains are shares of (mean over the diagnosed iterations of the
        median over ranks); None without a profiler trace.
    iterations
        The diagnosed ``ProfilerStep`` numbers (None: each rank's whole trace, or none).
    model_intensity_ns_per_byte
        Compute time per gradient byte (the median rank's compute over the bytes of its gradient
        collectives, per iteration); None without gradient collectives.
    hide_bandwidth_gbps
        The link (Gbit/s, used in full) at which the replayed step comes within 1 % of the step
        with an infinitely fast link: beyond it the link no longer matters; None without a replay or
        bytes.
    exposed_comm_ratio
        The median rank's exposed communication over the step.
    link_gbps
        The link's bandwidth used, when known.
    replay_error_ratio
        How far the self-replay of the diagnosed iterations is from the measured step (None: no replay).
    notes
        What the diagnosis left out, and why, one line each.
    examined
        The causes the diagnosis could examine (:data:`DIAGNOSED_CAUSES` minus those it lacked the
        data for): a cause examined without a finding would save less than :data:`MIN_GAIN`.
    """

    findings: tuple[Finding, ...]
    communication_bound: bool
    summary: str
    step_ns: int | None = None
    iterations: tuple[int, ...] | None = None
    model_intensity_ns_per_byte: float | None = None
    hide_bandwidth_gbps: float | None = None
    exposed_comm_ratio: float | None = None
    link_gbps: float | None = None
    replay_error_ratio: float | None = None
    notes: tuple[str, ...] = ()
    examined: tuple[str, ...] = ()


def diagnose(
    trace: Trace,
    overlap: Overlap,
    *,
    link_gbps: float | None = None,
    graph: TraceGraph | Callable[[], TraceGraph] | None = None,
    codec_gbps: float | None = None,
    complete: bool = True,
) -> Diagnosis:
    """Return the diagnosis of a loaded trace.

    Parameters
    ----------
    trace
        The trace (in memory: its events; rank by rank: the communication events, ``complete=False``).
    overlap
        Its overlap analysis.
    link_gbps
        The link's one-direction bandwidth, when known (``slow_link``, ``link_underused``).
    graph
        The what-if graph, or a function that builds it; default: built from ``trace`` when it is
        ``complete`` (with every event a replay needs), else no replay.
    codec_gbps
        The compression codec's throughput (encode and decode, each); default: free, an upper bound.
    complete
        Whether ``trace`` holds every event the overlap reads (False rank by rank: the launch gaps
        and, without ``graph``, the replays are left out, and the notes say so).

    Returns
    -------
    Diagnosis

    Examples
    --------
    >>> import timeline  # doctest: +SKIP
    >>> analysed = timeline.analyze("sample_traces/ddp_gloo")  # doctest: +SKIP
    >>> diagnose(analysed.trace, analysed.overlap).summary  # doctest: +SKIP
    """
    from timeline.diagnosis.horovod import diagnose_horovod, horovod_only

    if horovod_only(trace, overlap):
        return diagnose_horovod(trace, link_gbps=link_gbps)
    notes: list[str] = []
    match = _match(trace, overlap, notes)
    facts = facts_of(overlap, match=match)
    if not facts.ranks or facts.step_ns <= 0:
        return Diagnosis(findings=(), communication_bound=False, summary=NOTHING, notes=tuple(notes))
    replayer = _replayer(trace, overlap, facts, graph, link_gbps=link_gbps, complete=complete, notes=notes)
    context = Context(
        facts=facts,
        overlap=overlap,
        events=trace.events,
        match=match,
        replayer=replayer,
        link_gbps=link_gbps,
        codec_gbps=codec_gbps,
        notes=notes,
    )
    _launch_gaps(context, trace, complete=complete)
    if _CLOCKS_NOTE in notes:
        context.unexamined.update(("straggler", "imbalance"))
    findings = _findings(context)
    return _verdict(context, findings)


def _findings(context: Context) -> list[Finding]:
    """Run every rule (in an order where a rule can see what an earlier one found)."""
    straggler = find_straggler(context)
    no_overlap = find_no_overlap(context)
    found = [
        straggler,
        find_imbalance(context, straggler=straggler),
        find_input_stall(context),
        find_launch_bound(context),
        no_overlap,
        find_bucketing(context, no_overlap=no_overlap),
        find_link(context),
        find_compression(context),
        find_exposed_dimension(context),
    ]
    return ranked(f for f in found if f is not None)


_CLOCKS_NOTE = "the ranks' clocks disagree: straggler and imbalance not examined (align them: --align)"


def _match(trace: Trace, overlap: Overlap, notes: list[str]) -> CollectiveMatch | None:
    """The collectives matched across ranks (None with one rank, or clocks that disagree)."""
    events = trace.events
    comm = events.filter((pl.col("source") == "kineto") & (pl.col("kind") == "communication"))
    if comm.get_column("rank").n_unique() < 2:
        return None
    if trace.clock_note is not None:
        notes.append(_CLOCKS_NOTE)
        return None
    from timeline.analysis.collectives import match_collectives
    from timeline.results.collectives import world_size_of

    return match_collectives(comm, windows=overlap.windows, world_size=world_size_of(trace))


def _replayer(
    trace: Trace,
    overlap: Overlap,
    facts: Facts,
    graph: TraceGraph | Callable[[], TraceGraph] | None,
    *,
    link_gbps: float | None,
    complete: bool,
    notes: list[str],
) -> Replayer | None:
    """The replays of the diagnosed iterations, or None (with a note) when there is no graph."""
    from timeline.diagnosis.replays import Replayer

    if graph is None and not complete:
        notes.append(
            "read rank by rank without the what-if graph: gains are stated bounds, and no_overlap, "
            "bucketing, compression, slow_link and link_underused are not examined"
        )
        return None
    try:
        if graph is None:
            built = diagnosis_graph(trace, overlap, link_gbps=link_gbps)
        else:
            built = graph() if callable(graph) else graph
        replayer = Replayer(built, facts.iterations, facts.step_ns)
    except TimelineError as exc:
        notes.append(f"no replay ({exc}): gains are stated bounds")
        return None
    if replayer.error_ratio > REPLAY_ERROR:
        notes.append(
            f"the self-replay is {replayer.error_ratio:.1%} from the measured step: predictions are "
            "scaled to the measured step, with that much less certainty"
        )
    return replayer


def diagnosis_graph(trace: Trace, overlap: Overlap, *, link_gbps: float | None = None) -> TraceGraph:
    """Return the what-if graph of the iterations the diagnosis replays (:mod:`timeline.diagnosis.parts`).

    The same graph, rank for rank, as a rank-by-rank analysis builds from its tasks' parts.

    Raises
    ------
    TraceContentError
        No rank with compute events.
    """
    from timeline.diagnosis.facts import chosen_by_rank
    from timeline.diagnosis.parts import diagnosis_parts
    from timeline.whatif.graph import graph_from_parts

    chosen = chosen_by_rank(overlap.windows, overlap.collectives)
    parts = diagnosis_parts(trace.events, overlap.windows, chosen)
    return graph_from_parts([parts], files=trace.files, link_gbps=link_gbps)


def _launch_gaps(context: Context, trace: Trace, *, complete: bool) -> None:
    """Set the launch-bound device idle per (iteration, rank) of the GPU ranks, and the gaps themselves."""
    overlap, facts = context.overlap, context.facts
    if "gpu" not in set(overlap.ranks.get_column("mode").to_list()):
        return
    if not complete:
        context.note(
            "read rank by rank: launch_bound not examined (it needs every kernel launch of a rank)",
            causes=("launch_bound",),
        )
        return
    from timeline.analysis.launches import launch_gap_intervals

    gaps = launch_gap_intervals(trace.events)
    windows = facts.rows.select("rank", "iteration", "start_ns", "end_ns").iter_rows()
    spans: dict[int, list[tuple[int | None, int, int]]] = defaultdict(list)
    for rank, iteration, start, end in windows:
        spans[rank].append((iteration, start, end))
    totals: dict[tuple[int | None, int], int] = {}
    intervals: dict[tuple[int | None, int], list[tuple[int, int]]] = defaultdict(list)
    for rank, start, end in gaps.iter_rows():
        for iteration, w0, w1 in spans.get(rank, []):
            if w0 <= start < w1:
                intervals[(iteration, rank)].append((start, end))
                totals[(iteration, rank)] = totals.get((iteration, rank), 0) + end - start
                break
    context.launch_gaps = totals
    context.launch_intervals = {key: tuple(value) for key, value in intervals.items()}


def _verdict(context: Context, findings: list[Finding]) -> Diagnosis:
    facts = context.facts
    replayer = context.replayer
    nbytes = gradient_bytes(context)
    compute = facts.median_mean("compute_ns")
    hide = replayer.hide_bandwidth_gbps() if replayer is not None else None
    exposed = facts.share(facts.median_mean("exposed_comm_ns"))
    top = next((f for f in findings if f.predicted_gain_ratio is not None), None)
    bound = top is not None and top.cause in COMMUNICATION_CAUSES
    return Diagnosis(
        findings=tuple(findings),
        communication_bound=bound,
        summary=_summary(facts, top, exposed, hide),
        step_ns=facts.step_ns,
        iterations=None
        if facts.iterations == (None,)
        else tuple(i for i in facts.iterations if i is not None),
        model_intensity_ns_per_byte=compute / nbytes if nbytes > 0 else None,
        hide_bandwidth_gbps=hide,
        exposed_comm_ratio=exposed,
        link_gbps=context.link_gbps,
        replay_error_ratio=None if replayer is None else replayer.error_ratio,
        notes=tuple(context.notes),
        examined=tuple(c for c in DIAGNOSED_CAUSES if c not in context.unexamined),
    )


_HEADLINES = {
    "straggler": "rank {rank} arrives late at the collectives and the others wait for it",
    "imbalance": "ranks arrive late at the collectives by turns",
    "input_stall": "every rank idles before or between its steps",
    "launch_bound": "the device waits for the host to launch its kernels",
    "no_overlap": "gradient collectives leave after the compute that could have hidden them",
    "bucketing": "the gradient buckets start the communication late or send too many small messages",
    "slow_link": "the link limits the transfers",
    "link_underused": "transfers run far below the link's capacity",
    "compression": "the gradient communication is on the critical path (compression would shorten it)",
    "exposed_dimension": "the {dimension} dimension's communication is exposed",
}


def headline(finding: Finding) -> str:
    """Return the short phrase the verdict names a finding's cause with."""
    template = _HEADLINES.get(finding.cause)
    if template is None:
        return CAUSES[finding.cause]
    evidence = finding.evidence
    return template.format(rank=evidence.get("rank", "?"), dimension=evidence.get("dimension", "?"))


def _summary(facts: Facts, top: Finding | None, exposed: float, hide: float | None) -> str:
    step = format_ns(facts.step_ns)
    if top is None or top.predicted_gain_ratio is None or top.predicted_gain_ratio < MIN_GAIN:
        text = f"No cause found that would save {MIN_GAIN:.0%} of the {step} step"
        if exposed >= MIN_SHARE:
            text += f"; {exposed:.0%} of it is exposed communication that no finding explains"
        return text + "."
    gain = top.predicted_gain_ratio
    if top.cause in COMMUNICATION_CAUSES:
        text = f"Communication-bound: {headline(top)} ({top.cause}); fixing it is predicted to save {gain:.0%}"
        text += f" of the {step} step"
        if hide is not None:
            text += f"; communication would hide completely at about {hide:.3g} Gbit/s"
        return text + "."
    text = f"Not communication-bound: {headline(top)} ({top.cause}); fixing it is predicted to save {gain:.0%}"
    text += f" of the {step} step"
    if exposed >= MIN_SHARE:
        if gain >= exposed:
            text += f". {exposed:.0%} of the step is exposed communication, less than that: the network is not the limit"
        else:
            text += f". {exposed:.0%} of the step is exposed communication; no finding puts it on the network"
    return text + "."
