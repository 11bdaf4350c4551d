"""The declared output schemas of the cross-rank analyses: collectives, stragglers, clocks, Horovod.

Each analysis in :mod:`timeline.analysis.collectives`, :mod:`timeline.analysis.stragglers`,
:mod:`timeline.analysis.alignment` and :mod:`timeline.analysis.horovod_phases` returns frames with
exactly these columns (validated with :func:`timeline.schema.validate`). Times are ``Int64``
nanoseconds (``*_ns``), rates are ``Float64`` in bytes per second (``*_bytes_per_s``) and Gbit/s
(``*_gbps``, 10⁹ bits per second), ratios are ``Float64`` named ``*_ratio``; unknown is null. Every
column is defined, with its formula, in ``docs/collectives.md``.
"""

from __future__ import annotations

import polars as pl

__all__ = [
    "AMBIGUOUS_COLLECTIVES_SCHEMA",
    "CLOCK_OFFSETS_SCHEMA",
    "COLLECTIVES_SCHEMA",
    "COLLECTIVE_GROUPS_SCHEMA",
    "COLLECTIVE_MISMATCHES_SCHEMA",
    "COLLECTIVE_RANKS_SCHEMA",
    "COMM_INTERVALS_SCHEMA",
    "COMM_STATE",
    "DIMENSION_EXPOSURE_SCHEMA",
    "GROUP_INSTANCES_SCHEMA",
    "HOROVOD_BATCHES_SCHEMA",
    "HOROVOD_ITERATIONS_SCHEMA",
    "HOROVOD_NEGOTIATION_SCHEMA",
    "HOROVOD_PHASES_SCHEMA",
    "HOROVOD_TENSORS_SCHEMA",
    "HOROVOD_TOTALS_SCHEMA",
    "ITERATION_UTILISATION_SCHEMA",
    "POINT_TO_POINT_SCHEMA",
    "SHARED_CLOCKS_SCHEMA",
    "STRAGGLER_ITERATIONS_SCHEMA",
    "STRAGGLER_RANKS_SCHEMA",
    "VERDICT",
]

VERDICT = pl.Enum(["slow_rank", "imbalance", "slow_link"])
"""Why the ranks of an iteration spent their time in collectives (see ``docs/collectives.md``)."""

_BANDWIDTH: dict[str, pl.DataType] = {
    "algbw_bytes_per_s": pl.Float64(),
    "busbw_bytes_per_s": pl.Float64(),
    "algbw_gbps": pl.Float64(),
    "busbw_gbps": pl.Float64(),
    "link_gbps": pl.Float64(),
    "link_utilisation_ratio": pl.Float64(),
}

GROUP_INSTANCES_SCHEMA = pl.Schema(
    {
        "group": pl.String(),
        "pg_name": pl.String(),
        "pg_desc": pl.String(),
        "dimension": pl.String(),
        "ranks": pl.List(pl.Int32()),
        "ranks_truncated": pl.Boolean(),
        "size": pl.Int32(),
        "backend": pl.String(),
        "declared_by": pl.Int32(),
        "hosts": pl.Int32(),
        "spans_nodes": pl.Boolean(),
    }
)
"""One row per process group instance: a ``pg_name`` with one rank set (``group_instances``)."""

COLLECTIVE_GROUPS_SCHEMA = pl.Schema(
    {
        **GROUP_INSTANCES_SCHEMA,
        "collectives": pl.Int64(),
        "complete": pl.Int64(),
        "matched_by": pl.String(),
        "attributed_by": pl.String(),
        "point_to_point": pl.Int64(),
        "ambiguous": pl.Int64(),
    }
)
"""One row per group instance with what was matched on it (``CollectiveMatch.groups``)."""

COLLECTIVES_SCHEMA = pl.Schema(
    {
        "collective_id": pl.Int64(),
        "group": pl.String(),
        "dimension": pl.String(),
        "index": pl.Int64(),
        "matched_by": pl.String(),
        "attributed_by": pl.String(),
        "collective": pl.String(),
        "iteration": pl.Int64(),
        "synchronising": pl.Boolean(),
        "ranks": pl.Int32(),
        "expected_ranks": pl.Int32(),
        "complete": pl.Boolean(),
        "consistent": pl.Boolean(),
        "group_size": pl.Int32(),
        "bytes": pl.Int64(),
        "first_start_ns": pl.Int64(),
        "last_start_ns": pl.Int64(),
        "first_end_ns": pl.Int64(),
        "last_end_ns": pl.Int64(),
        "start_skew_ns": pl.Int64(),
        "end_skew_ns": pl.Int64(),
        "transfer_ns": pl.Int64(),
        "max_wait_ns": pl.Int64(),
        "total_wait_ns": pl.Int64(),
        "first_rank": pl.Int32(),
        "last_rank": pl.Int32(),
        "bus_factor": pl.Float64(),
        **_BANDWIDTH,
        "implausible": pl.Boolean(),
        "spans_nodes": pl.Boolean(),
    }
)
"""One row per logical collective: the k-th collective of a process group across its ranks."""

POINT_TO_POINT_SCHEMA = pl.Schema(
    {
        "pair_id": pl.Int64(),
        "group": pl.String(),
        "dimension": pl.String(),
        "src": pl.Int32(),
        "dst": pl.Int32(),
        "index": pl.Int64(),
        "iteration": pl.Int64(),
        "complete": pl.Boolean(),
        "consistent": pl.Boolean(),
        "bytes": pl.Int64(),
        "send_start_ns": pl.Int64(),
        "send_end_ns": pl.Int64(),
        "recv_start_ns": pl.Int64(),
        "recv_end_ns": pl.Int64(),
        "start_skew_ns": pl.Int64(),
        "transfer_ns": pl.Int64(),
        "send_wait_ns": pl.Int64(),
        "recv_wait_ns": pl.Int64(),
        "bus_factor": pl.Float64(),
        **_BANDWIDTH,
        "implausible": pl.Boolean(),
        "spans_nodes": pl.Boolean(),
    }
)
"""One row per point-to-point transfer: the k-th send from ``src`` to ``dst`` with the k-th receive."""

SHARED_CLOCKS_SCHEMA = pl.Schema(
    {
        "rank": pl.Int32(),
        "clock": pl.String(),
        "uncertainty_ns": pl.Int64(),
    }
)
"""Which ranks' times compare (``shared_clocks``): ranks with one ``clock`` value share a clock."""

AMBIGUOUS_COLLECTIVES_SCHEMA = pl.Schema(
    {
        "rank": pl.Int32(),
        "collective": pl.String(),
        "matched_by": pl.String(),
        "candidates": pl.List(pl.String()),
        "group_size": pl.Int32(),
        "start_ns": pl.Int64(),
        "end_ns": pl.Int64(),
        "dur_ns": pl.Int64(),
        "in_bytes": pl.Int64(),
        "out_bytes": pl.Int64(),
    }
)
"""One row per communication event whose group stays ambiguous: matched across no rank."""

COLLECTIVE_RANKS_SCHEMA = pl.Schema(
    {
        "collective_id": pl.Int64(),
        "group": pl.String(),
        "index": pl.Int64(),
        "rank": pl.Int32(),
        "collective": pl.String(),
        "iteration": pl.Int64(),
        "events": pl.Int32(),
        "start_ns": pl.Int64(),
        "end_ns": pl.Int64(),
        "dur_ns": pl.Int64(),
        "in_bytes": pl.Int64(),
        "out_bytes": pl.Int64(),
        "bytes": pl.Int64(),
        "arrival_lag_ns": pl.Int64(),
        "end_lag_ns": pl.Int64(),
        "transfer_ns": pl.Int64(),
        "wait_ns": pl.Int64(),
        "last": pl.Boolean(),
    }
)
"""One row per logical collective and rank: the rank's own timing and its wait."""

COLLECTIVE_MISMATCHES_SCHEMA = pl.Schema(
    {
        "group": pl.String(),
        "rank": pl.Int32(),
        "collectives": pl.Int64(),
        "expected": pl.Int64(),
        "missing": pl.Int64(),
    }
)
"""One row per group and rank whose count of collectives differs from the group's most."""

ITERATION_UTILISATION_SCHEMA = pl.Schema(
    {
        "iteration": pl.Int64(),
        "collectives": pl.Int64(),
        "bytes": pl.Int64(),
        "bus_bytes": pl.Float64(),
        "transfer_ns": pl.Int64(),
        "total_wait_ns": pl.Int64(),
        "algbw_gbps": pl.Float64(),
        "busbw_gbps": pl.Float64(),
        "link_gbps": pl.Float64(),
        "link_utilisation_ratio": pl.Float64(),
        "step_ns": pl.Int64(),
        "step_link_utilisation_ratio": pl.Float64(),
        "exposed_comm_ns": pl.Int64(),
        "exposed_link_bytes": pl.Float64(),
    }
)
"""One row per iteration (null: collectives outside every ProfilerStep window)."""

STRAGGLER_ITERATIONS_SCHEMA = pl.Schema(
    {
        "iteration": pl.Int64(),
        "collectives": pl.Int64(),
        "ranks": pl.Int32(),
        "straggler_rank": pl.Int32(),
        "straggler_times_last": pl.Int64(),
        "straggler_caused_wait_ns": pl.Int64(),
        "caused_wait_ns": pl.Int64(),
        "straggler_share_ratio": pl.Float64(),
        "transfer_ns": pl.Int64(),
        "mean_wait_ns": pl.Int64(),
        "wait_ratio": pl.Float64(),
        "straggler_compute_ns": pl.Int64(),
        "median_compute_ns": pl.Int64(),
        "verdict": VERDICT,
    }
)
"""One row per iteration: the rank the others waited for, and whether a rank or the link was slow."""

STRAGGLER_RANKS_SCHEMA = pl.Schema(
    {
        "position": pl.Int32(),
        "rank": pl.Int32(),
        "collectives": pl.Int64(),
        "times_last": pl.Int64(),
        "caused_wait_ns": pl.Int64(),
        "caused_wait_ratio": pl.Float64(),
        "waited_ns": pl.Int64(),
        "mean_arrival_lag_ns": pl.Int64(),
    }
)
"""One row per rank, ranked by the wait it caused over the whole trace (``position`` 1 = worst)."""

CLOCK_OFFSETS_SCHEMA = pl.Schema(
    {
        "rank": pl.Int32(),
        "reference_rank": pl.Int32(),
        "offset_ns": pl.Int64(),
        "collectives": pl.Int64(),
        "mad_ns": pl.Int64(),
        "host": pl.String(),
    }
)
"""One row per rank: how far its clock runs ahead of the reference rank's (subtract to align)."""

HOROVOD_TENSORS_SCHEMA = pl.Schema(
    {
        "tensor": pl.String(),
        "pid": pl.Int64(),
        "collective": pl.String(),
        "operations": pl.Int64(),
        "bytes": pl.Int64(),
        "negotiation_ns": pl.Int64(),
        "wait_ns": pl.Int64(),
        "queue_ns": pl.Int64(),
        "memcpy_in_ns": pl.Int64(),
        "memcpy_out_ns": pl.Int64(),
        "wire_ns": pl.Int64(),
        "other_ns": pl.Int64(),
        "operation_ns": pl.Int64(),
    }
)
"""One row per Horovod tensor: the summed duration of each of its phases."""

HOROVOD_BATCHES_SCHEMA = pl.Schema(
    {
        "batch": pl.Int64(),
        "collective": pl.String(),
        "wire_phases": pl.String(),
        "tensors": pl.Int64(),
        "bytes": pl.Int64(),
        "start_ns": pl.Int64(),
        "end_ns": pl.Int64(),
        "wire_ns": pl.Int64(),
        "world_size": pl.Int32(),
        "bus_factor": pl.Float64(),
        **_BANDWIDTH,
        "implausible": pl.Boolean(),
    }
)
"""One row per fused batch (one Horovod response): its tensors, bytes and achieved bandwidth."""

HOROVOD_NEGOTIATION_SCHEMA = pl.Schema(
    {
        "rank": pl.Int32(),
        "negotiations": pl.Int64(),
        "waited_ns": pl.Int64(),
        "mean_waited_ns": pl.Int64(),
        "times_last": pl.Int64(),
        "caused_wait_ns": pl.Int64(),
    }
)
"""One row per rank seen in negotiation ticks: how long it waited for the others, and they for it."""

HOROVOD_TOTALS_SCHEMA = pl.Schema(
    {
        "tensors": pl.Int64(),
        "operations": pl.Int64(),
        "batches": pl.Int64(),
        "world_size": pl.Int32(),
        "span_ns": pl.Int64(),
        "wire_sum_ns": pl.Int64(),
        "wire_ns": pl.Int64(),
        "wire_ratio": pl.Float64(),
        "negotiation_ns": pl.Int64(),
        "bytes": pl.Int64(),
        **_BANDWIDTH,
    }
)
"""One row: the whole timeline (wire time as a union over fused tensors)."""

HOROVOD_PHASES_SCHEMA = pl.Schema(
    {
        "tensor": pl.String(),
        "pid": pl.Int64(),
        "kind": pl.String(),
        "name": pl.String(),
        "iteration": pl.Int64(),
        "start_ns": pl.Int64(),
        "end_ns": pl.Int64(),
        "dur_ns": pl.Int64(),
        "hidden_ns": pl.Int64(),
        "exposed_ns": pl.Int64(),
        "kernel_ns": pl.Int64(),
    }
)
"""One row per Horovod phase span, set against the writer rank's profiler trace."""

HOROVOD_ITERATIONS_SCHEMA = pl.Schema(
    {
        "rank": pl.Int32(),
        "iteration": pl.Int64(),
        "start_ns": pl.Int64(),
        "end_ns": pl.Int64(),
        "step_ns": pl.Int64(),
        "wire_ns": pl.Int64(),
        "hidden_wire_ns": pl.Int64(),
        "exposed_wire_ns": pl.Int64(),
        "negotiation_ns": pl.Int64(),
        "queue_ns": pl.Int64(),
        "memcpy_ns": pl.Int64(),
        "kernel_comm_ns": pl.Int64(),
        "exposed_kernel_comm_ns": pl.Int64(),
        "exposed_wire_ratio": pl.Float64(),
    }
)
"""One row per iteration of the writer rank: Horovod's phases against its compute."""

COMM_STATE = pl.Enum(["exposed", "hidden"])
"""Whether a stretch of communication ran under compute (``hidden``) or not (``exposed``)."""

COMM_INTERVALS_SCHEMA = pl.Schema(
    {
        "rank": pl.Int32(),
        "state": COMM_STATE,
        "start_ns": pl.Int64(),
        "end_ns": pl.Int64(),
    }
)
"""The communication of each rank as disjoint intervals, exposed or hidden (``comm_intervals``).

Their lengths add up to the rank's ``exposed_comm_ns`` and ``hidden_comm_ns`` (``docs/metrics.md``).
"""

DIMENSION_EXPOSURE_SCHEMA = pl.Schema(
    {
        "dimension": pl.String(),
        "iteration": pl.Int64(),
        "rank": pl.Int32(),
        "comm_ns": pl.Int64(),
        "hidden_ns": pl.Int64(),
        "exposed_ns": pl.Int64(),
        "exclusive_exposed_ns": pl.Int64(),
    }
)
"""Exposed and hidden communication of one dimension on one rank in one iteration window
(:func:`~timeline.analysis.dimensions.exposure_by`); the ``dimension`` column holds the key the
exposure was split by (a dimension label, or a ``pg_desc``). Defined in ``docs/metrics.md``."""
