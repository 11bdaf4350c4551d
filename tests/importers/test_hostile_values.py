"""Hostile values inside trace JSON (issue #19): every one a counted warning or one located error.

Each case is read whole and in chunks (the reader of traces of 16 MiB or more), which must agree;
the command line turns the errors into one ``error:`` line and exit code 2. A compact fuzz at the end
feeds every importer truncations, control characters and wrong types in every field: nothing may
escape but a :class:`~timeline.errors.TimelineError`.
"""

from __future__ import annotations

import contextlib
import copy
import json
import re
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import timeline
import timeline.importers.stream
from tests.builders import EPOCH_US, SAMPLE_HOROVOD, run_timeline
from timeline.errors import TimelineError, TraceContentError, TraceFormatError
from timeline.importers.kineto import parse_kineto
from timeline.importers.parse import parse_file
from timeline.importers.result import FileResult, ImportOptions
from timeline.importers.stream import parse_kineto_stream


def _kernel(i: int = 0, **fields: Any) -> dict[str, Any]:
    event: dict[str, Any] = {
        "ph": "X", "cat": "kernel", "name": f"gemm{i}", "pid": 0, "tid": 7, "ts": EPOCH_US + 10 * i,
        "dur": 5, "args": {"device": 0, "stream": 7, "correlation": i},
    }  # fmt: skip
    event.update(fields)
    return event


def _doc(events: list[dict[str, Any]], **top: Any) -> bytes:
    """A trace, one event a line (the layout the profiler writes)."""
    head = {"schemaVersion": 1, **top}
    lines = ",\n".join(json.dumps(e) for e in events)
    return json.dumps(head)[:-1].encode() + b', "traceEvents": [\n' + lines.encode() + b"\n]}"


def _both(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: bytes) -> tuple[FileResult, FileResult]:
    """Parse ``data`` whole (the reader of damaged traces) and as :func:`parse_file` does (256 B chunks)."""
    path = tmp_path / "rank0.json"
    path.write_bytes(data)
    whole = parse_kineto(data, source=str(path), options=ImportOptions())
    monkeypatch.setattr(timeline.importers.stream, "SERIAL_CHUNK_BYTES", 256)
    chunked = parse_file(path, ImportOptions())
    return whole, chunked


def _agree(whole: FileResult, chunked: FileResult) -> FileResult:
    assert_frame_equal(whole.events, chunked.events)
    assert (whole.warnings, whole.clock, whole.rank) == (chunked.warnings, chunked.clock, chunked.rank)
    return whole


def _names(result: FileResult) -> list[str]:
    return [str(n) for n in result.events.get_column("name").cast(pl.String).to_list()]


def _errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: bytes) -> list[TimelineError]:
    """The errors of reading ``data`` whole and as :func:`parse_file` does (each must raise one)."""
    path = tmp_path / "rank0.json"
    path.write_bytes(data)
    found: list[TimelineError] = []
    with pytest.raises(TimelineError) as caught:
        parse_kineto(data, source=str(path), options=ImportOptions())
    found.append(caught.value)
    monkeypatch.setattr(timeline.importers.stream, "SERIAL_CHUNK_BYTES", 256)
    with pytest.raises(TimelineError) as caught:
        parse_file(path, ImportOptions())
    found.append(caught.value)
    return found


# --- an early oddity, then damage (was: a msgspec.DecodeError traceback) ------------------------------

ODDITIES = {
    "unknown phase": {"ph": "Z", "name": "odd"},
    "args a list": _kernel(90, args=[1, 2]),
    "args a string": _kernel(90, args="text"),
    "name a number": _kernel(90, name=7),
}


@pytest.mark.parametrize("oddity", ODDITIES, ids=list(ODDITIES))
@pytest.mark.parametrize("damage", ["cut off", "control character"])
def test_an_early_oddity_then_damage_is_repaired(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, oddity: str, damage: str
) -> None:
    data = _doc([ODDITIES[oddity], *(_kernel(i) for i in range(1, 9))])
    if damage == "cut off":
        data = data[: data.index(b'"name": "gemm8"')]
        expected = "file cut off mid-record, closed after the last complete event (1)"
    else:
        data = data.replace(b'"gemm5"', b'"gem\x01m5"')
        expected = "control characters in strings escaped (1)"
    whole = _agree(*_both(tmp_path, monkeypatch, data))
    kept = [f"gemm{i}" for i in range(1, 8 if damage == "cut off" else 9)]
    if damage == "control character":
        kept[4] = "gem\x01m5"
    names = [n for n in _names(whole) if n not in ("gemm90", "None")]
    assert names == kept
    assert whole.warnings == [f"{tmp_path / 'rank0.json'}: repaired malformed JSON: {expected}"]


# --- nesting, numbers beyond a double --------------------------------------------------------------------


@pytest.mark.parametrize("where", ["an event", "a field", "the args", "the document"])
@pytest.mark.parametrize("bracket", [b"[]", b"{}"], ids=["arrays", "objects"])
def test_nesting_deeper_than_the_decoder_goes_is_one_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str, bracket: bytes
) -> None:
    """100,000 levels (was: RecursionError)."""
    opening, closing = (
        (b"[" * 100_000, b"]" * 100_000) if bracket == b"[]" else (b'{"a":' * 100_000, b"}" * 100_000)
    )
    deep = opening + (b"1" if bracket == b"{}" else b"") + closing
    marker = b'"@@deep@@"'
    data = {
        "an event": _doc([_kernel(0), "@@deep@@", _kernel(1)]),  # type: ignore[list-item]
        "a field": _doc([_kernel(0, pid="@@deep@@"), _kernel(1)]),
        "the args": _doc([_kernel(0, args={"device": "@@deep@@"}), _kernel(1)]),
        "the document": _doc([_kernel(0)], extra="@@deep@@"),
    }[where].replace(marker, deep)
    for error in _errors(tmp_path, monkeypatch, data):
        assert isinstance(error, TraceFormatError)
        assert str(error) == (
            f"{tmp_path / 'rank0.json'}: JSON nested too deep (arrays or objects about 1,000 levels inside "
            "one another); not a trace a profiler writes: check what wrote this file"
        )


def test_nesting_in_a_horovod_timeline_is_one_error(tmp_path: Path) -> None:
    path = tmp_path / "horovod.json"
    deep = b"[" * 50_000 + b"]" * 50_000
    path.write_bytes(b'[{"ph": "B", "name": "x", "ts": 1, "pid": 1, "s": ' + deep + b"}]")
    with pytest.raises(TraceFormatError, match=rf"^{re.escape(str(path))}: JSON nested too deep"):
        parse_file(path, ImportOptions())


@pytest.mark.parametrize("field", ["ts", "dur"])
@pytest.mark.parametrize("number", [b"1e400", b"-1e400", b"1.5e999", b"1" * 400 + b".5"])
def test_a_time_beyond_a_double_is_dropped_and_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, field: str, number: bytes
) -> None:
    """Was: a msgspec.ValidationError traceback."""
    events = [_kernel(i) for i in range(6)]
    events[3][field] = "@"
    data = _doc(events).replace(b'"@"', number)
    result = _agree(*_both(tmp_path, monkeypatch, data))
    assert _names(result) == ["gemm0", "gemm1", "gemm2", "gemm4", "gemm5"]
    source = tmp_path / "rank0.json"
    assert result.warnings == [
        f"{source}: repaired malformed JSON: numbers out of range replaced by null (1)",
        f"{source}: dropped 1 events without ts or dur",
    ]


# --- ranks, world sizes, steps, clocks ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "shown"),
    [
        ("rank", 2**31, "2147483648"),
        ("rank", -1, "-1"),
        ("rank", "99999999999999999999999", "99999999999999999999999"),
        ("world_size", 2**64, "18446744073709551616"),
        ("world_size", -4, "-4"),
    ],
)
def test_a_rank_or_world_size_out_of_range_is_an_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str, value: Any, shown: str
) -> None:
    """Was: accepted, then polars overflow and schema errors downstream."""
    info = {"rank": 0, "world_size": 2, key: value}
    what = key.replace("_", " ")
    low = 0
    for error in _errors(tmp_path, monkeypatch, _doc([_kernel(0)], distributedInfo=info)):
        assert isinstance(error, TraceContentError)
        assert str(error) == (
            f"{tmp_path / 'rank0.json'}: distributedInfo.{key} {shown} is out of range: a {what} is a whole "
            f"number from {low} to 2,147,483,647; fix distributedInfo in the trace"
        )


def test_the_largest_rank_is_read() -> None:
    result = _parse_bytes(_doc([_kernel(0)], distributedInfo={"rank": 2**31 - 1, "world_size": 2**31 - 1}))
    assert (result.rank, result.world_size) == (2**31 - 1, 2**31 - 1)


def _parse_bytes(data: bytes) -> FileResult:
    from timeline.importers.kineto import parse_kineto

    return parse_kineto(data, source="rank0.json")


@pytest.mark.parametrize("number", ["12345678901234567890123", str(2**63), "٣"])
def test_a_step_number_out_of_range_is_an_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, number: str
) -> None:
    """Every format's steps are checked where a trace is combined (was: a Horovod timeline's crashed)."""
    step = _kernel(0, cat="user_annotation", name=f"ProfilerStep#{number}", pid=1, tid=1, dur=100)
    kineto = tmp_path / "rank0.json"
    kineto.write_bytes(_doc([step, _kernel(1)]))
    horovod = tmp_path / "horovod_timeline.json"
    horovod.write_text(
        '[{"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "allreduce.w"}},'
        f'{{"ph": "B", "name": "ProfilerStep#{number}", "ts": 1000, "pid": 1}},'
        '{"ph": "E", "ts": 1012, "pid": 1},'
        '{"ph": "B", "name": "ALLREDUCE", "ts": 1019, "pid": 1},{"ph": "E", "ts": 1029, "pid": 1}]',
        encoding="utf-8",
    )
    for path in (kineto, horovod):
        with pytest.raises(TraceContentError) as caught:
            timeline.load(path)
        assert str(caught.value).startswith(
            f"{path}: step number {number} of a ProfilerStep# annotation is out of range: "
            "steps are numbered with ASCII digits from 0 to 9,223,372,036,854,775,807"
        )


def test_the_largest_step_number_is_read() -> None:
    step = _kernel(0, cat="user_annotation", name=f"ProfilerStep#{2**63 - 1}", pid=1, tid=1, dur=100)
    assert _names(_parse_bytes(_doc([step, _kernel(1)])))[0] == f"ProfilerStep#{2**63 - 1}"


@pytest.mark.parametrize(
    "base",
    [2**70, -(2**40), 2**63 - 10, "soon", 1.5],
    ids=["2**70", "negative", "overflow", "text", "fraction"],
)
def test_a_base_time_that_cannot_anchor_the_times_is_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, base: Any
) -> None:
    """torch >= 2.4 writes ts relative to baseTimeNanoseconds (was: 2**70 made every start null)."""
    events = [_kernel(i, ts=1000.5 + 10 * i) for i in range(3)]
    result = _agree(*_both(tmp_path, monkeypatch, _doc(events, baseTimeNanoseconds=base)))
    assert result.clock == "relative"
    assert result.events.get_column("start_ns").to_list() == [1_000_500, 1_010_500, 1_020_500]
    shown = repr(base)
    assert result.warnings == [
        f"{tmp_path / 'rank0.json'}: ignored baseTimeNanoseconds {shown}: not a time in nanoseconds since "
        "the epoch; times count from an unknown origin"
    ]


def test_a_usable_base_time_anchors_the_times() -> None:
    events = [_kernel(i, ts=1000.5 + 10 * i) for i in range(2)]
    result = _parse_bytes(_doc(events, baseTimeNanoseconds=1_700_000_000_000_000_000))
    assert result.clock == "epoch"
    assert result.warnings == []
    assert result.events.get_column("start_ns").to_list() == [
        1_700_000_000_001_000_500,
        1_700_000_000_001_010_500,
    ]


# --- times that are not numbers (was: "ts": true read as 1 µs) --------------------------------------


@pytest.mark.parametrize("field", ["ts", "dur"])
@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (True, "events whose ts or dur is not a number"),
        (False, "events whose ts or dur is not a number"),
        ("12", "events whose ts or dur is not a number"),
        ({"us": 12}, "events whose ts or dur is not a number"),
        ([12], "events whose ts or dur is not a number"),
        (None, "events without ts or dur"),
    ],
)
def test_a_time_that_is_not_a_number_is_dropped_and_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, field: str, value: Any, reason: str
) -> None:
    events = [_kernel(i) for i in range(4)]
    events[2][field] = value
    result = _agree(*_both(tmp_path, monkeypatch, _doc(events)))
    assert _names(result) == ["gemm0", "gemm1", "gemm3"]
    assert result.warnings == [f"{tmp_path / 'rank0.json'}: dropped 1 {reason}"]


def test_negative_durations_are_dropped_and_a_negative_ts_is_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A negative duration ends before it starts; a negative ts is a time before the trace's base."""
    events = [_kernel(0), _kernel(1, dur=-5), _kernel(2, ts=-20), _kernel(3, ts=True)]
    result = _agree(
        *_both(tmp_path, monkeypatch, _doc(events, baseTimeNanoseconds=1_700_000_000_000_000_000))
    )
    assert _names(result) == ["gemm0", "gemm2"]
    source = tmp_path / "rank0.json"
    assert result.warnings == [
        f"{source}: dropped 1 events whose ts or dur is not a number",
        f"{source}: dropped 1 events with end < start",
    ]


@pytest.mark.parametrize("field", ["name", "cat"])
@pytest.mark.parametrize("value", [7, {"a": 1}, [1], True])
def test_a_name_or_category_that_is_not_text_is_null(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, field: str, value: Any
) -> None:
    events = [_kernel(i) for i in range(3)]
    events[1][field] = value
    result = _agree(*_both(tmp_path, monkeypatch, _doc(events)))
    column = result.events.get_column(field).cast(pl.String).to_list()
    assert column[1] is None
    if field == "cat":
        assert result.events.get_column("kind").cast(pl.String).to_list() == ["compute", "other", "compute"]


# --- MTIA device activity (was: read as a CPU-only trace) ----------------------------------------------


def test_mtia_device_activity_is_device_activity(tmp_path: Path) -> None:
    """Kineto's MTIA plugin: on-device events in ``mtia_ccp_events``, runtime calls in ``mtia_runtime``."""

    def event(cat: str, name: str, ts: int, dur: int, pid: int, tid: int, **args: Any) -> dict[str, Any]:
        return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": EPOCH_US + ts, "dur": dur,
                "args": args}  # fmt: skip

    events = [
        event("user_annotation", "ProfilerStep#1", 0, 1000, 10, 10),
        event("mtia_runtime", "mtiaLaunchKernel", 20, 5, 10, 10, correlation=1),
        event("mtia_ccp_events", "fused_gemm_kernel", 100, 400, 0, 3, correlation=1),
        event("mtia_ccp_events", "ncclDevKernel_AllReduce_Sum_f32", 300, 400, 0, 4),
        event("mtia_ccp_events", "Memcpy HtoD", 50, 20, 0, 3),
        event("mtia_insight", "insight range", 0, 900, 0, 9),
    ]
    path = tmp_path / "rank0.json"
    path.write_bytes(_doc(events, distributedInfo={"rank": 0, "world_size": 1}))
    result = parse_file(path, ImportOptions())
    kinds = dict(zip(_names(result), result.events.get_column("kind").cast(pl.String).to_list(), strict=True))
    assert kinds == {
        "ProfilerStep#1": "annotation",
        "mtiaLaunchKernel": "runtime",
        "fused_gemm_kernel": "compute",
        "ncclDevKernel_AllReduce_Sum_f32": "communication",
        "Memcpy HtoD": "memcpy",
        "insight range": "other",
    }
    device = dict(zip(_names(result), result.events.get_column("device").to_list(), strict=True))
    assert device["fused_gemm_kernel"] == device["ncclDevKernel_AllReduce_Sum_f32"] == 0
    assert device["mtiaLaunchKernel"] is None
    overlap = timeline.analyze(path).overlap.ranks
    assert overlap.get_column("mode").to_list() == ["gpu"]
    assert overlap.get_column("comm_ns").to_list() == [400_000]
    assert overlap.get_column("hidden_comm_ns").to_list() == [200_000]


def test_mtia_kernels_are_kept_when_reading_only_what_the_overlap_needs(tmp_path: Path) -> None:
    """overlap_only skips a device trace's CPU operators: an MTIA trace is a device trace."""
    events = [
        _kernel(0, cat="cpu_op", name="aten::mm", pid=10, tid=10),
        _kernel(1, cat="mtia_ccp_events", name="fused_gemm_kernel"),
    ]
    path = tmp_path / "rank0.json"
    path.write_bytes(_doc(events))
    result = parse_file(path, ImportOptions(overlap_only=True))
    assert _names(result) == ["fused_gemm_kernel"]
    assert result.skipped == 1


# --- the command line: one error line, exit code 2 --------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "code", "first_line"),
    [
        ("nested", 2, "error: {path}: JSON nested too deep"),
        ("rank", 2, "error: {path}: distributedInfo.rank 2147483648 is out of range"),
        ("step", 2, "error: {path}: step number 12345678901234567890123 of a ProfilerStep# annotation"),
        ("base", 0, "warning: {path}: ignored baseTimeNanoseconds 1180591620717411303424"),
        ("number", 0, "warning: {path}: repaired malformed JSON: numbers out of range replaced by null (1)"),
    ],
)
def test_the_command_reports_hostile_values_in_one_line(
    tmp_path: Path, case: str, code: int, first_line: str
) -> None:
    step = _kernel(
        0, cat="user_annotation", name="ProfilerStep#12345678901234567890123", pid=1, tid=1, dur=100
    )
    data = {
        "nested": _doc([_kernel(0, args={"device": "@"})]).replace(b'"@"', b"[" * 100_000 + b"]" * 100_000),
        "rank": _doc([_kernel(0)], distributedInfo={"rank": 2**31, "world_size": 2**31}),
        "step": _doc([step, _kernel(1)]),
        "base": _doc([_kernel(0, ts=5.5), _kernel(1, ts=15.5)], baseTimeNanoseconds=2**70),
        "number": _doc([_kernel(0), _kernel(1, dur="@")]).replace(b'"@"', b"1e400"),
    }[case]
    path = tmp_path / "rank0.json"
    path.write_bytes(data)
    done = run_timeline("analyze", path)
    assert "Traceback" not in done.stderr
    assert done.returncode == code, done.stderr
    assert done.stderr.startswith(first_line.format(path=path))
    if code == 2:
        assert len(done.stderr.splitlines()) == 1


# --- a compact fuzz: truncations, control characters, wrong types ------------------------------------------

FUZZ_EVENTS: list[dict[str, Any]] = [
    _kernel(0, name="ncclKernel_AllReduce_RING_LL_Sum_float", args={
        "device": 0, "stream": 7, "correlation": 11, "External id": 3, "Collective name": "allreduce",
        "In msg nelems": 100, "dtype": "Float", "Group size": 2, "Process Group Name": "0", "Seq": 4}),
    _kernel(1, cat="cpu_op", name="nccl:all_reduce", pid=100, tid=200,
            args={"External id": 3, "Input Dims": [[10, 10]], "Input type": ["float"]}),
    _kernel(2, cat="cuda_runtime", name="cudaLaunchKernel", pid=100, tid=200, args={"correlation": 11}),
    _kernel(3, cat="user_annotation", name="ProfilerStep#4", pid=100, tid=200, dur=100, args={}),
    {"ph": "f", "id": 11, "pid": 0, "tid": 7, "ts": EPOCH_US, "cat": "ac2g", "name": "ac2g"},
]  # fmt: skip
FUZZ_INFO = {"backend": "nccl", "rank": 0, "world_size": 2, "pg_config": [{"pg_name": "0", "pg_size": 2}]}
WRONG = [{"a": 1}, [[1]], "12", -1, 10**30, True, None, 2.5]
RAW = [b"NaN", b"1e400", b"1" * 5000]


def _with_value(text: bytes, value: Any) -> list[bytes]:
    """The trace ``text`` whose ``"@@value@@"`` is ``value``, or each raw JSON value of :data:`RAW`."""
    if value == "@@raw@@":
        return [text.replace(b'"@@raw@@"', raw) for raw in RAW]
    return [text]


def _fuzz_cases() -> list[bytes]:
    base = _doc(FUZZ_EVENTS, distributedInfo=FUZZ_INFO)
    cases = [base[:n] for n in range(1, len(base), 97)]
    cases += [
        base[:n] + c + base[n:] for n in range(1, len(base), 97) for c in (b"\x00", b"\x01", b'"', b"\xff")
    ]
    for i, event in enumerate(FUZZ_EVENTS):
        fields = [(key, None) for key in event] + [("args", key) for key in event.get("args", {})]
        for key, arg in fields:
            for value in [*WRONG, "@@raw@@"]:
                events = copy.deepcopy(FUZZ_EVENTS)
                target = events[i] if arg is None else events[i]["args"]
                target[arg or key] = value
                cases += _with_value(_doc(events, distributedInfo=FUZZ_INFO), value)
    for key in FUZZ_INFO:
        for value in [*WRONG, "@@raw@@"]:
            cases += _with_value(_doc(FUZZ_EVENTS, distributedInfo={**FUZZ_INFO, key: value}), value)
    return cases


def _read_every_way(path: Path, *, overlap_only: bool) -> None:
    """Read ``path`` whole, in chunks (keeping what the overlap reads): an error or a result."""
    with contextlib.suppress(TimelineError):
        parse_file(path, ImportOptions())
    with contextlib.suppress(TimelineError):
        options = ImportOptions(overlap_only=overlap_only)
        parse_kineto_stream(path, source="t", chunk_bytes=200, spare_core=False, options=options)


def test_no_hostile_kineto_trace_raises_anything_but_a_timeline_error(tmp_path: Path) -> None:
    path = tmp_path / "rank0.json"
    for n, data in enumerate(_fuzz_cases()):
        path.write_bytes(data)
        _read_every_way(path, overlap_only=n % 2 == 1)


def test_no_hostile_horovod_timeline_raises_anything_but_a_timeline_error(tmp_path: Path) -> None:
    data = SAMPLE_HOROVOD.read_bytes()[:4000]
    path = tmp_path / "horovod.json"
    cases = [data[:n] for n in range(1, len(data), 97)]
    cases += [
        data[:n] + c + data[n:] for n in range(1, len(data), 97) for c in (b"\x00", b'"', b"\xff", b"{")
    ]
    records = json.loads(SAMPLE_HOROVOD.read_bytes())[:10]
    for i, record in enumerate(records):
        for key in [*record, "ts", "dur", "pid", "name", "ph", "args"]:
            for value in [*WRONG, "@@raw@@"]:
                changed = copy.deepcopy(records)
                changed[i][key] = value
                cases += _with_value(json.dumps(changed).encode(), value)
    for case in cases:
        path.write_bytes(case)
        with contextlib.suppress(TimelineError):
            parse_file(path, ImportOptions())
