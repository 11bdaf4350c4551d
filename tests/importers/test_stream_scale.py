"""Large traces: memory stays bounded by the chunk, not the file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.generate import DEFAULT_SOURCE, grow_trace

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
