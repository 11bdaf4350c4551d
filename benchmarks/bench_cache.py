"""The cache of trace frames, whole processes: cold and warm commands against the floor of decoding JSON.

Usage::

    python benchmarks/bench_cache.py [--runs 5] [--cases single r8 big] [--commands analyze collectives
        whatif report] [--wait-quiet CORES] [--json benchmarks/out/bench_cache.json]

What a user waits for, from the prompt back to the prompt (issue #40): each measurement is one fresh
process of the ``timeline`` console script of this environment (output discarded), timed from
``fork`` to ``wait4``, with the CPU time of the process and of the children it reaped and its peak
RSS (``ru_maxrss``: the largest of the process and its children). Per case and command, four
variants run in turn, round after round, in an order that rotates, so that each sees the same
minutes of this shared machine:

- ``floor``: the floor script this benchmark carries (:data:`FLOOR`): the interpreter, polars, ISA-L
  gunzip of each file and a typed msgspec decode of its events into five polars columns (``ph``
  filtered to complete events: name, category, thread, start and duration), nothing else; for several
  files, two processes (forked before polars is imported) each decode half of them: the floor of
  decoding them on the two cores;
- ``cold``: the command on an empty cache folder (its first read: it decodes and writes the frames);
- ``warm``: the same command again on that folder (every frame read from the cache);
- ``no-cache``: the command with ``--no-cache`` (decoding, writing nothing).

``--breakdown`` instead times the steps of ``timeline analyze`` (:data:`BREAKDOWN`: imports, the
read, writing the cache entries, the summary, the diagnosis, the rendering) on the first case, in
CPU seconds, cold, warm and with ``--no-cache``.

Cases: ``single``, the 54 MB ``hta_df_index_resolver`` trace; ``r8``, 8 rank-rewritten copies of it
(``benchmarks/out/scale/r8``, read rank by rank); ``big``, a 1 GB trace grown from it
(``benchmarks/out/scale/big.json.gz``); both made by ``benchmarks/generate.py`` when missing, as
``bench_scale.py`` makes them. Commands: ``analyze``, ``collectives``, ``whatif --bandwidth 10``,
``report -o FILE`` (``big`` runs ``analyze`` only); ``analyze-nf``, ``analyze --no-findings``, when
asked for (``--commands analyze-nf``). The CPU time other processes used meanwhile is
reported: this 2-core machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.bench_startup import QUIET, Run, measure, timeline_env, timeline_script  # noqa: E402
from benchmarks.generate import DEFAULT_SOURCE  # noqa: E402
from benchmarks.quiet import versions  # noqa: E402

FLOOR = r"""
import os, sys
files = sys.argv[1:]
workers = 2 if len(files) > 1 else 1
if workers == 2:  # fork before polars starts its threads: two processes, half the files each
    child = os.fork()
    files = files[::2] if child else files[1::2]
import isal.igzip as igzip, msgspec, polars as pl

class Event(msgspec.Struct, gc=False):
    ph: str = ""
    name: str = ""
    cat: str = ""
    tid: int | str = 0
    ts: float = 0.0
    dur: float = 0.0

class Doc(msgspec.Struct, gc=False):
    traceEvents: list[Event]

decoder = msgspec.json.Decoder(Doc)
rows = 0
for path in files:
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        data = igzip.decompress(data)
    events = [e for e in decoder.decode(data).traceEvents if e.ph == "X"]
    del data
    frame = pl.DataFrame({
        "name": pl.Series([e.name for e in events], dtype=pl.Categorical()),
        "cat": pl.Series([e.cat for e in events], dtype=pl.Categorical()),
        "tid": pl.Series([str(e.tid) for e in events], dtype=pl.Categorical()),
        "ts": pl.Series([e.ts for e in events], dtype=pl.Float64),
        "dur": pl.Series([e.dur for e in events], dtype=pl.Float64),
    })
    rows += frame.height
    del events, frame
if workers == 2 and child:
    os.waitpid(child, 0)
print(rows)
"""
"""The floor: what any Python tool that reads these files into polars columns pays, at least."""

BREAKDOWN = r"""
import json, sys, time
cpu, wall = time.process_time, time.perf_counter
path, variant, folder = sys.argv[1:4]
phases, last = {}, [cpu(), wall()]
def mark(label):
    now = [cpu(), wall()]
    phases[label] = [now[0] - last[0], now[1] - last[1]]
    last[:] = now
import polars
mark("import polars")
import cli.main, cli.common
from timeline.run import Needs, Run, RunOptions
mark("import typer, rich and timeline's modules")
import timeline.importers.cache as cache
written = [0.0, 0.0]
original = cache._write_entry
def timed(*args, **kwargs):
    start = [cpu(), wall()]
    original(*args, **kwargs)
    written[0] += cpu() - start[0]
    written[1] += wall() - start[1]
cache._write_entry = timed
inputs = cli.common.inputs_of([path], no_cache=variant == "no-cache", cache_dir=folder)
run = Run(inputs, RunOptions(), needs=Needs(communication=True, graph=True))
mark("options, cache folder")
run.read()
mark("read: decode or cache, overlap")
phases["… of which writing the cache entries"] = list(written)
run.summary_data(findings=False)
mark("summary without findings")
run.diagnosis
mark("diagnosis (findings)")
summary = run.summary_data(findings=True)
mark("summary with findings")
from rich.console import Console
from timeline.render.terminal.summary import render_summary
import io
render_summary(summary, Console(file=io.StringIO(), width=120))
mark("render")
print("BENCH_RESULT " + json.dumps(phases))
"""
"""``timeline analyze`` in steps, timed (CPU and wall), in one fresh process: where a command's time goes."""

COMMANDS = {
    "analyze": ("analyze",),
    "analyze-nf": ("analyze", "--no-findings"),
    "collectives": ("collectives",),
    "whatif": ("whatif", "--bandwidth", "10"),
    "report": ("report", "-o", "REPORT"),
}
VARIANTS = ("floor", "cold", "warm", "no-cache")


def inputs(cases: Sequence[str]) -> dict[str, Path]:
    """The inputs of the cases, made when missing."""
    scale = REPO / "benchmarks" / "out" / "scale"
    out: dict[str, Path] = {}
    for case in cases:
        if case == "single":
            out[case] = DEFAULT_SOURCE.parent
            continue
        target = scale / ("r8" if case == "r8" else "big.json.gz")
        if not target.exists():
            scale.mkdir(parents=True, exist_ok=True)
            scratch = target.with_name(target.name + ".partial")
            how = ["ranks", "--ranks", "8"] if case == "r8" else ["grow", "--size", "1G"]
            generate = [sys.executable, str(REPO / "benchmarks" / "generate.py"), *how, "-o", str(scratch)]
            subprocess.run(generate, check=True, stdout=sys.stderr)
            scratch.rename(target)
        out[case] = target
    return out


def trace_files(path: Path) -> list[str]:
    """The trace files of an input (a file, or a folder's ``*.json.gz``)."""
    return [str(path)] if path.is_file() else sorted(str(p) for p in path.glob("*.json*"))


class Bench:
    """Runs the variants of one case and command, round after round."""

    def __init__(self, args: argparse.Namespace, scratch: Path) -> None:
        self.args = args
        self.scratch = scratch
        self.env = timeline_env(dict(os.environ))
        self.script = str(timeline_script())

    def command(self, variant: str, name: str, path: Path, folder: Path) -> list[str]:
        if variant == "floor":
            return [sys.executable, "-c", FLOOR, *trace_files(path)]
        args = [a.replace("REPORT", str(self.scratch / "report.html")) for a in COMMANDS[name]]
        cache = ["--no-cache"] if variant == "no-cache" else ["--cache-dir", str(folder)]
        return [self.script, *args, str(path), *cache]

    def round(self, name: str, path: Path, order: Sequence[str]) -> dict[str, Run]:
        """One run of each variant, in ``order``: cold on an empty cache folder, warm on a filled one.

        Warm reads the folder the cold run of this round filled, or, when it comes first, one filled
        by a cold run that is not measured.
        """
        cold = Path(tempfile.mkdtemp(prefix="cache-", dir=self.scratch))
        runs: dict[str, Run] = {}
        for variant in order:
            folder = cold
            if variant == "warm" and "cold" not in runs:
                folder = Path(tempfile.mkdtemp(prefix="cache-", dir=self.scratch))
                measure(self.command("cold", name, path, folder), self.env, timeout=1800)
            runs[variant] = measure(self.command(variant, name, path, folder), self.env, timeout=1800)
        for made in Path(self.scratch).glob("cache-*"):
            shutil.rmtree(made, ignore_errors=True)
        return runs

    def series(self, name: str, path: Path, variants: Sequence[str]) -> dict[str, list[Run]]:
        out: dict[str, list[Run]] = {v: [] for v in variants}
        for index in range(self.args.runs + 1):  # round 0 warms the page cache: not kept
            shift = index % len(variants)
            order = [*variants[shift:], *variants[:shift]]
            runs = self.round(name, path, order)
            for variant, run in runs.items():
                print(
                    f"{name} {path.name} {variant} round {index}: {_describe(run)}",
                    file=sys.stderr,
                    flush=True,
                )
                if index:
                    out[variant].append(run)
        return out


def _describe(run: Run) -> str:
    if run.error:
        return run.error
    peak = run.peak_kib / 1024
    return f"{run.wall_s:.3f} s, CPU {run.cpu_s:.2f} s, peak {peak:.0f} MB, others {run.others_cores:.2f}"


def _median(runs: list[Run], attr: str) -> float | None:
    values = [float(getattr(r, attr)) for r in runs if r.error is None]
    return statistics.median(values) if values else None


def _cell(runs: list[Run]) -> str:
    walls = [r.wall_s for r in runs if r.error is None]
    if not walls:
        return next((r.error for r in runs if r.error), "not run") or "not run"
    return f"{statistics.median(walls):.3f} ({min(walls):.3f}–{max(walls):.3f})"


def render(results: dict[str, dict[str, dict[str, list[Run]]]], header: list[str]) -> str:
    """The Markdown: one row per case and command, then the targets."""
    lines = [*header, ""]
    lines.append(
        "| case | command | floor (s) | cold (s) | warm (s) | --no-cache (s) | cold / floor | warm / cold "
        "| CPU floor / cold / warm / no-cache (s) | peak RSS cold / warm (MB) | others' CPU (cores) |"
    )
    lines.append("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for case, commands in results.items():
        for name, series in commands.items():
            med = {v: _median(series.get(v, []), "wall_s") for v in VARIANTS}
            cpu = "/".join(f"{_median(series.get(v, []), 'cpu_s') or 0:.2f}" for v in VARIANTS)
            peak = "/".join(
                f"{(_median(series.get(v, []), 'peak_kib') or 0) / 1024:.0f}" for v in ("cold", "warm")
            )
            others = statistics.median(r.others_cores for runs in series.values() for r in runs)
            cold_floor = f"{med['cold'] / med['floor']:.2f}×" if med["cold"] and med["floor"] else "-"
            warm_cold = f"{med['warm'] / med['cold']:.2f}" if med["warm"] and med["cold"] else "-"
            cells = [_cell(series.get(v, [])) if v in series else "-" for v in VARIANTS]
            lines.append(
                f"| {case} | `{' '.join(COMMANDS[name])}` | {' | '.join(cells)} | {cold_floor} | {warm_cold} "
                f"| {cpu} | {peak} | {others:.2f} |"
            )
    return "\n".join(lines)


def breakdown(path: Path, runs: int, scratch: Path) -> str:
    """``timeline analyze``'s steps, cold, warm and without the cache: medians of fresh processes."""
    env = timeline_env(dict(os.environ))
    found: dict[str, list[dict[str, list[float]]]] = {v: [] for v in ("cold", "warm", "no-cache")}
    for index in range(runs + 1):
        folder = Path(tempfile.mkdtemp(prefix="cache-", dir=scratch))
        for variant in ("no-cache", "cold", "warm"):
            run = measure(
                [sys.executable, "-c", BREAKDOWN, str(path), variant, str(folder)], env, timeout=1800
            )
            if run.result is None:
                raise SystemExit(f"breakdown {variant}: {run.error}")
            if index:
                found[variant].append(run.result)
        shutil.rmtree(folder, ignore_errors=True)
    steps = list(found["cold"][0])
    lines = [
        f"`timeline analyze` on {path.name} in steps (CPU seconds of the process, its threads included; "
        f"medians of {runs} fresh processes each):",
        "",
        "| step | cold | warm | --no-cache |",
        "|---|--:|--:|--:|",
    ]
    for step in steps:
        cells = [
            f"{statistics.median(r[step][0] for r in found[v]):.3f}" for v in ("cold", "warm", "no-cache")
        ]
        lines.append(f"| {step} | {' | '.join(cells)} |")
    totals = [
        statistics.median(sum(x[0] for k, x in r.items() if not k.startswith("…")) for r in found[v])
        for v in ("cold", "warm", "no-cache")
    ]
    lines.append(f"| **total** | {' | '.join(f'**{t:.3f}**' for t in totals)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print the Markdown table (and write the runs as JSON with ``--json``)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--cases", nargs="+", choices=("single", "r8", "big"), default=["single", "r8", "big"]
    )
    default = [c for c in COMMANDS if c != "analyze-nf"]
    parser.add_argument("--commands", nargs="+", choices=tuple(COMMANDS), default=default)
    parser.add_argument("--wait-quiet", type=float, default=0.0, metavar="CORES")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--breakdown", action="store_true", help="time the steps of `timeline analyze` on the first case"
    )
    args = parser.parse_args(argv)
    QUIET["cores"] = args.wait_quiet
    if args.breakdown:
        with tempfile.TemporaryDirectory(prefix="bench-cache-") as scratch:
            print(breakdown(inputs(args.cases[:1])[args.cases[0]], args.runs, Path(scratch)))
        return 0
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load_before = os.getloadavg()[0]
    results: dict[str, dict[str, dict[str, list[Run]]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-cache-") as scratch:
        bench = Bench(args, Path(scratch))
        for case, path in inputs(args.cases).items():
            results[case] = {}
            for name in args.commands if case != "big" else ["analyze"]:
                variants = VARIANTS if name.startswith("analyze") else ("cold", "warm", "no-cache")
                results[case][name] = bench.series(name, path, variants)
    given = " ".join(argv if argv is not None else sys.argv[1:])
    load_after = os.getloadavg()[0]
    header = [
        f"- date: {started}; load average (1 min) before / after: {load_before:.2f} / {load_after:.2f}",
        f"- {versions('timeline', 'polars', 'msgspec', 'isal')}",
        f"- command: `python benchmarks/bench_cache.py {given}`",
    ]
    print(render(results, header))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        data: dict[str, Any] = {
            case: {
                name: {v: [vars(r) for r in runs] for v, runs in series.items()}
                for name, series in cmds.items()
            }
            for case, cmds in results.items()
        }
        args.json.write_text(json.dumps(data, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
