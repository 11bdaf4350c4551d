"""Loading Nsight Systems SQLite exports: kernels per second and peak memory, and the SQLite drivers.

Usage (from the repository root, the project's environment active)::

    python benchmarks/generate_nsys.py --processes 8 --size 1G -o benchmarks/out/nsys_1g.sqlite
    python benchmarks/bench_nsys.py benchmarks/out/nsys_1g.sqlite --runs 3

Every measurement runs in a fresh process (its peak RSS, ``ru_maxrss``, is its own, the whole
process: interpreter, polars and every frame); the file is read once first so that it is in the page
cache. Cases:

- ``driver:stdlib``, ``driver:adbc``, ``driver:connectorx``: the kernel table's needed columns read
  into a polars frame by each driver (connectorx and ADBC only when installed);
- ``load``: ``timeline.trace.load(path)``, every event in memory;
- ``load overlap_only``: the same keeping only what the overlap reads (what a rank-by-rank task
  loads: ``timeline analyze`` goes rank by rank from 128 MiB);
- ``timeline analyze``: the whole command, start-up and diagnosis included, under ``/usr/bin/time
  -v`` (wall time; the peak RSS of its largest process).

Prints the median and the minimum of each, and the median CPU time (user + system: what the machine's
other work inflates least; the machine is shared: compare medians).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KERNELS = (
    "SELECT start, end, deviceId, streamId, correlationId, globalPid, demangledName "
    "FROM CUPTI_ACTIVITY_KIND_KERNEL"
)

_CHILD = {
    "driver:stdlib": f"""
import sqlite3, polars as pl
conn = sqlite3.connect(f"file:{{path}}?mode=ro&immutable=1", uri=True)
cursor = conn.execute({KERNELS!r})
frames = []
while batch := cursor.fetchmany(262144):
    frames.append(pl.DataFrame(batch, orient="row"))
rows = pl.concat(frames).height
""",
    "driver:adbc": f"""
import adbc_driver_manager, adbc_driver_sqlite, polars as pl
db = adbc_driver_sqlite.connect(f"file:{{path}}?mode=ro&immutable=1")
conn = adbc_driver_manager.AdbcConnection(db)
st = adbc_driver_manager.AdbcStatement(conn)
st.set_options(**{{"adbc.sqlite.query.batch_rows": str(1 << 30)}})
st.set_sql_query({KERNELS!r})
rows = pl.DataFrame(st.execute_query()[0]).height
""",
    "driver:connectorx": f"""
import connectorx, polars as pl
rows = pl.from_arrow(connectorx.read_sql("sqlite://" + path, {KERNELS!r}, return_type="arrow")).height
""",
    "load": """
from timeline.trace import load
rows = load(path).events.height
""",
    "load overlap_only": """
from timeline.trace import load
rows = load(path, overlap_only=True).events.height
""",
}


def _child(case: str, path: Path) -> dict[str, float]:
    """Run one case in a fresh interpreter; return its seconds, peak RSS (MB) and rows."""
    code = (
        "import resource, sys, time, json\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        f"path = {str(path.resolve())!r}\n"
        "t = time.perf_counter()\n" + _CHILD[case] + "\nu = resource.getrusage(resource.RUSAGE_SELF)\n"
        "print(json.dumps({'s': time.perf_counter() - t, 'cpu_s': u.ru_utime + u.ru_stime, "
        "'rss_mb': u.ru_maxrss / 1024, 'rows': rows}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    out: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def _timeline() -> list[str]:
    """The console script beside this interpreter, else the entry point through ``-c``."""
    script = Path(sys.executable).with_name("timeline")
    return [str(script)] if script.is_file() else [sys.executable, "-c", "from cli.main import main; main()"]


def _analyze(path: Path) -> dict[str, float]:
    """Run ``timeline analyze PATH`` under ``/usr/bin/time -v``: wall seconds, peak RSS (largest process)."""
    done = subprocess.run(
        ["/usr/bin/time", "-v", *_timeline(), "analyze", str(path)],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    fields = dict(line.strip().rsplit(": ", 1) for line in done.stderr.splitlines() if ": " in line)
    wall = fields["Elapsed (wall clock) time (h:mm:ss or m:ss)"].split(":")
    seconds = sum(float(part) * 60**i for i, part in enumerate(reversed(wall)))
    cpu = float(fields["User time (seconds)"]) + float(fields["System time (seconds)"])
    rss = int(fields["Maximum resident set size (kbytes)"]) / 1024
    return {"s": seconds, "cpu_s": cpu, "rss_mb": rss, "rows": 0}


def _kernels(path: Path) -> int:
    import sqlite3

    conn = sqlite3.connect(f"file:{path.resolve()}?mode=ro&immutable=1", uri=True)
    count = int(conn.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0])
    conn.close()
    return count


def _installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("export", type=Path)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cases", nargs="*", default=None)
    args = parser.parse_args(argv)
    path: Path = args.export
    # into the page cache, in a child: Linux keeps a process's peak RSS across fork and exec
    subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)
    kernels = _kernels(path)
    cases = args.cases or [
        "driver:stdlib",
        *(["driver:adbc"] if _installed("adbc_driver_sqlite") else []),
        *(["driver:connectorx"] if _installed("connectorx") else []),
        "load",
        "load overlap_only",
        "timeline analyze",
    ]
    print(f"{path}: {path.stat().st_size / 1e6:,.0f} MB, {kernels:,} kernels")
    print("| case | median s | min s | CPU s (median) | kernels/s (median) | peak RSS MB (median) |")
    print("|---|---|---|---|---|---|")
    for case in cases:
        runs = [
            _analyze(path) if case == "timeline analyze" else _child(case, path) for _ in range(args.runs)
        ]
        seconds = [r["s"] for r in runs]
        rss = statistics.median(r["rss_mb"] for r in runs)
        cpu = statistics.median(r["cpu_s"] for r in runs)
        median = statistics.median(seconds)
        rate = kernels / median
        print(f"| {case} | {median:.2f} | {min(seconds):.2f} | {cpu:.2f} | {rate:,.0f} | {rss:,.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
