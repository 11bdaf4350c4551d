"""The what-if view in the report: ``timeline report`` and ``timeline serve`` show a "What-if" tab.

The tab holds the predicted scaling factor against link bandwidth, one curve per compression ratio
(:func:`timeline.report.whatif_view.whatif_sweep`), or, for a trace with no what-if graph (a
Horovod timeline alone), a line saying why. The browser tests click to the tab in the exported
HTML and in the served app (Debian's headless chromium, as tests/report/test_browser.py).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.builders import REPO, run_of, run_timeline
from tests.report.builders import GANTT_DRAWN, LAUNCH_ARGS, ensure_chromium, served

pytest.importorskip("bokeh", reason="the report needs the 'report' extra: pip install -e '.[report]'")

GLOO = REPO / "sample_traces" / "ddp_gloo_4rank"  # 4 CPU ranks, 3 iterations
HOROVOD = REPO / "sample_traces" / "horovod" / "horovod_v021.json"

PAINTED = "new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(0))))"
# Whether the what-if plot is shown, where it is on the page, and its curves' data.
WHATIF = """() => {
  const doc = Bokeh.documents[0];
  const plot = doc.get_model_by_name("whatif_plot");
  const find = (view) => {
    if (view.model === plot) return view;
    for (const child of (view.child_views ?? [])) { const found = find(child); if (found) return found; }
    return null;
  };
  let view = null;
  for (const root of Bokeh.index.roots) { view = view ?? find(root); }
  const box = view === null ? null : view.el.getBoundingClientRect();
  const curves = plot.renderers.filter(r => (r.name ?? "").startsWith("curve-")).map(r => ({
    name: r.name, x: Array.from(r.data_source.data.bandwidth_gbps),
    y: Array.from(r.data_source.data.scaling_factor), label: r.data_source.data.label[0],
    colour: r.glyph.line_color.value ?? r.glyph.line_color}));
  // Bokeh hides the panels of the other tabs with visibility: hidden
  return {visible: view !== null && view.el.checkVisibility({visibilityProperty: true}),
          box: box === null ? null : [box.x, box.y, box.width, box.height],
          active: doc.get_model_by_name("report_tabs").active, curves: curves};
}"""
SHOWN = "() => { const r = (" + WHATIF + ")(); return r.visible && r.active === 1; }"


def _sweep(whatif: Any) -> pl.DataFrame:
    """The report's scenarios as a frame, to check them with polars."""
    import msgspec

    assert whatif.report is not None
    return pl.DataFrame(msgspec.to_builtins(whatif.report.scenarios))


@pytest.fixture(scope="module")
def gloo_whatif() -> Any:
    from timeline.report.whatif_view import whatif_sweep
    from timeline.trace import load

    trace = load([GLOO])
    return trace, whatif_sweep(run_of(trace))


def test_the_sweep_covers_every_bandwidth_and_compression(gloo_whatif: Any) -> None:
    from timeline.report.whatif_view import BANDWIDTHS_GBPS, COMPRESSIONS

    trace, whatif = gloo_whatif
    sweep = _sweep(whatif)
    assert sweep.height == len(BANDWIDTHS_GBPS) * len(COMPRESSIONS)
    assert sorted(set(sweep.get_column("bandwidth_gbps").to_list())) == sorted(BANDWIDTHS_GBPS)
    assert sorted(set(sweep.get_column("compression").to_list())) == sorted(COMPRESSIONS)
    # at the world size of the run: the largest of the files' distributedInfo.world_size (4 ranks)
    world = trace.files.get_column("world_size").max()
    assert world == 4
    assert set(sweep.get_column("world_size").to_list()) == {world}
    assert f"world size ({world})" in whatif.note
    # the manifest records no link: collectives get the full link, and the note says so
    assert set(sweep.get_column("efficiency").to_list()) == {"full"}
    assert "Measured link: unknown; link efficiency: full" in whatif.note
    # a scaling factor is T_single / T_predicted, at most 1, and never drops with more bandwidth
    recomputed = sweep.select(pl.col("single_ns") / pl.col("iteration_ns")).to_series()
    for got, want in zip(sweep.get_column("scaling_factor").to_list(), recomputed.to_list(), strict=True):
        assert got == pytest.approx(want, rel=1e-6)
        assert 0 < got <= 1
    for _, curve in sweep.group_by("compression"):
        factors = curve.sort("bandwidth_gbps").get_column("scaling_factor").to_list()
        assert factors == sorted(factors)


def test_the_sweep_shared_with_a_helper_process_is_the_sweep_of_one_call() -> None:
    import msgspec

    from timeline.executors import LocalExecutor
    from timeline.report.whatif_view import BANDWIDTHS_GBPS, COMPRESSIONS, submit_whatif_sweep
    from timeline.results.whatif import build_whatif_report
    from timeline.trace import load
    from timeline.whatif.settings import Settings

    run = run_of(load([GLOO]))
    # the whole sweep in one call of the library (the sample's link is unknown: the full link)
    settings = Settings(bandwidths=list(BANDWIDTHS_GBPS), compressions=list(COMPRESSIONS), efficiency="full")
    expected = build_whatif_report(run.graph, settings, link_source="not recorded")
    helper = LocalExecutor(2)
    helper.start(preload="timeline.whatif.sweeps")
    try:
        assert helper.started
        shared = submit_whatif_sweep(run, helper).result(timeout=300)
    finally:
        helper.stop()
    assert shared.report is not None
    assert msgspec.json.encode(shared.report) == msgspec.json.encode(expected)


def test_the_measured_scaling_factor_is_that_of_the_measured_steps(gloo_whatif: Any) -> None:
    trace, whatif = gloo_whatif
    sweep = _sweep(whatif)
    single = sweep.get_column("single_ns").unique().to_list()
    assert len(single) == 1  # T_single: the same for every setting
    # the measured iteration from the events: ProfilerStep spans, median over ranks, mean over steps
    steps = trace.events.filter(pl.col("name").cast(pl.String).str.starts_with("ProfilerStep#"))
    measured = (
        steps.group_by(pl.col("name").cast(pl.String))
        .agg(pl.col("dur_ns").median())
        .get_column("dur_ns")
        .mean()
    )
    assert steps.height == 12
    # the replay's windows end at the rank's last event of the step, a little inside the annotation
    assert whatif.report.self_replay.measured_scaling_factor == pytest.approx(single[0] / measured, rel=0.005)


def test_the_dashboard_has_a_whatif_tab_with_one_curve_per_compression(gloo_whatif: Any) -> None:
    from dataclasses import replace

    from bokeh.models import Tabs

    from timeline.report.dashboard import build_dashboard
    from timeline.report.data import prepare_report_data

    trace, whatif = gloo_whatif
    data = replace(prepare_report_data(run_of(trace)), whatif=whatif)
    for mode in ("live", "standalone"):
        dashboard = build_dashboard(data, mode=mode)
        tabs = dashboard.layout
        assert isinstance(tabs, Tabs)
        panels: list[Any] = list(tabs.tabs)
        assert [panel.title for panel in panels] == ["Gantt", "What-if"]
        assert panels[0].child.name == "dashboard"
        doc = dashboard.document()
        plot: Any = doc.select_one({"name": "whatif_plot"})
        curves = sorted(
            (r for r in plot.renderers if (r.name or "").startswith("curve-")), key=lambda r: r.name
        )
        assert [r.data_source.data["label"][0] for r in curves] == [
            "no compression",
            "2× compression",
            "4× compression",
        ]
        for renderer, ratio in zip(curves, (1.0, 2.0, 4.0), strict=True):
            rows = _sweep(whatif).filter(pl.col("compression") == ratio).sort("bandwidth_gbps")
            source = renderer.data_source.data
            assert list(source["bandwidth_gbps"]) == rows.get_column("bandwidth_gbps").to_list()
            assert list(source["scaling_factor"]) == rows.get_column("scaling_factor").to_list()
        measured = [m for m in plot.center if getattr(m, "name", None) == "measured"]
        assert [m.location for m in measured] == [whatif.report.self_replay.measured_scaling_factor]
        note: Any = doc.select_one({"name": "whatif_note"})
        assert note.text.startswith("Predicted by replaying the trace&#x27;s dependency graph")


def test_without_a_sweep_there_is_no_tab() -> None:
    from timeline.report.dashboard import build_dashboard
    from timeline.report.data import prepare_report_data
    from timeline.trace import load

    trace = load([GLOO])
    layout = build_dashboard(prepare_report_data(run_of(trace))).layout
    assert layout.name == "dashboard"


def test_report_html_has_the_whatif_tab(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    result = run_timeline("report", GLOO, "-o", out, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    text = out.read_text(encoding="utf-8")
    for name in ("report_tabs", "whatif_plot", "whatif_note", "What-if", "curve-2"):
        assert name in text


def test_a_trace_without_a_graph_says_why_it_has_no_prediction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trace the what-if graph refuses: the tab holds the reason instead of the plot."""
    from dataclasses import replace

    import timeline.whatif.graph
    from timeline.errors import TraceContentError
    from timeline.report.data import prepare_report_data
    from timeline.report.export import write_report
    from timeline.report.whatif_view import whatif_sweep
    from timeline.trace import load

    def refuse(trace: Any, **_: Any) -> Any:
        msg = "rank0.json: no compute events; capture the framework's trace"
        raise TraceContentError(msg)

    monkeypatch.setattr(timeline.whatif.graph, "trace_graph", refuse)
    trace = load([GLOO])
    whatif = whatif_sweep(run_of(trace))
    assert whatif.report is None
    assert (
        whatif.note == "no what-if prediction: rank0.json: no compute events; capture the framework's trace"
    )
    data = replace(prepare_report_data(run_of(trace)), whatif=whatif)
    text = write_report(data, tmp_path / "report.html").read_text(encoding="utf-8")
    assert "no what-if prediction: rank0.json: no compute events" in text
    assert "whatif_note" in text
    assert "What-if" in text
    assert "whatif_plot" not in text


def test_the_graph_notes_and_warnings_are_shown_under_the_plot() -> None:
    from timeline.report.whatif_view import build_whatif_panel, whatif_sweep
    from timeline.trace import load

    whatif = whatif_sweep(run_of(load([HOROVOD])))  # a Horovod timeline alone: compute derived, notes say how
    report = whatif.report
    assert report is not None
    assert report.notes
    panel = build_whatif_panel(whatif)
    note = next(child for child in panel.children if child.name == "whatif_note")
    lines = note.text.split("<br>")
    assert len(lines) == 1 + len(report.notes) + len(report.warnings)
    assert all(line.startswith("note: ") for line in lines[1 : 1 + len(report.notes)])
    assert all(line.startswith("warning: ") for line in lines[1 + len(report.notes) :])


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="needs the dev extra: pip install -e '.[dev]'"
    )
    executable = ensure_chromium()
    playwright = sync_api.sync_playwright().start()
    try:
        browser = playwright.chromium.launch(executable_path=str(executable), args=LAUNCH_ARGS)
        yield browser
        browser.close()
    finally:
        playwright.stop()


def _click_to_whatif(browser: Any, url: str, whatif: Any, screenshot: Path) -> None:
    """Open ``url``, click the "What-if" tab, check the plot is shown with the sweep's curves."""
    import io

    import numpy as np
    from PIL import Image

    page = browser.new_page(viewport={"width": 1660, "height": 1300})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(f"pageerror: {error}"))
    page.on("console", lambda m: errors.append(f"console: {m.text}") if m.type == "error" else None)
    try:
        page.goto(url, wait_until="commit")
        page.wait_for_function(GANTT_DRAWN, polling="raf", timeout=120_000)
        before = page.evaluate(WHATIF)
        assert before["active"] == 0
        assert not before["visible"]  # the Gantt's tab is shown first
        page.get_by_text("What-if", exact=True).click()
        page.wait_for_function(SHOWN, polling="raf", timeout=30_000)
        page.evaluate(PAINTED)
        state = page.evaluate(WHATIF)
        png = page.screenshot(full_page=False)
        screenshot.write_bytes(png)
        assert page.get_by_text("Predicted by replaying the trace's dependency graph").is_visible()
        assert not page.get_by_text("Per rank, this iteration").is_visible()  # the Gantt's tab is hidden
    finally:
        page.close()
    assert errors == []
    curves = sorted(state["curves"], key=lambda c: c["name"])
    assert [c["label"] for c in curves] == ["no compression", "2× compression", "4× compression"]
    for curve, ratio in zip(curves, (1.0, 2.0, 4.0), strict=True):
        rows = _sweep(whatif).filter(pl.col("compression") == ratio).sort("bandwidth_gbps")
        assert curve["x"] == rows.get_column("bandwidth_gbps").to_list()
        assert curve["y"] == pytest.approx(rows.get_column("scaling_factor").to_list())
    # each curve is painted: its colour is on the screen, inside the plot
    x, y, width, height = (round(v) for v in state["box"])
    image = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))[y : y + height, x : x + width]
    for curve in curves:
        rgb = np.array([int(curve["colour"][i : i + 2], 16) for i in (1, 3, 5)])
        assert int((np.abs(image.astype(np.int16) - rgb).max(axis=-1) <= 8).sum()) > 50, curve["label"]


@pytest.mark.slow
def test_exported_report_clicks_to_the_whatif_view(browser: Any, gloo_whatif: Any, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    result = run_timeline("report", GLOO, "-o", out, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    _click_to_whatif(browser, out.as_uri(), gloo_whatif[1], tmp_path / "whatif.png")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.slow
def test_served_report_clicks_to_the_whatif_view(browser: Any, gloo_whatif: Any, tmp_path: Path) -> None:
    port = _free_port()
    with served(str(GLOO), "--port", str(port), "--host", "127.0.0.1", stop_timeout_s=20) as server:
        url_line = server.lines.get(timeout=180)
        assert url_line.startswith(f"serving the timeline report at http://127.0.0.1:{port}/"), url_line
        _click_to_whatif(browser, f"http://127.0.0.1:{port}/", gloo_whatif[1], tmp_path / "served.png")
    assert "Traceback" not in "".join(server.errors.queue)
