"""Capture run folders: the manifest decides which files are the run, and windows share a rank."""

from __future__ import annotations

import shutil
from pathlib import Path

import msgspec
import pytest

from tests.builders import REPO
from timeline.errors import RankError, UsageError
from timeline.trace import load

SAMPLE = REPO / "sample_traces" / "ddp_gloo"


def copy_run(tmp_path: Path) -> tuple[Path, dict[str, object]]:
    run = tmp_path / "run"
    shutil.copytree(SAMPLE, run)
    manifest = msgspec.json.decode((run / "manifest.json").read_bytes())
    assert isinstance(manifest, dict)
    return run, manifest


def test_manifest_lists_the_files_of_the_run(tmp_path: Path) -> None:
    run, _ = copy_run(tmp_path)
    shutil.copy(run / "rank0.2-4.pt.trace.json.gz", run / "rank7.stale.pt.trace.json.gz")  # an earlier run
    trace = load(run)
    assert trace.ranks == [0, 1]


def test_windows_of_one_rank_listed_in_the_manifest_share_it(tmp_path: Path) -> None:
    run, manifest = copy_run(tmp_path)
    shutil.copy(run / "rank0.2-4.pt.trace.json.gz", run / "rank0.7-9.pt.trace.json.gz")
    ranks = manifest["ranks"]
    assert isinstance(ranks, list)
    ranks[0]["files"].append("rank0.7-9.pt.trace.json.gz")
    (run / "manifest.json").write_bytes(msgspec.json.encode(manifest))
    trace = load(run)
    assert trace.files["rank"].to_list() == [0, 0, 1]


def test_the_same_files_without_a_manifest_still_collide(tmp_path: Path) -> None:
    run, _ = copy_run(tmp_path)
    shutil.copy(run / "rank0.2-4.pt.trace.json.gz", run / "rank0.7-9.pt.trace.json.gz")
    (run / "manifest.json").unlink()
    with pytest.raises(RankError, match="rank 0 is also claimed"):
        load(run)


def test_a_listed_file_that_is_missing_is_an_error(tmp_path: Path) -> None:
    run, _ = copy_run(tmp_path)
    (run / "rank1.2-4.pt.trace.json.gz").unlink()
    with pytest.raises(UsageError, match=r"listed in .*manifest\.json but missing"):
        load(run)
