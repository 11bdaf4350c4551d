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
import contextlib
import heapq
import math
import operator
import weakref
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import msgspec
import polars as pl

from timeline.analysis.collective_costs import COST_POINTS_SCHEMA, CellCost, cell_costs, fit_collective_costs
from timeline.analysis.intervals import clip_to_windows, measure
from timeline.errors import UsageError
from timeline.stats import median, mode
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
from timeline.whatif.costs import (
    MAX_LATENCY_S,
    MAX_TIME_NS,
    MAX_WORLD_SIZE,
    Algorithm,
    Efficiency,
    bandwidth_bits,
    latency_steps,
)
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
    "cost_fit",
    "link_times",
    "replay",
    "self_replay",
    "single_replay",
    "window_lengths",
    "window_rows",
]

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
        The latency of one step of a collective: each collective's fixed cost becomes
        ``latency_steps · latency_s`` in place of the one fitted from the trace
        (:func:`cost_fit`: ``α`` per collective kind and process group); None: as measured.
    algorithm
        ``ring`` or ``tree`` (the trace's collectives are taken to have used it too).
    buckets
        How gradients are grouped: as measured, DDP caps, or Horovod-style fusion.
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
        ``(dimension, seconds)`` pairs: the latency of one step of that dimension's collectives, in
        place of ``latency_s``.
    """

    bandwidth_gbps: float | None = None
    world_size: int | None = None
    efficiency: Efficiency = "observed"
    latency_s: float | None = None
    algorithm: Algorithm = "ring"
    buckets: BucketPolicy = MEASURED
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
        if self.latency_s is not None and not 0 <= self.latency_s <= MAX_LATENCY_S:  # nan, infinity too
            raise UsageError(f"latency {self.latency_s} s: must be between 0 and {MAX_LATENCY_S:g} s")

    def bandwidth_of(self, dimension: str | None) -> float | None:
        """Return the link (Gbit/s) of a collective of this dimension; None: the measured link."""
        return dict(self.dimension_bandwidths).get(dimension or "", self.bandwidth_gbps)

    def latency_of(self, dimension: str | None) -> float | None:
        """Return the latency of one step (seconds) of a collective of this dimension; None: as measured."""
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


class _Op(msgspec.Struct):
    """A collective of the scenario: a measured one (``source``) or a rebuilt bucket.

    The measured ones are shared by every replay of their graph (:class:`_Shared`): an op is not
    changed once its plan is made; what the scenario costs it is in the plan (:func:`_cost`).
    """

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
    """Nanoseconds per bit of bandwidth term at the measured link, fixed costs apart (rebuilt buckets
    whose kind and group the cost fit cannot separate)."""
    instance: int = -1
    lag_ns: int = 0
    dimension: str | None = None
    """The dimension of its process group (:attr:`~timeline.whatif.graph.CommOp.dimension`)."""
    group: str | None = None
    """Its process group (:attr:`~timeline.whatif.graph.CommOp.group`): whose fitted cost it has."""


_COST_KEY = operator.attrgetter(
    "collective", "nbytes", "group_size", "dimension", "gradient", "base_ns", "calibration", "group"
)
"""What a measured op's link time depends on besides the scenario and the graph (:func:`_work_ns`)."""


class _Plan(msgspec.Struct):
    """A scenario's collectives, their logical collectives (synchronising or not, members) and waits.

    ``ops``, ``instances``, ``waits`` and ``groups`` may be shared by the replays of a graph: they
    are read, never changed. :func:`_cost` sets the scenario's times of the ops.
    """

    ops: list[_Op]
    instances: list[tuple[bool, list[int]]]
    waits: list[tuple[WaitPoint, tuple[int, ...]]]
    warnings: list[str]
    groups: list[list[int]] = msgspec.field(default_factory=list)
    """The ops that cost the same under any scenario (:data:`_COST_KEY`), listed by their first op."""
    work_ns: list[float] = msgspec.field(default_factory=list)
    """Per op: the scenario's link time of its transfer, alone on the link."""
    encode_ns: list[int] = msgspec.field(default_factory=list)
    decode_ns: list[int] = msgspec.field(default_factory=list)
    layouts: dict[bool, _Layout] | None = None
    """A shared plan's replay layouts, per ``Scenario.communication`` (None: the plan is not shared)."""


class _Kept(msgspec.Struct):
    """The measured collectives a scenario keeps (all, or all but the gradient ones), once per graph."""

    ops: list[_Op]
    instances: list[tuple[bool, list[int]]]
    index_of: dict[int, int]
    """``op_id`` → index in ``ops``."""
    groups: list[list[int]]
    waits: list[tuple[WaitPoint, tuple[int, ...]]]
    """The waits on the kept collectives (with no rebuilt bucket to wait for)."""
    layouts: dict[bool, _Layout] = msgspec.field(default_factory=dict)


class _Shared:
    """What every replay of one graph shares, whatever the scenario (made once: :func:`_shared`)."""

    def __init__(self, graph: TraceGraph) -> None:
        instances = graph.instances
        self.work = {op_id: inst.work_ns for inst in instances for op_id in inst.ops}
        """Each measured collective's exclusive link time (of its logical collective)."""
        self.lag = {op_id: x for inst in instances for op_id, x in zip(inst.ops, inst.lags_ns, strict=True)}
        channels: dict[str, set[str]] = defaultdict(set)
        for o in graph.ops:
            channels[o.pool].add(o.channel)
        self.servers = {pool: len(names) for pool, names in channels.items()}
        """Per pool: its servers (channels)."""
        self.window_start = int(graph.windows.get_column("start_ns").min() or 0)  # type: ignore[arg-type]
        self.gradient_windows = {(o.rank, o.window_id) for o in graph.ops if o.gradient}
        """The ``(rank, window)`` whose gradient collectives a rebucketing scenario rebuilds."""
        self.kept: dict[bool, _Kept] = {}
        self.single_layouts: dict[bool, _Layout] = {}
        self._iteration_of: dict[int, int | None] | None = None
        self._fit: pl.DataFrame | None = None
        self._costs: dict[tuple[str, str | None], CellCost] | None = None

    def fit(self, graph: TraceGraph) -> pl.DataFrame:
        """Return the α-β fit of the graph's collectives (:func:`cost_fit`), made once."""
        if self._fit is None:
            points = []
            ops = {o.op_id: o for o in graph.ops}
            for inst in graph.instances:
                first = ops[inst.ops[0]]
                points.append(
                    (
                        first.collective,
                        first.group,
                        first.dimension,
                        first.group_size,
                        first.nbytes,
                        inst.work_ns,
                    )
                )
            frame = pl.DataFrame(points, schema=COST_POINTS_SCHEMA, orient="row")
            self._fit = fit_collective_costs(
                frame, link_gbps=graph.link_gbps, dimension_links=dict(graph.dimension_links)
            )
        return self._fit

    def costs(self, graph: TraceGraph) -> dict[tuple[str, str | None], CellCost]:
        """Return the fitted cost of each collective kind per group that the fit separates."""
        if self._costs is None:
            self._costs = cell_costs(self.fit(graph))
        return self._costs

    def iteration_of(self, graph: TraceGraph) -> dict[int, int | None]:
        """Return the iteration of each window (``window_id`` → ``ProfilerStep`` number)."""
        if self._iteration_of is None:
            windows = graph.windows
            ids = windows.get_column("window_id").to_list()
            self._iteration_of = dict(zip(ids, windows.get_column("iteration").to_list(), strict=True))
        return self._iteration_of

    def kept_ops(self, graph: TraceGraph, rebuilds: bool) -> _Kept:
        """Return the collectives kept as measured (``rebuilds``: but the rebuilt gradient ones)."""
        if rebuilds not in self.kept:
            self.kept[rebuilds] = _keep(graph, self, self.gradient_windows if rebuilds else set())
        return self.kept[rebuilds]


_SHARED: dict[int, tuple[weakref.ref[TraceGraph], _Shared]] = {}
"""What the replays of each live graph share, by the graph's identity (dropped with the graph)."""


def _shared(graph: TraceGraph) -> _Shared:
    """Return what the replays of this graph object share, made on its first replay.

    A graph is frozen: what is made of it stays right as long as it lives. The entry is keyed by the
    object's identity, checked against a weak reference, and dropped when the graph is.
    """
    key = id(graph)
    entry = _SHARED.get(key)
    if entry is not None and entry[0]() is graph:
        return entry[1]
    shared = _Shared(graph)

    def forget(ref: weakref.ref[TraceGraph]) -> None:
        if key in _SHARED and _SHARED[key][0] is ref:
            del _SHARED[key]

    with contextlib.suppress(TypeError):  # a graph that cannot be weakly referenced: nothing is kept
        _SHARED[key] = (weakref.ref(graph, forget), shared)
    return shared


def _median_int(values: Sequence[int]) -> int:
    return int(median(values)) if values else 0


def _plan(graph: TraceGraph, scenario: Scenario) -> _Plan:
    """Return the collectives and waits of a scenario (gradient buckets rebuilt if asked)."""
    shared = _shared(graph)
    rebuilds = scenario.rebuckets and bool(shared.gradient_windows)
    kept = shared.kept_ops(graph, rebuilds)
    if not rebuilds:
        return _Plan(
            ops=kept.ops,
            instances=kept.instances,
            waits=kept.waits,
            warnings=[],
            groups=kept.groups,
            layouts=kept.layouts,
        )
    warnings: list[str] = []
    ops = list(kept.ops)
    instances = list(kept.instances)
    new_of: dict[tuple[int, int | None], list[int]] = defaultdict(list)
    _rebuild(graph, scenario, shared, ops, instances, new_of, warnings)
    groups = kept.groups + [[i] for i in range(len(kept.ops), len(ops))]
    regrouped = not isinstance(scenario.buckets, MeasuredBuckets)
    waits = _waits(graph, kept.index_of, ops, new_of, regrouped=regrouped)
    return _Plan(ops=ops, instances=instances, waits=waits, warnings=warnings, groups=groups)


def _keep(graph: TraceGraph, shared: _Shared, rebuilt: set[tuple[int, int | None]]) -> _Kept:
    """Return the measured collectives but the gradient ones of the ``rebuilt`` windows."""
    kept = [o for o in graph.ops if not (o.gradient and (o.rank, o.window_id) in rebuilt)]
    index_of = {o.op_id: i for i, o in enumerate(kept)}
    base = [shared.work[o.op_id] for o in kept]
    lag = [shared.lag[o.op_id] for o in kept]
    instance = [-1] * len(kept)
    instances: list[tuple[bool, list[int]]] = []
    for inst in graph.instances:
        members = [index_of[i] for i in inst.ops if i in index_of]
        if not members:
            continue
        synchronising = inst.synchronising and len(members) > 1
        for m in members:
            instance[m] = len(instances)
            if not synchronising:
                lag[m] = 0
        if not synchronising and inst.synchronising:
            for m in members:  # a lone survivor of a matched collective: its own duration
                base[m] = float(kept[m].end_ns - kept[m].start_ns)
        instances.append((synchronising, members))
    ops = [  # _Op's fields in order (positional: thousands of ops)
        _Op(
            o.rank,
            o.window_id,
            o.channel,
            o.pool,
            o.collective,
            o.nbytes,
            o.group_size,
            o.ready_ns,
            o.start_ns,
            o.launch_delay_ns,
            o.gradient,
            o,
            base[m],
            None,
            instance[m],
            lag[m],
            o.dimension,
            o.group,
        )
        for m, o in enumerate(kept)
    ]
    same_cost: dict[tuple[object, ...], list[int]] = {}
    for i, key in enumerate(map(_COST_KEY, ops)):
        same_cost.setdefault(key, []).append(i)
    waits = _waits(graph, index_of, ops, defaultdict(list))
    return _Kept(
        ops=ops, instances=instances, index_of=index_of, groups=list(same_cost.values()), waits=waits
    )


def _waits(
    graph: TraceGraph,
    index_of: dict[int, int],
    ops: list[_Op],
    new_of: dict[tuple[int, int | None], list[int]],
    *,
    regrouped: bool = False,
) -> list[tuple[WaitPoint, tuple[int, ...]]]:
    """Return each wait and the collectives it waits for (the rebuilt buckets of replaced gradient ones).

    ``regrouped`` (a bucketing policy other than the measured one): a wait (not the update) for
    replaced collectives only waits for the rebuilt buckets ready before it began, without its
    measured resume delay: that wake-up belonged to a collective the scenario no longer has (DDP's
    finalisation waits once per bucket; 95 waits of 1-9 ms each on a loaded machine in the
    ``tiny_buckets`` validation job). The update keeps its own.
    """
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
        replaced = bool(wait.deps) and all(i in removed_window for i in wait.deps)
        if regrouped and replaced and not wait.update and wait.resume_delay_ns is not None:
            wait = msgspec.structs.replace(wait, resume_delay_ns=0)
        waits.append((wait, tuple(sorted(deps))))
    return waits


def _rebuild(
    graph: TraceGraph,
    scenario: Scenario,
    common: _Shared,
    ops: list[_Op],
    instances: list[tuple[bool, list[int]]],
    new_of: dict[tuple[int, int | None], list[int]],
    warnings: list[str],
) -> None:
    """Replace the gradient collectives of the rebuilt windows by buckets of their gradients."""
    rebuilt = common.gradient_windows
    iteration_of = common.iteration_of(graph)
    measured, grads = _rebuilt_members(graph, rebuilt=rebuilt)
    shared = _fused_buckets(scenario.buckets, grads=grads, iteration_of=iteration_of)
    groups: dict[tuple[object, object, int], list[int]] = defaultdict(list)
    for key in sorted(rebuilt, key=lambda k: (k[0], -1 if k[1] is None else k[1])):
        originals = measured[key]
        members = sorted(grads.get(key, []), key=lambda g: g.ready_ns)
        if not members:
            continue
        iteration = iteration_of.get(key[1]) if key[1] is not None else None
        fused = shared.get(iteration)
        bucket_ops = _bucket_ops(
            graph, scenario, common, key=key, members=members, originals=originals, fused=fused
        )
        for k, op in enumerate(bucket_ops):
            groups[(op.group, iteration, k)].append(len(ops))
            new_of[key].append(len(ops))
            ops.append(op)
    for indices in groups.values():
        for m in indices:
            ops[m].instance = len(instances)
        instances.append((len(indices) > 1, indices))
    if any(o.nbytes is None for originals in measured.values() for o in originals):
        warnings.append("gradient collectives without bytes: rebuilt buckets use the gradient-ready sizes")


def _rebuilt_members(
    graph: TraceGraph, *, rebuilt: set[tuple[int, int | None]]
) -> tuple[dict[tuple[int, int | None], list[CommOp]], dict[tuple[int, int | None], list[Gradient]]]:
    """Return the measured gradient collectives and the gradients of each rebuilt rank-window."""
    measured: dict[tuple[int, int | None], list[CommOp]] = defaultdict(list)
    for o in graph.ops:
        if o.gradient and (o.rank, o.window_id) in rebuilt:
            measured[(o.rank, o.window_id)].append(o)
    grads: dict[tuple[int, int | None], list[Gradient]] = defaultdict(list)
    for g in graph.gradients:
        if (g.rank, g.window_id) in rebuilt:
            grads[(g.rank, g.window_id)].append(g)
    return measured, grads


def _fused_buckets(
    policy: BucketPolicy,
    *,
    grads: dict[tuple[int, int | None], list[Gradient]],
    iteration_of: dict[int, int | None],
) -> dict[object, list[Bucket]]:
    """Return fusion's buckets per iteration, formed on the gradients' latest ready time over ranks."""
    shared: dict[object, list[Bucket]] = {}
    if not isinstance(policy, FusionBuckets):  # fusion depends on timing, the other policies do not
        return shared
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
    return shared


def _bucket_ops(
    graph: TraceGraph,
    scenario: Scenario,
    common: _Shared,
    *,
    key: tuple[int, int | None],
    members: list[Gradient],
    originals: list[CommOp],
    fused: list[Bucket] | None,
) -> list[_Op]:
    """Return the rebuilt bucket collectives of one rank-window (its gradients in ready order)."""
    work = common.work
    buckets, origins = _buckets_of(scenario.buckets, members, fused)
    if scenario.overlap == "none":  # everything leaves when the backward pass has ended
        last = max([g.ready_ns for g in members] + [o.ready_ns for o in originals])
        buckets = [msgspec.structs.replace(b, ready_ns=last) for b in buckets]
    kind = mode([o.collective for o in originals]) if originals else "all_reduce"
    channel = mode([o.channel for o in originals]) if originals else "gradients"
    pool = mode([o.pool for o in originals]) if originals else f"{key[0]}/gradients"
    group_size = max((o.group_size for o in originals), default=graph.world_size)
    group = mode([o.group for o in originals]) if originals else None
    dimension = mode([o.dimension for o in originals]) if originals else None
    delay = max(0, _median_int([o.launch_delay_ns for o in originals]))
    calibration = _calibration(originals, work, scenario, common.costs(graph))
    by_id = {o.op_id: o for o in originals}
    out: list[_Op] = []
    for k, bucket in enumerate(buckets):
        op = _Op(
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
            group=group,
        )
        if origins and origins[k] in by_id:  # the measured collective, launched later: its own time
            op.source, op.base_ns = by_id[origins[k]], work[origins[k]]
        out.append(op)
    return out


def _measured_fixed_ns(op: CommOp | _Op, work_ns: float, costs: _Costs) -> float:
    """Return a measured collective's fixed cost: its kind's fitted ``α`` on its group, at most its time."""
    cell = costs.get((op.collective or "", op.group))
    return min(cell.alpha_ns, work_ns) if cell is not None else 0.0


def _buckets_of(
    policy: BucketPolicy, members: Sequence[Gradient], fused: list[Bucket] | None
) -> tuple[list[Bucket], list[int]]:
    """Return a rank-window's rebuilt buckets (its gradients in ready order) and the measured ones' ops.

    ``fused``: the buckets Horovod-style fusion formed on every rank's latest ready times, when it
    did; a bucket is then ready when this rank's own gradients of it are.
    """
    if isinstance(policy, MeasuredBuckets):  # each rebuilt bucket is its measured collective
        by_op: dict[int, list[int]] = defaultdict(list)
        for k, g in enumerate(members):
            by_op[g.op_id].append(k)
        ordered = sorted(by_op.items(), key=lambda item: max(members[k].ready_ns for k in item[1]))
        buckets = [
            Bucket(max(members[k].ready_ns for k in ks), sum(members[k].nbytes for k in ks), tuple(ks))
            for _, ks in ordered
        ]
        return buckets, [op_id for op_id, _ in ordered]
    if fused is not None:
        return [Bucket(max(members[k].ready_ns for k in b.members), b.nbytes, b.members) for b in fused], []
    return make_buckets(policy, [GradientReady(g.ready_ns, g.nbytes) for g in members]), []


def _calibration(
    originals: Sequence[CommOp], work: dict[int, float], scenario: Scenario, costs: _Costs
) -> float | None:
    """Return ns per bit of bandwidth term over measured collectives: ``Σ (W − α) / Σ bits``.

    ``W`` each one's exclusive link time, ``α`` its fitted fixed cost (0 where the fit cannot
    separate it), ``bits`` :func:`~timeline.whatif.costs.bandwidth_bits`: byte-weighted.
    """
    time_ns = 0.0
    bits = 0.0
    for o in originals:
        if o.nbytes is None:
            continue
        w = bandwidth_bits(o.collective, o.nbytes, o.group_size, algorithm=scenario.algorithm)
        if w <= 0:
            continue
        time_ns += max(0.0, work[o.op_id] - _measured_fixed_ns(o, work[o.op_id], costs))
        bits += w
    return time_ns / bits if bits > 0 else None


# ----------------------------------------------------------------------------------------------
# Costs


_Costs = dict[tuple[str, str | None], CellCost]
"""The fitted cost of each collective kind per process group (:func:`cost_fit`, the cells it separates)."""


def cost_fit(graph: TraceGraph) -> pl.DataFrame:
    """Return the fixed cost per call and the time per byte of the graph's collectives, per kind and group.

    :func:`~timeline.analysis.collective_costs.fit_collective_costs` of every logical collective's
    exclusive link time (:attr:`~timeline.whatif.graph.Instance.work_ns`), with the graph's link:
    what the replay charges a collective it merges or splits (rebuilt gradient buckets), and keeps
    as the fixed part of a measured one (a faster link, compression and another world size change
    the rest; a scenario's ``latency_s`` replaces it). Made once per graph object.

    Returns
    -------
    pl.DataFrame
        ``COLLECTIVE_COSTS_SCHEMA`` (``docs/collectives.md``).
    """
    return _shared(graph).fit(graph)


def _uniform_calibration(graph: TraceGraph, scenario: Scenario, costs: _Costs) -> dict[str | None, float]:
    """Return ns per bit of bandwidth term per collective kind, over the whole trace (fixed costs apart)."""
    work = _shared(graph).work
    by_kind: dict[str | None, list[CommOp]] = defaultdict(list)
    for o in graph.ops:
        by_kind[o.collective].append(o)
    out: dict[str | None, float] = {}
    for kind, members in by_kind.items():
        value = _calibration(members, work, scenario, costs)
        if value is not None:
            out[kind] = value
    return out


def _fixed_ns(op: _Op, scenario: Scenario, costs: _Costs, n: int) -> tuple[float, float]:
    """Return a collective's fixed cost as measured and under the scenario (ns).

    Measured: its kind's fitted ``α`` on its group (at most a measured collective's own time; 0 where
    the fit cannot separate it). Under the scenario: ``latency_steps(n') · latency_s`` when the
    scenario gives a latency, else the measured one times ``latency_steps(n') / latency_steps(n)``
    (a ring over more ranks takes more steps).
    """
    cell = costs.get((op.collective or "", op.group))
    measured = (
        0.0 if cell is None else (min(cell.alpha_ns, op.base_ns) if op.source is not None else cell.alpha_ns)
    )
    alg = scenario.algorithm
    latency = scenario.latency_of(op.dimension)
    steps = latency_steps(op.collective, n, algorithm=alg)
    if latency is not None:
        return measured, steps * latency * 1e9
    steps_measured = latency_steps(op.collective, op.group_size, algorithm=alg)
    return measured, measured * (steps / steps_measured if steps_measured else 1.0)


def _per_bit_ns(
    op: _Op, scenario: Scenario, uniform: dict[str | None, float], costs: _Costs, fixed: float
) -> float | None:
    """Return a collective's ns per bit of bandwidth term at the measured link (None: nothing to go by)."""
    if scenario.efficiency == "uniform" and op.collective in uniform:
        return uniform[op.collective]
    if op.source is not None:
        bits = bandwidth_bits(op.collective, op.nbytes or 0, op.group_size, algorithm=scenario.algorithm)
        return max(0.0, op.base_ns - fixed) / bits
    cell = costs.get((op.collective or "", op.group))
    if cell is not None:
        return cell.beta_ns_per_byte / 8
    return op.calibration


def _observed_per_bit_ns(
    op: _Op,
    scenario: Scenario,
    context: tuple[dict[str | None, float], _Costs],
    *,
    measured_fixed: float,
    gbps: float | None,
    link: float | None,
    measured_link: float | None,
    notes: set[str],
) -> float:
    """Return a collective's ns per bit of bandwidth term on its link (``gbps``), efficiency as observed."""
    uniform, costs = context
    per_bit = _per_bit_ns(op, scenario, uniform, costs, measured_fixed)
    if per_bit is None:
        notes.add("nocalibration")
        per_bit = 1e9 / link if link else 0.0
    elif op.source is None and (op.collective or "", op.group) not in costs:
        notes.add("inseparable")
    if gbps is not None:
        if measured_link is None:
            msg = (
                "the measured link is unknown, so the observed efficiency cannot move to another "
                "bandwidth: pass the link the trace ran on (--link-gbps GBPS, e.g. --link-gbps 25, or "
                "link_gbps= when capturing), or predict on the full link: --efficiency full"
            )
            raise UsageError(msg)
        per_bit *= measured_link / (gbps * 1e9)
    return per_bit


def _work_ns(
    op: _Op,
    graph: TraceGraph,
    scenario: Scenario,
    context: tuple[dict[str | None, float], _Costs],
    notes: set[str],
) -> float:
    """Return the modelled link time of one collective under the scenario, alone on its link (ns).

    ``fixed + bits' · per bit``: the fixed cost per call (:func:`_fixed_ns`) and the bandwidth term
    (:func:`_per_bit_ns`), the bits at the scenario's world size and compression, the time per bit
    at its link (observed: scaled by measured link / new link; full or a fraction: the link's).
    """
    costs = context[1]
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
    gbps = scenario.bandwidth_of(op.dimension)
    measured_gbps = graph.link_of(op.dimension)
    measured_link = measured_gbps * 1e9 if measured_gbps is not None else None
    link = gbps * 1e9 if gbps is not None else measured_link
    if op.nbytes is None or (op.source is not None and bits_measured <= 0):
        if op.source is None:
            return 0.0
        if gbps is not None or scenario.world_size is not None or compressed:
            notes.add("nobytes")
        return op.base_ns
    unchanged = (
        gbps is None and n == n_measured and not compressed and scenario.latency_of(op.dimension) is None
    )
    if op.source is not None and unchanged and scenario.efficiency == "observed":
        return op.base_ns  # as measured, to the nanosecond
    measured_fixed, fixed = _fixed_ns(op, scenario, costs, n)
    if scenario.efficiency in ("observed", "uniform"):
        per_bit = _observed_per_bit_ns(
            op,
            scenario,
            context,
            measured_fixed=measured_fixed,
            gbps=gbps,
            link=link,
            measured_link=measured_link,
            notes=notes,
        )
        return fixed + bits * per_bit
    return fixed + _link_fraction_ns(scenario, bits=bits, link=link)


def _link_fraction_ns(scenario: Scenario, *, bits: float, link: float | None) -> float:
    """Return the bandwidth term of ``bits`` at the scenario's fraction of the link (``full``: all of it)."""
    if link is None:
        msg = (
            f"--efficiency {scenario.efficiency} predicts on a link of known bandwidth, and the measured "
            "link is unknown: name the bandwidths to predict with -b/--bandwidth (e.g. -b 25), or the "
            "link the trace ran on with --link-gbps GBPS"
        )
        raise UsageError(msg)
    fraction = 1.0 if scenario.efficiency == "full" else float(scenario.efficiency)
    return bits / (link * fraction) * 1e9


# ----------------------------------------------------------------------------------------------
# The replay


class _Timeline(msgspec.Struct):
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


class _Layout(msgspec.Struct):
    """What the replay of a plan needs that the scenario's times do not change (times relative to ``origin``).

    A rank's shift points (waits, encodes) form its chain; a pool's collectives its queue.
    """

    origin: int
    ready: list[int]
    """Per op: its measured ready time."""
    launch: list[int]
    """Per op: its launch delay."""
    lag: list[int]
    """Per op: its lag behind the last rank of its logical collective (synchronising ones)."""
    instance_of: list[int]
    chain_of: list[int]
    """Per op: the chain of its rank (-1: none)."""
    anchor: list[int]
    """Per op: the shift point of its chain its ready time follows (-1: none)."""
    pool_of: list[int]
    ranks: list[int]
    """The rank of each chain."""
    points: list[list[tuple[int, int, int]]]
    """Per chain: ``(time, kind, index)``, kind 0 a wait (index in the plan's waits), 1 an encode (an op)."""
    shift_times: dict[int, list[int]]
    """Per rank: its points' times, absolute."""
    waits: list[tuple[int, int, int | None, tuple[int, ...]]]
    """Per wait: its gap start, resume time, resume delay when binding, and the ops it waits for."""
    queues: list[list[int]]
    """Per pool: its ops in launch order."""
    servers: list[int]
    """Per pool: how many collectives it runs at once."""
    ranks_of: list[list[int]]
    """Per logical collective: the ranks of its members."""
    sizes: list[int]
    """Per logical collective: its members."""


def _layout(plan: _Plan, communication: bool, servers: dict[str, int], origin: int) -> _Layout:
    """Return the layout of a plan's replay (encodes: those of ``plan.encode_ns``, with communication)."""
    ops = plan.ops
    points: dict[int, list[tuple[int, int, int]]] = defaultdict(list)  # rank -> (time, kind, index)
    for w, (wait, _deps) in enumerate(plan.waits):
        points[wait.rank].append((wait.resume_ns - origin, 0, w))
    if communication and plan.encode_ns:
        for i, op in enumerate(ops):
            if plan.encode_ns[i] > 0:
                points[op.rank].append((op.ready_ns - origin, 1, i))
    for values in points.values():
        values.sort()
    chain_ids = {rank: c for c, rank in enumerate(points)}
    times = [[t for t, _k, _i in values] for values in points.values()]
    ready = [op.ready_ns - origin for op in ops]
    chain_of = [chain_ids.get(op.rank, -1) for op in ops]
    anchor = _anchors(plan, points=points, times=times, ready=ready, chain_of=chain_of)
    pool_ids, queues = _pool_queues(ops)
    return _Layout(
        origin=origin,
        ready=ready,
        launch=[op.launch_delay_ns for op in ops],
        lag=[op.lag_ns for op in ops],
        instance_of=[op.instance for op in ops],
        chain_of=chain_of,
        anchor=anchor,
        pool_of=[pool_ids[op.pool] for op in ops],
        ranks=list(points),
        points=list(points.values()),
        shift_times={rank: [t + origin for t in ts] for rank, ts in zip(points, times, strict=True)},
        waits=[
            (w.gap_start_ns - origin, w.resume_ns - origin, w.resume_delay_ns, deps) for w, deps in plan.waits
        ],
        queues=queues,
        servers=[max(1, servers.get(pool, 1)) for pool in pool_ids],
        ranks_of=[sorted({ops[m].rank for m in members}) for _sync, members in plan.instances],
        sizes=[len(members) for _sync, members in plan.instances],
    )


def _anchors(
    plan: _Plan,
    *,
    points: dict[int, list[tuple[int, int, int]]],
    times: list[list[int]],
    ready: list[int],
    chain_of: list[int],
) -> list[int]:
    """Return where each op's ready time sits in its rank's chain, past waits that depend on it (-1: none)."""
    ops = plan.ops
    waits_of_op: dict[int, set[int]] = defaultdict(set)
    for w, (_wait, deps) in enumerate(plan.waits):
        for d in deps:
            waits_of_op[d].add(w)
    anchor = [-1] * len(ops)
    bisect_right = bisect.bisect_right
    for i, c in enumerate(chain_of):
        if c < 0:
            continue
        k = bisect_right(times[c], ready[i]) - 1
        skipped = waits_of_op.get(i)
        while k >= 0 and skipped:
            _t, kind, index = points[ops[i].rank][k]
            if kind != 0 or index not in skipped:
                break
            k -= 1
        anchor[i] = k
    return anchor


def _pool_queues(ops: list[_Op]) -> tuple[dict[str, int], list[list[int]]]:
    """Return each pool's index (in order of first op) and its ops by launch order, then index."""
    pool_ids: dict[str, int] = {}
    queues: list[list[int]] = []
    for i, op in enumerate(ops):
        p = pool_ids.get(op.pool)
        if p is None:
            p = pool_ids[op.pool] = len(queues)
            queues.append([])
        queues[p].append(i)
    order = [op.order_ns for op in ops]
    for queue in queues:  # by launch order, then index (a stable sort of indices in order)
        queue.sort(key=order.__getitem__)
    return pool_ids, queues


_DONE = 1e-3  # ns of work left that count as finished (float rounding)


class _Simulation:
    """A discrete-event replay: compute shifts, FIFO pools of servers, links shared by transfers.

    Time runs relative to the layout's ``origin`` (float ns keep their precision there). Each rank's
    shift points (waits, encodes) resolve in order; a collective becomes ready once the shift at its
    ready time is known, starts when it is next in its pool and a server is free, transfers once every
    rank of a synchronising collective has started, and its transfer progresses at ``min over its
    ranks of 1 / (transfers in progress on the rank)`` of the link: concurrent transfers share it equally.

    A chain or a pool is looked at again only when what stopped it may have changed: the collective
    a chain waits for ended; the chain a pool's next collective waits for resolved further, one of
    the pool's collectives ended (a server freed), or the time a server frees came.
    """

    def __init__(self, communication: bool, plan: _Plan, layout: _Layout) -> None:
        self.plan = plan
        self.layout = layout
        self.communication = communication
        n = len(plan.ops)
        pools = len(layout.queues)
        self.values: list[list[int]] = [[] for _ in layout.points]
        self.encode: list[tuple[int, int, int]] = []
        self.ready: list[int | None] = [None] * n
        self.start: list[int | None] = [None] * n
        self.end: list[int | None] = [None] * n
        self.next_in_queue = [0] * pools
        self.servers: list[list[float]] = [[-math.inf] * count for count in layout.servers]
        self.server_of: list[int] = [-1] * n
        self.started_count = [0] * len(plan.instances)
        self.remaining: dict[int, float] = {}
        self.load: dict[int, int] = defaultdict(int)  # rank -> transfers in progress
        self.shares: dict[int, float] | None = None  # the rates of the transfers in progress
        self.heap: list[tuple[float, int]] = []
        self.wakeups: list[float] = []
        self.now = -math.inf
        self.horizon = MAX_TIME_NS - layout.origin  # the latest time, relative to the origin
        # What to look at again (by position: the order the chains and pools were first met).
        self.dirty_chains = set(range(len(layout.points)))
        self.dirty_pools = set(range(pools))
        self.waiters: dict[int, list[int]] = {}  # op -> the chains waiting for its end
        self.block_chain = [-1] * pools  # the chain a pool's next collective waits for, and how far
        self.block_k = [0] * pools
        self.timed: list[tuple[float, int]] = []  # (time a server of a pool frees, pool)
        self.timed_at = [math.inf] * pools

    # -- compute chains ---------------------------------------------------------------------------

    def _resolve_chains(self) -> bool:
        if not self.dirty_chains:
            return False
        changed = False
        layout = self.layout
        end = self.end
        waits = layout.waits
        for c in sorted(self.dirty_chains):
            chain = layout.points[c]
            resolved = self.values[c]
            before = len(resolved)
            while len(resolved) < len(chain):
                _t, kind, index = chain[len(resolved)]
                previous = resolved[-1] if resolved else 0
                if kind == 0:
                    gap_start, resume, delay, deps = waits[index]
                    latest: int | None = None
                    if self.communication and deps:
                        unfinished = next((d for d in deps if end[d] is None), None)
                        if unfinished is not None:
                            self.waiters.setdefault(unfinished, []).append(c)
                            break
                        latest = max(end[d] for d in deps)  # type: ignore[type-var]
                    resolved.append(_resume(gap_start, resume, delay, previous, latest) - resume)
                else:
                    length = self.plan.encode_ns[index]
                    self.encode.append((layout.ranks[c], layout.ready[index] + previous, length))
                    resolved.append(previous + length)
            if len(resolved) > before:
                changed = True
                for p, waiting in enumerate(self.block_chain):
                    if waiting == c and len(resolved) > self.block_k[p]:
                        self.block_chain[p] = -1
                        self.dirty_pools.add(p)
        self.dirty_chains.clear()
        return changed

    # -- pools ------------------------------------------------------------------------------------

    def _wake_timed_pools(self) -> None:
        """Mark dirty the pools a server of which frees now (a lagging end they waited for)."""
        timed = self.timed
        while timed and timed[0][0] <= self.now:  # a server of the pool frees now
            at, p = heapq.heappop(timed)
            if self.timed_at[p] == at:
                self.timed_at[p] = math.inf
                self.dirty_pools.add(p)

    def _look_again_at(self, free: float, p: int) -> None:
        """Look at pool ``p`` again when its first server to free frees (``free``)."""
        heapq.heappush(self.wakeups, free)
        heapq.heappush(self.timed, (free, p))
        self.timed_at[p] = free

    def _admit(self) -> bool:
        """Start each pool's next collectives while they are ready and a server is free."""
        now = self.now
        dirty = self.dirty_pools
        self._wake_timed_pools()
        if not dirty:
            return False
        changed = False
        layout = self.layout
        anchor = layout.anchor
        chain_of = layout.chain_of
        measured_ready = layout.ready
        values = self.values
        known = self.ready
        heap = self.heap
        for p in sorted(dirty):
            queue = layout.queues[p]
            position = self.next_in_queue[p]
            if position == len(queue):
                continue
            self.block_chain[p] = -1
            self.timed_at[p] = math.inf
            servers = self.servers[p]
            single = len(servers) == 1
            while position < len(queue):
                i = queue[position]
                ready = known[i]
                if ready is None:
                    k = anchor[i]
                    if k < 0:
                        ready = measured_ready[i]
                    elif len(values[chain_of[i]]) > k:
                        ready = measured_ready[i] + values[chain_of[i]][k]
                    else:  # its rank has not resolved that far
                        self.block_chain[p] = chain_of[i]
                        self.block_k[p] = k
                        break
                    known[i] = ready
                k = 0 if single else min(range(len(servers)), key=servers.__getitem__)
                free = servers[k]
                if free == math.inf:  # every server busy: one of the pool's collectives must end first
                    break
                if free > now:  # known to free later (a lagging end): another server may free sooner
                    self._look_again_at(free, p)
                    break
                start = max(float(ready), free) + layout.launch[i]
                start = max(start, now)
                servers[k] = math.inf
                self.server_of[i] = k
                heapq.heappush(heap, (start, i))
                position += 1
                changed = True
                if single:  # its server is busy now: nothing more starts before a collective of it ends
                    break
            self.next_in_queue[p] = position
        dirty.clear()
        return changed

    # -- links ------------------------------------------------------------------------------------

    def _rates(self) -> dict[int, float]:
        """Return the share of the link of each transfer in progress (not to be changed)."""
        if self.shares is None:
            load = self.load
            ranks_of = self.layout.ranks_of
            self.shares = {k: min(1.0 / load[r] for r in ranks_of[k]) for k in self.remaining}
        return self.shares

    def _transfer(self, k: int, work: float) -> None:
        self.remaining[k] = work
        for r in self.layout.ranks_of[k]:
            self.load[r] += 1
        self.shares = None

    def _finish(self, k: int, at: float) -> None:
        layout = self.layout
        synchronising, members = self.plan.instances[k]
        decode = self.plan.decode_ns
        lags = layout.lag
        pool_of = layout.pool_of
        servers = self.servers
        server_of = self.server_of
        ends = self.end
        waiters = self.waiters
        for m in members:
            lag = lags[m] if synchronising else 0
            end = at + lag + decode[m]
            ends[m] = round(end)
            p = pool_of[m]
            servers[p][server_of[m]] = end
            self.dirty_pools.add(p)
            if waiters and m in waiters:  # chains waiting for it
                self.dirty_chains.update(waiters.pop(m))
        if self.remaining.pop(k, None) is not None:
            for r in layout.ranks_of[k]:
                self.load[r] -= 1
            self.shares = None

    def _start(self, now: float) -> None:
        """Start the collectives due now; a logical collective transfers once all its members started."""
        heap = self.heap
        layout = self.layout
        instance_of = layout.instance_of
        sizes = layout.sizes
        starts = self.start
        counts = self.started_count
        started = round(now)
        while heap and heap[0][0] <= now:
            _s, i = heapq.heappop(heap)
            starts[i] = started
            k = instance_of[i]
            counts[k] += 1
            if counts[k] == sizes[k]:
                work = max(self.plan.work_ns[m] for m in self.plan.instances[k][1])
                if work <= _DONE:
                    self._finish(k, now)
                else:
                    self._transfer(k, work)

    def run(self) -> None:
        """Replay to the end."""
        remaining = self.remaining
        wakeups = self.wakeups
        heap = self.heap
        resolve, admit, rates_now = self._resolve_chains, self._admit, self._rates
        now = -math.inf
        while True:
            while resolve() | admit():
                pass
            rates = rates_now()
            done_at = {k: now + remaining[k] / rate for k, rate in rates.items()}
            next_done = min(done_at.values(), default=math.inf)
            next_start = heap[0][0] if heap else math.inf
            next_wakeup = wakeups[0] if wakeups else math.inf
            t = min(next_done, next_start, next_wakeup)
            if t == math.inf:
                break
            if t > self.horizon:
                raise UsageError(_too_long(self.horizon))
            while wakeups and wakeups[0] <= t:
                heapq.heappop(wakeups)
            if now > -math.inf:
                for k, rate in rates.items():
                    remaining[k] -= rate * (t - now)
            now = t
            self.now = now
            # A transfer is done when its completion time is reached, whatever float rounding left
            # of its work: late in a long replay (1e17 ns) the clock's float step is 16 ns, a few ns
            # of work left do not move it, and waiting for them to drop below _DONE never ends.
            for k in [k for k, left in remaining.items() if left <= _DONE or done_at[k] <= now]:
                self._finish(k, now)
            self._start(now)
        if any(e is None for e in self.end) or any(
            len(values) < len(points) for values, points in zip(self.values, self.layout.points, strict=True)
        ):
            msg = "what-if replay: the dependency graph is stuck (a bug in timeline); please report the trace"
            raise RuntimeError(msg)

    def timeline(self) -> _Timeline:
        """Return the replayed run, in absolute times."""
        origin = self.layout.origin
        return _Timeline(
            shift_times=self.layout.shift_times,
            shift_values=dict(zip(self.layout.ranks, self.values, strict=True)),
            op_start=[(s if s is not None else 0) + origin for s in self.start],
            op_end=[(e if e is not None else 0) + origin for e in self.end],
            encode=[(r, s + origin, length) for r, s, length in self.encode],
        )


def _simulate(graph: TraceGraph, scenario: Scenario, plan: _Plan) -> _Timeline:
    """Replay the plan's collectives and waits over the graph's compute."""
    communication = scenario.communication
    encodes = communication and any(plan.encode_ns)
    layouts = plan.layouts if not encodes else None  # a shared plan's layout, when it is the same
    layout = layouts.get(communication) if layouts is not None else None
    if layout is None:
        shared = _shared(graph)
        origin = shared.window_start
        if plan.ops:
            origin = min(origin, min(op.ready_ns for op in plan.ops))
        layout = _layout(plan, communication, shared.servers, origin)
        if layouts is not None:
            layouts[communication] = layout
    simulation = _Simulation(communication, plan, layout)
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


def _resume(gap_start: int, resume: int, binding: int | None, shift: int, latest: int | None) -> int:
    """When compute resumes at a wait point, replayed.

    ``gap_start``, ``resume``: the wait's measured gap; ``binding``: its resume delay when the wait
    was binding; ``shift``: the compute shift before it; ``latest``: the last replayed end it waits for.
    A binding wait resumes its resume delay after the last end, or when compute reaches it, whichever
    is later: the delay is the wake-up after the collective ends, which a collective already ended
    when compute gets there does not cost (the same as measured, where it ended inside the gap).
    """
    gap = resume - gap_start
    resumed = gap_start + shift
    if latest is None:
        return resumed if binding is not None else resumed + gap
    if binding is not None:
        return max(resumed, latest + binding)
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
        for op, op_end in zip(plan.ops, timeline.op_end, strict=True):
            window_id = op.window_id
            if window_id is not None:
                ends[window_id] = max(ends.get(window_id, op_end), op_end)
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
    for op, work, decode in zip(plan.ops, plan.work_ns, plan.decode_ns, strict=True):
        if op.window_id is not None:
            busy[op.window_id] += work + decode
    return {window_id: round(value) for window_id, value in busy.items()}


def _single_plan(graph: TraceGraph) -> _Plan:
    """Return the plan without communication: no collective, and waits that wait for nothing."""
    waits: list[tuple[WaitPoint, tuple[int, ...]]] = [(w, ()) for w in graph.waits]
    return _Plan(ops=[], instances=[], waits=waits, warnings=[], layouts=_shared(graph).single_layouts)


def single_replay(graph: TraceGraph) -> pl.DataFrame:
    """Return ``T_single`` per window: the replayed length without any communication.

    Waits vanish (compute resumes where it stopped), every collective is dropped.

    Returns
    -------
    pl.DataFrame
        Columns ``window_id``, ``single_ns``.
    """
    scenario = Scenario(communication=False)
    plan = _single_plan(graph)
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
        plan = _single_plan(graph)
        bounds = _window_bounds(graph, _simulate(graph, scenario, plan), None, windows)
    else:
        plan = _plan(graph, scenario)
        _cost(graph, scenario, plan)
        bounds = _window_bounds(graph, _simulate(graph, scenario, plan), plan, windows)
    return {row["window_id"]: row["p_end"] - row["p_start"] for row in bounds}


def _predicted_windows(
    plan: _Plan, *, windows: pl.DataFrame, single: pl.DataFrame, exposure: pl.DataFrame
) -> pl.DataFrame:
    """Return the predicted windows of a replayed plan (:data:`PREDICTED_WINDOWS_SCHEMA`), by rank, window."""
    busy = _link_busy(plan)
    encode_total: dict[int, int] = defaultdict(int)
    for op, encode in zip(plan.ops, plan.encode_ns, strict=True):
        if op.window_id is not None:
            encode_total[op.window_id] += encode
    busy_frame = pl.DataFrame(
        {"window_id": list(busy), "_busy": list(busy.values())},
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
    return (
        frame.select(PREDICTED_WINDOWS_SCHEMA.names())
        .cast(PREDICTED_WINDOWS_SCHEMA)
        .sort("rank", "window_id")
    )


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
    frame = _predicted_windows(plan, windows=windows, single=single, exposure=exposure)
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
            "link_ns": work,
        }
        for op, work in zip(plan.ops, plan.work_ns, strict=True)
    ]
    return pl.DataFrame(rows, schema=LINK_TIMES_SCHEMA)


def _cost(graph: TraceGraph, scenario: Scenario, plan: _Plan) -> list[str]:
    """Set each collective's link time and codec times under the scenario; return the plan's warnings."""
    notes: set[str] = set()
    costs = _shared(graph).costs(graph)
    uniform = _uniform_calibration(graph, scenario, costs) if scenario.efficiency == "uniform" else {}
    ops = plan.ops
    work = [0.0] * len(ops)
    for members in plan.groups:  # in the order of their first op: the first error is the same
        value = _work_ns(ops[members[0]], graph, scenario, (uniform, costs), notes)
        if not value <= MAX_TIME_NS:  # also infinity and nan
            raise UsageError(_too_long(MAX_TIME_NS))
        for m in members:
            work[m] = value
    encode = [0] * len(ops)
    if scenario.compression.active:
        for i, op in enumerate(ops):
            if op.gradient:
                encode[i] = scenario.compression.codec_ns(op.nbytes or 0)
    plan.work_ns = work
    plan.encode_ns = encode
    plan.decode_ns = encode
    warnings = list(plan.warnings)
    if "nobytes" in notes:
        warnings.append("collectives without bytes in the trace keep their measured time")
    if "nocalibration" in notes:
        warnings.append("rebuilt buckets without a measured collective to calibrate on use the full link")
    if "inseparable" in notes:
        warnings.append(
            "the trace cannot separate the gradient collectives' fixed cost per call from their time per "
            "byte (one size, or sizes whose times do not tell): rebuilt buckets cost the measured time per "
            "byte, so merging them saves no per-call cost"
        )
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
