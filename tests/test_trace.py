"""``timeline.load``: what it accepts, how it resolves ranks, and the Parquet round trip."""

from __future__ import annotations

import json
import re
import shutil
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import timeline.policy
import timeline.workers
from timeline.errors import RankError, TraceContentError, TraceFormatError, UsageError
from timeline.schema import EVENTS_SCHEMA, FILES_SCHEMA
from timeline.trace import Trace, load

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
PARAM = TRACES / "kineto" / "param_dlrm_8rank"
HTA_2RANK = TRACES / "kineto" / "hta_trace_filter_2rank"
EPOCH_US = 1_700_000_000_000_000


def _kineto(rank: int | None = None, *, events: int = 3, offset_us: int = 0) -> bytes:
    """A small valid Kineto trace: a kernel per event, with distributedInfo when ``rank`` is given."""
    records: list[dict[str, Any]] = [
        {
            "ph": "X",
            "cat": "kernel",
            "name": f"gemm{i}",
            "pid": 0,
            "tid": 7,
            "ts": EPOCH_US + offset_us + 10 * i,
            "dur": 5,
            "args": {"device": 0, "stream": 7, "correlation": i},
        }
        for i in range(events)
    ]
    doc: dict[str, Any] = {"schemaVersion": 1, "traceEvents": records}
    if rank is not None:
        doc["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": 4}
    return json.dumps(doc).encode()


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _param_files() -> list[Path]:
    files = sorted(PARAM.glob("*.pt.trace.json.gz"))
    assert len(files) == 8, f"the PARAM traces are missing from {PARAM}"
    return files


# --- what load() accepts ------------------------------------------------------------------------


def test_load_a_directory() -> None:
    trace = load(PARAM)
    assert trace.ranks == list(range(8))
    files = trace.files
    assert files.schema == FILES_SCHEMA
    assert files.get_column("rank").to_list() == list(range(8))
    assert files.get_column("path").to_list() == [str(p) for p in _param_files()]
    assert set(files.get_column("rank_from")) == {"distributedInfo"}
    assert set(files.get_column("world_size")) == {8}
    assert set(files.get_column("format")) == {"kineto"}
    assert set(files.get_column("clock")) == {"epoch"}
    assert trace.warnings == ()
    events = trace.events
    assert events.schema == EVENTS_SCHEMA
    assert events.get_column("rank").null_count() == 0
    per_rank = events.group_by("rank").len().sort("rank")
    assert per_rank.get_column("len").to_list() == files.get_column("events").to_list()
    # Sorted by rank, then start.
    assert events.get_column("rank").is_sorted()
    for (rank,), group in events.group_by("rank"):
        assert group.get_column("start_ns").is_sorted(), rank
    # 8 NCCL kernels on every rank.
    comm = events.filter(pl.col("kind") == "communication").group_by("rank").len().sort("rank")
    assert comm.get_column("len").to_list() == [8] * 8


def test_load_a_glob_pattern() -> None:
    trace = load(str(PARAM / "worker[0-3]_*.json.gz"))
    assert trace.ranks == [0, 1, 2, 3]


def test_load_a_list_of_files() -> None:
    files = _param_files()
    trace = load([files[5], files[0]])
    assert trace.ranks == [0, 5]
    assert trace.files.get_column("path").to_list() == [str(files[0]), str(files[5])]


def test_load_the_same_file_twice_counts_once() -> None:
    files = _param_files()
    trace = load([files[2], str(files[2]), PARAM / ".." / PARAM.name / files[2].name])
    assert trace.ranks == [2]


def test_load_reports_progress() -> None:
    calls: list[tuple[str, int, int]] = []
    load(HTA_2RANK, progress=lambda label, done, total: calls.append((label, done, total)))
    assert calls == [("sampled_rank-0.json.gz", 1, 2), ("sampled_rank-1.json.gz", 2, 2)]


# --- ranks ---------------------------------------------------------------------------------------


def test_rank_from_distributed_info() -> None:
    trace = load(HTA_2RANK)
    assert trace.ranks == [0, 1]
    assert set(trace.files.get_column("world_size")) == {128}


@pytest.mark.parametrize(
    ("name", "rank"),
    [
        ("rank3.json", 3),
        ("rank-3.json", 3),
        ("rank_3.json", 3),
        ("RANK3.json", 3),
        ("worker3.pt.trace.json", 3),
        ("worker-12.1694128201545.pt.trace.json", 12),
        ("host_rank7.json.gz", 7),
        ("trace.rank_0.json", 0),
    ],
)
def test_rank_from_file_name(tmp_path: Path, name: str, rank: int) -> None:
    path = _write(tmp_path / name, _kineto())
    trace = load(path)
    assert trace.ranks == [rank]
    assert trace.files.get_column("rank_from").to_list() == ["file name"]
    assert set(trace.events.get_column("rank")) == {rank}
    assert trace.warnings == ()


@pytest.mark.parametrize(
    "name", ["frank3.json", "myrank3.json", "host_1234.1699.pt.trace.json", "ranking.json"]
)
def test_no_rank_in_name_is_an_error_naming_the_file(tmp_path: Path, name: str) -> None:
    # among several files (the only file of the inputs is rank 0: tests/test_single_rankless.py)
    path = _write(tmp_path / name, _kineto())
    _write(tmp_path / "zz_other.json", _kineto())
    with pytest.raises(RankError) as error:
        load([path, tmp_path / "zz_other.json"])
    message = str(error.value)
    assert message.startswith(f"{path}: no rank:")
    assert "--rank-regex" in message
    assert "--rank" in message


def test_rank_regex(tmp_path: Path) -> None:
    for gpu in (0, 5):
        _write(tmp_path / f"node2_gpu{gpu}.json", _kineto())
    trace = load(tmp_path, rank_regex=r"node\d+_gpu(\d+)")
    assert trace.ranks == [0, 5]
    assert set(trace.files.get_column("rank_from")) == {"--rank-regex"}


def test_rank_regex_that_does_not_match_is_a_rank_error(tmp_path: Path) -> None:
    path = _write(tmp_path / "node2_gpu0.json", _kineto())
    with pytest.raises(RankError, match=rf"^{path}: no rank"):
        load(path, rank_regex=r"rank(\d+)")


@pytest.mark.parametrize(
    ("regex", "what"), [("(", "not a valid regex"), ("gpu\\d+", "needs one capturing group")]
)
def test_bad_rank_regex(tmp_path: Path, regex: str, what: str) -> None:
    path = _write(tmp_path / "gpu0.json", _kineto())
    with pytest.raises(RankError, match=rf"^--rank-regex {re.escape(repr(regex))}: {what}"):
        load(path, rank_regex=regex)


def test_explicit_rank_for_a_single_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "host_1234.1699.pt.trace.json", _kineto())
    trace = load(path, rank=6)
    assert trace.ranks == [6]
    assert trace.files.get_column("rank_from").to_list() == ["--rank"]
    assert set(trace.events.get_column("rank")) == {6}


def test_explicit_rank_with_several_files_is_an_error(tmp_path: Path) -> None:
    _write(tmp_path / "a.json", _kineto())
    _write(tmp_path / "b.json", _kineto())
    with pytest.raises(RankError, match=r"--rank applies to a single file; 2 files given"):
        load(tmp_path, rank=1)


def test_missing_rank_is_never_a_silent_zero(tmp_path: Path) -> None:
    first = _write(tmp_path / "a.json", _kineto())
    _write(tmp_path / "b.json", _kineto())
    with pytest.raises(RankError, match=rf"^{first}: no rank"):
        load(tmp_path)


def test_two_files_claiming_one_rank(tmp_path: Path) -> None:
    first = _write(tmp_path / "a.json", _kineto(rank=1))
    second = _write(tmp_path / "b.json", _kineto(rank=1))
    with pytest.raises(RankError) as error:
        load(tmp_path)
    message = str(error.value)
    assert message.startswith(f"{second}: rank 1 is also claimed by {first}")


def test_two_files_claiming_one_rank_by_name_and_info(tmp_path: Path) -> None:
    _write(tmp_path / "rank2.json", _kineto())
    _write(tmp_path / "x.json", _kineto(rank=2))
    with pytest.raises(RankError, match="rank 2 is also claimed by"):
        load(tmp_path)


def test_distributed_info_wins_over_the_name_with_a_warning(tmp_path: Path) -> None:
    path = _write(tmp_path / "rank1.json", _kineto(rank=2))
    trace = load(path)
    assert trace.ranks == [2]
    assert trace.files.get_column("rank_from").to_list() == ["distributedInfo"]
    assert trace.warnings == (f"{path}: file name says rank 1 but distributedInfo.rank is 2; used 2",)


# --- bad input -----------------------------------------------------------------------------------


def test_empty_trace_events(tmp_path: Path) -> None:
    path = _write(tmp_path / "rank0.json", b'{"schemaVersion": 1, "traceEvents": []}')
    with pytest.raises(TraceContentError, match=rf"^{path}: traceEvents holds no events"):
        load(path)


def test_only_metadata_events(tmp_path: Path) -> None:
    doc = {"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}}]}
    path = _write(tmp_path / "rank0.json", json.dumps(doc).encode())
    with pytest.raises(TraceContentError, match=rf"^{path}: traceEvents holds no events"):
        load(path)


def test_directory_without_traces(tmp_path: Path) -> None:
    _write(tmp_path / "notes.txt", b"hello")
    _write(tmp_path / "manifest.json", b"{}")  # the capture manifest is not a trace
    with pytest.raises(UsageError, match=rf"^{tmp_path}: directory holds no trace files"):
        load(tmp_path)


def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "rank0.json"
    with pytest.raises(UsageError, match=rf"^{missing}: no such file or directory"):
        load(missing)


def test_pattern_matching_nothing(tmp_path: Path) -> None:
    pattern = str(tmp_path / "*.json")
    with pytest.raises(UsageError, match="pattern matches no file"):
        load(pattern)


def test_no_paths() -> None:
    with pytest.raises(UsageError, match="no trace given"):
        load([])


def test_not_a_trace(tmp_path: Path) -> None:
    path = _write(tmp_path / "rank0.json", b"\n\nhello")
    with pytest.raises(TraceFormatError, match=rf"^{path}:3:1: not a trace"):
        load(path)


# --- Parquet --------------------------------------------------------------------------------------


def test_parquet_round_trip(tmp_path: Path) -> None:
    original = load(PARAM)
    target = tmp_path / "run.parquet"
    original.write_parquet(target)
    assert target.read_bytes()[:4] == b"PAR1"
    back = load(target)
    assert back.events.schema == original.events.schema == EVENTS_SCHEMA
    assert_frame_equal(back.events, original.events, categorical_as_str=False)
    assert_frame_equal(back.files, original.files)
    assert back.warnings == original.warnings
    assert back.ranks == original.ranks


def test_parquet_keeps_warnings(tmp_path: Path) -> None:
    path = _write(tmp_path / "rank1.json", _kineto(rank=2))
    original = load(path)
    assert len(original.warnings) == 1
    original.write_parquet(tmp_path / "run.parquet")
    assert load(tmp_path / "run.parquet").warnings == original.warnings


def test_parquet_and_its_source_claim_the_same_ranks(tmp_path: Path) -> None:
    files = _param_files()
    load(files[0]).write_parquet(tmp_path / "rank0.parquet")
    with pytest.raises(RankError, match="rank 0 is also claimed by"):
        load([tmp_path / "rank0.parquet", files[0]])


def test_foreign_parquet_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.parquet"
    pl.DataFrame({"a": [1, 2]}).write_parquet(path)
    with pytest.raises(TraceFormatError, match=rf"^{path}: a Parquet file not written by timeline convert"):
        load(path)


# --- parallel parsing -----------------------------------------------------------------------------


class _CountingPool(ProcessPoolExecutor):
    """A process pool that records that it was used."""

    started: list[int] = []  # noqa: RUF012 - shared record of the test

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _CountingPool.started.append(kwargs.get("max_workers") or 0)
        super().__init__(*args, **kwargs)


def test_parallel_parse_gives_the_same_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inputs = tmp_path / "run"
    inputs.mkdir()
    for path in _param_files()[:3]:
        shutil.copy(path, inputs / path.name)
    _write(inputs / "rank9.json", _kineto(events=5))
    serial = load(inputs, workers=1)

    monkeypatch.setattr(timeline.policy, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(timeline.workers, "ProcessPoolExecutor", _CountingPool)
    _CountingPool.started.clear()
    parallel = load(inputs, workers=2)
    # the parallel path really ran: one spawned helper, this process being the other worker
    assert _CountingPool.started == [1]

    assert parallel.ranks == serial.ranks == [0, 1, 2, 9]
    assert_frame_equal(parallel.events, serial.events, categorical_as_str=False)
    assert_frame_equal(parallel.files, serial.files)
    assert parallel.warnings == serial.warnings


def test_trace_is_immutable() -> None:
    trace = Trace(events=pl.DataFrame(schema=EVENTS_SCHEMA), files=pl.DataFrame(schema=FILES_SCHEMA))
    with pytest.raises(AttributeError):
        trace.warnings = ("x",)  # type: ignore[misc]
    assert trace.ranks == []
