"""Hostile files on the way in (issue #19): gzip cut off or damaged, decompression bombs, sizes.

A file is read within limits, whatever it holds or claims: a gzip stream cut off mid-way is read
as far as it goes and its JSON repaired like a plain file cut off; damaged gzip data is one error;
the size a gzip trailer records is never trusted; blank text is collapsed while it is read; text
past the documented limits stops reading with an error. Memory is measured, not assumed: Python
allocations with ``tracemalloc``, a whole command's peak resident memory from ``wait4``.
"""

from __future__ import annotations

import gzip
import os
import re
import resource
import subprocess
import sys
import tracemalloc
import zlib
from pathlib import Path
from typing import Any

import pytest
from isal import isal_zlib
from polars.testing import assert_frame_equal

import timeline
import timeline.importers.files
import timeline.importers.stream
from tests.builders import run_timeline, stream_trace_text, tiny_kineto
from timeline import policy
from timeline.errors import TraceFormatError, UsageError
from timeline.importers.kineto import parse_kineto
from timeline.importers.parse import parse_file
from timeline.importers.result import ImportOptions

MIB = 1024 * 1024
EVENT = (
    b'{"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 1700000000000000, '
    b'"dur": 5, "args": {"device": 0, "stream": 7}}'
)


def _bomb(path: Path, blank_mib: int, *, fill: bytes = b" ", head: bytes = b"", tail: bytes = b"") -> None:
    """Write ``head``, ``blank_mib`` MiB of ``fill`` and ``tail`` as one gzip member (ISA-L: fast)."""
    packer = isal_zlib.compressobj(1, isal_zlib.DEFLATED, 31)
    block = fill * MIB
    with path.open("wb") as out:
        out.write(packer.compress(head))
        for _ in range(blank_mib):
            out.write(packer.compress(block))
        out.write(packer.compress(tail))
        out.write(packer.flush())


def _trace_with_blank_run(blank: bytes) -> bytes:
    return b'{"traceEvents": [' + EVENT + b"," + blank + EVENT.replace(b'"gemm"', b'"gemm2"') + b"]}"


# --- gzip cut off, gzip damaged ---------------------------------------------------------------------


def test_a_gzip_cut_off_is_read_like_the_plain_file_it_holds(tmp_path: Path) -> None:
    """A job killed while writing a .json.gz: the events it holds, the JSON repair's counted warning."""
    packed = gzip.compress(stream_trace_text(300, metadata_after=False).encode())
    cut = packed[: len(packed) // 2]
    held = zlib.decompressobj(wbits=31).decompress(cut)
    gz, plain = tmp_path / "rank3.json.gz", tmp_path / "rank3.json"
    gz.write_bytes(cut)
    plain.write_bytes(held)
    from_gz = parse_file(gz, ImportOptions())
    from_plain = parse_file(plain, ImportOptions())
    assert_frame_equal(from_gz.events, from_plain.events)
    assert 0 < from_gz.events.height < 300
    assert from_plain.warnings == [
        f"{plain}: repaired malformed JSON: file cut off mid-record, closed after the last complete event (1)"
    ]
    assert from_gz.warnings == [
        f"{gz}: gzip stream cut off at byte {len(cut):,}; read the {len(held):,} bytes it holds",
        from_plain.warnings[0].replace(str(plain), str(gz)),
    ]


@pytest.mark.parametrize("damage", ["middle", "checksum", "method"])
def test_damaged_gzip_data_is_one_error(tmp_path: Path, damage: str) -> None:
    packed = bytearray(gzip.compress(stream_trace_text(300, metadata_after=False).encode()))
    if damage == "middle":
        packed[len(packed) // 2 : len(packed) // 2 + 40] = bytes(40)
    elif damage == "checksum":
        packed[-8] ^= 0xFF  # the CRC-32 of the trailer
    else:
        packed[2] = 9  # compression method: only 8 (deflate) exists
    path = tmp_path / "rank3.json.gz"
    path.write_bytes(packed)
    with pytest.raises(
        TraceFormatError,
        match=rf"^{re.escape(str(path))}:1:1: damaged gzip file: the damage was found in bytes ",
    ):
        parse_file(path, ImportOptions())


def _serial_chunks_cut(packed: bytes) -> bytes:
    """A cut point of ``packed`` whose last four bytes, read as a gzip trailer, say 16-128 MiB of text."""
    for end in range(len(packed) // 2, len(packed) - 8):
        if 16 * MIB <= int.from_bytes(packed[end - 4 : end], "little") < policy.STREAM_MIN_BYTES:
            return packed[:end]
    raise AssertionError("no such cut")  # pragma: no cover - hundreds of candidates, 1 in 40 fits


def test_the_command_reads_a_gzip_cut_off_whose_trailer_sends_it_to_the_chunked_reader(
    tmp_path: Path,
) -> None:
    """What a killed writer leaves: the bytes where the trailer would be say 16-128 MiB (was: Aborted.).

    The trailer once chose the reader; now it only weighs in the choice of a rank-by-rank read.
    """
    path = tmp_path / "rank3.json.gz"
    path.write_bytes(
        _serial_chunks_cut(gzip.compress(stream_trace_text(2000, metadata_after=False).encode()))
    )
    done = run_timeline("analyze", path)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0].startswith(f"warning: {path}: gzip stream cut off at byte ")
    assert lines[1] == (
        f"warning: {path}: repaired malformed JSON: file cut off mid-record, closed after the last "
        "complete event (1)"
    )
    assert "Traceback" not in done.stderr


def test_the_command_reports_a_large_damaged_gzip_in_one_line(tmp_path: Path) -> None:
    """A .json.gz of more than 16 MiB of text: damage is one error, however large the file."""
    packed = bytearray(isal_zlib.compress(stream_trace_text(110_000, metadata_after=False).encode(), 1, 31))
    packed[len(packed) // 2 : len(packed) // 2 + 64] = bytes(64)
    path = tmp_path / "rank3.json.gz"
    path.write_bytes(packed)
    assert policy.text_size(path) >= 16 * MIB
    done = run_timeline("analyze", path)
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: {path}:1:1: damaged gzip file: the damage was found in bytes ")
    assert len(done.stderr.splitlines()) == 1


# --- sizes: never trusted, always bounded ---------------------------------------------------------


def test_a_gzip_trailer_that_lies_is_not_trusted(tmp_path: Path) -> None:
    """Blanks whose trailer records a small size: read in bounded memory (blank runs collapsed)."""
    path = tmp_path / "rank0.json.gz"
    _bomb(path, 64, head=b'{"traceEvents": [' + EVENT + b",", tail=EVENT + b"]}")
    small = tmp_path / "small.json"
    small.write_bytes(tiny_kineto(0))
    parse_file(small, ImportOptions())  # imports and caches: not what is measured
    tracemalloc.start()
    try:
        result = parse_file(path, ImportOptions())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.events.height == 2
    assert peak < 32 * MIB  # the text is 64 MiB
    [warning] = result.warnings
    skipped = re.fullmatch(
        rf"{re.escape(str(path))}: skipped ([\d,]+) bytes of blank text \(runs of more than 64 KiB of "
        r"spaces or newlines\)",
        warning,
    )
    assert skipped is not None
    assert 62 * MIB < int(skipped.group(1).replace(",", "")) <= 64 * MIB


@pytest.mark.parametrize("packed", [False, True], ids=["plain", "gzip"])
def test_blank_runs_are_collapsed_while_reading(tmp_path: Path, packed: bool) -> None:
    text = _trace_with_blank_run(b" \n" * (3 * MIB // 2))
    path = tmp_path / ("rank0.json.gz" if packed else "rank0.json")
    path.write_bytes(gzip.compress(text) if packed else text)
    result = parse_file(path, ImportOptions())
    expected = parse_kineto(_trace_with_blank_run(b" "), source=str(path))
    assert_frame_equal(result.events, expected.events)
    [warning] = result.warnings
    assert re.fullmatch(rf"{re.escape(str(path))}: skipped [\d,]+ bytes of blank text \(.*\)", warning)


def test_text_past_the_maximum_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timeline.importers.files, "MAX_TEXT_BYTES", MIB, raising=False)
    path = tmp_path / "rank3.json"
    path.write_text(stream_trace_text(20_000, metadata_after=False))
    with pytest.raises(
        TraceFormatError, match=rf"^{re.escape(str(path))}: more than 1 MiB of text \(MAX_TEXT"
    ):
        parse_file(path, ImportOptions())


def test_gzip_expanding_past_the_ratio_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same event repeated packs 1,000 times: a bomb of valid events, not a trace."""
    monkeypatch.setattr(timeline.importers.files, "RATIO_MIN_TEXT_BYTES", MIB, raising=False)
    events = b",\n".join([EVENT] * 40_000)
    path = tmp_path / "rank3.json.gz"
    path.write_bytes(gzip.compress(b'{"traceEvents": [' + events + b"]}", compresslevel=9))
    with pytest.raises(
        TraceFormatError, match=rf"^{re.escape(str(path))}: gzip data expanding more than 200 times by byte "
    ):
        parse_file(path, ImportOptions())


def test_a_timeline_read_whole_past_its_limit_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(timeline.importers.files, "WHOLE_MAX_TEXT_BYTES", MIB, raising=False)
    record = b'{"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": 10, "pid": 1},\n'
    path = tmp_path / "horovod.json"
    path.write_bytes(b"[" + record * (2 * MIB // len(record)))
    with pytest.raises(
        TraceFormatError, match=rf"^{re.escape(str(path))}: more than 1 MiB of text, the most"
    ):
        parse_file(path, ImportOptions())


def test_an_event_longer_than_the_maximum_is_an_error_where_it_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A string of gigabytes is refused at the limit, not decoded (was: 7.8 GB, then a panic)."""
    monkeypatch.setattr(timeline.importers.stream, "MAX_EVENT_BYTES", MIB, raising=False)
    lines = stream_trace_text(50, metadata_after=False).split("\n")
    lines[21] = lines[21].replace('"name": "k20', '"name": "' + "A" * (3 * MIB) + "k20")
    path = tmp_path / "rank3.json"
    path.write_text("\n".join(lines))
    message = rf"^{re.escape(str(path))}:22:1: no end of an event in the 1 MiB of text from here "
    with pytest.raises(TraceFormatError, match=message):
        parse_file(path, ImportOptions())


# --- the acceptance case: a gzip bomb of blank text, run as a command with 3 GB of address space ----


def _run_limited(args: list[str], cwd: Path) -> tuple[int, str, int]:
    """Run ``timeline ARGS`` with ``ulimit -v 3000000``; return exit code, stderr and peak RSS in KiB."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (3_000_000 * 1024, 3_000_000 * 1024))

    with (cwd / "stdout").open("wb") as out, (cwd / "stderr").open("wb") as err:
        command = [sys.executable, "-c", "from cli.main import run; run()", *args]
        process = subprocess.Popen(command, stdout=out, stderr=err, preexec_fn=limit)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
    return process.returncode, (cwd / "stderr").read_text(), usage.ru_maxrss


@pytest.mark.parametrize(
    ("where", "expected_code"),
    [("alone", 2), ("between_events", 0), ("inside_a_string", 0)],
)
def test_a_gzip_bomb_of_blank_text_ends_cleanly_in_bounded_memory(
    tmp_path: Path, where: str, expected_code: int
) -> None:
    """512 MiB of spaces in 512 KiB of gzip: one error line or a clean result, never a traceback."""
    path = tmp_path / "bomb.json.gz"
    name_starts = b'{"traceEvents": [' + EVENT + b', {"ph": "X", "cat": "kernel", "name": "gemm'
    name_ends = b'", "pid": 0, "tid": 7, "ts": 1700000000000001, "dur": 5}]}'
    head, tail = {
        "alone": (b"", b""),
        "between_events": (b'{"traceEvents": [' + EVENT + b",", EVENT + b"]}"),
        "inside_a_string": (name_starts, name_ends),
    }[where]
    _bomb(path, 512, head=head, tail=tail)
    small = tmp_path / "rank0.json"
    small.write_bytes(tiny_kineto(0))
    code, _, baseline = _run_limited(["analyze", str(small)], tmp_path)
    assert code == 0
    code, stderr, peak = _run_limited(["analyze", str(path)], tmp_path)
    assert "Traceback" not in stderr
    assert code == expected_code, stderr
    if code == 2:
        assert (
            stderr
            == f"error: {path}:1:1: empty file; expected a PyTorch profiler trace or a Horovod timeline\n"
        )
    else:
        assert f"warning: {path}: skipped " in stderr
    assert peak < baseline + 160 * 1024, (peak, baseline)  # KiB: the text is 512 MiB


# --- unreadable files ----------------------------------------------------------------------------------


def test_an_unreadable_file_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No permission (simulated: the tests may run as root, who reads everything)."""
    path = tmp_path / "rank0.json"
    path.write_bytes(tiny_kineto(0))
    real_open = Path.open

    def deny(self: Path, *args: Any, **kwargs: Any) -> Any:
        if self == path:
            raise PermissionError(13, "Permission denied", str(self))
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", deny)
    message = (
        rf"^{re.escape(str(path))}: cannot read: Permission denied; check that it exists and is readable$"
    )
    with pytest.raises(UsageError, match=message):
        policy.text_size(path)
    with pytest.raises(UsageError, match=message):
        parse_file(path, ImportOptions())
    with pytest.raises(UsageError, match=message):
        timeline.load(path)


def test_a_directory_given_as_a_file_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=rf"^{re.escape(str(tmp_path))}: cannot read: Is a directory"):
        policy.text_size(tmp_path)
    with pytest.raises(UsageError, match=rf"^{re.escape(str(tmp_path))}: cannot read: Is a directory"):
        parse_file(tmp_path, ImportOptions())


# --- what may follow gzip data ----------------------------------------------------------------------


def test_gzip_members_are_read_one_after_another_and_zero_padding_is_ignored(tmp_path: Path) -> None:
    text = stream_trace_text(300, metadata_after=False).encode()
    half = len(text) // 2
    path = tmp_path / "rank3.json.gz"
    path.write_bytes(gzip.compress(text[:half]) + gzip.compress(text[half:]) + bytes(1000))
    result = parse_file(path, ImportOptions())
    assert_frame_equal(result.events, parse_kineto(text, source=str(path)).events)
    assert result.warnings == []


def test_bytes_after_the_gzip_data_are_ignored_with_a_warning(tmp_path: Path) -> None:
    """A log line appended to a .json.gz: the trace is whole (its checksum says so), the rest is not."""
    text = stream_trace_text(300, metadata_after=False).encode()
    path = tmp_path / "rank3.json.gz"
    path.write_bytes(gzip.compress(text) + b"job finished\n")
    result = parse_file(path, ImportOptions())
    assert_frame_equal(result.events, parse_kineto(text, source=str(path)).events)
    assert result.warnings == [f"{path}: ignored the bytes after the end of the gzip data"]


def test_damage_followed_by_more_than_the_event_limit_is_located_where_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every cut after damage fails to decode: the limit reports the damage, not a long event."""
    monkeypatch.setattr(timeline.importers.stream, "MAX_EVENT_BYTES", 256 * 1024)
    lines = stream_trace_text(20_000, metadata_after=False).split("\n")
    lines[10_001] = lines[10_001].replace('"name": "k10000 ', '"name": "k10000 \x01')
    path = tmp_path / "rank3.json"
    path.write_text("\n".join(lines))
    column = lines[10_001].index("\x01") + 1
    message = rf"^{re.escape(str(path))}:10002:{column}: invalid character; the file is not valid JSON"
    with pytest.raises(TraceFormatError, match=message):
        timeline.importers.stream.parse_kineto_stream(path, source=str(path), chunk_bytes=4096)
