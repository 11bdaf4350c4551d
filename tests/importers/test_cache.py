"""The cache of trace frames: a file read once is read from its frame after, and only while it is the same.

Each test has a cache folder of its own (``tests/conftest.py``). Whether a read decoded the file is
seen by counting the calls of the decoder (:func:`timeline.importers.parse._parse`); whether a read
used an entry, by the entry's inode (kept) and modification time (renewed when it is read).
"""

from __future__ import annotations

import gzip
import os
import shutil
from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import timeline
import timeline.importers.parse
from tests.builders import PARAM, SAMPLE_HOROVOD, SAMPLES, TRACES, assert_overlap_equal, stream_trace_text
from timeline.execution.reduce import analyze_files
from timeline.executors import LocalExecutor
from timeline.importers.cache import Cache, CacheWarning, list_entries, open_cache, resolve_cache
from timeline.importers.parquet import read_stored
from timeline.importers.parse import parse_file
from timeline.importers.result import FileResult, ImportOptions
from timeline.importers.rules import ClassificationRules

GPU_TRACE = TRACES / "kineto" / "hta_negative_queue_length" / "rank0.json.gz"
CASES = {
    "kineto, groups": SAMPLES / "fsdp2_tp_gloo" / "rank1.2-4.pt.trace.json.gz",
    "kineto, nccl": PARAM / "worker3_step_12.1694128201557.pt.trace.json.gz",
    "kineto, gpu": GPU_TRACE,
    "horovod": SAMPLE_HOROVOD,
}


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The files decoded from now on (a read from the cache decodes nothing)."""
    seen: list[Path] = []
    original = timeline.importers.parse._parse

    def spy(path: Path, *args: object) -> FileResult:
        seen.append(path)
        return original(path, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(timeline.importers.parse, "_parse", spy)
    return seen


def _cache(folder: Path) -> Cache:
    cache, note = open_cache(folder)
    assert note is None
    return cache


def assert_same_result(expected: FileResult, got: FileResult) -> None:
    """Every field of two parses of one file is equal (the events frame row for row, dtypes too)."""
    assert_frame_equal(expected.events, got.events)
    assert got.warnings == expected.warnings
    scalars = ("format", "rank", "claims_rank", "world_size", "backend", "host", "clock", "skipped")
    assert [getattr(got, n) for n in scalars] == [getattr(expected, n) for n in scalars]
    assert got.stored_files is None
    if expected.groups is None:
        assert got.groups is None
    else:
        assert got.groups is not None
        assert_frame_equal(expected.groups, got.groups)


def _entries(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.parquet"))


@pytest.mark.parametrize("path", CASES.values(), ids=CASES.keys())
@pytest.mark.parametrize("overlap_only", [False, True], ids=["every-event", "overlap-only"])
def test_a_miss_decodes_and_writes_a_hit_reads_the_same_result(
    path: Path, overlap_only: bool, cache_folder: Path, decodes: list[Path]
) -> None:
    without = parse_file(path, ImportOptions(overlap_only=overlap_only))
    options = ImportOptions(overlap_only=overlap_only, cache=_cache(cache_folder))
    decodes.clear()
    missed = parse_file(path, options)
    assert decodes == [path]
    [entry] = _entries(cache_folder)
    hit = parse_file(path, options)
    assert decodes == [path]  # not decoded again
    assert_same_result(without, missed)
    assert_same_result(without, hit)
    assert _entries(cache_folder) == [entry]
    if overlap_only and path == GPU_TRACE:
        assert hit.skipped > 0  # the events left out are counted as the decoder counted them


def test_the_key_holds_the_options_that_shape_the_frame(cache_folder: Path, decodes: list[Path]) -> None:
    cache = _cache(cache_folder)
    variants = [
        ImportOptions(cache=cache),
        ImportOptions(cache=cache, include_python=True),
        ImportOptions(cache=cache, overlap_only=True),
        ImportOptions(cache=cache, rules=ClassificationRules(extra_comm_kernels=("vectorized_el",))),
    ]
    path = CASES["kineto, nccl"]
    first = [parse_file(path, options) for options in variants]
    second = [parse_file(path, options) for options in variants]
    assert len(decodes) == len(variants)
    assert len(_entries(cache_folder)) == len(variants)
    for options, a, b in zip(variants, first, second, strict=True):
        assert_same_result(parse_file(path, replace(options, cache=None)), b)
        assert_same_result(a, b)
    kinds = [r.events.get_column("kind").cast(pl.String).value_counts(sort=True) for r in first]
    assert not kinds[0].equals(kinds[3])  # the extra rule made some compute communication


def _trace_text(n: int, duration: str) -> bytes:
    return stream_trace_text(n, metadata_after=False).replace('"dur": 2.25', f'"dur": {duration}').encode()


@pytest.mark.parametrize("times", ["new", "set back"])
def test_a_file_changed_in_place_to_the_same_size_is_read_again(
    tmp_path: Path, cache_folder: Path, decodes: list[Path], times: str
) -> None:
    """Same size, new content (every duration 2.25 → 7.75); its times as written, or set back."""
    path = tmp_path / "rank3.json"
    path.write_bytes(_trace_text(3000, "2.25"))
    options = ImportOptions(cache=_cache(cache_folder))
    before = parse_file(path, options)
    status = path.stat()
    path.write_bytes(_trace_text(3000, "7.75"))
    assert path.stat().st_size == status.st_size
    if times == "set back":
        os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns))
    after = parse_file(path, options)
    assert decodes == [path, path]
    durations = (after.events.get_column("end_ns") - after.events.get_column("start_ns")).unique().to_list()
    assert durations == [7750]
    assert not before.events.equals(after.events)
    assert len(_entries(cache_folder)) == 1  # the old version's entry is removed
    assert_same_result(parse_file(path, ImportOptions()), parse_file(path, options))
    assert len(decodes) == 3  # the last read was a hit


def test_the_same_file_under_another_name_is_read_from_its_entry_with_its_warnings_so_named(
    tmp_path: Path, cache_folder: Path, decodes: list[Path]
) -> None:
    """A link, or a path relative to another folder: one entry; each read's warnings name the file its way."""
    path = tmp_path / "rank3.json.gz"
    path.write_bytes(gzip.compress(_trace_text(300, "2.25")) + b"job finished\n")
    link = tmp_path / "link.json.gz"
    link.symlink_to(path)
    options = ImportOptions(cache=_cache(cache_folder))
    first = parse_file(path, options)
    second = parse_file(link, options)
    assert decodes == [path]
    assert first.warnings == [f"{path}: ignored the bytes after the end of the gzip data"]
    assert second.warnings == [f"{link}: ignored the bytes after the end of the gzip data"]
    assert_same_result(parse_file(link, ImportOptions()), second)
    assert len(_entries(cache_folder)) == 1


@pytest.mark.parametrize("damage", ["cut short", "a byte changed", "another file's entry", "not parquet"])
def test_a_damaged_or_foreign_entry_is_ignored_and_written_again(
    cache_folder: Path, decodes: list[Path], damage: str
) -> None:
    path, other = CASES["kineto, nccl"], CASES["kineto, groups"]
    options = ImportOptions(cache=_cache(cache_folder))
    expected = parse_file(path, options)
    [entry] = _entries(cache_folder)
    data = entry.read_bytes()
    if damage == "cut short":
        entry.write_bytes(data[: len(data) // 2])
    elif damage == "a byte changed":
        middle = len(data) // 2
        entry.write_bytes(data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1 :])
    elif damage == "another file's entry":
        parse_file(other, options)
        [foreign] = [e for e in _entries(cache_folder) if e != entry]
        shutil.copyfile(foreign, entry)
    else:
        entry.write_bytes(b"not a parquet file")
    decodes.clear()
    again = parse_file(path, options)
    assert decodes == [path]
    assert_same_result(expected, again)
    stored = read_stored(entry)  # written again, whole, and with its digest
    assert_frame_equal(stored.events, expected.events)
    decodes.clear()
    assert_same_result(expected, parse_file(path, options))
    assert decodes == []


def test_a_failed_write_leaves_no_entry_and_no_temporary_file(
    cache_folder: Path, decodes: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk fills while an entry is written: the parse's result is returned, nothing is left."""
    import timeline.importers.parquet

    def full(target: object, **kwargs: object) -> None:
        assert hasattr(target, "write")
        target.write(b"PAR1 half an entry")
        raise OSError(28, "No space left on device")

    options = ImportOptions(cache=_cache(cache_folder))
    monkeypatch.setattr(timeline.importers.parquet, "write_parquet", full)
    path = CASES["kineto, nccl"]
    assert_same_result(parse_file(path, ImportOptions()), parse_file(path, options))
    assert sorted(p.name for p in cache_folder.iterdir()) == []
    # that process writes no more there (the next write would fail the same way)
    parse_file(CASES["horovod"], options)
    assert sorted(p.name for p in cache_folder.iterdir()) == []


def test_a_read_only_cache_reads_its_entries_and_writes_none(cache_folder: Path, decodes: list[Path]) -> None:
    path, other = CASES["kineto, nccl"], CASES["horovod"]
    written = parse_file(path, ImportOptions(cache=_cache(cache_folder)))
    [entry] = _entries(cache_folder)
    read_only = ImportOptions(cache=Cache(cache_folder, writable=False))
    decodes.clear()
    assert_same_result(written, parse_file(path, read_only))
    assert decodes == []
    assert_same_result(parse_file(other, ImportOptions()), parse_file(other, read_only))
    assert decodes == [other, other]
    assert _entries(cache_folder) == [entry]


def test_past_its_limit_the_least_recently_used_entries_go_first(tmp_path: Path, cache_folder: Path) -> None:
    paths = [p.resolve() for p in sorted(PARAM.glob("*.json.gz"))[:4]]
    scratch = _cache(tmp_path / "scratch")  # each entry's size (the same file gives the same entry)
    for path in paths:
        parse_file(path, ImportOptions(cache=scratch))
    size = {e.source: e.size_bytes for e in list_entries(scratch.folder)}
    cache = _cache(cache_folder)
    for path in paths[:3]:
        parse_file(path, ImportOptions(cache=cache))
    entry = {e.source: e.path for e in list_entries(cache_folder)}
    # used long ago, in this order: paths[1], paths[0], paths[2]
    for age, path in ((3000, paths[1]), (2000, paths[0]), (1000, paths[2])):
        os.utime(entry[str(path)], (age, age))
    total = sum(size.values())
    limit = total - size[str(paths[2])]  # four entries are past it; without the oldest, not
    parse_file(paths[3], ImportOptions(cache=Cache(cache_folder, limit_bytes=limit)))
    kept = {e.source for e in list_entries(cache_folder)}
    assert kept == {str(paths[0]), str(paths[1]), str(paths[3])}
    assert sum(e.size_bytes for e in list_entries(cache_folder)) == limit


def test_rank_by_rank_tasks_read_and_write_the_cache_in_every_process(cache_folder: Path) -> None:
    """PARAM's 8 ranks on a local executor of 2 processes: 8 entries; then 8 hits, in both processes."""
    options = ImportOptions(cache=_cache(cache_folder))
    expected = analyze_files(PARAM, executor=LocalExecutor(1))
    first = analyze_files(PARAM, executor=LocalExecutor(2), options=options)
    entries = _entries(cache_folder)
    assert len(entries) == 8
    inodes = {e: e.stat().st_ino for e in entries}
    for entry in entries:
        os.utime(entry, (1000, 1000))
    again = analyze_files(PARAM, executor=LocalExecutor(2), options=options)
    for entry in entries:
        assert entry.stat().st_ino == inodes[entry]  # not written again
        assert entry.stat().st_mtime > 1000  # read: marked used
    for analysis in (first, again):
        assert_overlap_equal(expected.overlap, analysis.overlap)
        assert_frame_equal(expected.files, analysis.files)
        assert analysis.warnings == expected.warnings


def test_the_library_caches_through_analyze_and_load_only_when_asked(
    cache_folder: Path, tmp_path: Path
) -> None:
    run = timeline.analyze(SAMPLES / "ddp_gloo")
    assert len(_entries(cache_folder)) == 2  # analyze: the default folder ($TIMELINE_CACHE_DIR here)
    assert_frame_equal(timeline.analyze(SAMPLES / "ddp_gloo").trace.events, run.trace.events)
    timeline.analyze(SAMPLES / "expert_gloo", cache=False)
    timeline.load(SAMPLES / "pipeline_gloo")  # load: no cache unless asked
    assert len(_entries(cache_folder)) == 2
    elsewhere = tmp_path / "elsewhere"
    loaded = timeline.load(SAMPLES / "pipeline_gloo", cache=elsewhere)
    assert len(_entries(elsewhere)) == len(list((SAMPLES / "pipeline_gloo").glob("rank*.json.gz")))
    assert_frame_equal(timeline.load(SAMPLES / "pipeline_gloo").events, loaded.events)


def test_a_folder_that_cannot_be_written_is_one_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocked = tmp_path / "file-not-folder"
    blocked.write_text("")
    cache, note = open_cache(blocked / "timeline")  # its parent is a file: it cannot be made
    assert not cache.writable
    assert note is not None
    assert note.startswith(f"cache folder {blocked / 'timeline'}: cannot write there (Not a directory); ")
    with pytest.warns(CacheWarning, match="cannot write there"):
        resolve_cache(blocked / "timeline")

    class Usage:
        free = 1024**2

    monkeypatch.setattr(shutil, "disk_usage", lambda _path: Usage())
    cache, note = open_cache(tmp_path / "full")
    assert not cache.writable
    assert note is not None
    assert note.startswith(f"cache folder {tmp_path / 'full'}: full (1 MiB free); ")


def test_a_trace_is_never_written_beside(tmp_path: Path, cache_folder: Path) -> None:
    traces = tmp_path / "run"
    traces.mkdir()
    (traces / "rank0.json.gz").write_bytes(gzip.compress(_trace_text(300, "2.25")))
    before = sorted(p.name for p in traces.iterdir())
    timeline.analyze(traces, cache=cache_folder)
    assert sorted(p.name for p in traces.iterdir()) == before
    assert len(_entries(cache_folder)) == 1
