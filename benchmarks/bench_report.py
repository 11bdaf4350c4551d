"""How fast the report is written and opened: ``timeline report`` against ``timeline analyze``, first render.

Usage (repository root, dev extra installed, Debian's chromium at /usr/bin/chromium)::

    python benchmarks/bench_report.py commands [--cases sample single] [--runs 5] [--wait-quiet CORES]
        [--out docs/performance.md]
    python benchmarks/bench_report.py synthetic [--events 200000] [--ranks 8] [--steps 1] [--runs 5]
        [--html-only]

``commands`` (issue #39: the report within 3× ``analyze``, its Gantt drawn within 2 s): for each case,
``timeline analyze INPUT`` and ``timeline report INPUT -o FILE`` are each one fresh process (as the
``timeline`` console script starts it, ``cli.main.run``), timed from ``fork`` to ``wait4``
(:func:`benchmarks.bench_startup.measure`, output discarded), after one untimed run of each; the two
alternate in pairs, ABBA (the order flips every round), and each pair gives the ratio report/analyze:
the median of those paired ratios is the figure, so that both sides of a ratio saw the same load on
this shared machine. Then the report written is opened ``--runs`` times in a fresh headless Chromium
tab (1440 × 1000, after one untimed load that puts nothing in a cache the file needs: it is
standalone), and the time from navigation start until the Gantt's bars are set and two animation
frames have passed (painted) is read from the page's clock. Cases:

- ``sample``: ``sample_traces/ddp_gloo`` (2 CPU ranks, 3 iterations);
- ``single``: the folder of the 54 MB ``hta_df_index_resolver`` trace (one GPU rank, 5 iterations);
- ``param``: the 8-rank PARAM DLRM step;
- ``r64``: 64 rank-rewritten copies of a 2 MB cut of that trace (``benchmarks/generate.py``, made into
  ``--workdir``/``r64``).

The Markdown goes to stdout; ``--out`` rewrites the section of that file between
``<!-- bench_report:start -->`` and ``<!-- bench_report:end -->``.

``synthetic``: ``--steps`` ``ProfilerStep`` (default 1) of about ``--events`` GPU events each over
``--ranks`` ranks (default 8; ``tests/report/builders.py``: compute kernels, NCCL all-reduces partly
under compute, memcpys); for
the standalone HTML (``file://``) and the live app of ``timeline serve`` (the events written as
Parquet, served on a free port), the same first-render time, minimum and median over ``--runs`` loads
after one untimed load, the bars drawn, and the Python-side times (preparing the data, writing the HTML).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl
from playwright.sync_api import Browser, sync_playwright

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.bench_scale import machine_facts, write_section  # noqa: E402
from benchmarks.bench_startup import QUIET, Run, measure  # noqa: E402
from benchmarks.generate import DEFAULT_SOURCE, make_rank_set  # noqa: E402
from benchmarks.quiet import versions  # noqa: E402
from tests.report.builders import synthetic_events  # noqa: E402
from timeline.report.data import prepare_report_data  # noqa: E402
from timeline.report.export import write_report  # noqa: E402
from timeline.run import Run as TimelineRun  # noqa: E402
from timeline.schema import FILES_SCHEMA, validate  # noqa: E402
from timeline.trace import Trace  # noqa: E402

DRAWN = """() => {
  const doc = window.Bokeh && Bokeh.documents[0];
  const bars = doc && doc.get_model_by_name("gantt_bars");
  return bars != null && bars.data.left.length > 0;
}"""
PAINTED = "new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(performance.now()))))"
BARS = "Bokeh.documents[0].get_model_by_name('gantt_bars').data.left.length"
CHROMIUM = "/usr/bin/chromium"
LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
LAUNCH = "from cli.main import run; run()"
MARK_START = "<!-- bench_report:start -->"
MARK_END = "<!-- bench_report:end -->"
HEADING = "## The report: `timeline report` against `timeline analyze`, and its first render"
TARGET_RATIO = 3.0
TARGET_RENDER_MS = 2000.0
CASES = {
    "sample": REPO / "sample_traces" / "ddp_gloo",
    "single": DEFAULT_SOURCE.parent,
    "param": DEFAULT_SOURCE.parents[1] / "param_dlrm_8rank",
}


@dataclass
class Case:
    """The paired runs of one input, and the first-render times of the report it wrote."""

    name: str
    path: Path
    analyze: list[Run] = field(default_factory=list)
    report: list[Run] = field(default_factory=list)
    render_ms: list[float] = field(default_factory=list)
    bars: int = 0
    html_bytes: int = 0

    def ratios(self) -> list[float]:
        """report / analyze of each pair (both sides done)."""
        return [
            r.wall_s / a.wall_s
            for a, r in zip(self.analyze, self.report, strict=True)
            if a.error is None and r.error is None and a.wall_s > 0
        ]


def _env() -> dict[str, str]:
    """The environment of a measured process: this checkout's ``timeline`` and ``cli``."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "COLUMNS")}
    env.update(PYTHONSAFEPATH="1", PYTHONPATH=str(REPO), COLUMNS="120")
    return env


def _once(args: Sequence[str], timeout: float) -> Run:
    run = measure([sys.executable, "-c", LAUNCH, *args], _env(), timeout=timeout)
    if run.error is not None:
        print(f"{' '.join(args)}: {run.error}", file=sys.stderr)
    return run


def run_case(case: Case, browser: Browser, folder: Path, runs: int, timeout: float) -> None:
    """Measure one case: a warm-up of each command, ``runs`` pairs ABBA, then the report's first render."""
    html = folder / f"{case.name}.html"
    commands = {
        "analyze": ["analyze", str(case.path)],
        "report": ["report", str(case.path), "-o", str(html)],
    }
    for args in commands.values():
        _once(args, timeout)  # warm-up: page cache, bytecode
    order = ["analyze", "report"]
    for round_ in range(runs):
        for name in order if round_ % 2 == 0 else order[::-1]:
            getattr(case, name).append(_once(commands[name], timeout))
    case.html_bytes = html.stat().st_size
    case.render_ms, case.bars = first_render(browser, html.as_uri(), runs)
    print(
        f"{case.name}: analyze {_cell(case.analyze)} s, report {_cell(case.report)} s, "
        f"ratio {_median(case.ratios()):.2f}, first render {_median(case.render_ms):.0f} ms",
        file=sys.stderr,
    )


def first_render(browser: Browser, url: str, runs: int) -> tuple[list[float], int]:
    """Open ``url`` ``runs + 1`` times in fresh tabs; return the times of the last ``runs`` and the bars."""
    times: list[float] = []
    bars = 0
    for i in range(runs + 1):
        page = browser.new_page(viewport={"width": 1440, "height": 1000})
        page.goto(url, wait_until="commit")
        page.wait_for_function(DRAWN, polling="raf", timeout=120_000)
        drawn = float(page.evaluate(PAINTED))
        bars = int(page.evaluate(BARS))
        page.close()
        if i:  # the first load warms the browser itself
            times.append(drawn)
    return times, bars


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _cell(runs: Sequence[Run]) -> str:
    walls = [r.wall_s for r in runs if r.error is None]
    if not walls:
        return "failed"
    return f"{statistics.median(walls):.2f} ({min(walls):.2f}–{max(walls):.2f})"


def markdown(cases: Sequence[Case], *, runs: int, load: tuple[float, float], command: str) -> str:
    """The section of docs/performance.md: the table, how it was measured, the machine."""
    cpu, mem_kib = machine_facts()
    lines = [
        MARK_START,
        "",
        f"Measured {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC with `{command}` "
        f"(commit {_commit()}); {os.cpu_count()} cores ({cpu}), {mem_kib / 2**20:.0f} GiB; "
        f"1-minute load average {load[0]:.1f} before and {load[1]:.1f} after "
        "(a shared machine: other engineers' jobs ran beside these; see the last column). "
        f"{versions('polars', 'bokeh', 'msgspec')}.",
        "",
        "| input | `analyze` (s) | `report` (s) | report / analyze (paired) | target ≤ 3× | "
        "CPU s: analyze, report (ratio) | first render (ms) | target ≤ 2 s | HTML | bars drawn | "
        "other work (cores) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for case in cases:
        ratios = case.ratios()
        ratio = _median(ratios)
        render = _median(case.render_ms)
        others = _median([r.others_cores for r in [*case.analyze, *case.report]])
        nan = float("nan")
        spread = f"{min(ratios, default=nan):.2f}–{max(ratios, default=nan):.2f}"
        renders = f"{min(case.render_ms, default=nan):.0f}–{max(case.render_ms, default=nan):.0f}"
        cpu_a = _median([r.cpu_s for r in case.analyze if r.error is None])
        cpu_r = _median([r.cpu_s for r in case.report if r.error is None])
        lines.append(
            f"| {case.name} | {_cell(case.analyze)} | {_cell(case.report)} | {ratio:.2f} ({spread}) | "
            f"{'yes' if ratio <= TARGET_RATIO else 'no'} | {cpu_a:.2f}, {cpu_r:.2f} ({cpu_r / cpu_a:.2f}) | "
            f"{render:.0f} ({renders}) | "
            f"{'yes' if render <= TARGET_RENDER_MS else 'no'} | {case.html_bytes / 1e6:.1f} MB | "
            f"{case.bars:,} | {others:.1f} |"
        )
    lines += [
        "",
        f"Medians over {runs} pairs (min–max); the ratio is the median of each pair's report/analyze. "
        "Inputs: "
        + "; ".join(f"{c.name} = `{_shown(c.path)}`" for c in cases)
        + ". Commands: `timeline analyze INPUT` and `timeline report INPUT -o FILE`, whole processes "
        "from fork to exit; CPU: user + system time of the process and of the helper processes it "
        "started and reaped (`wait4`), medians. First render: navigation start to the Gantt's bars "
        "painted, in headless Chromium at 1440 × 1000, over as many loads after one untimed load.",
        "",
        MARK_END,
    ]
    return "\n".join(lines)


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(REPO))
    except ValueError:
        return str(path).replace(str(REPO.parent), "..")


def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def _inputs(names: Sequence[str], workdir: Path) -> dict[str, Path]:
    inputs = {name: path for name, path in CASES.items() if name in names}
    if "r64" in names:
        inputs["r64"] = workdir / "r64"
        if not inputs["r64"].exists():
            make_rank_set(DEFAULT_SOURCE, inputs["r64"], ranks=64, target_bytes=2_000_000)
    return inputs


def commands(args: argparse.Namespace) -> int:
    """The ``commands`` part: report against analyze, and the first render of the report."""
    QUIET.update(cores=args.wait_quiet, max_wait_s=args.max_wait)
    load_before = os.getloadavg()[0]
    cases = [Case(name, path) for name, path in _inputs(args.cases, args.workdir).items()]
    with tempfile.TemporaryDirectory() as folder, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        for case in cases:
            run_case(case, browser, Path(folder), args.runs, args.timeout)
        browser.close()
    command = "python benchmarks/bench_report.py commands " + " ".join(sys.argv[2:])
    section = markdown(cases, runs=args.runs, load=(load_before, os.getloadavg()[0]), command=command.strip())
    print(section)
    if args.out is not None:
        write_section(args.out, section, start=MARK_START, end=MARK_END, heading=HEADING)
    return 0


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


def _serve(parquet: Path) -> tuple[subprocess.Popen[str], str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    timeline = shutil.which("timeline") or str(Path(sys.executable).with_name("timeline"))
    server = subprocess.Popen(
        [timeline, "serve", str(parquet), "--port", str(port)], stdout=subprocess.PIPE, text=True
    )
    assert server.stdout is not None
    line = server.stdout.readline()
    if "serving" not in line:
        server.kill()
        raise SystemExit(f"timeline serve did not start: {line!r}")
    return server, f"http://127.0.0.1:{port}/"


def synthetic(args: argparse.Namespace) -> int:
    """The ``synthetic`` part: one step of ``--events`` events, exported and served."""
    events = synthetic_events(args.events, ranks=args.ranks, steps=args.steps)
    start = time.perf_counter()
    data = prepare_report_data(TimelineRun.from_trace(Trace(events=events, files=FILES_SCHEMA.to_frame())))
    prepared = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        html = write_report(data, Path(folder) / "report.html")
        exported = time.perf_counter() - start
        parquet = Path(folder) / "synthetic.parquet"
        Trace(events=events, files=_files(events)).write_parquet(parquet)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
            standalone, bars = first_render(browser, html.as_uri(), args.runs)
            live: list[float] = []
            live_bars = 0
            if not args.html_only:
                server, url = _serve(parquet)
                try:
                    live, live_bars = first_render(browser, url, args.runs)
                finally:
                    server.send_signal(signal.SIGINT)
                    server.wait(timeout=30)
            browser.close()
        size = html.stat().st_size
    segments = data.segments.filter(pl.col("view") == 0).height
    print(f"{segments:,} segments in the first step ({args.events:,} events a step + exposed pieces)")
    print(f"{os.cpu_count()} cores, 1-minute load average {os.getloadavg()[0]:.2f}")
    print(f"python: prepare {prepared:.2f} s, export {exported:.2f} s ({size / 1e6:.1f} MB of HTML)")
    print("| page | bars drawn | min (ms) | median (ms) |")
    print("|---|---|---|---|")
    print(f"| `timeline report` HTML | {bars:,} | {min(standalone):.0f} | {_median(standalone):.0f} |")
    if live:
        print(f"| `timeline serve` | {live_bars:,} | {min(live):.0f} | {_median(live):.0f} |")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parts = parser.add_subparsers(dest="part", required=True)
    cmd = parts.add_parser("commands", help="timeline report against timeline analyze, and first render")
    cmd.add_argument("--cases", nargs="+", default=["sample", "single"], choices=[*CASES, "r64"])
    cmd.add_argument("--runs", type=int, default=5)
    cmd.add_argument("--timeout", type=float, default=600.0)
    cmd.add_argument("--wait-quiet", type=float, default=0.0, metavar="CORES")
    cmd.add_argument("--max-wait", type=float, default=120.0)
    cmd.add_argument("--workdir", type=Path, default=REPO / "benchmarks" / "out")
    cmd.add_argument("--out", type=Path, default=None)
    syn = parts.add_parser("synthetic", help="one synthetic step of many events, exported and served")
    syn.add_argument("--events", type=int, default=200_000)
    syn.add_argument("--ranks", type=int, default=8)
    syn.add_argument("--steps", type=int, default=1)
    syn.add_argument("--runs", type=int, default=5)
    syn.add_argument("--html-only", action="store_true", help="measure the exported HTML only")
    args = parser.parse_args(argv)
    return commands(args) if args.part == "commands" else synthetic(args)


if __name__ == "__main__":
    sys.exit(main())
