"""The GPU ``launch_bound`` validation's measurement (``experiments.launch_validation``), without a GPU.

The run itself needs a GPU (docs/diagnosis.md, Validation, "launch_bound on one GPU"); here its
measured step is checked against hand-written traces, and the check's errors against a folder that is
not such a run.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import msgspec
import pytest

from experiments.launch_validation import main, measured_step_ns
from tests.builders import gpu_kernel, profiler_step


def _write(path: Path, steps: list[tuple[float, float]]) -> None:
    events = [profiler_step(k, ts, dur) for k, (ts, dur) in enumerate(steps, start=2)]
    events.append(gpu_kernel("k", 1.0, 2.0))  # not a step
    # the GPU's copy of a step (its device work only) is not the step
    events.append({**profiler_step(2, 1.0, 2.0), "cat": "gpu_user_annotation", "pid": 0, "tid": 7})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(msgspec.json.encode({"traceEvents": events})))


def test_the_measured_step_is_the_median_profiler_step_span_over_every_trace(tmp_path: Path) -> None:
    _write(tmp_path / "rank0.2-4.pt.trace.json.gz", [(0, 100.5), (100.5, 300.0), (400.5, 200.25)])
    _write(tmp_path / "rank0.9-10.pt.trace.json.gz", [(1000, 50.0), (1050, 400.0)])
    # spans 100.5, 300, 200.25, 50, 400 µs: the median is 200.25 µs
    assert measured_step_ns(tmp_path) == pytest.approx(200_250.0)


def test_a_folder_without_steps_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "with").mkdir()
    (tmp_path / "removed").mkdir()
    assert main(["check", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert "no ProfilerStep# span" in err
