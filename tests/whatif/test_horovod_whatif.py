"""``timeline whatif`` on a Horovod timeline alone (issue #22): the derived graph, its replay, the CLI.

Numbers are checked against hand computations (a timeline built here) and against the raw JSON of the
real timelines in ``../shared/traces/horovod`` (read here with ``json``, not with the importer).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tests.builders import TRACES, run_timeline
from timeline import load
from timeline.analysis.horovod_phases import compute_fused_batches
from timeline.results.whatif import WhatIfReport, build_whatif_report
from timeline.whatif import Scenario, replay, self_replay, trace_graph
from timeline.whatif.settings import Settings

HOROVOD = TRACES / "horovod"
DEXHUNTER = HOROVOD / "dexhunter_allreduce-experiments"
TF_LOOP = HOROVOD / "andrewor14_tf-logs__horovod_timeline__e2205b98.json"
SMDEBUG = HOROVOD / "smdebug__horovod_timeline_small.json"
needs_shared = pytest.mark.skipif(not HOROVOD.is_dir(), reason="../shared/traces/horovod not present")


# --- a timeline built here, replayed by hand -------------------------------------------------------


def _tensor_records(
    pid: int, o: int, times: tuple[int, ...], ticks: tuple[int, int], shape: str
) -> list[Any]:
    """One negotiation and one all-reduce of tensor ``pid`` at offset ``o`` µs."""
    neg, neg_end, op, queue_end, wire_end, op_end = times
    return [
        {"name": "NEGOTIATE_ALLREDUCE", "ph": "B", "ts": o + neg, "pid": pid},
        {"name": "0", "ph": "X", "ts": o + ticks[0], "dur": 0, "pid": pid},
        {"name": "1", "ph": "X", "ts": o + ticks[1], "dur": 0, "pid": pid},
        {"ph": "E", "ts": o + neg_end, "pid": pid},
        {"name": "ALLREDUCE", "ph": "B", "ts": o + op, "pid": pid},
        {"name": "QUEUE", "ph": "B", "ts": o + op, "pid": pid},
        {"ph": "E", "ts": o + queue_end, "pid": pid},
        {"name": "NCCL_ALLREDUCE", "ph": "B", "ts": o + queue_end, "pid": pid},
        {"ph": "E", "ts": o + wire_end, "pid": pid},
        {"ph": "E", "ts": o + op_end, "pid": pid, "args": {"dtype": "float32", "shape": shape}},
    ]


def _loop_timeline(path: Path, iterations: int = 3) -> Path:
    """Two tensors all-reduced once per iteration of 1,000 µs, by two ranks (v0.15 layout).

    Iteration at offset o: tensor a negotiated o+100..o+120 (ticks o+100, o+110), all-reduced o+130..o+350
    (queue to o+140, wire o+140..o+340); tensor b negotiated o+400..o+510 (ticks o+400, o+500), all-reduced
    o+520..o+740 (wire o+530..o+730).
    """
    records: list[Any] = [
        {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "allreduce.a"}},
        {"name": "process_name", "ph": "M", "pid": 2, "args": {"name": "allreduce.b"}},
    ]
    for k in range(iterations):
        o = 1000 * k
        records += _tensor_records(1, o, (100, 120, 130, 140, 340, 350), (100, 110), "[100]")
        records += _tensor_records(2, o, (400, 510, 520, 530, 730, 740), (400, 500), "[200]")
    path.write_text("[\n" + "".join(json.dumps(r) + ",\n" for r in records))
    return path


def test_horovod_timeline_alone_is_replayed(tmp_path: Path) -> None:
    """Refused on main before #22; now the graph is derived and the self-replay is exact."""
    graph = trace_graph(load(_loop_timeline(tmp_path / "timeline.json")), link_gbps=10)
    assert graph.modes == {0: "horovod"}
    assert graph.world_size == 2
    assert graph.gradient_source == "horovod"
    assert [(o.ready_ns, o.start_ns, o.end_ns, o.nbytes) for o in graph.ops][:2] == [
        (110_000, 140_000, 350_000, 400),
        (500_000, 530_000, 740_000, 800),
    ]
    assert [o.launch_delay_ns for o in graph.ops][:2] == [30_000, 30_000]
    windows = graph.windows.select("iteration", "start_ns", "end_ns").rows()
    assert windows == [(0, 100_000, 1_100_000), (1, 1_100_000, 2_100_000)]
    compute = graph.compute.select("start_ns", "end_ns").rows()
    assert compute[:4] == [
        (100_000, 110_000),
        (350_000, 500_000),
        (740_000, 1_110_000),
        (1_350_000, 1_500_000),
    ]
    assert compute[-1] == (2_350_000, 2_500_000)
    check = self_replay(graph)
    assert check.measured_ns == 1_000_000
    assert check.iteration_ns == 1_000_000
    # exposed: both transfers (210 µs each) fall in waits; T_single: the two 240 µs waits vanish
    assert check.exposed_comm_ns == 420_000
    assert check.single_ns == 520_000
    assert any("no compute" in n for n in graph.notes)
    assert any("2 window(s)" in n and "1.000 ms" in n for n in graph.notes)


def test_horovod_prediction_at_twice_the_link(tmp_path: Path) -> None:
    """The 400 and the 800 byte batches both transfer in 210 µs: a fixed cost per call, not bytes.

    The fit's slope is at least the 10 Gbit/s link's 0.8 ns per byte (no transfer is faster), the rest
    is fixed: at 20 Gbit/s the batches save 0.4 ns per byte, 160 and 320 ns per iteration.
    """
    graph = trace_graph(load(_loop_timeline(tmp_path / "timeline.json")), link_gbps=10)
    faster = replay(graph, scenario=Scenario(bandwidth_gbps=20))
    assert faster.iteration_ns == pytest.approx(1_000_000 - 160 - 320, abs=1)
    assert faster.exposed_comm_ns == pytest.approx(420_000 - 160 - 320, abs=1)
    assert faster.single_ns == pytest.approx(520_000, abs=1)


def test_horovod_without_a_loop_is_one_window(tmp_path: Path) -> None:
    """One iteration only: no tensor negotiated twice, the whole timeline is the window."""
    graph = trace_graph(load(_loop_timeline(tmp_path / "timeline.json", iterations=1)))
    assert graph.windows.select("window", "start_ns", "end_ns").rows() == [("whole_trace", 100_000, 740_000)]
    assert any(n.startswith("no training loop seen") and "0.640 ms" in n for n in graph.notes)
    assert self_replay(graph).iteration_ns == 640_000


def test_cli_prints_the_notes_and_json_carries_them(tmp_path: Path) -> None:
    path = _loop_timeline(tmp_path / "timeline.json")
    text = run_timeline("whatif", path, "--link-gbps", "10", "--bandwidth", "20", "--verbose")
    assert text.returncode == 0, text.stderr
    assert "note: a Horovod timeline alone: it records no compute" in text.stdout
    assert "measured 1.00 ms/iteration; self-replay 1.00 ms (error 0.0%" in text.stdout
    row = next(line for line in text.stdout.splitlines() if "20 Gbit/s" in line).split("│")
    # iteration, exposed, T_single, scaling factor 520 / 999.52 (the transfers are a fixed cost per call)
    assert [c.strip() for c in row[5:9]] == ["999.5 µs", "419.5 µs", "520.0 µs", "0.520"]
    result = run_timeline("whatif", path, "--link-gbps", "10", "--bandwidth", "20", "--json")
    assert result.returncode == 0, result.stderr
    report = msgspec.json.decode(result.stdout, type=WhatIfReport)
    assert report.modes == ["horovod"]
    assert report.iterations == [0, 1]
    assert len(report.notes) == 3
    assert report.scenarios[0].iteration_ns == 999_520


# --- the real timelines --------------------------------------------------------------------------


def _raw_records(path: Path) -> list[dict[str, Any]]:
    """The records of a Horovod timeline file, any layout (closed array or not)."""
    text = path.read_text().rstrip().rstrip(",")
    records: list[dict[str, Any]] = json.loads(text if text.endswith("]") else text + "]")
    return records


def _all_files() -> list[Path]:
    return sorted(HOROVOD.rglob("*.json")) if HOROVOD.is_dir() else []


@needs_shared
@pytest.mark.parametrize("path", _all_files(), ids=lambda p: p.name)
def test_every_real_horovod_timeline_gives_a_report(path: Path) -> None:
    """Every timeline: a report with its notes (a statement where it lacks what a prediction needs)."""
    trace = load(path)
    graph = trace_graph(trace)
    report = build_whatif_report(graph, Settings(), link_source="not recorded")
    assert report.notes
    assert report.self_replay.error_ratio < 0.05
    if graph.ops:  # one collective per fused batch, as the Horovod analysis groups them
        batches = compute_fused_batches(trace.events)
        assert len(graph.ops) == batches.height
        assert sorted(o.nbytes or 0 for o in graph.ops) == sorted(
            batches.get_column("bytes").fill_null(0).to_list()
        )
    if not graph.ops:
        assert any(n.startswith("the timeline holds no operation") for n in report.notes)
    elif not any(op.collective == "all_reduce" for op in graph.ops):
        assert any(n.startswith("no all-reduce in the timeline") for n in report.notes)


@needs_shared
def test_cli_exit_codes_on_real_timelines() -> None:
    for path in (
        DEXHUNTER / "horovod-results__32gpu__10g-32-nccl.json",
        HOROVOD / "alcf_workshop__timeline_cpu_n1.json",
    ):
        result = run_timeline("whatif", path)
        assert result.returncode == 0, result.stderr
        assert "(--verbose shows them)" in result.stdout
        assert "note: " in run_timeline("whatif", path, "--verbose").stdout
    # negotiations only, never an operation: nothing to measure, an error (#41)
    empty = run_timeline("whatif", SMDEBUG)
    assert empty.returncode == 2
    assert "no rank has compute, communication or memory copies to measure" in empty.stderr


@needs_shared
def test_training_loop_period_from_the_raw_json() -> None:
    """The TF job's iterations: the spacing of its most negotiated tensor's negotiation starts."""
    records = _raw_records(TF_LOOP)
    starts: dict[int, list[float]] = {}
    names = {r["pid"]: r["args"]["name"] for r in records if r.get("name") == "process_name"}
    for r in records:
        if r.get("ph") == "B" and r.get("name") == "NEGOTIATE_ALLREDUCE":
            starts.setdefault(r["pid"], []).append(r["ts"])
    most = max(len(v) for v in starts.values())
    pid = min((v[0], p) for p, v in starts.items() if len(v) == most)[1]
    marks = sorted(starts[pid])
    period_ns = (marks[-1] - marks[0]) / (len(marks) - 1) * 1000
    graph = trace_graph(load(TF_LOOP))
    check = self_replay(graph)
    assert graph.windows.height == len(marks) - 1
    assert check.measured_ns == pytest.approx(period_ns, rel=1e-9)
    assert check.error_ratio < 0.05
    assert any(names[pid] in n for n in graph.notes)


@needs_shared
@pytest.mark.parametrize(
    "path", sorted(DEXHUNTER.glob("*.json")) if DEXHUNTER.is_dir() else [], ids=lambda p: p.name
)
def test_dexhunter_whole_timeline_from_the_raw_json(path: Path) -> None:
    """No loop in the benchmark (each tensor negotiated once): one window, first record to last end."""
    records = [r for r in _raw_records(path) if r.get("pid") and r.get("ph") in {"B", "E", "X"}]
    negotiated = [r["pid"] for r in records if r.get("name", "").startswith("NEGOTIATE_")]
    assert len(negotiated) == len(set(negotiated))
    last_end: dict[int, float] = {}
    for r in records:
        if r["ph"] == "E":
            last_end[r["pid"]] = max(last_end.get(r["pid"], r["ts"]), r["ts"])
    span_ns = (max(last_end.values()) - min(r["ts"] for r in records)) * 1000
    graph = trace_graph(load(path))
    check = self_replay(graph)
    assert check.measured_ns == pytest.approx(span_ns, abs=1)
    assert check.error_ratio < 0.05
    assert any(n.startswith("no training loop seen") for n in graph.notes)


def test_gradient_kinds_match_the_graph() -> None:
    from timeline.whatif.graph import GRADIENT_COLLECTIVES
    from timeline.whatif.horovod_graph import GRADIENT_KINDS

    assert tuple(sorted(GRADIENT_COLLECTIVES)) == GRADIENT_KINDS
