"""Large traces: parallel chunk decoding gives the serial result, and memory stays bounded by the chunk."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

import pytest
from polars.testing import assert_frame_equal

from benchmarks.generate import DEFAULT_SOURCE, grow_trace
from tests.builders import TRACES, stream_trace_text
from timeline.errors import TraceFormatError
from timeline.importers.stream import parse_kineto_stream

REAL = TRACES / "kineto" / "hta_negative_queue_length" / "rank0.json.gz"


def test_parallel_chunks_equal_the_serial_reader() -> None:
    serial = parse_kineto_stream(REAL, source="r", chunk_bytes=1 << 20)
    parallel = parse_kineto_stream(REAL, source="r", chunk_bytes=1 << 20, workers=2)
    assert_frame_equal(serial.events, parallel.events)
    assert (serial.rank, serial.clock, serial.warnings) == (parallel.rank, parallel.clock, parallel.warnings)


@pytest.mark.parametrize("metadata_after", [False, True])
def test_a_cut_inside_a_string_falls_back_to_the_serial_reader(tmp_path: Path, metadata_after: bool) -> None:
    # every event's name holds "}, {": some parallel cuts fall inside a string and do not decode
    text = stream_trace_text(3000, metadata_after=metadata_after).encode()
    path = tmp_path / "braces.json.gz"
    path.write_bytes(gzip.compress(text))
    serial = parse_kineto_stream(path, source="b", chunk_bytes=4096)
    parallel = parse_kineto_stream(path, source="b", chunk_bytes=4096, workers=2)
    assert_frame_equal(serial.events, parallel.events)
    assert parallel.events.height == 3000
    assert parallel.rank == 3


def test_damage_is_located_as_the_serial_reader_locates_it(tmp_path: Path) -> None:
    lines = stream_trace_text(3000, metadata_after=False).split("\n")
    lines[2500] = lines[2500].replace('"pid": 0', '"pid": 0 0')
    path = tmp_path / "bad.json"
    path.write_text("\n".join(lines))
    with pytest.raises(TraceFormatError) as serial:
        parse_kineto_stream(path, source="bad.json", chunk_bytes=8192)
    with pytest.raises(TraceFormatError) as parallel:
        parse_kineto_stream(path, source="bad.json", chunk_bytes=8192, workers=2)
    assert str(parallel.value) == str(serial.value)
    assert str(serial.value).startswith("bad.json:2501:")


_PEAK = """
import sys
from pathlib import Path
from timeline.importers.stream import parse_kineto_stream
result = parse_kineto_stream(Path(sys.argv[1]), source="big", chunk_bytes=4 << 20)
peak = next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1]
print(result.events.height, int(peak) * 1024)
"""


@pytest.mark.skipif(not DEFAULT_SOURCE.exists(), reason="the shared traces are absent")
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="peak RSS is read from /proc")
def test_streaming_memory_is_bounded_by_the_chunk_not_the_file(tmp_path: Path) -> None:
    """A 300 MB trace in 4 MiB chunks: about 260 MB at peak; decoding it whole needs about 1.1 GB.

    About 20 s on 2 cores (most of it generating the trace).
    """
    grown = grow_trace(DEFAULT_SOURCE, tmp_path / "big.json.gz", target_bytes=300_000_000, seed=1)
    run = subprocess.run(
        [sys.executable, "-c", _PEAK, str(grown.path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    events, peak = map(int, run.stdout.split())
    assert events > 700_000
    # whole-file decoding holds the 300 MB of text and its decoded events at once (3-4x the text)
    assert peak < 450 * 2**20, f"peak RSS {peak / 2**20:.0f} MiB"
