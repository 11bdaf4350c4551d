"""Causes on the communication's side of the step.

``no_overlap``, ``bucketing``, ``slow_link``, ``link_underused``, ``compression``,
``exposed_dimension``. Takes a :class:`~timeline.diagnosis.context.Context`; gives at most one
finding per cause. The predictions replay the graph of the diagnosed iterations: gradient
collectives launched when their gradients were ready
(:func:`~timeline.whatif.transform.launch_when_ready`), other bucket caps, the link used in full, a
faster link, compressed gradients; ``exposed_dimension`` is a stated bound. Each rule is defined,
with its thresholds, in ``docs/diagnosis.md``.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import TYPE_CHECKING, NamedTuple

import polars as pl

from timeline.analysis.dimensions import communication_labels, exposure_by, named_dimensions
from timeline.analysis.intervals import merged, overlap_ns, union_intervals
from timeline.analysis.links import PHYSICAL_CEILING_GBPS
from timeline.diagnosis.context import Context, Prediction, finding, predicted
from timeline.diagnosis.facts import mean_int
from timeline.diagnosis.thresholds import (
    BUCKET_CAPS_MIB,
    CODEC_GBPS,
    COMPRESSION_RATIO,
    LINK_UNDERUSED_RATIO,
    MIN_GAIN,
    MIN_SHARE,
)
from timeline.results.findings import Finding
from timeline.stats import median
from timeline.units import format_ns

if TYPE_CHECKING:
    from timeline.diagnosis.replays import Replayer
    from timeline.results.findings import Basis
    from timeline.whatif.graph import TraceGraph

__all__ = [
    "GRADIENT_KINDS",
    "exposed_gradient_ns",
    "find_bucketing",
    "find_compression",
    "find_exposed_dimension",
    "find_link",
    "find_no_overlap",
    "gradient_bytes",
]

GRADIENT_KINDS = ("all_reduce", "reduce_scatter")
"""The collectives that carry gradients (data parallelism: DDP, Horovod; FSDP, ZeRO)."""

_SIGNALLED = ("markers", "accumulate_grad")


def _per_rank_iteration(context: Context, column: str, *, kinds: tuple[str, ...] | None) -> int:
    """Mean over the diagnosed iterations of the median over ranks of a sum over communication events."""
    rows = context.overlap.collectives
    if kinds is not None:
        rows = rows.filter(pl.col("collective").is_in(kinds))
    return _mean_of_medians(context, rows.select("rank", "iteration", column).iter_rows())


def _mean_of_medians(context: Context, values: Iterable[tuple[int, int | None, int | None]]) -> int:
    """Mean over the diagnosed iterations of the median over ranks of ``(rank, iteration, value)`` sums."""
    facts = context.facts
    whole = facts.iterations == (None,)
    sums: dict[tuple[int | None, int], int] = defaultdict(int)
    for rank, iteration, value in values:
        key_iteration = None if whole else iteration
        if key_iteration in facts.iterations and value is not None:
            sums[(key_iteration, rank)] += int(value)
    if not facts.ranks:
        return 0
    return mean_int(median(sums.get((i, r), 0) for r in facts.ranks) for i in facts.iterations)


def exposed_gradient_ns(context: Context) -> int:
    """Return the gradient collectives' exposed time: mean per iteration of the median over ranks.

    Per rank and diagnosed iteration window, ``|C ∩ E|`` with ``C`` the union of the gradient
    collectives' intervals and ``E`` the rank's exposed communication (as a dimension's
    ``exposed_ns``, :func:`~timeline.analysis.dimensions.exposure_by`): collectives in flight
    together (gloo's two threads, NCCL's streams) count once, so it is never more than the step.
    """
    if context.exposed_gradient_ns is None:
        overlap = context.overlap
        windows = overlap.windows.select("rank", "iteration", "start_ns", "end_ns")
        if None not in context.facts.iterations:
            windows = windows.filter(pl.col("iteration").is_in(list(context.facts.iterations)))
        exposed = _by_rank(overlap.comm, pl.col("state").cast(pl.String) == "exposed", windows)
        gradients = _by_rank(overlap.collectives, pl.col("collective").is_in(GRADIENT_KINDS), windows)
        values = []
        for rank, iteration, w_start, w_end in windows.iter_rows():
            union = merged((max(a, w_start), min(b, w_end)) for a, b in gradients.get(rank, ()))
            values.append((rank, iteration, overlap_ns(union, exposed.get(rank, []))))
        context.exposed_gradient_ns = _mean_of_medians(context, values)
    return context.exposed_gradient_ns


def _by_rank(frame: pl.DataFrame, keep: pl.Expr, windows: pl.DataFrame) -> dict[int, list[tuple[int, int]]]:
    """Return each rank's ``[start_ns, end_ns)`` intervals that overlap its ``windows``' span, by start.

    Only the rows ``keep`` holds; one query.
    """
    spans = windows.lazy().group_by("rank").agg(_from=pl.col("start_ns").min(), _to=pl.col("end_ns").max())
    near = (
        frame.lazy()
        .filter(keep)
        .select("rank", "start_ns", "end_ns")
        .join(spans, on="rank", how="inner")
        .filter((pl.col("end_ns") > pl.col("_from")) & (pl.col("start_ns") < pl.col("_to")))
        .select("rank", "start_ns", "end_ns")
        .sort("rank", "start_ns")
        .collect(engine="in-memory")
    )
    out: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for rank, start, end in near.iter_rows():
        out[rank].append((start, end))
    return out


def gradient_bytes(context: Context) -> int:
    """Return the gradient collectives' bytes (``in_bytes``): mean per iteration, median over ranks."""
    return _per_rank_iteration(context, "in_bytes", kinds=GRADIENT_KINDS)


def _signalled(context: Context) -> bool:
    """Whether the replay knows when gradients became ready; notes it when not."""
    replayer = context.replayer
    if replayer is None:
        context.unexamined.update(("no_overlap", "bucketing", "compression"))
        return False
    if replayer.graph.gradient_source not in _SIGNALLED:
        context.note(
            "no_overlap, bucketing and compression need gradient-ready times (AccumulateGrad ops in the "
            "trace, or timeline.capture's grad_ready_markers): not examined",
            causes=("no_overlap", "bucketing", "compression"),
        )
        return False
    return True


def _gradient_replay(context: Context) -> tuple[int, Replayer] | None:
    """Return the exposed gradient communication and the replayer, when a gradient rule should replay.

    None when that communication is under :data:`MIN_SHARE` of the step, or when the replay does not
    know when the gradients were ready (:func:`_signalled` notes it).
    """
    if context.partial:  # the collectives' times include waiting for ranks not traced
        return None
    exposed = exposed_gradient_ns(context)
    if context.facts.share(exposed) < MIN_SHARE or not _signalled(context):
        return None
    assert context.replayer is not None
    return exposed, context.replayer


def _sharded(graph: TraceGraph) -> bool:
    """Whether the job shards its parameters (FSDP, ZeRO): it gathers them, or reduce-scatters gradients."""
    return any(o.collective in ("all_gather", "reduce_scatter") for o in graph.ops)


def _per_gradient(graph: TraceGraph) -> bool:
    """Whether the job sends each gradient alone: as many gradient collectives as gradients, per rank-window.

    (A job that does not bucket at all: per-parameter all-reduces.)
    """
    gradients = Counter((g.rank, g.window_id) for g in graph.gradients if g.signal)
    collectives = Counter((o.rank, o.window_id) for o in graph.ops if o.gradient)
    return bool(gradients) and all(collectives.get(key, 0) >= n for key, n in gradients.items())


def find_no_overlap(context: Context) -> Finding | None:
    """Gradient collectives leave after the compute that could have hidden them.

    Examined when some gradient collective leaves at least :data:`MIN_GAIN` of the step after its
    gradients were ready (:func:`~timeline.whatif.transform.launch_when_ready` moves it that much
    earlier). The fix as the
    framework runs it: for a job that shards its parameters (FSDP), its own collectives launched
    when their gradients are ready, as FSDP2 issues them per module; for a job that buckets its
    gradients itself, its own buckets launched when ready; for one that sends each gradient alone
    (no bucketing at all), DDP, the better of its default buckets (each launched when its last
    gradient is ready, with the collectives' fitted fixed cost per call:
    :func:`timeline.whatif.sweeps.predict_buckets`) and its own calls launched when ready.
    """
    facts = context.facts
    if (replay := _gradient_replay(context)) is None:
        return None
    exposed, replayer = replay
    from timeline.whatif.transform import launch_when_ready

    graph = replayer.graph
    ready = launch_when_ready(graph)
    moved = [
        (old.ready_ns - new.ready_ns)
        for old, new in zip(graph.ops, ready.ops, strict=True)
        if old.gradient and new.ready_ns < old.ready_ns
    ]
    if not moved or max(moved) < MIN_GAIN * facts.step_ns:
        return None  # every collective leaves when its gradients are ready: bucketing's question
    step, as_run, replayed, cost = _replayed_when_ready(context, replayer, ready)
    prediction = predicted(context, step, "replay")
    if prediction.gain_ratio < MIN_GAIN:
        return None
    gradient_ops = [o for o in graph.ops if o.gradient]
    evidence = {
        "exposed_gradient_comm_ns": exposed,
        "gradient_collectives": len(gradient_ops),
        "launched_late": len(moved),
        "mean_launch_lateness_ns": mean_int(moved),
        "gradient_source": graph.gradient_source,
        "replayed_as": as_run,
        "replayed_step_ns": replayed,
        **cost,
        "iterations": len(facts.iterations),
    }
    return finding(
        "no_overlap",
        prediction,
        summary=(
            f"{len(moved)} of {len(gradient_ops)} gradient collectives leave on average "
            f"{format_ns(mean_int(moved))} after their gradients were ready; {format_ns(exposed)} of "
            f"gradient communication per iteration is exposed (replayed with {as_run})"
        ),
        fix="reduce each gradient as soon as it is ready, during the backward pass (DistributedDataParallel "
        "or FSDP instead of all-reducing after backward(); no synchronous collective in the step)",
        ranks=None,
        iterations=None,
        evidence=evidence,
    )


def _replayed_when_ready(
    context: Context, replayer: Replayer, ready: TraceGraph
) -> tuple[int, str, int | None, dict[str, float | str | None]]:
    """Return the step with the gradient collectives launched when ready, how it was run, and their cost.

    ``(step, as run, the whatif figure or None, the cost evidence)``: the job's own buckets, or for
    a job that sends each gradient alone DDP's default buckets when they are faster (what ``timeline
    whatif --buckets ddp:25`` prints for these iterations).
    """
    from timeline.whatif.bucketing import DDPBuckets

    graph = replayer.graph
    step = replayer.predict(ready)
    cost = _gradient_cost_evidence(replayer)
    if not _sharded(graph) and _per_gradient(graph):
        [(ddp, whatif)] = replayer.predict_buckets([DDPBuckets()])
        if ddp < step:
            _note_inseparable(context, cost)
            as_run = "DDP's default bucket caps, each bucket launched when its last gradient is ready"
            return ddp, as_run, round(whatif.iteration_ns), cost
    return step, "the job's own buckets, each launched when its gradients are ready", None, cost


def find_bucketing(context: Context, *, no_overlap: Finding | None) -> Finding | None:
    """Other bucket caps would start the gradient collectives earlier, or send fewer, larger ones.

    The best of :data:`BUCKET_CAPS_MIB`, each replayed by :func:`timeline.whatif.sweeps.predict_buckets`
    (the computation of ``timeline whatif --buckets ddp:CAP``) with the fitted fixed cost per call.
    Where the trace cannot separate that cost from the time per byte, a note says so.
    """
    facts = context.facts
    if no_overlap is not None or (replay := _gradient_replay(context)) is None:
        return None
    exposed, replayer = replay
    if _sharded(replayer.graph):
        context.note(
            "bucketing: the job shards its parameters (FSDP): its collectives are per module, which DDP's "
            "bucket caps do not change; not examined"
        )
        return None
    from timeline.whatif.bucketing import DDPBuckets

    caps = [int(c) for c in BUCKET_CAPS_MIB]
    # DistributedDataParallel(bucket_cap_mb=CAP) caps every bucket, the first too (torch 2.13 keeps
    # its 1 MiB first bucket for the default cap only): whatif --buckets ddp:CAP:CAP
    policies = [DDPBuckets(cap_bytes=c * 2**20, first_cap_bytes=c * 2**20) for c in caps]
    replays = replayer.predict_buckets(policies)
    steps = [step for step, _ in replays]
    best = min(range(len(caps)), key=lambda k: (steps[k], k))
    cost = _gradient_cost_evidence(replayer)
    _note_inseparable(context, cost)
    prediction = predicted(context, steps[best], "replay")
    if prediction.gain_ratio < MIN_GAIN:
        return None
    ops = [o for o in replayer.graph.ops if o.gradient]
    windows = {(o.rank, o.window_id) for o in ops}
    sizes = [o.nbytes for o in ops if o.nbytes is not None]
    evidence = {
        "buckets_per_iteration": round(len(ops) / max(1, len(windows))),
        "median_bucket_bytes": round(median(sizes)) if sizes else None,
        "first_bucket_delay_ns": _first_bucket_delay(context),
        "exposed_gradient_comm_ns": exposed,
        **cost,
        "caps_mib": caps,
        "predicted_step_by_cap_ns": [min(s, facts.step_ns) for s in steps],
        "replayed_step_by_cap_ns": [round(p.iteration_ns) for _, p in replays],
        "best_cap_mib": caps[best],
    }
    cap = caps[best]
    return finding(
        "bucketing",
        prediction,
        summary=(
            f"{evidence['buckets_per_iteration']} gradient buckets per iteration (median "
            f"{_mib(evidence['median_bucket_bytes'])}), each call costing "
            f"{_cost_text(cost)}; a {cap} MiB bucket cap is predicted to save the most"
        ),
        fix=f"set the bucket cap to {cap} MiB (DistributedDataParallel(bucket_cap_mb={cap}), "
        "Horovod's fusion threshold)",
        ranks=None,
        iterations=None,
        evidence=evidence,
    )


def _gradient_cost_evidence(replayer: Replayer) -> dict[str, float | str | None]:
    """Return the fitted cost of the gradient collectives: ``α`` per call, ``β`` per byte, their basis.

    Of the collective kind and process group most gradient collectives ran on
    (:func:`timeline.whatif.engine.cost_fit` of the diagnosed iterations' graph).
    """
    from timeline.whatif.engine import cost_fit

    graph = replayer.graph
    cells = Counter((o.collective, o.group) for o in graph.ops if o.gradient and o.nbytes)
    empty: dict[str, float | str | None] = {
        "alpha_ns": None,
        "alpha_se_ns": None,
        "beta_ns_per_byte": None,
        "beta_se_ns_per_byte": None,
        "cost_basis": "cannot_separate",
    }
    if not cells:
        return empty
    (kind, group), _ = cells.most_common(1)[0]
    fit = cost_fit(graph)
    rows = fit.filter((pl.col("collective") == kind) & (pl.col("group").eq_missing(group))).to_dicts()
    if not rows:
        return empty
    row = rows[0]
    return {
        "alpha_ns": row["alpha_ns"],
        "alpha_se_ns": row["alpha_se_ns"],
        "beta_ns_per_byte": row["beta_ns_per_byte"],
        "beta_se_ns_per_byte": row["beta_se_ns_per_byte"],
        "cost_basis": row["basis"],
    }


def _note_inseparable(context: Context, cost: dict[str, float | str | None]) -> None:
    """Note, once, that rebuilt buckets cost the measured time per byte (the fit cannot separate α from β)."""
    if cost["cost_basis"] == "cannot_separate":
        context.note(
            "the trace cannot separate the gradient collectives' fixed cost per call from their time per "
            "byte (one size, or times the sizes do not explain): rebuilt buckets are replayed at the "
            "measured time per byte, so merging buckets saves no per-call cost"
        )


def _cost_text(cost: dict[str, float | str | None]) -> str:
    """Return the fitted cost of a call in words: ``1.2 ms ± 0.1 ms + 3.4 ns/byte``."""
    alpha, beta = cost["alpha_ns"], cost["beta_ns_per_byte"]
    if not isinstance(alpha, float) or not isinstance(beta, float):
        return "a fixed cost the trace cannot separate from its time per byte"
    spread = cost["alpha_se_ns"]
    plus = f" ± {format_ns(round(spread))}" if isinstance(spread, float) and spread > 0 else ""
    return (
        f"{format_ns(round(alpha))}{plus} + {beta:.3g} ns/byte ({str(cost['cost_basis']).replace('_', ' ')})"
    )


def _mib(value: object) -> str:
    return "unknown size" if not isinstance(value, int) else f"{value / 2**20:.2f} MiB"


def _first_bucket_delay(context: Context) -> int:
    """Mean over rank-windows of the first gradient collective's ready time minus the first gradient's."""
    replayer = context.replayer
    assert replayer is not None
    first_op: dict[tuple[int, int | None], int] = {}
    for o in replayer.graph.ops:
        if o.gradient:
            key = (o.rank, o.window_id)
            first_op[key] = min(first_op.get(key, o.ready_ns), o.ready_ns)
    first_gradient: dict[tuple[int, int | None], int] = {}
    for g in replayer.graph.gradients:
        if g.signal:
            key = (g.rank, g.window_id)
            first_gradient[key] = min(first_gradient.get(key, g.ready_ns), g.ready_ns)
    return mean_int(max(0, first_op[k] - first_gradient[k]) for k in first_op if k in first_gradient)


def _utilisation(context: Context) -> tuple[float | None, int]:
    """Bus bandwidth over the link in the diagnosed iterations, and the collectives counted.

    The collectives' bus bits over the time the link was busy with them: per process group, the union
    of their transfers (``[last_start_ns, last_start_ns + transfer_ns]``), so that collectives in flight
    together (gloo's threads, NCCL's streams) share the link instead of each being counted alone.
    """
    match = context.match
    if match is None or context.link_gbps is None:
        return None, 0
    rows = match.collectives
    if context.facts.iterations != (None,):
        rows = rows.filter(pl.col("iteration").is_in([i for i in context.facts.iterations if i is not None]))
    usable = rows.filter(
        pl.col("bytes").is_not_null()
        & (pl.col("transfer_ns") > 0)
        & pl.col("bus_factor").is_not_null()
        & ~pl.col("implausible")
    )
    if usable.height == 0:
        return None, 0
    bus_bits = (
        float((usable.get_column("bytes").cast(pl.Float64) * usable.get_column("bus_factor")).sum()) * 8
    )
    spans = usable.select(
        "group",
        pl.col("last_start_ns").alias("start_ns"),
        (pl.col("last_start_ns") + pl.col("transfer_ns")).alias("end_ns"),
    )
    union = union_intervals(spans, by=["group"])
    busy = int(union.select((pl.col("end_ns") - pl.col("start_ns")).sum()).item())
    return (bus_bits / busy) / context.link_gbps, usable.height


def find_link(context: Context) -> Finding | None:
    """``link_underused`` below half the link, else ``slow_link``, when the exposed transfers matter."""
    facts = context.facts
    if context.partial:  # the collectives' times include waiting for ranks not traced
        return None
    if context.link_gbps is None:
        context.note(
            "slow_link and link_underused need the link's bandwidth (--link-gbps): not examined",
            causes=("slow_link", "link_underused"),
        )
        return None
    exposed = facts.median_mean("exposed_comm_ns")
    utilisation, counted = _utilisation(context)
    if context.replayer is None or (utilisation is None and context.match is None and len(facts.ranks) > 1):
        context.unexamined.update(("slow_link", "link_underused"))
        return None
    if utilisation is None or facts.share(exposed) < MIN_SHARE:
        return None
    replayer = context.replayer
    link = context.link_gbps
    evidence: dict[str, float | int | str | None] = {
        "link_gbps": link,
        "busbw_gbps": utilisation * link,
        "link_utilisation_ratio": min(utilisation, 1.0),
        "collectives": counted,
        "exposed_comm_ns": exposed,
    }
    verdict: _LinkVerdict | None
    if utilisation < LINK_UNDERUSED_RATIO:
        verdict = _link_underused(context, replayer, link=link, utilisation=utilisation, exposed=exposed)
    else:
        verdict = _slow_link(context, replayer, link=link, utilisation=utilisation, exposed=exposed)
    if verdict is None or verdict.prediction.gain_ratio < MIN_GAIN:
        return None
    evidence.update(verdict.evidence)
    return finding(
        verdict.cause,
        verdict.prediction,
        summary=verdict.summary,
        fix=verdict.fix,
        evidence=evidence,
    )


class _LinkVerdict(NamedTuple):
    """What ``slow_link`` or ``link_underused`` would say: the cause, its prediction and its words."""

    cause: str
    prediction: Prediction
    summary: str
    fix: str
    evidence: dict[str, float | str | None]
    """Evidence added to the link's own."""


def _link_underused(
    context: Context, replayer: Replayer, *, link: float, utilisation: float, exposed: int
) -> _LinkVerdict:
    """Return ``link_underused``: the full link, each collective keeping its fitted fixed cost per call.

    (Fewer, larger collectives shorten that cost: bucketing.)
    """
    from timeline.whatif.engine import Scenario

    prediction = predicted(context, replayer.predict(scenario=Scenario(efficiency="full")), "replay")
    summary = (
        f"transfers reach {utilisation:.0%} of the {link:g} Gbit/s link (bus bandwidth "
        f"{utilisation * link:.3g} Gbit/s) while {format_ns(exposed)} of communication per iteration is "
        "exposed"
    )
    fix = "find what keeps transfers below the link (too few channels or connections, small messages, "
    fix += "CPU-bound reductions, a slower path than the link: NCCL_DEBUG=INFO shows it)"
    return _LinkVerdict("link_underused", prediction, summary, fix, _gradient_cost_evidence(replayer))


def _slow_link(
    context: Context, replayer: Replayer, *, link: float, utilisation: float, exposed: int
) -> _LinkVerdict | None:
    """Return ``slow_link``: the link from which it no longer limits the step (at the efficiency reached).

    None when no link would hide the communication.
    """
    from timeline.whatif.engine import Scenario

    faster = replayer.hide_bandwidth_gbps(efficiency="observed")
    if faster is None:
        return None
    prediction = predicted(context, replayer.predict(scenario=Scenario(bandwidth_gbps=faster)), "replay")
    summary = (
        f"transfers run at {utilisation:.0%} of the {link:g} Gbit/s link and {format_ns(exposed)} of "
        "communication per iteration is exposed: the link limits them"
    )
    fix = (
        f"a faster link: from about {faster:.3g} Gbit/s (replayed) it no longer limits the step; or less "
        "data on it (compression, larger batches)"
    )
    if faster > PHYSICAL_CEILING_GBPS:
        fix = (
            f"less data on the link (compression, larger batches): only a hypothetical link of about "
            f"{faster:.3g} Gbit/s, beyond any that exists ({PHYSICAL_CEILING_GBPS:g} Gbit/s, NVLink 5), "
            "would stop it limiting the step"
        )
    return _LinkVerdict("slow_link", prediction, summary, fix, {"faster_link_gbps": faster})


def find_compression(context: Context) -> Finding | None:
    """Return what :data:`COMPRESSION_RATIO` compression of the gradients would give, codec cost included.

    Fewer bytes in as many calls: each gradient collective keeps its fitted fixed cost per call, its
    time per byte divided by the ratio, and the codec encodes before it and decodes after. With the
    codec's throughput assumed (none given), the finding's basis is ``assumption``.
    """
    facts = context.facts
    if (replay := _gradient_replay(context)) is None:
        return None
    exposed, replayer = replay
    if not any(o.gradient and o.nbytes for o in replayer.graph.ops):
        return None
    from timeline.whatif.compression import Compression
    from timeline.whatif.engine import Scenario

    assumed = context.codec_gbps is None
    modes = set(replayer.graph.modes.values())
    codec_gbps = context.codec_gbps or CODEC_GBPS["gpu" if "gpu" in modes else "cpu"]
    codec = Compression(ratio=COMPRESSION_RATIO, codec_bytes_per_s=codec_gbps * 1e9 / 8)
    basis: Basis = "assumption" if assumed else "replay"
    prediction = predicted(context, replayer.predict(scenario=Scenario(compression=codec)), basis)
    free_codec = Scenario(compression=Compression(ratio=COMPRESSION_RATIO))
    free = min(replayer.predict(scenario=free_codec), facts.step_ns)
    saved = facts.step_ns - free
    nbytes = gradient_bytes(context)
    # MLSys'22: encoding and decoding (S / R each) must cost less than what compression saves
    break_even = 2 * nbytes * 8 / saved if saved > 0 else None  # bits per ns = Gbit/s
    evidence = {
        "ratio": COMPRESSION_RATIO,
        "codec_gbps": codec_gbps,
        "codec_assumed": assumed,
        "free_codec_step_ns": free,
        "gradient_bytes": nbytes,
        "exposed_gradient_comm_ns": exposed,
        "break_even_codec_gbps": break_even,
        **_gradient_cost_evidence(replayer),
    }
    codec_text = f"with a {codec_gbps:g} Gbit/s codec" + (" (assumed)" if assumed else "")
    if prediction.gain_ratio < MIN_GAIN:
        return None
    summary = (
        f"{COMPRESSION_RATIO:g}x gradient compression would save {prediction.gain_ratio:.0%} of the step "
        f"{codec_text}, as many calls with fewer bytes"
    )
    if break_even is not None:
        summary += f"; it pays only with a codec faster than {break_even:.3g} Gbit/s (encode and decode)"
    if assumed:
        summary += " (an assumed codec speed: give yours with --codec-gbps)"
    fix = "compress gradients (a DDP communication hook: PowerSGD, fp16/bf16) if the codec is that fast"
    return finding(
        "compression",
        prediction,
        summary=summary,
        fix=fix,
        evidence=evidence,
    )


def find_exposed_dimension(context: Context) -> Finding | None:
    """One mesh dimension's communication holds most of the exposed time (groups with descriptions).

    The dimensions are those of ``timeline analyze``'s exposure per dimension (one computation, made
    once where ``analyze`` passes it: ``Context.exposure``): the group each event names, else the one
    the traces' declared groups (``pg_config``) attribute it to.
    """
    events = context.events
    described = "pg_desc" in events.columns and not events.get_column("pg_desc").is_null().all()
    declared = context.groups is not None and not context.groups.get_column("pg_desc").is_null().all()
    if not (described or declared):
        context.unexamined.add("exposed_dimension")
        return None
    facts = context.facts
    per_dimension = _exposed_per_dimension(context)
    dimensions = sorted(per_dimension)
    if len(dimensions) < 2:
        return None
    total = sum(per_dimension.values())
    top = max(dimensions, key=lambda d: (per_dimension[d], d))
    exposed = per_dimension[top]
    if total <= 0 or exposed / total < 0.5 or facts.share(exposed) < MIN_SHARE:
        return None
    prediction = predicted(context, facts.step_ns - exposed, "bound")
    if prediction.gain_ratio < MIN_GAIN:
        return None
    return finding(
        "exposed_dimension",
        prediction,
        summary=(
            f"the {top} dimension's communication is {format_ns(exposed)} per iteration exposed, "
            f"{exposed / total:.0%} of the exposed communication of every dimension"
        ),
        fix=f"overlap the {top} dimension's collectives with compute, or shrink that dimension (place it "
        "on the fastest links)",
        evidence={
            "dimension": top,
            "dimensions": dimensions,
            "exposed_ns_by_dimension": [per_dimension[d] for d in dimensions],
            "exposed_comm_ns": exposed,
        },
    )


def _exposed_per_dimension(context: Context) -> dict[str, int]:
    """Return per named dimension its exposed communication (:func:`_mean_of_medians`)."""
    facts = context.facts
    exposure = context.exposure
    if exposure is None:
        labels = communication_labels(
            context.events,
            groups=context.groups,
            overrides=context.dimensions,
            clocks=context.clocks,
            windows=context.overlap.windows,
        )
        exposure = exposure_by(context.overlap, labels)
    named = set(named_dimensions(exposure))
    whole = facts.iterations == (None,)
    values: dict[str, list[tuple[int, int | None, int | None]]] = defaultdict(list)
    for dimension, iteration, rank, exposed in exposure.select(
        "dimension", "iteration", "rank", "exposed_ns"
    ).iter_rows():
        if dimension in named and (None if whole else iteration) in facts.iterations:
            values[dimension].append((rank, iteration, exposed))
    return {d: _mean_of_medians(context, values[d]) for d in sorted(values)}
