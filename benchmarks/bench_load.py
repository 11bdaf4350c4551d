"""Load time and peak memory of timeline vs Holistic Trace Analysis (HTA) on the same traces.

Usage::

    python benchmarks/bench_load.py [--runs 5] [--out docs/performance.md] \\
        [--json benchmarks/out/bench_load.json]

Cases:

- (a) the 54 MB HTA test trace (``hta_df_index_resolver``, one rank), load only;
- (b) the same trace, load + overlap analysis;
- (c) the PARAM DLRM 8-rank set, load + overlap analysis.

Every measurement runs in a fresh process, so that its peak RSS (``VmHWM``) is its own and no
cache survives from one run to the next. timeline runs in this interpreter's environment
(``timeline.trace.load`` timed around the call, then ``timeline.compute_overlap``); HTA runs in its
own virtual environment (``benchmarks/.venv-hta``, see ``benchmarks/hta_load.py``:
``TraceAnalysis(trace_dir=...)``, then ``get_comm_comp_overlap``). The timed load includes reading
and gunzipping the files (what a user waits for) but not interpreter start-up or imports, which are
reported apart. timeline and HTA runs alternate (ABBA order) so that machine noise hits both alike;
one untimed warm-up run of each puts the files in the page cache first.

In the same run the script also measures what the JSON stack itself costs on each input (gunzip with
ISA-L and with zlib, ``msgspec.json.decode`` into generic Python objects) and where timeline's load
time goes: ``load`` runs with the functions of its import path (gunzip, decoding into structs,
``build_frame``, ``_attach_collectives``, schema validation, ...: :data:`STAGES`) wrapped in timers,
found by name so that the breakdown follows the code as it changes.

Medians and minima go to stdout as Markdown; ``--out`` rewrites the section of that file between
``<!-- bench_load:start -->`` and ``<!-- bench_load:end -->``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.quiet import versions, wait_quiet  # noqa: E402

TRACES = Path(os.environ.get("TIMELINE_TRACES", "/work/shared/traces"))
HTA_TRACE = TRACES / "kineto/hta_df_index_resolver/df_index_resolver.json.gz"
PARAM_DIR = TRACES / "kineto/param_dlrm_8rank"
HTA_PYTHON = ROOT / "benchmarks/.venv-hta/bin/python"
HTA_SCRIPT = ROOT / "benchmarks/hta_load.py"
MARK_START = "<!-- bench_load:start -->"
MARK_END = "<!-- bench_load:end -->"
RESULT_PREFIX = "BENCH_RESULT "
CHILD_TIMEOUT_S = 900

# Acceptance criteria of the load target (the 54 MB trace).
TARGET_LOAD_S = 0.6
TARGET_SPEEDUP = 5.0
TARGET_PEAK_X_RAW = 3.0


@dataclass(frozen=True)
class Case:
    key: str
    title: str
    path: Path
    overlap: bool


CASES = (
    Case("a", "54 MB trace, load", HTA_TRACE, overlap=False),
    Case("b", "54 MB trace, load + overlap", HTA_TRACE, overlap=True),
    Case("c", "PARAM DLRM 8 ranks, load + overlap", PARAM_DIR, overlap=True),
)


# --------------------------------------------------------------------------------------------------
# Children: each runs in a fresh process and prints one ``BENCH_RESULT {json}`` line.
# --------------------------------------------------------------------------------------------------


def _proc_status_kib(field: str) -> int:
    """Return a memory field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``), KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0  # pragma: no cover - Linux only


def _rss_now_kib() -> int:
    """Return the current resident set size, KiB."""
    return _proc_status_kib("VmRSS")


def _peak_kib() -> int:
    """Return the peak resident set size of this process, KiB.

    ``VmHWM``, not ``getrusage().ru_maxrss``: on Linux ``ru_maxrss`` survives ``fork`` + ``exec``, so a
    child would report the peak of the (larger) benchmark process that started it if that is higher.
    """
    return _proc_status_kib("VmHWM")


def _emit(result: dict[str, Any]) -> int:
    sys.stdout.write(RESULT_PREFIX + json.dumps(result) + "\n")
    return 0


def child_timeline(path: Path, overlap: bool) -> int:
    """Time ``timeline.trace.load`` (and ``compute_overlap``) on ``path`` in this fresh process."""
    t0 = time.perf_counter()
    import timeline
    import timeline.importers.horovod
    import timeline.importers.kineto  # load() imports the parsers lazily: count them as imports
    from timeline.trace import load

    import_s = time.perf_counter() - t0
    rss_import = _rss_now_kib()
    t1 = time.perf_counter()
    trace = load(path)
    load_s = time.perf_counter() - t1
    result: dict[str, Any] = {
        "tool": "timeline",
        "import_s": import_s,
        "load_s": load_s,
        "events": trace.events.height,
        "ranks": trace.ranks,
        "rss_import_kib": rss_import,
        "rss_load_kib": _peak_kib(),
    }
    if overlap:
        t2 = time.perf_counter()
        result_overlap = timeline.compute_overlap(trace.events)
        result["overlap_s"] = time.perf_counter() - t2
        result["rss_overlap_kib"] = _peak_kib()
        ranks = result_overlap.ranks
        result["overlap_pct"] = {
            str(rank): (None if ratio is None else round(100 * ratio, 2))
            for rank, ratio in zip(ranks["rank"].to_list(), ranks["hidden_comm_ratio"].to_list(), strict=True)
        }
    return _emit(result)


class _Laps:
    """Accumulate the wall time between successive :meth:`lap` calls under names."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = {}
        self._last = time.perf_counter()

    def restart(self) -> None:
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.totals[name] = self.totals.get(name, 0.0) + now - self._last
        self._last = now


def child_decode(path: Path) -> int:
    """Time the JSON stack alone: read, gunzip (ISA-L, zlib), generic ``msgspec.json.decode``."""
    import gc
    import zlib

    import msgspec
    from isal import igzip

    isal_decompress: Callable[[bytes], bytes] = igzip.decompress
    files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
    laps = _Laps()
    raw_bytes = 0
    for p in files:
        laps.restart()
        packed = p.read_bytes()
        laps.lap("read")
        data = bytes(isal_decompress(packed))
        laps.lap("gunzip_isal")
        zlib.decompress(packed, wbits=31)
        laps.lap("gunzip_zlib")
        raw_bytes += len(data)
        laps.restart()
        decoded = msgspec.json.decode(data)
        laps.lap("decode_generic")
        del decoded
        gc.collect()
        gc.disable()
        laps.restart()
        decoded = msgspec.json.decode(data)
        laps.lap("decode_generic_nogc")
        del decoded
        gc.enable()
    return _emit({"tool": "decode", "raw_bytes": raw_bytes, **laps.totals})


# Functions of timeline's import path timed by the ``stages`` child, by ``__name__``, with the row
# label of the breakdown. Times are exclusive: a stage called inside another is not counted twice.
# Names that do not exist (the code moved on) are simply not timed; their time lands in a "rest" row.
OVERLAPPED = "(in a thread, overlapping the decoding; not in the sum) "
STAGES: dict[str, str] = {
    "read_trace_bytes": "read and gunzip the file (`files.read_trace_bytes`, `files.TraceText`, ISA-L)",
    "parse_kineto_stream": "streaming import, rest: gunzip, cut, wait (`stream.parse_kineto_stream`)",
    "extract_columns": "`kineto.extract_columns`: structs → Python lists → Series, metadata scan",
    "finish_columns": OVERLAPPED + "`kineto.finish_columns`: polars per batch of chunks (ns, classification)",
    "_decode": "msgspec decode into structs (`kineto._decode`, `decode_events`)",
    "decode_events": "msgspec decode into structs (`kineto._decode`, `decode_events`)",
    "_build_frame": "`kineto.build_frame`: Python lists → Series, metadata scan, expressions",
    "build_frame": "`kineto.build_frame`: Python lists → Series, metadata scan, expressions",
    "_id_column": "… `kineto._id_column` (pid, tid columns, inside build_frame)",
    "_attach_collectives": "`kineto._attach_collectives`: joins linking kernels to their CPU ops",
    "_mapped": "… `kineto._mapped` (distinct-value lookups, inside attach_collectives)",
    "validate": "`schema.validate` (select + cast to the schema)",
    "parse_kineto": "`parse_kineto` / `finish_kineto`, rest (clock anchoring, metadata)",
    "finish_kineto": "`parse_kineto` / `finish_kineto`, rest (clock anchoring, metadata)",
    "parse_file": "`trace.parse_file`, rest (format sniffing)",
}


def time_stages(
    stages: dict[str, str], *, clock: Callable[[], float] = time.perf_counter
) -> tuple[dict[str, float], dict[str, int]]:
    """Wrap every function of the loaded ``timeline`` modules named in ``stages`` in an exclusive timer.

    Each function whose ``__name__`` is a key of ``stages`` is replaced, in every ``timeline``
    module that refers to it, by a wrapper that adds its time (``clock``) less that of the timed
    functions it called to its label's total. Returns the totals (seconds) and the calls by label,
    filled as the wrapped functions run.
    """
    import threading
    import types

    totals: dict[str, float] = {}
    calls: dict[str, int] = {}
    local = threading.local()  # per thread: the stack of time spent in wrapped callees

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        label = stages[fn.__name__]

        def timed(*args: Any, **kwargs: Any) -> Any:
            inner_time: list[float] = local.__dict__.setdefault("stack", [])
            inner_time.append(0.0)
            start = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                elapsed = clock() - start
                inner = inner_time.pop()
                totals[label] = totals.get(label, 0.0) + elapsed - inner
                calls[label] = calls.get(label, 0) + 1
                if inner_time:
                    inner_time[-1] += elapsed

        return timed

    wrappers: dict[int, Callable[..., Any]] = {}
    for name, module in list(sys.modules.items()):
        if not (name == "timeline" or name.startswith("timeline.")) or module is None:
            continue
        for attr, value in list(vars(module).items()):
            if (
                isinstance(value, types.FunctionType)
                and value.__name__ in stages
                and value.__module__.startswith("timeline")
            ):
                wrapper = wrappers.setdefault(id(value), wrap(value))
                setattr(module, attr, wrapper)
    return totals, calls


def child_stages(path: Path) -> int:
    """Time ``timeline.trace.load`` with its import stages wrapped in timers (exclusive times).

    Every function of a loaded ``timeline`` module named in :data:`STAGES` is replaced, in every
    module that refers to it, by a wrapper that times it; then ``load`` runs once. ``classify``
    re-evaluates ``kineto._kind_expr`` on every loaded event: what classifying event by event
    would cost (the import classifies each distinct (category, name) pair once; not added to the
    stages).
    """
    import contextlib
    import importlib

    import polars as pl

    for module_name in (
        "timeline.importers.horovod",
        "timeline.importers.kineto",
        "timeline.importers.stream",
    ):
        with contextlib.suppress(ImportError):  # load() imports them lazily: wrap their functions too
            importlib.import_module(module_name)
    from timeline.importers import kineto
    from timeline.importers.result import ImportOptions
    from timeline.trace import load

    totals, _calls = time_stages(STAGES)
    start = time.perf_counter()
    trace = load(path)
    load_s = time.perf_counter() - start
    rest = load_s - sum(v for k, v in totals.items() if not k.startswith(OVERLAPPED))
    names = trace.events.select(pl.col("name", "cat").cast(pl.String))
    start = time.perf_counter()
    names.select(kineto._kind_expr(ImportOptions()))
    classify_s = time.perf_counter() - start
    return _emit(
        {"tool": "stages", "load_s": load_s, "rest_s": rest, "classify_s": classify_s, "stages": totals}
    )


def run_child(argv: list[str]) -> int:
    kind, path = argv[0], Path(argv[1])
    if kind == "timeline":
        return child_timeline(path, overlap="--overlap" in argv[2:])
    if kind == "decode":
        return child_decode(path)
    if kind == "stages":
        try:
            return child_stages(path)
        except Exception as exc:  # the private API changed: report it instead of failing the benchmark
            return _emit({"tool": "stages", "error": f"{type(exc).__name__}: {exc}"})
    raise SystemExit(f"unknown child {kind!r}")


# --------------------------------------------------------------------------------------------------
# Parent: schedule the children, aggregate, report.
# --------------------------------------------------------------------------------------------------


def child_env(pycache: Path) -> dict[str, str]:
    """Return the children's environment: bytecode cached (in ``pycache``, outside the repository).

    With ``PYTHONDONTWRITEBYTECODE`` set (as in some CI images) every child would compile timeline's
    sources again on import, which an installed package never does.
    """
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(pycache)
    return env


QUIET = {"cores": 0.15, "max_wait_s": 30.0}  # --settle: other work below this before each run


def spawn(cmd: Sequence[str], env: dict[str, str]) -> dict[str, Any]:
    """Run one child, once the machine is quiet (:func:`wait_quiet`), and return its result.

    ``error`` is set when it failed.
    """
    wait_quiet(QUIET["cores"], QUIET["max_wait_s"])
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, cwd=ROOT, env=env, check=False
    )
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            result: dict[str, Any] = json.loads(line[len(RESULT_PREFIX) :])
            return result
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
    return {"error": f"exit {proc.returncode}: " + " | ".join(tail)}


def timeline_cmd(case: Case) -> list[str]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "timeline", str(case.path)]
    return [*cmd, "--overlap"] if case.overlap else cmd


def hta_cmd(case: Case, hta_python: Path) -> list[str]:
    cmd = [str(hta_python), str(HTA_SCRIPT), str(case.path)]
    return [*cmd, "--overlap"] if case.overlap else cmd


def child_cmd(kind: str, path: Path) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--child", kind, str(path)]


def raw_json_bytes(path: Path) -> tuple[int, int]:
    """Return (compressed, decompressed) sizes of a trace file or of every file of a directory.

    Streams the decompression: this process must stay small (see :func:`_peak_kib`).
    """
    files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
    packed = raw = 0
    for p in files:
        packed += p.stat().st_size
        with p.open("rb") as fh:
            gzipped = fh.read(2) == b"\x1f\x8b"
        if not gzipped:
            raw += p.stat().st_size
            continue
        with gzip.open(p, "rb") as fh:
            while chunk := fh.read(1 << 20):
                raw += len(chunk)
    return packed, raw


@dataclass
class Samples:
    runs: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def add(self, result: dict[str, Any]) -> None:
        if "error" in result:
            self.errors.append(str(result["error"]))
        else:
            self.runs.append(result)

    def values(self, key: str) -> list[float]:
        return [float(r[key]) for r in self.runs if r.get(key) is not None]

    def median(self, key: str) -> float | None:
        values = self.values(key)
        return statistics.median(values) if values else None

    def min(self, key: str) -> float | None:
        values = self.values(key)
        return min(values) if values else None

    def total_median(self) -> float | None:
        """Median over runs of load + overlap."""
        values = [float(r["load_s"]) + float(r.get("overlap_s") or 0.0) for r in self.runs]
        return statistics.median(values) if values else None

    def peak_kib(self) -> float | None:
        """Median over runs of the process's peak RSS."""
        values = [float(max(r.get("rss_load_kib", 0), r.get("rss_overlap_kib", 0))) for r in self.runs]
        return statistics.median(values) if values else None

    def peak_above_import_kib(self) -> float | None:
        """Median over runs of the peak RSS above the RSS after imports (what the work itself added)."""
        values = [
            float(max(r.get("rss_load_kib", 0), r.get("rss_overlap_kib", 0)) - r["rss_import_kib"])
            for r in self.runs
        ]
        return statistics.median(values) if values else None


@dataclass
class CaseResult:
    case: Case
    gz_bytes: int
    raw_bytes: int
    timeline: Samples = field(default_factory=Samples)
    hta: Samples = field(default_factory=Samples)


def run_cases(
    cases: Sequence[Case],
    runs: int,
    warmup: int,
    hta_python: Path | None,
    env: dict[str, str],
    log: Callable[[str], None],
) -> list[CaseResult]:
    results = []
    for case in cases:
        gz, raw = raw_json_bytes(case.path)
        result = CaseResult(case, gz, raw)
        log(f"case ({case.key}) {case.title}: {case.path} ({gz / 1e6:.1f} MB gz, {raw / 1e6:.1f} MB JSON)")
        for _ in range(warmup):
            spawn(timeline_cmd(case), env)
            if hta_python:
                spawn(hta_cmd(case, hta_python), env)
        for i in range(runs):
            # ABBA: timeline first on even runs, HTA first on odd ones.
            order = ["timeline", "hta"] if i % 2 == 0 else ["hta", "timeline"]
            for tool in order:
                if tool == "timeline":
                    result.timeline.add(spawn(timeline_cmd(case), env))
                elif hta_python:
                    result.hta.add(spawn(hta_cmd(case, hta_python), env))
            log(f"  run {i + 1}/{runs}: timeline {_last(result.timeline)}, HTA {_last(result.hta)}")
        results.append(result)
    return results


def _last(samples: Samples) -> str:
    if not samples.runs:
        return "error: " + samples.errors[-1] if samples.errors else "-"
    r = samples.runs[-1]
    text = f"load {r['load_s']:.3f} s"
    return text + (f" + overlap {r['overlap_s']:.3f} s" if "overlap_s" in r else "")


def run_aux(
    kind: str, paths: Sequence[Path], runs: int, env: dict[str, str]
) -> dict[Path, list[dict[str, Any]]]:
    """Run ``decode`` or ``stages`` children ``runs`` times per input, interleaving the inputs."""
    out: dict[Path, list[dict[str, Any]]] = {p: [] for p in paths}
    for _ in range(runs):
        for p in paths:
            out[p].append(spawn(child_cmd(kind, p), env))
    return out


# --------------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------------


def _s(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _mb(kib: float | None) -> str:
    return "n/a" if kib is None else f"{kib * 1024 / 1e6:.0f}"


def _x(kib: float | None, raw: int) -> str:
    return "n/a" if kib is None else f"{kib * 1024 / raw:.2f}×"


def _ratio(num: float | None, den: float | None) -> str:
    return "n/a" if num is None or den is None or den == 0 else f"{num / den:.1f}×"


def _agreement(tl: Samples, hta: Samples) -> str:
    """Largest difference between timeline's hidden-comm % and HTA's overlap % over ranks."""
    if not tl.runs or not hta.runs or "overlap_pct" not in tl.runs[0] or "overlap_pct" not in hta.runs[0]:
        return "n/a"
    a: dict[str, float | None] = tl.runs[0]["overlap_pct"]
    b: dict[str, float | None] = hta.runs[0]["overlap_pct"]
    if set(a) != set(b):
        return f"ranks differ: {sorted(a)} vs {sorted(b)}"
    diffs = [abs((a[r] or 0.0) - (b[r] or 0.0)) for r in a]
    return f"{max(diffs):.2f} pp over {len(diffs)} rank(s)"


def main_table(results: Sequence[CaseResult]) -> list[str]:
    lines = [
        "| case | tool | load median (s) | load min (s) | overlap median (s) | load + overlap median (s)"
        " | speed-up (HTA / timeline) | events | peak RSS (MB) | peak / raw JSON | peak above imports (MB)"
        " | above imports / raw JSON | import (s) |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for r in results:
        tl_key = "total" if r.case.overlap else "load"
        tl_time = r.timeline.total_median() if r.case.overlap else r.timeline.median("load_s")
        hta_time = r.hta.total_median() if r.case.overlap else r.hta.median("load_s")
        for name, samples in (("timeline", r.timeline), ("HTA", r.hta)):
            if not samples.runs and not samples.errors:
                continue
            events = f"{samples.runs[0]['events']:,}" if samples.runs else "n/a"
            speedup = _ratio(hta_time, tl_time) + f" ({tl_key})" if name == "timeline" else ""
            above = samples.peak_above_import_kib()
            lines.append(
                f"| ({r.case.key}) {r.case.title} | {name}"
                f" | {_s(samples.median('load_s'))} | {_s(samples.min('load_s'))}"
                f" | {_s(samples.median('overlap_s')) if r.case.overlap else '-'}"
                f" | {_s(samples.total_median()) if r.case.overlap else '-'}"
                f" | {speedup} | {events}"
                f" | {_mb(samples.peak_kib())} | {_x(samples.peak_kib(), r.raw_bytes)}"
                f" | {_mb(above)} | {_x(above, r.raw_bytes)}"
                f" | {_s(samples.median('import_s'), 2)} |"
            )
    return lines


def acceptance(results: Sequence[CaseResult]) -> list[str]:
    case = next((r for r in results if r.case.key == "a"), None)
    if case is None or not case.timeline.runs:
        return []
    load = case.timeline.median("load_s")
    hta = case.hta.median("load_s")
    peak = case.timeline.peak_kib()
    above = case.timeline.peak_above_import_kib()
    raw_mb = case.raw_bytes / 1e6

    def verdict(ok: bool | None) -> str:
        return "n/a" if ok is None else ("**met**" if ok else "**not met**")

    speedup = None if hta is None or load is None else hta / load
    lines = [
        f"Acceptance (case a, {raw_mb:.1f} MB of JSON):",
        "",
        f"- load ≤ {TARGET_LOAD_S} s: median {_s(load)} s (min {_s(case.timeline.min('load_s'))} s):"
        f" {verdict(None if load is None else load <= TARGET_LOAD_S)}",
        f"- ≥ {TARGET_SPEEDUP:.0f}× faster than HTA's load: {_ratio(hta, load)}"
        f" (HTA median {_s(hta)} s): {verdict(None if speedup is None else speedup >= TARGET_SPEEDUP)}",
        f"- peak memory < {TARGET_PEAK_X_RAW:.0f}× raw JSON ({TARGET_PEAK_X_RAW * raw_mb:.0f} MB):"
        f" whole-process peak RSS {_mb(peak)} MB = {_x(peak, case.raw_bytes)}:"
        f" {verdict(None if peak is None else peak * 1024 < TARGET_PEAK_X_RAW * case.raw_bytes)};"
        f" peak above the RSS after imports {_mb(above)} MB = {_x(above, case.raw_bytes)}:"
        f" {verdict(None if above is None else above * 1024 < TARGET_PEAK_X_RAW * case.raw_bytes)}",
    ]
    lines += [
        f"- overlap results, ({r.case.key}): timeline's hidden_comm_ratio and HTA's comp_comm_overlap_pctg"
        f" differ by at most {_agreement(r.timeline, r.hta)}"
        for r in results
        if r.case.overlap
    ]
    return lines


def decode_table(decode: dict[Path, list[dict[str, Any]]]) -> list[str]:
    lines = [
        "| input | JSON (MB) | read (ms) | gunzip ISA-L (ms) | gunzip zlib (ms)"
        " | msgspec generic decode (ms) | same, GC off (ms) | decode speed, GC off (MB/s) |",
        "|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for path, runs in decode.items():
        ok = [r for r in runs if "error" not in r]
        if not ok:
            lines.append(f"| {path.name} | error: {runs[0].get('error') if runs else 'no run'} |||||||")
            continue

        def med(key: str, ok: list[dict[str, Any]] = ok) -> float:
            return statistics.median(float(r[key]) for r in ok)

        raw = ok[0]["raw_bytes"]
        lines.append(
            f"| {path.name} | {raw / 1e6:.1f} | {med('read') * 1e3:.0f} | {med('gunzip_isal') * 1e3:.0f}"
            f" | {med('gunzip_zlib') * 1e3:.0f} | {med('decode_generic') * 1e3:.0f}"
            f" | {med('decode_generic_nogc') * 1e3:.0f} | {raw / 1e6 / med('decode_generic_nogc'):.0f} |"
        )
    return lines


def stages_table(stages: dict[Path, list[dict[str, Any]]]) -> list[str]:
    lines: list[str] = []
    for path, runs in stages.items():
        ok = [r for r in runs if "error" not in r]
        if not ok:
            error = runs[0].get("error") if runs else "no run"
            lines += [f"Breakdown for {path.name} unavailable: {error}", ""]
            continue
        load = statistics.median(float(r["load_s"]) for r in ok)
        labels = list(
            dict.fromkeys(label for label in STAGES.values() if any(label in r["stages"] for r in ok))
        )
        lines += [
            f"Where timeline's load time goes, {path.name}: `load()` with its stages timed"
            f" (exclusive times, medians of {len(ok)} fresh processes; load median {load * 1e3:.0f} ms"
            " in these runs):",
            "",
            "| stage | median (ms) | share of load |",
            "|---|--:|--:|",
        ]
        for label in labels:
            value = statistics.median(float(r["stages"].get(label, 0.0)) for r in ok)
            lines.append(f"| {label} | {value * 1e3:.0f} | {100 * value / load:.0f} % |")
        rest = statistics.median(float(r["rest_s"]) for r in ok)
        lines.append(
            f"| `load()`, rest (file listing, rank resolution, concat, sort) | {rest * 1e3:.0f}"
            f" | {100 * rest / load:.0f} % |"
        )
        classify = statistics.median(float(r["classify_s"]) for r in ok)
        lines += [
            f"| **load (median)** | **{load * 1e3:.0f}** | 100 % |",
            "",
            f"Classification (`kineto._kind_expr`) evaluated on every loaded event: {classify * 1e3:.0f} ms"
            " (the import evaluates it once per distinct (category, name) pair instead).",
            "",
        ]
    return lines


def machine_lines(
    args: argparse.Namespace, results: Sequence[CaseResult], load_before: str, load_after: str, quiet: str
) -> list[str]:
    cpu = "unknown"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem_gb = "unknown"
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gb = f"{int(line.split()[1]) / 1024**2:.1f} GiB"
    hta_version = next((r.hta.runs[0]["version"] for r in results if r.hta.runs), "not run")

    command = "python benchmarks/bench_load.py " + " ".join(args.argv)
    return [
        f"- date: {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- machine: {len(os.sched_getaffinity(0))} cores (nproc), {cpu}, {mem_gb} RAM,"
        f" {platform.system()} {platform.release()}",
        f"- load average (1 min) before / after: {load_before} / {load_after}"
        f" (the benchmark itself adds about 1); {quiet}",
        f"- Python {platform.python_version()}, {versions('timeline', 'polars', 'msgspec', 'isal')};"
        f" HTA (holistictraceanalysis) {hta_version}"
        f" with pandas {args.hta_pandas}",
        f"- command: `{command.strip()}`"
        f" ({args.runs} measured runs per tool and case, {args.warmup} warm-up)",
    ]


@dataclass(frozen=True)
class CpuSnapshot:
    """System-wide busy and steal CPU seconds (``/proc/stat``) and this process tree's own CPU seconds."""

    busy_s: float
    steal_s: float
    own_s: float
    wall_s: float

    @classmethod
    def take(cls) -> CpuSnapshot:
        busy = steal = 0.0
        stat = Path("/proc/stat")
        if stat.exists():
            fields = [float(v) for v in stat.read_text().splitlines()[0].split()[1:]]
            tick = float(os.sysconf("SC_CLK_TCK"))
            # user nice system idle iowait irq softirq steal ...
            busy = (fields[0] + fields[1] + fields[2] + fields[5] + fields[6]) / tick
            steal = fields[7] / tick if len(fields) > 7 else 0.0
        own = 0.0
        for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
            usage = resource.getrusage(who)
            own += usage.ru_utime + usage.ru_stime
        return cls(busy, steal, own, time.perf_counter())

    def quietness(self, before: CpuSnapshot) -> str:
        """Describe the CPU time other processes (and the hypervisor) took while the benchmark ran."""
        wall = self.wall_s - before.wall_s
        others = max(0.0, (self.busy_s - before.busy_s) - (self.own_s - before.own_s))
        steal = self.steal_s - before.steal_s
        cores = len(os.sched_getaffinity(0))
        return (
            f"{others:.1f} CPU-s used by other processes during the {wall:.0f} s run"
            f" ({100 * others / (wall * cores):.1f} % of the {cores} cores),"
            f" {steal:.1f} CPU-s stolen by the hypervisor"
        )


def hta_pandas_version(hta_python: Path | None) -> str:
    if hta_python is None:
        return "n/a"
    proc = subprocess.run(
        [str(hta_python), "-c", "from importlib.metadata import version; print(version('pandas'))"],
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.stdout.strip() or "unknown"


def rewrite_section(path: Path, body: str) -> None:
    text = path.read_text() if path.exists() else ""
    section = f"{MARK_START}\n{body.rstrip()}\n{MARK_END}"
    if MARK_START in text and MARK_END in text:
        head, rest = text.split(MARK_START, 1)
        _, tail = rest.split(MARK_END, 1)
        text = head + section + tail
    else:
        text = text.rstrip() + ("\n\n" if text else "") + section + "\n"
    path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return run_child(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=5, help="measured runs per tool and case (default 5)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs first (default 1)")
    parser.add_argument("--cases", default="abc", help="which cases to run (default abc)")
    parser.add_argument("--hta-python", type=Path, default=HTA_PYTHON, help="the Python of HTA's virtual env")
    parser.add_argument("--no-hta", action="store_true", help="skip HTA")
    parser.add_argument("--no-breakdown", action="store_true", help="skip decode speed and breakdown")
    parser.add_argument("--out", type=Path, help="rewrite the bench_load section of this Markdown file")
    parser.add_argument("--json", type=Path, help="write every raw measurement to this file")
    parser.add_argument(
        "--settle",
        type=float,
        default=QUIET["cores"],
        help="before each run, wait until other processes use less than this many cores (0: do not wait)",
    )
    args = parser.parse_args(argv)
    QUIET["cores"] = args.settle
    args.argv = argv

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    hta_python: Path | None = None if args.no_hta else args.hta_python
    if hta_python is not None and not hta_python.exists():
        log(f"{hta_python} not found: HTA skipped (create it: see benchmarks/README.md)")
        hta_python = None
    args.hta_pandas = hta_pandas_version(hta_python)
    cases = [c for c in CASES if c.key in args.cases]
    load_before = f"{os.getloadavg()[0]:.2f}"
    cpu_before = CpuSnapshot.take()
    started = time.perf_counter()
    inputs = list(dict.fromkeys(c.path for c in cases))
    decode: dict[Path, list[dict[str, Any]]] = {}
    stages: dict[Path, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-load-pycache-") as pycache:
        env = child_env(Path(pycache))
        results = run_cases(cases, args.runs, args.warmup, hta_python, env, log)
        if not args.no_breakdown:
            log("decode speed and stage breakdown")
            decode = run_aux("decode", inputs, args.runs, env)
            stages = run_aux("stages", inputs, args.runs, env)
    load_after = f"{os.getloadavg()[0]:.2f}"
    quiet = CpuSnapshot.take().quietness(cpu_before)
    log(f"done in {time.perf_counter() - started:.0f} s")

    lines = [*machine_lines(args, results, load_before, load_after, quiet), ""]
    lines += [
        "Times are medians over fresh processes (wall clock, `time.perf_counter`) and exclude interpreter",
        "start-up and imports (the import column, which includes timeline's lazily imported parsers).",
        "Peak RSS is the process's `VmHWM` (HTA parses several ranks in forked workers, whose memory is",
        'not included); "above imports" subtracts the RSS the process had after its imports, before',
        "loading. The speed-up is HTA's median over timeline's, for the load alone in case (a) and for",
        "load + overlap in (b) and (c).",
        "",
        *main_table(results),
        "",
        *acceptance(results),
        "",
    ]
    for r in results:
        for name, samples in (("timeline", r.timeline), ("HTA", r.hta)):
            if samples.errors:
                lines.append(f"- ({r.case.key}) {name}: {len(samples.errors)} failed: {samples.errors[0]}")
    if decode:
        lines += ["", "The JSON stack alone, same run (medians of fresh processes):", ""]
        lines += [*decode_table(decode), ""]
    if stages:
        lines += ["", *stages_table(stages)]
    report = "\n".join(lines).rstrip() + "\n"
    print(report)
    if args.out:
        rewrite_section(args.out, report)
        log(f"wrote {args.out}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        raw = {
            "cases": [
                {
                    "case": r.case.key,
                    "title": r.case.title,
                    "path": str(r.case.path),
                    "gz_bytes": r.gz_bytes,
                    "raw_bytes": r.raw_bytes,
                    "timeline": r.timeline.runs,
                    "hta": r.hta.runs,
                    "errors": {"timeline": r.timeline.errors, "hta": r.hta.errors},
                }
                for r in results
            ],
            "decode": {str(k): v for k, v in decode.items()},
            "stages": {str(k): v for k, v in stages.items()},
        }
        args.json.write_text(json.dumps(raw, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
