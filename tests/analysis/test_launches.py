"""Launch-bound device gaps (:func:`~timeline.analysis.launches.launch_gap_intervals`) against a reference.

Random GPU activities and runtime launches on two GPU ranks and one CPU rank, with correlations that
repeat, that no launch has, and missing: every short gap whose closing activity's launch (the
earliest-ending runtime call of its correlation) ended after the gap began.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from tests.builders import cpu, gpu, launch, make_events
from timeline.analysis.launches import launch_gap_intervals


def _rows(seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    for rank in (0, 1):
        at = 0
        for _ in range(60):
            at += rng.randrange(0, 40_000)
            length = rng.randrange(0, 30_000)
            correlation = rng.choice([None, rng.randrange(50)])
            kind = rng.choice(["compute", "communication", "memcpy", "memset"])
            rows.append(gpu(kind, at, at + length, rank=rank, correlation=correlation))
        rows.extend(launch(rng.randrange(60), rng.randrange(0, 2_400_000), rank=rank) for _ in range(50))
    rows += [cpu("compute", 0, 1_000, rank=2), launch(3, 10, rank=2)]
    return rows


def _reference(rows: list[dict[str, Any]], max_gap_ns: int) -> list[tuple[int, int, int]]:
    launched: dict[tuple[int, int], int] = {}
    for r in rows:
        if r["kind"] == "runtime" and r.get("correlation") is not None:
            key = (r["rank"], r["correlation"])
            launched[key] = min(launched.get(key, r["end_ns"]), r["end_ns"])
    gaps = []
    for rank in (0, 1):
        device = sorted(
            (r["start_ns"], r["end_ns"], r.get("correlation"))
            for r in rows
            if r["rank"] == rank and r.get("device") is not None and r["end_ns"] > r["start_ns"]
        )
        busy: int | None = None
        for start, end, correlation in device:
            if busy is not None and start > busy and start - busy <= max_gap_ns:
                at = launched.get((rank, correlation)) if correlation is not None else None
                if at is not None and at > busy:
                    gaps.append((rank, busy, start))
            busy = end if busy is None else max(busy, end)
    return sorted(gaps)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("max_gap_ns", [100_000, 5_000])
def test_launch_gaps_are_the_short_gaps_closed_by_a_late_launch(seed: int, max_gap_ns: int) -> None:
    rows = _rows(seed)
    got = launch_gap_intervals(make_events(rows), max_gap_ns=max_gap_ns)
    assert list(got.iter_rows()) == _reference(rows, max_gap_ns)
