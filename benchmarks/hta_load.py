"""Time Holistic Trace Analysis (HTA) loading a trace, for comparison with timeline.

Run with the Python of HTA's own virtual environment (HTA pins pandas and friends that timeline does
not need), one fresh process per measurement so that the peak RSS is that of this run alone::

    python3 -m venv benchmarks/.venv-hta
    benchmarks/.venv-hta/bin/pip install holistictraceanalysis
    benchmarks/.venv-hta/bin/python benchmarks/hta_load.py TRACE [--overlap]

``TRACE`` is a trace file or a directory of per-rank trace files. HTA takes a directory and lists its
``*.gz`` / ``*.json`` files, finding each file's rank with the regex ``"rank":\\s+(\\d+)`` in its
content (not its name); a single file is therefore symlinked, under its own name, into a temporary
directory. The load timed is ``TraceAnalysis(trace_dir=...)``, which reads, gunzips, parses every rank
(in a pool of forked processes when there are several) and builds HTA's pandas frames; with
``--overlap`` ``get_comm_comp_overlap(visualize=False)`` is timed as well.

Prints one line ``BENCH_RESULT {json}`` (other lines are HTA's own log messages) with:

- ``import_s``: importing ``hta.trace_analysis`` (not part of ``load_s``);
- ``load_s``, ``overlap_s``: wall times (``time.perf_counter``);
- ``events``: rows of HTA's frames over all ranks;
- ``rss_import_kib``: RSS after the imports (``VmRSS``), ``rss_load_kib``: peak RSS after the load,
  ``rss_overlap_kib``: after the overlap (``VmHWM`` of ``/proc/self/status``, KiB);
- ``rss_children_kib``: ``ru_maxrss`` of the worker processes (HTA parses several ranks in forked
  workers): the largest of their peaks, not their sum, and at least this process's RSS at the fork;
- ``overlap_pct``: HTA's ``comp_comm_overlap_pctg`` per rank, to cross-check timeline's result.
"""

from __future__ import annotations

import argparse
import json
import logging
import resource
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any


def _proc_status_kib(field: str) -> int:
    """Return a memory field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``), KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _peak_kib() -> int:
    """Return the peak RSS of this process (``VmHWM``), KiB.

    Not ``getrusage().ru_maxrss``: on Linux that survives ``fork`` + ``exec``, so it would report the
    peak of the benchmark process that started this one when that is higher.
    """
    return _proc_status_kib("VmHWM")


def _trace_dir(path: Path, scratch: Path) -> Path:
    """Return a directory HTA can load: ``path`` itself, or a scratch directory holding a link to it."""
    if path.is_dir():
        return path
    link = scratch / path.name
    link.symlink_to(path.resolve())
    return scratch


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("trace", type=Path, help="a trace file or a directory of per-rank trace files")
    parser.add_argument("--overlap", action="store_true", help="also time get_comm_comp_overlap()")
    args = parser.parse_args(argv)

    t0 = time.perf_counter()
    from hta.trace_analysis import TraceAnalysis  # type: ignore[import-not-found]

    import_s = time.perf_counter() - t0
    # HTA logs every file it parses at INFO level; keep stdout for the result.
    logging.getLogger("hta").setLevel(logging.WARNING)
    rss_import = _proc_status_kib("VmRSS")

    result: dict[str, Any] = {"tool": "hta", "version": metadata.version("holistictraceanalysis")}
    with tempfile.TemporaryDirectory(prefix="hta-bench-") as scratch:
        trace_dir = _trace_dir(args.trace, Path(scratch))
        t1 = time.perf_counter()
        analysis = TraceAnalysis(trace_dir=str(trace_dir))
        load_s = time.perf_counter() - t1
        rss_load = _peak_kib()
        traces: dict[int, Any] = analysis.t.traces
        result.update(
            import_s=import_s,
            load_s=load_s,
            events=int(sum(len(df) for df in traces.values())),
            ranks=sorted(int(r) for r in traces),
            rss_import_kib=rss_import,
            rss_load_kib=rss_load,
        )
        if args.overlap:
            t2 = time.perf_counter()
            overlap = analysis.get_comm_comp_overlap(visualize=False)
            result["overlap_s"] = time.perf_counter() - t2
            result["rss_overlap_kib"] = _peak_kib()
            result["overlap_pct"] = {
                str(int(rank)): float(pct)
                for rank, pct in zip(overlap["rank"], overlap["comp_comm_overlap_pctg"], strict=True)
            }
    # The largest peak of a forked worker (HTA parses several ranks in a pool); not their sum.
    result["rss_children_kib"] = int(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    sys.stdout.write("BENCH_RESULT " + json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
