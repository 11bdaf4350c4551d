"""Builders of synthetic runs for the budget tests: frames with chosen metric values, and trace files.

A run is described by the exposed communication of each rank's iterations, in nanoseconds. Every
iteration is a 1000 ns ``ProfilerStep`` with a compute kernel over ``[10, 600)`` and an all-reduce
over ``[500, 600 + exposed)`` (``exposed < 400``), so ``step_ns = 1000``, ``hidden_comm_ns = 100``
and ``exposed_comm_ratio = exposed / 1000`` exactly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from tests.builders import frames_of, gpu, launch, make_events, step
from timeline.budgets import MetricFrames
from timeline.schema import FILES_SCHEMA, ITERATION_OVERLAP_SCHEMA, RANK_OVERLAP_SCHEMA
from timeline.trace import Trace

STEP_NS = 1000


def run_events(
    exposed: dict[int, list[int]], *, collective: str = "all_reduce", pg_name: str = "0"
) -> pl.DataFrame:
    """Return the events of a run with ``exposed[rank][k]`` ns of exposed communication in iteration k."""
    rows: list[dict[str, Any]] = []
    correlation = 0
    for rank, per_iteration in exposed.items():
        for k, amount in enumerate(per_iteration):
            assert 0 <= amount < 400, "the builder keeps every step at 1000 ns"
            t = k * STEP_NS
            rows.append(step(k, t, t + STEP_NS, rank=rank))
            correlation += 1
            rows += [
                launch(correlation, t + 1, rank=rank),
                gpu("compute", t + 10, t + 600, rank=rank, correlation=correlation),
            ]
            correlation += 1
            rows += [
                launch(correlation, t + 2, rank=rank),
                gpu(
                    "communication",
                    t + 500,
                    t + 600 + amount,
                    rank=rank,
                    stream=9,
                    correlation=correlation,
                    collective=collective,
                    pg_name=pg_name,
                    name="ncclDevKernel_AllReduce",
                ),
            ]
    return make_events(rows)


def run_frames(exposed: dict[int, list[int]], *, label: str = "run", **options: Any) -> MetricFrames:
    """Return the analysed frames of :func:`run_events`."""
    return frames_of(run_events(exposed, **options), label=label)


def write_run(path: Path, exposed: dict[int, list[int]], **options: Any) -> Path:
    """Write :func:`run_events` as a Parquet trace that every command reads; return ``path``."""
    events = run_events(exposed, **options)
    files = pl.DataFrame(
        [
            {
                "rank": rank,
                "path": f"rank{rank}.json",
                "format": "kineto",
                "rank_from": "distributedInfo",
                "world_size": len(exposed),
                "backend": "nccl",
                "host": "test",
                "clock": "epoch",
                "events": events.filter(pl.col("rank") == rank).height,
            }
            for rank in exposed
        ],
        schema=FILES_SCHEMA,
    )
    Trace(events=events, files=files).write_parquet(path)
    return path


def iteration_frames(
    values: dict[int, list[float]],
    *,
    column: str = "exposed_comm_ratio",
    label: str = "run",
    mode: str = "gpu",
) -> MetricFrames:
    """Return frames whose iteration rows carry ``values[rank][k]`` in ``column`` (other metrics null)."""
    rows = []
    for rank, per_iteration in values.items():
        for k, value in enumerate(per_iteration):
            row: dict[str, Any] = dict.fromkeys(ITERATION_OVERLAP_SCHEMA.names())
            row.update(
                rank=rank,
                iteration=k,
                window="profiler_step",
                mode=mode,
                start_ns=k * STEP_NS,
                end_ns=(k + 1) * STEP_NS,
                step_ns=STEP_NS,
            )
            row[column] = value
            rows.append(row)
    iterations = pl.DataFrame(rows, schema=ITERATION_OVERLAP_SCHEMA)
    return MetricFrames(label=label, iterations=iterations, ranks=pl.DataFrame(schema=RANK_OVERLAP_SCHEMA))
