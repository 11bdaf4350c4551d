"""The thresholds of the diagnosis, each in one place (``docs/diagnosis.md`` quotes them).

Takes nothing; gives the constants every rule of :mod:`timeline.diagnosis` reads.
"""

from __future__ import annotations

__all__ = [
    "BUCKET_CAPS_MIB",
    "CODEC_GBPS",
    "COMPRESSION_RATIO",
    "CUT_STEP_SHARE",
    "DISPATCH_GAP_MAX_NS",
    "HIDE_TOLERANCE",
    "IMBALANCE_LATE_SHARE",
    "LATE_TOGETHER",
    "LAUNCH_GAP_MAX_NS",
    "LINK_UNDERUSED_RATIO",
    "MAX_RANK_EVENTS",
    "MIN_GAIN",
    "MIN_SHARE",
    "REPLAY_ERROR",
    "SLOW_RANK_SHARE",
]

MIN_SHARE = 0.05
"""A cause is examined when the time it concerns is at least 5 % of the step (mean per iteration)."""

MIN_GAIN = 0.02
"""A finding is kept when its fix is predicted to save at least 2 % of the step (compression, which
is often a finding that it would not help, is kept whenever it was examined)."""

SLOW_RANK_SHARE = 0.5
"""``straggler``: one rank caused at least half of the waiting at the synchronising collectives
(the ``slow_rank`` share of :mod:`timeline.analysis.stragglers`)."""

LATE_TOGETHER = 0.5
"""``straggler``: a rank at least half as far behind the median rank as the slow one (mean over the
diagnosed iterations) is late with it: the fix must bring both (``docs/diagnosis.md``)."""

IMBALANCE_LATE_SHARE = 0.1
"""``imbalance``: the ranks named are those that caused at least 10 % of the waiting."""

LINK_UNDERUSED_RATIO = 0.5
"""Transfers below half the link (byte-weighted bus bandwidth over the link) under-use it
(``link_underused``); at or above it, the link is what limits them (``slow_link``)."""

COMPRESSION_RATIO = 4.0
"""``compression``: the ratio replayed (32-bit gradients sent in 8 bits)."""

CODEC_GBPS = {"gpu": 800.0, "cpu": 40.0}
"""``compression``: the codec's throughput assumed when none is given (encode, and decode, each):
an assumption, not a measurement. 100 GB/s on a GPU (an elementwise kernel at a fraction of the
memory bandwidth), 5 GB/s on a CPU rank (one vectorised pass over the gradient on one core).
``diagnose(..., codec_gbps=...)`` and ``timeline analyze --codec-gbps`` use your codec's."""

BUCKET_CAPS_MIB = (1.0, 5.0, 25.0, 100.0)
"""``bucketing``: the DDP bucket caps of the replay sweep (first bucket 1 MiB, as DDP's)."""

LAUNCH_GAP_MAX_NS = 100_000
"""``launch_bound``: a device gap counts when it is at most 100 µs long and the next activity's
launch ended after the gap began (the device waited for the host); longer gaps are idle time."""

DISPATCH_GAP_MAX_NS = 1_000_000
"""``input_stall`` on CPU-only ranks: a gap of at most 1 ms between two of the rank's operators (or
collectives) inside a step is the host running the Python between them (on a CPU rank the host is
the device: 20-300 µs per gap measured on a loaded 2-vCPU machine), not a stall. The gap before a
step's first activity counts whatever its length, and so do longer gaps (a data loader's queue,
a sleep, a blocking read)."""

CUT_STEP_SHARE = 0.5
"""A rank's first or last iteration shorter than half the median of its others was cut by the
profiler's window (:func:`~timeline.diagnosis.facts.cut_iterations`): left out of the measured step."""

HIDE_TOLERANCE = 0.01
"""The hide bandwidth: the step comes within 1 % of the step with an infinitely fast link."""

MAX_RANK_EVENTS = 250
"""Above this many communication events of a rank in its iterations, only the consecutive iterations
around its middle one (by number) that hold about this many are diagnosed (at least the middle one),
so that building its graph and replaying it stay cheap
(:func:`~timeline.diagnosis.facts.replayed_iterations`)."""

REPLAY_ERROR = 0.05
"""A self-replay further than 5 % from the measured step is reported in the notes."""
