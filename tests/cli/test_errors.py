"""The command line's error boundary, through the real console script.

Every malformed input gives exit code 2, one ``error:`` line on stderr that names the file, no
traceback, and leaves the input files exactly as they were. Also: ``timeline analyze`` on a real
8-rank trace, its ``--json`` layout, and that it never imports the report libraries.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.builders import BAD_INPUTS, PARAM, file_digests, run_timeline, tiny_kineto


@pytest.mark.parametrize("command", ["analyze", "convert"])
@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_gives_one_error_line_and_exit_code_2(tmp_path: Path, case: str, command: str) -> None:
    inputs = tmp_path / "in"
    inputs.mkdir()
    args, start, contains = BAD_INPUTS[case](inputs)
    before = file_digests(inputs)
    extra = ["-o", str(tmp_path / "out.parquet")] if command == "convert" else []
    result = run_timeline(command, *args, *extra, cwd=tmp_path)

    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {start}"), lines[0]
    for text in contains:
        assert text in lines[0]
    assert file_digests(inputs) == before  # inputs untouched
    assert not (tmp_path / "out.parquet").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]  # no partial output left behind


def test_unknown_option_is_a_usage_error(tmp_path: Path) -> None:
    result = run_timeline("analyze", "--no-such-option", str(PARAM), cwd=tmp_path)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("error: no such option")  # #19: one lower-case error: line


def test_warnings_go_to_stderr_and_do_not_fail(tmp_path: Path) -> None:
    path = tmp_path / "rank0.json"
    path.write_bytes(tiny_kineto() + b"\nINFO: trailing log line\n")
    result = run_timeline("analyze", "--json", path, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        f"warning: {path}: repaired malformed JSON: bytes after the end of the document dropped (24)"
    ]
    summary = json.loads(result.stdout)
    assert summary["warnings"] == [result.stderr.strip().removeprefix("warning: ")]


# --- analyze on the real 8-rank PARAM trace -----------------------------------------------------


@pytest.fixture(scope="module")
def param_json() -> dict[str, Any]:
    """``timeline analyze --json`` on the PARAM folder, parsed."""
    result = run_timeline("analyze", "--json", PARAM)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    summary: dict[str, Any] = json.loads(result.stdout)
    return summary


def test_analyze_prints_the_rank_table_and_the_worst_iteration() -> None:
    result = run_timeline("analyze", PARAM)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    out = result.stdout
    assert out.startswith("verdict: ")  # #21: the verdict and the top findings come first
    assert "timeline: 8 files, 8 ranks, measured on gpu" in out.splitlines()
    assert out.index("timeline: 8 files") < out.index("Per rank (whole trace)")
    assert "Per rank (whole trace)" in out
    assert "Per iteration" in out
    rank_rows = [line for line in out.splitlines() if line.startswith("│") and "gpu" in line]
    assert [row.split("│")[1].strip() for row in rank_rows] == [str(r) for r in range(8)]
    worst = [line for line in out.splitlines() if line.startswith("worst:")]
    assert len(worst) == 1
    assert worst[0].startswith("worst: rank 1, iteration 10: ")
    assert "Top exposed collectives" in out


def test_analyze_json_layout(param_json: dict[str, Any]) -> None:
    assert {"ranks", "iterations"} <= set(param_json)
    ranks = param_json["ranks"]
    assert [row["rank"] for row in ranks] == list(range(8))
    for row in ranks:
        assert {"rank", "comm_ns", "compute_ns", "hidden_comm_ns", "exposed_comm_ns"} <= set(row)
        assert row["hidden_comm_ns"] + row["exposed_comm_ns"] == row["comm_ns"]
        assert row["comm_ns"] > 0
        assert row["compute_ns"] > 0
    iterations = param_json["iterations"]
    # One ProfilerStep#10 per rank.
    assert [(row["rank"], row["iteration"]) for row in iterations] == [(r, 10) for r in range(8)]
    for row in iterations:
        assert {
            "rank",
            "iteration",
            "step_ns",
            "comm_ns",
            "compute_ns",
            "hidden_comm_ns",
            "exposed_comm_ns",
        } <= set(row)
        assert row["hidden_comm_ns"] + row["exposed_comm_ns"] == row["comm_ns"]
        assert 0 < row["comm_ns"] <= row["step_ns"]


def test_analyze_json_agrees_with_the_raw_traces(param_json: dict[str, Any]) -> None:
    # The communication time of each rank is the union of its NCCL kernels' intervals, computed
    # here from the raw JSON.
    for row, path in zip(param_json["ranks"], sorted(PARAM.glob("*.json.gz")), strict=True):
        events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
        spans = sorted(
            (e["ts"] * 1000, (e["ts"] + e["dur"]) * 1000)
            for e in events
            if e.get("ph") == "X" and e.get("cat") == "kernel" and e["name"].startswith("nccl")
        )
        union, end = 0, -1
        for start, stop in spans:
            if stop > end:
                union += stop - max(start, end)
                end = stop
        assert row["comm_ns"] == union, row["rank"]


def test_analyze_never_imports_the_report_libraries() -> None:
    # Records every attempt to import bokeh or holoviews, even one that would fail or be caught.
    code = f"""
import sys
attempts = []
class Recorder:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("bokeh", "holoviews"):
            attempts.append(name)
        return None
sys.meta_path.insert(0, Recorder())
from typer.testing import CliRunner
from cli.main import app
result = CliRunner().invoke(app, ["analyze", {str(PARAM)!r}])
print(result.exit_code)
print(sorted(set(attempts) | {{m for m in sys.modules if m.split(".")[0] in ("bokeh", "holoviews")}}))
"""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["0", "[]"]
