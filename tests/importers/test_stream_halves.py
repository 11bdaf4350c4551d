"""A trace read in two halves (a helper's and this process's) gives exactly what the serial reader gives.

Every comparison is with the serial chunked reader on the same file, frame by frame
(``assert_frame_equal``) and warning by warning. Most tests run both halves in this process (an
executor that runs its items here), so that many split points are cheap to try; the helper process
itself is tried in the last tests.
"""

from __future__ import annotations

import gzip
import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest
from polars.testing import assert_frame_equal

import timeline.importers.stream
import timeline.policy
from tests.builders import PARAM, REPO, TRACES, stream_trace_text
from timeline.errors import TraceFormatError
from timeline.executors import LocalExecutor
from timeline.importers.files import TraceText
from timeline.importers.kineto import parse_kineto
from timeline.importers.repair import HUGE_NUMBERS, INVALID_UTF8
from timeline.importers.result import FileResult, ImportOptions
from timeline.importers.stream import HalfResult, decode_half, parse_kineto_stream

BOUNDARY = timeline.importers.stream._BOUNDARY

T = TypeVar("T")
R = TypeVar("R")

GPU_HEADER = [
    TRACES / "kineto" / "hta_nccl_parser_config" / "nccl_data.json.gz",
    TRACES / "kineto" / "hta_ns_resolution" / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    TRACES / "kineto" / "hta_amd_mi250" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    next(PARAM.glob("worker0_*.json.gz")),
    TRACES / "kineto" / "kineto_tb_plugin_resnet50_torch19" / "worker0.1623143089861.pt.trace.json.gz",
]
"""Real traces whose header lists GPUs (their halves are read with overlap_only too)."""
NO_GPU_HEADER = [
    TRACES / "kineto" / "hta_trace_filter_2rank" / "sampled_rank-0.json.gz",
    next((REPO / "sample_traces" / "ddp_gloo").glob("rank0*.json.gz")),
]
TARGET = TRACES / "kineto" / "hta_df_index_resolver" / "df_index_resolver.json.gz"
OPTIONS = {"all": ImportOptions(), "overlap_only": ImportOptions(overlap_only=True)}


class Helper:
    """A stand-in for a started :class:`LocalExecutor`: its helper takes the half it is handed at once
    (``ready``), or only once this process is done (``ready=False``: busy, or slow to start)."""

    def __init__(self, *, ready: bool = True) -> None:
        self.ready = ready
        self.results: list[Any] = []
        self.waiting: list[tuple[Callable[[Any], Any], Any, Future[Any]]] = []
        self.stopped = False

    def submit(self, fn: Callable[[T], R], item: T) -> Future[R]:
        future: Future[R] = Future()
        self.waiting.append((fn, item, future))
        if self.ready:
            self._run()
        return future

    def stop(self) -> None:
        self.stopped = True
        self._run()  # what was handed over still runs, late

    def _run(self) -> None:
        for fn, item, future in self.waiting:
            try:
                result = fn(item)
            except Exception as exc:
                self.results.append(exc)
                future.set_exception(exc)
            else:
                self.results.append(result)
                future.set_result(result)
        self.waiting = []


class BrokenHelper:
    """A helper that died: handing it a task fails as a broken pool does."""

    def submit(self, fn: Callable[[T], R], item: T) -> Future[R]:
        raise BrokenProcessPool("A process in the process pool was terminated abruptly")

    def stop(self) -> None:
        pass


def _as_executor(helper: Helper | BrokenHelper) -> LocalExecutor:
    """The stand-in, typed as what it stands in for (it has what the reader uses: submit, stop)."""
    return cast("LocalExecutor", helper)


def _same(expected: FileResult, got: FileResult) -> None:
    assert_frame_equal(expected.events, got.events)
    assert (expected.warnings, expected.skipped, expected.clock) == (got.warnings, got.skipped, got.clock)
    assert (expected.rank, expected.world_size, expected.backend, expected.host) == (
        got.rank,
        got.world_size,
        got.backend,
        got.host,
    )


def _halves(
    path: Path, options: ImportOptions, chunk_bytes: int | None = None, *, ready: bool = True
) -> tuple[FileResult, bool]:
    """Read ``path`` in halves here; return the result and whether the helper's half split the text."""
    helper = Helper(ready=ready)
    result = parse_kineto_stream(
        path, source=str(path), options=options, chunk_bytes=chunk_bytes, helper=_as_executor(helper)
    )
    assert helper.stopped
    assert not list(Path(timeline.importers.stream._shared_directory()).glob("timeline-half-*"))
    return result, ready and [r.split for r in helper.results if isinstance(r, HalfResult)] == [True]


def _serial(path: Path, options: ImportOptions, chunk_bytes: int | None = None) -> FileResult:
    return parse_kineto_stream(path, source=str(path), options=options, chunk_bytes=chunk_bytes)


# --- real traces ---------------------------------------------------------------------------------


@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
@pytest.mark.parametrize("path", GPU_HEADER, ids=lambda p: p.name[:30])
def test_halves_equal_the_serial_reader_on_real_traces(path: Path, options: ImportOptions) -> None:
    result, split = _halves(path, options, chunk_bytes=1 << 16)
    assert split
    _same(_serial(path, options, chunk_bytes=1 << 16), result)


def test_halves_equal_the_serial_reader_on_the_54_mb_trace() -> None:
    options = ImportOptions(overlap_only=True)
    result, split = _halves(TARGET, options)
    assert split
    _same(_serial(TARGET, options), result)
    assert result.skipped > 50_000  # CPU operators in the first half, kernels in the second


@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
@pytest.mark.parametrize("path", NO_GPU_HEADER, ids=lambda p: p.name[:30])
def test_a_header_without_gpus_is_read_whole_by_the_first_half_for_the_overlap(
    path: Path, options: ImportOptions
) -> None:
    """Whether CPU operators are skipped depends on kernels before them: not split with overlap_only."""
    result, split = _halves(path, options, chunk_bytes=1 << 16)
    assert split == (not options.overlap_only)
    _same(_serial(path, options, chunk_bytes=1 << 16), result)


def test_a_header_listing_gpus_without_kernels_keeps_the_cpu_operators(tmp_path: Path) -> None:
    """deviceProperties says GPU, no kernel comes in either half: read again keeping everything."""
    source = next((REPO / "sample_traces" / "ddp_gloo").glob("rank0*.json.gz"))
    text = gzip.decompress(source.read_bytes())
    text = text.replace(b'"deviceProperties": []', b'"deviceProperties": [{"id": 0, "name": "GPU"}]', 1)
    path = tmp_path / "rank0.json.gz"
    path.write_bytes(gzip.compress(text))
    options = ImportOptions(overlap_only=True)
    result, _ = _halves(path, options, chunk_bytes=1 << 14)
    _same(parse_kineto(text, source=str(path), options=options), result)
    assert result.skipped == 0


# --- the split point -------------------------------------------------------------------------------


@pytest.mark.parametrize("metadata_after", [False, True], ids=["metadata-before", "metadata-after"])
@pytest.mark.parametrize("packed", [False, True], ids=["plain", "gzip"])
def test_every_split_point_gives_the_serial_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, metadata_after: bool, packed: bool
) -> None:
    """Every event's name holds ``}, {``: split points in a string fall back to the serial reader."""
    text = stream_trace_text(400, metadata_after=metadata_after).encode()
    path = tmp_path / ("rank3.json.gz" if packed else "rank3.json")
    path.write_bytes(gzip.compress(text) if packed else text)
    serial = _serial(path, ImportOptions(), chunk_bytes=4096)
    outcomes = set()
    for share in [i / 40 for i in range(41)] + [1.5]:
        monkeypatch.setattr(timeline.importers.stream, "SPLIT_SHARE", share)
        result, split = _halves(path, ImportOptions(), chunk_bytes=4096)
        _same(serial, result)
        outcomes.add(split)
    assert outcomes == {True, False}  # some points split the text, some are inside a name


def test_a_split_point_inside_an_event_falls_back_to_the_serial_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``}, {`` between the objects of a list in an event's args: the second half alone would decode.

    It would read ``{"b": 2}]}}, ...`` as an array of one value and the rest as text after the array;
    the first half, cut inside the event, is what tells.
    """
    text = stream_trace_text(300, metadata_after=False).replace(
        '"correlation": ', '"shapes": [{"a": 1}, {"b": 2}], "correlation": '
    )
    path = tmp_path / "rank3.json"
    path.write_text(text)
    serial = _serial(path, ImportOptions(), chunk_bytes=4096)
    inside = text.index('{"b": 2}', len(text) // 2) - 3
    monkeypatch.setattr(timeline.importers.stream, "SPLIT_SHARE", inside / len(text))
    with pytest.raises(timeline.importers.stream._SplitFailedError):
        decode_half(timeline.importers.stream.Half(path, str(path), ImportOptions(), inside, True, 4096))
    helper = Helper()
    result = parse_kineto_stream(path, source=str(path), chunk_bytes=4096, helper=_as_executor(helper))
    [failed] = helper.results  # the first half failed: read serially
    assert isinstance(failed, timeline.importers.stream._SplitFailedError)
    _same(serial, result)
    assert result.events.height == 300


def test_the_split_point_found_does_not_depend_on_the_reads(tmp_path: Path) -> None:
    text = stream_trace_text(200, metadata_after=False).encode()
    start = text.index(b"[") + 1
    path = tmp_path / "t.json"
    path.write_bytes(text)
    for split_at in range(start, len(text), 997):
        found = set()
        for size in (1, 7, 4096, 1 << 20):
            with TraceText(path) as handle:
                handle.read(start)
                first = timeline.importers.stream._HalfText(handle, b"", start, split_at, True)
                parts = []
                while part := first.read(size):
                    parts.append(part)
            found.add((first.cut, first.resume, b"".join(parts)))
        [(cut, resume, read)] = found
        boundary = BOUNDARY.search(text, split_at)
        if boundary is not None:
            assert (cut, resume) == (boundary.start() + 1, boundary.end() - 1)
            assert read == text[start:cut] + b"]"
        else:
            assert cut == -1
            assert read == text[start:]


def test_a_split_point_beyond_the_text_reads_it_all_in_the_first_half(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(timeline.importers.stream, "SPLIT_SHARE", 10.0)
    path = tmp_path / "rank3.json.gz"
    path.write_bytes(gzip.compress(stream_trace_text(300, metadata_after=True).encode()))
    helper = Helper()
    result = parse_kineto_stream(path, source=str(path), chunk_bytes=4096, helper=_as_executor(helper))
    [first] = helper.results
    assert (first.split, first.taken) == (False, True)
    _same(_serial(path, ImportOptions(), chunk_bytes=4096), result)


# --- hostile files ---------------------------------------------------------------------------------


@pytest.mark.parametrize("where", [0.3, 0.7], ids=["in-the-first-half", "in-the-second-half"])
def test_a_file_cut_off_gives_the_serial_result(tmp_path: Path, where: float) -> None:
    text = stream_trace_text(500, metadata_after=False).encode()
    plain = tmp_path / "cut.json"
    plain.write_bytes(text[: int(len(text) * where)])
    packed = gzip.compress(text)
    gz = tmp_path / "cut.json.gz"
    gz.write_bytes(packed[: int(len(packed) * where)])
    for path in (plain, gz):
        result, _ = _halves(path, ImportOptions(), chunk_bytes=4096)
        expected = _serial(path, ImportOptions(), chunk_bytes=4096)
        _same(expected, result)
        assert any("cut off" in w for w in result.warnings)


def test_blank_text_and_bytes_after_the_gzip_data_are_noted_once(tmp_path: Path) -> None:
    """Notes come from the half that read to the end: the whole file's, once."""
    # long enough that the split point (SPLIT_SHARE of the text) lies well past the padding
    text = stream_trace_text(6000, metadata_after=False).encode()
    at = text.index(b'{"ph"', len(text) // 10)  # in the first part, which the second half skips
    padded = text[:at] + b" " * (300 * 1024) + text[at:]
    path = tmp_path / "rank3.json.gz"
    path.write_bytes(gzip.compress(padded) + b"job finished\n")
    result, split = _halves(path, ImportOptions(), chunk_bytes=4096)
    assert split
    _same(_serial(path, ImportOptions(), chunk_bytes=4096), result)
    assert len(result.warnings) == 2


@pytest.mark.parametrize("line", [40, 320], ids=["in-the-first-half", "in-the-second-half"])
def test_damage_is_reported_as_the_serial_reader_reports_it(tmp_path: Path, line: int) -> None:
    lines = stream_trace_text(400, metadata_after=False).split("\n")
    lines[line] = lines[line].replace('"pid": 0', '"pid": 0 0')
    path = tmp_path / "bad.json"
    path.write_text("\n".join(lines))
    with pytest.raises(TraceFormatError) as serial:
        _serial(path, ImportOptions(), chunk_bytes=4096)
    with pytest.raises(TraceFormatError) as halves:
        _halves(path, ImportOptions(), chunk_bytes=4096)
    assert str(halves.value) == str(serial.value)
    assert str(serial.value).startswith(f"{path}:{line + 1}:")


def test_values_repaired_in_both_halves_are_counted_as_the_serial_reader_counts_them(tmp_path: Path) -> None:
    """Invalid UTF-8 and numbers beyond a double, in each half: the same repairs, the same counts."""
    lines = stream_trace_text(400, metadata_after=False).encode().split(b"\n")
    for i in (30, 350):
        lines[i] = (
            lines[i].replace(b" in a name", b" in a \xff name").replace(b'"dur": 2.25', b'"dur": 1e400')
        )
    path = tmp_path / "rank3.json"
    path.write_bytes(b"\n".join(lines))
    result, split = _halves(path, ImportOptions(), chunk_bytes=4096)
    expected = _serial(path, ImportOptions(), chunk_bytes=4096)
    _same(expected, result)
    assert split
    assert [w for w in result.warnings if "repaired malformed JSON" in w] == [
        f"{path}: repaired malformed JSON: {INVALID_UTF8} (2)",
        f"{path}: repaired malformed JSON: {HUGE_NUMBERS} (2)",
    ]


# --- the helper ------------------------------------------------------------------------------------


def test_a_helper_that_fails_leaves_the_file_to_the_serial_reader() -> None:
    path = GPU_HEADER[0]
    options = ImportOptions(overlap_only=True)
    broken = _as_executor(BrokenHelper())
    result = parse_kineto_stream(path, source=str(path), options=options, helper=broken)
    _same(_serial(path, options), result)


@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
def test_a_helper_not_started_yet_leaves_both_halves_to_this_process(options: ImportOptions) -> None:
    """Busy, or slow to start: this process claims the helper's half too; the helper, late, skips it."""
    path = GPU_HEADER[0]
    helper = Helper(ready=False)
    result = parse_kineto_stream(path, source=str(path), options=options, helper=_as_executor(helper))
    [late] = helper.results  # run once this process was done: the claim was gone
    assert (late.taken, late.frame) == (False, None)
    _same(_serial(path, options), result)
    again, _ = _halves(path, options, ready=False)
    _same(result, again)


def _started_helper() -> LocalExecutor:
    helper = LocalExecutor(2)
    helper.start(preload="timeline.importers.stream")
    assert helper.started
    return helper


def test_a_half_decoded_by_a_helper_process_comes_back_whole() -> None:
    """Its frames are pickled back from the helper process: the same as decoded here."""
    path = TRACES / "kineto" / "hta_negative_queue_length" / "rank0.json.gz"
    options = ImportOptions(overlap_only=True)
    half = timeline.importers.stream.Half(path, str(path), options, 12_000_000, True, 1 << 20)
    helper = _started_helper()
    try:
        there = helper.submit(decode_half, half).result(timeout=300)
    finally:
        helper.stop()
    here = decode_half(half)
    assert (there.split, there.taken, there.gpu, there.kernels) == (
        here.split,
        here.taken,
        here.gpu,
        here.kernels,
    )
    assert here.frame is not None
    assert there.frame is not None
    assert here.meta is not None
    assert there.meta is not None
    assert_frame_equal(here.frame, there.frame)
    assert_frame_equal(here.meta, there.meta)


def test_halves_with_a_helper_process_equal_the_serial_reader() -> None:
    """Whichever process decodes the first half (the helper, or this one if it is not started yet)."""
    path = TRACES / "kineto" / "hta_negative_queue_length" / "rank0.json.gz"
    options = ImportOptions(overlap_only=True)
    helper = _started_helper()
    result = parse_kineto_stream(path, source=str(path), options=options, helper=helper)
    assert not helper.started  # used once: stopped
    _same(_serial(path, options), result)


def test_a_helper_process_that_died_leaves_the_file_to_the_serial_reader() -> None:
    path = GPU_HEADER[0]
    helper = _started_helper()
    for child in multiprocessing.active_children():
        child.kill()
        child.join(30)
    result = parse_kineto_stream(path, source=str(path), helper=helper)
    _same(_serial(path, ImportOptions()), result)


def test_decode_half_is_a_task_a_process_can_take(tmp_path: Path) -> None:
    """Its argument and result travel between processes (pickled), as the helper's do."""
    import pickle

    path = tmp_path / "rank3.json"
    text = stream_trace_text(50, metadata_after=True)
    path.write_text(text)
    between = text.index("}},\n{", len(text) // 2)  # the end of an event
    half = timeline.importers.stream.Half(path, str(path), ImportOptions(), between + 1, True, 4096)
    result = pickle.loads(pickle.dumps(decode_half(pickle.loads(pickle.dumps(half)))))
    assert result.split
    assert result.frame is not None
    assert result.frame.height > 0


# --- when ------------------------------------------------------------------------------------------


def test_the_policy_reads_one_mid_size_kineto_trace_in_halves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = stream_trace_text(300, metadata_after=False).encode()
    one = tmp_path / "one" / "rank3.json"
    one.parent.mkdir()
    one.write_bytes(text)
    monkeypatch.setattr(timeline.policy, "STREAM_SERIAL_MIN_BYTES", len(text))
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    assert not timeline.policy.reads_in_halves([one])  # polars is imported here: the helper would start alone
    monkeypatch.setattr(timeline.policy, "_polars_imported", lambda: False)  # as in a command, before it
    assert timeline.policy.reads_in_halves([one])
    assert timeline.policy.reads_in_halves([one.parent])
    assert not timeline.policy.reads_in_halves([one], workers=1)
    assert not timeline.policy.reads_in_halves([one], workers=2)  # the helper would compete: slower
    assert not timeline.policy.reads_in_halves([one, PARAM])
    assert not timeline.policy.reads_in_halves([tmp_path / "missing.json"])
    monkeypatch.setattr(timeline.policy, "STREAM_SERIAL_MIN_BYTES", len(text) + 1)
    assert not timeline.policy.reads_in_halves([one])  # read whole
    horovod = tmp_path / "timeline.json"
    horovod.write_bytes((REPO / "sample_traces" / "horovod" / "horovod_v021.json").read_bytes())
    monkeypatch.setattr(timeline.policy, "STREAM_SERIAL_MIN_BYTES", 0)
    assert not timeline.policy.reads_in_halves([horovod])
    monkeypatch.setattr(timeline.policy, "STREAM_MIN_BYTES", len(text))
    assert not timeline.policy.reads_in_halves([one])  # rank by rank instead


def test_the_analysis_of_one_trace_reads_it_in_halves_with_the_same_results(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from timeline.run import Inputs, Needs, Run

    path = TRACES / "kineto" / "hta_nccl_parser_config" / "nccl_data.json.gz"
    inputs = Inputs(paths=[str(path)])
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    monkeypatch.setattr(timeline.policy, "STREAM_SERIAL_MIN_BYTES", 1 << 20)
    monkeypatch.setattr(timeline.policy, "_polars_imported", lambda: False)  # as in a command
    halves: list[FileResult | None] = []
    original = timeline.importers.stream._parse_halves

    def spy(*args: Any, **kwargs: Any) -> FileResult | None:
        halves.append(original(*args, **kwargs))
        return halves[-1]

    monkeypatch.setattr(timeline.importers.stream, "_parse_halves", spy)
    read_in_halves = Run(inputs, needs=Needs(communication=False)).read()
    assert len(halves) == 1
    assert halves[0] is not None
    monkeypatch.setattr(timeline.policy, "reads_in_halves", lambda paths, **kwargs: False)
    serial = Run(inputs, needs=Needs(communication=False)).read()
    assert len(halves) == 1
    assert_frame_equal(serial.trace.events, read_in_halves.trace.events)
    assert_frame_equal(serial.trace.files, read_in_halves.trace.files)
    assert serial.trace.warnings == read_in_halves.trace.warnings
    for name in ("ranks", "iterations", "collectives", "windows"):
        assert_frame_equal(getattr(serial.overlap, name), getattr(read_in_halves.overlap, name))
