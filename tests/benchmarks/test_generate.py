"""The trace generator of the benchmarks: deterministic, realistic, rank-rewritten."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import msgspec
import polars as pl

from benchmarks.generate import DEFAULT_SOURCE, grow_trace, make_rank_set, parse_size, rewrite_rank
from timeline.analysis.overlap import compute_overlap
from timeline.trace import load

SOURCE = Path(__file__).resolve().parents[2] / "sample_traces" / "ddp_gloo" / "rank0.2-4.pt.trace.json.gz"


def test_sizes_are_decimal() -> None:
    assert parse_size("54M") == 54_000_000
    assert parse_size("1G") == 10**9
    assert parse_size("1.5GB") == 1_500_000_000
    assert parse_size("2500") == 2500


def test_growing_is_deterministic(tmp_path: Path) -> None:
    a = grow_trace(SOURCE, tmp_path / "a.json.gz", target_bytes=3_000_000, seed=7)
    b = grow_trace(SOURCE, tmp_path / "b.json.gz", target_bytes=3_000_000, seed=7)
    c = grow_trace(SOURCE, tmp_path / "c.json.gz", target_bytes=3_000_000, seed=8)
    assert a.path.read_bytes() == b.path.read_bytes()
    assert a.path.read_bytes() != c.path.read_bytes()
    assert 2_900_000 < a.json_bytes <= 3_000_000
    assert len(gzip.decompress(a.path.read_bytes())) == a.json_bytes


def test_grown_trace_repeats_iterations_with_unique_links(tmp_path: Path) -> None:
    source_events = load(SOURCE, rank=0).events
    grown = grow_trace(SOURCE, tmp_path / "grown.json", target_bytes=4_000_000, seed=0)
    assert grown.copies > 3
    doc = msgspec.json.decode(grown.path.read_bytes())
    events = doc["traceEvents"]
    steps = [
        e["name"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#") and e["ph"] == "X"
    ]
    assert (
        len(steps)
        == len(set(steps))
        > 3
        * sum(1 for n in source_events.get_column("name").cast(pl.String) if n.startswith("ProfilerStep#"))
    )
    flows = [e["id"] for e in events if e.get("ph") == "s"]
    assert len(flows) == len(set(flows))
    trace = load(grown.path, rank=0)
    overlap = compute_overlap(trace.events)
    assert overlap.iterations.height > 3 * compute_overlap(source_events).iterations.height - 3
    # copy 0 is the source itself: its first iteration is measured exactly as the source's
    first = compute_overlap(source_events).iterations.row(0, named=True)
    assert overlap.iterations.row(0, named=True) == first


def test_a_smaller_target_keeps_a_prefix_in_time(tmp_path: Path) -> None:
    cut = grow_trace(SOURCE, tmp_path / "cut.json", target_bytes=200_000, seed=0)
    assert cut.copies < 1
    events = load(cut.path, rank=0).events
    full = load(SOURCE, rank=0).events
    assert 0 < events.height < full.height
    assert events.get_column("start_ns").min() == full.get_column("start_ns").min()


def test_rank_rewriting_keeps_every_other_byte() -> None:
    data = gzip.decompress(DEFAULT_SOURCE.read_bytes()) if DEFAULT_SOURCE.exists() else b""
    if not data:  # the shared traces are absent: a synthetic trace
        data = b'{"distributedInfo": {"backend": "nccl", "rank": 1, "world_size": 2}, "traceEvents": []}'
    out = rewrite_rank(data, 5, 8)
    head, _, tail = data.partition(b'"distributedInfo"')
    assert out.startswith(head)
    assert out.endswith(tail[tail.index(b"}") + 1 :])
    # HTA finds a file's rank with this regex, in the file's content
    assert re.search(rb'"rank":\s+(\d+)', out).group(1) == b"5"  # type: ignore[union-attr]
    assert msgspec.json.decode(out)["distributedInfo"]["world_size"] == 8
    bare = rewrite_rank(b'{"traceEvents": []}', 2, 4)
    assert msgspec.json.decode(bare)["distributedInfo"]["rank"] == 2


def test_rank_sets_load_as_ranks(tmp_path: Path) -> None:
    paths = make_rank_set(SOURCE, tmp_path / "set", ranks=4, target_bytes=300_000)
    assert [p.name for p in paths] == [f"rank{r}.json.gz" for r in range(4)]
    trace = load(tmp_path / "set")
    assert trace.ranks == [0, 1, 2, 3]
    assert set(trace.files.get_column("world_size")) == {4}
    assert trace.files.get_column("rank_from").to_list() == ["distributedInfo"] * 4
