"""The diagnosis: what limits a job and what would fix it, each fix ranked by the gain the replay predicts.

Takes a loaded trace and its overlap analysis (and the link's bandwidth when known, the what-if
graph when it was built elsewhere); gives a :class:`Diagnosis`: the findings sorted by predicted
gain (:func:`~timeline.results.findings.ranked`), the verdict (``communication_bound``, one
sentence with the share of the step at stake), the job's model intensity and the link bandwidth
at which its communication would hide. ``docs/diagnosis.md`` defines every cause, its rule and
how its gain is computed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import polars as pl

from timeline.analysis.groups import shared_clocks
from timeline.diagnosis.communication import (
    find_bucketing,
    find_compression,
    find_exposed_dimension,
    find_link,
    find_no_overlap,
    gradient_bytes,
)
from timeline.diagnosis.context import Context
from timeline.diagnosis.facts import Facts, choose_iterations, facts_of, horovod_only
from timeline.diagnosis.ranks import find_imbalance, find_input_stall, find_launch_bound, find_straggler
from timeline.diagnosis.thresholds import MIN_GAIN, MIN_SHARE, REPLAY_ERROR
from timeline.diagnosis.verdict import DIAGNOSED_CAUSES, NOTHING, Diagnosis, headline
from timeline.errors import TimelineError
from timeline.results.findings import COMMUNICATION_CAUSES, MEASURED_BASES, Finding, hide_text, ranked
from timeline.trace import world_size_of_files
from timeline.units import format_ns

if TYPE_CHECKING:
    from timeline.analysis.collectives import CollectiveMatch
    from timeline.analysis.overlap import Overlap
    from timeline.diagnosis.replays import Replayer
    from timeline.trace import Trace
    from timeline.whatif.graph import TraceGraph

__all__ = ["PARTIAL_UNEXAMINED", "diagnose", "diagnosis_graph"]


def diagnose(
    trace: Trace,
    overlap: Overlap,
    *,
    match: CollectiveMatch | None,
    link_gbps: float | None = None,
    graph: TraceGraph | Callable[[], TraceGraph] | None = None,
    codec_gbps: float | None = None,
    complete: bool = True,
    launch_gaps: pl.DataFrame | None = None,
    dimensions: Mapping[str, str] | None = None,
    clocks: pl.DataFrame | None = None,
    exposure: pl.DataFrame | None = None,
) -> Diagnosis:
    """Return the diagnosis of a loaded trace.

    Parameters
    ----------
    trace
        The trace (in memory: its events; rank by rank: the communication events, ``complete=False``).
    overlap
        Its overlap analysis.
    match
        Its collectives matched across ranks (:attr:`timeline.run.Run.matched`: the one matching
        every command reads), None without any.
    link_gbps
        The link's one-direction bandwidth, when known (``slow_link``, ``link_underused``).
    graph
        The what-if graph, or a function that builds it; default: built from ``trace`` when it is
        ``complete`` (with every event a replay needs), else no replay.
    codec_gbps
        The compression codec's throughput (encode and decode, each); default: free, an upper bound.
    complete
        Whether ``trace`` holds every event the overlap reads (False rank by rank: without
        ``launch_gaps`` and ``graph`` the launch gaps and the replays are left out, and the notes say so).
    launch_gaps
        The launch-bound gaps of the diagnosed iterations when measured elsewhere (rank by rank:
        :func:`timeline.diagnosis.parts.chosen_launch_gaps` in each task); default: measured here
        when ``trace`` is complete.
    dimensions
        Description → dimension label (``--dimension``), as ``timeline analyze``'s exposure per
        dimension takes them (``exposed_dimension`` names the same dimensions).
    clocks
        Which ranks' times compare (:func:`~timeline.analysis.groups.shared_clocks`), for the group
        attribution of collectives that name no group; default: the ranks of one host.
    exposure
        The exposure per dimension × iteration × rank, when computed already with the same
        ``dimensions`` and ``clocks`` (:func:`timeline.results.dimensions.dimension_exposure_of`:
        ``timeline analyze`` computes it once for its table and this diagnosis); default: computed
        by ``exposed_dimension`` when the events name groups.

    Returns
    -------
    Diagnosis

    Examples
    --------
    >>> import timeline  # doctest: +SKIP
    >>> analysed = timeline.analyze("sample_traces/ddp_gloo")  # doctest: +SKIP
    >>> diagnose(analysed.trace, analysed.overlap).summary  # doctest: +SKIP
    """
    if horovod_only(trace, overlap):
        from timeline.diagnosis.horovod import diagnose_horovod  # a Horovod timeline alone: only then

        return diagnose_horovod(trace, link_gbps=link_gbps)
    notes: list[str] = []
    chosen = choose_iterations(overlap)
    _cut_note(overlap, notes)
    match = _match(trace, match, notes)
    facts = facts_of(overlap, match=match, chosen=chosen)
    if not facts.ranks or facts.step_ns <= 0:
        return Diagnosis(findings=(), communication_bound=False, summary=NOTHING, notes=tuple(notes))
    world = world_size_of_files(trace.files)
    context = Context(
        facts=facts,
        overlap=overlap,
        events=trace.events,
        match=match,
        replays=lambda: _replayer(
            trace, overlap, facts, graph, link_gbps=link_gbps, complete=complete, notes=notes
        ),
        link_gbps=link_gbps,
        codec_gbps=codec_gbps,
        groups=trace.groups,
        clocks=clocks
        if clocks is not None
        else shared_clocks(trace.files, comparable=trace.clock_note is None),
        dimensions=dimensions,
        exposure=exposure,
        notes=notes,
        world_size=world,
    )
    _partial_note(context)
    _launch_gaps(context, trace, complete=complete, gaps=launch_gaps)
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


def _partial_note(context: Context) -> None:
    """Note what a partial run (fewer ranks traced than the job had) leaves unexamined."""
    if context.partial:
        context.note(
            f"a partial run: {len(context.facts.ranks)} of the job's {context.world_size} ranks traced; a "
            "collective's time on them includes waiting for ranks not traced, so no_overlap, "
            "bucketing, compression, slow_link and link_underused are not examined, and a late rank "
            "may be one not traced",
            causes=PARTIAL_UNEXAMINED,
        )


_CLOCKS_NOTE = "the ranks' clocks disagree: straggler and imbalance not examined (align them: --align)"

PARTIAL_UNEXAMINED = ("no_overlap", "bucketing", "compression", "slow_link", "link_underused")
"""The causes a partial run cannot show (their collectives' times include waiting for untraced ranks)."""


def _cut_note(overlap: Overlap, notes: list[str]) -> None:
    """Note the iterations the profiler's window cut, which the measured step leaves out."""
    from timeline.diagnosis.facts import cut_iterations

    for iteration, (rank, step, typical) in sorted(cut_iterations(overlap).items()):
        notes.append(
            f"iteration {iteration} left out: the profiler's window cut it (rank {rank}: {format_ns(step)}, "
            f"its other iterations {format_ns(typical)})"
        )


def _match(trace: Trace, match: CollectiveMatch | None, notes: list[str]) -> CollectiveMatch | None:
    """Return the run's matching of the collectives, or None with one rank or clocks that disagree."""
    if match is None or match.ranks.get_column("rank").n_unique() < 2:
        return None
    if trace.clock_note is not None:
        notes.append(_CLOCKS_NOTE)
        return None
    return match


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
    """Return the replays of the diagnosed iterations, or None (with a note) without a graph."""
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
    parts = diagnosis_parts(trace.events, overlap.windows, chosen, launch_gaps=False)
    return graph_from_parts([parts.graph], files=trace.files, link_gbps=link_gbps)


def _launch_gaps(context: Context, trace: Trace, *, complete: bool, gaps: pl.DataFrame | None) -> None:
    """Set the launch-bound device idle per (iteration, rank) of the GPU ranks, and the gaps themselves."""
    overlap, facts = context.overlap, context.facts
    if "gpu" not in set(overlap.ranks.get_column("mode").to_list()):
        return
    if gaps is None and not complete:
        context.note(
            "read rank by rank: launch_bound not examined (it needs every kernel launch of a rank)",
            causes=("launch_bound",),
        )
        return
    if gaps is None:
        from timeline.diagnosis.facts import chosen_by_rank
        from timeline.diagnosis.parts import chosen_launch_gaps

        gaps = chosen_launch_gaps(
            trace.events, overlap.windows, chosen_by_rank(overlap.windows, overlap.collectives)
        )
    context.launch_gaps, context.launch_intervals = _gaps_by_window(gaps, facts.iterations)


def _gaps_by_window(
    gaps: pl.DataFrame, iterations: tuple[int | None, ...]
) -> tuple[dict[tuple[int | None, int], int], dict[tuple[int | None, int], tuple[tuple[int, int], ...]]]:
    """Return per ``(iteration, rank)`` of the diagnosed iterations the gaps' total and the gaps, in order.

    ``iterations == (None,)``: the whole trace, every gap under iteration None.
    """
    whole = iterations == (None,)
    wanted = [i for i in iterations if i is not None]
    frame = gaps.select("rank", "iteration", "start_ns", "end_ns")
    if whole:
        frame = frame.with_columns(iteration=pl.lit(None, dtype=frame.schema["iteration"]))
    else:
        keep = pl.col("iteration").is_in(wanted)
        frame = frame.filter(keep | pl.col("iteration").is_null() if None in iterations else keep)
    grouped = frame.group_by("iteration", "rank", maintain_order=True).agg(
        _total=(pl.col("end_ns") - pl.col("start_ns")).sum(), _starts="start_ns", _ends="end_ns"
    )
    totals: dict[tuple[int | None, int], int] = {}
    intervals: dict[tuple[int | None, int], tuple[tuple[int, int], ...]] = {}
    for iteration, rank, total, starts, ends in grouped.iter_rows():
        totals[(iteration, rank)] = total
        intervals[(iteration, rank)] = tuple(zip(starts, ends, strict=True))
    return totals, intervals


def _verdict(context: Context, findings: list[Finding]) -> Diagnosis:
    facts = context.facts
    nbytes = gradient_bytes(context)
    compute = facts.median_mean("compute_ns")
    # the link matters only where there is communication: a trace without any never replays for it
    communicates = context.overlap.collectives.height > 0
    replayer = context.replayer if communicates else context.__dict__.get("replayer")
    hide = replayer.hide_bandwidth_gbps() if replayer is not None and communicates else None
    exposed = facts.share(facts.median_mean("exposed_comm_ns"))
    # the verdict rests on what the trace measured: a gain resting on an assumption never decides it
    top = next(
        (f for f in findings if f.predicted_gain_ratio is not None and f.basis in MEASURED_BASES), None
    )
    bound = top is not None and top.cause in COMMUNICATION_CAUSES
    summary = _summary(facts, top, exposed, hide)
    assumed = next((f for f in findings if f.basis == "assumption"), None)
    gain = (top.predicted_gain_ratio or 0.0) if top is not None else 0.0
    if assumed is not None and (assumed.predicted_gain_ratio or 0.0) > gain:
        summary += (
            f" {assumed.cause} would save {assumed.predicted_gain_ratio:.0%}, but only with an assumed "
            "codec speed, which decides nothing here (give yours: --codec-gbps)."
        )
    if context.partial:
        summary = f"{_partial(facts.ranks, context.world_size)} {summary}"
    return Diagnosis(
        findings=tuple(findings),
        communication_bound=bound,
        summary=summary,
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
        ranks=facts.ranks,
        world_size=context.world_size,
    )


def _partial(ranks: tuple[int, ...], world: int | None) -> str:
    """Return the first words of a partial run's verdict: which ranks the diagnosis saw, of how many."""
    return f"Partial run: rank(s) {_ranks_text(ranks)} of {world} traced; this is what they show."


def _ranks_text(ranks: tuple[int, ...]) -> str:
    """Return ranks as ``0-3, 8``."""
    runs: list[list[int]] = []
    for r in sorted(ranks):
        if runs and r == runs[-1][1] + 1:
            runs[-1][1] = r
        else:
            runs.append([r, r])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _summary(facts: Facts, top: Finding | None, exposed: float, hide: float | None) -> str:
    step = format_ns(facts.step_ns)
    if top is None or top.predicted_gain_ratio is None or top.predicted_gain_ratio < MIN_GAIN:
        text = f"No cause found that would save {MIN_GAIN:.0%} of the {step} step"
        if exposed >= MIN_SHARE:
            text += f"; {exposed:.0%} of it is exposed communication that no finding explains"
        return text + "."
    gain = top.predicted_gain_ratio
    if top.cause in COMMUNICATION_CAUSES:
        text = (
            f"Communication-bound: {headline(top)} ({top.cause}); fixing it is predicted to save {gain:.0%}"
        )
        text += f" of the {step} step"
        if hide is not None:
            text += f"; {hide_text(hide)}"
        return text + "."
    text = (
        f"Not communication-bound: {headline(top)} ({top.cause}); fixing it is predicted to save {gain:.0%}"
    )
    text += f" of the {step} step"
    if exposed >= MIN_SHARE:
        if gain >= exposed:
            text += (
                f". {exposed:.0%} of the step is exposed communication, less than that: the network is not "
            )
            text += "the limit"
        else:
            text += f". {exposed:.0%} of the step is exposed communication; no finding puts it on the network"
    return text + "."
