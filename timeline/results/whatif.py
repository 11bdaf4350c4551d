"""The what-if report and the seed simulator's report, as typed, versioned data.

:func:`build_whatif_report` takes the run's dependency graph (:class:`~timeline.whatif.graph.TraceGraph`)
and the :class:`~timeline.whatif.settings.Settings` to try, whole; it checks the replay against the
trace, sweeps the settings and searches the targets, and gives a :class:`WhatIfReport` (what
``timeline whatif`` prints and ``--json`` emits). :func:`build_seed_report` takes a seed paper's
backward profile and its :class:`~timeline.whatif.seed.SeedGrid` and gives a :class:`SeedReport`
(``timeline seed``). The types import nothing heavy: the builders import the what-if engine (and
polars) when called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import msgspec

from timeline.arguments import check_instance
from timeline.results.base import Result, Row, rows_of
from timeline.results.collectives import CollectiveCost

if TYPE_CHECKING:
    from collections.abc import Sequence

    from timeline.whatif.engine import Prediction
    from timeline.whatif.graph import TraceGraph
    from timeline.whatif.seed import BackwardProfile, SeedGrid, SeedResult, VectorAddCost
    from timeline.whatif.settings import Settings

__all__ = [
    "REPORT_VERSION",
    "SEED_REPORT_VERSION",
    "BackwardProfileSummary",
    "DimensionLatency",
    "DimensionLink",
    "DimensionRow",
    "PredictedIteration",
    "ScenarioRow",
    "SeedReport",
    "SeedScenarioRow",
    "SelfReplay",
    "Target",
    "WhatIfReport",
    "build_seed_report",
    "build_whatif_report",
    "link_source_of",
]

REPORT_VERSION = 4
"""The layout version of :class:`WhatIfReport` (``timeline whatif --json``).

2 (#20): ``dimensions`` and ``dimension_latencies``; each scenario has ``dimension_bandwidths`` and
``dimension_latencies``. 3 (#36): ``kind`` and ``timeline`` first; ``self_replay`` gains
``measured_scaling_factor``. 4 (#37): ``costs``, the fixed cost per call and time per byte of each
collective kind per process group that the replay charges merged and split collectives
(:func:`~timeline.whatif.engine.cost_fit`); ``latency_s`` (report and scenarios) is null when not
given: each collective keeps its fitted fixed cost.
"""
SEED_REPORT_VERSION = 3
"""The layout version of :class:`SeedReport` (``timeline seed --json``; 2 when ``timeline whatif``
printed it). 3 (#36): ``kind`` and ``timeline`` first; nothing else changed."""

EfficiencyValue = Literal["observed", "uniform", "full"] | float
"""The link efficiency every prediction used: a name or a fraction."""
LinkSource = Literal["--link-gbps", "capture manifest", "not recorded"]
"""Where the measured link came from."""


class PredictedIteration(Row, frozen=True):
    """One iteration of the self-replay (``PREDICTED_ITERATIONS_SCHEMA``): medians over its ranks.

    ``iteration`` is None for the one window of a run without iterations (a Horovod timeline with no
    training loop seen).
    """

    iteration: int | None
    ranks: int
    measured_ns: int
    predicted_ns: int
    single_ns: int
    exposed_comm_ns: int
    perfect_overlap_ns: int
    scaling_factor: float | None
    error_ratio: float | None


class SelfReplay(msgspec.Struct, kw_only=True, frozen=True):
    """The trace replayed under its own conditions: means over iterations of medians over ranks.

    Attributes
    ----------
    measured_ns, predicted_ns
        The measured and the replayed iteration.
    error_ratio
        ``|predicted − measured| / measured``.
    max_error_ratio
        The worst iteration's error (None without iterations).
    single_ns
        ``T_single``: the iteration replayed without communication.
    scaling_factor
        ``single_ns / predicted_ns``.
    exposed_comm_ns
        The replayed exposed communication.
    iterations
        One row per iteration.
    measured_scaling_factor
        ``single_ns / measured_ns``: the trace's own scaling factor (None when nothing was measured);
        the report's what-if tab draws it.
    """

    measured_ns: int
    predicted_ns: int
    error_ratio: float
    max_error_ratio: float | None
    single_ns: int
    scaling_factor: float
    exposed_comm_ns: int
    iterations: list[PredictedIteration]
    measured_scaling_factor: float | None


class DimensionLink(Row, frozen=True):
    """The link of a named dimension's collectives in a scenario."""

    dimension: str
    bandwidth_gbps: float


class DimensionLatency(Row, frozen=True):
    """``α`` of a named dimension's collectives."""

    dimension: str
    latency_s: float


class ScenarioRow(Row, frozen=True):
    """One combination of settings, predicted (a row of ``SWEEP_SCHEMA``).

    Times are means over iterations of medians over ranks.
    """

    bandwidth_gbps: float | None
    world_size: int
    compression: float
    buckets: str
    efficiency: str
    algorithm: str
    latency_s: float | None
    measured_ns: int
    iteration_ns: int
    single_ns: int
    exposed_comm_ns: int
    scaling_factor: float
    no_overlap_ns: int | None
    no_overlap_scaling_factor: float | None
    perfect_overlap_ns: int
    perfect_overlap_scaling_factor: float
    dimension_bandwidths: list[DimensionLink]
    dimension_latencies: list[DimensionLatency]


class DimensionRow(Row, frozen=True):
    """A parallelism dimension of the collectives: its known group instances, their sizes, its collectives."""

    dimension: str
    groups: list[str]
    group_sizes: list[int]
    collectives: int
    link_gbps: float | None


class Target(Row, frozen=True):
    """What reaches a target scaling factor: a bandwidth without compression, or a ratio at a bandwidth.

    ``bandwidth_gbps`` (solve ``bandwidth``) and ``compression`` (solve ``compression``) are None
    when out of reach.
    """

    target_scaling_factor: float
    world_size: int
    solve: Literal["bandwidth", "compression"]
    bandwidth_gbps: float | None
    compression: float | None


class WhatIfReport(Result, tag="whatif", kw_only=True):
    """Everything ``timeline whatif`` prints: the self-replay, the predictions, the targets.

    Layout 3 (#36) keeps layout 2's keys, values and order after ``kind``, ``version``, ``timeline``,
    and adds ``self_replay.measured_scaling_factor`` (which the report's what-if tab computed for
    itself); layout 4 (#37) adds ``costs`` and a null ``latency_s`` (each collective keeps its
    fitted fixed cost). Every key is always present.
    """

    version: int = REPORT_VERSION
    ranks: list[int]
    modes: list[str]
    iterations: list[int]
    world_size: int
    link_gbps: float | None
    link_source: LinkSource
    gradient_source: str
    collectives: int
    efficiency: EfficiencyValue
    latency_s: float | None
    algorithm: Literal["ring", "tree"]
    codec_gbps: float | None
    dimensions: list[DimensionRow]
    dimension_latencies: list[DimensionLatency]
    costs: list[CollectiveCost]
    self_replay: SelfReplay
    scenarios: list[ScenarioRow]
    targets: list[Target]
    notes: list[str]
    warnings: list[str]

    @property
    def names_dimensions(self) -> bool:
        """Whether a setting names a dimension (a latency, or a scenario's link)."""
        return bool(self.dimension_latencies) or any(row.dimension_bandwidths for row in self.scenarios)

    @property
    def target_scaling_factor(self) -> float | None:
        """The scaling factor the targets search for (``--target-sf``), or None."""
        return self.targets[0].target_scaling_factor if self.targets else None


class BackwardProfileSummary(msgspec.Struct, kw_only=True, frozen=True):
    """A seed backward profile: where it was read, its model, and its size."""

    path: str
    model: str
    batches: int
    gradients: int
    gradient_bytes: int
    """The bytes of one batch's gradients."""
    backward_ns: int
    """The mean backward pass over batches."""


class SeedScenarioRow(Row, frozen=True):
    """One configuration of the seed simulator.

    The fields of :class:`ScenarioRow`, in its order, with the mean backward pass and the all-reduces
    of a batch (the last batch's) before the per-dimension ones.
    """

    bandwidth_gbps: float
    world_size: int
    compression: float
    buckets: str
    efficiency: Literal["full"]
    algorithm: Literal["ring"]
    latency_s: float
    measured_ns: int
    iteration_ns: int
    single_ns: int
    exposed_comm_ns: int
    scaling_factor: float
    no_overlap_ns: int
    no_overlap_scaling_factor: float
    perfect_overlap_ns: int
    perfect_overlap_scaling_factor: float
    backward_ns: int
    fused_buckets: int
    dimension_bandwidths: list[DimensionLink]
    """Always empty: a backward profile has no process groups."""
    dimension_latencies: list[DimensionLatency]
    """Always empty."""


class SeedReport(Result, tag="seed", kw_only=True):
    """Everything ``timeline seed PROFILE.bk.log`` prints: the seed paper's simulator over a grid.

    Layout 3 (#36) keeps the keys, values and order of layout 2 (``timeline whatif PROFILE.bk.log``)
    after ``kind``, ``version``, ``timeline``. The settings keys say what the paper's model assumes
    (one GPU measured, the full link, a ring, no latency, a free codec); ``targets`` is always empty.
    """

    version: int = SEED_REPORT_VERSION
    input: Literal["backward_profile"] = "backward_profile"
    backward_profile: BackwardProfileSummary
    vector_add_cost: str | None
    world_size: int = 1
    link_gbps: None = None
    efficiency: Literal["full"] = "full"
    latency_s: float = 0.0
    algorithm: Literal["ring"] = "ring"
    codec_gbps: None = None
    single_ns: int
    scenarios: list[SeedScenarioRow]
    targets: list[Target] = msgspec.field(default_factory=list)
    notes: list[str]
    warnings: list[str] = msgspec.field(default_factory=list)


def _self_replay(prediction: Prediction) -> SelfReplay:
    iterations = rows_of(prediction.iterations, PredictedIteration)
    errors = [row.error_ratio for row in iterations if row.error_ratio is not None]
    measured = round(prediction.measured_ns)
    single = round(prediction.single_ns)
    return SelfReplay(
        measured_ns=measured,
        predicted_ns=round(prediction.iteration_ns),
        error_ratio=prediction.error_ratio,
        max_error_ratio=max(errors) if errors else None,
        single_ns=single,
        scaling_factor=prediction.scaling_factor,
        exposed_comm_ns=round(prediction.exposed_comm_ns),
        iterations=iterations,
        measured_scaling_factor=prediction.single_ns / prediction.measured_ns
        if prediction.measured_ns > 0
        else None,
    )


def _dimensions(graph: TraceGraph) -> list[DimensionRow]:
    """Per parallelism dimension: its known process group instances, their sizes, and its collectives."""
    from timeline.analysis.groups import ALL_COMMUNICATION_GROUP

    rows: list[DimensionRow] = []
    for dimension in graph.dimensions:
        ops = [o for o in graph.ops if o.dimension == dimension]
        known = {o.group for o in ops if o.group is not None and o.group != ALL_COMMUNICATION_GROUP}
        rows.append(
            DimensionRow(
                dimension=dimension,
                groups=sorted(known),
                group_sizes=sorted({o.group_size for o in ops}),
                collectives=len(ops),
                link_gbps=graph.link_of(dimension),
            )
        )
    return rows


def _targets(graph: TraceGraph, settings: Settings) -> list[Target]:
    """Return the bandwidth, and the compression ratio at each bandwidth, that reach ``settings.target_sf``.

    A target searches one link for every collective: link settings that name dimensions are not searched.
    """
    from timeline.whatif.sweeps import solve_bandwidth, solve_compression

    target = settings.target_sf
    if target is None:
        return []
    plain = [bandwidth for bandwidth, named in settings.links if not named]
    iterations = settings.iterations
    targets: list[Target] = []
    for world in settings.world_sizes:
        world_size = world if world is not None else graph.world_size
        at_world = settings.scenario(world_size=world)
        needed = solve_bandwidth(graph, target, scenario=at_world, iterations=iterations)
        targets.append(
            Target(
                target_scaling_factor=target,
                world_size=world_size,
                solve="bandwidth",
                bandwidth_gbps=needed,
                compression=1.0,
            )
        )
        for bandwidth in plain:
            if bandwidth is None and graph.link_gbps is None and settings.efficiency != "observed":
                continue  # no link to search a compression ratio at: -b names one
            at_link = settings.scenario(bandwidth_gbps=bandwidth, world_size=world)
            ratio = solve_compression(graph, target, scenario=at_link, iterations=iterations)
            targets.append(
                Target(
                    target_scaling_factor=target,
                    world_size=world_size,
                    solve="compression",
                    bandwidth_gbps=bandwidth if bandwidth is not None else graph.link_gbps,
                    compression=ratio,
                )
            )
    return targets


def link_source_of(graph: TraceGraph, *, given: bool) -> LinkSource:
    """Return where the measured link came from: the option (``given``), a capture manifest, or nowhere."""
    if given:
        return "--link-gbps"
    return "capture manifest" if graph.link_gbps is not None else "not recorded"


def build_whatif_report(
    graph: TraceGraph, settings: Settings, *, link_source: LinkSource = "not recorded"
) -> WhatIfReport:
    """Return everything ``timeline whatif`` prints (the ``--json`` layout).

    Parameters
    ----------
    graph
        The run's what-if graph (:attr:`timeline.run.Run.graph`).
    settings
        What to sweep, whole: links (per dimension too), world sizes, compression ratios, buckets,
        efficiency, latencies, algorithm, codec, target scaling factor, the iterations averaged over.
    link_source
        Where the graph's measured link came from.

    Returns
    -------
    WhatIfReport
        The self-replay (under ``settings.iterations``), one scenario per combination, the targets.

    Raises
    ------
    TypeError
        ``graph`` is not a :class:`~timeline.whatif.graph.TraceGraph` (named).
    """
    from timeline.whatif.engine import cost_fit
    from timeline.whatif.graph import TraceGraph as Graph
    from timeline.whatif.sweeps import sweep

    check_instance(graph, Graph, argument="graph", fix="pass the run's graph: timeline.analyze(...).graph")
    check = _replayed_unchanged(graph, iterations=settings.iterations)
    table = sweep(graph, settings)
    windows = graph.windows.get_column("iteration")
    return WhatIfReport(
        ranks=list(graph.ranks),
        modes=sorted(set(graph.modes.values())),
        iterations=windows.drop_nulls().unique().sort().to_list(),
        world_size=graph.world_size,
        link_gbps=graph.link_gbps,
        link_source=link_source,
        gradient_source=graph.gradient_source,
        collectives=len(graph.ops),
        efficiency=settings.efficiency,
        latency_s=settings.latency_s,
        algorithm=settings.algorithm,
        codec_gbps=settings.codec_gbps,
        dimensions=_dimensions(graph),
        dimension_latencies=[
            DimensionLatency(dimension=d, latency_s=a) for d, a in settings.dimension_latencies
        ],
        costs=rows_of(cost_fit(graph), CollectiveCost),
        self_replay=_self_replay(check),
        scenarios=rows_of(table, ScenarioRow),
        targets=_targets(graph, settings),
        notes=list(graph.notes),
        warnings=[*graph.warnings, *check.warnings],
    )


def _replayed_unchanged(graph: TraceGraph, *, iterations: Sequence[int] | None) -> Prediction:
    """Return the self-replay of the graph: of every iteration, or of ``iterations`` only."""
    from timeline.whatif.engine import Scenario, replay, self_replay

    if iterations is None:
        return self_replay(graph)
    return replay(graph, scenario=Scenario(), iterations=iterations)


def _seed_row(policy_label: str, result: SeedResult) -> SeedScenarioRow:
    single, comm = result.single_s, result.comm_s
    return SeedScenarioRow(
        bandwidth_gbps=result.bandwidth_gbps,
        world_size=result.world_size,
        compression=result.compression,
        buckets=policy_label,
        efficiency="full",
        algorithm="ring",
        latency_s=0.0,
        measured_ns=round(single * 1e9),
        iteration_ns=round((single + result.overhead_s) * 1e9),
        single_ns=round(single * 1e9),
        exposed_comm_ns=round(result.overhead_s * 1e9),
        scaling_factor=result.scaling_factor,
        no_overlap_ns=round((single + comm) * 1e9),
        no_overlap_scaling_factor=single / (single + comm),
        perfect_overlap_ns=round(single * 1e9),
        perfect_overlap_scaling_factor=1.0,
        backward_ns=round(result.backward_s * 1e9),
        fused_buckets=result.buckets,
        dimension_bandwidths=[],
        dimension_latencies=[],
    )


def _profile_summary(profile: BackwardProfile, source: str) -> BackwardProfileSummary:
    """Return where a backward profile was read, its model, its size and its mean backward pass."""
    rows = profile.batches
    return BackwardProfileSummary(
        path=source,
        model=profile.name,
        batches=len(rows),
        gradients=len(rows[0]),
        gradient_bytes=sum(size for _, size in rows[0]),
        backward_ns=round(sum(sum(w for w, _ in batch) for batch in rows) / len(rows) * 1e9),
    )


def build_seed_report(
    profile: BackwardProfile,
    grid: SeedGrid,
    *,
    source: str,
    add_cost: VectorAddCost,
    add_cost_source: str | None,
) -> SeedReport:
    """Return what ``timeline seed PROFILE.bk.log`` prints: the seed paper's simulator over a grid.

    Parameters
    ----------
    profile
        The backward profile (:func:`~timeline.whatif.seed.read_backward_profile`).
    grid
        The settings to simulate, whole (:func:`~timeline.whatif.seed.seed_grid`).
    source
        The profile's path, as given.
    add_cost, add_cost_source
        The vector-add cost table and its path (None: none, the reductions are free; a note says so).

    Returns
    -------
    SeedReport
        The scenarios have the fields of :class:`ScenarioRow` (``measured_ns`` and ``single_ns``:
        the one-GPU iteration given; ``exposed_comm_ns``: the communication left after backward;
        the no-overlap bound: every all-reduce after backward), plus ``backward_ns`` and
        ``fused_buckets`` (all-reduces per batch).
    """
    from timeline.whatif.seed import sweep_seed

    results = sweep_seed(
        profile,
        world_sizes=grid.world_sizes,
        bandwidths_gbps=grid.bandwidths_gbps,
        compressions=grid.compressions,
        add_cost=add_cost,
        single_s=grid.single_s,
        buckets=grid.buckets,
    )
    notes: list[str] = []
    if add_cost_source is None:
        notes.append(
            "no vector-add cost table (cuda_vec_add.log beside the profiles' folder, or --vector-add-cost "
            "FILE): the reductions of each all-reduce are counted as free"
        )
    return SeedReport(
        backward_profile=_profile_summary(profile, source),
        vector_add_cost=add_cost_source,
        single_ns=round(grid.single_s * 1e9),
        scenarios=[_seed_row(policy.label, result) for policy, result in results],
        notes=notes,
    )
