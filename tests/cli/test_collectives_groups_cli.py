"""``timeline collectives`` on multi-group jobs: groups, dimensions, pairs, ambiguity, nodes (JSON v2).

The traces are generated (``tests.generators.nccl``); expected values come from the generator's
ground truth and the mesh layout, written out here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.builders import run_timeline
from tests.generators.nccl import Job, device_mesh_job, write_job


@pytest.fixture(scope="module")
def pp_dp_tp(tmp_path_factory: pytest.TempPathFactory) -> tuple[Job, Path]:
    job = device_mesh_job([("pp", 2), ("dp", 2), ("tp", 2)], steps=2, seed=11)
    directory = tmp_path_factory.mktemp("pp_dp_tp")
    write_job(job, directory, compress=True)
    return job, directory


def run_json(*args: object) -> dict[str, Any]:
    result = run_timeline("collectives", *map(str, args), "--json")
    assert result.returncode == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def test_json_v2_groups_pairs_and_dimensions(pp_dp_tp: tuple[Job, Path]) -> None:
    job, directory = pp_dp_tp
    data = run_json(directory, "--dimension", "mesh_dp=fsdp", "--gpus-per-node", "2")
    assert data["version"] == 4
    assert data["gpus_per_node"] == 2
    groups = {row["group"]: row for row in data["groups"]}
    assert set(groups) == {g.name for g in job.groups}
    for g in job.groups:
        row = groups[g.name]
        expected = {"default_pg": "world", "mesh_dp": "fsdp"}.get(g.desc, g.desc.removeprefix("mesh_"))
        assert row["dimension"] == expected
        assert row["ranks"] == list(g.ranks)
        assert row["size"] == len(g.ranks)
        # ranks 2k and 2k+1 share a node: tp groups [2k, 2k+1] stay inside one, dp and pp cross
        assert row["spans_nodes"] == (len({r // 2 for r in g.ranks}) > 1)
        assert row["collectives"] == sum(1 for t in job.collectives if t.group == g.name)
        assert row["point_to_point"] == sum(1 for p in job.pairs if p.group == g.name)
    assert {c["dimension"] for c in data["collectives"]} == {"fsdp", "tp"}
    assert len(data["point_to_point"]) == len(job.pairs)
    assert all(p["complete"] and p["spans_nodes"] for p in data["point_to_point"])  # pp [r, r+4]
    assert data["ambiguity"] == []
    assert data["ambiguous"] == []
    assert data["ranks"] == list(range(8))


def test_tables_show_groups_and_pairs(pp_dp_tp: tuple[Job, Path]) -> None:
    _, directory = pp_dp_tp
    result = run_timeline("collectives", directory, "--dimension", "mesh_tp=tensor")
    assert result.returncode == 0, result.stderr
    assert "Process groups" in result.stdout
    assert "tensor" in result.stdout
    assert "Point-to-point: each send with its receive" in result.stdout
    assert "send/receive pairs" in result.stdout


def test_ambiguous_groups_are_reported_and_matched_nowhere(tmp_path: Path) -> None:
    job = device_mesh_job([("dp", 2), ("tp", 2)], steps=1, names=False, seed=12)
    write_job(job, tmp_path)
    data = run_json(tmp_path)
    assert data["collectives"] == []
    kernels = sum(len(t.ranks) for t in job.collectives)
    assert sum(row["events"] for row in data["ambiguity"]) == kernels == len(data["ambiguous"])
    assert any("do not say which process group" in w for w in data["warnings"])
    tables = run_timeline("collectives", tmp_path)
    assert tables.returncode == 0
    assert "Collectives matched across no rank: their process group" in tables.stdout
    assert "do not say which process group" in tables.stderr


@pytest.mark.parametrize(
    ("value", "message"),
    [("mesh_dp", "expected DESCRIPTION=LABEL"), ("mesh_dp=a b", "a label is letters")],
)
def test_bad_dimension_is_one_error_line(pp_dp_tp: tuple[Job, Path], value: str, message: str) -> None:
    _, directory = pp_dp_tp
    result = run_timeline("collectives", directory, "--dimension", value)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: --dimension")
    assert message in lines[0]
