"""The canonical polars schemas: the events frame every importer produces, and each analysis output.

Times are ``Int64`` nanoseconds with the unit in the column name; ratios are floats in ``[0, 1]``
named ``*_ratio``; missing values are null, never a sentinel. Every column is documented in
``docs/schema.md`` (a test keeps the two in step).
"""

from __future__ import annotations

import polars as pl

__all__ = [
    "COLLECTIVE_EXPOSURE_SCHEMA",
    "EVENTS_SCHEMA",
    "EVENT_KINDS",
    "FILES_SCHEMA",
    "ITERATIONS_SCHEMA",
    "KIND",
    "PROCESS_GROUPS_SCHEMA",
    "RANK_OVERLAP_SCHEMA",
    "SOURCE",
    "WINDOW",
    "validate",
]

EVENT_KINDS: tuple[str, ...] = (
    "compute",  # a GPU kernel that is not communication
    "communication",  # a collective or p2p transfer: NCCL/RCCL/HCCL kernel, gloo op, Horovod wire phase
    "memcpy",  # GPU memcpy, Horovod MEMCPY_*_FUSION_BUFFER
    "memset",  # GPU memset
    "sync",  # stream/event/device synchronisation, CPU waits on collectives: never compute
    "cpu_op",  # an operator on a CPU thread
    "annotation",  # user_annotation / gpu_user_annotation / record_function ranges, ProfilerStep#N
    "runtime",  # CUDA/HIP runtime and driver calls (kernel launches)
    "python_function",  # python stack frames (kept only when asked for)
    "negotiation",  # Horovod NEGOTIATE_<OP> phase
    "queue",  # Horovod QUEUE phase
    "wait",  # Horovod WAIT_FOR_DATA / WAIT_FOR_OTHER_TENSOR_DATA
    "instant",  # zero-duration markers: Horovod negotiation ticks and CYCLE_START
    "other",  # anything else (profiler overhead, the Trace span, Horovod INIT_*)
)
KIND = pl.Enum(EVENT_KINDS)
SOURCE = pl.Enum(["kineto", "horovod"])
WINDOW = pl.Enum(["profiler_step", "whole_trace"])

EVENTS_SCHEMA = pl.Schema(
    {
        "rank": pl.Int32(),
        "source": SOURCE,
        "kind": KIND,
        "name": pl.Categorical(),
        "cat": pl.Categorical(),
        "start_ns": pl.Int64(),
        "end_ns": pl.Int64(),
        "dur_ns": pl.Int64(),
        "pid": pl.Int64(),
        "tid": pl.Int64(),
        "device": pl.Int32(),
        "stream": pl.Int64(),
        "correlation": pl.Int64(),
        "external_id": pl.Int64(),
        "collective": pl.Categorical(),
        "in_bytes": pl.Int64(),
        "out_bytes": pl.Int64(),
        "dtype": pl.Categorical(),
        "group_size": pl.Int32(),
        "pg_name": pl.Categorical(),
        "pg_desc": pl.Categorical(),
        "pg_ranks": pl.String(),
        "seq": pl.Int64(),
        "comms_id": pl.UInt64(),
        "peer": pl.Int32(),
        "group_peer": pl.Int32(),
        "tensor": pl.Categorical(),
    }
)
"""One row per event of every rank. See ``docs/schema.md`` for each column."""

FILES_SCHEMA = pl.Schema(
    {
        "rank": pl.Int32(),
        "path": pl.String(),
        "format": pl.String(),
        "rank_from": pl.String(),
        "world_size": pl.Int32(),
        "backend": pl.String(),
        "host": pl.String(),
        "clock": pl.String(),
        "events": pl.Int64(),
    }
)
"""One row per loaded file: where each rank came from."""

PROCESS_GROUPS_SCHEMA = pl.Schema(
    {
        "rank": pl.Int32(),
        "pg_name": pl.String(),
        "pg_desc": pl.String(),
        "ranks": pl.List(pl.Int32()),
        "ranks_text": pl.String(),
        "ranks_truncated": pl.Boolean(),
        "pg_size": pl.Int32(),
        "backend": pl.String(),
    }
)
"""One row per process group each rank's trace declares (``distributedInfo.pg_config``)."""

ITERATIONS_SCHEMA = pl.Schema(
    {
        "rank": pl.Int32(),
        "iteration": pl.Int64(),
        "window": WINDOW,
        "start_ns": pl.Int64(),
        "end_ns": pl.Int64(),
    }
)
"""The iteration windows of each rank, projected onto the GPU (``assign_iterations``)."""

_OVERLAP_COLUMNS: dict[str, pl.DataType] = {
    "step_ns": pl.Int64(),
    "comm_ns": pl.Int64(),
    "compute_ns": pl.Int64(),
    "hidden_comm_ns": pl.Int64(),
    "exposed_comm_ns": pl.Int64(),
    "other_busy_ns": pl.Int64(),
    "idle_ns": pl.Int64(),
    "exposed_comm_ratio": pl.Float64(),
    "hidden_comm_ratio": pl.Float64(),
    "comm_ratio": pl.Float64(),
    "compute_ratio": pl.Float64(),
    "idle_ratio": pl.Float64(),
}

RANK_OVERLAP_SCHEMA = pl.Schema(
    {
        "rank": pl.Int32(),
        "mode": pl.String(),
        "start_ns": pl.Int64(),
        "end_ns": pl.Int64(),
        **_OVERLAP_COLUMNS,
    }
)
"""Exposed vs hidden communication of each rank over its whole trace (``compute_overlap``)."""

ITERATION_OVERLAP_SCHEMA = pl.Schema(
    {
        "rank": pl.Int32(),
        "iteration": pl.Int64(),
        "window": WINDOW,
        "mode": pl.String(),
        "start_ns": pl.Int64(),
        "end_ns": pl.Int64(),
        **_OVERLAP_COLUMNS,
    }
)
"""Exposed vs hidden communication of each rank in each iteration (``compute_overlap``)."""

COLLECTIVE_EXPOSURE_SCHEMA = pl.Schema(
    {
        "rank": pl.Int32(),
        "iteration": pl.Int64(),
        "name": pl.String(),
        "collective": pl.String(),
        "pg_name": pl.String(),
        "start_ns": pl.Int64(),
        "end_ns": pl.Int64(),
        "dur_ns": pl.Int64(),
        "in_bytes": pl.Int64(),
        "out_bytes": pl.Int64(),
        "hidden_ns": pl.Int64(),
        "exposed_ns": pl.Int64(),
        "exposed_ratio": pl.Float64(),
    }
)
"""One row per communication event: how much of it ran under compute (``compute_collective_exposure``)."""

__all__ += ["ITERATION_OVERLAP_SCHEMA"]


def validate(frame: pl.DataFrame, schema: pl.Schema, *, what: str) -> pl.DataFrame:
    """Return ``frame`` with exactly the columns of ``schema``, in order, cast to their dtypes.

    Parameters
    ----------
    frame
        A frame that holds at least the columns of ``schema``.
    schema
        The declared schema.
    what
        What the frame is, for the error message.

    Raises
    ------
    ValueError
        If a column is missing: that is a bug in timeline, not bad input.
    """
    if list(frame.schema.items()) == list(schema.items()):
        return frame  # already exact (most frames timeline builds): no pass over the columns
    missing = [name for name in schema.names() if name not in frame.columns]
    if missing:
        msg = f"{what}: missing columns {missing} (a bug in timeline)"
        raise ValueError(msg)
    return frame.select([pl.col(name).cast(dtype) for name, dtype in schema.items()])
