"""Small builders of valid canonical frames for unit tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from timeline.schema import EVENTS_SCHEMA, validate

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
TRACES = SHARED / "traces"
REPO = Path(__file__).resolve().parents[1]


def gpu(kind: str, start: int, end: int, *, rank: int = 0, stream: int = 7, **extra: Any) -> dict[str, Any]:
    """A GPU activity on device 0: kind 'compute', 'communication', 'memcpy' or 'memset'."""
    return {
        "rank": rank,
        "kind": kind,
        "start_ns": start,
        "end_ns": end,
        "device": 0,
        "stream": stream,
        "pid": 0,
        "tid": stream,
        "cat": "kernel",
        **extra,
    }


def cpu(kind: str, start: int, end: int, *, rank: int = 0, tid: int = 1, **extra: Any) -> dict[str, Any]:
    """A CPU event on thread ``tid`` of process 100."""
    return {
        "rank": rank,
        "kind": kind,
        "start_ns": start,
        "end_ns": end,
        "pid": 100,
        "tid": tid,
        "cat": "cpu_op",
        **extra,
    }


def step(n: int, start: int, end: int, *, rank: int = 0) -> dict[str, Any]:
    """A ``ProfilerStep#n`` annotation on the main thread."""
    return cpu("annotation", start, end, rank=rank, name=f"ProfilerStep#{n}", cat="user_annotation")


def launch(correlation: int, at: int, *, rank: int = 0) -> dict[str, Any]:
    """A runtime kernel launch at ``at`` with a correlation id."""
    return cpu(
        "runtime", at, at + 1, rank=rank, name="cudaLaunchKernel", cat="cuda_runtime", correlation=correlation
    )


def make_events(rows: list[dict[str, Any]]) -> pl.DataFrame:
    """Return a canonical events frame from partial rows (missing columns are null)."""
    filled = []
    for row in rows:
        full: dict[str, Any] = dict.fromkeys(EVENTS_SCHEMA.names())
        full.update({"source": "kineto", "name": row.get("name", row["kind"])})
        full.update(row)
        full["dur_ns"] = full["end_ns"] - full["start_ns"]
        filled.append(full)
    frame = pl.DataFrame(
        filled,
        schema_overrides={"kind": pl.String, "source": pl.String, "name": pl.String, "cat": pl.String},
        infer_schema_length=None,
    )
    for name in EVENTS_SCHEMA.names():
        if name not in frame.columns:
            frame = frame.with_columns(pl.lit(None).alias(name))
    return validate(frame, EVENTS_SCHEMA, what="test events")
