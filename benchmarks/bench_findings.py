"""What the findings cost: ``timeline analyze`` with and without them, whole process, on the same inputs.

Usage::

    python benchmarks/bench_findings.py [--runs 5] [--cases sample param single r8] \\
        [--wait-quiet CORES] [--out docs/performance.md] [--json benchmarks/out/bench_findings.json] \\
        [--breakdown]

Each measurement is one fresh process as a user runs it (the ``timeline`` console script of this
interpreter's environment, output discarded), timed from ``fork`` to ``wait4`` by
``bench_startup.measure``: interpreter start-up, imports, reading, the analysis and the diagnosis
included. For each case, ``timeline analyze PATH`` (the findings: the default) and ``timeline analyze
PATH --no-findings`` alternate (ABBA: the order flips every round) after one untimed warm-up run of
each; the overhead is the ratio of the medians, of wall-clock time and of CPU time (user + system,
the process and its children). The target is judged on CPU time: on a loaded machine the wall-clock
time of one process swings with the others' load far more than the diagnosis costs. Cases:

- ``sample``: ``sample_traces/ddp_gloo`` (2 CPU ranks, 3 iterations): should stay near its time
  without findings (the start-up target of ``timeline analyze`` on it is 0.30 s);
- ``param``: ``../shared/traces/kineto/param_dlrm_8rank`` (8 GPU ranks, in memory): at most +30 %;
- ``single``: the 54 MB ``hta_df_index_resolver`` trace (one rank, in memory): no target, shown;
- ``r8``: 8 rank-rewritten copies of it (rank by rank), made as ``bench_startup.py``'s ``r8``: at
  most +30 %.

The machine is shared: the table says how busy it was (CPU time other processes used while each case
ran); compare only the two columns of one row, measured in the same run, alternating. ``--out``
rewrites the section of that file between ``<!-- bench_findings:start -->`` and
``<!-- bench_findings:end -->``.

``--breakdown`` also prints (after the section, not into ``--out``) where the diagnosis' time goes
on each case: in fresh processes, the inputs are analysed as ``timeline analyze`` does, then the
diagnosis runs once cold (the what-if engine and the rules imported on first use: the difference
with a warm run) and ``--breakdown-runs`` times warm with its stages wrapped in timers (CPU time of
the process, exclusive: a stage called inside another is counted once; found by name, so the table
follows the code; a name that no longer exists is not timed and its time lands in the rest).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.bench_load import child_env, time_stages  # noqa: E402
from benchmarks.bench_scale import machine_facts, write_section  # noqa: E402
from benchmarks.bench_startup import (  # noqa: E402
    QUIET,
    Run,
    _describe,
    _shown,
    git_state,
    make_cases,
    make_inputs,
    measure,
    timeline_env,
    timeline_script,
)

MARK_START = "<!-- bench_findings:start -->"
MARK_END = "<!-- bench_findings:end -->"
HEADING = "## Findings: what the diagnosis costs"
ALL_CASES = ("sample", "param", "single", "r8")
PARAM = REPO.parent / "shared" / "traces" / "kineto" / "param_dlrm_8rank"
TARGETS = {"sample": None, "param": 0.30, "single": None, "r8": 0.30}
"""The largest overhead allowed (a fraction of the time without findings); None: shown, no target."""


@dataclass
class Pair:
    """The runs of one case, with the findings and without."""

    key: str
    args: list[str]
    with_findings: list[Run] = field(default_factory=list)
    without: list[Run] = field(default_factory=list)
    others_cores: list[float] = field(default_factory=list)

    @staticmethod
    def median(runs: list[Run], *, cpu: bool = False) -> float | None:
        values = [r.cpu_s if cpu else r.wall_s for r in runs if r.error is None]
        return statistics.median(values) if values else None

    def overhead(self, *, cpu: bool = False) -> float | None:
        """The median with findings over the median without, less one (wall-clock or CPU time)."""
        a, b = self.median(self.with_findings, cpu=cpu), self.median(self.without, cpu=cpu)
        return None if a is None or b is None or b <= 0 else a / b - 1


def _cases(workdir: Path) -> dict[str, list[str]]:
    known = make_cases(workdir)
    return {
        "sample": list(known["sample"].args),
        "param": ["analyze", _shown(PARAM, directory=True)],
        "single": list(known["single"].args),
        "r8": list(known["r8"].args),
    }


def _log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def run_pair(key: str, args: list[str], env: dict[str, str], runs: int, timeout: float) -> Pair:
    """Measure one case with and without ``--no-findings``, alternating, after a warm-up of each."""
    script = str(timeline_script())
    pair = Pair(key, args)
    jobs = [
        ("findings", pair.with_findings, [script, *args]),
        ("--no-findings", pair.without, [script, *args, "--no-findings"]),
    ]
    for label, _runs, command in jobs:
        _log(f"{key} {label}: warm-up: {_describe(measure(command, env, timeout=timeout))}")
    for i in range(runs):
        for label, into, command in jobs if i % 2 == 0 else jobs[::-1]:
            run = measure(command, env, timeout=timeout)
            into.append(run)
            pair.others_cores.append(run.others_cores)
            _log(f"{key} {label}: run {i + 1}/{runs}: {_describe(run)}")
    return pair


def _seconds(runs: list[Run], *, cpu: bool = False) -> str:
    values = [r.cpu_s if cpu else r.wall_s for r in runs if r.error is None]
    if not values:
        return next((r.error or "" for r in runs), "not run").replace("|", "\\|")
    return f"{statistics.median(values):.3f} ({min(values):.3f}–{max(values):.3f})"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:+.0%}"


def _machine() -> str:
    cpu, memory_kib = machine_facts()
    return f"{cpu}, {os.cpu_count()} cores, {memory_kib / 2**20:.0f} GiB"


def render(args: argparse.Namespace, pairs: list[Pair], load: tuple[float, float]) -> str:
    lines = [
        MARK_START,
        f"Measured {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC on {git_state()}; {_machine()}. "
        f"1-minute load average {load[0]:.2f} before, {load[1]:.2f} after: the machine was shared and "
        "loaded; each row's two columns were measured in the same run, alternating.",
        "",
        f"Command: `python benchmarks/bench_findings.py {' '.join(args.argv)}`. Whole process, median "
        f"(min–max) of {args.runs} runs each, seconds: wall-clock, then CPU time (user + system of the "
        "process and its children), which a loaded machine disturbs less.",
        "",
        "| case | command | wall without findings (`--no-findings`) | wall with findings | wall overhead | "
        "CPU without | CPU with | CPU overhead | target | other processes (cores) |",
        "|---|---|--:|--:|--:|--:|--:|--:|---|--:|",
    ]
    for pair in pairs:
        target = TARGETS[pair.key]
        judged = pair.overhead(cpu=True)
        if target is None:
            verdict = "near the time without (shown)" if pair.key == "sample" else "shown"
        else:
            ok = judged is not None and judged <= target
            verdict = f"at most +{target:.0%}: {'met' if ok else '**not met**'}"
        busy = statistics.median(pair.others_cores) if pair.others_cores else 0.0
        lines.append(
            f"| {pair.key} | `timeline {' '.join(pair.args)}` | {_seconds(pair.without)} | "
            f"{_seconds(pair.with_findings)} | {_share(pair.overhead())} | "
            f"{_seconds(pair.without, cpu=True)} | {_seconds(pair.with_findings, cpu=True)} | "
            f"{_share(pair.overhead(cpu=True))} | {verdict} | {busy:.2f} |"
        )
    return "\n".join([*lines, MARK_END])


# The diagnosis' stages timed by ``--breakdown``, by ``__name__`` (functions of ``timeline`` modules,
# and methods of the replayer), with the row label; exclusive times (see the module docstring).
BREAKDOWN_STAGES: dict[str, str] = {
    "match_collectives": "collectives matched across ranks (`match_collectives`)",
    "facts_of": "the facts (`facts_of`)",
    "chosen_launch_gaps": "launch gaps of the diagnosed windows (`chosen_launch_gaps`, in memory)",
    "_launch_gaps": "launch gaps per window, rest (`diagnosis._launch_gaps`)",
    "diagnosis_parts": "graph parts of the diagnosed iterations (`diagnosis_parts`, in memory)",
    "graph_parts": "… `whatif.graph.graph_parts` (inside diagnosis_parts)",
    "combine_graph_parts": "the graph assembled from the parts (`combine_graph_parts`)",
    "restrict": "the graph restricted to the diagnosed iterations (`transform.restrict`)",
    "window_lengths": "replays (`replay.window_lengths`)",
    "contract": "contractions (`transform.contract`)",
    "launch_when_ready": "collectives launched when ready (`transform.launch_when_ready`)",
    "find_straggler": "rule straggler, rest",
    "find_imbalance": "rule imbalance, rest",
    "find_input_stall": "rule input_stall, rest",
    "find_launch_bound": "rule launch_bound, rest",
    "find_no_overlap": "rule no_overlap, rest",
    "find_bucketing": "rule bucketing, rest",
    "find_link": "rule slow_link / link_underused, rest",
    "find_compression": "rule compression, rest",
    "find_exposed_dimension": "rule exposed_dimension, rest",
    "_verdict": "verdict, rest (the bandwidth that hides communication: its replays above)",
    "diagnose": "`diagnose`, rest",
}
BREAKDOWN_MODULES = (
    "timeline.analysis.collectives",
    "timeline.diagnosis.diagnosis",
    "timeline.diagnosis.parts",
    "timeline.diagnosis.replays",
    "timeline.whatif.graph",
    "timeline.whatif.engine",
    "timeline.whatif.transform",
    "timeline.run",
    "timeline.execution.reduce",
)


def child_breakdown(path: str, runs: int) -> int:
    """Analyse ``path`` as ``timeline analyze`` does; time its diagnosis cold, then warm by stage (JSON)."""
    import importlib

    from timeline.run import Inputs, Needs, Run

    analysed = Run(Inputs(paths=[path]), needs=Needs(graph=True)).read()
    start = time.process_time()
    _ = analysed.diagnosis
    cold = time.process_time() - start
    for name in BREAKDOWN_MODULES:
        importlib.import_module(name)
    totals, calls = time_stages(BREAKDOWN_STAGES, clock=time.process_time)
    warm = []
    for _ in range(runs):
        del analysed.__dict__["diagnosis"]  # the run's fact again, from its other facts (kept)
        start = time.process_time()
        _ = analysed.diagnosis
        warm.append(time.process_time() - start)
    result = {"cold_s": cold, "warm_s": warm, "stages_s": totals, "calls": calls, "runs": runs}
    print("BREAKDOWN " + json.dumps(result))
    return 0


def breakdown(cases: dict[str, list[str]], keys: list[str], env: dict[str, str], runs: int) -> str:
    """Return the Markdown tables of ``--breakdown``: per case, the diagnosis' stages (CPU ms, warm)."""
    import subprocess

    lines = ["", "### Where the diagnosis' time goes (CPU time of the process, `--breakdown`)", ""]
    for key in keys:
        path = cases[key][-1]
        command = [sys.executable, str(Path(__file__).resolve()), "--child-breakdown", path, str(runs)]
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False, cwd=REPO)
        line = next((x for x in done.stdout.splitlines() if x.startswith("BREAKDOWN ")), None)
        if line is None:
            lines += [f"{key}: failed: {done.stderr.strip().splitlines()[-1:]}", ""]
            continue
        result = json.loads(line.removeprefix("BREAKDOWN "))
        warm = statistics.median(result["warm_s"])
        lines += [
            f"**{key}** (`{path}`): diagnosis cold {result['cold_s'] * 1e3:.0f} ms (imports and first "
            f"use included), warm median {warm * 1e3:.0f} ms of {result['runs']}; stages, per diagnosis:",
            "",
            "| stage | ms | calls |",
            "|---|--:|--:|",
        ]
        stages = sorted(result["stages_s"].items(), key=lambda kv: -kv[1])
        for label, total in stages:
            n = result["calls"][label] / result["runs"]
            lines.append(f"| {label} | {total / result['runs'] * 1e3:.1f} | {n:g} |")
        timed = sum(result["stages_s"].values()) / result["runs"]
        lines += [f"| (not in a timed stage) | {max(0.0, warm - timed) * 1e3:.1f} | |", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child-breakdown"]:
        return child_breakdown(argv[1], int(argv[2]))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=5, help="measured runs of each side per case (default 5)")
    parser.add_argument("--cases", nargs="+", choices=ALL_CASES, default=list(ALL_CASES))
    parser.add_argument("--workdir", type=Path, default=REPO / "benchmarks" / "out" / "scale")
    parser.add_argument("--wait-quiet", type=float, default=0.0, metavar="CORES")
    parser.add_argument("--max-wait", type=float, default=120.0)
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--out", type=Path, help="rewrite the bench_findings section of this Markdown file")
    parser.add_argument("--json", type=Path, help="write every run as JSON")
    parser.add_argument("--breakdown", action="store_true", help="also print where the diagnosis' time goes")
    parser.add_argument("--breakdown-runs", type=int, default=5, help="warm diagnoses per case (default 5)")
    args = parser.parse_args(argv)
    args.argv = argv
    QUIET.update(cores=args.wait_quiet, max_wait_s=args.max_wait)
    load_before = os.getloadavg()[0]
    cases = _cases(args.workdir)
    with tempfile.TemporaryDirectory(prefix="bench-findings-pycache-") as pycache:
        env = timeline_env(child_env(Path(pycache)))
        if "r8" in args.cases:
            make_inputs([make_cases(args.workdir)["r8"]], args.workdir, _log)
        pairs = [run_pair(key, cases[key], env, args.runs, args.timeout) for key in args.cases]
        stages = breakdown(cases, args.cases, env, args.breakdown_runs) if args.breakdown else ""
    section = render(args, pairs, (load_before, os.getloadavg()[0]))
    print(section + stages)
    if args.out:
        write_section(args.out, section, start=MARK_START, end=MARK_END, heading=HEADING)
        _log(f"wrote {args.out}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"argv": argv, "pairs": [asdict(p) for p in pairs]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
