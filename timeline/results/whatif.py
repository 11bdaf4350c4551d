"""The what-if report: the replay checked against the trace, then the requested settings swept.

Takes the run's dependency graph (:class:`~timeline.whatif.graph.TraceGraph`) and the settings to
try; gives plain, versioned data: what ``timeline whatif`` prints and ``--json`` emits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from timeline.arguments import check_instance
from timeline.whatif.bucketing import BucketPolicy
from timeline.whatif.compression import Compression
from timeline.whatif.costs import Algorithm
from timeline.whatif.graph import TraceGraph
from timeline.whatif.replay import Efficiency, Prediction, Scenario, self_replay
from timeline.whatif.sweep import solve_bandwidth, solve_compression, sweep

if TYPE_CHECKING:
    from timeline.whatif.bucketing import DDPBuckets, FusionBuckets
    from timeline.whatif.seed import BackwardProfile, SeedResult, VectorAddCost

__all__ = ["REPORT_VERSION", "build_seed_report", "build_whatif_report"]

REPORT_VERSION = 2
"""The layout version of :func:`build_whatif_report` (``timeline whatif --json``).

2 (#20): ``dimensions`` (the collectives of each parallelism dimension) and
``dimension_latencies``; each scenario has ``dimension_bandwidths`` and ``dimension_latencies``
(the links and latencies of named dimensions; ``bandwidth_gbps`` is then the other collectives').
"""


def _prediction_summary(prediction: Prediction) -> dict[str, Any]:
    iterations = prediction.iterations.to_dicts()
    errors = [row["error_ratio"] for row in iterations if row["error_ratio"] is not None]
    return {
        "measured_ns": round(prediction.measured_ns),
        "predicted_ns": round(prediction.iteration_ns),
        "error_ratio": prediction.error_ratio,
        "max_error_ratio": max(errors) if errors else None,
        "single_ns": round(prediction.single_ns),
        "scaling_factor": prediction.scaling_factor,
        "exposed_comm_ns": round(prediction.exposed_comm_ns),
        "iterations": iterations,
    }


def _dimensions(graph: TraceGraph) -> list[dict[str, Any]]:
    """Per parallelism dimension: its process groups, their sizes, and its collectives."""
    rows: list[dict[str, Any]] = []
    for dimension in graph.dimensions:
        ops = [o for o in graph.ops if o.dimension == dimension]
        rows.append(
            {
                "dimension": dimension,
                "groups": sorted({o.group for o in ops if o.group is not None}),
                "group_sizes": sorted({o.group_size for o in ops}),
                "collectives": len(ops),
                "link_gbps": graph.link_of(dimension),
            }
        )
    return rows


def _targets(
    graph: TraceGraph,
    target_sf: float | None,
    *,
    bandwidths: list[float | None],
    world_sizes: list[int | None],
    buckets: list[BucketPolicy],
    efficiency: Efficiency,
    latency_s: float,
    algorithm: Algorithm,
    codec_gbps: float | None,
    iterations: list[int] | None,
    dimension_latencies: tuple[tuple[str, float], ...],
) -> list[dict[str, Any]]:
    """Return the bandwidth, and the compression ratio at each bandwidth, that reach ``target_sf``."""
    targets: list[dict[str, Any]] = []
    if target_sf is None:
        return targets
    codec = Compression(codec_bytes_per_s=codec_gbps * 1e9 / 8) if codec_gbps is not None else Compression()
    base = Scenario(efficiency=efficiency, latency_s=latency_s, algorithm=algorithm, compression=codec)
    for world in world_sizes:
        scenario = Scenario(
            world_size=world,
            efficiency=efficiency,
            latency_s=latency_s,
            dimension_latencies=dimension_latencies,
            algorithm=algorithm,
            buckets=buckets[0],
        )
        needed = solve_bandwidth(graph, target_sf, scenario=scenario, iterations=iterations)
        targets.append(
            {
                "target_scaling_factor": target_sf,
                "world_size": world if world is not None else graph.world_size,
                "solve": "bandwidth",
                "bandwidth_gbps": needed,
                "compression": 1.0,
            }
        )
        for bandwidth in bandwidths:
            base_at = Scenario(
                bandwidth_gbps=bandwidth,
                world_size=world,
                efficiency=base.efficiency,
                latency_s=latency_s,
                dimension_latencies=dimension_latencies,
                algorithm=algorithm,
                buckets=buckets[0],
                compression=base.compression,
            )
            ratio = solve_compression(graph, target_sf, scenario=base_at, iterations=iterations)
            targets.append(
                {
                    "target_scaling_factor": target_sf,
                    "world_size": world if world is not None else graph.world_size,
                    "solve": "compression",
                    "bandwidth_gbps": bandwidth if bandwidth is not None else graph.link_gbps,
                    "compression": ratio,
                }
            )
    return targets


def build_whatif_report(
    graph: TraceGraph,
    *,
    bandwidths: list[float | None],
    world_sizes: list[int | None],
    compressions: list[float],
    buckets: list[BucketPolicy],
    efficiency: Efficiency,
    latency_s: float,
    algorithm: Algorithm,
    codec_gbps: float | None,
    target_sf: float | None,
    iterations: list[int] | None,
    link_source: str,
    dimension_bandwidths: list[tuple[tuple[str, float], ...]] | None = None,
    dimension_latencies: tuple[tuple[str, float], ...] = (),
) -> dict[str, Any]:
    """Return everything ``timeline whatif`` prints, as plain data (the ``--json`` layout).

    ``dimension_bandwidths``: per bandwidth, the links of named dimensions (the bandwidth is then
    the other collectives'); ``dimension_latencies``: ``α`` of named dimensions.

    Raises
    ------
    TypeError
        ``graph`` is not a :class:`~timeline.whatif.graph.TraceGraph` (named).
    """
    check_instance(graph, TraceGraph, argument="graph", fix="pass the graph of timeline's what-if session")
    check = self_replay(graph)
    if iterations is not None:
        from timeline.whatif.replay import replay

        check = replay(graph, scenario=Scenario(), iterations=iterations)
    table = sweep(
        graph,
        bandwidths_gbps=bandwidths,
        world_sizes=world_sizes,
        compressions=compressions,
        buckets=buckets,
        efficiency=efficiency,
        latency_s=latency_s,
        algorithm=algorithm,
        codec_gbps=codec_gbps,
        iterations=iterations,
        dimension_bandwidths=dimension_bandwidths,
        dimension_latencies=dimension_latencies,
    )
    named = dimension_bandwidths or [() for _ in bandwidths]
    # a scaling factor target searches one link for every collective: per-dimension settings are not searched
    plain = [b for b, pairs in zip(bandwidths, named, strict=True) if not pairs]
    targets = _targets(
        graph,
        target_sf,
        bandwidths=plain,
        world_sizes=world_sizes,
        buckets=buckets,
        efficiency=efficiency,
        latency_s=latency_s,
        algorithm=algorithm,
        codec_gbps=codec_gbps,
        iterations=iterations,
        dimension_latencies=dimension_latencies,
    )
    warnings = list(graph.warnings) + list(check.warnings)
    iteration_numbers = graph.windows.get_column("iteration").drop_nulls().unique().sort().to_list()
    return {
        "version": REPORT_VERSION,
        "ranks": list(graph.ranks),
        "modes": sorted(set(graph.modes.values())),
        "iterations": iteration_numbers,
        "world_size": graph.world_size,
        "link_gbps": graph.link_gbps,
        "link_source": link_source,
        "gradient_source": graph.gradient_source,
        "collectives": len(graph.ops),
        "efficiency": efficiency,
        "latency_s": latency_s,
        "algorithm": algorithm,
        "codec_gbps": codec_gbps,
        "dimensions": _dimensions(graph),
        "dimension_latencies": [{"dimension": d, "latency_s": a} for d, a in dimension_latencies],
        "self_replay": _prediction_summary(check),
        "scenarios": table.to_dicts(),
        "targets": targets,
        "notes": list(graph.notes),
        "warnings": warnings,
    }


def _seed_row(policy: DDPBuckets | FusionBuckets, result: SeedResult) -> dict[str, Any]:
    single, comm = result.single_s, result.comm_s
    return {
        "bandwidth_gbps": result.bandwidth_gbps,
        "world_size": result.world_size,
        "compression": result.compression,
        "buckets": policy.label,
        "efficiency": "full",
        "algorithm": "ring",
        "latency_s": 0.0,
        "measured_ns": round(single * 1e9),
        "iteration_ns": round((single + result.overhead_s) * 1e9),
        "single_ns": round(single * 1e9),
        "exposed_comm_ns": round(result.overhead_s * 1e9),
        "scaling_factor": result.scaling_factor,
        "no_overlap_ns": round((single + comm) * 1e9),
        "no_overlap_scaling_factor": single / (single + comm),
        "perfect_overlap_ns": round(single * 1e9),
        "perfect_overlap_scaling_factor": 1.0,
        "backward_ns": round(result.backward_s * 1e9),
        "fused_buckets": result.buckets,
        "dimension_bandwidths": [],
        "dimension_latencies": [],
    }


def build_seed_report(
    profile: BackwardProfile,
    *,
    source: str,
    single_s: float,
    bandwidths: list[float],
    world_sizes: list[int],
    compressions: list[float],
    buckets: list[DDPBuckets | FusionBuckets],
    add_cost: VectorAddCost,
    add_cost_source: str | None,
) -> dict[str, Any]:
    """Return what ``timeline whatif PROFILE.bk.log`` prints: the seed paper's simulator over a grid.

    The scenarios have the keys of :data:`~timeline.whatif.sweep.SWEEP_SCHEMA` (``measured_ns`` and
    ``single_ns``: the one-GPU iteration given; ``exposed_comm_ns``: the communication left after
    backward; the no-overlap bound: every all-reduce after backward), plus ``backward_ns`` and
    ``fused_buckets`` (buckets per batch). ``notes`` says what the model assumed for the user.
    """
    from timeline.whatif.seed import sweep_seed

    results = sweep_seed(
        profile,
        world_sizes=world_sizes,
        bandwidths_gbps=bandwidths,
        compressions=compressions,
        add_cost=add_cost,
        single_s=single_s,
        buckets=buckets,
    )
    notes: list[str] = []
    if add_cost_source is None:
        notes.append(
            "no vector-add cost table (cuda_vec_add.log beside the profiles' folder, or --vector-add-cost "
            "FILE): the reductions of each all-reduce are counted as free"
        )
    rows = profile.batches
    return {
        "version": REPORT_VERSION,
        "input": "backward_profile",
        "backward_profile": {
            "path": source,
            "model": profile.name,
            "batches": len(rows),
            "gradients": len(rows[0]),
            "gradient_bytes": sum(size for _, size in rows[0]),
            "backward_ns": round(sum(sum(w for w, _ in batch) for batch in rows) / len(rows) * 1e9),
        },
        "vector_add_cost": add_cost_source,
        "world_size": 1,
        "link_gbps": None,
        "efficiency": "full",
        "latency_s": 0.0,
        "algorithm": "ring",
        "codec_gbps": None,
        "single_ns": round(single_s * 1e9),
        "scenarios": [_seed_row(policy, result) for policy, result in results],
        "targets": [],
        "notes": notes,
        "warnings": [],
    }
