"""How fast the interactive report draws an iteration of 200,000 events, exported and served.

Usage (repository root, dev extra installed, Debian's chromium at /usr/bin/chromium)::

    python benchmarks/bench_report.py [--events 200000] [--runs 5]

The input is synthetic (``tests/report/builders.py``): one ``ProfilerStep`` over 8 ranks, each
with back-to-back compute kernels, NCCL all-reduces partly under compute, and memcpys, about
``--events`` GPU events in all. For each of

- the standalone HTML of ``timeline report`` (opened as ``file://``), and
- the live app of ``timeline serve`` (the events written as Parquet, served on a free port),

it loads the page in a fresh headless Chromium tab and measures, in the page's clock, the time from
navigation start until the Gantt's bars are set and two animation frames have passed (the browser
has painted them). One untimed load first puts the scripts in the browser's cache. It prints the
minimum and median over ``--runs`` loads, the number of bars drawn, and the Python-side times
(preparing the data, writing the HTML). Results are recorded in ``docs/report.md``.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl
from playwright.sync_api import Browser, sync_playwright

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.report.builders import synthetic_events
from timeline.report.data import prepare_report_data
from timeline.report.export import write_report
from timeline.run import Run
from timeline.schema import FILES_SCHEMA, validate
from timeline.trace import Trace

DRAWN = """() => {
  const doc = window.Bokeh && Bokeh.documents[0];
  const bars = doc && doc.get_model_by_name("gantt_bars");
  return bars != null && bars.data.left.length > 0;
}"""
PAINTED = "new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(performance.now()))))"
BARS = "Bokeh.documents[0].get_model_by_name('gantt_bars').data.left.length"


def _files(events: pl.DataFrame) -> pl.DataFrame:
    """The file table of a Parquet trace: one made-up file per rank."""
    counts = events.group_by("rank").agg(events=pl.len().cast(pl.Int64)).sort("rank")
    rows = counts.with_columns(
        path=pl.format("rank{}.json", pl.col("rank")),
        format=pl.lit("kineto"),
        rank_from=pl.lit("file name"),
        world_size=pl.lit(counts.height, dtype=pl.Int32),
    )
    missing = [
        pl.lit(None, dtype=dtype).alias(name)
        for name, dtype in FILES_SCHEMA.items()
        if name not in rows.columns
    ]
    return validate(rows.with_columns(missing), FILES_SCHEMA, what="files")


def _load_times(browser: Browser, url: str, runs: int) -> tuple[list[float], int]:
    times: list[float] = []
    bars = 0
    for i in range(runs + 1):
        page = browser.new_page(viewport={"width": 1660, "height": 1300})
        page.goto(url, wait_until="commit")
        page.wait_for_function(DRAWN, polling="raf", timeout=120_000)
        drawn = float(page.evaluate(PAINTED))
        bars = int(page.evaluate(BARS))
        page.close()
        if i:  # the first load warms the browser's caches
            times.append(drawn)
    return times, bars


def _serve(parquet: Path) -> tuple[subprocess.Popen[str], str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    timeline = Path(sys.executable).with_name("timeline")
    server = subprocess.Popen(
        [str(timeline), "serve", str(parquet), "--port", str(port)], stdout=subprocess.PIPE, text=True
    )
    assert server.stdout is not None
    line = server.stdout.readline()
    if "serving" not in line:
        server.kill()
        raise SystemExit(f"timeline serve did not start: {line!r}")
    return server, f"http://127.0.0.1:{port}/"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    events = synthetic_events(args.events)
    start = time.perf_counter()
    data = prepare_report_data(Run.from_trace(Trace(events=events, files=FILES_SCHEMA.to_frame())))
    prepared = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        html = write_report(data, Path(folder) / "report.html")
        exported = time.perf_counter() - start
        parquet = Path(folder) / "synthetic.parquet"
        Trace(events=events, files=_files(events)).write_parquet(parquet)

        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path="/usr/bin/chromium",
                args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
            )
            standalone, bars = _load_times(browser, html.as_uri(), args.runs)
            server, url = _serve(parquet)
            try:
                live, live_bars = _load_times(browser, url, args.runs)
            finally:
                server.send_signal(signal.SIGINT)
                server.wait(timeout=30)
            browser.close()
        size = html.stat().st_size

    segments = data.segments.filter(pl.col("view") == 0).height
    load = os.getloadavg()[0]
    print(f"{segments:,} segments ({args.events:,} events + exposed pieces)")
    print(f"{os.cpu_count()} cores, 1-minute load average {load:.2f}")
    print(f"python: prepare {prepared:.2f} s, export {exported:.2f} s ({size / 1e6:.1f} MB of HTML)")
    print("| page | bars drawn | min (ms) | median (ms) |")
    print("|---|---|---|---|")
    print(
        f"| `timeline report` HTML | {bars:,} | {min(standalone):.0f} | {statistics.median(standalone):.0f} |"
    )
    print(f"| `timeline serve` | {live_bars:,} | {min(live):.0f} | {statistics.median(live):.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
