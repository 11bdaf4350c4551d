"""Compute and exposure of the CPU-only mesh samples, against a plain-Python interval computation.

The reference reads each rank's raw JSON with the standard library and applies the rule of
docs/metrics.md (The sets measured on each rank) in plain Python: communication = the ``gloo:*``
spans; compute = the CPU operators of every thread but gloo's worker threads (threads with
``gloo:*`` spans and no ``ProfilerStep#``), minus the time inside calls into c10d and the ops that
wait (DDP's ``copy_bucket_to_grad``); all clipped to the rank's measured window.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from tests.builders import REPO, raw_sample_traces
from timeline.analysis.overlap import compute_overlap
from timeline.trace import load

SAMPLES = REPO / "sample_traces"
Interval = tuple[int, int]


def union(intervals: list[Interval]) -> list[Interval]:
    merged: list[list[int]] = []
    for start, end in sorted(intervals):
        if end <= start:
            continue
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def minus(left: list[Interval], right: list[Interval]) -> list[Interval]:
    out = []
    for start, end in left:
        pieces = [(start, end)]
        for a, b in right:
            pieces = [p for s, e in pieces for p in ((s, min(e, a)), (max(s, b), e)) if p[0] < p[1]]
        out += pieces
    return union(out)


def clip(intervals: list[Interval], window: Interval) -> list[Interval]:
    return [
        (max(a, window[0]), min(b, window[1])) for a, b in intervals if min(b, window[1]) > max(a, window[0])
    ]


def length(intervals: list[Interval]) -> int:
    return sum(b - a for a, b in union(intervals))


def ns(us: float) -> int:
    """µs to ns with every digit: the whole µs and the fraction apart (µs × 1000 can exceed 2**53)."""
    whole = math.floor(us)
    return whole * 1000 + round((us - whole) * 1000)


def reference(trace: dict[str, Any], window: Interval) -> dict[str, int]:
    """comm, compute and hidden communication of one rank's raw trace inside ``window``."""
    base = int(trace["baseTimeNanoseconds"])
    spans = [
        (e, base + ns(e["ts"]), base + ns(e["ts"]) + round(e["dur"] * 1000))
        for e in trace["traceEvents"]
        if e.get("ph") == "X" and isinstance(e.get("tid"), int)
    ]
    steps = {e["tid"] for e, _, _ in spans if e["name"].startswith("ProfilerStep#")}
    gloo = {e["tid"] for e, _, _ in spans if e["name"].startswith("gloo:")}
    workers = gloo - steps
    comm = union([(a, b) for e, a, b in spans if e["name"].startswith("gloo:")])
    ops = [(e, a, b) for e, a, b in spans if e.get("cat") == "cpu_op" and e["tid"] not in workers]
    not_compute = ("c10d::", "_c10d_functional::", "torch.distributed.ddp.reducer::copy_bucket_to_grad")
    waits = union([(a, b) for e, a, b in ops if e["name"].startswith(not_compute)])
    compute = minus(union([(a, b) for _, a, b in ops]), waits)
    comm, compute = clip(comm, window), clip(compute, window)
    hidden = sum(max(0, min(b, d) - max(a, c)) for a, b in union(comm) for c, d in union(compute))
    return {"comm_ns": length(comm), "compute_ns": length(compute), "hidden_comm_ns": hidden}


@pytest.mark.parametrize("sample", ["pipeline_gloo", "fsdp2_tp_gloo", "expert_gloo", "ddp_gloo"])
def test_cpu_compute_and_hidden_communication_match_a_plain_computation(sample: str) -> None:
    overlap = compute_overlap(load(SAMPLES / sample, workers=1).events)
    traces = raw_sample_traces(sample)
    for row in overlap.ranks.iter_rows(named=True):
        expected = reference(traces[row["rank"]], (row["start_ns"], row["end_ns"]))
        got = {key: row[key] for key in expected}
        assert got == expected, row["rank"]
        assert row["compute_ns"] > 0


def test_the_pipeline_training_thread_computes(tmp_path: Path) -> None:
    del tmp_path
    overlap = compute_overlap(load(SAMPLES / "pipeline_gloo", workers=1).events)
    # every rank computes in every step (before #20 the sends on the training thread made it 0)
    assert overlap.iterations.height == 12
    assert (overlap.iterations["compute_ns"] > 0).all()
