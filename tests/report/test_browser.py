"""End to end in a real headless Chromium (Debian's, driven by Playwright): the served app and the HTML.

Each test loads the page, waits for the Gantt to draw, checks that no JavaScript error occurred,
switches the iteration through the selector and through the breakdown chart, checks that the chart
changed, zooms with the mouse wheel (the bars refine), and saves a screenshot. The served app must
then stop cleanly on SIGINT.

Chromium comes from Debian (``apt-get install chromium``, run here when missing and root);
Playwright never downloads a browser of its own.
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.builders import REPO, run_of, timeline_command
from tests.report.builders import GANTT_DRAWN, LAUNCH_ARGS, ensure_chromium, served, synthetic_events

pytest.importorskip("bokeh", reason="the report needs the 'report' extra: pip install -e '.[report]'")
sync_api = pytest.importorskip("playwright.sync_api", reason="needs the dev extra: pip install -e '.[dev]'")

GLOO = REPO / "sample_traces" / "ddp_gloo_4rank"  # 4 CPU ranks, 3 iterations

PAINTED = "new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(performance.now()))))"
CHANGED = """([left]) => {
  const d = Bokeh.documents[0].get_model_by_name("gantt_bars").data;
  return d.left.length > 0 && JSON.stringify(Array.from(d.left.slice(0, 20))) !== JSON.stringify(left);
}"""
WIDTH = """() => {
  const r = Bokeh.documents[0].get_model_by_name("gantt").x_range;
  return r.end - r.start;
}"""
NARROWER = """([width]) => {
  const r = Bokeh.documents[0].get_model_by_name("gantt").x_range;
  return r.end - r.start < width;
}"""
# True once the bars are those of the visible range: each reaches into it widened by half its width
# on either side (the refinement on RangesUpdate draws just these, in the app and in the HTML), and
# not those drawn for a wider range before the zoom.
REFINED = """() => {
  const doc = Bokeh.documents[0];
  const r = doc.get_model_by_name("gantt").x_range;
  const d = doc.get_model_by_name("gantt_bars").data;
  const half = (r.end - r.start) / 2, lo = r.start - half - 1e-3, hi = r.end + half + 1e-3;
  if (d.left.length === 0) return false;
  for (let i = 0; i < d.left.length; i++) { if (d.right[i] < lo || d.left[i] > hi) return false; }
  return true;
}"""
STATE = """() => {
  const doc = Bokeh.documents[0];
  const gantt = doc.get_model_by_name("gantt");
  const bars = doc.get_model_by_name("gantt_bars").data;
  return {title: gantt.title.text, bars: bars.left.length, left: Array.from(bars.left.slice(0, 20)),
          max_count: Math.max(...bars.count), x0: gantt.x_range.start, x1: gantt.x_range.end,
          select: doc.get_model_by_name("iteration_select").value};
}"""


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    executable = ensure_chromium()
    playwright = sync_api.sync_playwright().start()
    try:
        browser = playwright.chromium.launch(executable_path=str(executable), args=LAUNCH_ARGS)
        yield browser
        browser.close()
    finally:
        playwright.stop()


class _Page:
    """A page that records JavaScript errors (uncaught exceptions and console errors)."""

    def __init__(self, browser: Any) -> None:
        self.page = browser.new_page(viewport={"width": 1660, "height": 1300})
        self.errors: list[str] = []
        self.page.on("pageerror", lambda error: self.errors.append(f"pageerror: {error}"))
        self.page.on(
            "console", lambda m: self.errors.append(f"console: {m.text}") if m.type == "error" else None
        )

    def open(self, url: str) -> float:
        """Load ``url``; return ms from navigation start until the Gantt is drawn."""
        self.page.goto(url, wait_until="commit")
        self.page.wait_for_function(GANTT_DRAWN, polling="raf", timeout=120_000)
        drawn: float = self.page.evaluate(PAINTED)
        self.page.locator("canvas").first.wait_for(timeout=30_000)
        return drawn

    def state(self) -> dict[str, Any]:
        result: dict[str, Any] = self.page.evaluate(STATE)
        return result

    def switch_iteration(self) -> dict[str, Any]:
        """Pick another iteration in the selector; return the state once the chart changed."""
        before = self.state()
        options = self.page.evaluate("Bokeh.documents[0].get_model_by_name('iteration_select').options")
        target, label = next((value, label) for value, label in options if value != before["select"])
        self.page.locator("select").first.select_option(label=label)
        self.page.wait_for_function(
            f"() => Bokeh.documents[0].get_model_by_name('gantt').title.text !== {before['title']!r}",
            timeout=30_000,
        )
        self.page.wait_for_function(CHANGED, arg=[before["left"]], timeout=30_000)
        self.page.evaluate(PAINTED)
        after = self.state()
        assert after["select"] == target
        assert after["title"] != before["title"]
        return after

    def pick_in_breakdown(self) -> dict[str, Any]:
        """Select another iteration's bar in the breakdown (what a click does); return the new state."""
        before = self.state()
        views = self.page.evaluate(
            "Array.from(Bokeh.documents[0].get_model_by_name('breakdown_bars').data.view)"
        )
        row = next(i for i, view in enumerate(views) if str(view) != before["select"])
        self.page.evaluate(
            f"Bokeh.documents[0].get_model_by_name('breakdown_bars').selected.indices = [{row}]"
        )
        self.page.wait_for_function(CHANGED, arg=[before["left"]], timeout=30_000)
        after = self.state()
        assert after["select"] == str(views[row])
        assert after["title"] != before["title"]
        return after

    def zoom_in(self) -> dict[str, Any]:
        """Zoom into the middle of the Gantt with the mouse wheel; return the state once refined."""
        before = self.state()
        box = self.page.locator(".bk-Canvas").first.bounding_box() or {}
        gantt = self.page.evaluate("Bokeh.documents[0].get_model_by_name('gantt').height")
        assert box
        self.page.mouse.move(box["x"] + box["width"] * 0.45, box["y"] + min(gantt, box["height"]) * 0.4)
        width = before["x1"] - before["x0"]
        for _ in range(12):
            self.page.mouse.wheel(0, -240)
            # each notch zooms in: the next one is sent once this one has narrowed the range
            self.page.wait_for_function(NARROWER, arg=[width], timeout=30_000)
            width = self.page.evaluate(WIDTH)
        assert width < (before["x1"] - before["x0"]) / 4
        # the refinement runs once the wheel stops (RangesUpdate): bars for the visible range only
        self.page.wait_for_function(REFINED, timeout=30_000)
        self.page.evaluate(PAINTED)
        return self.state()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_served_app_renders_switches_zooms_and_stops_on_ctrl_c(browser: Any, tmp_path: Path) -> None:
    port = _free_port()
    with served(str(GLOO), "--port", str(port), stop_timeout_s=20) as server:
        url_line = server.lines.get(timeout=180)
        assert url_line == f"serving the timeline report at http://127.0.0.1:{port}/ (Ctrl-C to stop)\n"
        page = _Page(browser)
        page.open(f"http://127.0.0.1:{port}/")
        first = page.state()
        assert "iteration 3" in first["title"]  # the slowest iteration is shown first
        page.switch_iteration()
        page.pick_in_breakdown()
        zoomed = page.zoom_in()
        assert zoomed["x1"] - zoomed["x0"] < (first["x1"] - first["x0"]) / 4
        page.page.screenshot(path=tmp_path / "served.png", full_page=True)
        assert (tmp_path / "served.png").stat().st_size > 10_000
        assert page.errors == []
        page.page.close()
    stderr = "".join(server.errors.queue)
    assert "Traceback" not in stderr
    assert stderr.endswith("stopped\n")


def test_exported_html_renders_switches_and_zooms_offline(browser: Any, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    done = subprocess.run(
        [*timeline_command(), "report", str(GLOO), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    page = _Page(browser)
    page.page.route("http*://**", lambda route: route.abort())  # offline: nothing may be fetched
    page.open(out.as_uri())
    first = page.state()
    assert "iteration 3" in first["title"]
    page.switch_iteration()
    page.pick_in_breakdown()
    zoomed = page.zoom_in()
    assert zoomed["x1"] - zoomed["x0"] < (first["x1"] - first["x0"]) / 4
    page.page.screenshot(path=tmp_path / "exported.png", full_page=True)
    assert page.errors == []
    page.page.close()


def test_200k_event_iteration_renders_within_budget(browser: Any, tmp_path: Path) -> None:
    from timeline.report.data import prepare_report_data
    from timeline.report.export import write_report

    events = synthetic_events(200_000)
    out = write_report(prepare_report_data(run_of(events)), tmp_path / "big.html")
    page = _Page(browser)
    page.open(out.as_uri())  # warm the browser's caches of the bokeh scripts
    page.page.close()
    timings = []
    for _ in range(3):
        page = _Page(browser)
        timings.append(page.open(out.as_uri()))
        state = page.state()
        assert page.errors == []
        page.page.close()
    # Whole page: navigation start to the Gantt of 200,000 events painted. The time is measured by
    # benchmarks/bench_report.py and recorded in docs/report.md, never asserted here (a loaded
    # machine would fail it): this test checks that the page draws merged bars without errors.
    print(f"200k-event iteration drawn in {min(timings):.0f} ms (best of 3), {state['bars']} bars")
    assert state["bars"] < 20_000
    assert state["max_count"] > 1  # merged bars, each saying how many events it holds
