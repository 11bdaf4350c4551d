"""Process groups in the importer: the group columns of communication events and ``Trace.groups``.

Every expected value is read here from the raw JSON with the standard library, not by the importer.
The NCCL traces come from ``tests.generators.nccl``; the gloo records copy the layout of a torch 2.13
CPU capture (``gloo:send`` inside ``c10d::send``, whose ``Concrete Inputs`` name the peer).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.generators.nccl import device_mesh_job, write_job
from timeline.errors import TraceFormatError
from timeline.importers.groups import declared_groups, parse_ranks
from timeline.importers.kineto import parse_kineto
from timeline.trace import load


@pytest.fixture(scope="module")
def job_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("pp_dp_tp")
    write_job(device_mesh_job([("pp", 2), ("dp", 2), ("tp", 2)], steps=2, seed=7), directory)
    return directory


def raw_kernels(path: Path) -> list[dict[str, Any]]:
    document = json.loads(path.read_text())
    return [e for e in document["traceEvents"] if e.get("cat") == "kernel" and "Collective name" in e["args"]]


def test_kernel_group_args_become_columns(job_dir: Path) -> None:
    trace = load(job_dir, workers=1)
    comm = trace.events.filter(pl.col("kind") == "communication")
    seen_high = False
    for path in sorted(job_dir.glob("rank*.json")):
        rank = json.loads(path.read_text())["distributedInfo"]["rank"]
        mine = comm.filter(pl.col("rank") == rank).sort("start_ns")
        kernels = sorted(raw_kernels(path), key=lambda e: e["ts"])
        assert mine.height == len(kernels)
        for row, kernel in zip(mine.iter_rows(named=True), kernels, strict=True):
            args = kernel["args"]
            assert row["pg_name"] == args["Process Group Name"]
            assert row["pg_desc"] == args["Process Group Description"]
            assert row["pg_ranks"] == args["Process Group Ranks"]
            assert row["seq"] == args["Seq"]
            assert row["comms_id"] == args["Comms Id"]
            assert row["peer"] == args.get("Dst Rank", args.get("Src Rank"))
            seen_high |= args["Comms Id"] >= 2**63
    assert seen_high  # beyond Int64: the column is UInt64
    assert comm.schema["comms_id"] == pl.UInt64()


def test_trace_groups_are_each_ranks_pg_config(job_dir: Path) -> None:
    trace = load(job_dir, workers=1)
    expected = []
    for path in sorted(job_dir.glob("rank*.json"), key=lambda p: int(p.name[4:].split(".")[0])):
        info = json.loads(path.read_text())["distributedInfo"]
        expected += [
            (info["rank"], g["pg_name"], g["pg_desc"], g["ranks"], g["pg_size"], g["backend_config"])
            for g in info["pg_config"]
        ]
    got = trace.groups.select("rank", "pg_name", "pg_desc", "ranks", "pg_size", "backend").rows()
    assert got == expected
    assert not trace.groups["ranks_truncated"].any()


def test_pg_config_generations_and_cut_lists() -> None:
    info = {
        "pg_config": [
            {
                "pg_name": "0",
                "uid": 0,
                "backend_config": "cuda:nccl",
                "pg_size": 1,
                "ranks": [0],
            },  # torch 2.2-2.3
            {
                "pg_name": "7",
                "pg_desc": "mesh_ep",
                "pg_size": 64,
                "ranks": "[0, 8, 16, ...]",
            },  # on demand, cut
            {"pg_name": 3, "pg_desc": "mesh_tp", "ranks": "[0, 1]"},  # a number as name, no size
            {"pg_desc": "no name"},
            "not an object",
        ]
    }
    rows = declared_groups(info).select("pg_name", "pg_desc", "ranks", "ranks_truncated", "pg_size").rows()
    assert rows == [
        ("0", None, [0], False, 1),
        ("7", "mesh_ep", [0, 8, 16], True, 64),
        ("3", "mesh_tp", [0, 1], False, 2),
    ]
    assert parse_ranks("[]") is None
    assert parse_ranks([0, True]) is None
    assert parse_ranks("[0, -1]") is None


def test_groups_survive_parquet_and_are_digested(job_dir: Path, tmp_path: Path) -> None:
    trace = load(job_dir, workers=1)
    target = tmp_path / "job.parquet"
    trace.write_parquet(target)
    again = load(target)
    assert again.groups.equals(trace.groups)
    assert again.events.equals(trace.events)
    kept = {k: v for k, v in pl.read_parquet_metadata(target).items() if k.startswith("timeline.")}
    rows = json.loads(kept["timeline.groups"])
    rows[0]["pg_desc"] = "mesh_changed"
    kept["timeline.groups"] = json.dumps(rows)
    changed = tmp_path / "changed.parquet"
    pl.read_parquet(target).write_parquet(changed, metadata=kept)
    with pytest.raises(TraceFormatError, match="content does not match its digest"):
        load(changed)
    kept["timeline.groups"] = "[{]"
    broken = tmp_path / "broken.parquet"
    pl.read_parquet(target).write_parquet(broken, metadata=kept)
    with pytest.raises(TraceFormatError, match=r"metadata key timeline\.groups is not a process group table"):
        load(broken)


def test_a_parquet_file_from_before_groups_reads_with_none(job_dir: Path, tmp_path: Path) -> None:
    from timeline.importers.parquet import content_digest

    trace = load(job_dir, workers=1)
    target = tmp_path / "job.parquet"
    trace.write_parquet(target)
    kept = {k: v for k, v in pl.read_parquet_metadata(target).items() if k.startswith("timeline.")}
    del kept["timeline.groups"]
    frame = pl.read_parquet(target)
    events = load(target).events
    kept["timeline.digest"] = content_digest(
        events, files_json=kept["timeline.files"], warnings_json=kept["timeline.warnings"]
    )
    old = tmp_path / "old.parquet"
    frame.write_parquet(old, metadata=kept)
    again = load(old)
    assert again.groups.height == 0
    assert again.events.equals(trace.events)


def gloo_p2p(rank: int, peer: int, *, world: int = 3) -> bytes:
    """A gloo rank's trace: a send to ``peer`` then a receive from it (torch 2.13 CPU layout)."""
    pid = 7000 + rank
    events: list[dict[str, Any]] = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#1",
            "pid": pid,
            "tid": pid,
            "ts": 0.0,
            "dur": 900.0,
            "args": {},
        },
    ]
    for i, (op, name) in enumerate((("c10d::send", "gloo:send"), ("c10d::recv_", "gloo:recv"))):
        start = 100.0 + 300 * i
        events += [
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": op,
                "pid": pid,
                "tid": pid,
                "ts": start,
                "dur": 200.0,
                "args": {
                    "External id": 10 + i,
                    "Record function id": 0,
                    "Concrete Inputs": ["", "", str(peer), "0"],
                    "Input type": ["TensorList", "", "Scalar", "Scalar"],
                    "Input Strides": [[[1]], [], [], []],
                    "Input Dims": [[[100]], [], [], []],
                    "Ev Idx": 3 + i,
                },
            },
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": name,
                "pid": pid,
                "tid": pid,
                "ts": start + 20,
                "dur": 150.0,
                "args": {
                    "External id": 20 + i,
                    "Record function id": 0,
                    "Concrete Inputs": [""],
                    "Input type": ["float"],
                    "Input Strides": [[1]],
                    "Input Dims": [[100]],
                    "Ev Idx": 5 + i,
                },
            },
        ]
    document = {
        "schemaVersion": 1,
        "distributedInfo": {
            "backend": "gloo",
            "rank": rank,
            "world_size": world,
            "pg_count": 1,
            "pg_config": [
                {
                    "pg_name": "0",
                    "pg_desc": "default_pg",
                    "backend_config": "cpu:gloo,cuda:gloo",
                    "pg_size": world,
                    "ranks": list(range(world)),
                }
            ],
        },
        "traceEvents": events,
        "baseTimeNanoseconds": 1790857026000000000,
    }
    return json.dumps(document).encode()


def test_gloo_sends_take_their_peer_from_the_c10d_op() -> None:
    result = parse_kineto(gloo_p2p(0, 2), source="rank0.json")
    comm = result.events.filter(pl.col("kind") == "communication").sort("start_ns")
    assert comm.select("collective", "group_peer", "pg_name", "in_bytes").rows() == [
        ("send", 2, "0", 400),
        ("recv", 2, "0", 400),
    ]
    cpu_op = result.events.filter(pl.col("name") == "c10d::send")
    assert cpu_op["group_peer"].to_list() == [None]  # only communication events carry it


def test_gloo_sends_and_receives_are_paired(tmp_path: Path) -> None:
    from timeline.analysis.collectives import match_collectives

    for rank, peer in ((0, 2), (2, 0)):
        (tmp_path / f"rank{rank}.json").write_bytes(gloo_p2p(rank, peer))
    trace = load(tmp_path, workers=1)
    pairs = match_collectives(trace.events, groups=trace.groups).point_to_point
    # each rank: send at 120 µs for 150 µs, receive at 420 µs for 150 µs (relative to the base)
    base = 1790857026000000000
    assert pairs.select("src", "dst", "index", "complete", "send_start_ns", "recv_start_ns", "bytes").sort(
        "src"
    ).rows() == [
        (0, 2, 0, True, base + 120_000, base + 420_000, 400),
        (2, 0, 0, True, base + 120_000, base + 420_000, 400),
    ]
    assert pairs["transfer_ns"].to_list() == [150_000, 150_000]


@pytest.mark.parametrize("spare_core", [False, True])
def test_the_chunked_reader_gives_the_same_columns_and_groups(job_dir: Path, spare_core: bool) -> None:
    from timeline.importers.stream import parse_kineto_stream

    path = job_dir / "rank3.pt.trace.json"
    whole = parse_kineto(path.read_bytes(), source=str(path))
    chunked = parse_kineto_stream(path, source=str(path), chunk_bytes=4096, spare_core=spare_core)
    assert chunked.events.equals(whole.events)
    assert chunked.groups is not None
    assert whole.groups is not None
    assert chunked.groups.equals(whole.groups)
    assert whole.events["comms_id"].drop_nulls().len() > 0
