"""Regenerate the report screenshots of docs/report.md from the bundled sample runs, at 1440 pixels.

Run from the repository root, with the dev extra installed and Debian's chromium present::

    python docs/img/make_screenshots.py

For each picture it writes the report with ``timeline report`` (a whole process, as a user would),
opens it offline in headless Chromium (Playwright) in a window 1440 pixels wide, waits until the
Gantt's bars are painted (and, for the What-if picture, until the tab's plot is), and saves the page:

- ``report_ddp_gloo_4rank.png``: the whole page of ``sample_traces/ddp_gloo_4rank`` (4 CPU ranks,
  3 iterations): the verdict and findings, the Gantt, the breakdowns, the tables, the collectives;
- ``report_whatif.png``: the What-if tab of the same report (the window's first 1,000 pixels);
- ``report_horovod.png``: the Gantt tab of ``sample_traces/horovod/horovod_v021.json`` (a Horovod
  timeline).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from playwright.sync_api import Page, sync_playwright

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SAMPLES = REPO / "sample_traces"
WIDTH = 1440
CHROMIUM = "/usr/bin/chromium"
LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
DRAWN = """() => {
  const doc = window.Bokeh && Bokeh.documents[0];
  const bars = doc && doc.get_model_by_name("gantt_bars");
  return bars != null && bars.data.left.length > 0;
}"""
WHATIF_DRAWN = """() => {
  const plot = Bokeh.documents[0].get_model_by_name("whatif_plot");
  const find = (view) => {
    if (view.model === plot) return view;
    for (const child of view.child_views ?? []) { const found = find(child); if (found) return found; }
    return null;
  };
  let view = null;
  for (const root of Bokeh.index.roots) view = view ?? find(root);
  return view !== null && view.el.getBoundingClientRect().width > 300;
}"""
PAINTED = "new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(0))))"
SHOTS: dict[str, tuple[Path, str]] = {
    "report_ddp_gloo_4rank.png": (SAMPLES / "ddp_gloo_4rank", "gantt"),
    "report_whatif.png": (SAMPLES / "ddp_gloo_4rank", "whatif"),
    "report_horovod.png": (SAMPLES / "horovod" / "horovod_v021.json", "gantt"),
}


def export(trace: Path, out: Path) -> Path:
    """Write the standalone report of ``trace`` to ``out`` with ``timeline report``."""
    command = [sys.executable, "-c", "from cli.main import run; run()", "report", str(trace), "-o", str(out)]
    subprocess.run(command, check=True, cwd=REPO, capture_output=True, text=True)
    return out


def shoot(page: Page, html: Path, tab: str, out: Path) -> None:
    """Open ``html`` offline, wait for what is pictured to be painted, save the screenshot."""
    page.route("http*://**", lambda route: route.abort())
    page.goto(html.as_uri(), wait_until="commit")
    page.wait_for_function(DRAWN, polling="raf", timeout=120_000)
    if tab == "whatif":
        page.get_by_text("What-if", exact=True).click()
        page.wait_for_function(WHATIF_DRAWN, polling="raf", timeout=60_000)
    page.evaluate(PAINTED)
    page.screenshot(path=out, full_page=tab != "whatif")


def main() -> int:
    """Export each sample's report and save its screenshot; return the exit code."""
    with tempfile.TemporaryDirectory() as folder, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        written: dict[Path, Path] = {}
        for name, (trace, tab) in SHOTS.items():
            if trace not in written:
                written[trace] = export(trace, Path(folder) / f"{len(written)}.html")
            page = browser.new_page(viewport={"width": WIDTH, "height": 1000})
            shoot(page, written[trace], tab, HERE / name)
            page.close()
            print(f"wrote {HERE / name}")
        browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
