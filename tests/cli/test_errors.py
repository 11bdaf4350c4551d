"""The command line's error boundary, through the real console script.

Every malformed input gives exit code 2, one ``error:`` line on stderr that names the file, no
traceback, and leaves the input files exactly as they were. Also: ``timeline analyze`` on a real
8-rank trace, its ``--json`` layout, and that it never imports the report libraries.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.cli import PARAM, run_timeline

EPOCH_US = 1_700_000_000_000_000


def _kineto(rank: int | None = None) -> bytes:
    doc: dict[str, Any] = {
        "schemaVersion": 1,
        "traceEvents": [
            {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": EPOCH_US, "dur": 5,
             "args": {"device": 0, "stream": 7}},
        ],
    }  # fmt: skip
    if rank is not None:
        doc["distributedInfo"] = {"rank": rank, "world_size": 2}
    return json.dumps(doc).encode()


def _digests(root: Path) -> dict[str, tuple[str, int]]:
    """Content hash and modification time of every file under ``root``."""
    return {
        str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


# Each case writes its inputs under a folder and returns (arguments, expected start of the
# message after "error: ", strings the line must also contain).
CaseBuilder = Callable[[Path], tuple[list[str], str, list[str]]]


def _single(name: str, data: bytes, start: str) -> CaseBuilder:
    def build(root: Path) -> tuple[list[str], str, list[str]]:
        path = root / name
        path.write_bytes(data)
        return [str(path)], start.format(path=path), [str(path)]

    return build


def _missing_rank(root: Path) -> tuple[list[str], str, list[str]]:
    (root / "a.json").write_bytes(_kineto())
    (root / "b.json").write_bytes(_kineto())
    return [str(root)], f"{root / 'a.json'}: no rank:", ["--rank-regex"]


def _duplicate_rank(root: Path) -> tuple[list[str], str, list[str]]:
    (root / "a.json").write_bytes(_kineto(rank=1))
    (root / "b.json").write_bytes(_kineto(rank=1))
    return [str(root)], f"{root / 'b.json'}: rank 1 is also claimed by {root / 'a.json'}", []


def _empty_directory(root: Path) -> tuple[list[str], str, list[str]]:
    folder = root / "traces"
    folder.mkdir()
    (folder / "notes.txt").write_bytes(b"not a trace")
    return [str(folder)], f"{folder}: directory holds no trace files", []


def _missing_file(root: Path) -> tuple[list[str], str, list[str]]:
    (root / "rank0.json").write_bytes(_kineto())
    missing = root / "rank1.json"
    return [str(root / "rank0.json"), str(missing)], f"{missing}: no such file or directory", []


def _pattern_matching_nothing(root: Path) -> tuple[list[str], str, list[str]]:
    (root / "rank0.json").write_bytes(_kineto())
    pattern = str(root / "*.json.gz")
    return [pattern], f"{pattern}: pattern matches no file", []


def _bad_rank_regex(root: Path) -> tuple[list[str], str, list[str]]:
    # The option is what is wrong, so the line names it rather than a file.
    path = root / "gpu0.json"
    path.write_bytes(_kineto())
    return ["--rank-regex", "gpu(", str(path)], "--rank-regex 'gpu(': not a valid regex", []


def _rank_regex_without_group(root: Path) -> tuple[list[str], str, list[str]]:
    path = root / "gpu0.json"
    path.write_bytes(_kineto())
    return ["--rank-regex", r"gpu\d", str(path)], r"--rank-regex 'gpu\\d': needs one capturing group", []


def _rank_regex_matching_no_file(root: Path) -> tuple[list[str], str, list[str]]:
    path = root / "gpu0.json"
    path.write_bytes(_kineto())
    return ["--rank-regex", r"node(\d+)", str(path)], f"{path}: no rank:", []


def _rank_with_several_files(root: Path) -> tuple[list[str], str, list[str]]:
    (root / "rank0.json").write_bytes(_kineto())
    (root / "rank1.json").write_bytes(_kineto())
    return ["--rank", "3", str(root)], "--rank applies to a single file; 2 files given", []


CASES: dict[str, CaseBuilder] = {
    "not JSON": _single("rank0.json", b"hello world\n", "{path}:1:1: not a trace"),
    "binary": _single("rank0.json", bytes(range(256)), "{path}:1:1: not a trace"),
    "truncated beyond repair": _single(
        "rank0.json",
        b'{"traceEvents": [{"ph": "X", "cat": "kernel", "na',
        "{path}:1:50: input data was truncated",
    ),
    "unrepairable record": _single(
        "rank0.json",
        b'{"traceEvents": [\n  {"ph": "X", "dur": 1, "ts": }\n]}',
        "{path}:2:31: invalid character",
    ),
    "empty file": _single("rank0.json", b"", "{path}:1:1: empty file"),
    "whitespace only": _single("rank0.json", b"  \n\n", "{path}:1:1: empty file"),
    "empty traceEvents": _single("rank0.json", b'{"traceEvents": []}', "{path}: traceEvents holds no events"),
    "object without traceEvents": _single(
        "rank0.json", b'{"schemaVersion": 1, "deviceProperties": []}', "{path}:1:1: no traceEvents array"
    ),
    "JSON number": _single("rank0.json", b"42\n", "{path}:1:1: not a trace"),
    "JSON string": _single("rank0.json", b'"trace"', "{path}:1:1: not a trace"),
    "damaged gzip": _single("rank0.json.gz", b"\x1f\x8b" + b"\x00" * 40, "{path}:1:1: damaged gzip file"),
    "empty gzip": _single("rank0.json.gz", gzip.compress(b""), "{path}:1:1: empty file"),
    "foreign parquet": _single("run.parquet", b"PAR1" + b"\x00" * 16 + b"PAR1", "{path}:"),
    "missing rank": _missing_rank,
    "duplicate rank": _duplicate_rank,
    "directory without traces": _empty_directory,
    "missing file": _missing_file,
    "pattern matching nothing": _pattern_matching_nothing,
    "bad --rank-regex": _bad_rank_regex,
    "--rank-regex without a group": _rank_regex_without_group,
    "--rank-regex matching no file": _rank_regex_matching_no_file,
    "--rank with several files": _rank_with_several_files,
}


@pytest.mark.parametrize("command", ["analyze", "convert"])
@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_gives_one_error_line_and_exit_code_2(tmp_path: Path, case: str, command: str) -> None:
    inputs = tmp_path / "in"
    inputs.mkdir()
    args, start, contains = CASES[case](inputs)
    before = _digests(inputs)
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
    assert _digests(inputs) == before  # inputs untouched
    assert not (tmp_path / "out.parquet").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]  # no partial output left behind


def test_unknown_option_is_a_usage_error(tmp_path: Path) -> None:
    result = run_timeline("analyze", "--no-such-option", str(PARAM), cwd=tmp_path)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "No such option" in result.stderr


def test_warnings_go_to_stderr_and_do_not_fail(tmp_path: Path) -> None:
    path = tmp_path / "rank0.json"
    path.write_bytes(_kineto() + b"\nINFO: trailing log line\n")
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
    assert out.startswith("timeline: 8 file(s), 8 rank(s), measured on gpu")
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
