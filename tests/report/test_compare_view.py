"""The report's "Compare" tab (``--compare BASE``): its data are ``timeline diff``'s and each run's."""

from __future__ import annotations

import json
import math
import re
import statistics
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.builders import SAMPLES, run_of, run_timeline

pytest.importorskip("bokeh", reason="the report needs the 'report' extra: pip install -e '.[report]'")

BASE = SAMPLES / "ddp_gloo"
NEW = SAMPLES / "ddp_gloo_markers"
BARS = ("compute", "exposed_comm", "hidden_comm", "step")


def run_json(*args: object) -> Any:
    result = run_timeline(*map(str, args), "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def per_iteration(path: Path) -> list[dict[str, float]]:
    """Each iteration of a run, in order: the median over ranks of its times (from ``analyze --json``)."""
    rows = run_json("analyze", path)["iterations"]
    out = []
    for iteration in sorted({row["iteration"] for row in rows}):
        mine = [row for row in rows if row["iteration"] == iteration]
        out.append({m: statistics.median(row[f"{m}_ns"] for row in mine) for m in BARS})
    return out


@pytest.fixture(scope="module")
def expected() -> dict[str, Any]:
    """``timeline diff BASE NEW --json``, and both runs' per-iteration medians over ranks computed here."""
    return {
        "diff": run_json("diff", BASE, NEW),
        "base": per_iteration(BASE),
        "new": per_iteration(NEW),
    }


def check_bars(columns: dict[str, Any], expected: dict[str, Any]) -> None:
    """The bars are the diff's per-iteration figures, and those are each run's median over ranks."""
    diff = expected["diff"]
    assert len(columns["x"]) == 2 * len(diff["iterations"]) == 2 * len(expected["base"])
    for i, row in enumerate(diff["iterations"]):
        for j, run in enumerate(("base", "new")):
            k = 2 * i + j
            assert list(columns["x"][k]) == [str(row["position"]), "BASE" if run == "base" else "this run"]
            assert columns["iteration"][k] == row[f"{run}_iteration"]
            for metric in BARS:
                shown = columns[f"{metric}_ms"][k]
                assert shown * 1e6 == pytest.approx(row["metrics"][f"{metric}_ns"][run], rel=1e-12)
                assert shown * 1e6 == pytest.approx(expected[run][i][metric], rel=1e-9)


def check_medians(columns: dict[str, Any], expected: dict[str, Any]) -> None:
    """The medians table is the diff's summary; the times' medians are those of the per-iteration medians."""
    summary = expected["diff"]["summary"]
    assert columns["metric"] == list(summary)
    for k, (metric, figure) in enumerate(summary.items()):
        for key in ("base", "new", "delta", "relative", "noise"):
            value = columns[key][k]
            if figure[key] is None:
                assert math.isnan(value)
            else:
                assert value == pytest.approx(figure[key], rel=1e-12)
        assert columns["significant"][k] == {None: "?", True: "yes", False: "no"}[figure["significant"]]
        if metric != "busbw_gbps":
            name = metric.removesuffix("_ns")
            base = statistics.median(row[name] for row in expected["base"])
            new = statistics.median(row[name] for row in expected["new"])
            assert columns["base"][k] == pytest.approx(base, rel=1e-9)
            assert columns["delta"][k] == pytest.approx(new - base, rel=1e-9, abs=1e-3)


def compare_data() -> Any:
    from dataclasses import replace

    from timeline.budgets.runs import read_run
    from timeline.report.data import prepare_report_data
    from timeline.results.diff import build_diff
    from timeline.run import Inputs, RunOptions
    from timeline.trace import load

    trace = load([NEW])
    runs = [read_run(Inputs(paths=[str(path)]), RunOptions(), match=True) for path in (BASE, NEW)]
    diff = build_diff(runs[0], runs[1])
    return replace(prepare_report_data(run_of(trace)), compare=diff)


def test_the_dashboard_has_a_compare_tab_of_the_diffs_numbers(expected: dict[str, Any]) -> None:
    from bokeh.models import Tabs

    from timeline.report.dashboard import build_dashboard

    data = compare_data()
    for mode in ("live", "standalone"):
        dashboard = build_dashboard(data, mode=mode)
        assert isinstance(dashboard.layout, Tabs)
        panels: list[Any] = list(dashboard.layout.tabs)
        assert [panel.title for panel in panels] == ["Gantt", "Compare"]
        doc = dashboard.document()
        bars: Any = doc.select_one({"name": "compare_bars"})
        check_bars(dict(bars.data), expected)
        medians: Any = doc.select_one({"name": "compare_medians"})
        check_medians(dict(medians.data), expected)


def test_the_served_app_document_has_the_compare_tab(expected: dict[str, Any]) -> None:
    from bokeh.events import DocumentReady

    from timeline.report.server import make_application

    doc = make_application(compare_data()).create_document()
    doc.callbacks.trigger_event(DocumentReady())  # the page loaded: the dashboard is drawn (#42)
    tabs: Any = doc.select_one({"name": "report_tabs"})
    assert [panel.title for panel in tabs.tabs] == ["Gantt", "Compare"]
    bars: Any = doc.select_one({"name": "compare_bars"})
    check_bars(dict(bars.data), expected)
    medians: Any = doc.select_one({"name": "compare_medians"})
    check_medians(dict(medians.data), expected)


def _decode(value: Any) -> Any:
    if isinstance(value, dict) and value.get("type") == "number":
        return float(value["value"])
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def embedded_source(text: str, name: str) -> dict[str, Any]:
    """Return the columns of the data source called ``name`` embedded in a standalone report."""
    found: list[dict[str, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            attributes = node.get("attributes")
            if (
                node.get("name") == "ColumnDataSource"
                and isinstance(attributes, dict)
                and attributes.get("name") == name
            ):
                found.append({k: _decode(v) for k, v in attributes["data"]["entries"]})
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for script in re.findall(r'<script type="application/json" id="[^"]*">(.*?)</script>', text, re.S):
        walk(json.loads(script))
    assert len(found) == 1
    return found[0]


def test_report_html_embeds_the_compare_tab(tmp_path: Path, expected: dict[str, Any]) -> None:
    out = tmp_path / "report.html"
    result = run_timeline("report", NEW, "--compare", BASE, "-o", out, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    text = out.read_text(encoding="utf-8")
    assert '"title":"Compare"' in text
    check_bars(embedded_source(text, "compare_bars"), expected)
    check_medians(embedded_source(text, "compare_medians"), expected)


def test_without_compare_there_is_no_compare_tab(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    result = run_timeline("report", NEW, "-o", out, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    text = out.read_text(encoding="utf-8")
    assert "compare_bars" not in text
    assert '"title":"Compare"' not in text
    assert '"title":"What-if"' in text


@pytest.mark.parametrize("command", ["serve", "report"])
def test_a_bad_base_is_one_error_line(tmp_path: Path, command: str) -> None:
    bad = tmp_path / "base.json"
    bad.write_text("not json at all", encoding="utf-8")
    out = ["-o", str(tmp_path / "r.html")] if command == "report" else ["--port", "0"]
    for base in (bad, tmp_path / "missing"):
        result = run_timeline(command, NEW, "--compare", base, *out, cwd=tmp_path)
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1
        assert lines[0].startswith("error: ")
        assert "Traceback" not in result.stderr
        assert str(base.name) in lines[0]
        assert result.stdout == ""
    assert not (tmp_path / "r.html").exists()


def test_a_position_one_run_lacks_has_no_bar() -> None:
    from timeline.budgets.frames import MetricFrames
    from timeline.report.compare_view import bar_columns
    from timeline.results.diff import build_diff

    def run(label: str, steps: list[int]) -> MetricFrames:
        iterations = pl.DataFrame(
            {
                "rank": [0] * len(steps),
                "iteration": list(range(len(steps))),
                "step_ns": steps,
                "compute_ns": [s // 2 for s in steps],
                "exposed_comm_ns": [s // 10 for s in steps],
                "hidden_comm_ns": [1_000_000] * len(steps),
            },
            schema_overrides={"rank": pl.Int32},
        )
        return MetricFrames(label=label, iterations=iterations, ranks=pl.DataFrame())

    columns = bar_columns(build_diff(run("a", [10_000_000] * 3), run("b", [20_000_000] * 4)))
    assert columns["run"] == ["base", "new"] * 4
    assert columns["iteration"] == [0, 0, 1, 1, 2, 2, -1, 3]
    assert columns["compute_ms"][:2] == [5.0, 10.0]
    assert columns["exposed_comm_ms"][:2] == [1.0, 2.0]
    assert columns["hidden_comm_ms"][:2] == [1.0, 1.0]
    assert all(math.isnan(columns[f"{m}_ms"][6]) for m in BARS)
    assert columns["step_ms"][7] == 20.0


def test_report_never_overwrites_the_base(tmp_path: Path) -> None:
    base = tmp_path / "base.html"
    base.write_text("<html>a summary</html>", encoding="utf-8")
    result = run_timeline("report", NEW, "--compare", base, "-o", base, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("error: ")
    assert "is one of the inputs" in result.stderr
    assert base.read_text(encoding="utf-8") == "<html>a summary</html>"
