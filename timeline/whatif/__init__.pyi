"""`timeline.whatif`'s public names, each from its module (read by :func:`timeline.lazy.attach_stub`)."""

from timeline.whatif.bucketing import (
    MEASURED as MEASURED,
)
from timeline.whatif.bucketing import (
    BucketPolicy as BucketPolicy,
)
from timeline.whatif.bucketing import (
    DDPBuckets as DDPBuckets,
)
from timeline.whatif.bucketing import (
    FusionBuckets as FusionBuckets,
)
from timeline.whatif.bucketing import (
    MeasuredBuckets as MeasuredBuckets,
)
from timeline.whatif.bucketing import (
    ddp_buckets as ddp_buckets,
)
from timeline.whatif.bucketing import (
    fusion_buckets as fusion_buckets,
)
from timeline.whatif.bucketing import (
    parse_bucket_policy as parse_bucket_policy,
)
from timeline.whatif.compression import Compression as Compression
from timeline.whatif.compression import compression_helps as compression_helps
from timeline.whatif.costs import (
    Algorithm as Algorithm,
)
from timeline.whatif.costs import (
    bandwidth_bits as bandwidth_bits,
)
from timeline.whatif.costs import (
    collective_time_s as collective_time_s,
)
from timeline.whatif.costs import (
    latency_steps as latency_steps,
)
from timeline.whatif.costs import (
    parse_duration_s as parse_duration_s,
)
from timeline.whatif.engine import (
    Prediction as Prediction,
)
from timeline.whatif.engine import (
    Scenario as Scenario,
)
from timeline.whatif.engine import (
    cost_fit as cost_fit,
)
from timeline.whatif.engine import (
    link_times as link_times,
)
from timeline.whatif.engine import (
    replay as replay,
)
from timeline.whatif.engine import (
    self_replay as self_replay,
)
from timeline.whatif.graph import (
    TraceGraph as TraceGraph,
)
from timeline.whatif.graph import (
    build_graph as build_graph,
)
from timeline.whatif.graph import (
    trace_graph as trace_graph,
)
from timeline.whatif.sweeps import (
    SWEEP_SCHEMA as SWEEP_SCHEMA,
)
from timeline.whatif.sweeps import (
    solve_bandwidth as solve_bandwidth,
)
from timeline.whatif.sweeps import (
    solve_compression as solve_compression,
)
from timeline.whatif.sweeps import (
    sweep as sweep,
)

__all__: list[str]
