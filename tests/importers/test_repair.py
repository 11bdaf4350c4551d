"""Repair of malformed Kineto JSON seen in the wild, through ``repair_json`` and ``parse_kineto``.

Records are written in the profiler's own multi-line layout (name on one line, ``ts`` on the next),
which is what lets one fix cover every call of a damaged name.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import msgspec
import polars as pl
import pytest

from timeline.errors import TraceFormatError
from timeline.importers.kineto import parse_kineto
from timeline.importers.repair import repair_json
from timeline.importers.result import FileResult, ImportOptions
from timeline.trace import load

EPOCH_US = 1_700_000_000_000_000
SOURCE = "rank0.json"


def _record(name: bytes, ts: int, *, cat: bytes = b"cpu_op", extra: bytes = b"") -> bytes:
    """One complete event as torch writes it: name line, then a ts line that differs per call."""
    return (
        b'  {\n    "ph": "X", "cat": "' + cat + b'", "name": "' + name + b'", "pid": 7, "tid": 7,\n'
        b'    "ts": ' + str(ts).encode() + b', "dur": 3' + extra + b"\n  }"
    )


def _document(records: list[bytes]) -> bytes:
    return (
        b'{\n  "schemaVersion": 1,\n  "traceEvents": [\n'
        + b",\n".join(records)
        + b'\n  ],\n  "traceName": "/tmp/x.json"\n}\n'
    )


def _good(n: int, *, start: int = 0) -> list[bytes]:
    return [_record(b"aten::mm", EPOCH_US + 10 * (start + i)) for i in range(n)]


def _parse(data: bytes, *, include_python: bool = True) -> FileResult:
    return parse_kineto(data, source=SOURCE, options=ImportOptions(include_python=include_python))


def _names(result: FileResult) -> list[str]:
    return [str(n) for n in result.events.get_column("name").cast(pl.String).to_list()]


def _check_repair(data: bytes, warning: str) -> FileResult:
    """Repair directly and through the importer: the same single warning, bytes left as they were."""
    before = bytes(data)
    with pytest.raises(msgspec.DecodeError):
        msgspec.json.decode(data)  # the case really is malformed
    repaired = repair_json(data, source=SOURCE)
    assert repaired.warnings == [f"{SOURCE}: repaired malformed JSON: {warning}"]
    json.loads(repaired.data)  # the standard library agrees that the result is JSON
    result = _parse(data)
    assert result.warnings == repaired.warnings
    assert data == before
    return result


def test_unescaped_quotes_in_a_python_function_name() -> None:
    bad = _record(b'train.py(12): log("loss")', EPOCH_US + 5, cat=b"python_function")
    result = _check_repair(
        _document([*_good(1), bad, *_good(1, start=1)]), "unescaped quotes in strings escaped (2)"
    )
    assert _names(result) == ["aten::mm", 'train.py(12): log("loss")', "aten::mm"]
    # Dropped by default like every python_function, once repaired.
    default = _parse(_document([*_good(1), bad]), include_python=False)
    assert _names(default) == ["aten::mm"]
    assert default.warnings == [f"{SOURCE}: repaired malformed JSON: unescaped quotes in strings escaped (2)"]


def test_unescaped_quote_in_a_cpu_op_name_repeated_1000_times() -> None:
    # The same damaged name line in 1,000 records that differ in ts: one fix pass covers them all.
    records = [_record(b'aten::to "cuda', EPOCH_US + 10 * i) for i in range(1000)]
    result = _check_repair(
        _document([*records, *_good(2, start=1000)]), "unescaped quotes in strings escaped (1000)"
    )
    assert _names(result) == ['aten::to "cuda'] * 1000 + ["aten::mm"] * 2
    assert result.events.get_column("start_ns").to_list()[:3] == [
        EPOCH_US * 1000 + 10_000 * i for i in range(3)
    ]


def test_unescaped_quote_pairs_repeated_1000_times() -> None:
    records = [_record(b'step "fwd" done', EPOCH_US + 10 * i, cat=b"python_function") for i in range(1000)]
    result = _check_repair(_document(records), "unescaped quotes in strings escaped (2000)")
    assert _names(result) == ['step "fwd" done'] * 1000


def test_raw_control_characters_in_strings() -> None:
    bad = _record(b"aten::mm\tfused\x01", EPOCH_US + 5)
    result = _check_repair(_document([bad, *_good(1, start=1)]), "control characters in strings escaped (2)")
    assert _names(result) == ["aten::mm\tfused\x01", "aten::mm"]


def test_raw_newline_inside_a_string() -> None:
    bad = _record(b"first line\nsecond line", EPOCH_US + 5)
    result = _check_repair(_document([bad, *_good(1, start=1)]), "control characters in strings escaped (1)")
    assert _names(result) == ["first line\nsecond line", "aten::mm"]


def test_bare_na_and_nan_values() -> None:
    na = _record(
        b"ncclKernel_AllReduce", EPOCH_US, cat=b"kernel", extra=b',\n    "args": {"stream": 7, "queued": N/A}'
    )
    nan = _record(b"aten::add", EPOCH_US + 10, extra=b',\n    "args": {"External id": NaN}')
    result = _check_repair(
        _document([na, nan, *_good(1, start=2)]), "bare N/A/NaN/Infinity values replaced by null (2)"
    )
    assert _names(result) == ["ncclKernel_AllReduce", "aten::add", "aten::mm"]
    assert result.events.get_column("stream").to_list() == [7, None, None]
    assert result.events.get_column("external_id").to_list() == [None, None, None]


def test_bare_nan_duration_drops_that_event_with_a_warning() -> None:
    bad = _record(b"aten::add", EPOCH_US, extra=b"").replace(b'"dur": 3', b'"dur": NaN')
    data = _document([bad, *_good(2, start=1)])
    result = _parse(data)
    assert _names(result) == ["aten::mm", "aten::mm"]
    assert result.warnings == [
        f"{SOURCE}: repaired malformed JSON: bare N/A/NaN/Infinity values replaced by null (1)",
        f"{SOURCE}: dropped 1 events without ts or dur",
    ]


def test_windows_single_backslashes() -> None:
    bad = _record(b"C:\\Users\\me\\code\\main.py(3): <module>", EPOCH_US, cat=b"python_function")
    result = _check_repair(
        _document([bad, *_good(1, start=1)]), "single backslashes (Windows paths) doubled (4)"
    )
    assert _names(result) == ["C:\\Users\\me\\code\\main.py(3): <module>", "aten::mm"]


@pytest.mark.parametrize(
    "cut_after",
    [
        b'"ph": "X", "cat": "cpu_op", "na',  # inside a key
        b'"ts": 170000000',  # inside a number
        b'"dur": 3',  # before the record's closing brace
        b"  {\n",  # just after the record opened
    ],
)
def test_file_cut_off_mid_record(cut_after: bytes) -> None:
    data = _document([*_good(3), _record(b"aten::relu", EPOCH_US + 100)])
    last = data.rindex(b"  {\n")  # where the fourth record starts
    truncated = data[: data.index(cut_after, last) + len(cut_after)]
    assert b"aten::relu" not in truncated or b"  }" not in truncated[last:]
    result = _check_repair(truncated, "file cut off mid-record, closed after the last complete event (1)")
    assert _names(result) == ["aten::mm"] * 3
    assert result.events.get_column("start_ns").to_list() == [(EPOCH_US + 10 * i) * 1000 for i in range(3)]


def test_file_cut_off_after_a_complete_record() -> None:
    data = _document(_good(5))
    truncated = data[: data.index(b"  ],")]  # the array and the document never closed
    result = _check_repair(truncated, "file cut off mid-record, closed after the last complete event (1)")
    assert len(_names(result)) == 5


def test_trailing_garbage_after_the_document() -> None:
    data = _document(_good(2)) + b"INFO:2024-05-22 profiler stopped\n"
    garbage = len(b"INFO:2024-05-22 profiler stopped\n")
    result = _check_repair(data, f"bytes after the end of the document dropped ({garbage})")
    assert _names(result) == ["aten::mm", "aten::mm"]


def test_trailing_brace_after_the_document() -> None:
    data = _document(_good(2)) + b"}"
    result = _check_repair(data, "bytes after the end of the document dropped (1)")
    assert len(_names(result)) == 2


def test_invalid_utf8() -> None:
    bad = _record(b"aten::\xff\xfemm \xe2\x82", EPOCH_US)  # two stray bytes and a cut euro sign
    data = _document([bad, _record("µs ✓ \ufffd".encode(), EPOCH_US + 10)])
    before = bytes(data)
    repaired = repair_json(data, source=SOURCE)
    assert repaired.warnings == [f"{SOURCE}: repaired malformed JSON: invalid UTF-8 sequences replaced (3)"]
    result = _parse(data)
    assert result.warnings == repaired.warnings
    assert _names(result) == ["aten::\ufffd\ufffdmm \ufffd", "µs ✓ \ufffd"]
    assert data == before


def test_several_kinds_of_damage_give_one_warning_each() -> None:
    records = [
        _record(b'say "hi', EPOCH_US),
        _record(b"tab\there", EPOCH_US + 10),
        _record(b'again "hi', EPOCH_US + 20),
    ]
    data = _document(records) + b"garbage"
    result = _parse(data)
    assert sorted(result.warnings) == [
        f"{SOURCE}: repaired malformed JSON: bytes after the end of the document dropped (7)",
        f"{SOURCE}: repaired malformed JSON: control characters in strings escaped (1)",
        f"{SOURCE}: repaired malformed JSON: unescaped quotes in strings escaped (2)",
    ]
    assert _names(result) == ['say "hi', "tab\there", 'again "hi']


@pytest.mark.parametrize(
    ("data", "where", "what"),
    [
        # A missing comma looks like an unescaped quote; the guess fails and the error points at
        # the file's own damage, not at the state of the attempted repair.
        (b'{"traceEvents": [\n{"ph": "X" "cat": 1}\n]}', "2:12", "expected ',' or '}'"),
        (b'{"traceEvents": [\n  {"ph": @}\n]}', "2:10", "invalid character"),
        (b'{"traceEvents": [\n  {"ph": "X", "dur": 1, "ts": }\n]}', "2:31", "invalid character"),
        (b'{"traceEvents": [{"ph": "X", "cat": "kernel", "na', "1:50", "input data was truncated"),
        (b'{"a": [1, 2,, 3]}', "1:13", "invalid character"),
    ],
)
def test_unrepairable_damage_names_file_line_and_column(data: bytes, where: str, what: str) -> None:
    expected = f"{SOURCE}:{where}: {what}; the file is not valid JSON and cannot be repaired safely"
    with pytest.raises(TraceFormatError) as direct:
        repair_json(data, source=SOURCE)
    assert str(direct.value) == expected
    with pytest.raises(TraceFormatError) as parsed:
        _parse(data)
    assert str(parsed.value) == expected


def test_not_json_at_all() -> None:
    with pytest.raises(
        TraceFormatError, match=r"^rank0\.json:1:1: not JSON \(invalid character\); expected a PyTorch"
    ):
        repair_json(b"hello world", source=SOURCE)


def test_too_many_distinct_damaged_records() -> None:
    # Every record damaged differently: repairing them one pass each would be unbounded.
    records = [_record(f'op{i} "x'.encode(), EPOCH_US + i) for i in range(500)]
    with pytest.raises(
        TraceFormatError, match=r"^rank0\.json:\d+:\d+: too many malformed records to repair safely"
    ):
        _parse(_document(records))


def test_valid_json_is_returned_unchanged() -> None:
    data = _document(_good(2))
    repaired = repair_json(data, source=SOURCE)
    assert repaired.data == data
    assert repaired.warnings == []


CASES = {
    "quotes": _document([*_good(1), _record(b'log("x")', EPOCH_US + 5, cat=b"python_function")]),
    "control": _document([_record(b"a\x02b", EPOCH_US)]),
    "bare": _document([_record(b"a", EPOCH_US, extra=b', "args": {"x": N/A}')]),
    "backslash": _document([_record(b"C:\\Users\\x.py", EPOCH_US)]),
    "truncated": _document(_good(3))[:-40],
    "garbage": _document(_good(1)) + b"\x00\x00",
    "utf8": _document([_record(b"\xc3(", EPOCH_US)]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_load_never_modifies_the_file(tmp_path: Path, case: str) -> None:
    path = tmp_path / "rank0.json"
    path.write_bytes(CASES[case])
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    mtime = path.stat().st_mtime_ns
    trace = load(path)
    assert trace.events.height >= 1
    assert trace.warnings
    assert all(re.match(rf"^{re.escape(str(path))}: ", w) for w in trace.warnings)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest
    assert path.stat().st_mtime_ns == mtime
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank0.json"]  # no repaired copy left behind
