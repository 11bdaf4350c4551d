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

from tests.builders import REPO, older_summary, run_timeline
from timeline.budgets.frames import findings_frame
from timeline.results.diagnosis import Verdict
from timeline.results.findings import Basis, Finding
from timeline.results.summary import Summary

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


@pytest.mark.parametrize("version", [1, 2, 3])
def test_check_reads_a_summary_of_an_older_layout(tmp_path: Path, version: int) -> None:
    summary_path, _ = _summary(tmp_path)
    typed = msgspec.json.decode(summary_path.read_bytes(), type=Summary)
    old = older_summary(typed, version=version)
    assert next(iter(old)) == "version"
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    budget = tmp_path / "step.toml"
    budget.write_text('[[budgets]]\nmetric = "step_ns"\nmax = 10_000_000_000\n')
    done = run_timeline("check", path, "--budget", budget)
    assert done.returncode == 0, done.stderr


def _finding(cause: str, gain: float | None, step: int | None, basis: Basis) -> Finding:
    return Finding(
        cause=cause, summary="-", fix="-", predicted_gain_ratio=gain, predicted_step_ns=step, basis=basis
    )


def test_findings_frame_keeps_the_largest_gain_of_each_examined_cause() -> None:
    verdict = Verdict(
        communication_bound=False,
        summary="-",
        at_stake_ratio=0.3,
        step_ns=100,
        ranks=[0, 1],
        world_size=2,
        iterations=None,
        exposed_comm_ratio=None,
        model_intensity_ns_per_byte=None,
        hide_bandwidth_gbps=None,
        link_gbps=None,
        replay_error_ratio=None,
        examined=["straggler", "input_stall", "no_overlap"],
        notes=[],
    )
    findings = [
        _finding("straggler", 0.3, 70, "replay"),
        _finding("straggler", 0.1, 90, "bound"),
        _finding("input_stall", 0.05, 95, "replay"),
        _finding("hang", None, None, "observed"),
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
