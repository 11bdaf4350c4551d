"""Budgets on the diagnosis: ``finding_gain_ratio``, the ``<cause>_gain_ratio`` metrics, ``check --markdown``.

The expected values are read from ``timeline analyze --json``'s findings of the same run (the
largest gain of a cause's findings, 0 for a cause examined without one, no sample for a cause not
examined), never from the budgets' own frame.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tests.builders import REPO, run_timeline
from timeline.budgets.frames import findings_frame

SAMPLE = REPO / "sample_traces" / "ddp_gloo"
CAUSES = ("straggler", "input_stall", "no_overlap", "slow_link", "compression")


def _summary(tmp_path: Path, *extra: str) -> tuple[Path, dict[str, Any]]:
    done = run_timeline("analyze", SAMPLE, "--json", *extra)
    assert done.returncode == 0, done.stderr
    path = tmp_path / "summary.json"
    path.write_text(done.stdout)
    return path, json.loads(done.stdout)


def _budgets(tmp_path: Path) -> Path:
    entries = [f'[[budgets]]\nname = "{c}"\nmetric = "{c}_gain_ratio"\nmax = 0.5\n' for c in CAUSES]
    entries.append('[[budgets]]\nname = "any"\nmetric = "finding_gain_ratio"\nmax = 0.01\n')
    path = tmp_path / "budgets.toml"
    path.write_text("\n".join(entries))
    return path


def _expected(summary: dict[str, Any], cause: str) -> float | None:
    examined = summary["verdict"]["examined"]
    gains: list[float] = [f["predicted_gain_ratio"] for f in summary["findings"] if f["cause"] == cause]
    if gains:
        return max(gains)
    return 0.0 if cause in examined else None


@pytest.mark.parametrize("source", ["trace", "summary"])
def test_gain_budgets_read_the_findings_of_the_run(tmp_path: Path, source: str) -> None:
    summary_path, summary = _summary(tmp_path)
    run = SAMPLE if source == "trace" else summary_path
    done = run_timeline("check", run, "--budget", _budgets(tmp_path), "--json")
    report = msgspec.json.decode(done.stdout)
    verdicts = {v["name"]: v for v in report["verdicts"]}
    for cause in CAUSES:
        expected = _expected(summary, cause)
        verdict = verdicts[cause]
        if expected is None:  # not examined (slow_link without a link): no sample, the check fails
            assert verdict["status"] == "nodata", cause
        else:
            assert verdict["value"] == pytest.approx(expected), cause
    everything = [f["predicted_gain_ratio"] for f in summary["findings"]]
    assert verdicts["any"]["value"] == pytest.approx(max([*everything, 0.0]))
    assert verdicts["any"]["status"] == ("fail" if max([*everything, 0.0]) > 0.01 else "pass")
    assert done.returncode == 1  # slow_link has no data without --link-gbps; "any" is exceeded


def test_a_summary_without_findings_is_refused_for_gain_budgets(tmp_path: Path) -> None:
    summary_path, summary = _summary(tmp_path, "--no-findings")
    assert summary["verdict"] is None
    assert summary["findings"] is None
    done = run_timeline("check", summary_path, "--budget", _budgets(tmp_path))
    assert done.returncode == 2
    assert "needs the diagnosis' findings" in done.stderr


def test_check_reads_a_summary_of_layout_version_1(tmp_path: Path) -> None:
    _, summary = _summary(tmp_path)
    old = {k: v for k, v in summary.items() if k not in ("verdict", "findings")} | {"version": 1}
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    budget = tmp_path / "step.toml"
    budget.write_text('[[budgets]]\nmetric = "step_ns"\nmax = 10_000_000_000\n')
    done = run_timeline("check", path, "--budget", budget)
    assert done.returncode == 0, done.stderr


def test_findings_frame_keeps_the_largest_gain_of_each_examined_cause() -> None:
    verdict = {"examined": ["straggler", "input_stall", "no_overlap"], "step_ns": 100}
    findings: list[dict[str, Any]] = [
        {"cause": "straggler", "predicted_gain_ratio": 0.3, "predicted_step_ns": 70, "basis": "replay"},
        {"cause": "straggler", "predicted_gain_ratio": 0.1, "predicted_step_ns": 90, "basis": "bound"},
        {"cause": "input_stall", "predicted_gain_ratio": 0.05, "predicted_step_ns": 95, "basis": "replay"},
        {"cause": "hang", "predicted_gain_ratio": None, "predicted_step_ns": None, "basis": "observed"},
    ]
    rows = {r["cause"]: r for r in findings_frame(verdict, findings).to_dicts()}
    assert set(rows) == {"straggler", "input_stall", "no_overlap"}
    assert rows["straggler"] == {
        "cause": "straggler",
        "predicted_gain_ratio": 0.3,
        "predicted_step_ns": 70,
        "basis": "replay",
        "found": True,
    }
    assert rows["input_stall"]["predicted_gain_ratio"] == 0.05
    assert rows["no_overlap"] == {
        "cause": "no_overlap",
        "predicted_gain_ratio": 0.0,
        "predicted_step_ns": 100,
        "basis": None,
        "found": False,
    }


def test_the_markdown_summary_ends_with_the_verdict_and_the_top_findings(tmp_path: Path) -> None:
    _, summary = _summary(tmp_path)
    budget = tmp_path / "step.toml"
    budget.write_text('[[budgets]]\nmetric = "step_ns"\nmax = 10_000_000_000\n')
    done = run_timeline("check", SAMPLE, "--budget", budget, "--markdown", "-")
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "#### Diagnosis:" in text
    shown = summary["findings"][:3]
    for k, finding in enumerate(shown, start=1):
        assert f"| {k} | **{finding['cause']}" in text
        assert f"{finding['predicted_gain_ratio']:.1%}" in text
    assert text.index("#### Diagnosis:") > text.index("| | check | metric |")  # after the verdicts
