"""What-if: predict iteration time and scaling from a real trace under other conditions.

Takes a loaded trace; gives predictions. The pipeline reads in the module names:

- :mod:`~timeline.whatif.graph`: the run's dependency graph (compute, gradient-ready times,
  collectives with bytes, order and channel, who waits for whom);
- :mod:`~timeline.whatif.costs`: ring and tree cost models, latency, efficiency;
- :mod:`~timeline.whatif.bucketing`: DDP bucket caps and Horovod-style fusion;
- :mod:`~timeline.whatif.compression`: compression ratio with encode/decode cost (MLSys'22);
- :mod:`~timeline.whatif.replay`: the replay, a :class:`Scenario` in, a :class:`Prediction` out;
- :mod:`~timeline.whatif.sweep`: sweeps over bandwidths, world sizes, compression ratios, bucket
  policies, and the bandwidth or compression that reaches a scaling factor;
- :mod:`~timeline.whatif.seed`: the seed paper's backward profiles (``*.bk.log``) and simulator.

Names are imported when first used: ``timeline whatif`` reads its options without importing polars
(its ``--help`` starts fast).

See ``docs/whatif.md``. The research code that checks these predictions (the seed paper's
experiment, the two-namespace DDP experiment) lives outside the package, in ``experiments/``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from timeline.lazy import lazy_names

if TYPE_CHECKING:
    from timeline.whatif.bucketing import (
        MEASURED,
        BucketPolicy,
        DDPBuckets,
        FusionBuckets,
        MeasuredBuckets,
        ddp_buckets,
        fusion_buckets,
        parse_bucket_policy,
    )
    from timeline.whatif.compression import Compression, compression_helps
    from timeline.whatif.costs import (
        Algorithm,
        bandwidth_bits,
        collective_time_s,
        latency_steps,
        parse_duration_s,
    )
    from timeline.whatif.graph import TraceGraph, build_graph, trace_graph
    from timeline.whatif.replay import Prediction, Scenario, cost_fit, link_times, replay, self_replay
    from timeline.whatif.sweep import (
        SWEEP_SCHEMA,
        solve_bandwidth,
        solve_compression,
        sweep,
    )

__all__ = [
    "MEASURED",
    "SWEEP_SCHEMA",
    "Algorithm",
    "BucketPolicy",
    "Compression",
    "DDPBuckets",
    "FusionBuckets",
    "MeasuredBuckets",
    "Prediction",
    "Scenario",
    "TraceGraph",
    "bandwidth_bits",
    "build_graph",
    "collective_time_s",
    "compression_helps",
    "cost_fit",
    "ddp_buckets",
    "fusion_buckets",
    "latency_steps",
    "link_times",
    "parse_bucket_policy",
    "parse_duration_s",
    "replay",
    "self_replay",
    "solve_bandwidth",
    "solve_compression",
    "sweep",
    "trace_graph",
]

_LAZY = {
    "MEASURED": "timeline.whatif.bucketing",
    "BucketPolicy": "timeline.whatif.bucketing",
    "DDPBuckets": "timeline.whatif.bucketing",
    "FusionBuckets": "timeline.whatif.bucketing",
    "MeasuredBuckets": "timeline.whatif.bucketing",
    "ddp_buckets": "timeline.whatif.bucketing",
    "fusion_buckets": "timeline.whatif.bucketing",
    "parse_bucket_policy": "timeline.whatif.bucketing",
    "Compression": "timeline.whatif.compression",
    "compression_helps": "timeline.whatif.compression",
    "Algorithm": "timeline.whatif.costs",
    "bandwidth_bits": "timeline.whatif.costs",
    "collective_time_s": "timeline.whatif.costs",
    "latency_steps": "timeline.whatif.costs",
    "parse_duration_s": "timeline.whatif.costs",
    "TraceGraph": "timeline.whatif.graph",
    "build_graph": "timeline.whatif.graph",
    "trace_graph": "timeline.whatif.graph",
    "Prediction": "timeline.whatif.replay",
    "Scenario": "timeline.whatif.replay",
    "cost_fit": "timeline.whatif.replay",
    "link_times": "timeline.whatif.replay",
    "replay": "timeline.whatif.replay",
    "self_replay": "timeline.whatif.replay",
    "SWEEP_SCHEMA": "timeline.whatif.sweep",
    "solve_bandwidth": "timeline.whatif.sweep",
    "solve_compression": "timeline.whatif.sweep",
    "sweep": "timeline.whatif.sweep",
}

__getattr__, __dir__ = lazy_names("timeline.whatif", _LAZY, globals(), over_submodules=("replay", "sweep"))
