"""Scale benchmark: gigabyte traces and hundreds of ranks, timeline vs HTA, local vs Ray.

Generates its inputs from the real 54 MB ``hta_df_index_resolver`` trace (``benchmarks/generate.py``;
nothing big is committed), then measures, each run in a fresh process:

- ``single``: the 54 MB trace itself, load + overlap, timeline and HTA;
- ``r8``: 8 ranks of it (rank-rewritten copies, 8 × 54 MB of JSON), load + overlap: timeline rank by
  rank (what ``timeline analyze`` does with several large files), timeline in memory, HTA
  (``TraceAnalysis`` + ``get_comm_comp_overlap``); the three run in turn, round after round, so
  that a machine slowing down for a while slows all alike;
- ``big``: a generated 1 GB trace, load + overlap: timeline (in memory, chunks decoded in parallel)
  and HTA (with a time limit);
- ``r256``: 256 ranks of 10 MB: timeline's local executor, the Ray executor on a Ray instance it
  starts itself and on one already running (a driver joining an existing cluster), HTA;
- ``stages``: timeline's stages one by one on the 54 MB trace (read + gunzip, JSON decode, frame
  build, collective linking, iteration assignment, overlap): time, peak RSS, events per second;
- ``decode``: the JSON stage alone vs the JSON library's raw decode speed, same text, same run;
- ``curves``: time and peak memory vs trace size (54 MB, 250 MB, 500 MB, 1 GB) and vs rank count
  (1, 8, 32, 128, 256, 1,024 ranks of 10 MB), plotted to ``docs/img/scaling.png``;
- ``commands``: every analysing command as a user runs it (``timeline convert``, ``analyze``,
  ``check``, ``collectives``, ``whatif``), on one rank and on 1,024 ranks of 10 MB (JSON files and
  the Parquet dataset ``timeline convert`` makes of them): time and peak memory, one rank against
  1,024. Written to its own section of the Markdown file (``bench_ranks``), so it can run alone.

Peak memory is ``VmHWM`` of the measured process and ``ru_maxrss`` of its largest worker (Ray's
workers are not children of the driver: not measured). Every run also records the CPU time the
machine spent on other work meanwhile (``/proc/stat``), since a shared machine shows in wall times.

    python benchmarks/bench_scale.py --runs 3 --out docs/performance.md --json benchmarks/out/bench_scale.json

HTA runs in its own virtual environment (``benchmarks/.venv-hta``, see benchmarks/README.md) through
``benchmarks/hta_load.py``. Generated inputs go to ``--workdir`` (default ``benchmarks/out/scale``,
git-ignored; about 700 MB of gzip) and are deleted at the end unless ``--keep-inputs``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import gc
import hashlib
import importlib
import json
import multiprocessing
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.generate import DEFAULT_SOURCE, grow_trace, make_rank_set, read_json_bytes  # noqa: E402
from benchmarks.quiet import busy_cpu_s, versions, wait_quiet  # noqa: E402

MARK_START = "<!-- bench_scale:start -->"
MARK_END = "<!-- bench_scale:end -->"
RESULT_PREFIX = "BENCH_RESULT "
HTA_PYTHON = REPO / "benchmarks" / ".venv-hta" / "bin" / "python"
HTA_SCRIPT = REPO / "benchmarks" / "hta_load.py"
RANKS_START = "<!-- bench_ranks:start -->"
RANKS_END = "<!-- bench_ranks:end -->"
ALL_CASES = ("single", "r8", "big", "r256", "stages", "decode", "curves", "commands")
SIZES_MB = (250, 500, 1000)  # plus the 54 MB source itself
RANK_COUNTS = (1, 8, 32, 128, 256, 1024)
COMMAND_RANKS = (1, 1024)
RANK_MB = 10
# check's budgets in the commands case: the overlap and the collectives matched across ranks
CHECK_BUDGETS = """\
[[budgets]]
metric = "exposed_comm_ratio"
aggregate = "p90"
max = 0.99

[[budgets]]
metric = "collective_wait_ns"
aggregate = "max"
max = 100_000_000_000

[[budgets]]
metric = "iteration_busbw_gbps"
aggregate = "min"
min = 0.000001
"""

# Targets of the scale issue (this 2-core machine, medians).
TARGET_R8_S = 4.0
TARGET_R8_SPEEDUP = 10.0
TARGET_BIG_S = 15.0
TARGET_BIG_PEAK_GB = 1.5
TARGET_RAY_X = 1.3
TARGET_DECODE_X = 2.0


# --------------------------------------------------------------------------------------------------
# Children: each runs in a fresh process and prints one ``BENCH_RESULT {json}`` line.
# --------------------------------------------------------------------------------------------------


def _status_kib(field_name: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1])
    return 0


def _reset_peak() -> None:
    """Reset ``VmHWM`` to the current RSS (Linux: ``echo 5 > /proc/self/clear_refs``)."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def _cpu_s() -> float:
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


def _emit(result: dict[str, Any]) -> int:
    sys.stdout.write(RESULT_PREFIX + json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


def _digest(frames: Sequence[Any]) -> str:
    """A digest of the overlap frames, to check that two executors give the same numbers."""
    sha = hashlib.sha256()
    for frame in frames:
        sha.update(frame.write_csv().encode())
    return sha.hexdigest()[:16]


def child_analyze(paths: list[str], executor: str) -> int:
    """Load + overlap: ``memory`` (load, compute_overlap), ``local``/``ray``/``ray-auto`` (analyze_files)."""
    t0 = time.perf_counter()
    import timeline
    from timeline.execution import LocalExecutor, RayExecutor, analyze_files

    import_s = time.perf_counter() - t0
    rss_import = _status_kib("VmRSS")
    result: dict[str, Any] = {"tool": "timeline", "executor": executor, "import_s": import_s}
    if executor == "memory":
        t1 = time.perf_counter()
        trace = timeline.load(paths)
        t2 = time.perf_counter()
        overlap = timeline.compute_overlap(trace.events)
        t3 = time.perf_counter()
        result.update(load_s=t2 - t1, overlap_s=t3 - t2, total_s=t3 - t1, events=trace.events.height)
        ratios = overlap.ranks.select("rank", "hidden_comm_ratio").rows()
    else:
        if executor == "local":
            runner: Any = LocalExecutor()
        else:
            runner = RayExecutor("auto" if executor == "ray-auto" else None)
            t_init = time.perf_counter()
            runner._ray()  # start or join Ray here: reported apart, and counted in total_s
            result["init_s"] = time.perf_counter() - t_init
        t1 = time.perf_counter()
        analysis = analyze_files(paths, executor=runner)
        t2 = time.perf_counter()
        overlap = analysis.overlap
        result.update(
            total_s=t2 - t1 + result.get("init_s", 0.0),
            analyze_s=t2 - t1,
            events=int(analysis.files.get_column("events").sum()),
        )
        ratios = overlap.ranks.select("rank", "hidden_comm_ratio").rows()
    # the peak of the analysis, before the digest below (a CSV of every frame) adds its own
    rss_peak = _status_kib("VmHWM")
    # helper processes exit in the background once their results are in: reap them (after the
    # timed part) so that their CPU time and peak memory are counted
    for child in multiprocessing.active_children():
        child.join()
    result.update(
        ranks=overlap.ranks.height,
        digest=_digest([overlap.ranks, overlap.iterations, overlap.collectives, overlap.windows]),
        hidden_ratio={str(r): v for r, v in ratios},
        rss_import_kib=rss_import,
        rss_peak_kib=rss_peak,
        rss_workers_kib=int(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss),
        cpu_s=_cpu_s(),
    )
    return _emit(result)


def child_stages(path: str) -> int:
    """Time and peak RSS of each stage of loading and analysing one trace, in this process."""
    import polars as pl

    from timeline.analysis import iterations as it
    from timeline.analysis import overlap as ov
    from timeline.importers import files, kineto
    from timeline.importers.result import ImportOptions

    stages: dict[str, dict[str, float]] = {}

    @contextlib.contextmanager
    def stage(name: str) -> Iterator[None]:
        _reset_peak()
        start = time.perf_counter()
        yield
        stages[name] = {"s": time.perf_counter() - start, "peak_kib": _status_kib("VmHWM")}

    warnings: list[str] = []
    with stage("read + gunzip"):
        data = files.read_trace_bytes(Path(path), warnings)
    gc.disable()
    with stage("JSON decode (msgspec, into structs)"):
        doc = kineto._decode(data, path, warnings)
    raw_events = len(doc.traceEvents or [])
    with stage("frame build (columns, classification)"):
        frame, dropped, meta = kineto.build_frame(doc.traceEvents or [], ImportOptions())
    del doc, data
    gc.enable()
    gc.collect()
    with stage("collective linking + schema"):
        result = kineto.finish_kineto(
            frame, dropped, {"distributedInfo": {"rank": 0}}, source=path, warnings=[], meta=meta
        )
    del frame, meta
    events = result.events.with_columns(pl.col("rank").fill_null(0)).sort(
        "rank", "start_ns", maintain_order=True
    )
    with stage("activity sets (shared by the views)"):
        modes = it.rank_modes(events)
        sets = it.activity_sets(events, modes)
    with stage("iteration assignment"):
        windows = it._assign_iterations(events, modes, sets)
    with stage("overlap (one sweep; rank, iteration, collective views)"):
        bounds = ov._sweep(sets, windows)
        ov._rank_overlap(modes, sets, bounds)
        ov._iteration_overlap(modes, windows, bounds)
        ov._collective_exposure(events, modes, sets, windows, bounds)
    return _emit({"tool": "stages", "stages": stages, "events": events.height, "raw_events": raw_events})


def child_decode(path: str) -> int:
    """The JSON stage alone vs msgspec's raw decode, on the same decompressed text, GC off."""
    import msgspec

    from timeline.importers import kineto

    data = read_json_bytes(Path(path))
    times: dict[str, list[float]] = {"raw": [], "stage": []}
    gc.disable()
    for _ in range(3):
        start = time.perf_counter()
        decoded = msgspec.json.decode(data)
        times["raw"].append(time.perf_counter() - start)
        del decoded
        start = time.perf_counter()
        doc = kineto._DECODER.decode(data)
        times["stage"].append(time.perf_counter() - start)
        del doc
    gc.enable()
    return _emit(
        {
            "tool": "decode",
            "bytes": len(data),
            "raw_s": min(times["raw"]),
            "stage_s": min(times["stage"]),
            "msgspec": metadata.version("msgspec"),
        }
    )


def child_command(args: list[str]) -> int:
    """One ``timeline`` command, in this process, its output thrown away: time, peak RSS, exit code."""
    t0 = time.perf_counter()
    from cli.main import app

    import_s = time.perf_counter() - t0
    rss_import = _status_kib("VmRSS")
    t1 = time.perf_counter()
    with Path(os.devnull).open("w") as sink, contextlib.redirect_stdout(sink):
        try:
            code = app(args, standalone_mode=False)
        except SystemExit as exc:  # pragma: no cover - typer's own exits
            code = exc.code
    total = time.perf_counter() - t1
    for child in multiprocessing.active_children():
        child.join()
    return _emit(
        {
            "tool": "timeline",
            "command": args[0],
            "exit_code": int(code or 0),
            "import_s": import_s,
            "total_s": total,
            "rss_import_kib": rss_import,
            "rss_peak_kib": _status_kib("VmHWM"),
            "rss_workers_kib": int(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss),
            "cpu_s": _cpu_s(),
        }
    )


def run_child(argv: list[str]) -> int:
    kind = argv[0]
    if kind == "analyze":
        return child_analyze(argv[2:], executor=argv[1])
    if kind == "command":
        return child_command(argv[1:])
    if kind == "stages":
        return child_stages(argv[1])
    if kind == "decode":
        return child_decode(argv[1])
    raise SystemExit(f"unknown child {kind}")


# --------------------------------------------------------------------------------------------------
# The parent: inputs, runs, statistics, the Markdown section and the plot.
# --------------------------------------------------------------------------------------------------


@dataclass
class Run:
    """One measured process: its result, wall time, and the CPU others took meanwhile."""

    result: dict[str, Any] | None
    wall_s: float
    others_cores: float
    error: str | None = None


QUIET = {"cores": 0.0, "max_wait_s": 0.0}  # --wait-quiet: wait for other work to stop before each run


def _limit_memory(gib: float) -> Callable[[], None]:
    """Return a ``preexec_fn`` capping the child's address space (its forked workers inherit it)."""

    def limit() -> None:
        cap = int(gib * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    return limit


def _measure(
    command: list[str], *, timeout: float, env: dict[str, str] | None = None, memory_gib: float | None = None
) -> Run:
    wait_quiet(QUIET["cores"], QUIET["max_wait_s"], interval_s=1.0)
    busy0, own0, start = busy_cpu_s(), _cpu_s(), time.perf_counter()
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            check=False,
            preexec_fn=None if memory_gib is None else _limit_memory(memory_gib),
        )
    except subprocess.TimeoutExpired:
        return Run(None, time.perf_counter() - start, 0.0, f"did not finish in {timeout:.0f} s")
    wall = time.perf_counter() - start
    others = max(0.0, (busy_cpu_s() - busy0) - (_cpu_s() - own0)) / wall
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith(RESULT_PREFIX)), None)
    if done.returncode != 0 or line is None:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        text = done.stderr + done.stdout
        memory = any(m in text for m in ("MemoryError", "Killed", "Cannot allocate", "std::bad_alloc"))
        memory = memory or done.returncode in (-9, 137)
        what = "out of memory" + (f" (address space capped at {memory_gib:g} GiB)" if memory_gib else "")
        return Run(None, wall, others, what if memory else f"failed: {' | '.join(tail)[:300]}")
    return Run(json.loads(line[len(RESULT_PREFIX) :]), wall, others)


@dataclass
class Series:
    """Runs of one tool on one input."""

    label: str
    runs: list[Run] = field(default_factory=list)

    def ok(self) -> list[dict[str, Any]]:
        return [r.result for r in self.runs if r.result is not None]

    def median(self, key: str) -> float | None:
        values = [float(r[key]) for r in self.ok() if r.get(key) is not None]
        return statistics.median(values) if values else None

    def error(self) -> str | None:
        return next((r.error for r in self.runs if r.error), None)

    def others(self) -> float:
        return statistics.median([r.others_cores for r in self.runs]) if self.runs else 0.0


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.work = Path(args.workdir)
        self.results: dict[str, Any] = {}
        self.hta = HTA_PYTHON.exists() and not args.no_hta

    # inputs ---------------------------------------------------------------------------------------
    def inputs(self) -> dict[str, Any]:
        self.work.mkdir(parents=True, exist_ok=True)
        made: dict[str, Any] = {"single": DEFAULT_SOURCE}
        started = time.perf_counter()
        cases = set(self.args.cases)
        if cases & {"r8"}:
            made["r8"] = self.work / "r8"
            if not made["r8"].exists():
                make_rank_set(DEFAULT_SOURCE, made["r8"], ranks=8)
        sizes = [mb for mb in SIZES_MB if ("curves" in cases) or (mb == 1000 and "big" in cases)]
        for mb in sizes:
            path = self.work / f"grown-{mb}MB.json.gz"
            if not path.exists():
                grow_trace(DEFAULT_SOURCE, path, target_bytes=mb * 10**6, seed=mb)
            made[f"size{mb}"] = path
        counts = [
            n
            for n in RANK_COUNTS
            if "curves" in cases
            or (n == 256 and "r256" in cases)
            or (n in COMMAND_RANKS and "commands" in cases)
        ]
        for n in counts:
            folder = self.work / f"r{n}x{RANK_MB}MB"
            if not folder.exists():
                make_rank_set(DEFAULT_SOURCE, folder, ranks=n, target_bytes=RANK_MB * 10**6, seed=n)
            made[f"ranks{n}"] = folder
        self.results["generate_s"] = time.perf_counter() - started
        return made

    # runners --------------------------------------------------------------------------------------
    def timeline(self, label: str, paths: Sequence[Path], executor: str, runs: int) -> Series:
        series = Series(label)
        for i in range(runs):
            run = self.timeline_run(paths, executor)
            series.runs.append(run)
            self.log(f"{label}: run {i + 1}/{runs}: {_describe(run)}")
        return series

    def hta_series(self, label: str, path: Path, runs: int, timeout: float | None = None) -> Series:
        if not self.hta:
            return Series(label)
        return self.alternate([(label, lambda: self.hta_run(path, timeout))], runs)[0]

    def hta_run(self, path: Path, timeout: float | None = None) -> Run:
        command = [str(HTA_PYTHON), str(HTA_SCRIPT), str(path), "--overlap"]
        run = _measure(command, timeout=timeout or self.args.hta_timeout, memory_gib=self.args.hta_memory_gb)
        if run.result is not None:
            run.result["total_s"] = run.result["load_s"] + run.result.get("overlap_s", 0.0)
            run.result["rss_peak_kib"] = run.result.get("rss_overlap_kib", run.result["rss_load_kib"])
            run.result["rss_workers_kib"] = run.result.get("rss_children_kib", 0)
        return run

    def alternate(self, jobs: Sequence[tuple[str, Callable[[], Run]]], runs: int) -> list[Series]:
        """Run the jobs in turn, ``runs`` rounds: a machine that slows down for a while slows all alike."""
        out = [Series(label) for label, _ in jobs]
        for i in range(runs):
            for series, (label, job) in zip(out, jobs, strict=True):
                if series.runs and series.runs[-1].result is None:
                    continue  # a timeout or an OOM does not get better by trying again
                run = job()
                series.runs.append(run)
                self.log(f"{label}: run {i + 1}/{runs}: {_describe(run)}")
        return out

    def timeline_run(self, paths: Sequence[Path], executor: str) -> Run:
        command = [sys.executable, __file__, "--child", "analyze", executor, *map(str, paths)]
        return _measure(command, timeout=self.args.timeout)

    def log(self, text: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)

    # cases ----------------------------------------------------------------------------------------
    def run(self) -> None:
        made = self.inputs()
        runs = self.args.runs
        cases = self.args.cases
        out = self.results
        out["load_before"] = os.getloadavg()[0]
        if "single" in cases:
            out["single"] = [
                self.timeline("timeline (in memory)", [made["single"]], "memory", runs),
                self.hta_series("HTA", made["single"], runs),
            ]
        if "r8" in cases:
            folder = made["r8"]
            # in turn, round after round: the ratio to HTA is the target
            jobs: list[tuple[str, Callable[[], Run]]] = [
                ("timeline (rank by rank, local processes)", lambda: self.timeline_run([folder], "local")),
                ("timeline (in memory)", lambda: self.timeline_run([folder], "memory")),
            ]
            if self.hta:
                jobs.append(("HTA", lambda: self.hta_run(folder)))
            out["r8"] = self.alternate(jobs, runs)
        if "big" in cases:
            out["big"] = [
                # what `timeline analyze BIG` does: one unit, chunks decoded in parallel, overlap events kept
                self.timeline(
                    "timeline analyze (parallel chunks, overlap events)", [made["size1000"]], "local", runs
                ),
                self.timeline(
                    "timeline load + compute_overlap (every event kept)", [made["size1000"]], "memory", runs
                ),
                self.hta_series("HTA", made["size1000"], 1),
            ]
        if "r256" in cases:
            folder = made["ranks256"]
            series = [self.timeline("timeline, local executor", [folder], "local", runs)]
            if importlib.util.find_spec("ray") is not None and not self.args.no_ray:
                series.append(self.timeline("timeline, Ray (starts a local instance)", [folder], "ray", runs))
                series.append(self.ray_running(folder, runs))
            series.append(self.hta_series("HTA", folder, 1))
            out["r256"] = series
        if "stages" in cases:
            out["stages"] = self.once(
                [sys.executable, __file__, "--child", "stages", str(DEFAULT_SOURCE)], runs
            )
        if "decode" in cases:
            out["decode"] = self.once(
                [sys.executable, __file__, "--child", "decode", str(DEFAULT_SOURCE)], runs
            )
        if "curves" in cases:
            sizes = [("54", made["single"])] + [(str(mb), made[f"size{mb}"]) for mb in SIZES_MB]
            out["curve_size"] = [(mb, self.timeline(f"{mb} MB", [p], "local", runs)) for mb, p in sizes]
            out["curve_ranks"] = [
                (n, self.timeline(f"{n} ranks", [made[f"ranks{n}"]], "local", runs)) for n in RANK_COUNTS
            ]
        if "commands" in cases:
            out["commands"] = self.commands(made, runs)
        out["load_after"] = os.getloadavg()[0]

    def commands(self, made: dict[str, Any], runs: int) -> list[tuple[str, str, int, Series]]:
        """Every analysing command as a user runs it, on one rank and on 1,024 (files, then dataset)."""
        budget = self.work / "timeline.toml"
        budget.write_text(CHECK_BUDGETS)
        rows: list[tuple[str, str, int, Series]] = []
        for n in COMMAND_RANKS:
            files = made[f"ranks{n}"]
            dataset = self.work / f"d{n}x{RANK_MB}MB"
            jobs: list[tuple[str, str, list[str]]] = [
                (
                    "timeline convert --partition-by-rank",
                    "JSON files",
                    ["convert", str(files), "-o", str(dataset), "--force"],
                ),
                ("timeline analyze", "JSON files", ["analyze", str(files), "--json"]),
                ("timeline analyze", "dataset", ["analyze", str(dataset), "--json"]),
                (
                    "timeline check (overlap and matched-collective budgets)",
                    "dataset",
                    ["check", str(dataset), "--budget", str(budget)],
                ),
                ("timeline collectives", "dataset", ["collectives", str(dataset)]),
                ("timeline whatif", "dataset", ["whatif", str(dataset)]),
            ]
            for label, kind, args in jobs:
                series = Series(f"{label} ({n} ranks, {kind})")
                command = [sys.executable, __file__, "--child", "command", *args]
                for i in range(runs):
                    run = _measure(command, timeout=self.args.timeout)
                    series.runs.append(run)
                    self.log(f"{series.label}: run {i + 1}/{runs}: {_describe(run)}")
                rows.append((label, kind, n, series))
        return rows

    def ray_running(self, folder: Path, runs: int) -> Series:
        """The Ray executor joining a Ray instance that is already running (started here, stopped after)."""
        import ray

        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
        try:
            address = ray.get_runtime_context().gcs_address
            env = {**os.environ, "RAY_ADDRESS": address}
            series = Series("timeline, Ray (joins a running instance)")
            command = [sys.executable, __file__, "--child", "analyze", "ray-auto", str(folder)]
            for i in range(runs):
                run = _measure(command, timeout=self.args.timeout, env=env)
                series.runs.append(run)
                self.log(f"{series.label}: run {i + 1}/{runs}: {_describe(run)}")
            return series
        finally:
            ray.shutdown()

    def once(self, command: list[str], runs: int) -> list[dict[str, Any]]:
        results = []
        for _ in range(runs):
            run = _measure(command, timeout=self.args.timeout)
            if run.result is not None:
                results.append(run.result)
            else:
                self.log(f"{command[3]}: {run.error}")
        return results


def _describe(run: Run) -> str:
    if run.result is None:
        return run.error or "failed"
    r = run.result
    return (
        f"{r['total_s']:.2f} s, peak {r.get('rss_peak_kib', 0) / 1024:.0f} MB"
        f" (workers {r.get('rss_workers_kib', 0) / 1024:.0f} MB), others {run.others_cores:.2f} cores"
    )


# --------------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------------


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _mb(kib: float | None) -> str:
    return "-" if kib is None else f"{kib / 1024:,.0f}"


def _row(series: Series, baseline: Series | None = None) -> str:
    total = series.median("total_s")
    if total is None:
        return f"| {series.label} | {series.error() or 'not run'} | - | - | - | - | - | - | - |"
    events = series.median("events")
    base = None if baseline is None else baseline.median("total_s")
    speed = "" if base is None else f"{base / total:.1f}×"
    totals = [r["total_s"] for r in series.ok()]
    return (
        f"| {series.label} | {_fmt(total)} | {_fmt(min(totals))} | {len(totals)} | {speed} "
        f"| {_mb(series.median('rss_peak_kib'))} | {_mb(series.median('rss_workers_kib'))} "
        f"| {_fmt(events / total / 1e6 if events else None)} | {series.others():.2f} |"
    )


_HEADER = (
    "| tool | load + overlap, median (s) | min (s) | runs | faster than HTA | peak RSS (MB) "
    "| largest worker (MB) | M events/s | others' CPU (cores) |\n|---|--:|--:|--:|--:|--:|--:|--:|--:|"
)


def machine_facts() -> tuple[str, int]:
    """Return this machine's CPU model name and its memory in KiB (``/proc``)."""
    cpu = next(
        (
            ln.split(":", 1)[1].strip()
            for ln in Path("/proc/cpuinfo").read_text().splitlines()
            if ln.startswith("model name")
        ),
        "unknown",
    )
    mem_kib = next(
        int(ln.split()[1])
        for ln in Path("/proc/meminfo").read_text().splitlines()
        if ln.startswith("MemTotal")
    )
    return cpu, mem_kib


def render(bench: Bench) -> str:
    args, out = bench.args, bench.results
    lines: list[str] = [MARK_START, ""]
    cpu, mem = machine_facts()

    hta_version = "not run"
    for key in ("single", "r8", "big", "r256"):
        for series in out.get(key, []):
            if series.label == "HTA" and series.ok():
                hta_version = series.ok()[0].get("version", hta_version)
    lines += [
        f"- date: {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- machine: {len(os.sched_getaffinity(0))} cores (nproc), {cpu}, {mem / 1024**2:.1f} GiB RAM, "
        f"{platform.system()} {platform.release()}",
        f"- load average (1 min) before / after: {out.get('load_before', 0):.2f} / "
        f"{out.get('load_after', 0):.2f}; "
        "the last column of each table is the CPU other processes used during the runs (median, in cores of "
        "the 2): it slows every wall time here",
        f"- Python {platform.python_version()}, {versions('timeline', 'polars', 'msgspec', 'isal', 'ray')}; "
        f"HTA {hta_version}",
        f"- command: `python benchmarks/bench_scale.py {' '.join(args.argv)}` "
        f"({args.runs} runs per timeline case, "
        f"HTA once on the 1 GB and 256-rank inputs); inputs generated in {out.get('generate_s', 0):.0f} s",
        "",
        "Times are wall-clock medians of fresh processes (imports excluded, reading and gunzipping "
        "included). "
        "Peak RSS is the measured process's `VmHWM`; the largest worker is `ru_maxrss` of its largest child "
        "process (timeline's worker processes, HTA's forked parsers; Ray's workers are not the driver's "
        "children and are not measured). M events/s: events of the canonical frame (HTA: rows of its frames) "
        "per second of load + overlap.",
        "",
    ]
    sections = [
        ("single", "The 54 MB trace (`df_index_resolver.json.gz`), load + overlap", -1),
        ("r8", "8 ranks of the 54 MB trace (rank-rewritten copies, 430 MB of JSON), load + overlap", -1),
        ("big", "A generated 1 GB trace (4.6 M raw events, 100 MB gzipped), load + overlap", -1),
        ("r256", "256 ranks of 10 MB (2.56 GB of JSON), load + overlap", -1),
    ]
    for key, title, _ in sections:
        if key not in out:
            continue
        series_list: list[Series] = out[key]
        hta = next((s for s in series_list if s.label == "HTA"), None)
        lines += [f"**{title}**", "", _HEADER]
        for series in series_list:
            lines.append(_row(series, hta if series.label != "HTA" else None))
        if key == "r256":
            digests = {s.label: {r.get("digest") for r in s.ok()} for s in series_list if s.label != "HTA"}
            inits = [s.median("init_s") for s in series_list if s.median("init_s") is not None]
            same = len({d for ds in digests.values() for d in ds}) == 1
            lines += [
                "",
                "Same numbers on every executor (digest of the four overlap frames): "
                f"**{'yes' if same else 'NO'}**"
                f" ({', '.join(sorted({d for ds in digests.values() for d in ds if d}))}). "
                + (
                    f"Ray start-up or connection inside those times: {', '.join(_fmt(i) for i in inits)} s."
                    if inits
                    else ""
                ),
            ]
        lines.append("")
    if out.get("stages"):
        lines += stage_lines(out["stages"])
    if out.get("decode"):
        lines += decode_lines(out["decode"])
    if "curve_size" in out:
        lines += curve_lines(out)
    lines += verdict_lines(out)
    lines += ["", MARK_END]
    return "\n".join(lines)


def render_commands(bench: Bench) -> str:
    """The ``bench_ranks`` section: every command on one rank and on 1,024."""
    out = bench.results
    rows: list[tuple[str, str, int, Series]] = out["commands"]
    lines = [
        RANKS_START,
        "",
        f"- date: {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}; machine and versions as above",
        f"- command: `python benchmarks/bench_scale.py {' '.join(bench.args.argv)}` ({bench.args.runs} runs "
        "each, fresh processes; each command runs the CLI in the measured process, output discarded)",
        "",
        f"Ranks of {RANK_MB} MB of JSON (the 54 MB trace cut to {RANK_MB} MB: 26,643 events, 404 all-reduce "
        "kernels per rank), as JSON files and as the dataset `timeline convert` makes of them. Peak RSS: "
        "the process you run (it takes tasks too); largest worker: its largest worker process.",
        "",
        "| command | input | 1 rank: median (s) | peak RSS (MB) | 1,024 ranks: median (s) | peak RSS (MB) "
        "| largest worker (MB) | peak, 1,024 ranks / 1 rank | others' CPU (cores) |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    by_key = {(label, kind, n): series for label, kind, n, series in rows}
    for label, kind, n, _ in rows:
        if n != COMMAND_RANKS[0]:
            continue
        one, many = by_key[(label, kind, COMMAND_RANKS[0])], by_key.get((label, kind, COMMAND_RANKS[-1]))
        if many is None:
            continue
        p1, pn = one.median("rss_peak_kib"), many.median("rss_peak_kib")
        ratio = f"{pn / p1:.2f}×" if p1 and pn else "-"
        if many.median("total_s") is None:
            cells = f"{many.error() or 'failed'} | - | - | -"
        else:
            worker = _mb(many.median("rss_workers_kib"))
            cells = f"{_fmt(many.median('total_s'))} | {_mb(pn)} | {worker} | {ratio}"
        first = f"| {label} | {kind} | {_fmt(one.median('total_s'))} | {_mb(p1)}"
        lines.append(f"{first} | {cells} | {many.others():.2f} |")
    return "\n".join([*lines, "", RANKS_END])


def stage_lines(results: list[dict[str, Any]]) -> list[str]:
    names = list(results[0]["stages"])
    events = results[0]["events"]
    lines = [
        f"**Stages** on the 54 MB trace ({results[0]['raw_events']:,} raw events, {events:,} in the frame), "
        f"one by one in one process, medians of {len(results)}:",
        "",
        "| stage | time (ms) | events/s (M) | peak RSS during the stage (MB) |",
        "|---|--:|--:|--:|",
    ]
    for name in names:
        s = statistics.median(r["stages"][name]["s"] for r in results)
        peak = statistics.median(r["stages"][name]["peak_kib"] for r in results)
        lines.append(f"| {name} | {s * 1000:.0f} | {events / s / 1e6:.1f} | {peak / 1024:.0f} |")
    total = sum(statistics.median(r["stages"][n]["s"] for r in results) for n in names)
    lines += [f"| **total** | **{total * 1000:.0f}** | {events / total / 1e6:.2f} | |", ""]
    return lines


def decode_lines(results: list[dict[str, Any]]) -> list[str]:
    mb = results[0]["bytes"] / 1e6
    raw = statistics.median(r["raw_s"] for r in results)
    stage = statistics.median(r["stage_s"] for r in results)
    return [
        f"**The JSON stage vs the JSON library** (msgspec {results[0]['msgspec']}, the 54 MB trace's "
        f"{mb:.1f} MB of text, GC off, best of 3 in each of {len(results)} processes, median):",
        "",
        "| decode | time (ms) | MB/s |",
        "|---|--:|--:|",
        f"| msgspec, raw (`msgspec.json.decode`, generic Python objects) | {raw * 1000:.0f} "
        f"| {mb / raw:.0f} |",
        f"| timeline's JSON stage (msgspec into slotted structs, unneeded keys skipped) | {stage * 1000:.0f} "
        f"| {mb / stage:.0f} |",
        "",
    ]


def curve_lines(out: dict[str, Any]) -> list[str]:
    lines = [
        "**Scaling** (plotted in [img/scaling.png](img/scaling.png)): time and peak RSS vs trace size (one "
        "trace, what `timeline analyze` does with it) and vs rank count (10 MB ranks, local executor):",
        "",
        "| input | load + overlap, median (s) | peak RSS (MB) | largest worker (MB) | others' CPU (cores) |",
        "|---|--:|--:|--:|--:|",
    ]
    for mb, series in out["curve_size"]:
        lines.append(
            f"| {mb} MB | {_fmt(series.median('total_s'))} | {_mb(series.median('rss_peak_kib'))} "
            f"| {_mb(series.median('rss_workers_kib'))} | {series.others():.2f} |"
        )
    for n, series in out["curve_ranks"]:
        lines.append(
            f"| {n} ranks × {RANK_MB} MB | {_fmt(series.median('total_s'))} "
            f"| {_mb(series.median('rss_peak_kib'))} "
            f"| {_mb(series.median('rss_workers_kib'))} | {series.others():.2f} |"
        )
    return [*lines, ""]


def _verdict(ok: bool | None) -> str:
    return "not measured" if ok is None else ("**met**" if ok else "**not met**")


def verdict_lines(out: dict[str, Any]) -> list[str]:
    lines = ["Targets:", ""]
    if "r8" in out:
        ours, hta = out["r8"][0], (out["r8"][2] if len(out["r8"]) > 2 else None)
        t = ours.median("total_s")
        h = None if hta is None else hta.median("total_s")
        lines.append(
            f"- 8 × 54 MB, load + overlap under {TARGET_R8_S:.0f} s: {_fmt(t)} s: "
            f"{_verdict(None if t is None else t < TARGET_R8_S)}; "
            f"at least {TARGET_R8_SPEEDUP:.0f}× faster than HTA: "
            + (
                "HTA not run"
                if h is None or t is None
                else f"{h / t:.2f}× ({_fmt(h)} s): {_verdict(h / t >= TARGET_R8_SPEEDUP)}"
            )
        )
    if "big" in out:
        ours = out["big"][0]
        t, peak = ours.median("total_s"), ours.median("rss_peak_kib")
        worker = ours.median("rss_workers_kib")
        lines.append(
            f"- 1 GB trace, load + overlap under {TARGET_BIG_S:.0f} s: {_fmt(t)} s: "
            f"{_verdict(None if t is None else t < TARGET_BIG_S)}; "
            f"peak under {TARGET_BIG_PEAK_GB} GB: {_fmt(None if peak is None else peak / 1024**2)} GB "
            f"(+ {_fmt(None if worker is None else worker / 1024**2)} GB in each decoding worker, "
            "which exit before the analysis): "
            f"{_verdict(None if peak is None else peak / 1024**2 < TARGET_BIG_PEAK_GB)}"
        )
    if "r256" in out and len(out["r256"]) > 2:
        local, ray_start, ray_join = out["r256"][0], out["r256"][1], out["r256"][2]
        lt = local.median("total_s")
        for series in (ray_start, ray_join):
            rt = series.median("total_s")
            ratio = None if lt is None or rt is None else rt / lt
            lines.append(
                f"- 256 × 10 MB, {series.label} within {TARGET_RAY_X}× the local executor: "
                f"{_fmt(rt)} s vs {_fmt(lt)} s = {_fmt(ratio)}×: "
                f"{_verdict(None if ratio is None else ratio <= TARGET_RAY_X)}"
            )
    if out.get("decode"):
        raw = statistics.median(r["raw_s"] for r in out["decode"])
        stage = statistics.median(r["stage_s"] for r in out["decode"])
        lines.append(
            f"- JSON stage within {TARGET_DECODE_X:.0f}× of the library's raw decode speed: "
            f"{raw / stage:.2f}× its speed: {_verdict(stage <= TARGET_DECODE_X * raw)}"
        )
    return lines


def plot(bench: Bench, target: Path) -> None:
    try:
        plt = importlib.import_module("matplotlib.pyplot")
        importlib.import_module("matplotlib").use("Agg")
    except ImportError:
        bench.log("no matplotlib: no plot (pip install matplotlib; a benchmark-only dependency)")
        return
    out = bench.results
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, key, xlabel in (
        (axes[0], "curve_size", "trace size (MB of JSON)"),
        (axes[1], "curve_ranks", "ranks (10 MB each)"),
    ):
        xs = [float(x) for x, _ in out[key]]
        times = [s.median("total_s") for _, s in out[key]]
        peaks = [(s.median("rss_peak_kib") or 0) / 1024 for _, s in out[key]]
        ax.plot(xs, times, "o-", color="tab:blue", label="timeline: load + overlap (s)")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("seconds", color="tab:blue")
        ax.set_xscale("log")
        ax.set_xticks(xs, [f"{x:g}" for x in xs])
        twin = ax.twinx()
        twin.plot(xs, peaks, "s--", color="tab:orange", label="timeline: peak RSS (MB)")
        twin.set_ylabel("peak RSS of the main process (MB)", color="tab:orange")
        twin.set_ylim(bottom=0)  # from zero: how much more memory many ranks take, to scale
        hta_points: list[tuple[float, float]] = []
        if key == "curve_size":
            sources = [(54.0, out.get("single", [])), (1000.0, out.get("big", []))]
        else:
            sources = [(256.0, out.get("r256", []))]
        for x, series_list in sources:
            for series in series_list:
                t = series.median("total_s") if series.label == "HTA" else None
                if t is not None:
                    hta_points.append((x, t))
        if hta_points:
            ax.plot(
                *zip(*hta_points, strict=True),
                "x",
                color="tab:red",
                markersize=10,
                label="HTA: load + overlap (s)",
            )
        ax.set_yscale("log")
        ax.set_zorder(twin.get_zorder() + 1)  # times (and HTA's marks) drawn over the memory line
        ax.patch.set_visible(False)
        ax.grid(alpha=0.3)
        handles = ax.get_legend_handles_labels()[0] + twin.get_legend_handles_labels()[0]
        ax.legend(handles=handles, loc="upper left", fontsize=8)
    axes[0].set_title("one trace (timeline analyze)")
    axes[1].set_title("many ranks, rank by rank (local executor)")
    fig.suptitle(f"timeline scaling on {len(os.sched_getaffinity(0))} cores", fontsize=11)
    fig.tight_layout()
    target.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(target, dpi=110)
    bench.log(f"wrote {target}")


def write_section(
    path: Path,
    section: str,
    *,
    start: str = MARK_START,
    end: str = MARK_END,
    heading: str = "## Scale: large traces, many ranks, Ray",
) -> None:
    """Replace the text between ``start`` and ``end`` in ``path`` (append it under ``heading`` if absent)."""
    text = path.read_text() if path.exists() else ""
    if start in text and end in text:
        head, rest = text.split(start, 1)
        tail = rest.split(end, 1)[1]
        text = head + section + tail
    else:
        text = text.rstrip("\n") + f"\n\n{heading}\n\n" + section + "\n"
    path.write_text(text)


def _from_json(value: Any) -> Any:
    """Invert :func:`_jsonable` for the results a plot reads (series and their runs)."""
    if isinstance(value, dict) and set(value) == {"label", "runs"}:
        return Series(value["label"], [Run(**r) for r in value["runs"]])
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    if isinstance(value, dict):
        return {k: _from_json(v) for k, v in value.items()}
    return value


def _jsonable(value: Any) -> Any:
    if isinstance(value, Series):
        return {"label": value.label, "runs": [r.__dict__ for r in value.runs]}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, Path):
        return str(value)
    return value


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return run_child(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cases", nargs="+", choices=ALL_CASES, default=list(ALL_CASES))
    parser.add_argument("--workdir", default=str(REPO / "benchmarks" / "out" / "scale"))
    parser.add_argument("--keep-inputs", action="store_true", help="keep the generated traces")
    parser.add_argument("--out", type=Path, help="rewrite the bench_scale section of this Markdown file")
    parser.add_argument("--json", type=Path, help="write every run as JSON")
    parser.add_argument("--plot", type=Path, default=REPO / "docs" / "img" / "scaling.png")
    parser.add_argument("--no-hta", action="store_true")
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--timeout", type=float, default=600, help="per timeline run, seconds")
    parser.add_argument("--hta-timeout", type=float, default=900, help="per HTA run, seconds")
    parser.add_argument(
        "--hta-memory-gb",
        type=float,
        default=12.0,
        help="cap on HTA's address space (this machine is shared)",
    )
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=0.0,
        metavar="CORES",
        help="before each run, wait until other processes use less than CORES cores (at most --max-wait s)",
    )
    parser.add_argument("--max-wait", type=float, default=120.0)
    parser.add_argument("--replot", type=Path, metavar="JSON", help="only redraw --plot from a --json file")
    args = parser.parse_args(argv)
    if args.replot:
        replotted = Bench.__new__(Bench)
        replotted.results = _from_json(json.loads(args.replot.read_text()))
        replotted.log = lambda text: print(text)  # type: ignore[method-assign]
        plot(replotted, args.plot)
        return 0
    QUIET.update(cores=args.wait_quiet, max_wait_s=args.max_wait)
    args.argv = argv
    bench = Bench(args)
    try:
        bench.run()
    finally:
        if not args.keep_inputs:
            shutil.rmtree(bench.work, ignore_errors=True)
    scale_cases = set(args.cases) - {"commands"}
    section = render(bench) if scale_cases else None
    ranks_section = render_commands(bench) if "commands" in bench.results else None
    for text in (section, ranks_section):
        if text is not None:
            print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(_jsonable(bench.results), indent=1))
    if "curve_size" in bench.results:
        plot(bench, args.plot)
    if args.out:
        if section is not None:
            write_section(args.out, section)
        if ranks_section is not None:
            write_section(
                args.out,
                ranks_section,
                start=RANKS_START,
                end=RANKS_END,
                heading="## Many ranks: every command on 1 rank and on 1,024",
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
