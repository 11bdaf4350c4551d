"""The run object (issue #36): one matching of the collectives per run, whatever door reads it.

Each of the four defects the run object fixes has a test of its own here; ``tests/test_consistency.py``
compares every door on every trace.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

import timeline
import timeline.analysis.collectives as collectives_module
from cli.main import app
from tests.builders import REPO, TRACES

SAMPLES = REPO / "sample_traces"
GLOO_MESHES = ("fsdp2_tp_gloo", "expert_gloo", "pipeline_gloo")
FILTER_2RANK = TRACES / "kineto" / "hta_trace_filter_2rank"


def _cli(*args: str | Path) -> Any:
    result = CliRunner().invoke(app, [str(a) for a in args], prog_name="timeline", catch_exceptions=False)
    assert result.exit_code in (0, 1), result.stderr
    return result


def _json(*args: str | Path) -> dict[str, Any]:
    decoded: dict[str, Any] = json.loads(_cli(*args, "--json").stdout)
    return decoded


@pytest.fixture
def matchings(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the calls of ``match_collectives`` (the run imports it from its module when first asked)."""
    calls: list[int] = []
    real: Callable[..., Any] = collectives_module.match_collectives

    def counting(events: pl.DataFrame, **options: Any) -> Any:
        calls.append(events.height)
        return real(events, **options)

    monkeypatch.setattr(collectives_module, "match_collectives", counting)
    return calls


# --- defect 1: the library and the command agree, in memory and rank by rank ---------------------


@pytest.mark.parametrize("executor", [None, "local"])
def test_the_library_gives_the_verdict_the_command_prints(executor: str | None) -> None:
    path = SAMPLES / "ddp_gloo"
    run = timeline.analyze(path, executor=executor)
    assert run.rank_by_rank == (executor is not None)
    options = [] if executor is None else ["--executor", executor]
    printed = _json("analyze", *options, path)
    from timeline.render.json import render_json
    from timeline.results.diagnosis import build_diagnosis

    library = json.loads(render_json(build_diagnosis(run.diagnosis)))
    assert (printed["verdict"], printed["findings"]) == (library["verdict"], library["findings"])
    # every cause is examined rank by rank too: the graph parts were read with the overlap
    assert not any("not examined" in note for note in printed["verdict"]["notes"] if "rank by rank" in note)
    in_memory = json.loads(render_json(build_diagnosis(timeline.analyze(path).diagnosis)))
    assert library == in_memory


# --- defect 2: check matches gloo groups with the clocks that tell them apart ---------------------


@pytest.mark.parametrize("sample", GLOO_MESHES)
def test_check_sees_the_collectives_collectives_matches(sample: str, tmp_path: Path) -> None:
    budget = tmp_path / "timeline.toml"
    budget.write_text('[[budgets]]\nmetric = "collective_start_skew_ns"\nmax = 1e15\n', encoding="utf-8")
    report = _json("check", SAMPLES / sample, "--budget", budget)
    (verdict,) = report["verdicts"]
    assert verdict["status"] == "pass", verdict
    matched = _json("collectives", SAMPLES / sample)["collectives"]
    assert len(matched) == {"fsdp2_tp_gloo": 54, "expert_gloo": 32, "pipeline_gloo": 6}[sample]
    assert verdict["value"] == max(row["start_skew_ns"] for row in matched)


# --- defect 3: the report draws the collectives the collectives command matches ------------------


@pytest.mark.parametrize("path", [*(SAMPLES / s for s in GLOO_MESHES), FILTER_2RANK], ids=lambda p: p.name)
def test_the_report_draws_the_collectives_of_timeline_collectives(path: Path) -> None:
    import msgspec

    from timeline.report.data import build_report_data

    drawn = build_report_data(timeline.analyze(path)).collectives_report
    assert drawn is not None, "the report has a collectives section"
    keys = ("collective_id", "group", "expected_ranks", "complete", "busbw_gbps", "last_rank")
    shown = [{k: row[k] for k in keys} for row in msgspec.to_builtins(drawn.collectives)]
    assert shown == [{k: row[k] for k in keys} for row in _json("collectives", path)["collectives"]]


def test_the_report_of_two_traced_ranks_of_128_says_128_expected_and_incomplete() -> None:
    from timeline.report.data import prepare_report_data

    drawn = prepare_report_data(timeline.analyze(FILTER_2RANK)).collectives
    assert drawn is not None
    rows = drawn.collectives.filter(pl.col("busbw_gbps").is_not_null())
    assert set(rows.get_column("expected_ranks").to_list()) == {128}
    assert not any(rows.get_column("complete").to_list())
    first = rows.sort("collective_id").row(0, named=True)  # the first row of the report's table
    assert round(first["busbw_gbps"], 2) == 87.93


# --- defect 4: the diagnosis reads the run's one matching ----------------------------------------


@pytest.mark.parametrize("sample", ["fsdp2_tp_gloo", "expert_gloo", "ddp_gloo_4rank"])
def test_analyze_matches_the_collectives_once_for_every_figure(sample: str, matchings: list[int]) -> None:
    """The summary, the utilisation (a link given) and the diagnosis read one matching."""
    result = _cli("analyze", SAMPLES / sample, "--link-gbps", "10")
    assert "verdict:" in result.stdout
    assert len(matchings) == 1


def test_check_with_every_kind_of_budget_matches_once(matchings: list[int], tmp_path: Path) -> None:
    budget = tmp_path / "timeline.toml"
    budget.write_text(
        '[[budgets]]\nmetric = "collective_start_skew_ns"\nmax = 1e15\n'
        '[[budgets]]\nmetric = "straggler_gain_ratio"\nmax = 1\n'
        '[[budgets]]\nmetric = "exposed_comm_ns"\nmax = 1e15\ndimension = "dp"\n',
        encoding="utf-8",
    )
    _cli("check", SAMPLES / "fsdp2_tp_gloo", "--budget", budget, "--markdown", tmp_path / "summary.md")
    assert len(matchings) == 1


def test_the_diagnosis_names_the_straggler_collectives_names() -> None:
    run = timeline.analyze(SAMPLES / "ddp_gloo_4rank")
    (finding,) = [f for f in run.diagnosis.findings if f.cause == "straggler"]
    top = _json("collectives", SAMPLES / "ddp_gloo_4rank")["stragglers"]["ranks"][0]
    assert list(finding.ranks or ()) == [top["rank"]] == [1]


def test_the_diagnosis_of_the_mesh_never_pairs_two_groups_into_one() -> None:
    """On the 2 × 2 mesh every collective the diagnosis reads ran on its 2-rank group, none on 4."""
    run = timeline.analyze(SAMPLES / "fsdp2_tp_gloo")
    matched = run.matched.collectives
    assert set(matched.get_column("expected_ranks").to_list()) == {2}
    assert matched.filter(pl.col("group").is_null()).height == 0
    diagnosis = run.diagnosis
    assert diagnosis.iterations is not None
    assert matched.filter(pl.col("iteration").is_in(list(diagnosis.iterations))).height == 54


# --- the run's own warning ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("analyze",),
        ("collectives",),
        ("whatif",),
        ("check", "--budget", str(REPO / "tests" / "cli" / "golden" / "budget-pass.toml")),
        ("report", "-o", "{tmp}/out.html"),
        # not convert: it writes the events and computes no figure that compares ranks
    ],
    ids=lambda args: args[0],
)
def test_every_command_says_the_run_is_partial(args: tuple[str, ...], tmp_path: Path) -> None:
    command, *rest = (a.replace("{tmp}", str(tmp_path)) for a in args)
    result = CliRunner().invoke(app, [command, str(FILTER_2RANK), *rest], prog_name="timeline")
    assert result.exit_code in (0, 1), result.stderr
    note = (
        "warning: partial run: the traces hold 2 of the job's 128 ranks (0-1); figures that compare "
        "ranks (collectives, stragglers, the diagnosis) rest on the traced ranks only\n"
    )
    assert result.stderr.count(note) == 1


def test_a_complete_run_is_not_partial() -> None:
    run = timeline.analyze(SAMPLES / "ddp_gloo")
    assert run.partial is None
    assert run.world_size == 2
    assert run.traced_ranks == [0, 1]
