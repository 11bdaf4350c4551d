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

from collections import defaultdict
from collections.abc import Iterable
from typing import TYPE_CHECKING

import polars as pl

from timeline.analysis.dimensions import communication_labels, exposure_by, named_dimensions
from timeline.analysis.intervals import merged, overlap_ns, union_intervals
from timeline.diagnosis.context import Context, finding, predicted
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
    from timeline.whatif.costs import FixedCost

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
    exposed = exposed_gradient_ns(context)
    if context.facts.share(exposed) < MIN_SHARE or not _signalled(context):
        return None
    assert context.replayer is not None
    return exposed, context.replayer


def find_no_overlap(context: Context) -> Finding | None:
    """Gradient collectives leave after the compute that could have hidden them."""
    facts = context.facts
    if (replay := _gradient_replay(context)) is None:
        return None
    exposed, replayer = replay
    from timeline.whatif.transform import launch_when_ready

    ready = launch_when_ready(replayer.graph)
    prediction = predicted(context, replayer.predict(ready), "replay")
    if prediction.gain_ratio < MIN_GAIN:
        return None
    moved = [
        (old.ready_ns - new.ready_ns)
        for old, new in zip(replayer.graph.ops, ready.ops, strict=True)
        if old.gradient and new.ready_ns < old.ready_ns
    ]
    gradient_ops = [o for o in replayer.graph.ops if o.gradient]
    evidence = {
        "exposed_gradient_comm_ns": exposed,
        "gradient_collectives": len(gradient_ops),
        "launched_late": len(moved),
        "mean_launch_lateness_ns": mean_int(moved),
        "gradient_source": replayer.graph.gradient_source,
        "iterations": len(facts.iterations),
    }
    return finding(
        "no_overlap",
        prediction,
        summary=(
            f"{len(moved)} of {len(gradient_ops)} gradient collectives leave on average "
            f"{format_ns(mean_int(moved))} after their gradients were ready; {format_ns(exposed)} of "
            "gradient communication per iteration is exposed"
        ),
        fix="reduce each gradient as soon as it is ready, during the backward pass (DistributedDataParallel "
        "or FSDP instead of all-reducing after backward(); no synchronous collective in the step)",
        ranks=None,
        iterations=None,
        evidence=evidence,
    )


def find_bucketing(context: Context, *, no_overlap: Finding | None) -> Finding | None:
    """Other bucket caps would start the gradient collectives earlier, or send fewer, larger ones."""
    facts = context.facts
    if no_overlap is not None or (replay := _gradient_replay(context)) is None:
        return None
    exposed, replayer = replay
    from timeline.whatif.bucketing import DDPBuckets
    from timeline.whatif.replay import Scenario

    caps = [int(c) for c in BUCKET_CAPS_MIB]
    cost = _gradient_cost(context, replayer)
    steps = [
        replayer.predict(scenario=Scenario(buckets=DDPBuckets(cap_bytes=cap * 2**20), gradient_cost=cost))
        for cap in caps
    ]
    best = min(range(len(caps)), key=lambda k: (steps[k], k))
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
        "collective_latency_ns": None if cost is None else cost.latency_ns,
        "collective_ns_per_bit": None if cost is None else cost.ns_per_bit,
        "caps_mib": caps,
        "predicted_step_by_cap_ns": [min(s, facts.step_ns) for s in steps],
        "best_cap_mib": caps[best],
    }
    return finding(
        "bucketing",
        prediction,
        summary=(
            f"{evidence['buckets_per_iteration']} gradient buckets per iteration (median "
            f"{_mib(evidence['median_bucket_bytes'])}); a {caps[best]} MiB bucket cap is predicted to hide "
            f"more of the {format_ns(exposed)} of exposed gradient communication"
        ),
        fix=f"set the bucket cap to {caps[best]} MiB (DistributedDataParallel(bucket_cap_mb={caps[best]}), "
        "Horovod's fusion threshold)",
        ranks=None,
        iterations=None,
        evidence=evidence,
    )


def _gradient_cost(context: Context, replayer: Replayer) -> FixedCost | None:
    """Return the fixed cost and time per bit of the gradient collectives, fitted on the trace's own.

    The least-squares line (:func:`~timeline.whatif.costs.fit_fixed_cost`) of each diagnosed gradient
    collective's link time alone on the link (its exclusive work, what the replay re-times) against
    the bits it sends (:func:`~timeline.whatif.costs.bandwidth_bits`); with the link known, no slower
    per bit than the link.
    """
    from timeline.whatif.costs import bandwidth_bits, fit_fixed_cost

    graph = replayer.graph
    work = {op_id: inst.work_ns for inst in graph.instances for op_id in inst.ops}
    points = [
        (bandwidth_bits(o.collective, o.nbytes, o.group_size), work[o.op_id])
        for o in graph.ops
        if o.gradient and o.nbytes
    ]
    link = context.link_gbps
    return fit_fixed_cost(points, min_ns_per_bit=1 / link if link else 0.0)


def _fixed_step_latency_s(context: Context, replayer: Replayer) -> tuple[float, FixedCost | None]:
    """Return ``α`` (s per latency step) of the gradient collectives' fitted fixed cost, and the fit.

    The fixed cost of :func:`_gradient_cost` spread over the latency steps of the median gradient
    collective (``2(n−1)`` for a ring all-reduce of ``n`` ranks): what ``link_underused``'s full link
    keeps, since a faster use of the link does not shorten it (fewer, larger collectives do:
    ``bucketing``). 0 without a fit.
    """
    from timeline.whatif.costs import latency_steps

    cost = _gradient_cost(context, replayer)
    steps = [latency_steps(o.collective, o.group_size) for o in replayer.graph.ops if o.gradient and o.nbytes]
    if cost is None or not steps:
        return 0.0, cost
    return cost.latency_ns / 1e9 / max(1.0, median(steps)), cost


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
    from timeline.whatif.replay import Scenario

    replayer = context.replayer
    link = context.link_gbps
    evidence: dict[str, float | int | None] = {
        "link_gbps": link,
        "busbw_gbps": utilisation * link,
        "link_utilisation_ratio": min(utilisation, 1.0),
        "collectives": counted,
        "exposed_comm_ns": exposed,
    }
    if utilisation < LINK_UNDERUSED_RATIO:
        alpha_s, cost = _fixed_step_latency_s(context, replayer)
        full = Scenario(efficiency="full", latency_s=alpha_s)
        prediction = predicted(context, replayer.predict(scenario=full), "replay")
        evidence["collective_latency_ns"] = None if cost is None else cost.latency_ns
        cause, summary = (
            "link_underused",
            f"transfers reach {utilisation:.0%} of the {link:g} Gbit/s link (bus bandwidth "
            f"{utilisation * link:.3g} Gbit/s) while {format_ns(exposed)} of communication per iteration is "
            "exposed",
        )
        fix = "find what keeps transfers below the link (too few channels or connections, small messages, "
        fix += "CPU-bound reductions, a slower path than the link: NCCL_DEBUG=INFO shows it)"
    else:
        # the link from which it no longer limits the step (at the efficiency the transfers reached)
        faster = replayer.hide_bandwidth_gbps(efficiency="observed")
        if faster is None:
            return None
        prediction = predicted(context, replayer.predict(scenario=Scenario(bandwidth_gbps=faster)), "replay")
        cause, summary = (
            "slow_link",
            f"transfers run at {utilisation:.0%} of the {link:g} Gbit/s link and {format_ns(exposed)} of "
            "communication per iteration is exposed: the link limits them",
        )
        fix = (
            f"a faster link: from about {faster:.3g} Gbit/s (replayed) it no longer limits the step; or less "
            "data on it (compression, larger batches)"
        )
        evidence["faster_link_gbps"] = faster
    if prediction.gain_ratio < MIN_GAIN:
        return None
    return finding(
        cause,
        prediction,
        summary=summary,
        fix=fix,
        evidence=evidence,
    )


def find_compression(context: Context) -> Finding | None:
    """Return what :data:`COMPRESSION_RATIO` compression of the gradients would give, codec cost included."""
    facts = context.facts
    if (replay := _gradient_replay(context)) is None:
        return None
    exposed, replayer = replay
    if not any(o.gradient and o.nbytes for o in replayer.graph.ops):
        return None
    from timeline.whatif.compression import Compression
    from timeline.whatif.replay import Scenario

    assumed = context.codec_gbps is None
    modes = set(replayer.graph.modes.values())
    codec_gbps = context.codec_gbps or CODEC_GBPS["gpu" if "gpu" in modes else "cpu"]
    codec = Compression(ratio=COMPRESSION_RATIO, codec_bytes_per_s=codec_gbps * 1e9 / 8)
    cost = _gradient_cost(context, replayer)  # a collective's fixed cost is not compressed
    prediction = predicted(
        context, replayer.predict(scenario=Scenario(compression=codec, gradient_cost=cost)), "replay"
    )
    free_codec = Scenario(compression=Compression(ratio=COMPRESSION_RATIO), gradient_cost=cost)
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
        "collective_latency_ns": None if cost is None else cost.latency_ns,
    }
    codec_text = f"with a {codec_gbps:g} Gbit/s codec" + (" (assumed)" if assumed else "")
    if prediction.gain_ratio >= MIN_GAIN:
        summary = (
            f"{COMPRESSION_RATIO:g}x gradient compression would save {prediction.gain_ratio:.0%} of the step "
            f"{codec_text}"
        )
        if break_even is not None:
            summary += f"; it pays only with a codec faster than {break_even:.3g} Gbit/s (encode and decode)"
        fix = "compress gradients (a DDP communication hook: PowerSGD, fp16/bf16) if the codec is that fast"
    else:
        summary = (
            f"{COMPRESSION_RATIO:g}x gradient compression would not help ({prediction.gain_ratio:.1%} "
            f"{codec_text}, {1 - free / facts.step_ns:.1%} with a free codec): the gradient communication "
            "is not what delays the step"
        )
        fix = "do not compress gradients: fix the larger causes first"
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
    exposure = context.exposure
    if exposure is None:
        labels = communication_labels(
            events,
            groups=context.groups,
            overrides=context.dimensions,
            clocks=context.clocks,
            windows=context.overlap.windows,
        )
        exposure = exposure_by(context.overlap, labels)
    named = set(named_dimensions(exposure))
    whole = facts.iterations == (None,)
    sums: dict[tuple[str, int | None, int], int] = defaultdict(int)
    for dimension, iteration, rank, exposed in exposure.select(
        "dimension", "iteration", "rank", "exposed_ns"
    ).iter_rows():
        key_iteration = None if whole else iteration
        if dimension not in named or key_iteration not in facts.iterations:
            continue
        sums[(dimension, key_iteration, rank)] += int(exposed)
    dimensions = sorted({d for d, _i, _r in sums})
    if len(dimensions) < 2:
        return None
    per_dimension = {
        d: mean_int(median(sums.get((d, i, r), 0) for r in facts.ranks) for i in facts.iterations)
        for d in dimensions
    }
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
