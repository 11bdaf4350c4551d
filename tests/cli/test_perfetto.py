"""``timeline convert --to perfetto``: a Trace Event Format file that reads back with the same numbers.

The export is read back through timeline's own importer (``timeline.load``); the added tracks are
checked against the analysis and against plain Python recomputations from the events.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.builders import (
    PARAM,
    SAMPLE_HOROVOD,
    SAMPLES,
    assert_overlap_equal,
    gpu,
    make_events,
    run_timeline,
    write_json,
)
from timeline import load
from timeline.analysis.iterations import assign_iterations
from timeline.analysis.overlap import comm_intervals, compute_overlap
from timeline.trace import Trace

ADDED = ("timeline.iteration", "timeline.exposed_comm", "timeline.hidden_comm")
GLOO = SAMPLES / "ddp_gloo"
METADATA_NAMES = {"process_name", "process_sort_index", "thread_name", "thread_sort_index"}


def _export(inputs: Path | str, out: Path, *extra: str) -> dict[str, Any]:
    result = run_timeline("convert", inputs, "--to", "perfetto", "-o", out, *extra)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    document: dict[str, Any] = json.loads(out.read_bytes())
    return document


@pytest.fixture(scope="module")
def param(tmp_path_factory: pytest.TempPathFactory) -> tuple[Trace, Path, dict[str, Any]]:
    """The PARAM traces (8 GPU ranks) loaded, and exported once for the module."""
    out = tmp_path_factory.mktemp("perfetto") / "param.json"
    return load(PARAM), out, _export(PARAM, out)


@pytest.fixture(scope="module")
def gloo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Trace, Path, dict[str, Any]]:
    """The gloo sample (2 CPU-only ranks) loaded, and exported once for the module."""
    out = tmp_path_factory.mktemp("perfetto") / "gloo.json"
    return load(GLOO), out, _export(GLOO, out)


def _read_back(out: Path) -> pl.DataFrame:
    """The export read by timeline's importer, rank by rank.

    timeline reads one file as one rank: the export's processes (one per rank) are written to one
    file each, the document's header kept and ``distributedInfo.rank`` set to the process id.
    """
    document = json.loads(out.read_bytes())
    folder = out.with_name(out.stem + "-ranks")
    folder.mkdir(exist_ok=True)
    for pid in sorted({e["pid"] for e in document["traceEvents"]}):
        part = {k: v for k, v in document.items() if k != "traceEvents"}
        part["distributedInfo"] = {"rank": pid}
        part["traceEvents"] = [e for e in document["traceEvents"] if e["pid"] == pid]
        write_json(folder / f"rank{pid}.json", part)
    events = load(folder).events
    assert events.get_column("rank").equals(events.get_column("pid").cast(pl.Int32).alias("rank"))
    return events


def _original(events: pl.DataFrame) -> pl.DataFrame:
    return events.filter(~pl.col("cat").cast(pl.String).is_in(ADDED))


COMPARED = [
    "rank",
    "kind",
    "name",
    "start_ns",
    "end_ns",
    "device",
    "stream",
    "collective",
    "in_bytes",
    "out_bytes",
]


def _rows(events: pl.DataFrame) -> pl.DataFrame:
    return (
        events.select(COMPARED)
        .with_columns(pl.col("kind", "name", "collective").cast(pl.String))
        .sort(COMPARED, nulls_last=True)
    )


@pytest.mark.parametrize("which", ["param", "gloo"])
def test_events_read_back_the_same(which: str, request: pytest.FixtureRequest) -> None:
    trace, out, _ = request.getfixturevalue(which)
    back = _original(_read_back(out))
    assert back.height == trace.events.height
    counts = back.group_by("rank", "kind").len().sort("rank", "kind")
    assert counts.equals(trace.events.group_by("rank", "kind").len().sort("rank", "kind"))
    expected, got = _rows(trace.events), _rows(back)
    # times within 1 ns (they are in fact exact: ns precision as decimals of µs)
    assert (got.get_column("start_ns") - expected.get_column("start_ns")).abs().max() == 0
    assert (got.get_column("end_ns") - expected.get_column("end_ns")).abs().max() == 0
    assert got.equals(expected)


@pytest.mark.parametrize("which", ["param", "gloo"])
def test_overlap_reads_back_the_same_and_ignores_the_added_tracks(
    which: str, request: pytest.FixtureRequest
) -> None:
    trace, out, _ = request.getfixturevalue(which)
    back = _read_back(out)
    added = back.filter(pl.col("cat").cast(pl.String).is_in(ADDED))
    assert added.height > 0
    # read back, timeline's tracks are neither compute nor communication, and not on a GPU
    assert added.get_column("kind").cast(pl.String).unique().to_list() == ["other"]
    assert added.get_column("device").null_count() == added.height
    expected = compute_overlap(trace.events)
    assert_overlap_equal(expected, compute_overlap(_original(back)))
    # with the added tracks left in, every figure is the same
    assert_overlap_equal(expected, compute_overlap(back))


def _spans(document: dict[str, Any], cat: str) -> pl.DataFrame:
    rows = [(e["pid"], e["ts"], e["dur"]) for e in document["traceEvents"] if e.get("cat") == cat]
    return pl.DataFrame(rows, schema={"rank": pl.Int64, "ts": pl.Float64, "dur": pl.Float64}, orient="row")


def _union_length(intervals: list[tuple[int, int]]) -> int:
    total, reach = 0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def _exposed_by_hand(events: pl.DataFrame, rank: int) -> tuple[int, int]:
    """(exposed, hidden) ns of a GPU rank: |comm| - |comm ∩ compute| from the kernels, plain Python."""
    kernels = events.filter((pl.col("rank") == rank) & pl.col("device").is_not_null())
    comm = [
        (s, e) for k, s, e in kernels.select("kind", "start_ns", "end_ns").iter_rows() if k == "communication"
    ]
    compute = [
        (s, e) for k, s, e in kernels.select("kind", "start_ns", "end_ns").iter_rows() if k == "compute"
    ]
    both = _union_length(comm) + _union_length(compute) - _union_length(comm + compute)
    return _union_length(comm) - both, both


def test_added_tracks_hold_the_iterations_and_the_exposed_and_hidden_communication(
    param: tuple[Trace, Path, dict[str, Any]],
) -> None:
    trace, out, document = param
    windows = assign_iterations(trace.events)
    overlap = compute_overlap(trace.events)
    iterations = (
        _spans(document, "timeline.iteration").group_by("rank").agg(n=pl.len(), dur=pl.col("dur").sum())
    )
    expected = windows.group_by("rank").agg(n=pl.len(), dur=(pl.col("end_ns") - pl.col("start_ns")).sum())
    assert windows.get_column("window").cast(pl.String).to_list() == ["profiler_step"] * 8  # one step a rank
    for rank, n, dur_us in iterations.sort("rank").iter_rows():
        row = expected.filter(pl.col("rank") == rank)
        assert n == row.get_column("n").item()
        assert round(dur_us * 1000) == row.get_column("dur").item()
    back = _read_back(out)
    for state, column in (("exposed", "exposed_comm_ns"), ("hidden", "hidden_comm_ns")):
        cat = f"timeline.{state}_comm"
        totals = (
            back.filter(pl.col("cat").cast(pl.String) == cat).group_by("rank").agg(pl.col("dur_ns").sum())
        )
        in_document = _spans(document, cat).group_by("rank").agg(pl.col("dur").sum())
        for rank in trace.ranks:
            figure = overlap.ranks.filter(pl.col("rank") == rank).get_column(column).item()
            by_hand = _exposed_by_hand(trace.events, rank)[0 if state == "exposed" else 1]
            assert figure == by_hand
            assert totals.filter(pl.col("rank") == rank).get_column("dur_ns").sum() == by_hand
            assert round(in_document.filter(pl.col("rank") == rank).get_column("dur").sum() * 1000) == by_hand
    assert sum(_exposed_by_hand(trace.events, r)[0] for r in trace.ranks) > 0


def _check_trace_event_format(document: dict[str, Any]) -> None:
    """The JSON Object Format of the Trace Event Format, as far as the export uses it."""
    assert document["displayTimeUnit"] == "ns"
    assert document["otherData"]["writer"] == "timeline convert --to perfetto"
    events = document["traceEvents"]
    assert isinstance(events, list)
    assert events
    named_processes, named_threads, used = set(), set(), set()
    for event in events:
        assert event["ph"] in ("X", "M"), event
        assert isinstance(event["name"], str), event
        for key in ("pid", "tid"):
            assert type(event[key]) is int, event
        if event["ph"] == "M":
            assert event["name"] in METADATA_NAMES, event
            assert set(event) == {"ph", "name", "pid", "tid", "args"}, event
            if event["name"].endswith("_name"):
                assert isinstance(event["args"]["name"], str), event
                assert event["args"]["name"], event
            else:
                assert isinstance(event["args"]["sort_index"], int), event
            if event["name"] == "process_name":
                named_processes.add(event["pid"])
            if event["name"] == "thread_name":
                named_threads.add((event["pid"], event["tid"]))
            continue
        assert {"ph", "name", "cat", "pid", "tid", "ts", "dur", "args"} <= set(event), event
        assert isinstance(event["cat"], str), event
        assert event["cat"], event
        for key in ("ts", "dur"):
            assert type(event[key]) in (int, float), event
            assert event[key] >= 0, event
        assert isinstance(event["args"], dict), event
        used.add((event["pid"], event["tid"]))
    assert used <= named_threads
    assert {pid for pid, _ in used} <= named_processes


def test_the_export_follows_the_trace_event_format(
    param: tuple[Trace, Path, dict[str, Any]], gloo: tuple[Trace, Path, dict[str, Any]], tmp_path: Path
) -> None:
    _check_trace_event_format(param[2])
    _check_trace_event_format(gloo[2])
    _check_trace_event_format(_export(SAMPLE_HOROVOD, tmp_path / "horovod.json"))
    added = [e for e in param[2]["traceEvents"] if e.get("cat") in ADDED]
    assert {e["cat"] for e in added} == set(ADDED)
    labels = {(e["pid"], e["args"]["name"]) for e in param[2]["traceEvents"] if e["name"] == "thread_name"}
    for rank in range(8):
        assert {
            (rank, "iterations"),
            (rank, "exposed communication"),
            (rank, "hidden communication"),
        } <= labels
        assert (rank, f"rank {rank}") in {
            (e["pid"], e["args"]["name"]) for e in param[2]["traceEvents"] if e["name"] == "process_name"
        }


def test_collective_args_are_in_the_export(param: tuple[Trace, Path, dict[str, Any]]) -> None:
    trace, _, document = param
    comm = [e for e in document["traceEvents"] if e.get("args", {}).get("kind") == "communication"]
    expected = trace.events.filter(pl.col("kind") == "communication")
    assert len(comm) == expected.height
    with_bytes = [e for e in comm if "in_bytes" in e["args"]]
    assert len(with_bytes) == expected.get_column("in_bytes").count() > 0
    assert sum(e["args"]["in_bytes"] for e in with_bytes) == expected.get_column("in_bytes").sum()
    assert all("Collective name" in e["args"] for e in with_bytes)


def _ns_trace(rank: int) -> dict[str, Any]:
    """A torch >= 2.4 style trace: µs with three decimals from baseTimeNanoseconds, one step."""
    records = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 100, "tid": 1,
         "ts": 1000.001, "dur": 999.998},
        {"ph": "X", "cat": "kernel", "name": "volta_sgemm_128x64_nn", "pid": 0, "tid": 7,
         "ts": 1100.123, "dur": 300.457, "args": {"device": 0, "stream": 7}},
        {"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)",
         "pid": 0, "tid": 13, "ts": 1300.999, "dur": 400.001,
         "args": {"device": 0, "stream": 13, "Collective name": "allreduce", "In msg nelems": 1000,
                  "Out msg nelems": 1000, "dtype": "Float", "Group size": 2}},
    ]  # fmt: skip
    return {
        "schemaVersion": 1,
        "distributedInfo": {"rank": rank, "world_size": 2, "backend": "nccl"},
        "baseTimeNanoseconds": 1_700_000_000_123_456_789,
        "traceEvents": records,
    }


def test_nanoseconds_survive_and_a_single_rank_export_analyses_like_its_source(tmp_path: Path) -> None:
    source = write_json(tmp_path / "rank1.json", _ns_trace(1))
    out = tmp_path / "out.json"
    document = _export(source, out)
    assert document["distributedInfo"] == {"rank": 1}
    original = load(source).events
    back = load(out).events  # one rank: read back as that rank, no option needed
    got = _rows(_original(back))
    assert got.equals(_rows(original))
    assert original.get_column("start_ns").min() == 1_700_000_000_123_456_789 + 1_000_001
    analysed = run_timeline("analyze", "--json", source)
    again = run_timeline("analyze", "--json", out)
    assert analysed.returncode == again.returncode == 0, again.stderr
    for key in ("ranks", "iterations", "windows", "top_collectives"):
        assert json.loads(again.stdout)[key] == json.loads(analysed.stdout)[key], key
    steps = [e for e in document["traceEvents"] if e.get("cat") == "timeline.iteration"]
    assert [(s["name"], s["ts"], s["dur"]) for s in steps] == [("iteration 3", 0.0, 999.998)]
    base = document["baseTimeNanoseconds"]
    assert base == 1_700_000_000_123_456_789 + 1_000_001  # the step's start: the first
    exposed = sum(e["dur"] for e in document["traceEvents"] if e.get("cat") == "timeline.exposed_comm")
    hidden = sum(e["dur"] for e in document["traceEvents"] if e.get("cat") == "timeline.hidden_comm")
    # the all-reduce [1300.999, 1701.000) µs under the GEMM [1100.123, 1400.580) µs
    assert round(hidden * 1000) == 1_400_580 - 1_300_999
    assert round(exposed * 1000) == 1_701_000 - 1_400_580


def test_chrome_is_a_synonym(param: tuple[Trace, Path, dict[str, Any]], tmp_path: Path) -> None:
    out = tmp_path / "chrome.json"
    result = run_timeline("convert", PARAM, "--to", "chrome", "-o", out)
    assert result.returncode == 0, result.stderr
    assert out.read_bytes() == param[1].read_bytes()


def test_an_existing_output_is_replaced_only_with_force_and_only_if_timeline_wrote_it(tmp_path: Path) -> None:
    source = write_json(tmp_path / "rank0.json", _ns_trace(0))
    out = tmp_path / "out.json"
    _export(source, out)
    first = out.read_bytes()
    refused = run_timeline("convert", source, "--to", "perfetto", "-o", out)
    assert refused.returncode == 2
    assert refused.stderr == f"error: {out}: exists; pass --force to overwrite it\n"
    assert _export(source, out, "--force")
    assert out.read_bytes() == first
    notes = tmp_path / "notes.json"
    notes.write_text('{"traceEvents": []}')
    refused = run_timeline("convert", source, "--to", "perfetto", "-o", notes, "--force")
    assert refused.returncode == 2
    assert refused.stderr == (
        f"error: {notes}: exists and is a file that timeline did not write; --force replaces only a trace "
        "written by timeline convert --to perfetto; choose another output file\n"
    )
    assert notes.read_text() == '{"traceEvents": []}'
    link = tmp_path / "link.json"
    link.symlink_to(out)
    refused = run_timeline("convert", source, "--to", "perfetto", "-o", link, "--force")
    assert refused.returncode == 2
    assert "exists and is a symbolic link" in refused.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "notes.json", "out.json", "rank0.json"]


def test_usage_errors(tmp_path: Path) -> None:
    source = write_json(tmp_path / "rank0.json", _ns_trace(0))
    both = run_timeline(
        "convert", source, "--to", "perfetto", "--partition-by-rank", "-o", tmp_path / "o.json"
    )
    assert both.returncode == 2
    assert both.stderr == (
        "error: --partition-by-rank: writes Parquet only, not --to perfetto; drop one of the two options\n"
    )
    missing = run_timeline("convert", source, "--to", "perfetto", "-o", tmp_path / "nowhere" / "o.json")
    assert missing.returncode == 2
    assert missing.stderr == f"error: {tmp_path / 'nowhere'}: no such directory\n"
    itself = run_timeline("convert", source, "--to", "perfetto", "-o", source)
    assert itself.returncode == 2
    assert "is one of the inputs" in itself.stderr
    unknown = run_timeline("convert", source, "--to", "svg", "-o", tmp_path / "o.svg")
    assert unknown.returncode == 2
    assert "'svg' is not one of 'parquet', 'perfetto', 'chrome'" in unknown.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank0.json"]


def test_comm_intervals_by_hand() -> None:
    events = make_events(
        [
            gpu("compute", 0, 100),
            gpu("communication", 50, 150, stream=13),
            gpu("communication", 200, 250, stream=13),
            gpu("communication", 240, 260, stream=14),
            {"rank": 1, "kind": "communication", "start_ns": 0, "end_ns": 10, "source": "horovod"},
        ]
    )
    got = comm_intervals(events).with_columns(pl.col("state").cast(pl.String)).rows()
    # rank 1 has only a Horovod timeline: its exposure is unknown, so it has no interval
    assert got == [(0, "hidden", 50, 100), (0, "exposed", 100, 150), (0, "exposed", 200, 260)]


def test_process_group_columns_read_back(tmp_path: Path) -> None:
    """#20's columns travel through the export: description, Comms Id (beyond Int64), the peer."""
    from tests.generators.nccl import device_mesh_job, write_job

    write_job(device_mesh_job([("pp", 2), ("tp", 2)], steps=2, seed=9), tmp_path / "job")
    trace_file = tmp_path / "job" / "rank2.pt.trace.json"
    _export(trace_file, tmp_path / "run.json")
    columns = ["start_ns", "pg_name", "pg_desc", "pg_ranks", "seq", "comms_id", "peer"]
    before = load(trace_file).events.filter(pl.col("kind") == "communication").select(columns)
    after = load(tmp_path / "run.json").events.filter(pl.col("kind") == "communication").select(columns)
    assert after.sort("start_ns").equals(before.sort("start_ns"))
    assert before["peer"].drop_nulls().len() > 0
