"""Parquet datasets partitioned by rank: written rank by rank, read back exactly, analysed rank by rank."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from tests.builders import PARAM, SAMPLES, assert_overlap_equal, run_timeline
from tests.builders import SAMPLE_HOROVOD as HOROVOD
from timeline.analysis.overlap import compute_overlap
from timeline.errors import UsageError
from timeline.execution import (
    LocalExecutor,
    analyze_files,
    dataset_parts,
    is_dataset,
    scan_dataset,
    write_dataset,
)
from timeline.trace import load


def _analyze_json(*args: str | Path) -> dict[str, Any]:
    result = run_timeline("analyze", "--json", *args)
    assert result.returncode == 0, result.stderr
    summary: dict[str, Any] = json.loads(result.stdout)
    summary["top_collectives"] = sorted(summary["top_collectives"], key=json.dumps)
    return summary


@pytest.fixture(scope="module")
def param_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The PARAM traces converted once for the module, with the command line."""
    target = tmp_path_factory.mktemp("dataset") / "param"
    result = run_timeline("convert", PARAM, "-o", target, "--partition-by-rank")
    assert result.returncode == 0, result.stderr
    assert (
        result.stderr
        == f"wrote 19,789 events of 8 rank(s) to {target} (a Parquet dataset partitioned by rank)\n"
    )
    return target


def test_one_partition_per_rank(param_dataset: Path) -> None:
    assert sorted(p.name for p in param_dataset.iterdir()) == [f"rank={r}" for r in range(8)]
    for r in range(8):
        assert [p.name for p in (param_dataset / f"rank={r}").iterdir()] == ["part-0.parquet"]
    assert is_dataset(param_dataset)
    assert not is_dataset(PARAM)


def test_dataset_loads_as_its_sources(param_dataset: Path) -> None:
    original = load(PARAM)
    again = load(param_dataset)
    assert_frame_equal(original.events, again.events)
    assert_frame_equal(original.files, again.files)
    assert original.warnings == again.warnings


def test_dataset_analyses_rank_by_rank_as_its_sources(param_dataset: Path) -> None:
    expected = compute_overlap(load(PARAM).events)
    analysis = analyze_files(param_dataset, executor=LocalExecutor(2))
    assert_overlap_equal(expected, analysis.overlap)
    assert _analyze_json(param_dataset) == _analyze_json(PARAM)


def test_scan_dataset_is_lazy_per_rank(param_dataset: Path) -> None:
    lazy = scan_dataset(param_dataset)
    assert isinstance(lazy, pl.LazyFrame)
    rank3 = lazy.filter(pl.col("rank") == 3).collect()
    assert_frame_equal(rank3, load(PARAM).events.filter(pl.col("rank") == 3))
    per_rank = lazy.group_by("rank").agg(pl.len()).sort("rank").collect(engine="streaming")
    assert per_rank.get_column("len").sum() == 19_789


def test_an_output_without_suffix_is_a_dataset(tmp_path: Path) -> None:
    target = tmp_path / "run"
    result = run_timeline("convert", SAMPLES / "ddp_gloo", "-o", target)
    assert result.returncode == 0, result.stderr
    assert [p.name for p in dataset_parts(target)] == ["part-0.parquet", "part-0.parquet"]
    assert load(target).events.equals(load(SAMPLES / "ddp_gloo").events)


def test_existing_outputs_are_kept_without_force(tmp_path: Path) -> None:
    target = tmp_path / "run"
    write_dataset(SAMPLES / "ddp_gloo", target)
    result = run_timeline("convert", SAMPLES / "ddp_gloo_4rank", "-o", target)
    assert result.returncode == 2
    assert result.stderr == f"error: {target}: exists; pass --force to overwrite it\n"
    written = write_dataset(SAMPLES / "ddp_gloo_4rank", target, force=True)
    assert written.ranks == (0, 1, 2, 3)
    assert sorted(p.name for p in target.iterdir()) == [f"rank={r}" for r in range(4)]
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    with pytest.raises(UsageError, match="a directory that is not a timeline dataset"):
        write_dataset(SAMPLES / "ddp_gloo", other, force=True)
    assert (other / "keep.txt").read_text() == "mine"
    with pytest.raises(UsageError, match="holds some of the inputs"):
        write_dataset(target, target, force=True)
    assert not list(tmp_path.glob(".*partial*"))


def test_horovod_beside_kineto_shares_rank_zero(tmp_path: Path) -> None:
    paths = [HOROVOD, SAMPLES / "ddp_gloo"]
    target = tmp_path / "mixed"
    write_dataset(paths, target)
    assert len(list((target / "rank=0").iterdir())) == 2  # the profiler trace and the timeline
    original = load(paths)
    again = load(target)
    assert_frame_equal(original.events, again.events)
    assert original.files.sort("rank", "path").equals(again.files.sort("rank", "path"))
    assert_overlap_equal(
        compute_overlap(original.events), analyze_files(target, executor=LocalExecutor(2)).overlap
    )
