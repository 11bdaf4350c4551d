"""Regenerate the report screenshots of docs/report.md from the shared real traces.

Run from the repository root, with the dev extra installed and Debian's chromium present::

    python docs/img/make_screenshots.py

It writes ``docs/img/param_8rank_step.png`` (the PARAM DLRM step, 8 ranks) and
``docs/img/horovod_timeline.png`` (a 32-GPU multi-node Horovod timeline) by exporting the report
with ``timeline report``'s code and loading it in headless Chromium (Playwright).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from playwright.sync_api import sync_playwright

from timeline.report.data import prepare_report_data
from timeline.report.export import write_report
from timeline.run import Run
from timeline.trace import load

HERE = Path(__file__).resolve().parent
TRACES = HERE.parents[2] / "shared" / "traces"
SHOTS = {
    "param_8rank_step.png": TRACES / "kineto" / "param_dlrm_8rank",
    "horovod_timeline.png": TRACES
    / "horovod"
    / "dexhunter_allreduce-experiments"
    / "horovod-results__32gpu__10g-32-h-2.json",
}
CHROMIUM = "/usr/bin/chromium"
DRAWN = """() => {
  const doc = window.Bokeh && Bokeh.documents[0];
  const bars = doc && doc.get_model_by_name("gantt_bars");
  return bars != null && bars.data.left.length > 0;
}"""


def export(trace: Path, out: Path) -> Path:
    """Write the standalone report of ``trace`` to ``out``."""
    loaded = load([trace])
    data = prepare_report_data(Run.from_trace(loaded))
    return write_report(data, out, files=loaded.files.height)


def main() -> int:
    """Export each trace's report and save a screenshot of it; return the exit code."""
    with tempfile.TemporaryDirectory() as folder, sync_playwright() as playwright:
        args = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=args)
        for name, trace in SHOTS.items():
            html = export(trace, Path(folder) / f"{Path(name).stem}.html")
            page = browser.new_page(viewport={"width": 1660, "height": 1000})
            page.goto(html.as_uri())
            page.wait_for_function(DRAWN, timeout=120_000)
            page.wait_for_timeout(1000)
            page.screenshot(path=HERE / name, full_page=True)
            print(f"wrote {HERE / name}")
            page.close()
        browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
