"""Streaming import gives exactly what the whole-file importer gives, chunk size regardless."""

from __future__ import annotations

import gzip
from collections.abc import Callable
from functools import partial
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import timeline.importers.stream
from tests.builders import TRACES, stream_trace_text
from timeline.errors import TimelineError, TraceContentError, TraceFormatError
from timeline.importers.files import read_trace_bytes
from timeline.importers.kineto import parse_kineto
from timeline.importers.parse import parse_file
from timeline.importers.result import FileResult, ImportOptions
from timeline.importers.stream import parse_kineto_stream
from timeline.trace import load

REAL = sorted((TRACES / "kineto").glob("*/*.json.gz"))


@pytest.mark.parametrize("spare_core", [True, False], ids=["finish-thread", "inline"])
@pytest.mark.parametrize("path", REAL[:6] + REAL[-3:], ids=lambda p: p.name[:30])
def test_stream_equals_whole_file_on_real_traces(path: Path, spare_core: bool) -> None:
    whole = parse_kineto(read_trace_bytes(path, []), source=str(path))
    streamed = parse_kineto_stream(path, source=str(path), chunk_bytes=1 << 16, spare_core=spare_core)
    assert_frame_equal(whole.events, streamed.events)
    assert (whole.rank, whole.world_size, whole.clock, whole.warnings) == (
        streamed.rank,
        streamed.world_size,
        streamed.clock,
        streamed.warnings,
    )


@pytest.mark.parametrize("spare_core", [True, False], ids=["finish-thread", "inline"])
@pytest.mark.parametrize("path", REAL[:2] + REAL[-2:], ids=lambda p: p.name[:30])
def test_stream_finished_in_many_small_batches_equals_whole_file(
    path: Path, spare_core: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batches of a few hundred events: every batch boundary is crossed (re-keyed metadata, counts)."""
    monkeypatch.setattr(timeline.importers.stream, "FINISH_BATCH_ROWS", 300)
    monkeypatch.setattr(timeline.importers.stream, "SERIAL_FINISH_BATCH_ROWS", 300)
    for options in (ImportOptions(), ImportOptions(overlap_only=True)):
        whole = parse_kineto(read_trace_bytes(path, []), source=str(path), options=options)
        streamed = parse_kineto_stream(
            path, source=str(path), chunk_bytes=1 << 15, spare_core=spare_core, options=options
        )
        assert_frame_equal(whole.events, streamed.events)
        assert (whole.skipped, whole.warnings) == (streamed.skipped, streamed.warnings)


GPU_TRACES = [p for p in REAL if "negative_queue" in str(p) or "df_index" in str(p)]


@pytest.mark.parametrize("path", GPU_TRACES, ids=lambda p: p.name[:30])
def test_overlap_only_skips_every_cpu_operator_of_a_gpu_trace_chunk_by_chunk(path: Path) -> None:
    """A profiler writes CPU operators before the kernels: chunks of them are skipped all the same."""
    options = ImportOptions(overlap_only=True)
    whole = parse_kineto(read_trace_bytes(path, []), source=str(path), options=options)
    streamed = parse_kineto_stream(path, source=str(path), chunk_bytes=1 << 16, options=options)
    assert_frame_equal(whole.events, streamed.events)
    assert streamed.skipped == whole.skipped > 1000
    assert (whole.warnings, whole.clock) == (streamed.warnings, streamed.clock)
    full = parse_kineto_stream(path, source=str(path), chunk_bytes=1 << 16)
    assert full.events.height == streamed.events.height + streamed.skipped


def test_a_cpu_only_trace_whose_header_lists_a_gpu_keeps_its_cpu_operators(tmp_path: Path) -> None:
    """deviceProperties says GPU, no kernel comes: read again keeping everything, as a whole file is."""
    source = next(Path(__file__).parents[2].glob("sample_traces/ddp_gloo/rank0*.json.gz"))
    text = gzip.decompress(source.read_bytes())
    assert b'"deviceProperties": []' in text
    text = text.replace(b'"deviceProperties": []', b'"deviceProperties": [{"id": 0, "name": "GPU"}]', 1)
    path = tmp_path / "rank0.json.gz"
    path.write_bytes(gzip.compress(text))
    options = ImportOptions(overlap_only=True)
    whole = parse_kineto(text, source="t", options=options)
    streamed = parse_kineto_stream(path, source="t", chunk_bytes=1 << 14, options=options)
    assert whole.skipped == streamed.skipped == 0
    assert_frame_equal(whole.events, streamed.events)
    assert streamed.events.filter(pl.col("kind") == "cpu_op").height > 100


@pytest.mark.parametrize("metadata_after", [False, True])
@pytest.mark.parametrize("chunk", [64, 200, 1 << 20])
def test_metadata_before_or_after_and_braces_in_strings(
    tmp_path: Path, metadata_after: bool, chunk: int
) -> None:
    path = tmp_path / "t.json.gz"
    text = stream_trace_text(500, metadata_after=metadata_after)
    path.write_bytes(gzip.compress(text.encode()))
    streamed = parse_kineto_stream(path, source="t", chunk_bytes=chunk)
    whole = parse_kineto(text.encode(), source="t")
    assert_frame_equal(whole.events, streamed.events)
    assert streamed.rank == 3
    assert streamed.events["start_ns"][1] == 1700000000000000000 + 10_500
    assert streamed.events.height == 500


def test_truncated_stream_keeps_complete_events(tmp_path: Path) -> None:
    text = stream_trace_text(100, metadata_after=False)
    cut = text[: text.index('"name": "k57')]
    path = tmp_path / "cut.json"
    path.write_text(cut)
    streamed = parse_kineto_stream(path, source="cut.json", chunk_bytes=256)
    assert streamed.events.height == 57
    assert any("cut off" in w for w in streamed.warnings)


@pytest.mark.parametrize("chunk", [300, 1 << 20])
def test_damage_inside_the_array_is_located(tmp_path: Path, chunk: int) -> None:
    lines = stream_trace_text(50, metadata_after=False).split("\n")
    lines[31] = lines[31].replace('"pid": 0', '"pid": 0 0')
    path = tmp_path / "bad.json"
    path.write_text("\n".join(lines))
    column = lines[31].index('"pid": 0 0') + len('"pid": 0 ') + 1
    with pytest.raises(TraceFormatError, match=rf"^bad.json:32:{column}: "):
        parse_kineto_stream(path, source="bad.json", chunk_bytes=chunk)


def test_no_trace_events(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text('{"schemaVersion": 1}')
    with pytest.raises(TraceContentError):
        parse_kineto_stream(path, source="x.json")


def test_a_rank_task_finishes_its_columns_without_a_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every core runs a rank's task: no finishing thread; loading a file alone on a machine: one."""
    path = REAL[0]
    seen: list[bool] = []
    original = timeline.importers.stream._Frames.__init__

    def record(self: object, options: ImportOptions, pool: object = None) -> None:
        seen.append(pool is not None)
        original(self, options, pool)  # type: ignore[arg-type]

    monkeypatch.setattr(timeline.importers.stream._Frames, "__init__", record)
    alone = load(path, workers=2, rank=0)
    in_task = load(path, workers=1, rank=0)
    assert seen == [True, False]
    assert_frame_equal(alone.events, in_task.events)


@pytest.mark.parametrize("events", [3, 300, 20_000])
def test_load_decodes_every_kineto_trace_in_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, events: int
) -> None:
    """One decoder whatever the size: a few events, one chunk, many chunks; the whole-file result."""
    text = stream_trace_text(events, metadata_after=True).encode()
    path = tmp_path / "rank3.json.gz"
    path.write_bytes(gzip.compress(text))
    calls: list[Path] = []
    original = timeline.importers.stream.parse_kineto_stream

    def spy(p: Path, **kwargs: object) -> object:
        calls.append(p)
        return original(p, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(timeline.importers.stream, "parse_kineto_stream", spy)
    streamed = load(path)
    assert calls == [path]
    whole = parse_kineto(text, source=str(path))
    assert_frame_equal(whole.events.with_columns(pl.col("rank").fill_null(3)), streamed.events)


def test_a_damaged_trace_is_read_whole_and_repaired(tmp_path: Path) -> None:
    """Damage the whole-file reader repairs (a control character in a string) is repaired on load."""
    text = stream_trace_text(300, metadata_after=False).replace('"name": "k42 ', '"name": "k42 \x01', 1)
    path = tmp_path / "rank3.json"
    path.write_text(text)
    with pytest.raises(TraceFormatError):
        parse_kineto_stream(path, source=str(path))  # the chunked decoder refuses it
    loaded = load(path)
    whole = parse_kineto(text.encode(), source=str(path))
    assert any("repaired malformed JSON" in w for w in whole.warnings)
    assert loaded.warnings == tuple(whole.warnings)
    assert_frame_equal(whole.events.with_columns(pl.col("rank").fill_null(3)), loaded.events)


def _outcome(read: Callable[[], FileResult]) -> tuple[object, ...]:
    """The events and warnings a read gives, or the class and message of its error."""
    try:
        result = read()
    except TimelineError as exc:
        return type(exc).__name__, str(exc)
    return result.events.height, tuple(result.warnings)


@pytest.mark.parametrize("metadata_after", [False, True], ids=["metadata-before", "metadata-after"])
@pytest.mark.parametrize("junk", [b"", b"\nINFO: trailing log line\n", b"}}"], ids=["none", "log", "braces"])
def test_every_cut_and_bytes_after_the_end_read_as_the_whole_text_reader_repairs_them(
    tmp_path: Path, metadata_after: bool, junk: bytes
) -> None:
    """A file cut at each of its bytes, or with bytes after the document: parse_file = parse_kineto."""
    text = stream_trace_text(3, metadata_after=metadata_after).encode() + junk
    path = tmp_path / "rank3.json"
    for cut in range(1, len(text) + 1):
        part = text[:cut]
        path.write_bytes(part)
        whole = _outcome(partial(parse_kineto, part, source=str(path)))
        assert _outcome(partial(parse_file, path, ImportOptions())) == whole, cut
    # larger than the whole-text reader takes: the chunked reader repairs the end itself, the same way
    assert _outcome(partial(parse_kineto_stream, path, source=str(path))) == whole
