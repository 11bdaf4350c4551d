"""The NCCL sample: one rank of DDP on an H200, torch 2.11 (``sample_traces/make_nccl_sample.py``).

A real CUDA trace of a current profiler: kernels, runtime launches linked by correlation id, memcpy
and memset, gradient-ready markers, ``distributedInfo`` of a one-rank NCCL group. NCCL launches no
kernel for a collective of one rank (the all-reduce of a single process is its own result): the
trace holds DDP's twelve ``nccl:all_reduce`` annotations and no communication on the device. The
figures are checked against a plain reading of the JSON.
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

import timeline
from tests.builders import REPO, interval_length, interval_union

SAMPLE = REPO / "sample_traces" / "ddp_nccl_1rank"
US = 1_000


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    path = next(SAMPLE.glob("*.pt.trace.json.gz"))
    loaded: dict[str, Any] = json.loads(gzip.decompress(path.read_bytes()))
    return loaded


def _ns(document: dict[str, Any], us: float) -> int:
    return int(document["baseTimeNanoseconds"]) + round(us * US)


def _compute_by_step(document: dict[str, Any]) -> dict[int, int]:
    """Per ProfilerStep, the union of the kernels its runtime calls launched (joined by correlation id)."""
    events = document["traceEvents"]
    steps = [
        (int(e["name"].removeprefix("ProfilerStep#")), e["ts"], e["ts"] + e["dur"])
        for e in events
        if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")
    ]
    launched = {
        e["args"]["correlation"]: e["ts"]
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "args" in e  # cuLaunchKernel too
    }
    kernels: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for e in events:
        if e.get("cat") != "kernel":
            continue
        at = launched.get(e["args"].get("correlation"))
        step = next((n for n, start, end in steps if at is not None and start <= at < end), None)
        if step is not None:
            start = _ns(document, e["ts"])  # an event's end: its start plus its duration, each in ns
            kernels[step].append((start, start + round(e["dur"] * US)))
    return {step: interval_length(interval_union(spans)) for step, spans in kernels.items()}


def test_one_gpu_rank_of_a_one_rank_nccl_group(document: dict[str, Any]) -> None:
    run = timeline.analyze(SAMPLE)
    files = run.trace.files.row(0, named=True)
    assert (files["rank"], files["world_size"], files["backend"]) == (0, 1, "nccl")
    assert document["distributedInfo"]["nccl_version"] == "2.28.9"
    assert run.overlap.ranks.get_column("mode").to_list() == ["gpu"]
    assert run.partial is None


def test_no_collective_of_one_rank_runs_on_the_device(document: dict[str, Any]) -> None:
    events = document["traceEvents"]
    annotations = [e for e in events if e.get("name") == "nccl:all_reduce"]
    assert len(annotations) == 12  # 4 buckets x 3 recorded steps
    assert not [e for e in events if e.get("cat") == "kernel" and "nccl" in e["name"].lower()]
    run = timeline.analyze(SAMPLE)
    assert set(run.overlap.iterations.get_column("comm_ns").to_list()) == {0}
    assert run.matched.collectives.height == 0


def test_compute_per_iteration_is_the_union_of_the_kernels_each_step_launched(
    document: dict[str, Any],
) -> None:
    run = timeline.analyze(SAMPLE)
    measured = dict(run.overlap.iterations.select("iteration", "compute_ns").iter_rows())
    assert measured == _compute_by_step(document)


def test_the_diagnosis_finds_a_launch_bound_rank() -> None:
    """Four small layers at batch 256: kernels of a few µs, the device waits for the host's launches.

    The step also ends in ``torch.cuda.synchronize`` and the profiler's step, long gaps no launch
    explains: ``input_stall`` (host synchronisations) is found beside it, each predicted to save
    close to half the step; which of the two ranks first rests on the replay's detail.
    """
    diagnosis = timeline.analyze(SAMPLE).diagnosis
    by_cause = {f.cause: f for f in diagnosis.findings}
    assert {f.cause for f in diagnosis.findings[:2]} == {"launch_bound", "input_stall"}
    launch = by_cause["launch_bound"]
    assert launch.ranks == (0,)
    assert launch.predicted_gain_ratio is not None
    assert launch.predicted_gain_ratio > 0.3
    assert not diagnosis.communication_bound


def test_the_sample_is_small(tmp_path: Path) -> None:
    assert sum(p.stat().st_size for p in SAMPLE.iterdir()) < 100_000
