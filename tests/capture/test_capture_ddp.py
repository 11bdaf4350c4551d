"""A real 2-process gloo DDP job captured into a run folder, checked file by file.

Each parametrised run spawns two ranks (about 8 s on 2 cores).
"""

from __future__ import annotations

import gzip
import re
import socket
import warnings
from pathlib import Path
from typing import Any

import msgspec
import pytest

from timeline.capture import MANIFEST_NAME, DemoResult, DemoSettings, read_manifest, run_demo

with warnings.catch_warnings():
    # CPU wheels of torch warn at import when numpy is absent; capturing never needs numpy.
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)
    torch = pytest.importorskip("torch")

if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("torch was built without gloo", allow_module_level=True)

_NAME = re.compile(r"rank(\d+)\.(\d+)-(\d+)\.pt\.trace\.json\.gz")
_PARAMETERS = 10  # 5 Linear layers of the demo MLP: weight + bias each


def _read(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rb") as f:
        data: dict[str, Any] = msgspec.json.decode(f.read())
    return data


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "grad_ready_markers"])
def demo(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[DemoResult, bool]:
    markers: bool = request.param
    out = tmp_path_factory.mktemp("run")
    settings = DemoSettings(ranks=2, steps=6, grad_ready_markers=markers, timeout_s=180)
    return run_demo(out, settings=settings), markers


def test_files_are_named_by_rank_and_steps(demo: tuple[DemoResult, bool]) -> None:
    result, _ = demo
    assert [p.name for p in result.files] == ["rank0.2-4.pt.trace.json.gz", "rank1.2-4.pt.trace.json.gz"]
    assert sorted(p.name for p in result.run_dir.iterdir()) == [
        MANIFEST_NAME,
        "rank0.2-4.pt.trace.json.gz",
        "rank1.2-4.pt.trace.json.gz",
    ]
    assert len(result.step_times_s) == 6


def test_each_trace_names_its_rank_steps_and_collectives(demo: tuple[DemoResult, bool]) -> None:
    result, markers = demo
    for path in result.files:
        match = _NAME.fullmatch(path.name)
        assert match is not None
        trace = _read(path)
        info = trace["distributedInfo"]
        assert info["rank"] == int(match[1])
        assert info["world_size"] == 2
        assert info["backend"] == "gloo"
        events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
        steps = sorted(e["name"] for e in events if e["name"].startswith("ProfilerStep#"))
        assert steps == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
        # DDP with bucket_cap_mb=1 sends the 3.6 MB of gradients in 4 buckets, every step.
        all_reduces = [e for e in events if e["name"] == "gloo:all_reduce"]
        assert len(all_reduces) >= 2 * 3
        assert all(e["args"]["Input Dims"] for e in all_reduces)  # record_shapes: message sizes
        ready = [e["name"] for e in events if e["name"].startswith("timeline.grad_ready:")]
        if markers:
            assert len(ready) == _PARAMETERS * 3
            assert "timeline.grad_ready:0.weight:524288" in ready  # Linear(256, 512), float32
            assert all(not name.startswith("timeline.grad_ready:module.") for name in ready)
        else:
            assert ready == []


def test_manifest(demo: tuple[DemoResult, bool]) -> None:
    result, markers = demo
    manifest = read_manifest(result.run_dir / MANIFEST_NAME)
    assert manifest is not None
    assert manifest.world_size == 2
    assert manifest.backend == "gloo"
    assert manifest.grad_ready_markers is markers
    assert manifest.record_shapes is True
    assert manifest.with_stack is False
    assert (manifest.schedule.wait, manifest.schedule.warmup, manifest.schedule.active) == (1, 1, 3)
    assert manifest.files == [p.name for p in result.files]
    assert [e.rank for e in manifest.ranks] == [0, 1]
    assert {e.host for e in manifest.ranks} == {socket.gethostname()}
    assert [e.files for e in manifest.ranks] == [
        ["rank0.2-4.pt.trace.json.gz"],
        ["rank1.2-4.pt.trace.json.gz"],
    ]
    assert manifest.versions.torch == str(torch.__version__)
    assert manifest.versions.nccl is None


def test_the_run_folder_loads_and_analyses(demo: tuple[DemoResult, bool]) -> None:
    trace_module = pytest.importorskip("timeline.trace")
    overlap_module = pytest.importorskip("timeline.analysis.overlap")
    result, _ = demo
    trace = trace_module.load([result.run_dir], workers=1)
    assert trace.ranks == [0, 1]
    overlap = overlap_module.compute_overlap(trace.events)
    assert sorted(overlap.iterations.get_column("iteration").unique().to_list()) == [2, 3, 4]
    assert overlap.collectives.height >= 2 * 2 * 3
