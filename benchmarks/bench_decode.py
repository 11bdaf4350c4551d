"""The Kineto decoders side by side, whole processes: which one pays on this machine (issue #36).

Usage::

    python benchmarks/bench_decode.py [--runs 5] [--modes whole chunks parallel halves] \\
        [--inputs single big] [--wait-quiet CORES] [--json benchmarks/out/bench_decode.json]

Each measurement is one fresh process (``bench_decode.py --child MODE FILE``) that imports timeline
and decodes one trace file into its :class:`~timeline.importers.result.FileResult` with one of the
readers timeline had (every event kept, as an in-memory load does):

- ``whole``: the text read into memory, then :func:`timeline.importers.kineto.parse_kineto`;
- ``chunks``: :func:`timeline.importers.stream.parse_kineto_stream` with one worker: the text
  decompressed and decoded 2 MiB at a time, the polars work of each batch on a thread;
- ``parallel``: the same with two worker processes decoding 32 MiB chunks handed over in shared
  memory (``workers=2``);
- ``halves``: a helper process started before this one imports polars decodes the first 45 % of the
  text while this one decodes the rest (``helper=``).

``parallel`` and ``halves`` are the readers #36 removed: run them with the code that has them (a
checkout of b2eb24b with this script copied in, ``PYTHONPATH`` set to it); on today's code only
``whole`` and ``chunks`` run.

The wall time is taken from ``fork`` to ``wait4`` (interpreter, imports, decode), with the CPU time of
the process and of the children it reaped, and its peak RSS (``ru_maxrss``: the largest of the process
and its children). The modes alternate, round after round, in a rotating order, so that every mode sees
the same minutes of this shared machine; the CPU that other processes used meanwhile is reported. The
child also prints its own decode time (``time.perf_counter`` around the call) and the events decoded.

Inputs: ``small``, rank 0 of PARAM DLRM (0.9 MB of JSON); ``mid``, a 10 MB trace and ``big``, a
1 GB trace, grown from the 54 MB one by ``benchmarks/generate.py grow`` into
``benchmarks/out/scale/{mid,big}.json.gz`` (made when missing); ``single``, the 54 MB
``hta_df_index_resolver`` trace.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

MODES = ("whole", "chunks", "parallel", "halves")
RESULT_PREFIX = "BENCH_RESULT "


def child(mode: str, path: Path) -> None:
    """Decode ``path`` with ``mode`` in this process; print one ``BENCH_RESULT`` line."""
    helper = None
    if mode == "halves":  # before polars is imported, as the command did
        from timeline.executors import LocalExecutor

        helper = LocalExecutor(2)
        helper.start(preload="timeline.importers.stream")
    start = time.perf_counter()
    from timeline.importers.files import read_trace_bytes
    from timeline.importers.kineto import parse_kineto
    from timeline.importers.result import ImportOptions
    from timeline.importers.stream import parse_kineto_stream

    imported = time.perf_counter()
    options = ImportOptions()
    source = str(path)
    if mode == "whole":
        result = parse_kineto(read_trace_bytes(path, []), source=source, options=options)
    elif mode == "chunks":
        result = parse_kineto_stream(path, source=source, options=options, spare_core=True)
    else:  # the readers removed by #36: only with the code that still has them (git show a564d8c)
        how: dict[str, Any] = {"workers": 2} if mode == "parallel" else {"helper": helper}
        result = parse_kineto_stream(path, source=source, options=options, **how)
    done = time.perf_counter()
    hwm = _status_kib("VmHWM")
    import multiprocessing

    for process in multiprocessing.active_children():  # reaped: their CPU counts in wait4's
        process.join(timeout=60)
    print(
        RESULT_PREFIX
        + json.dumps(
            {
                "import_s": imported - start,
                "decode_s": done - imported,
                "events": result.events.height,
                "self_peak_kib": hwm,
            }
        ),
        flush=True,
    )
    os._exit(0)  # no interpreter teardown (what `timeline` does too)


def _status_kib(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def _inputs(keys: list[str]) -> dict[str, Path]:
    from benchmarks.generate import DEFAULT_SOURCE, TRACES

    out: dict[str, Path] = {}
    for key in keys:
        if key == "single":
            out[key] = DEFAULT_SOURCE
        elif key == "small":
            out[key] = next((TRACES / "kineto" / "param_dlrm_8rank").glob("worker0_*.json.gz"))
        else:
            size = {"mid": "10M", "big": "1G"}[key]
            made = REPO / "benchmarks" / "out" / "scale" / f"{key}.json.gz"
            if not made.exists():  # generated beside, then renamed: never half a file
                made.parent.mkdir(parents=True, exist_ok=True)
                scratch = made.with_suffix(".partial.gz")
                generate = [sys.executable, str(REPO / "benchmarks" / "generate.py"), "grow", "--size", size]
                subprocess.run([*generate, "-o", str(scratch)], check=True, stdout=sys.stderr)
                scratch.rename(made)
            out[key] = made
    return out


def _print_table(results: dict[str, dict[str, list[dict[str, Any]]]]) -> None:
    """Print the Markdown table: one row per input and reader, medians."""
    print(
        "| input | reader | wall median (min–max) s | decode median s | CPU median s | peak RSS median MB "
        "| others' CPU (cores) | runs |"
    )
    print("|---|---|--:|--:|--:|--:|--:|--:|")
    for key, modes in results.items():
        for mode, rows in modes.items():
            ok = [r for r in rows if r["error"] is None and "decode_s" in r]
            if not ok:
                print(f"| {key} | {mode} | {rows[0]['error'] if rows else 'not run'} | | | | | 0 |")
                continue
            walls = [r["wall_s"] for r in ok]

            def med(name: str, rows: list[dict[str, Any]] = ok) -> float:
                return statistics.median(float(r[name]) for r in rows)

            print(
                f"| {key} | {mode} | {med('wall_s'):.3f} ({min(walls):.3f}–{max(walls):.3f}) | "
                f"{med('decode_s'):.3f} | {med('cpu_s'):.2f} | {med('peak_kib') / 1024:.0f} | "
                f"{med('others_cores'):.2f} | {len(ok)} |"
            )


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (or, with ``--child``, one measured decode)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--child", nargs=2, metavar=("MODE", "FILE"))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument(
        "--inputs",
        nargs="+",
        choices=("small", "mid", "single", "big"),
        default=["small", "mid", "single", "big"],
    )
    parser.add_argument("--wait-quiet", type=float, default=0.0, metavar="CORES")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child[0], Path(args.child[1]))
        return 0
    from benchmarks.bench_startup import QUIET, measure, timeline_env
    from benchmarks.quiet import versions

    QUIET["cores"] = args.wait_quiet
    env = timeline_env(dict(os.environ))
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    print(
        f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {versions('timeline', 'polars', 'msgspec')}"
    )
    print(f"# load average before: {os.getloadavg()[0]:.2f}")
    for key, path in _inputs(args.inputs).items():
        results[key] = {mode: [] for mode in args.modes}
        for round_ in range(args.runs + 1):  # round 0: warm-up (page cache), not kept
            shift = round_ % len(args.modes)
            for mode in [*args.modes[shift:], *args.modes[:shift]]:
                command = [sys.executable, str(Path(__file__).resolve()), "--child", mode, str(path)]
                run = measure(command, env, timeout=900)
                row: dict[str, Any] = {"wall_s": run.wall_s, "cpu_s": run.cpu_s, "peak_kib": run.peak_kib}
                row |= {"others_cores": run.others_cores, "error": run.error, **(run.result or {})}
                print(f"{key} {mode} round {round_}: {json.dumps(row)}", file=sys.stderr, flush=True)
                if round_:
                    results[key][mode].append(row)
    print(f"# load average after: {os.getloadavg()[0]:.2f}")
    _print_table(results)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
