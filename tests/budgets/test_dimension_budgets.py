"""Budgets scoped to a mesh dimension pass or fail on that dimension's own numbers (#20).

The expected values are computed from the raw JSON of generated NCCL traces with plain interval
arithmetic (:func:`tests.builders.exposure_reference`), never by the code under test.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.builders import (
    REPO,
    exposure_reference,
    frames_of,
    interval_intersection,
    interval_length,
    interval_union,
    older_summary,
    raw_kernels,
    run_of,
)
from tests.generators.nccl import device_mesh_job, write_job
from timeline import load
from timeline.budgets import (
    MetricFrames,
    evaluate_budgets,
    frames_from_summary,
    parse_budgets,
)
from timeline.errors import BudgetError
from timeline.results.summary import build_summary


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[int, dict[str, Any]]]:
    generated = device_mesh_job([("dp", 2), ("tp", 2)], steps=3, gpus_per_node=2, seed=4)
    directory = tmp_path_factory.mktemp("mesh")
    write_job(generated, directory)
    return directory, generated.traces


@pytest.fixture(scope="module")
def run(job: tuple[Path, dict[int, dict[str, Any]]]) -> MetricFrames:
    directory, _ = job
    return frames_of(load(directory), label="mesh", dimensions=True)


def _mean_exposed(documents: dict[int, dict[str, Any]], dim: str) -> float:
    """The dimension's exposed time per rank × iteration window: its total over the ProfilerStep windows."""
    total = sum(exposure_reference(document).get(dim, (0, 0))[0] for document in documents.values())
    windows = sum(
        1
        for document in documents.values()
        for event in document["traceEvents"]
        if str(event.get("name", "")).startswith("ProfilerStep#")
    )
    return total / windows


def _verdicts(budgets: list[dict[str, object]], frames: MetricFrames) -> dict[str, tuple[str, float | None]]:
    report = evaluate_budgets(parse_budgets({"budgets": budgets}, source="t.toml"), frames)
    return {v.name: (v.status, v.value) for v in report.verdicts}


def test_the_tp_budget_fails_and_the_dp_budget_passes_on_their_own_numbers(
    job: tuple[Path, dict[int, dict[str, Any]]], run: MetricFrames
) -> None:
    _, documents = job
    tp, dp = _mean_exposed(documents, "tp"), _mean_exposed(documents, "dp")
    assert tp > 0
    assert dp > 0
    # one limit between the two means: the dimension above it fails, the one below passes
    low, high = sorted((tp, dp))
    limit = (low + high) / 2
    verdicts = _verdicts(
        [
            {"name": "tp", "metric": "exposed_comm_ns", "aggregate": "mean", "max": limit, "dimension": "tp"},
            {"name": "dp", "metric": "exposed_comm_ns", "aggregate": "mean", "max": limit, "dimension": "dp"},
            {
                "name": "desc",
                "metric": "exposed_comm_ns",
                "aggregate": "mean",
                "max": limit,
                "pg_desc": "mesh_tp",
            },
        ],
        run,
    )
    assert verdicts["tp"][1] == pytest.approx(tp)
    assert verdicts["dp"][1] == pytest.approx(dp)
    assert verdicts["desc"] == verdicts["tp"]
    assert verdicts["tp"][0] == ("fail" if tp > dp else "pass")
    assert verdicts["dp"][0] == ("fail" if dp > tp else "pass")


def test_a_summary_json_gives_the_same_verdicts(
    job: tuple[Path, dict[int, dict[str, Any]]], run: MetricFrames
) -> None:
    directory, _ = job
    trace = load(directory)
    summary = frames_from_summary(build_summary(run_of(trace), findings=False), label="s.json")
    budgets: list[dict[str, object]] = [
        {"name": dim, "metric": "exposed_comm_ratio", "aggregate": "max", "max": 0.01, "dimension": dim}
        for dim in ("tp", "dp")
    ]
    assert _verdicts(budgets, summary) == _verdicts(budgets, run)


def test_a_collective_metric_scoped_to_a_dimension_reads_only_its_collectives(
    job: tuple[Path, dict[int, dict[str, Any]]], run: MetricFrames
) -> None:
    _, documents = job
    expected = 0
    for document in documents.values():
        compute, comm = raw_kernels(document)
        busy = interval_union(compute)
        for dim, (start, end) in comm:
            if dim == "tp":
                exposed = end - start - interval_length(interval_intersection([(start, end)], busy))
                expected = max(expected, exposed)
    verdicts = _verdicts(
        [
            {
                "name": "c",
                "metric": "collective_exposed_ns",
                "aggregate": "max",
                "max": 1e12,
                "dimension": "tp",
            }
        ],
        run,
    )
    assert verdicts["c"] == ("pass", expected)


def test_a_dimension_the_run_lacks_has_no_data(run: MetricFrames) -> None:
    verdicts = _verdicts(
        [{"name": "pp", "metric": "exposed_comm_ns", "aggregate": "max", "max": 1, "dimension": "pp"}], run
    )
    assert verdicts["pp"] == ("nodata", None)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            {"metric": "compute_ns", "max": 1, "dimension": "tp"},
            "budgets[0].dimension: applies to communication",
        ),
        ({"metric": "exposed_comm_ns", "max": 1, "dimension": "tp", "pg_desc": "mesh_tp"}, "not both"),
        ({"metric": "exposed_comm_ns", "max": 1, "dimension": []}, "budgets[0].dimension: must be a name"),
    ],
)
def test_bad_dimension_scopes_are_refused(entry: dict[str, object], message: str) -> None:
    with pytest.raises(BudgetError, match=re.escape(message)):
        parse_budgets({"budgets": [entry]}, source="t.toml")


def test_a_summary_of_layout_2_cannot_answer_a_dimension_budget() -> None:
    trace = load(REPO / "sample_traces" / "fsdp2_tp_gloo")
    summary = build_summary(run_of(trace), findings=False)
    older = frames_from_summary(older_summary(summary, version=2), label="old.json")
    budgets = parse_budgets(
        {"budgets": [{"metric": "exposed_comm_ns", "max": 1, "dimension": "tp"}]}, source="t.toml"
    )
    with pytest.raises(BudgetError, match="layout 1 or 2"):
        evaluate_budgets(budgets, older)


def test_a_summary_of_layout_2_still_answers_the_budgets_without_a_dimension() -> None:
    trace = load(REPO / "sample_traces" / "fsdp2_tp_gloo")
    summary = build_summary(run_of(trace), findings=False)
    older = older_summary(summary, version=2)
    assert "dimensions" not in older
    frames = frames_from_summary(older, label="old.json")
    verdicts = _verdicts(
        [{"name": "all", "metric": "exposed_comm_ns", "aggregate": "max", "max": 1e12}], frames
    )
    expected = max(row["exposed_comm_ns"] for row in older["iterations"])
    assert verdicts["all"] == ("pass", expected)


def test_on_the_fsdp2_tp_sample_each_dimension_budget_reads_its_own_rows() -> None:
    trace = load(REPO / "sample_traces" / "fsdp2_tp_gloo")
    frames = frames_of(trace, label="fsdp2_tp", dimensions=True)
    assert frames.dimensions is not None
    rows = frames.dimensions.filter(pl.col("by") == "dimension")
    worst = {
        d: max(rows.filter(pl.col("dimension") == d).get_column("exposed_ns").to_list()) for d in ("dp", "tp")
    }
    assert worst["dp"] != worst["tp"]
    limit = (worst["dp"] + worst["tp"]) / 2
    verdicts = _verdicts(
        [
            {"name": d, "metric": "exposed_comm_ns", "aggregate": "max", "max": limit, "dimension": d}
            for d in ("dp", "tp")
        ],
        frames,
    )
    for dim in ("dp", "tp"):
        assert verdicts[dim] == ("fail" if worst[dim] > limit else "pass", worst[dim])


def test_check_diagnoses_with_the_exposure_its_budgets_read_computed_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``check`` with budgets scoped to a dimension and findings: the diagnosis reads the exposure per
    dimension the budgets read (computing none of its own) and finds what it finds computing it."""
    import timeline.diagnosis.communication as rules
    from timeline.budgets.runs import read_run
    from timeline.run import Inputs, RunOptions

    inputs = Inputs(paths=[str(REPO / "sample_traces" / "fsdp2_tp_gloo")])
    options = RunOptions(dimensions={"mesh_tp": "tensor"})
    own = read_run(inputs, options, match=False, findings=True).diagnosis

    def not_again(*args: object, **kwargs: object) -> None:
        raise AssertionError("the exposure per dimension was computed again")

    monkeypatch.setattr(rules, "communication_labels", not_again)
    shared = read_run(inputs, options, match=False, findings=True, dimensions=True)
    assert shared.diagnosis == own
    assert own is not None
    assert "exposed_dimension" in {finding.cause for finding in own.findings}
