"""Real dumps of a real job: a 3-rank gloo job (torch 2.13, CPU) whose rank 1 is late for an all_reduce.

The NCCL Flight Recorder does not cover gloo, but torch 2.13 records gloo collectives in the same
Flight Recorder (dump version 2.10, ``ProcessGroupGloo::enqueue``), so a CPU machine can make real
dumps (:mod:`tests.generators.gloo_hang`): ranks 0 and 2 enqueue the all_reduce and dump; rank 1
dumps before it enqueues it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from tests.builders import REPO, read_folder_plainly
from timeline.analysis.flight_recorder import analyze_dumps
from timeline.dumps import load_dumps

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def dumps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gloo_hang")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "tests.generators.gloo_hang", str(out)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.mark.slow
def test_the_late_rank_is_named_as_never_entered(dumps: Path) -> None:
    loaded = load_dumps(dumps / "pickle")
    assert loaded.files.get_column("version").unique().to_list() == ["2.10"]
    analysis = analyze_dumps(loaded.entries, loaded.status, loaded.groups, ranks=loaded.ranks)
    roots = analysis.roots.select("rank", pl.col("kind").cast(pl.String)).rows()
    assert roots == [(1, "not_entered")]
    world = analysis.groups.filter(pl.col("pg_desc") == "default_pg").row(0, named=True)
    assert (world["not_entered"], world["waiting"]) == ([1], [0, 2])
    # independently: ranks 0 and 2 enqueued one more operation of the world group than they completed,
    # rank 1 none. gloo's pg_status counts the work's sequence number, which its entries record as
    # op_id; its worker threads may record completions out of order, so a retired entry counts too.
    raw = read_folder_plainly(dumps / "pickle")
    for rank, dump in raw.items():
        world_entries = [e for e in dump["entries"] if e["process_group"][1] == "default_pg"]
        enqueued = dump["pg_status"]["0"]["last_enqueued_collective"]
        completed = max(
            dump["pg_status"]["0"]["last_completed_collective"],
            max(e["op_id"] for e in world_entries if e["retired"]),
        )
        assert enqueued - completed == (0 if rank == 1 else 1)
        assert max(e["op_id"] for e in world_entries) == enqueued
        if rank == 1:
            assert world["stop_seq"] == completed + 1
    assert world["stop_op"] == "gloo:all_reduce"


@pytest.mark.slow
def test_json_dumps_of_the_same_job_read_the_same(dumps: Path) -> None:
    pickled, as_json = load_dumps(dumps / "pickle"), load_dumps(dumps / "json")
    assert set(as_json.files.get_column("encoding")) == {"json"}
    for frame in ("entries", "status", "groups"):
        assert_frame_equal(getattr(pickled, frame), getattr(as_json, frame))
