"""Horovod timelines whose results cannot be known or would be wrong (issue #19).

- exposure: a Horovod timeline has no compute events, so ``timeline analyze`` says "unknown" (null in
  JSON), never "0 ns exposed";
- a hierarchical all-reduce (``NCCL_REDUCESCATTER``, ``MPI_ALLREDUCE``, ``NCCL_ALLGATHER`` inside one
  tensor's ``ALLREDUCE``) is one call, not three;
- a timeline SageMaker Debugger (smdebug) rewrote (ticks lasting 812,355 s, pids renumbered) is refused
  with an error that says what it is, never read as a Horovod timeline.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tests.builders import EPOCH_US, TRACES, run_timeline
from timeline import load
from timeline.errors import TraceFormatError
from timeline.importers.horovod import parse_horovod
from timeline.importers.result import ImportOptions

HIERARCHICAL = (
    TRACES / "horovod" / "dexhunter_allreduce-experiments" / "horovod-results__32gpu__100g-32-h-4.json"
)
SMDEBUG_TEST_RESOURCE = TRACES / "horovod" / "smdebug__horovod_timeline_small.json"


def hierarchical_timeline(path: Path) -> Path:
    """Two tensors all-reduced hierarchically by 2 ranks, v0.21 layout (µs since the header).

    Tensor 1 (4 MB): reduce-scatter [100, 300), host all-reduce [310, 710), all-gather [720, 920).
    Tensor 2 (4 MB): the same 10 ms later. Each wire phase carries the tensor's bytes.
    """
    records: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": 0, "args": {"start_time_since_epoch_in_micros": EPOCH_US}}
    ]
    for pid in (1, 2):
        t = (pid - 1) * 10_000
        records += [
            {"name": "process_name", "ph": "M", "pid": pid, "args": {"name": f"allreduce.w{pid}"}},
            {"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": t, "pid": pid},
            {"ph": "X", "name": "0", "ts": t, "pid": pid, "dur": 0},
            {"ph": "X", "name": "1", "ts": t + 50, "pid": pid, "dur": 0},
            {"ph": "E", "ts": t + 60, "pid": pid},
            {"ph": "B", "name": "ALLREDUCE", "ts": t + 90, "pid": pid},
            {"ph": "B", "name": "NCCL_REDUCESCATTER", "ts": t + 100, "pid": pid},
            {"ph": "E", "ts": t + 300, "pid": pid},
            {"ph": "B", "name": "MEMCPY_IN_HOST_BUFFER", "ts": t + 300, "pid": pid},
            {"ph": "E", "ts": t + 310, "pid": pid},
            {"ph": "B", "name": "MPI_ALLREDUCE", "ts": t + 310, "pid": pid},
            {"ph": "E", "ts": t + 710, "pid": pid},
            {"ph": "B", "name": "MEMCPY_OUT_HOST_BUFFER", "ts": t + 710, "pid": pid},
            {"ph": "E", "ts": t + 720, "pid": pid},
            {"ph": "B", "name": "NCCL_ALLGATHER", "ts": t + 720, "pid": pid},
            {"ph": "E", "ts": t + 920, "pid": pid},
            {"ph": "E", "ts": t + 930, "pid": pid, "args": {"dtype": "float32", "shape": "[1000000]"}},
        ]
    path.write_text(json.dumps(records))
    return path


# --- exposure is unknown, and a hierarchical all-reduce is one call ---------------------------------------


def test_top_collectives_exposure_is_unknown_and_hierarchical_phases_are_one_call(tmp_path: Path) -> None:
    path = hierarchical_timeline(tmp_path / "timeline.json")
    result = run_timeline("analyze", path, "--json")
    assert result.returncode == 0, result.stderr
    summary = msgspec.json.decode(result.stdout)
    assert summary["ranks"][0]["exposed_comm_ns"] is None  # the per-rank table: unknown
    (top,) = summary["top_collectives"]
    assert (top["collective"], top["in_bytes"]) == ("all_reduce", 4_000_000)
    assert top["calls"] == 2  # two tensors' all-reduces, each of three wire phases
    assert top["dur_ns"] == 2 * (200 + 400 + 200) * 1_000  # the wire phases' time
    assert top["exposed_ns"] is None
    assert top["exposed_ratio"] is None


def test_top_collectives_table_prints_unknown_and_why(tmp_path: Path) -> None:
    result = run_timeline("analyze", hierarchical_timeline(tmp_path / "timeline.json"))
    assert result.returncode == 0, result.stderr
    row = next(line for line in result.stdout.splitlines() if line.startswith("│") and "all_reduce" in line)
    cells = [cell.strip() for cell in row.strip("│ ").split("│")]
    assert cells == ["all_reduce", "-", "4,000,000", "2", "1", "1.60 ms", "unknown", "unknown"]
    assert "0 ns" not in row
    assert "exposed unknown: a Horovod timeline has no compute events" in " ".join(result.stdout.split())


def test_real_hierarchical_timeline_counts_one_call_per_tensor() -> None:
    result = run_timeline("analyze", HIERARCHICAL, "--json", "--top", "50")
    assert result.returncode == 0, result.stderr
    top = msgspec.json.decode(result.stdout)["top_collectives"]
    # 29 tensors of distinct sizes, each all-reduced once: NCCL_REDUCESCATTER + MPI_ALLREDUCE +
    # NCCL_ALLGATHER for the 27 large ones (the others by NCCL_REDUCE/NCCL_BCAST + MPI_ALLREDUCE).
    assert len(top) == 29
    assert {row["calls"] for row in top} == {1}
    assert {row["exposed_ns"] for row in top} == {None}


# --- timelines SageMaker Debugger rewrote -----------------------------------------------------------------

# The layout of smdebug's HvdTraceFileRotation + TimelineFileWriter (awslabs/sagemaker-debugger,
# tests/profiler/resources/horovod_timeline_traces/...): ts relative to a header, ticks given
# "now - ts" as their duration, E records named "", CYCLE_START with a pid, pids renumbered.
_HEADER = {"start_time_since_epoch_in_micros": 1592860687560103}
SMDEBUG_REWRITE = [
    {"name": "process_name", "ph": "M", "pid": 0, "args": _HEADER},
    {"name": "process_sort_index", "ph": "M", "pid": 0, "args": {"sort_index": 0}},
    {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "Adam/HorovodAllreduce_dense_1_0"}},
    {"name": "NEGOTIATE_ALLREDUCE", "pid": 1, "ph": "B", "ts": 8440608},
    {"name": "4", "pid": 1, "ph": "X", "ts": 8440610, "dur": 812355471858},
    {"name": "process_name", "ph": "M", "pid": 2, "args": {"name": "Adam/HorovodAllreduce_dense_0"}},
    {"name": "NEGOTIATE_ALLREDUCE", "pid": 2, "ph": "B", "ts": 8440614},
    {"name": "4", "pid": 2, "ph": "X", "ts": 8440616, "dur": 812355471927},
    {"name": "CYCLE_START", "pid": 2, "ph": "i", "ts": 8491490, "s": "g"},
    {"name": "", "pid": 2, "ph": "E", "ts": 8781513},
    {"name": "5", "pid": 2, "ph": "X", "ts": 8781514, "dur": 812355131544},
    {"name": "", "pid": 2, "ph": "E", "ts": 8781515},
]  # fmt: skip


def write_lines(path: Path, records: list[dict[str, Any]]) -> Path:
    """Write records as smdebug does: ``[``, one record a line, ``]``."""
    path.write_text("[\n" + ",\n".join(json.dumps(r) for r in records) + "\n]\n")
    return path


def test_smdebug_rewrite_is_refused_with_what_it_is(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "1593673051473228_88359-host_horovod_timeline.json", SMDEBUG_REWRITE)
    with pytest.raises(TraceFormatError) as caught:
        parse_horovod(path.read_bytes(), source=path.name, options=ImportOptions())
    message = str(caught.value)
    assert message.startswith(f"{path.name}: a Horovod timeline rewritten by SageMaker Debugger (smdebug)")
    assert "3 negotiation ticks last up to 812,355 s (Horovod writes 0)" in message
    assert message.endswith("give the file HOROVOD_TIMELINE names")


def test_smdebug_rewrite_without_ticks_is_refused(tmp_path: Path) -> None:
    # Response-cache hits leave no ticks: the unnamed-by-Horovod E records and pid'd markers tell.
    records = [r for r in SMDEBUG_REWRITE if r["ph"] != "X"]
    path = write_lines(tmp_path / "rotated.json", records)
    with pytest.raises(TraceFormatError, match=r'2 `E` records named "" and 1 CYCLE_START marker with a pid'):
        parse_horovod(path.read_bytes(), source=path.name, options=ImportOptions())


@pytest.mark.parametrize("command", ["analyze", "collectives"])
def test_smdebug_rewrite_exits_2_with_one_error_line(tmp_path: Path, command: str) -> None:
    path = write_lines(tmp_path / "rewritten.json", SMDEBUG_REWRITE)
    before = path.read_bytes()
    result = run_timeline(command, path)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {path}: a Horovod timeline rewritten by SageMaker Debugger")
    assert "Traceback" not in result.stderr
    assert path.read_bytes() == before  # nothing the user gave is modified


def test_the_horovod_excerpt_smdebug_tests_with_is_still_read() -> None:
    # smdebug's own test input is Horovod's layout (ticks of dur 0, E without a name): not a rewrite.
    trace = load(SMDEBUG_TEST_RESOURCE, workers=1)
    assert trace.files["format"].to_list() == ["horovod"]
