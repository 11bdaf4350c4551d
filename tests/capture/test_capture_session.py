"""The capture session in one process (no process group): names, distributedInfo, markers, manifest."""

from __future__ import annotations

import gzip
import re
import sys
import warnings
from pathlib import Path
from typing import Any

import msgspec
import pytest

from timeline.capture import (
    MANIFEST_NAME,
    TORCH_MISSING_MESSAGE,
    Capture,
    TorchMissingError,
    capture,
    format_grad_ready_name,
    read_manifest,
)
from timeline.errors import UsageError

with warnings.catch_warnings():
    # CPU wheels of torch warn at import when numpy is absent; capturing never needs numpy.
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)
    torch = pytest.importorskip("torch")


def _read(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rb") as f:
        data: dict[str, Any] = msgspec.json.decode(f.read())
    return data


def _names(trace: dict[str, Any]) -> list[str]:
    return [e["name"] for e in trace["traceEvents"] if e.get("ph") == "X"]


def _steps(trace: dict[str, Any]) -> list[int]:
    return sorted(
        int(n.removeprefix("ProfilerStep#")) for n in _names(trace) if n.startswith("ProfilerStep#")
    )


def _model() -> Any:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))


def _train(cap: Capture, model: Any, steps: int) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    inputs = torch.randn(4, 8)
    for _ in range(steps):
        optimizer.zero_grad()
        model(inputs).sum().backward()
        optimizer.step()
        cap.step()


@pytest.fixture(autouse=True)
def _no_launcher_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RANK", "WORLD_SIZE", "HOROVOD_TIMELINE"):
        monkeypatch.delenv(name, raising=False)


def test_single_process_is_rank_0_of_1(tmp_path: Path) -> None:
    run = tmp_path / "run"
    with capture(run, model=_model()) as cap:
        _train(cap, _model(), 6)
    assert cap.rank == 0
    assert cap.world_size == 1
    assert [p.name for p in cap.files] == ["rank0.2-4.pt.trace.json.gz"]
    assert sorted(p.name for p in run.iterdir()) == [MANIFEST_NAME, "rank0.2-4.pt.trace.json.gz"]
    trace = _read(cap.files[0])
    assert trace["distributedInfo"] == {"backend": None, "rank": 0, "world_size": 1}
    assert _steps(trace) == [2, 3, 4]
    assert trace["record_shapes"] == 1
    assert not any(n.startswith("timeline.grad_ready:") for n in _names(trace))
    manifest = read_manifest(run / MANIFEST_NAME)
    assert manifest is not None
    assert manifest.world_size == 1
    assert manifest.files == ["rank0.2-4.pt.trace.json.gz"]
    assert manifest.link_gbps is None
    assert manifest.backend is None
    assert manifest.horovod_timeline is None
    assert manifest.versions.torch == str(torch.__version__)
    assert [(e.rank, e.device, e.files) for e in manifest.ranks] == [
        (0, "cpu", ["rank0.2-4.pt.trace.json.gz"])
    ]


def test_rank_comes_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    with capture(tmp_path, wait=0, warmup=1, active=2, link_gbps=100) as cap:
        _train(cap, _model(), 4)
    assert [p.name for p in cap.files] == ["rank3.1-2.pt.trace.json.gz"]
    assert _read(cap.files[0])["distributedInfo"] == {"backend": None, "rank": 3, "world_size": 4}
    manifest = read_manifest(tmp_path / MANIFEST_NAME)
    assert manifest is not None
    assert manifest.world_size == 4
    assert manifest.link_gbps == 100.0
    assert [e.rank for e in manifest.ranks] == [3]


def test_repeat_writes_one_file_per_window(tmp_path: Path) -> None:
    with capture(tmp_path, wait=1, warmup=1, active=2, repeat=2) as cap:
        _train(cap, _model(), 10)
    assert [p.name for p in cap.files] == ["rank0.2-3.pt.trace.json.gz", "rank0.6-7.pt.trace.json.gz"]
    assert [_steps(_read(p)) for p in cap.files] == [[2, 3], [6, 7]]


def test_stopping_inside_a_window_writes_it(tmp_path: Path) -> None:
    with capture(tmp_path, wait=1, warmup=1, active=3) as cap:
        _train(cap, _model(), 3)  # steps 0-2 done, step 3 begun when the loop ends
    assert [p.name for p in cap.files] == ["rank0.2-3.pt.trace.json.gz"]
    assert _steps(_read(cap.files[0])) == [2, 3]


def test_grad_ready_markers(tmp_path: Path) -> None:
    model = _model()
    with capture(tmp_path, grad_ready_markers=True, model=model) as cap:
        _train(cap, model, 5)
    names = _names(_read(cap.files[0]))
    expected = [format_grad_ready_name(n, p.numel() * p.element_size()) for n, p in model.named_parameters()]
    assert expected == [
        "timeline.grad_ready:0.weight:512",
        "timeline.grad_ready:0.bias:64",
        "timeline.grad_ready:2.weight:128",
        "timeline.grad_ready:2.bias:8",
    ]
    for marker in expected:
        assert names.count(marker) == 3  # once per recorded step
    # The hooks are gone once the capture stops.
    with torch.profiler.profile() as prof:
        model(torch.randn(4, 8)).sum().backward()
    assert not any(e.name.startswith("timeline.grad_ready:") for e in prof.events())


def test_manifest_records_the_horovod_timeline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOROVOD_TIMELINE", str(tmp_path / "horovod_timeline.json"))
    with capture(tmp_path, wait=0, warmup=1, active=1) as cap:
        _train(cap, _model(), 2)
    manifest = read_manifest(tmp_path / MANIFEST_NAME)
    assert manifest is not None
    assert manifest.horovod_timeline == "horovod_timeline.json"


def test_start_and_stop_without_with(tmp_path: Path) -> None:
    cap = capture(tmp_path, wait=0, warmup=1, active=1)
    with pytest.raises(UsageError, match="not started"):
        cap.step()
    cap.start()
    with pytest.raises(UsageError, match="already started"):
        cap.start()
    _train(cap, _model(), 3)
    cap.stop()
    cap.stop()
    assert [p.name for p in cap.files] == ["rank0.1-1.pt.trace.json.gz"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"active": 0}, "active=0: must be an integer >= 1"),
        ({"wait": -1}, "wait=-1: must be an integer >= 0"),
        ({"repeat": 1.5}, "repeat=1.5: must be an integer >= 0"),
        ({"link_gbps": 0}, "link_gbps=0: must be a positive number"),
        ({"grad_ready_markers": True}, "grad_ready_markers=True: pass the model too"),
    ],
)
def test_bad_options(tmp_path: Path, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=re.escape(message)):
        capture(tmp_path, **kwargs)


def test_run_dir_that_is_a_file(tmp_path: Path) -> None:
    path = tmp_path / "run"
    path.write_text("")
    with pytest.raises(UsageError, match="exists and is not a directory"):
        capture(path)


def test_markers_need_a_module(tmp_path: Path) -> None:
    with (
        pytest.raises(UsageError, match=re.escape("needs a torch.nn.Module")),
        capture(tmp_path, grad_ready_markers=True, model=42),
    ):
        pass


@pytest.mark.parametrize(
    ("rank", "world_size", "message"),
    [("x", "2", "RANK='x': not an integer"), ("2", "2", "RANK=2, WORLD_SIZE=2: the rank must be in")],
)
def test_bad_rank_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rank: str, world_size: str, message: str
) -> None:
    monkeypatch.setenv("RANK", rank)
    monkeypatch.setenv("WORLD_SIZE", world_size)
    with pytest.raises(UsageError, match=re.escape(message)), capture(tmp_path):
        pass


def test_without_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(TorchMissingError) as info, capture(tmp_path):
        pass
    assert str(info.value) == TORCH_MISSING_MESSAGE
    assert isinstance(info.value, ImportError)
