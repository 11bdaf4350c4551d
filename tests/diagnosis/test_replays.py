"""The diagnosis' replays: a cut before a window takes only the rank's idle time just before it.

Times in µs; each expected time is worked out by hand from the rows written here.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from tests.builders import cpu, cpu_all_reduce_call, make_events, step
from timeline.analysis.overlap import compute_overlap
from timeline.diagnosis.diagnosis import diagnosis_graph
from timeline.diagnosis.replays import Replayer, WindowCut
from timeline.schema import FILES_SCHEMA
from timeline.trace import Trace

US = 1_000


def _rank(rank: int, *, gap: int) -> list[dict[str, Any]]:
    """Two steps: [0, 60) (compute [0, 30), an all-reduce [30, 50), the update [50, 60)), then ``gap``
    µs of nothing, then the same again from ``60 + gap``."""
    rows: list[dict[str, Any]] = []
    for n, t0 in ((1, 0), (2, 60 + gap)):
        rows += [
            step(n, t0 * US, (t0 + 60) * US, rank=rank),
            cpu("cpu_op", t0 * US, (t0 + 30) * US, rank=rank, name="forward"),
            *cpu_all_reduce_call((t0 + 30) * US, ((t0 + 30) * US, (t0 + 50) * US), rank=rank),
            cpu("cpu_op", (t0 + 50) * US, (t0 + 60) * US, rank=rank, name="update"),
        ]
    return rows


def _replayer(gap: int) -> Replayer:
    events = make_events(_rank(0, gap=gap) + _rank(1, gap=gap))
    files = pl.DataFrame(
        {
            "rank": [0, 1],
            "path": ["rank0.json", "rank1.json"],
            "format": ["kineto"] * 2,
            "rank_from": ["distributedInfo"] * 2,
            "world_size": [2] * 2,
            "backend": ["gloo"] * 2,
            "host": [None] * 2,
            "clock": [None] * 2,
            "events": [1] * 2,
        },
        schema=FILES_SCHEMA,
    )
    trace = Trace(events=events, files=files)
    overlap = compute_overlap(events)
    return Replayer(diagnosis_graph(trace, overlap), [1, 2], step_ns=60 * US)


def _window(graph_windows: pl.DataFrame, rank: int, iteration: int) -> tuple[int, int]:
    rows = graph_windows.filter((pl.col("rank") == rank) & (pl.col("iteration") == iteration))
    return rows.item(0, "start_ns"), rows.item(0, "end_ns")


def test_a_cut_before_a_window_takes_only_the_idle_time_before_it() -> None:
    replayer = _replayer(gap=5)
    window = replayer.window_of(0, 2)
    assert window is not None
    # 50 µs asked before step 2, which starts at 65: only the 5 µs since the update ended at 60 are idle
    contracted = replayer.contracted([WindowCut(rank=0, window_id=window, idle_ns=0, before_ns=50 * US)])
    assert _window(contracted.windows, 0, 2) == (60 * US, 120 * US)
    assert _window(contracted.windows, 0, 1) == (0, 60 * US)  # step 1 untouched


def test_a_cut_before_a_window_right_after_another_removes_nothing() -> None:
    replayer = _replayer(gap=0)
    window = replayer.window_of(0, 2)
    assert window is not None
    contracted = replayer.contracted([WindowCut(rank=0, window_id=window, idle_ns=0, before_ns=50 * US)])
    assert contracted is replayer.graph  # step 1's update ends where step 2 starts: no idle to take
