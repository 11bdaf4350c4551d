"""The what-if report: the replay checked against the trace, then the requested settings swept.

Takes the run's dependency graph (:class:`~timeline.whatif.graph.TraceGraph`) and the settings to
try; gives plain, versioned data: what ``timeline whatif`` prints and ``--json`` emits.
"""

from __future__ import annotations

from typing import Any

from timeline.whatif.bucketing import BucketPolicy
from timeline.whatif.compression import Compression
from timeline.whatif.costs import Algorithm
from timeline.whatif.graph import TraceGraph
from timeline.whatif.replay import Efficiency, Prediction, Scenario, self_replay
from timeline.whatif.sweep import solve_bandwidth, solve_compression, sweep

__all__ = ["REPORT_VERSION", "build_whatif_report"]

REPORT_VERSION = 1
"""The layout version of :func:`build_whatif_report` (``timeline whatif --json``)."""


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
) -> dict[str, Any]:
    """Return everything ``timeline whatif`` prints, as plain data (the ``--json`` layout)."""
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
    )
    targets: list[dict[str, Any]] = []
    if target_sf is not None:
        codec = (
            Compression(codec_bytes_per_s=codec_gbps * 1e9 / 8) if codec_gbps is not None else Compression()
        )
        base = Scenario(efficiency=efficiency, latency_s=latency_s, algorithm=algorithm, compression=codec)
        for world in world_sizes:
            scenario = Scenario(
                world_size=world,
                efficiency=efficiency,
                latency_s=latency_s,
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
        "self_replay": _prediction_summary(check),
        "scenarios": table.to_dicts(),
        "targets": targets,
        "warnings": warnings,
    }
