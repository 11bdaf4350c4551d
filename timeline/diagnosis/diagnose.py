"""The diagnosis: what limits a job and what would fix it, each fix ranked by the gain the replay predicts.

Takes a loaded trace and its overlap analysis (and the link's bandwidth when known, the what-if
graph when it was built elsewhere); gives a :class:`Diagnosis`: the findings sorted by predicted
gain (:func:`~timeline.results.findings.ranked`), the verdict (``communication_bound``, one
sentence with the share of the step at stake), the job's model intensity and the link bandwidth
at which its communication would hide. ``docs/diagnosis.md`` defines every cause, its rule and
how its gain is computed.
"""

from __future__ import annotations

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
from timeline.results.findings import COMMUNICATION_CAUSES, Finding, ranked
from timeline.units import format_ns

if TYPE_CHECKING:
    from timeline.analysis.collectives import CollectiveMatch
    from timeline.analysis.overlap import Overlap
    from timeline.diagnosis.replays import Replayer
    from timeline.trace import Trace
    from timeline.whatif.graph import TraceGraph

__all__ = ["NOTHING", "Diagnosis", "diagnose"]

NOTHING = "Nothing to diagnose: no rank's compute and communication were measured."
"""The summary of a diagnosis without a rank to diagnose."""


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
        launch_gaps=_launch_gaps(trace, overlap, facts, complete=complete, notes=notes),
        notes=notes,
    )
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


def _match(trace: Trace, overlap: Overlap, notes: list[str]) -> CollectiveMatch | None:
    """The collectives matched across ranks (None with one rank, or clocks that disagree)."""
    events = trace.events
    comm = events.filter((pl.col("source") == "kineto") & (pl.col("kind") == "communication"))
    if comm.get_column("rank").n_unique() < 2:
        return None
    if trace.clock_note is not None:
        notes.append("the ranks' clocks disagree: straggler and imbalance not examined (align them: --align)")
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
            from timeline.whatif.graph import trace_graph

            built = trace_graph(trace, link_gbps=link_gbps, windows=overlap.windows)
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


def _launch_gaps(
    trace: Trace, overlap: Overlap, facts: Facts, *, complete: bool, notes: list[str]
) -> dict[tuple[int | None, int], int] | None:
    """Launch-bound device idle per (iteration, rank) of the GPU ranks (None when unknown or none)."""
    if "gpu" not in set(overlap.ranks.get_column("mode").to_list()):
        return None
    if not complete:
        notes.append("read rank by rank: launch_bound not examined (it needs every kernel launch of a rank)")
        return None
    from timeline.analysis.launches import compute_launch_gaps

    gaps = compute_launch_gaps(trace.events, overlap.windows)
    whole = facts.iterations == (None,)
    out: dict[tuple[int | None, int], int] = {}
    for rank, iteration, ns in gaps.select("rank", "iteration", "launch_gap_ns").iter_rows():
        key = None if whole else iteration
        if key in facts.iterations:
            out[(key, rank)] = out.get((key, rank), 0) + int(ns)
    return out


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
    )


def _summary(facts: Facts, top: Finding | None, exposed: float, hide: float | None) -> str:
    step = format_ns(facts.step_ns)
    if top is None or top.predicted_gain_ratio is None or top.predicted_gain_ratio < MIN_GAIN:
        text = f"No cause found that would save {MIN_GAIN:.0%} of the {step} step"
        if exposed >= MIN_SHARE:
            text += f"; {exposed:.0%} of it is exposed communication that no finding explains"
        return text + "."
    bound = top.cause in COMMUNICATION_CAUSES
    head = "Communication-bound" if bound else "Not communication-bound"
    text = (
        f"{head}: the largest cause is {top.cause} ({top.summary}); fixing it is predicted to save "
        f"{top.predicted_gain_ratio:.0%} of the {step} step"
    )
    if not bound and exposed >= MIN_SHARE:
        text += f" ({exposed:.0%} of the step is exposed communication, but the network is not the cause)"
    elif bound and hide is not None:
        text += f"; the communication would hide completely at about {hide:.3g} Gbit/s"
    return text + "."
