"""Sweeps of what-if scenarios, and the bandwidth or compression that reaches a scaling factor.

Takes a :class:`~timeline.whatif.graph.TraceGraph` and the :class:`~timeline.whatif.settings.Settings`
to combine (bandwidths, world sizes, compression ratios, bucketing policies); gives one row per combination
(:data:`SWEEP_SCHEMA`): the predicted iteration time, exposed communication and scaling factor,
with the no-overlap and perfect-overlap bounds beside them. :func:`solve_bandwidth` and
:func:`solve_compression` search for the smallest bandwidth, or compression ratio, whose predicted
scaling factor reaches a target (both grow monotonically with it: more bandwidth or compression
never delays a collective, and nothing in the replay waits less when a collective ends later).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import polars as pl

from timeline.whatif.bucketing import BucketPolicy
from timeline.whatif.compression import Compression
from timeline.whatif.engine import Prediction, Scenario, replay, single_replay
from timeline.whatif.graph import TraceGraph
from timeline.whatif.settings import Settings

__all__ = ["SWEEP_SCHEMA", "predict_buckets", "scenario_row", "solve_bandwidth", "solve_compression", "sweep"]

SWEEP_SCHEMA = pl.Schema(
    {
        "bandwidth_gbps": pl.Float64(),
        "world_size": pl.Int32(),
        "compression": pl.Float64(),
        "buckets": pl.String(),
        "efficiency": pl.String(),
        "algorithm": pl.String(),
        "latency_s": pl.Float64(),
        "measured_ns": pl.Int64(),
        "iteration_ns": pl.Int64(),
        "single_ns": pl.Int64(),
        "exposed_comm_ns": pl.Int64(),
        "scaling_factor": pl.Float64(),
        "no_overlap_ns": pl.Int64(),
        "no_overlap_scaling_factor": pl.Float64(),
        "perfect_overlap_ns": pl.Int64(),
        "perfect_overlap_scaling_factor": pl.Float64(),
        "dimension_bandwidths": pl.List(
            pl.Struct({"dimension": pl.String(), "bandwidth_gbps": pl.Float64()})
        ),
        "dimension_latencies": pl.List(pl.Struct({"dimension": pl.String(), "latency_s": pl.Float64()})),
    }
)
"""One row per scenario of a sweep. Times are means over iterations of medians over ranks."""


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else 1.0


def scenario_row(
    graph: TraceGraph, prediction: Prediction, no_overlap: Prediction | None
) -> dict[str, object]:
    """Return a :data:`SWEEP_SCHEMA` row for a prediction (and its no-overlap twin)."""
    scenario = prediction.scenario
    single = prediction.single_ns
    perfect = prediction.perfect_overlap_ns
    link = scenario.bandwidth_gbps if scenario.bandwidth_gbps is not None else graph.link_gbps
    efficiency = scenario.efficiency if isinstance(scenario.efficiency, str) else f"{scenario.efficiency:g}"
    return {
        "bandwidth_gbps": link,
        "world_size": scenario.world_size if scenario.world_size is not None else graph.world_size,
        "compression": scenario.compression.ratio,
        "buckets": scenario.buckets.label,
        "efficiency": efficiency,
        "algorithm": scenario.algorithm,
        "latency_s": scenario.latency_s,
        "measured_ns": round(prediction.measured_ns),
        "iteration_ns": round(prediction.iteration_ns),
        "single_ns": round(single),
        "exposed_comm_ns": round(prediction.exposed_comm_ns),
        "scaling_factor": prediction.scaling_factor,
        "no_overlap_ns": round(no_overlap.iteration_ns) if no_overlap is not None else None,
        "no_overlap_scaling_factor": _ratio(single, no_overlap.iteration_ns)
        if no_overlap is not None
        else None,
        "perfect_overlap_ns": round(perfect),
        "perfect_overlap_scaling_factor": _ratio(single, perfect),
        "dimension_bandwidths": [
            {"dimension": d, "bandwidth_gbps": gbps} for d, gbps in scenario.dimension_bandwidths
        ],
        "dimension_latencies": [{"dimension": d, "latency_s": a} for d, a in scenario.dimension_latencies],
    }


def predict_buckets(
    graph: TraceGraph,
    policies: Sequence[BucketPolicy],
    *,
    scenario: Scenario | None = None,
    single: pl.DataFrame | None = None,
    iterations: Sequence[int] | None = None,
) -> list[Prediction]:
    """Replay the graph with each bucketing policy: one :class:`Prediction` per policy, in order.

    The one computation behind ``timeline whatif --buckets`` (:func:`sweep`) and the diagnosis'
    ``bucketing`` and ``no_overlap`` findings: the gradients regrouped by the policy in the order they
    became ready, each bucket launched when its last gradient is ready, and costing its kind's
    fixed cost per call and time per byte fitted from the trace
    (:func:`~timeline.whatif.engine.cost_fit`).

    Parameters
    ----------
    graph
        The run's graph.
    policies
        The bucketing policies (:data:`~timeline.whatif.bucketing.MEASURED`, DDP caps, fusion).
    scenario
        The other settings (default: as measured); its ``buckets`` is replaced by each policy.
    single
        ``T_single`` per window from an earlier call, to save its replay.
    iterations
        Keep only these iterations in the summaries.
    """
    base = scenario or Scenario()
    single = single if single is not None else single_replay(graph)
    return [
        replay(graph, scenario=replace(base, buckets=policy), single=single, iterations=iterations)
        for policy in policies
    ]


def sweep(graph: TraceGraph, settings: Settings, *, bounds: bool = True) -> pl.DataFrame:
    """Replay every combination of settings and tabulate the predictions.

    Parameters
    ----------
    graph
        The run's graph.
    settings
        What to combine (:meth:`~timeline.whatif.settings.Settings.scenarios`: links, world sizes,
        compression ratios, buckets) and what every row shares (efficiency, latency, algorithm,
        codec, the iterations averaged over); ``Settings()``: the measured conditions.
    bounds
        Also replay each scenario without overlap (``no_overlap_*`` columns; null when False).

    Returns
    -------
    pl.DataFrame
        :data:`SWEEP_SCHEMA`, one row per combination, in the order of ``settings.scenarios()``.

    Examples
    --------
    >>> from timeline.whatif.settings import Settings  # doctest: +SKIP
    >>> sweep(graph, Settings(bandwidths=[10.0, 25.0], compressions=[1.0, 2.0]))  # doctest: +SKIP
    """
    single = single_replay(graph)
    iterations = settings.iterations
    rows: list[dict[str, object]] = []
    for scenario in settings.scenarios():
        prediction = replay(graph, scenario=scenario, single=single, iterations=iterations)
        no_overlap = (
            replay(graph, scenario=replace(scenario, overlap="none"), single=single, iterations=iterations)
            if bounds
            else None
        )
        rows.append(scenario_row(graph, prediction, no_overlap))
    return pl.DataFrame(rows, schema=SWEEP_SCHEMA)


def _bisect(
    scaling: object, low: float, high: float, target: float, *, steps: int = 40, rtol: float = 0.005
) -> float | None:
    """Return the smallest ``x`` in ``[low, high]`` (log scale) with ``scaling(x) ≥ target``, or None."""
    assert callable(scaling)
    if scaling(high) < target:
        return None
    if scaling(low) >= target:
        return low
    lo, hi = math.log(low), math.log(high)
    for _ in range(steps):
        if hi - lo < rtol:
            break
        mid = (lo + hi) / 2
        if scaling(math.exp(mid)) >= target:
            hi = mid
        else:
            lo = mid
    return math.exp(hi)


def solve_bandwidth(
    graph: TraceGraph,
    target: float,
    *,
    scenario: Scenario | None = None,
    low_gbps: float = 0.01,
    high_gbps: float = 1e5,
    iterations: Sequence[int] | None = None,
) -> float | None:
    """Return the smallest bandwidth (Gbit/s) whose predicted scaling factor reaches ``target``.

    Parameters
    ----------
    graph
        The run's graph.
    target
        The scaling factor to reach, in ``(0, 1]``.
    scenario
        The other settings (its bandwidth is what is searched).
    low_gbps, high_gbps
        The search range.
    iterations
        Keep only these iterations in the averages.

    Returns
    -------
    float | None
        Gbit/s within 0.5 %; None when even ``high_gbps`` falls short (latency, codec or compute
        bound); ``low_gbps`` when it already suffices.
    """
    base = scenario or Scenario()
    single = single_replay(graph)

    def scaling(gbps: float) -> float:
        return replay(
            graph, scenario=replace(base, bandwidth_gbps=gbps), single=single, iterations=iterations
        ).scaling_factor

    return _bisect(scaling, low_gbps, high_gbps, target)


def solve_compression(
    graph: TraceGraph,
    target: float,
    *,
    scenario: Scenario | None = None,
    high: float = 1000.0,
    iterations: Sequence[int] | None = None,
) -> float | None:
    """Return the smallest compression ratio whose predicted scaling factor reaches ``target``.

    The scenario's codec cost applies to every ratio above 1 (1 means no compression, no codec).

    Returns
    -------
    float | None
        The ratio within 0.5 %; 1.0 when no compression is needed; None when even ``high`` falls
        short (the codec's cost or the latency term caps the scaling factor).
    """
    base = scenario or Scenario()
    single = single_replay(graph)

    def scaling(ratio: float) -> float:
        compression = Compression(ratio=ratio, codec_bytes_per_s=base.compression.codec_bytes_per_s)
        return replay(
            graph, scenario=replace(base, compression=compression), single=single, iterations=iterations
        ).scaling_factor

    if scaling(1.0) >= target:
        return 1.0
    return _bisect(scaling, 1.0 + 1e-9, high, target)
