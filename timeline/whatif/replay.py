"""Replay a run's dependency graph under other conditions: predicted iteration time, exposed communication.

Takes a :class:`~timeline.whatif.graph.TraceGraph` and a :class:`Scenario` (link bandwidth,
efficiency, latency, world size, algorithm, bucketing, compression, overlap); gives a
:class:`Prediction`: every iteration's predicted time, its time without communication
(``T_single``), the communication it exposes and the scaling factor ``T_single / T_predicted``.

The replay is one pass over the graph in dependency order (Kahn's algorithm), all ranks together:

- compute keeps its measured durations and the measured gaps between its busy periods; it is
  *shifted*: at a wait point, compute resumes at ``max(g0', e') + δ`` when the measured wait was
  binding (``e'`` the replayed end of the collectives it waits for, ``δ`` the measured resume delay),
  or ``max(g0' + gap, e')`` when it was not; encoding a compressed bucket inserts its time;
- a collective starts at ``max(ready', end' of the previous one on its channel) + launch delay``;
- a synchronising collective ends on each rank at ``max over ranks of start' + T' + lag``,
  others at ``start' + T'``, with ``T'`` from the cost model (:mod:`timeline.whatif.costs`)
  calibrated on the measured transfer (:func:`collective_time_ns`);
- an iteration ends at ``max(E + D(E), latest end' of its collectives)``, ``D`` the compute shift.

With the measured conditions every formula returns the measured time: that is the self-replay
check (:func:`self_replay`). Every formula is in ``docs/whatif.md``.
"""

from __future__ import annotations

import bisect
import heapq
import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import polars as pl

from timeline.analysis.intervals import clip_to_windows, measure
from timeline.errors import UsageError
from timeline.whatif.bucketing import (
    MEASURED,
    Bucket,
    BucketPolicy,
    FusionBuckets,
    GradientReady,
    MeasuredBuckets,
    make_buckets,
)
from timeline.whatif.compression import Compression
from timeline.whatif.costs import Algorithm, FixedCost, bandwidth_bits, latency_steps
from timeline.whatif.graph import CommOp, Gradient, TraceGraph, WaitPoint

__all__ = [
    "LINK_TIMES_SCHEMA",
    "MAX_LATENCY_S",
    "MAX_WORLD_SIZE",
    "PREDICTED_ITERATIONS_SCHEMA",
    "PREDICTED_WINDOWS_SCHEMA",
    "Efficiency",
    "Overlap",
    "Prediction",
    "Scenario",
    "link_times",
    "replay",
    "self_replay",
    "single_replay",
    "window_lengths",
    "window_rows",
]

MAX_LATENCY_S = 3600.0
"""The largest latency of one collective step a scenario takes (1 hour; real links: microseconds)."""
MAX_WORLD_SIZE = 1_048_576
"""The largest world size a scenario takes (2**20 ranks)."""
MAX_TIME_NS = 2**62
"""The latest time a replay may reach (epoch ns, year 2116): half the ``Int64`` range, so that sums
of predicted times stay in range. A scenario that goes past it is an error, not an overflow."""

Efficiency = Literal["observed", "uniform", "full"] | float
"""How much of the link collectives achieve: as each did in the trace, one trace-wide figure per
collective kind, all of it, or a given fraction."""

Overlap = Literal["measured", "none"]
"""``measured``: gradient collectives leave as in the trace (or as the bucketing policy says);
``none``: they all leave after the backward pass (the no-overlap bound)."""

PREDICTED_WINDOWS_SCHEMA = pl.Schema(
    {
        "rank": pl.Int32(),
        "iteration": pl.Int64(),
        "window_id": pl.Int64(),
        "measured_ns": pl.Int64(),
        "predicted_ns": pl.Int64(),
        "single_ns": pl.Int64(),
        "comm_ns": pl.Int64(),
        "exposed_comm_ns": pl.Int64(),
        "perfect_overlap_ns": pl.Int64(),
    }
)
"""One row per rank and iteration window of a :class:`Prediction`."""

PREDICTED_ITERATIONS_SCHEMA = pl.Schema(
    {
        "iteration": pl.Int64(),
        "ranks": pl.Int32(),
        "measured_ns": pl.Int64(),
        "predicted_ns": pl.Int64(),
        "single_ns": pl.Int64(),
        "exposed_comm_ns": pl.Int64(),
        "perfect_overlap_ns": pl.Int64(),
        "scaling_factor": pl.Float64(),
        "error_ratio": pl.Float64(),
    }
)
"""One row per iteration of a :class:`Prediction`: medians over ranks."""


@dataclass(frozen=True)
class Scenario:
    """The conditions to replay a run under; the defaults are the measured ones.

    Attributes
    ----------
    bandwidth_gbps
        The link's one-direction bandwidth in Gbit/s; None: the measured link.
    world_size
        Ranks of the data-parallel job (collectives over the whole world); None: as measured.
        Compute per rank is unchanged (weak scaling: same batch per rank).
    efficiency
        ``observed`` (each collective keeps the fraction of the link it achieved), ``uniform`` (one
        figure per collective kind, over the whole trace), ``full`` (the whole link), or a fraction.
    latency_s
        ``α``, the latency of one step of a collective (``latency_steps`` of them per collective).
    algorithm
        ``ring`` or ``tree`` (the trace's collectives are taken to have used it too).
    buckets
        How gradients are grouped: as measured, DDP caps, or Horovod-style fusion.
    gradient_cost
        The gradient collectives' fixed cost per collective and time per bit alone on the measured
        link (:func:`~timeline.whatif.costs.fit_fixed_cost`), with ``observed`` efficiency: a rebuilt
        bucket costs the line; a measured gradient collective keeps its time, of which
        ``min(fixed cost, its time)`` is fixed (neither compressed nor changed by another link).
        None: the measured time per bit, no fixed cost (merging collectives saves nothing by itself).
    compression
        Gradient compression and its codec cost.
    overlap
        ``none``: every gradient collective leaves after the backward pass.
    communication
        False: no communication at all (``T_single``).
    dimension_bandwidths
        ``(dimension, Gbit/s)`` pairs: the link of the collectives of that dimension's process groups
        (``tp``, ``dp`` …: :attr:`~timeline.whatif.graph.CommOp.dimension`), in place of
        ``bandwidth_gbps``; the other collectives keep ``bandwidth_gbps``.
    dimension_latencies
        ``(dimension, seconds)`` pairs: ``α`` of that dimension's collectives, in place of
        ``latency_s``.
    """

    bandwidth_gbps: float | None = None
    world_size: int | None = None
    efficiency: Efficiency = "observed"
    latency_s: float = 0.0
    algorithm: Algorithm = "ring"
    buckets: BucketPolicy = MEASURED
    gradient_cost: FixedCost | None = None
    compression: Compression = field(default_factory=Compression)
    overlap: Overlap = "measured"
    communication: bool = True
    dimension_bandwidths: tuple[tuple[str, float], ...] = ()
    dimension_latencies: tuple[tuple[str, float], ...] = ()

    def __post_init__(self) -> None:
        links = [self.bandwidth_gbps, *(gbps for _, gbps in self.dimension_bandwidths)]
        for gbps in links:
            if gbps is not None and not (math.isfinite(gbps) and gbps > 0):
                raise UsageError(f"bandwidth {gbps} Gbit/s: must be positive and finite")
        for _, latency_s in self.dimension_latencies:
            if not 0 <= latency_s <= MAX_LATENCY_S:
                raise UsageError(f"latency {latency_s} s: must be between 0 and {MAX_LATENCY_S:g} s")
        if self.world_size is not None and not 1 <= self.world_size <= MAX_WORLD_SIZE:
            raise UsageError(f"world size {self.world_size}: must be between 1 and {MAX_WORLD_SIZE:,}")
        if isinstance(self.efficiency, float | int) and not 0 < self.efficiency <= 1:
            raise UsageError(f"efficiency {self.efficiency}: must be in (0, 1]")
        if not 0 <= self.latency_s <= MAX_LATENCY_S:  # also refuses nan and infinity
            raise UsageError(f"latency {self.latency_s} s: must be between 0 and {MAX_LATENCY_S:g} s")

    def bandwidth_of(self, dimension: str | None) -> float | None:
        """Return the link (Gbit/s) of a collective of this dimension; None: the measured link."""
        return dict(self.dimension_bandwidths).get(dimension or "", self.bandwidth_gbps)

    def latency_of(self, dimension: str | None) -> float:
        """Return ``α`` (seconds per step) of a collective of this dimension."""
        return dict(self.dimension_latencies).get(dimension or "", self.latency_s)

    @property
    def rebuckets(self) -> bool:
        """Whether gradient collectives are rebuilt from the gradients."""
        return not isinstance(self.buckets, MeasuredBuckets) or self.overlap == "none"


@dataclass(frozen=True)
class Prediction:
    """What a replay predicts.

    Attributes
    ----------
    scenario
        The conditions.
    windows
        Per rank and iteration (:data:`PREDICTED_WINDOWS_SCHEMA`).
    iterations
        Per iteration, medians over ranks (:data:`PREDICTED_ITERATIONS_SCHEMA`).
    warnings
        What the model could not do as asked (collectives without bytes keep their measured time).
    """

    scenario: Scenario
    windows: pl.DataFrame
    iterations: pl.DataFrame
    warnings: tuple[str, ...] = ()

    def _mean(self, column: str) -> float:
        values = self.iterations.get_column(column).drop_nulls()
        return float(values.mean()) if values.len() else 0.0  # type: ignore[arg-type]

    @property
    def measured_ns(self) -> float:
        """The measured iteration time: mean over iterations of the median over ranks."""
        return self._mean("measured_ns")

    @property
    def iteration_ns(self) -> float:
        """The predicted iteration time (mean over iterations of the median over ranks)."""
        return self._mean("predicted_ns")

    @property
    def single_ns(self) -> float:
        """``T_single``: the same iterations without communication."""
        return self._mean("single_ns")

    @property
    def exposed_comm_ns(self) -> float:
        """Predicted exposed communication per iteration (``docs/metrics.md``'s definition)."""
        return self._mean("exposed_comm_ns")

    @property
    def perfect_overlap_ns(self) -> float:
        """The perfect-overlap bound: ``max(T_single, the link time of the iteration's collectives)``."""
        return self._mean("perfect_overlap_ns")

    @property
    def scaling_factor(self) -> float:
        """``T_single / T_predicted``."""
        return self.single_ns / self.iteration_ns if self.iteration_ns > 0 else 1.0

    @property
    def error_ratio(self) -> float:
        """``|predicted − measured| / measured`` of the mean iteration time."""
        return abs(self.iteration_ns - self.measured_ns) / self.measured_ns if self.measured_ns > 0 else 0.0


# ----------------------------------------------------------------------------------------------
# The scenario's collectives


@dataclass(slots=True)
class _Op:
    """A collective of the scenario: a measured one (``source``) or a rebuilt bucket."""

    rank: int
    window_id: int | None
    channel: str
    pool: str
    collective: str | None
    nbytes: int | None
    group_size: int
    ready_ns: int
    order_ns: int
    launch_delay_ns: int
    gradient: bool
    source: CommOp | None = None
    base_ns: float = 0.0
    """The measured link time it is calibrated on (measured ops: its transfer's exclusive work)."""
    calibration: float | None = None
    """Seconds per bit of bandwidth term at the measured link (rebuilt buckets)."""
    instance: int = -1
    lag_ns: int = 0
    work_ns: float = 0.0
    """The scenario's link time of its transfer, alone on the link."""
    decode_ns: int = 0
    encode_ns: int = 0
    dimension: str | None = None
    """The dimension of its process group (:attr:`~timeline.whatif.graph.CommOp.dimension`)."""


@dataclass
class _Plan:
    ops: list[_Op]
    instances: list[tuple[bool, list[int]]]
    waits: list[tuple[WaitPoint, tuple[int, ...]]]
    warnings: list[str]


def _median_int(values: Sequence[int]) -> int:
    return int(statistics.median(values)) if values else 0


def _plan(graph: TraceGraph, scenario: Scenario) -> _Plan:
    """Return the collectives and waits of a scenario (gradient buckets rebuilt if asked)."""
    warnings: list[str] = []
    ops: list[_Op] = []
    index_of: dict[int, int] = {}
    rebuilt: set[tuple[int, int | None]] = set()
    if scenario.rebuckets:
        rebuilt = {(o.rank, o.window_id) for o in graph.ops if o.gradient}
    kept = [o for o in graph.ops if not (o.gradient and (o.rank, o.window_id) in rebuilt)]
    work = {op_id: inst.work_ns for inst in graph.instances for op_id in inst.ops}
    lag = {op_id: x for inst in graph.instances for op_id, x in zip(inst.ops, inst.lags_ns, strict=True)}
    for o in kept:
        index_of[o.op_id] = len(ops)
        ops.append(
            _Op(
                rank=o.rank,
                window_id=o.window_id,
                channel=o.channel,
                pool=o.pool,
                collective=o.collective,
                nbytes=o.nbytes,
                group_size=o.group_size,
                ready_ns=o.ready_ns,
                order_ns=o.start_ns,
                launch_delay_ns=o.launch_delay_ns,
                gradient=o.gradient,
                source=o,
                base_ns=work[o.op_id],
                lag_ns=lag[o.op_id],
                dimension=o.dimension,
            )
        )
    instances: list[tuple[bool, list[int]]] = []
    for inst in graph.instances:
        members = [index_of[i] for i in inst.ops if i in index_of]
        if not members:
            continue
        synchronising = inst.synchronising and len(members) > 1
        for m in members:
            ops[m].instance = len(instances)
            if not synchronising:
                ops[m].lag_ns = 0
        if not synchronising and inst.synchronising:
            for m in members:  # a lone survivor of a matched collective: its own duration
                src = ops[m].source
                assert src is not None
                ops[m].base_ns = float(src.end_ns - src.start_ns)
        instances.append((synchronising, members))
    new_of: dict[tuple[int, int | None], list[int]] = defaultdict(list)
    if rebuilt:
        _rebuild(graph, scenario, rebuilt, ops, instances, new_of, warnings)
    # Waits: dependencies on replaced gradient collectives move to the rebuilt buckets.
    waits: list[tuple[WaitPoint, tuple[int, ...]]] = []
    removed_window = {o.op_id: (o.rank, o.window_id) for o in graph.ops if o.op_id not in index_of}
    for wait in graph.waits:
        deps = {index_of[i] for i in wait.deps if i in index_of}
        for i in wait.deps:
            if i not in removed_window:
                continue
            for n in new_of[removed_window[i]]:
                if wait.update or ops[n].ready_ns <= wait.gap_start_ns:
                    deps.add(n)
        waits.append((wait, tuple(sorted(deps))))
    return _Plan(ops=ops, instances=instances, waits=waits, warnings=warnings)


def _rebuild(
    graph: TraceGraph,
    scenario: Scenario,
    rebuilt: set[tuple[int, int | None]],
    ops: list[_Op],
    instances: list[tuple[bool, list[int]]],
    new_of: dict[tuple[int, int | None], list[int]],
    warnings: list[str],
) -> None:
    """Replace the gradient collectives of the rebuilt windows by buckets of their gradients."""
    windows = graph.windows
    iteration_of = dict(
        zip(windows.get_column("window_id").to_list(), windows.get_column("iteration").to_list(), strict=True)
    )
    measured: dict[tuple[int, int | None], list[CommOp]] = defaultdict(list)
    for o in graph.ops:
        if o.gradient and (o.rank, o.window_id) in rebuilt:
            measured[(o.rank, o.window_id)].append(o)
    grads: dict[tuple[int, int | None], list[Gradient]] = defaultdict(list)
    for g in graph.gradients:
        if (g.rank, g.window_id) in rebuilt:
            grads[(g.rank, g.window_id)].append(g)
    work = {op_id: inst.work_ns for inst in graph.instances for op_id in inst.ops}
    # Fusion depends on timing: form its buckets on the gradients' latest ready time over ranks.
    policy = scenario.buckets
    shared: dict[object, list[Bucket]] = {}
    if isinstance(policy, FusionBuckets):
        by_iteration: dict[object, list[list[Gradient]]] = defaultdict(list)
        for key, members in grads.items():
            by_iteration[iteration_of.get(key[1]) if key[1] is not None else None].append(members)
        for iteration, per_rank in by_iteration.items():
            if len({len(m) for m in per_rank}) != 1:
                continue
            latest = [
                GradientReady(max(m[k].ready_ns for m in per_rank), per_rank[0][k].nbytes)
                for k in range(len(per_rank[0]))
            ]
            shared[iteration] = make_buckets(policy, latest)
    groups: dict[tuple[object, object, int], list[int]] = defaultdict(list)
    for key in sorted(rebuilt, key=lambda k: (k[0], -1 if k[1] is None else k[1])):
        originals = measured[key]
        members = sorted(grads.get(key, []), key=lambda g: g.ready_ns)
        if not members:
            continue
        iteration = iteration_of.get(key[1]) if key[1] is not None else None
        ready = [GradientReady(g.ready_ns, g.nbytes) for g in members]
        buckets: list[Bucket]
        if isinstance(policy, MeasuredBuckets):
            by_op: dict[int, list[int]] = defaultdict(list)
            for k, g in enumerate(members):
                by_op[g.op_id].append(k)
            buckets = [
                Bucket(max(members[k].ready_ns for k in ks), sum(members[k].nbytes for k in ks), tuple(ks))
                for _, ks in sorted(by_op.items(), key=lambda item: max(members[k].ready_ns for k in item[1]))
            ]
        elif iteration in shared:
            buckets = [
                Bucket(max(members[k].ready_ns for k in b.members), b.nbytes, b.members)
                for b in shared[iteration]
            ]
        else:
            buckets = make_buckets(policy, ready)
        if scenario.overlap == "none":  # everything leaves when the backward pass has ended
            last = max([g.ready_ns for g in members] + [o.ready_ns for o in originals])
            buckets = [replace(b, ready_ns=last) for b in buckets]
        kind = statistics.mode([o.collective for o in originals]) if originals else "all_reduce"
        channel = statistics.mode([o.channel for o in originals]) if originals else "gradients"
        pool = statistics.mode([o.pool for o in originals]) if originals else f"{key[0]}/gradients"
        group_size = max((o.group_size for o in originals), default=graph.world_size)
        group = statistics.mode([o.group for o in originals]) if originals else None
        dimension = statistics.mode([o.dimension for o in originals]) if originals else None
        delay = max(0, _median_int([o.launch_delay_ns for o in originals]))
        calibration = _calibration(originals, work, scenario)
        for k, bucket in enumerate(buckets):
            groups[(group, iteration if key[1] is not None else None, k)].append(len(ops))
            new_of[key].append(len(ops))
            ops.append(
                _Op(
                    rank=key[0],
                    window_id=key[1],
                    channel=channel,
                    pool=pool,
                    collective=kind,
                    nbytes=bucket.nbytes,
                    group_size=group_size,
                    ready_ns=bucket.ready_ns,
                    order_ns=bucket.ready_ns + delay,
                    launch_delay_ns=delay,
                    gradient=True,
                    calibration=calibration,
                    dimension=dimension,
                )
            )
    for indices in groups.values():
        for m in indices:
            ops[m].instance = len(instances)
        instances.append((len(indices) > 1, indices))
    if any(o.nbytes is None for originals in measured.values() for o in originals):
        warnings.append("gradient collectives without bytes: rebuilt buckets use the gradient-ready sizes")


def _calibration(originals: Sequence[CommOp], work: dict[int, float], scenario: Scenario) -> float | None:
    """Seconds per bit of bandwidth term, over measured collectives (byte-weighted, exclusive link time)."""
    time_s = 0.0
    bits = 0.0
    for o in originals:
        if o.nbytes is None:
            continue
        w = bandwidth_bits(o.collective, o.nbytes, o.group_size, algorithm=scenario.algorithm)
        if w <= 0:
            continue
        steps = latency_steps(o.collective, o.group_size, algorithm=scenario.algorithm)
        time_s += max(0.0, work[o.op_id] / 1e9 - steps * scenario.latency_of(o.dimension))
        bits += w
    return time_s / bits if bits > 0 else None


# ----------------------------------------------------------------------------------------------
# Costs


def _uniform_calibration(graph: TraceGraph, scenario: Scenario) -> dict[str | None, float]:
    """Seconds per bit of bandwidth term per collective kind, over the whole trace."""
    work = {op_id: inst.work_ns for inst in graph.instances for op_id in inst.ops}
    by_kind: dict[str | None, list[CommOp]] = defaultdict(list)
    for o in graph.ops:
        by_kind[o.collective].append(o)
    out: dict[str | None, float] = {}
    for kind, members in by_kind.items():
        value = _calibration(members, work, scenario)
        if value is not None:
            out[kind] = value
    return out


def _work_ns(
    op: _Op, graph: TraceGraph, scenario: Scenario, uniform: dict[str | None, float], notes: set[str]
) -> float:
    """Return the modelled link time of one collective under the scenario, alone on its link (ns)."""
    n_measured = op.group_size
    n = (
        scenario.world_size
        if scenario.world_size is not None and n_measured == graph.world_size
        else n_measured
    )
    compressed = op.gradient and scenario.compression.active
    ratio = scenario.compression.ratio if compressed else 1.0
    alg = scenario.algorithm
    bits_measured = bandwidth_bits(op.collective, op.nbytes or 0, n_measured, algorithm=alg)
    bits = bandwidth_bits(op.collective, op.nbytes or 0, n, algorithm=alg) / ratio
    alpha = scenario.latency_of(op.dimension)
    gbps = scenario.bandwidth_of(op.dimension)
    latency = latency_steps(op.collective, n, algorithm=alg) * alpha
    latency_measured = latency_steps(op.collective, n_measured, algorithm=alg) * alpha
    measured_gbps = graph.link_of(op.dimension)
    measured_link = measured_gbps * 1e9 if measured_gbps is not None else None
    link = gbps * 1e9 if gbps is not None else measured_link
    if op.nbytes is None or (op.source is not None and bits_measured <= 0):
        if op.source is None:
            return 0.0
        if gbps is not None or scenario.world_size is not None or compressed:
            notes.add("nobytes")
        return op.base_ns
    efficiency = scenario.efficiency
    if op.gradient and scenario.gradient_cost is not None and efficiency == "observed":
        # the fixed part stays; the rest follows the bits (world size, compression) and the link
        scale = bits / bits_measured if bits_measured > 0 else 1.0
        if measured_link is not None and link is not None:
            scale *= measured_link / link
        cost = scenario.gradient_cost
        if op.source is None:
            return cost.latency_ns + cost.ns_per_bit * bits_measured * scale
        fixed = min(cost.latency_ns, op.base_ns)
        return fixed + (op.base_ns - fixed) * scale
    if efficiency in ("observed", "uniform"):
        if efficiency == "uniform" and op.collective in uniform:
            per_bit = uniform[op.collective]
        elif op.source is not None:
            per_bit = max(0.0, op.base_ns / 1e9 - latency_measured) / bits_measured
        elif op.calibration is not None:
            per_bit = op.calibration
        else:
            notes.add("nocalibration")
            per_bit = 1 / link if link else 0.0
        if gbps is not None:
            if measured_link is None:
                msg = (
                    "the measured link is unknown, so the observed efficiency cannot move to another "
                    "bandwidth: pass the link the trace ran on (--link-gbps, or link_gbps= when capturing) "
                    "or use full efficiency"
                )
                raise UsageError(msg)
            per_bit *= measured_link / (gbps * 1e9)
        seconds = latency + bits * per_bit
    else:
        if link is None:
            msg = "full or given efficiency needs a bandwidth: pass one, or the measured link (--link-gbps)"
            raise UsageError(msg)
        fraction = 1.0 if efficiency == "full" else float(efficiency)
        seconds = latency + bits / (link * fraction)
    return seconds * 1e9


# ----------------------------------------------------------------------------------------------
# The replay


@dataclass
class _Timeline:
    """A replayed run: the compute shift after each shift point, and every collective's interval."""

    shift_times: dict[int, list[int]]
    shift_values: dict[int, list[int]]
    op_start: list[int]
    op_end: list[int]
    encode: list[tuple[int, int, int]]  # rank, start', length

    def shift(self, rank: int, t: int) -> int:
        times = self.shift_times.get(rank)
        if not times:
            return 0
        k = bisect.bisect_right(times, t) - 1
        return self.shift_values[rank][k] if k >= 0 else 0


_DONE = 1e-3  # ns of work left that count as finished (float rounding)


class _Simulation:
    """A discrete-event replay: compute shifts, FIFO pools of servers, links shared by transfers.

    Time runs relative to ``origin`` (float ns keep their precision there). Each rank's shift points
    (waits, encodes) resolve in order; a collective becomes ready once the shift at its ready time
    is known, starts when it is next in its pool and a server is free, transfers once every rank of
    a synchronising collective has started, and its transfer progresses at ``min over its ranks of
    1 / (transfers in progress on the rank)`` of the link: concurrent transfers share it equally.
    """

    def __init__(self, scenario: Scenario, plan: _Plan, servers: dict[str, int], origin: int) -> None:
        self.plan = plan
        self.origin = origin
        self.communication = scenario.communication
        ops = plan.ops
        points: dict[int, list[tuple[int, int, int]]] = defaultdict(list)  # rank -> (time, kind, index)
        for w, (wait, _deps) in enumerate(plan.waits):
            points[wait.rank].append((wait.resume_ns, 0, w))
        if self.communication:
            for i, op in enumerate(ops):
                if op.encode_ns > 0:
                    points[op.rank].append((op.ready_ns, 1, i))
        for values in points.values():
            values.sort()
        self.points = dict(points)
        self.times = {rank: [t for t, _k, _i in values] for rank, values in self.points.items()}
        self.values: dict[int, list[int]] = {rank: [] for rank in self.points}
        self.encode: list[tuple[int, int, int]] = []
        # Where each op's ready time sits in its rank's chain (skipping waits that depend on it).
        waits_of_op: dict[int, set[int]] = defaultdict(set)
        for w, (_wait, deps) in enumerate(plan.waits):
            for d in deps:
                waits_of_op[d].add(w)
        self.anchor: list[int] = []
        for i, op in enumerate(ops):
            ts = self.times.get(op.rank, [])
            k = bisect.bisect_right(ts, op.ready_ns) - 1
            while k >= 0:
                _t, kind, index = self.points[op.rank][k]
                if kind == 0 and index in waits_of_op[i]:
                    k -= 1
                    continue
                break
            self.anchor.append(k)
        self.ready: list[int | None] = [None] * len(ops)
        self.start: list[int | None] = [None] * len(ops)
        self.end: list[int | None] = [None] * len(ops)
        self.blocked: dict[int, int] = {}  # rank -> the collective its next wait point waits for
        queues: dict[str, list[int]] = defaultdict(list)
        for i, op in enumerate(ops):
            queues[op.pool].append(i)
        for queue in queues.values():
            queue.sort(key=lambda i: (ops[i].order_ns, i))
        self.queues = dict(queues)
        self.next_in_queue = dict.fromkeys(self.queues, 0)
        self.open_pools = list(self.queues)  # the pools with collectives not yet admitted
        # What stopped each pool's queue, to skip it until that changes: its next collective not ready
        # ("ready", (rank, chain position)), every server busy ("server"), a server free later ("time").
        self.block: dict[str, tuple[str, Any]] = {}
        self.freed: set[str] = set()  # pools a collective of which ended since they were last looked at
        self.servers: dict[str, list[float]] = {
            pool: [-math.inf] * max(1, servers.get(pool, 1)) for pool in self.queues
        }
        self.server_of: list[int] = [-1] * len(ops)
        self.started_count = [0] * len(plan.instances)
        self.remaining: dict[int, float] = {}
        self.ranks_of = [sorted({ops[m].rank for m in members}) for _sync, members in plan.instances]
        self.heap: list[tuple[float, int]] = []
        self.wakeups: list[float] = []
        self.now = -math.inf
        self.horizon = MAX_TIME_NS - origin  # the latest time, relative to the origin

    # -- compute chains ---------------------------------------------------------------------------

    def _resolve_chains(self) -> bool:
        changed = False
        ops = self.plan.ops
        end = self.end
        blocked = self.blocked
        for rank, values in self.points.items():
            resolved = self.values[rank]
            waiting = blocked.get(rank)
            if waiting is not None and end[waiting] is None:
                continue  # still waiting for the collective it waited for last time
            while len(resolved) < len(values):
                _t, kind, index = values[len(resolved)]
                previous = resolved[-1] if resolved else 0
                if kind == 0:
                    wait, deps = self.plan.waits[index]
                    latest: int | None = None
                    if self.communication and deps:
                        unfinished = next((d for d in deps if end[d] is None), None)
                        if unfinished is not None:
                            blocked[rank] = unfinished
                            break
                        latest = max(end[d] for d in deps)  # type: ignore[type-var]
                    resolved.append(_resume(wait, previous, latest) - wait.resume_ns)
                else:
                    op = ops[index]
                    self.encode.append((rank, op.ready_ns + previous, op.encode_ns))
                    resolved.append(previous + op.encode_ns)
                changed = True
        return changed

    def _ready_of(self, i: int) -> int | None:
        if self.ready[i] is None:
            op = self.plan.ops[i]
            k = self.anchor[i]
            if k < 0:
                self.ready[i] = op.ready_ns
            elif len(self.values[op.rank]) > k:
                self.ready[i] = op.ready_ns + self.values[op.rank][k]
        return self.ready[i]

    # -- pools ------------------------------------------------------------------------------------

    def _blocked(self, pool: str) -> bool:
        """Whether what stopped the pool's queue last time still holds (nothing to look at again)."""
        block = self.block.get(pool)
        if block is None:
            return False
        kind, value = block
        if kind == "ready":  # its next collective's rank has not resolved that far
            rank, k = value
            return bool(len(self.values[rank]) <= k)
        if pool in self.freed:  # a collective of it ended: a server may be free sooner
            return False
        return kind == "server" or self.now < float(value)  # every server busy; or the first frees later

    def _admit(self) -> bool:
        changed = False
        ops = self.plan.ops
        exhausted = False
        for pool in self.open_pools:
            if self._blocked(pool):
                continue
            self.block.pop(pool, None)
            self.freed.discard(pool)
            queue = self.queues[pool]
            servers = self.servers[pool]
            while self.next_in_queue[pool] < len(queue):
                i = queue[self.next_in_queue[pool]]
                ready = self._ready_of(i)
                if ready is None:
                    self.block[pool] = ("ready", (ops[i].rank, self.anchor[i]))
                    break
                k = min(range(len(servers)), key=servers.__getitem__)
                free = servers[k]
                if free == math.inf:
                    self.block[pool] = ("server", 0.0)
                    break
                if free > self.now:
                    # Known to free later (a lagging end): another server may free sooner; look again then.
                    heapq.heappush(self.wakeups, free)
                    self.block[pool] = ("time", free)
                    break
                start = max(float(ready), free) + ops[i].launch_delay_ns
                start = max(start, self.now)
                servers[k] = math.inf
                self.server_of[i] = k
                heapq.heappush(self.heap, (start, i))
                self.next_in_queue[pool] += 1
                changed = True
            exhausted = exhausted or self.next_in_queue[pool] == len(queue)
        if exhausted:  # every collective of a pool admitted: it is not looked at again
            self.open_pools = [p for p in self.open_pools if self.next_in_queue[p] < len(self.queues[p])]
        return changed

    # -- links ------------------------------------------------------------------------------------

    def _rates(self) -> dict[int, float]:
        load: dict[int, int] = defaultdict(int)
        for k in self.remaining:
            for r in self.ranks_of[k]:
                load[r] += 1
        return {k: min(1.0 / load[r] for r in self.ranks_of[k]) for k in self.remaining}

    def _finish(self, k: int, at: float) -> None:
        ops = self.plan.ops
        synchronising, members = self.plan.instances[k]
        for m in members:
            lag = ops[m].lag_ns if synchronising else 0
            end = at + lag + ops[m].decode_ns
            self.end[m] = round(end)
            self.servers[ops[m].pool][self.server_of[m]] = end
            self.freed.add(ops[m].pool)
        self.remaining.pop(k, None)

    def run(self) -> None:
        """Replay to the end."""
        ops = self.plan.ops
        origin = self.origin
        # Relative times inside the simulation.
        for op in ops:
            op.ready_ns -= origin
        for rank in self.points:
            self.points[rank] = [(t - origin, kind, index) for t, kind, index in self.points[rank]]
            self.times[rank] = [t - origin for t in self.times[rank]]
        waits = [
            (replace(w, gap_start_ns=w.gap_start_ns - origin, resume_ns=w.resume_ns - origin), d)
            for w, d in self.plan.waits
        ]
        self.plan = replace(self.plan, waits=waits)
        now = -math.inf
        self.now = now
        while True:
            progress = True
            while progress:
                progress = self._resolve_chains() | self._admit()
            rates = self._rates()
            done_at = {k: now + self.remaining[k] / rate for k, rate in rates.items()}
            next_done = min(done_at.values(), default=math.inf)
            next_start = self.heap[0][0] if self.heap else math.inf
            next_wakeup = self.wakeups[0] if self.wakeups else math.inf
            t = min(next_done, next_start, next_wakeup)
            if t == math.inf:
                break
            if t > self.horizon:
                raise UsageError(_too_long(self.horizon))
            while self.wakeups and self.wakeups[0] <= t:
                heapq.heappop(self.wakeups)
            if now > -math.inf:
                for k, rate in rates.items():
                    self.remaining[k] -= rate * (t - now)
            now = t
            self.now = now
            # A transfer is done when its completion time is reached, whatever float rounding left
            # of its work: late in a long replay (1e17 ns) the clock's float step is 16 ns, a few ns
            # of work left do not move it, and waiting for them to drop below _DONE never ends.
            for k in [k for k, left in self.remaining.items() if left <= _DONE or done_at[k] <= now]:
                self._finish(k, now)
            while self.heap and self.heap[0][0] <= now:
                _s, i = heapq.heappop(self.heap)
                self.start[i] = round(now)
                k = ops[i].instance
                self.started_count[k] += 1
                if self.started_count[k] == len(self.plan.instances[k][1]):
                    work = max(ops[m].work_ns for m in self.plan.instances[k][1])
                    if work <= _DONE:
                        self._finish(k, now)
                    else:
                        self.remaining[k] = work
        for op in ops:
            op.ready_ns += origin
        if any(e is None for e in self.end) or any(
            len(self.values[r]) < len(v) for r, v in self.points.items()
        ):
            msg = "what-if replay: the dependency graph is stuck (a bug in timeline); please report the trace"
            raise RuntimeError(msg)

    def timeline(self) -> _Timeline:
        """Return the replayed run, in absolute times."""
        origin = self.origin
        return _Timeline(
            shift_times={rank: [t + origin for t in ts] for rank, ts in self.times.items()},
            shift_values=self.values,
            op_start=[(s if s is not None else 0) + origin for s in self.start],
            op_end=[(e if e is not None else 0) + origin for e in self.end],
            encode=[(r, s + origin, length) for r, s, length in self.encode],
        )


def _simulate(graph: TraceGraph, scenario: Scenario, plan: _Plan) -> _Timeline:
    """Replay the plan's collectives and waits over the graph's compute."""
    servers: dict[str, int] = defaultdict(int)
    channels: dict[str, set[str]] = defaultdict(set)
    for o in graph.ops:
        channels[o.pool].add(o.channel)
    for pool, names in channels.items():
        servers[pool] = len(names)
    origin = int(graph.windows.get_column("start_ns").min() or 0)  # type: ignore[arg-type]
    if plan.ops:
        origin = min(origin, min(op.ready_ns for op in plan.ops))
    simulation = _Simulation(scenario, plan, dict(servers), origin)
    simulation.run()
    return simulation.timeline()


def _too_long(horizon_ns: float) -> str:
    """Return the error of a scenario whose replay goes past :data:`MAX_TIME_NS`."""
    years = max(0.0, horizon_ns) / (365.25 * 86_400e9)
    return (
        f"what-if: this scenario's predicted run lasts more than {years:.0f} years, longer than "
        "timeline's nanosecond times can hold; lower --latency or --world-size, or raise --bandwidth or "
        "--efficiency"
    )


def _check_iterations(graph: TraceGraph, iterations: Sequence[int]) -> None:
    """Raise :class:`UsageError` for an iteration the graph does not have, listing those it has."""
    present = sorted(set(graph.windows.get_column("iteration").drop_nulls().to_list()))
    missing = sorted(set(iterations) - set(present))
    if not missing:
        return
    asked = ", ".join(str(i) for i in missing[:5]) + (", ..." if len(missing) > 5 else "")
    if not present:
        msg = f"iteration {asked}: the trace has no iterations (no ProfilerStep#N); leave --iteration out"
    else:
        msg = f"iteration {asked}: not in the trace; its iterations are {_spans(present)}"
    raise UsageError(msg)


def _spans(values: Sequence[int]) -> str:
    """Return sorted integers as ``3-12, 15`` (runs of consecutive values joined)."""
    runs: list[list[int]] = []
    for value in values:
        if runs and value == runs[-1][1] + 1:
            runs[-1][1] = value
        else:
            runs.append([value, value])
    shown = [str(a) if a == b else f"{a}-{b}" for a, b in runs[:20]]
    return ", ".join(shown) + (", ..." if len(runs) > 20 else "")


def _resume(wait: WaitPoint, shift: int, latest: int | None) -> int:
    """When compute resumes at a wait point, replayed (``latest``: the last replayed end it waits for)."""
    gap = wait.resume_ns - wait.gap_start_ns
    resumed = wait.gap_start_ns + shift
    binding = wait.resume_delay_ns
    if latest is None:
        return resumed if binding is not None else resumed + gap
    if binding is not None:
        return max(resumed, latest) + binding
    return max(resumed + gap, latest)


# ----------------------------------------------------------------------------------------------
# Results


def window_rows(graph: TraceGraph) -> list[dict[str, int]]:
    """Return the rows of ``graph.windows`` the replay reads, to give :func:`window_lengths` again and again.

    ``rank``, ``iteration``, ``window_id``, ``start_ns``, ``end_ns``.
    """
    return graph.windows.select("rank", "iteration", "window_id", "start_ns", "end_ns").to_dicts()


def _window_bounds(
    graph: TraceGraph, timeline: _Timeline, plan: _Plan | None, rows: list[dict[str, int]] | None = None
) -> list[dict[str, int]]:
    """Per window (the rows of ``graph.windows``): its measured and replayed start and end."""
    rows = window_rows(graph) if rows is None else rows
    ends: dict[int, int] = {}
    if plan is not None:
        for i, op in enumerate(plan.ops):
            if op.window_id is not None:
                ends[op.window_id] = max(ends.get(op.window_id, timeline.op_end[i]), timeline.op_end[i])
    out = []
    for row in rows:
        start = row["start_ns"] + timeline.shift(row["rank"], row["start_ns"])
        end = row["end_ns"] + timeline.shift(row["rank"], row["end_ns"])
        end = max(end, ends.get(row["window_id"], end), start)
        out.append({**row, "p_start": start, "p_end": end})
    return out


def _window_frame(graph: TraceGraph, timeline: _Timeline, plan: _Plan | None) -> pl.DataFrame:
    """Per window: replayed start and end."""
    return pl.DataFrame(
        _window_bounds(graph, timeline, plan),
        schema={
            "rank": pl.Int32,
            "iteration": pl.Int64,
            "window_id": pl.Int64,
            "start_ns": pl.Int64,
            "end_ns": pl.Int64,
            "p_start": pl.Int64,
            "p_end": pl.Int64,
        },
    )


def _exposure(graph: TraceGraph, timeline: _Timeline, plan: _Plan, windows: pl.DataFrame) -> pl.DataFrame:
    """Per window: the replayed communication, and the part of it no compute hides."""
    ranks = sorted(timeline.shift_times)
    shifts = pl.DataFrame(
        {
            "rank": [r for r in ranks for _ in timeline.shift_times[r]],
            "_t": [t for r in ranks for t in timeline.shift_times[r]],
            "_d": [v for r in ranks for v in timeline.shift_values[r]],
        },
        schema={"rank": pl.Int32, "_t": pl.Int64, "_d": pl.Int64},
    ).sort("_t")
    compute = (
        graph.compute.sort("start_ns")
        .join_asof(
            shifts, left_on="start_ns", right_on="_t", by="rank", strategy="backward", check_sortedness=False
        )
        .with_columns(pl.col("_d").fill_null(0))
        .select(
            "rank",
            set=pl.lit("compute"),
            start_ns=pl.col("start_ns") + pl.col("_d"),
            end_ns=pl.col("end_ns") + pl.col("_d"),
        )
    )
    extra = pl.DataFrame(
        {
            "rank": [r for r, _s, _l in timeline.encode] + [op.rank for op in plan.ops],
            "set": ["compute"] * len(timeline.encode) + ["comm"] * len(plan.ops),
            "start_ns": [s for _r, s, _l in timeline.encode] + timeline.op_start,
            "end_ns": [s + length for _r, s, length in timeline.encode] + timeline.op_end,
        },
        schema={"rank": pl.Int32, "set": pl.String, "start_ns": pl.Int64, "end_ns": pl.Int64},
    )
    intervals = pl.concat([compute, extra])
    bounds = windows.select("rank", "window_id", w_start="p_start", w_end="p_end")
    clipped = clip_to_windows(intervals, bounds, by=["rank"])
    measured = measure(
        clipped,
        by=["rank", "window_id"],
        sets=("comm", "compute"),
        formulas={"comm_ns": lambda s: s["comm"], "exposed_comm_ns": lambda s: s["comm"] & ~s["compute"]},
    )
    return measured


def _link_busy(plan: _Plan) -> dict[int, int]:
    """Per window: the link time its collectives need alone on the link (the perfect-overlap floor)."""
    busy: dict[int, float] = defaultdict(float)
    for op in plan.ops:
        if op.window_id is not None:
            busy[op.window_id] += op.work_ns + op.decode_ns
    return {window_id: round(value) for window_id, value in busy.items()}


def single_replay(graph: TraceGraph) -> pl.DataFrame:
    """Return ``T_single`` per window: the replayed length without any communication.

    Waits vanish (compute resumes where it stopped), every collective is dropped.

    Returns
    -------
    pl.DataFrame
        Columns ``window_id``, ``single_ns``.
    """
    scenario = Scenario(communication=False)
    plan = _Plan(ops=[], instances=[], waits=[(w, ()) for w in graph.waits], warnings=[])
    timeline = _simulate(graph, scenario, plan)
    frame = _window_frame(graph, timeline, None)
    return frame.select("window_id", single_ns=pl.col("p_end") - pl.col("p_start"))


def window_lengths(
    graph: TraceGraph, *, scenario: Scenario | None = None, windows: list[dict[str, int]] | None = None
) -> dict[int, int]:
    """Return each window's replayed length (``window_id`` → ns) under a scenario, and nothing else.

    The ``predicted_ns`` column of :func:`replay`'s windows (with ``Scenario(communication=False)``:
    ``single_ns``, as :func:`single_replay` gives it), without the exposure measures and the frames:
    what a search over many scenarios needs (:mod:`timeline.diagnosis`). ``windows``: the graph's
    :func:`window_rows`, when the caller keeps them (the same for every graph that changes no window).

    Raises
    ------
    UsageError
        As :func:`replay`.
    """
    scenario = scenario or Scenario()
    if not scenario.communication:
        plan = _Plan(ops=[], instances=[], waits=[(w, ()) for w in graph.waits], warnings=[])
        bounds = _window_bounds(graph, _simulate(graph, scenario, plan), None, windows)
    else:
        plan = _plan(graph, scenario)
        _cost(graph, scenario, plan)
        bounds = _window_bounds(graph, _simulate(graph, scenario, plan), plan, windows)
    return {row["window_id"]: row["p_end"] - row["p_start"] for row in bounds}


def replay(
    graph: TraceGraph,
    *,
    scenario: Scenario | None = None,
    single: pl.DataFrame | None = None,
    iterations: Sequence[int] | None = None,
) -> Prediction:
    """Replay a run's graph under a scenario and predict its iterations.

    Parameters
    ----------
    graph
        From :func:`~timeline.whatif.graph.build_graph` or :func:`~timeline.whatif.graph.trace_graph`.
    scenario
        The conditions; default: the measured ones (a self-replay).
    single
        ``T_single`` per window from an earlier call (``window_id``, ``single_ns``), to save its replay.
    iterations
        Keep only these iterations (``ProfilerStep`` numbers) in the summaries.

    Returns
    -------
    Prediction

    Raises
    ------
    UsageError
        A scenario the trace cannot answer (another bandwidth with observed efficiency but no measured link),
        an iteration not in the trace, or a scenario whose predicted times go past :data:`MAX_TIME_NS`.

    Examples
    --------
    >>> from timeline import load  # doctest: +SKIP
    >>> from timeline.whatif import trace_graph  # doctest: +SKIP
    >>> graph = trace_graph(load("sample_traces/ddp_gloo_markers"))  # doctest: +SKIP
    >>> scenario = Scenario(world_size=64, efficiency="full", bandwidth_gbps=10)  # doctest: +SKIP
    >>> replay(graph, scenario=scenario).scaling_factor  # doctest: +SKIP
    """
    scenario = scenario or Scenario()
    if iterations is not None:
        _check_iterations(graph, iterations)
    plan = _plan(graph, scenario)
    warnings = _cost(graph, scenario, plan)
    timeline = _simulate(graph, scenario, plan)
    windows = _window_frame(graph, timeline, plan)
    if single is None:
        single = single_replay(graph)
    exposure = _exposure(graph, timeline, plan, windows)
    busy = _link_busy(plan)
    encode_total: dict[int, int] = defaultdict(int)
    for op in plan.ops:
        if op.window_id is not None:
            encode_total[op.window_id] += op.encode_ns
    busy_frame = pl.DataFrame(
        {
            "window_id": list(busy),
            "_busy": list(busy.values()),
        },
        schema={"window_id": pl.Int64, "_busy": pl.Int64},
    )
    encodes = pl.DataFrame(
        {"window_id": list(encode_total), "_enc": list(encode_total.values())},
        schema={"window_id": pl.Int64, "_enc": pl.Int64},
    )
    frame = (
        windows.join(single, on="window_id", how="left")
        .join(exposure, on=["rank", "window_id"], how="left")
        .join(busy_frame, on="window_id", how="left")
        .join(encodes, on="window_id", how="left")
        .with_columns(
            measured_ns=pl.col("end_ns") - pl.col("start_ns"),
            predicted_ns=pl.col("p_end") - pl.col("p_start"),
            comm_ns=pl.col("comm_ns").fill_null(0),
            exposed_comm_ns=pl.col("exposed_comm_ns").fill_null(0),
        )
        .with_columns(
            perfect_overlap_ns=pl.max_horizontal(
                pl.col("single_ns") + pl.col("_enc").fill_null(0), pl.col("_busy").fill_null(0)
            )
        )
    )
    frame = (
        frame.select(PREDICTED_WINDOWS_SCHEMA.names())
        .cast(PREDICTED_WINDOWS_SCHEMA)
        .sort("rank", "window_id")
    )
    return Prediction(
        scenario=scenario,
        windows=frame,
        iterations=_per_iteration(frame, iterations),
        warnings=tuple(warnings),
    )


LINK_TIMES_SCHEMA = pl.Schema(
    {
        "op_id": pl.Int64(),
        "rank": pl.Int32(),
        "window_id": pl.Int64(),
        "group": pl.String(),
        "dimension": pl.String(),
        "collective": pl.String(),
        "nbytes": pl.Int64(),
        "group_size": pl.Int32(),
        "link_ns": pl.Float64(),
    }
)
"""One row per collective of a scenario (:func:`link_times`)."""


def link_times(graph: TraceGraph, *, scenario: Scenario) -> pl.DataFrame:
    """Return the modelled link time of every collective of a scenario, alone on its link.

    What the replay gives each collective's transfer before links are shared (``docs/whatif.md``:
    the cost model), with the link and latency of the collective's dimension.

    Returns
    -------
    pl.DataFrame
        :data:`LINK_TIMES_SCHEMA`: ``op_id`` (the measured collective, :attr:`TraceGraph.ops`; null
        for a rebuilt gradient bucket), its rank, window, group, dimension, kind, bytes and group
        size, and ``link_ns``.

    Raises
    ------
    UsageError
        A scenario the trace cannot answer (as :func:`replay`).
    """
    plan = _plan(graph, scenario)
    _cost(graph, scenario, plan)
    rows = [
        {
            "op_id": op.source.op_id if op.source is not None else None,
            "rank": op.rank,
            "window_id": op.window_id,
            "group": op.source.group if op.source is not None else None,
            "dimension": op.dimension,
            "collective": op.collective,
            "nbytes": op.nbytes,
            "group_size": op.group_size,
            "link_ns": op.work_ns,
        }
        for op in plan.ops
    ]
    return pl.DataFrame(rows, schema=LINK_TIMES_SCHEMA)


def _cost(graph: TraceGraph, scenario: Scenario, plan: _Plan) -> list[str]:
    """Set each collective's link time and codec times under the scenario; return the plan's warnings."""
    notes: set[str] = set()
    uniform = _uniform_calibration(graph, scenario) if scenario.efficiency == "uniform" else {}
    for op in plan.ops:
        op.work_ns = _work_ns(op, graph, scenario, uniform, notes)
        if not op.work_ns <= MAX_TIME_NS:  # also infinity and nan
            raise UsageError(_too_long(MAX_TIME_NS))
        if op.gradient and scenario.compression.active:
            op.encode_ns = scenario.compression.codec_ns(op.nbytes or 0)
            op.decode_ns = op.encode_ns
    warnings = list(plan.warnings)
    if "nobytes" in notes:
        warnings.append("collectives without bytes in the trace keep their measured time")
    if "nocalibration" in notes:
        warnings.append("rebuilt buckets without a measured collective to calibrate on use the full link")
    return warnings


def _per_iteration(windows: pl.DataFrame, iterations: Sequence[int] | None) -> pl.DataFrame:
    """Medians over ranks, per iteration."""
    frame = windows
    if iterations is not None:
        frame = frame.filter(pl.col("iteration").is_in(list(iterations)))
    medians = [
        pl.col(c).median().round().cast(pl.Int64)
        for c in ("measured_ns", "predicted_ns", "single_ns", "exposed_comm_ns", "perfect_overlap_ns")
    ]
    out = (
        frame.group_by("iteration", maintain_order=True)
        .agg(pl.len().cast(pl.Int32).alias("ranks"), *medians)
        .with_columns(
            scaling_factor=pl.when(pl.col("predicted_ns") > 0).then(
                pl.col("single_ns") / pl.col("predicted_ns")
            ),
            error_ratio=pl.when(pl.col("measured_ns") > 0).then(
                (pl.col("predicted_ns") - pl.col("measured_ns")).abs() / pl.col("measured_ns")
            ),
        )
        .sort("iteration", nulls_last=True)
    )
    return out.select(PREDICTED_ITERATIONS_SCHEMA.names()).cast(PREDICTED_ITERATIONS_SCHEMA)


def self_replay(graph: TraceGraph, *, efficiency: Efficiency = "observed") -> Prediction:
    """Replay a run under its own measured conditions (the validation of the model).

    ``efficiency="observed"`` gives each collective the time it took; ``"uniform"`` one figure per
    collective kind over the whole trace, a harder test of the cost model.
    """
    return replay(graph, scenario=Scenario(efficiency=efficiency))
