"""The run manifest: merging ranks' entries, reading it back (no torch needed)."""

from __future__ import annotations

from pathlib import Path

import msgspec

from timeline.capture import MANIFEST_NAME, Manifest, RankEntry, read_manifest, trace_file_name
from timeline.capture.manifest import MANIFEST_FORMAT, Schedule, Versions, merge_rank_entry, write_rank_entry


def _run(world_size: int = 2) -> Manifest:
    return Manifest(
        format=MANIFEST_FORMAT,
        world_size=world_size,
        backend="gloo",
        link_gbps=25.0,
        schedule=Schedule(wait=1, warmup=1, active=3, repeat=1),
        record_shapes=True,
        with_stack=False,
        grad_ready_markers=False,
        versions=Versions(timeline="0.1.0", torch="2.13.0", nccl=None, python="3.11.7"),
    )


def _entry(rank: int, *files: str) -> RankEntry:
    return RankEntry(
        rank=rank, host=f"node{rank}", pid=100 + rank, device="cpu", started_unix_ns=1, files=list(files)
    )


def test_trace_file_name() -> None:
    assert trace_file_name(0, 2, 4) == "rank0.2-4.pt.trace.json.gz"
    assert trace_file_name(12, 550, 552) == "rank12.550-552.pt.trace.json.gz"


def test_ranks_merge_in_any_order(tmp_path: Path) -> None:
    write_rank_entry(tmp_path, _run(), _entry(1, "rank1.2-4.pt.trace.json.gz"))
    written = write_rank_entry(tmp_path, _run(), _entry(0, "rank0.2-4.pt.trace.json.gz"))
    on_disk = read_manifest(tmp_path / MANIFEST_NAME)
    assert on_disk == written
    assert [e.rank for e in written.ranks] == [0, 1]
    assert written.files == ["rank0.2-4.pt.trace.json.gz", "rank1.2-4.pt.trace.json.gz"]
    assert written.link_gbps == 25.0
    assert not list(tmp_path.glob(".*partial"))


def test_a_rank_replaces_its_own_entry() -> None:
    first = merge_rank_entry(None, _run(), _entry(0))
    second = merge_rank_entry(
        first, _run(), _entry(0, "rank0.2-4.pt.trace.json.gz", "rank0.7-9.pt.trace.json.gz")
    )
    assert len(second.ranks) == 1
    assert second.files == ["rank0.2-4.pt.trace.json.gz", "rank0.7-9.pt.trace.json.gz"]


def test_ranks_outside_the_world_are_dropped() -> None:
    old = merge_rank_entry(
        merge_rank_entry(None, _run(4), _entry(3, "rank3.2-4.pt.trace.json.gz")), _run(4), _entry(1)
    )
    merged = merge_rank_entry(old, _run(2), _entry(0, "rank0.2-4.pt.trace.json.gz"))
    assert [e.rank for e in merged.ranks] == [0, 1]
    assert merged.world_size == 2


def test_unreadable_or_foreign_manifest_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / MANIFEST_NAME
    assert read_manifest(path) is None
    path.write_text("{not json")
    assert read_manifest(path) is None
    path.write_bytes(msgspec.json.encode({"format": "someone-else/3"}))
    assert read_manifest(path) is None
    written = write_rank_entry(tmp_path, _run(), _entry(0))
    assert read_manifest(path) == written
