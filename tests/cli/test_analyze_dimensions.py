"""``timeline analyze``: communication per dimension, in the text and ``--json`` outputs (#20)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.builders import PARAM, REPO, SAMPLES, exposure_reference, run_timeline
from tests.generators.nccl import device_mesh_job, write_job
from timeline.units import format_ns

FSDP2_TP = REPO / "sample_traces" / "fsdp2_tp_gloo"


def _json(*args: str | Path) -> dict[str, Any]:
    result = run_timeline("analyze", "--json", "--no-findings", *args)
    assert result.returncode == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[int, dict[str, Any]]]:
    job = device_mesh_job([("pp", 2), ("dp", 2), ("tp", 2)], steps=2, gpus_per_node=4, seed=7)
    directory = tmp_path_factory.mktemp("mesh3d")
    write_job(job, directory)
    return directory, job.traces


def test_json_gives_the_exposed_and_hidden_communication_of_each_dimension_of_a_generated_nccl_job(
    mesh: tuple[Path, dict[int, dict[str, Any]]],
) -> None:
    directory, documents = mesh
    summary = _json(directory)
    assert summary["version"] == 4
    measured: dict[tuple[str, int], list[int]] = {}
    for row in summary["dimensions"]["rows"]:
        figures = measured.setdefault((row["dimension"], row["rank"]), [0, 0])
        figures[0] += row["exposed_ns"]
        figures[1] += row["hidden_ns"]
    expected = {
        (dim, rank): list(figures)
        for rank, document in documents.items()
        for dim, figures in exposure_reference(document).items()
    }
    assert measured == expected
    totals = {row["dimension"]: row for row in summary["dimensions"]["totals"]}
    assert sorted(totals) == ["dp", "pp", "tp"]
    for dim, row in totals.items():
        assert row["exposed_ns"] == sum(v[0] for (d, _), v in expected.items() if d == dim)


def test_json_gives_each_dimension_and_iteration_across_ranks_as_the_table_shows_it(
    mesh: tuple[Path, dict[int, dict[str, Any]]],
) -> None:
    """``dimensions.across_ranks`` (what the terminal table prints) from the rows, computed here."""
    directory, _ = mesh
    summary = _json(directory)
    groups: dict[tuple[str, int | None], list[dict[str, Any]]] = {}
    for row in summary["dimensions"]["rows"]:
        groups.setdefault((row["dimension"], row["iteration"]), []).append(row)
    expected = []
    for (dim, iteration), rows in sorted(
        groups.items(), key=lambda kv: (kv[0][0], kv[0][1] is None, kv[0][1])
    ):
        most = max(r["exposed_ns"] for r in rows)
        expected.append(
            {
                "dimension": dim,
                "iteration": iteration,
                "ranks": len(rows),
                "hidden_mean_ns": round(sum(r["hidden_ns"] for r in rows) / len(rows)),
                "exposed_mean_ns": round(sum(r["exposed_ns"] for r in rows) / len(rows)),
                "exposed_max_ns": most,
                "worst_rank": min(r["rank"] for r in rows if r["exposed_ns"] == most),
            }
        )
    assert summary["dimensions"]["across_ranks"] == expected
    text = run_timeline("analyze", "--no-findings", directory).stdout
    table = text.split("Communication per dimension and iteration (across ranks)", 1)[1]
    shown = [
        [cell.strip() for cell in line.split("│")[1:-1]]
        for line in table.splitlines()
        if line.startswith("│")
    ]
    assert shown == [
        [
            row["dimension"],
            "-" if row["iteration"] is None else str(row["iteration"]),
            str(row["ranks"]),
            format_ns(row["hidden_mean_ns"]),
            format_ns(row["exposed_mean_ns"]),
            format_ns(row["exposed_max_ns"]),
            str(row["worst_rank"]),
        ]
        for row in expected
    ]


def test_the_rank_by_rank_road_prints_the_same_dimensions(
    mesh: tuple[Path, dict[int, dict[str, Any]]],
) -> None:
    directory, _ = mesh
    assert _json(directory, "--executor", "local")["dimensions"] == _json(directory)["dimensions"]


def test_fsdp2_tp_sample_text_has_the_table_and_json_the_two_dimensions() -> None:
    result = run_timeline("analyze", "--no-findings", FSDP2_TP)
    assert result.returncode == 0, result.stderr
    assert "Communication per dimension (all ranks and iterations)" in result.stdout
    assert "Communication per dimension and iteration (across ranks)" in result.stdout
    summary = _json(FSDP2_TP)
    assert [row["dimension"] for row in summary["dimensions"]["totals"]] == ["tp", "dp"]
    per_window: dict[tuple[int, int], int] = {}
    for row in summary["dimensions"]["rows"]:
        key = (row["rank"], row["iteration"])
        per_window[key] = per_window.get(key, 0) + row["exclusive_exposed_ns"]
    for row in summary["iterations"]:
        assert per_window.get((row["rank"], row["iteration"]), 0) <= row["exposed_comm_ns"]


def test_a_user_label_renames_a_dimension() -> None:
    summary = _json(FSDP2_TP, "--dimension", "mesh_dp=fsdp")
    assert sorted(row["dimension"] for row in summary["dimensions"]["totals"]) == ["fsdp", "tp"]


def test_the_exposed_dimension_finding_names_the_users_label_as_the_tables_do() -> None:
    result = run_timeline("analyze", "--json", FSDP2_TP, "--dimension", "mesh_tp=tensor")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    [finding] = [f for f in summary["findings"] if f["cause"] == "exposed_dimension"]
    totals = {row["dimension"] for row in summary["dimensions"]["totals"]}
    assert totals == {"dp", "tensor"}
    assert set(finding["evidence"]["dimensions"]) == totals
    assert finding["evidence"]["dimension"] == "tensor"


def test_a_trace_without_groups_has_no_dimensions_and_no_table() -> None:
    assert _json(PARAM)["dimensions"] is None
    result = run_timeline("analyze", "--no-findings", PARAM)
    assert "Communication per dimension" not in result.stdout


def test_the_world_alone_is_in_the_json_and_not_a_table() -> None:
    summary = _json(SAMPLES / "ddp_gloo")
    assert [row["dimension"] for row in summary["dimensions"]["totals"]] == ["world"]
    world = summary["dimensions"]["totals"][0]
    assert world["exposed_ns"] == sum(row["exposed_comm_ns"] for row in summary["iterations"])
    result = run_timeline("analyze", "--no-findings", SAMPLES / "ddp_gloo")
    assert "Communication per dimension" not in result.stdout


def test_a_bad_dimension_option_is_one_error_line() -> None:
    result = run_timeline("analyze", FSDP2_TP, "--dimension", "mesh_dp")
    assert result.returncode == 2
    assert result.stderr.startswith("error: ")
    assert len(result.stderr.strip().splitlines()) == 1


def test_check_fails_the_budget_of_the_more_exposed_dimension_only(
    mesh: tuple[Path, dict[int, dict[str, Any]]], tmp_path: Path
) -> None:
    directory, documents = mesh
    windows = sum(
        1
        for d in documents.values()
        for e in d["traceEvents"]
        if str(e.get("name", "")).startswith("ProfilerStep#")
    )
    means = {
        dim: sum(exposure_reference(d).get(dim, (0, 0))[0] for d in documents.values()) / windows
        for dim in ("dp", "tp", "pp")
    }
    worst = max(means, key=lambda d: means[d])
    limit = (means[worst] + max(v for d, v in means.items() if d != worst)) / 2
    budget = tmp_path / "b.toml"
    budget.write_text(
        "".join(
            f'[[budgets]]\nname = "{dim}"\nmetric = "exposed_comm_ns"\naggregate = "mean"\nmax = {limit}\n'
            f'dimension = "{dim}"\n\n'
            for dim in means
        )
    )
    result = run_timeline("check", directory, "--budget", budget, "--json")
    assert result.returncode == 1, result.stderr
    verdicts = {v["name"]: v for v in json.loads(result.stdout)["verdicts"]}
    assert {name for name, v in verdicts.items() if v["status"] == "fail"} == {worst}
    for dim, mean in means.items():
        assert verdicts[dim]["value"] == pytest.approx(mean)


def test_the_diagnosis_reads_the_exposure_the_summary_shows_computed_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """analyze computes the communication per dimension once: the diagnosis given it finds what it
    finds computing its own, and computes none (the labels' attribution is not run again)."""
    import timeline
    import timeline.analysis.dimensions as dimensions
    import timeline.diagnosis.communication as rules
    from timeline.results.diagnosis import build_diagnosis

    labels = {"mesh_tp": "tensor"}
    own = build_diagnosis(timeline.analyze(FSDP2_TP, dimensions=labels).diagnosis)
    run = timeline.analyze(FSDP2_TP, dimensions=labels)
    assert run.dimension_exposure is not None

    def not_again(*args: object, **kwargs: object) -> None:
        raise AssertionError("the exposure per dimension was computed again")

    monkeypatch.setattr(rules, "communication_labels", not_again)
    monkeypatch.setattr(dimensions, "communication_labels", not_again)
    shared = build_diagnosis(run.diagnosis)
    assert shared == own
    assert "exposed_dimension" in {finding.cause for finding in shared.findings}
