"""The only input file, naming no rank (#19): rank 0 of a one-rank job, said once; several stay errors.

A single-GPU profile has no ``distributedInfo`` and the profiler's default file name
(``{hostname}_{pid}.{time_ns}.pt.trace.json``) has no rank: every command read it, on both roads (in
memory and rank by rank).
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from tests.builders import TRACES, gpu_run_kineto, run_timeline, write_json
from timeline.errors import RankError
from timeline.run import Inputs, Run
from timeline.trace import load

ROADS = ("memory", "by_rank")
NAME = "host_1234.1700000000000.pt.trace.json"  # the profiler's default name: no rank in it
AMD = TRACES / "kineto" / "hta_amd_mi250" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"


def _note(path: Path, job: str = "of a one-rank job") -> str:
    return f"{path}: no rank in the file or its name; read as rank 0 {job}"


def _single(tmp_path: Path, *, world_size: int | None = None) -> Path:
    return write_json(tmp_path / NAME, gpu_run_kineto(None, world_size=world_size))


def test_load_reads_the_only_file_as_rank_0_with_a_warning(tmp_path: Path) -> None:
    path = _single(tmp_path)
    trace = load(path)
    assert trace.ranks == [0]
    assert set(trace.events.get_column("rank")) == {0}
    assert trace.files.get_column("rank_from").to_list() == ["only file (rank 0)"]
    assert trace.warnings == (_note(path),)


@pytest.mark.parametrize("road", ROADS)
def test_both_roads_read_it_the_same(tmp_path: Path, road: str) -> None:
    path = _single(tmp_path)
    inputs = Inputs(paths=[str(path)], executor="local" if road == "by_rank" else None)
    analysed = Run(inputs).read()
    assert analysed.rank_by_rank == (road == "by_rank")
    assert analysed.warnings == (_note(path),)
    assert analysed.overlap.ranks.get_column("rank").to_list() == [0]
    assert analysed.overlap.iterations.get_column("iteration").to_list() == [1, 2, 3]


def test_a_world_size_without_a_rank_says_how_to_name_another_rank(tmp_path: Path) -> None:
    path = _single(tmp_path, world_size=4)
    trace = load(path)
    assert trace.warnings == (_note(path, "of its 4-rank job (pass --rank N if it is another rank)"),)
    assert load(path, rank=2).ranks == [2]


@pytest.mark.parametrize(
    "args",
    [["analyze"], ["analyze", "--json"], ["analyze", "--executor", "local"], ["collectives"], ["whatif"]],
    ids=" ".join,
)
def test_every_command_reads_it_and_says_so_once(tmp_path: Path, args: list[str]) -> None:
    path = _single(tmp_path)
    result = run_timeline(*args, path)
    assert result.returncode == 0, result.stderr
    assert result.stderr == f"warning: {_note(path)}\n"
    if "--json" in args:
        assert json.loads(result.stdout)["warnings"] == [_note(path)]


def test_check_reads_it(tmp_path: Path) -> None:
    path = _single(tmp_path)
    budget = tmp_path / "budget.toml"
    budget.write_text('[[budgets]]\nmetric = "exposed_comm_ratio"\naggregate = "mean"\nmax = 1.0\n')
    result = run_timeline("check", path, "--budget", budget)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stderr == f"warning: {_note(path)}\n"


def test_the_public_rocm_profile_is_rank_0() -> None:
    trace = load(AMD)
    assert trace.ranks == [0]
    assert trace.warnings == (_note(AMD),)
    assert trace.events.filter(pl.col("kind") == "compute").height > 0


@pytest.mark.parametrize("road", ROADS)
def test_several_files_without_a_rank_stay_an_error(tmp_path: Path, road: str) -> None:
    first = _single(tmp_path)
    write_json(tmp_path / "host_1234.1700000000001.pt.trace.json", gpu_run_kineto(None))
    inputs = Inputs(paths=[str(tmp_path)], executor="local" if road == "by_rank" else None)
    with pytest.raises(RankError, match=rf"^{first}: no rank: the trace has no distributedInfo.rank"):
        Run(inputs).read()


@pytest.mark.parametrize("road", ROADS)
def test_a_rankless_file_beside_a_ranked_one_stays_an_error(tmp_path: Path, road: str) -> None:
    write_json(tmp_path / "rank0.json", gpu_run_kineto(0))
    rankless = write_json(tmp_path / "trace.json", gpu_run_kineto(None))
    inputs = Inputs(paths=[str(tmp_path)], executor="local" if road == "by_rank" else None)
    with pytest.raises(RankError, match=rf"^{rankless}: no rank:"):
        Run(inputs).read()


def test_two_files_claiming_one_rank_stay_an_error(tmp_path: Path) -> None:
    a = write_json(tmp_path / "a.json", gpu_run_kineto(1))
    b = write_json(tmp_path / "b.json", gpu_run_kineto(1))
    with pytest.raises(RankError, match=rf"^{b}: rank 1 is also claimed by {a}"):
        load(tmp_path)


def test_a_rank_regex_that_finds_no_rank_stays_an_error(tmp_path: Path) -> None:
    path = _single(tmp_path)
    with pytest.raises(RankError, match=rf"^{path}: no rank:"):
        load(path, rank_regex=r"node(\d+)")
