"""Whole-process times of the ``timeline`` command line, start-up included, vs HTA on the same traces.

Usage::

    python benchmarks/bench_startup.py [--runs 5] [--cases help sample single r8] [--no-hta] \\
        [--setup-hta] [--wait-quiet CORES] [--importtime] [--out docs/performance.md] \\
        [--json benchmarks/out/bench_startup.json]

What a user waits for, from the shell prompt back to the shell prompt: every measurement is one fresh
process run as a user runs it (the ``timeline`` console script of this interpreter's environment, its
output discarded), timed around ``fork`` + ``exec`` + ``wait`` (``time.perf_counter``), interpreter
start-up, imports, reading the traces and the analysis included. Cases:

- ``help``: ``timeline --help`` (target: at most 0.15 s);
- ``sample``: ``timeline analyze sample_traces/ddp_gloo`` (two small ranks; target: at most 0.30 s);
- ``single``: ``timeline analyze`` on the directory of the 54 MB ``hta_df_index_resolver`` trace vs
  HTA's whole process on the same directory (``benchmarks/hta_load.py DIR --overlap``: interpreter,
  imports, ``TraceAnalysis`` + ``get_comm_comp_overlap``; target: timeline at least 8× faster);
- ``r8``: the same on 8 ranks of that trace (rank-rewritten copies, made by ``benchmarks/generate.py``
  into ``--workdir``, ``r8/``, exactly as ``bench_scale.py``'s ``r8`` case makes them, and shared
  with it; target: at least 10× faster).

timeline and HTA alternate (ABBA: the order flips every round) after one untimed warm-up run of each
(page cache, bytecode cache). Reported per case: the median wall time with its min–max, HTA's median,
the ratio HTA / timeline, the target and whether the median meets it; also the CPU time of the process
and its reaped children (``wait4``), its peak RSS (``ru_maxrss``: the largest of the process and its
children; on Linux at least this benchmark's own RSS, which ``exec`` carries over) and the CPU time
other processes took meanwhile (``/proc/stat``: this machine is shared, and that shows in wall times).

``--importtime`` also runs ``python -X importtime`` on ``timeline --help`` and on ``timeline analyze
sample_traces/ddp_gloo`` and prints the top modules by cumulative import time (medians over the runs)
with the chain of project modules that first imported each, the third-party packages each pulls in,
and the floor: ``python -c pass`` and the bare import of the command line's libraries, whole process.

The Markdown goes to stdout; ``--out`` rewrites the section of that file between
``<!-- bench_startup:start -->`` and ``<!-- bench_startup:end -->`` (the import analysis is printed,
not written there). HTA runs in its own virtual environment (``benchmarks/.venv-hta``, see
benchmarks/README.md); without it HTA is skipped, unless ``--setup-hta`` creates it first.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import importlib.util
import json
import os
import platform
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.bench_load import HTA_TRACE, child_env, hta_pandas_version  # noqa: E402
from benchmarks.bench_scale import (  # noqa: E402
    HTA_PYTHON,
    HTA_SCRIPT,
    _limit_memory,
    machine_facts,
    write_section,
)
from benchmarks.generate import DEFAULT_SOURCE  # noqa: E402
from benchmarks.quiet import busy_cpu_s, versions, wait_quiet  # noqa: E402

MARK_START = "<!-- bench_startup:start -->"
MARK_END = "<!-- bench_startup:end -->"
HEADING = "## Start-up: whole-process times of the command line"
RESULT_PREFIX = "BENCH_RESULT "
ALL_CASES = ("help", "sample", "single", "r8")
SAMPLE = REPO / "sample_traces" / "ddp_gloo"
# the modules of --importtime's floor: python alone, then the command line's libraries one by one
FLOOR = (
    ("python -c pass", "pass"),
    ("import click", "import click"),
    ("import typer", "import typer"),
    ("import rich.console", "import rich.console"),
    ("import msgspec", "import msgspec"),
    ("import numpy", "import numpy"),
    ("import polars", "import polars"),
    ("import pyarrow", "import pyarrow"),
    ("import typer.rich_utils (typer's help and error renderer)", "import typer.rich_utils"),
    ("import typer._adapters (typer's parameter coercion: pydantic)", "import typer._adapters"),
)
IMPORTTIME_TOP = 25
PROJECT_ROOTS = ("cli", "timeline")


@dataclass(frozen=True)
class Case:
    """One command line of timeline and, for a ratio target, HTA's process on the same input."""

    key: str
    title: str
    args: tuple[str, ...]  # timeline's arguments
    target: float  # seconds (an upper bound on timeline's median) or a ratio (HTA / timeline, a minimum)
    ratio: bool  # the target is a ratio to HTA
    hta_input: Path | None = None


@dataclass
class Run:
    """One measured process."""

    wall_s: float
    cpu_s: float = 0.0
    peak_kib: int = 0
    others_cores: float = 0.0
    exit_code: int = 0
    error: str | None = None
    result: dict[str, Any] | None = None  # HTA's BENCH_RESULT line


@dataclass
class Series:
    """The runs of one tool on one case."""

    label: str
    command: list[str] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)

    def ok(self) -> list[Run]:
        return [r for r in self.runs if r.error is None]

    def walls(self) -> list[float]:
        return [r.wall_s for r in self.ok()]

    def median(self, attr: str = "wall_s") -> float | None:
        values = [float(getattr(r, attr)) for r in self.ok()]
        return statistics.median(values) if values else None

    def spread(self) -> str:
        walls = self.walls()
        if not walls:
            error = next((r.error for r in self.runs if r.error), None) or "not run"
            return error.replace("|", "\\|")
        return f"{statistics.median(walls):.3f} ({min(walls):.3f}–{max(walls):.3f})"

    def others(self) -> float | None:
        return statistics.median(r.others_cores for r in self.runs) if self.runs else None


@dataclass
class CaseResult:
    case: Case
    timeline: Series
    hta: Series


# --------------------------------------------------------------------------------------------------
# Measuring one process
# --------------------------------------------------------------------------------------------------

QUIET = {"cores": 0.0, "max_wait_s": 120.0}  # --wait-quiet: wait for other work to stop before each run


def measure(
    command: Sequence[str], env: dict[str, str], *, timeout: float, memory_gib: float | None = None
) -> Run:
    """Run ``command`` once (from the repository root) and time it from ``fork`` to ``wait4``.

    Output goes to temporary files (read after the timing), so that a full pipe never blocks the child;
    ``wait4`` gives the CPU time and peak RSS of the process and of the children it reaped.
    """
    wait_quiet(QUIET["cores"], QUIET["max_wait_s"], interval_s=0.5)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        busy0 = busy_cpu_s()
        start = time.perf_counter()
        proc = subprocess.Popen(
            list(command),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            cwd=REPO,
            env=env,
            preexec_fn=None if memory_gib is None else _limit_memory(memory_gib),
        )
        killer = threading.Timer(timeout, proc.kill)
        killer.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        killer.cancel()
        proc.returncode = code = os.waitstatus_to_exitcode(status)
        cpu = usage.ru_utime + usage.ru_stime
        others = max(0.0, busy_cpu_s() - busy0 - cpu) / wall
        run = Run(wall, cpu, int(usage.ru_maxrss), others, code)
        stdout, stderr = _read(out), _read(err)
    if code != 0:
        killed = code in (-9, 137)
        if killed and wall >= timeout:
            run.error = f"did not finish in {timeout:.0f} s"
        elif killed or any(m in stderr for m in ("MemoryError", "Cannot allocate", "std::bad_alloc")):
            run.error = "out of memory" + (
                f" (address space capped at {memory_gib:g} GiB)" if memory_gib else ""
            )
        else:
            tail = "; ".join(ln.strip() for ln in (stderr or stdout).strip().splitlines()[-2:])
            run.error = f"exit {code}: {tail[:300]}"
    line = next((ln for ln in stdout.splitlines() if ln.startswith(RESULT_PREFIX)), None)
    if line is not None:
        run.result = json.loads(line[len(RESULT_PREFIX) :])
    return run


def _read(handle: IO[bytes]) -> str:
    handle.seek(0)
    return handle.read().decode(errors="replace")


def _describe(run: Run) -> str:
    if run.error is not None:
        return run.error
    return (
        f"{run.wall_s:.3f} s, CPU {run.cpu_s:.2f} s, peak {run.peak_kib / 1024:.0f} MB, "
        f"others {run.others_cores:.2f} cores"
    )


# --------------------------------------------------------------------------------------------------
# The cases
# --------------------------------------------------------------------------------------------------


def _shown(path: Path, *, directory: bool | None = None) -> str:
    """``path`` as the command line shows it: relative to the repository root (where it runs)."""
    text = os.path.relpath(path, REPO)
    return text + "/" if (path.is_dir() if directory is None else directory) else text


def make_cases(workdir: Path) -> dict[str, Case]:
    single = HTA_TRACE.parent
    r8 = workdir / "r8"
    return {
        "help": Case("help", "`timeline --help`", ("--help",), 0.15, ratio=False),
        "sample": Case(
            "sample",
            "`timeline analyze` on `sample_traces/ddp_gloo` (2 ranks)",
            ("analyze", _shown(SAMPLE)),
            0.30,
            ratio=False,
        ),
        "single": Case(
            "single",
            "`timeline analyze` on the 54 MB trace vs HTA load + overlap",
            ("analyze", _shown(single)),
            8.0,
            ratio=True,
            hta_input=single,
        ),
        "r8": Case(
            "r8",
            "`timeline analyze` on 8 ranks of the 54 MB trace vs HTA load + overlap",
            ("analyze", _shown(r8, directory=True)),
            10.0,
            ratio=True,
            hta_input=r8,
        ),
    }


def make_inputs(cases: Sequence[Case], workdir: Path, log: Callable[[str], None]) -> None:
    """Make the ``r8`` rank set as ``bench_scale.py`` does (8 rank-rewritten copies), unless it exists.

    In a child process (``benchmarks/generate.py ranks``): the 54 MB of JSON it holds would otherwise stay
    in this process's peak RSS, which every measured child inherits (see :func:`measure`).
    """
    if any(c.key == "r8" for c in cases):
        folder = workdir / "r8"
        if not folder.exists():
            log(f"making {folder} (8 rank-rewritten copies of {DEFAULT_SOURCE.name})")
            scratch = workdir / "r8.partial"
            shutil.rmtree(scratch, ignore_errors=True)
            generate = [sys.executable, str(REPO / "benchmarks" / "generate.py"), "ranks", "--ranks", "8"]
            subprocess.run([*generate, "-o", str(scratch)], check=True, stdout=sys.stderr)
            scratch.rename(folder)


def timeline_script() -> Path:
    """The ``timeline`` console script of this interpreter's environment (else the one on ``PATH``)."""
    script = Path(sys.executable).parent / "timeline"
    if script.exists():
        return script
    found = shutil.which("timeline")
    if found is None:
        raise SystemExit("no `timeline` console script next to this Python nor on PATH: pip install -e .")
    return Path(found)


@functools.cache
def installed_tree() -> Path | None:
    """The source tree this environment's ``timeline`` imports ``cli`` from (an editable install's tree).

    Asked of a fresh interpreter started outside the repository: this one has the repository on its path.
    """
    code = "import importlib.util as u; s = u.find_spec('cli'); print(s.origin if s else '')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/", check=False)
    origin = done.stdout.strip()
    return Path(origin).resolve().parent.parent if origin else None


def timeline_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` for timeline's processes: this script's tree first on the path when not the installed one.

    So that a copy of the repository (``git archive COMMIT``, another worktree) measures its own code
    with this environment's console script and libraries.
    """
    if installed_tree() == REPO:
        return env
    return {**env, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)}


def make_hta_venv(python: Path, log: Callable[[str], None]) -> None:
    """Create HTA's virtual environment (``python`` is its interpreter), as benchmarks/README.md says.

    ``python3 -m venv`` and ``pip install holistictraceanalysis``: HTA pulls pandas and Jupyter
    packages timeline does not need, so it never shares timeline's environment.
    """
    venv = python.parent.parent
    log(f"creating HTA's environment in {venv} (python3 -m venv; pip install holistictraceanalysis)")
    subprocess.run(["python3", "-m", "venv", str(venv)], check=True)
    pip = [str(python), "-m", "pip", "install", "--quiet", "holistictraceanalysis"]
    subprocess.run(pip, check=True, stdout=sys.stderr)


class Bench:
    def __init__(self, args: argparse.Namespace, env: dict[str, str]) -> None:
        self.args = args
        self.hta_env = env
        self.env = timeline_env(env)
        self.timeline = timeline_script()
        self.hta_python: Path | None = None if args.no_hta else args.hta_python
        if self.hta_python is not None and not self.hta_python.exists() and args.setup_hta:
            make_hta_venv(self.hta_python, self.log)
        if self.hta_python is not None and not self.hta_python.exists():
            self.log(f"{self.hta_python} not found: HTA skipped (--setup-hta creates it)")
            self.hta_python = None

    def log(self, text: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)

    def timeline_cmd(self, case: Case) -> list[str]:
        return [str(self.timeline), *case.args]

    def hta_cmd(self, case: Case) -> list[str] | None:
        if self.hta_python is None or case.hta_input is None:
            return None
        return [str(self.hta_python), str(HTA_SCRIPT), _shown(case.hta_input), "--overlap"]

    def run_case(self, case: Case) -> CaseResult:
        tl_cmd, hta_cmd = self.timeline_cmd(case), self.hta_cmd(case)
        result = CaseResult(case, Series("timeline", tl_cmd), Series("HTA", hta_cmd or []))
        jobs: list[tuple[Series, Callable[[], Run]]] = [
            (result.timeline, lambda: measure(tl_cmd, self.env, timeout=self.args.timeout))
        ]
        if hta_cmd is not None:
            jobs.append(
                (
                    result.hta,
                    lambda: measure(
                        hta_cmd,
                        self.hta_env,
                        timeout=self.args.hta_timeout,
                        memory_gib=self.args.hta_memory_gb,
                    ),
                )
            )
        for _ in range(self.args.warmup):
            for series, job in jobs:
                run = job()
                self.log(f"{case.key} {series.label}: warm-up: {_describe(run)}")
        for i in range(self.args.runs):
            for series, job in jobs if i % 2 == 0 else jobs[::-1]:
                if series.runs and series.runs[-1].error is not None:
                    continue  # a timeout or an OOM does not get better by trying again
                run = job()
                series.runs.append(run)
                self.log(f"{case.key} {series.label}: run {i + 1}/{self.args.runs}: {_describe(run)}")
        return result


# --------------------------------------------------------------------------------------------------
# -X importtime
# --------------------------------------------------------------------------------------------------


@dataclass
class Imported:
    """One line of ``-X importtime``: a module, its times (µs) and the module that imported it first."""

    name: str
    self_us: int
    cumulative_us: int
    parent: int | None = None


def parse_importtime(stderr: str) -> list[Imported]:
    """Parse ``-X importtime`` output; a module's parent is the next line one level less indented."""
    modules: list[Imported] = []
    pending: dict[int, list[int]] = {}  # depth -> lines waiting for their parent
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "imported package" in line:
            continue
        fields = line[len("import time:") :].split("|", 2)
        if len(fields) != 3:
            continue
        label = fields[2][1:]
        name = label.lstrip()
        depth = (len(label) - len(name)) // 2
        index = len(modules)
        modules.append(Imported(name, int(fields[0]), int(fields[1])))
        for child in pending.pop(depth + 1, []):
            modules[child].parent = index
        pending.setdefault(depth, []).append(index)
    return modules


def _root(name: str) -> str:
    return name.split(".", 1)[0]


def _is_project(name: str) -> bool:
    return _root(name) in PROJECT_ROOTS


def project_chain(modules: list[Imported], index: int) -> str:
    """The project modules (``cli.*``, ``timeline.*``) on the import chain of a module, outermost first."""
    chain: list[str] = []
    parent = modules[index].parent
    while parent is not None:
        if _is_project(modules[parent].name):
            chain.append(modules[parent].name)
        parent = modules[parent].parent
    return " → ".join(reversed(chain)) or "(at run time: no project module's import)"


@dataclass
class ImportProfile:
    """Median import times of one command over several ``-X importtime`` runs."""

    label: str
    command: list[str]
    wall_s: list[float] = field(default_factory=list)
    runs: list[list[Imported]] = field(default_factory=list)

    def _median(self, key: Callable[[list[Imported]], dict[str, int]]) -> dict[str, float]:
        per_run = [key(run) for run in self.runs]
        names = list(dict.fromkeys(n for run in per_run for n in run))
        return {n: statistics.median(run.get(n, 0) for run in per_run) / 1000 for n in names}

    def cumulative_ms(self) -> dict[str, float]:
        return self._median(lambda run: {m.name: m.cumulative_us for m in run})

    def self_ms(self) -> dict[str, float]:
        return self._median(lambda run: {m.name: m.self_us for m in run})

    def total_ms(self) -> float:
        return statistics.median(sum(m.self_us for m in run) for run in self.runs) / 1000

    def top(self, n: int) -> list[str]:
        cumulative, selfs = self.cumulative_ms(), self.self_ms()
        first = self.runs[-1]
        where = {m.name: i for i, m in enumerate(first)}
        lines = [
            f"**`{shlex.join(self.command)}`**: whole process {statistics.median(self.wall_s):.3f} s under "
            f"`-X importtime` (median of {len(self.wall_s)}), {self.total_ms():.0f} ms importing "
            f"{len(first)} modules. Top {n} by cumulative import time (medians, ms):",
            "",
            "| module | cumulative (ms) | self (ms) | first imported via (project modules, outermost first)"
            " |",
            "|---|--:|--:|---|",
        ]
        for name in sorted(cumulative, key=lambda k: -cumulative[k])[:n]:
            via = project_chain(first, where[name]) if name in where else "?"
            lines.append(f"| `{name}` | {cumulative[name]:.1f} | {selfs[name]:.1f} | {via} |")
        return lines

    def packages(self) -> list[str]:
        """Every third-party package (and the project's entry into it), by cumulative time of its entry."""
        cumulative = self.cumulative_ms()
        first = self.runs[-1]
        stdlib = sys.stdlib_module_names
        entries: dict[str, tuple[float, str]] = {}
        for i, m in enumerate(first):
            root = _root(m.name)
            parent = None if m.parent is None else first[m.parent].name
            if _is_project(m.name) or root in stdlib or root.startswith("_") or root in entries:
                continue
            if root in ("sitecustomize", "usercustomize") or importlib.util.find_spec(root) is None:
                continue  # site hooks; optional imports that failed (``copy`` tries Jython's ``org``)
            if parent is not None and _root(parent) == root:
                continue
            entries[root] = (cumulative.get(m.name, 0.0), f"`{parent or '-'}` ({project_chain(first, i)})")
        lines = [
            "Third-party packages it imports (cumulative time of the package's first import, which includes "
            "the packages that one imports in turn), and what imports them:",
            "",
            "| package | cumulative (ms) | imported by (project chain) |",
            "|---|--:|---|",
        ]
        for root, (ms, by) in sorted(entries.items(), key=lambda kv: -kv[1][0]):
            lines.append(f"| `{root}` | {ms:.1f} | {by} |")
        return lines


def importtime(bench: Bench, runs: int) -> tuple[list[ImportProfile], list[tuple[str, Series]]]:
    """``-X importtime`` of ``timeline --help`` and ``timeline analyze SAMPLE``, and the floor."""
    profiles = [
        ImportProfile("help", ["timeline", "--help"]),
        ImportProfile("sample", ["timeline", "analyze", _shown(SAMPLE)]),
    ]
    for profile in profiles:
        command = [sys.executable, "-X", "importtime", str(bench.timeline), *profile.command[1:]]
        for i in range(runs + 1):  # the first one warms the caches up
            with tempfile.TemporaryFile() as err:
                start = time.perf_counter()
                subprocess.run(
                    command, stdout=subprocess.DEVNULL, stderr=err, cwd=REPO, env=bench.env, check=False
                )
                wall = time.perf_counter() - start
                if i:
                    profile.wall_s.append(wall)
                    profile.runs.append(parse_importtime(_read(err)))
        bench.log(f"importtime {profile.label}: {profile.total_ms():.0f} ms of imports")
    floor: list[tuple[str, Series]] = []
    for label, code in FLOOR:
        series = Series(label, [sys.executable, "-c", code])
        measure(series.command, bench.env, timeout=bench.args.timeout)  # warm-up
        for _ in range(runs):
            series.runs.append(measure(series.command, bench.env, timeout=bench.args.timeout))
        bench.log(f"floor {label}: {series.spread()}")
        floor.append((label, series))
    return profiles, floor


def importtime_lines(profiles: list[ImportProfile], floor: list[tuple[str, Series]]) -> list[str]:
    lines = ["### Start-up: what the imports cost (`-X importtime`)", ""]
    for profile in profiles:
        lines += [*profile.top(IMPORTTIME_TOP), "", *profile.packages(), ""]
    lines += [
        f"The floor: whole-process wall time in this environment ({Path(sys.executable)}), median (min–max) "
        f"of {len(floor[0][1].runs) if floor else 0} fresh processes:",
        "",
        "| command | wall (s) | CPU (s) | peak RSS (MB) |",
        "|---|--:|--:|--:|",
    ]
    for label, series in floor:
        cpu, peak = series.median("cpu_s"), series.median("peak_kib")
        peak_mb = _fmt(None if peak is None else peak / 1024, 0)
        lines.append(f"| `{label}` | {series.spread()} | {_fmt(cpu, 3)} | {peak_mb} |")
    return lines


# --------------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------------


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _git(*args: str) -> str:
    done = subprocess.run(
        ["git", "--no-optional-locks", *args], capture_output=True, text=True, cwd=REPO, check=False
    )
    return done.stdout.strip()


def git_state() -> str:
    commit = _git("rev-parse", "--short", "HEAD") or "unknown"
    changed = _git("status", "--porcelain", "--untracked-files=no", "--", "cli", "timeline", "pyproject.toml")
    count = len(changed.splitlines())
    return commit + (
        f" plus uncommitted changes to {count} files of cli/, timeline/, pyproject.toml" if count else ""
    )


def verdict(result: CaseResult) -> tuple[str, str, str]:
    """(ratio, target, met) cells of a case."""
    case = result.case
    tl, hta = result.timeline.median(), result.hta.median()
    ratio = None if tl is None or hta is None else hta / tl
    ratio_cell = "-" if ratio is None else f"{ratio:.2f}×"
    if case.ratio:
        target = f"≥ {case.target:g}× faster than HTA"
        ok = None if ratio is None else ratio >= case.target
    else:
        target = f"≤ {case.target:.2f} s"
        ok = None if tl is None else tl <= case.target
    met = "not measured" if ok is None else ("**met**" if ok else "**not met**")
    return ratio_cell, target, met


def render(
    args: argparse.Namespace,
    results: list[CaseResult],
    load: tuple[float, float],
    others: str,
    hta_pandas: str,
) -> str:
    cpu, mem_kib = machine_facts()
    hta_version = next(
        (r.result.get("version", "?") for c in results for r in c.hta.ok() if r.result is not None), "not run"
    )
    lines = [
        MARK_START,
        "",
        f"- date: {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}; git commit {git_state()}"
        + ("" if installed_tree() == REPO else f" (the code of {REPO}, on PYTHONPATH)"),
        f"- machine: {len(os.sched_getaffinity(0))} cores (nproc), {cpu}, {mem_kib / 1024**2:.1f} GiB RAM, "
        f"{platform.system()} {platform.release()}",
        f"- load average (1 min) before / after: {load[0]:.2f} / {load[1]:.2f}; {others}",
        f"- Python {platform.python_version()}, "
        f"{versions('timeline', 'typer', 'click', 'rich', 'polars', 'msgspec')}; "
        f"HTA (holistictraceanalysis) {hta_version} with pandas {hta_pandas}",
        f"- command: `python benchmarks/bench_startup.py {shlex.join(args.argv)}`"
        f" ({args.runs} measured runs per tool and case after {args.warmup} warm-up,"
        " timeline and HTA alternating)",
        "",
        "Whole-process wall times (s) from the shell's point of view: fork, exec, interpreter start-up, "
        "imports, reading the traces and the analysis, output discarded; median (min–max) of fresh "
        "processes. "
        "The ratio is HTA's median over timeline's. CPU: user + system of the process and its children. "
        f"Peak RSS: `ru_maxrss` of the process and its children (never below this benchmark's own RSS, "
        f"{_parent_rss_mb():.0f} MB, which Linux carries over `exec`). "
        "Others' CPU: cores other processes used meanwhile (median), which slows every wall time here.",
        "",
        "| case | timeline median (min–max) | HTA median (min–max) | ratio | target | met? "
        "| timeline CPU (s) | timeline peak RSS (MB) | others' CPU (cores) |",
        "|---|--:|--:|--:|---|---|--:|--:|--:|",
    ]
    for r in results:
        ratio, target, met = verdict(r)
        hta = r.hta.spread() if r.hta.runs else "-"
        peak = r.timeline.median("peak_kib")
        lines.append(
            f"| {r.case.title} | {r.timeline.spread()} | {hta} | {ratio} | {target} | {met} "
            f"| {_fmt(r.timeline.median('cpu_s'))} | {_fmt(None if peak is None else peak / 1024, 0)} "
            f"| {_fmt(r.timeline.others())} |"
        )
    lines += ["", "The commands, run from the repository root:", ""]
    for r in results:
        lines.append(f"- {r.case.key}: `{_display(r.timeline.command)}`")
        if r.hta.command:
            lines.append(f"  vs HTA: `{_display(r.hta.command)}`")
    r8 = next((r for r in results if r.case.key == "r8"), None)
    if r8 is not None:
        lines += [
            "",
            f"The 8 ranks are `{os.path.relpath(r8.case.hta_input or REPO, REPO)}/rank{{0..7}}.json.gz`: "
            "copies of `df_index_resolver.json.gz` with their `distributedInfo` rank rewritten "
            "(`benchmarks/generate.py`, as `bench_scale.py`'s r8 case).",
        ]
    return "\n".join([*lines, "", MARK_END])


def _parent_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _display(command: Sequence[str]) -> str:
    """A command as a user types it: the environment's scripts by name, paths relative to the root."""
    shown = []
    for part in command:
        if part == sys.executable or part.endswith("/.venv/bin/timeline"):
            shown.append(Path(part).name)
        elif part.startswith(str(REPO) + "/"):
            shown.append(os.path.relpath(part, REPO))
        else:
            shown.append(part)
    return shlex.join(shown)


class _Quietness:
    """CPU seconds other processes used while the benchmark ran (``/proc/stat`` less this process tree)."""

    def __init__(self) -> None:
        self.busy, self.own, self.wall = busy_cpu_s(), self._own(), time.perf_counter()

    @staticmethod
    def _own() -> float:
        total = 0.0
        for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
            usage = resource.getrusage(who)
            total += usage.ru_utime + usage.ru_stime
        return total

    def describe(self) -> str:
        wall = time.perf_counter() - self.wall
        others = max(0.0, busy_cpu_s() - self.busy - (self._own() - self.own))
        cores = len(os.sched_getaffinity(0))
        return (
            f"{others:.0f} CPU-s used by other processes during the {wall:.0f} s run "
            f"({others / wall:.2f} of the {cores} cores)"
        )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=5, help="measured runs per tool and case (default 5)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs of each first (default 1)")
    parser.add_argument("--cases", nargs="+", choices=ALL_CASES, default=list(ALL_CASES))
    parser.add_argument("--no-hta", action="store_true", help="skip HTA")
    parser.add_argument(
        "--setup-hta",
        action="store_true",
        help="create HTA's environment first if it is missing",
    )
    parser.add_argument("--hta-python", type=Path, default=HTA_PYTHON, help="the Python of HTA's virtual env")
    parser.add_argument("--importtime", action="store_true", help="also print the -X importtime analysis")
    parser.add_argument("--out", type=Path, help="rewrite the bench_startup section of this Markdown file")
    parser.add_argument("--json", type=Path, help="write every run as JSON")
    parser.add_argument("--workdir", type=Path, default=REPO / "benchmarks" / "out" / "scale")
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=0.0,
        metavar="CORES",
        help="before each run, wait until other processes use less than CORES cores (at most --max-wait s)",
    )
    parser.add_argument("--max-wait", type=float, default=120.0)
    parser.add_argument("--timeout", type=float, default=300, help="per timeline run, seconds")
    parser.add_argument("--hta-timeout", type=float, default=900, help="per HTA run, seconds")
    parser.add_argument("--hta-memory-gb", type=float, default=12.0, help="cap on HTA's address space")
    args = parser.parse_args(argv)
    args.argv = argv
    QUIET.update(cores=args.wait_quiet, max_wait_s=args.max_wait)
    load_before = os.getloadavg()[0]
    quiet = _Quietness()
    results: list[CaseResult] = []
    profiles: list[ImportProfile] = []
    floor: list[tuple[str, Series]] = []
    with tempfile.TemporaryDirectory(prefix="bench-startup-pycache-") as pycache:
        bench = Bench(args, child_env(Path(pycache)))
        cases = [case for key, case in make_cases(args.workdir).items() if key in args.cases]
        make_inputs(cases, args.workdir, bench.log)
        results = [bench.run_case(case) for case in cases]
        if args.importtime:
            profiles, floor = importtime(bench, args.runs)
        hta_pandas = hta_pandas_version(bench.hta_python)
    section = render(args, results, (load_before, os.getloadavg()[0]), quiet.describe(), hta_pandas)
    print(section)
    if profiles:
        print("\n" + "\n".join(importtime_lines(profiles, floor)))
    if args.out:
        write_section(args.out, section, start=MARK_START, end=MARK_END, heading=HEADING)
        bench.log(f"wrote {args.out}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        raw = {
            "argv": argv,
            "date": dt.datetime.now(dt.UTC).isoformat(),
            "git": git_state(),
            "load_before": load_before,
            "load_after": os.getloadavg()[0],
            "cases": [
                {
                    "case": asdict(r.case)
                    | {"hta_input": str(r.case.hta_input) if r.case.hta_input else None},
                    "timeline": asdict(r.timeline),
                    "hta": asdict(r.hta),
                }
                for r in results
            ],
            "importtime": [
                {
                    "label": p.label,
                    "command": p.command,
                    "wall_s": p.wall_s,
                    "cumulative_ms": p.cumulative_ms(),
                    "self_ms": p.self_ms(),
                }
                for p in profiles
            ],
            "floor": [{"label": label, **asdict(series)} for label, series in floor],
        }
        args.json.write_text(json.dumps(raw, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
