"""The exported report as a person sees it, in a real headless Chromium at 1280, 1440 and 1920 pixels.

For every bundled sample and for three shared real traces (the 54 MB ``hta_df_index_resolver``, the
8-rank PARAM step and the two-rank Nsight Systems export of NCCL send/recv on H100s), ``timeline
report`` writes the page, and Chromium (Debian's, driven by
Playwright, offline) opens it at each width:

- no element, in the page or in bokeh's shadow roots, reaches past the window (an element inside a
  box that scrolls counts only where the box shows it), and the page has no horizontal scroll bar;
- no two visible text runs overlap (each text node's line boxes, clipped by the boxes that scroll),
  and no two of the page's boxes (plots, text boxes, buttons, selectors) overlap;
- no JavaScript error;
- the What-if tab renders (its plot drawn at a size), and fits the window as well.

At 1440 pixels the controls are used as a person would: a finding's button selects its ranks and
iteration and the Gantt redraws them, another iteration picked in the selector redraws the Gantt,
and a rank removed in the rank filter disappears from it; the page still fits afterwards.

The pages are written once per module; the checks wait on conditions (no sleeps).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.builders import REPO, TRACES, run_timeline
from tests.report.builders import GANTT_DRAWN, LAUNCH_ARGS, ensure_chromium

pytest.importorskip("bokeh", reason="the report needs the 'report' extra: pip install -e '.[report]'")
sync_api = pytest.importorskip("playwright.sync_api", reason="needs the dev extra: pip install -e '.[dev]'")

pytestmark = pytest.mark.slow

SAMPLES = REPO / "sample_traces"
CASES: dict[str, Path] = {
    "ddp_gloo": SAMPLES / "ddp_gloo",
    "ddp_gloo_4rank": SAMPLES / "ddp_gloo_4rank",
    "ddp_gloo_markers": SAMPLES / "ddp_gloo_markers",
    "expert_gloo": SAMPLES / "expert_gloo",
    "fsdp2_tp_gloo": SAMPLES / "fsdp2_tp_gloo",
    "pipeline_gloo": SAMPLES / "pipeline_gloo",
    "horovod_v021": SAMPLES / "horovod" / "horovod_v021.json",
    "hta_df_index_resolver": TRACES / "kineto" / "hta_df_index_resolver",
    "param_dlrm_8rank": TRACES / "kineto" / "param_dlrm_8rank",
    "nsys_2xh100": TRACES / "nsys" / "nsysai_2xh100_nccl_before.sqlite",  # Nsight Systems export (#38)
}
WIDTHS = (1280, 1440, 1920)

# Every element of the page and of every shadow root inside it, the visible part of each (clipped by
# the ancestors that do not let their content overflow), and what reaches past the window or overlaps.
LAYOUT = r"""() => {
  const width = document.documentElement.clientWidth;
  const roots = [];
  const gather = (root) => {
    roots.push(root);
    for (const el of root.querySelectorAll("*")) { if (el.shadowRoot) gather(el.shadowRoot); }
  };
  gather(document);
  const up = (node) => {
    if (node.parentElement) return node.parentElement;
    const root = node.getRootNode();
    return root instanceof ShadowRoot ? root.host : null;
  };
  const clip = (node, r) => {
    let x0 = r.left, y0 = r.top, x1 = r.right, y1 = r.bottom;
    for (let p = up(node); p && p !== document.body && p !== document.documentElement; p = up(p)) {
      const style = getComputedStyle(p);
      if (style.overflowX === "visible" && style.overflowY === "visible") continue;
      const q = p.getBoundingClientRect();
      if (style.overflowX !== "visible") { x0 = Math.max(x0, q.left); x1 = Math.min(x1, q.right); }
      if (style.overflowY !== "visible") { y0 = Math.max(y0, q.top); y1 = Math.min(y1, q.bottom); }
    }
    return {x0, y0, x1, y1};
  };
  const shown = (el) => el.checkVisibility({opacityProperty: true, visibilityProperty: true});
  const skip = new Set(["STYLE", "SCRIPT", "LINK", "META", "TITLE", "HEAD", "OPTION"]);
  const name = (el) => `${el.tagName.toLowerCase()}.${String(el.className).split(" ")[0]}`;
  const spills = [];
  for (const root of roots) {
    for (const el of root.querySelectorAll("*")) {
      if (skip.has(el.tagName)) continue;
      const r = el.getBoundingClientRect();
      if (r.width <= 0 || r.height <= 0 || !shown(el)) continue;
      const c = clip(el, r);
      if (c.x1 - c.x0 <= 0 || c.y1 - c.y0 <= 0) continue;
      if (c.x1 > width + 1 || c.x0 < -1) spills.push(`${name(el)} [${c.x0.toFixed(0)}, ${c.x1.toFixed(0)}]`);
    }
  }
  const texts = [];
  for (const root of roots) {
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      if (!node.data.trim()) continue;
      const el = up(node);
      if (!el || skip.has(el.tagName) || !shown(el)) continue;
      const range = document.createRange();
      range.selectNodeContents(node);
      for (const r of range.getClientRects()) {
        if (r.width < 1 || r.height < 1) continue;
        const c = clip(node, r);
        if (c.x1 - c.x0 < 1 || c.y1 - c.y0 < 1) continue;
        texts.push({box: c, node, label: node.data.trim().slice(0, 30)});
      }
    }
  }
  const kinds = new Set(["Figure", "Plot", "Div", "Paragraph", "Button", "Select", "MultiChoice",
                         "DataTable", "ColorBar"]);
  const boxes = [];
  const walk = (view) => {
    const kind = view.model.type;
    if (kinds.has(kind)) {
      const el = view.el;
      const r = el.getBoundingClientRect();
      if (r.width > 0 && r.height > 0 && shown(el)) {
        boxes.push({box: {x0: r.left, y0: r.top, x1: r.right, y1: r.bottom}, node: el,
                    label: `${kind} ${view.model.name ?? ""}`});
      }
      return;
    }
    for (const child of view.child_views ?? []) walk(child);
  };
  for (const root of Bokeh.index.roots) walk(root);
  const overlaps = (items) => {
    const found = [];
    const sorted = [...items].sort((a, b) => a.box.x0 - b.box.x0);
    for (let i = 0; i < sorted.length; i++) {
      const a = sorted[i];
      for (let j = i + 1; j < sorted.length && sorted[j].box.x0 < a.box.x1 - 1; j++) {
        const b = sorted[j];
        if (a.node === b.node) continue;
        const w = Math.min(a.box.x1, b.box.x1) - Math.max(a.box.x0, b.box.x0);
        const h = Math.min(a.box.y1, b.box.y1) - Math.max(a.box.y0, b.box.y0);
        if (w > 1 && h > 1) found.push(`${a.label} | ${b.label}`);
      }
    }
    return found;
  };
  const page = document.documentElement;
  return {spills, scroll: [page.scrollWidth, page.clientWidth], texts: overlaps(texts),
          boxes: overlaps(boxes), counted: [texts.length, boxes.length]};
}"""
STATE = """() => {
  const doc = Bokeh.documents[0];
  const gantt = doc.get_model_by_name("gantt");
  const bars = doc.get_model_by_name("gantt_bars").data;
  const findings = doc.get_model_by_name("findings");
  return {title: gantt.title.text, left: Array.from(bars.left.slice(0, 20)),
          ranks: Array.from(new Set(bars.rank)).sort((a, b) => a - b),
          lanes: gantt.y_range.factors.map(f => f[0]),
          select: doc.get_model_by_name("iteration_select").value,
          options: doc.get_model_by_name("iteration_select").options,
          shown: doc.get_model_by_name("rank_filter").value,
          findings: findings === null ? []
            : findings.data.rank_list.map((r, i) => [r, findings.data.view[i]])};
}"""
WHATIF_SHOWN = """() => {
  const doc = Bokeh.documents[0];
  const plot = doc.get_model_by_name("whatif_plot") ?? doc.get_model_by_name("whatif_note");
  const find = (view) => {
    if (view.model === plot) return view;
    for (const child of view.child_views ?? []) { const found = find(child); if (found) return found; }
    return null;
  };
  let view = null;
  for (const root of Bokeh.index.roots) view = view ?? find(root);
  const r = view === null ? null : view.el.getBoundingClientRect();
  return r !== null && r.width > 300 && r.height > 10;
}"""
PAINTED = "new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(0))))"


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


class _Pages:
    """The report of each case, written on first use (``timeline report``, a whole process)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.written: dict[str, Path] = {}

    def __getitem__(self, case: str) -> Path:
        if case not in self.written:
            out = self.folder / f"{case}.html"
            done = run_timeline("report", CASES[case], "-o", out, cwd=self.folder)
            assert done.returncode == 0, done.stderr
            self.written[case] = out
        return self.written[case]


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> _Pages:
    return _Pages(tmp_path_factory.mktemp("layout"))


class _Page:
    """A page of the exported report at one window width, recording JavaScript errors."""

    def __init__(self, browser: Any, path: Path, width: int) -> None:
        self.page = browser.new_page(viewport={"width": width, "height": 1000})
        self.errors: list[str] = []
        self.page.on("pageerror", lambda error: self.errors.append(f"pageerror: {error}"))
        self.page.on(
            "console", lambda m: self.errors.append(f"console: {m.text}") if m.type == "error" else None
        )
        self.page.route("http*://**", lambda route: route.abort())  # offline: nothing may be fetched
        self.page.goto(path.as_uri(), wait_until="commit")
        self.page.wait_for_function(GANTT_DRAWN, polling="raf", timeout=120_000)
        self.page.evaluate(PAINTED)

    def state(self) -> dict[str, Any]:
        state: dict[str, Any] = self.page.evaluate(STATE)
        return state

    def assert_fits(self, where: str, *, texts: int = 20, boxes: int = 6) -> None:
        """Nothing past the window, nothing over anything else, no error.

        ``texts``, ``boxes``: at least how many text runs and boxes the check must have seen.
        """
        layout = self.page.evaluate(LAYOUT)
        assert layout["spills"] == [], f"{where}: past the window: {layout['spills'][:10]}"
        width, window = layout["scroll"]
        assert width <= window, f"{where}: the page is {width} px wide in a {window} px window"
        assert layout["texts"] == [], f"{where}: text over text: {layout['texts'][:10]}"
        assert layout["boxes"] == [], f"{where}: boxes over boxes: {layout['boxes'][:10]}"
        assert layout["counted"][0] >= texts  # the check saw the page's text
        assert layout["counted"][1] >= boxes  # and its boxes
        assert self.errors == [], where

    def wait_changed(self, before: dict[str, Any]) -> dict[str, Any]:
        """Wait until the Gantt's bars are no longer ``before``'s; return the new state."""
        self.page.wait_for_function(
            """([left]) => {
              const d = Bokeh.documents[0].get_model_by_name("gantt_bars").data;
              return d.left.length > 0 && JSON.stringify(Array.from(d.left.slice(0, 20))) !== left;
            }""",
            arg=[str(before["left"]).replace(" ", "")],
            timeout=30_000,
        )
        self.page.evaluate(PAINTED)
        return self.state()


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("case", list(CASES))
def test_the_page_fits_the_window_and_nothing_overlaps(
    browser: Any, pages: _Pages, case: str, width: int
) -> None:
    page = _Page(browser, pages[case], width)
    try:
        page.assert_fits(f"{case} at {width} px, Gantt tab")
        tab = page.page.get_by_text("What-if", exact=True)
        assert tab.count() == 1
        tab.click()
        page.page.wait_for_function(WHATIF_SHOWN, polling="raf", timeout=30_000)
        page.page.evaluate(PAINTED)
        page.assert_fits(f"{case} at {width} px, What-if tab", texts=3, boxes=2)
    finally:
        page.page.close()


@pytest.mark.parametrize("case", list(CASES))
def test_findings_and_selectors_redraw_the_gantt(browser: Any, pages: _Pages, case: str) -> None:
    page = _Page(browser, pages[case], 1440)
    try:
        first = page.state()
        targeted = [(i, ranks, view) for i, (ranks, view) in enumerate(first["findings"]) if ranks and view]
        if targeted:
            row, ranks, view = targeted[0]
            page.page.get_by_role("button", name="show").nth(row).click()
            wanted = sorted(int(r) for r in ranks.split(","))
            page.page.wait_for_function(
                "([v, n]) => { const d = Bokeh.documents[0];"
                " return d.get_model_by_name('iteration_select').value === v"
                " && new Set(d.get_model_by_name('gantt_bars').data.rank).size === n; }",
                arg=[view, len(wanted)],
                timeout=30_000,
            )
            picked = page.state()
            assert picked["ranks"] == wanted
            assert sorted(int(r) for r in picked["shown"]) == wanted
            assert {f"rank {r}" for r in wanted} == set(picked["lanes"])
        state = page.state()
        if len(state["options"]) > 1:
            other, label = next((v, label) for v, label in state["options"] if v != state["select"])
            page.page.locator("select").first.select_option(label=label)
            after = page.wait_changed(state)
            assert after["select"] == other
            assert after["title"] != state["title"]
            state = after
        if len(state["shown"]) > 1:
            dropped = int(state["shown"][-1])
            page.page.locator(".choices__button").last.click()
            page.page.wait_for_function(
                "([r, n]) => { const d = Bokeh.documents[0];"
                " const bars = Array.from(d.get_model_by_name('gantt_bars').data.rank);"
                " return bars.length > 0 && !bars.includes(n)"
                " && !d.get_model_by_name('gantt').y_range.factors.some(f => f[0] === r); }",
                arg=[f"rank {dropped}", dropped],
                timeout=30_000,
            )
            page.page.evaluate(PAINTED)
            after = page.state()
            assert dropped not in after["ranks"]
            assert f"rank {dropped}" not in after["lanes"]
        page.assert_fits(f"{case} at 1440 px after using the controls")
    finally:
        page.page.close()
