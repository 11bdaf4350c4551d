"""Builders shared by the test packages (one module: no test module imports from another).

Canonical event frames, small trace files, the malformed inputs every command must refuse with one
error line, the installed ``timeline`` console script run in a subprocess, and PyTorch Flight
Recorder dumps of a simulated job with known faults (with a plain reading of dumps to check against).
"""

from __future__ import annotations

import ast
import gzip
import hashlib
import importlib.util
import io
import json
import math
import os
import pickle
import subprocess
import sys
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl
from polars.testing import assert_frame_equal

from timeline.analysis.overlap import Overlap
from timeline.schema import EVENTS_SCHEMA, validate

if TYPE_CHECKING:
    from timeline.budgets.frames import MetricFrames
    from timeline.results.summary import Summary
    from timeline.run import Run
    from timeline.trace import Trace

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
TRACES = SHARED / "traces"
REPO = Path(__file__).resolve().parents[1]
PARAM = TRACES / "kineto" / "param_dlrm_8rank"
EPOCH_US = 1_700_000_000_000_000


def gpu(kind: str, start: int, end: int, *, rank: int = 0, stream: int = 7, **extra: Any) -> dict[str, Any]:
    """A GPU activity on device 0: kind 'compute', 'communication', 'memcpy' or 'memset'."""
    return {
        "rank": rank,
        "kind": kind,
        "start_ns": start,
        "end_ns": end,
        "device": 0,
        "stream": stream,
        "pid": 0,
        "tid": stream,
        "cat": "kernel",
        **extra,
    }


def cpu(kind: str, start: int, end: int, *, rank: int = 0, tid: int = 1, **extra: Any) -> dict[str, Any]:
    """A CPU event on thread ``tid`` of process 100."""
    return {
        "rank": rank,
        "kind": kind,
        "start_ns": start,
        "end_ns": end,
        "pid": 100,
        "tid": tid,
        "cat": "cpu_op",
        **extra,
    }


def step(n: int, start: int, end: int, *, rank: int = 0) -> dict[str, Any]:
    """A ``ProfilerStep#n`` annotation on the main thread."""
    return cpu("annotation", start, end, rank=rank, name=f"ProfilerStep#{n}", cat="user_annotation")


def gloo_all_reduce(
    start: int, end: int, *, rank: int = 0, nbytes: int = 4000, tid: int = 2
) -> dict[str, Any]:
    """A gloo all-reduce of ``nbytes`` on a CPU rank's communication thread ``tid`` (a 2-rank group)."""
    return cpu(
        "communication",
        start,
        end,
        rank=rank,
        tid=tid,
        name="gloo:all_reduce",
        cat="user_annotation",
        collective="all_reduce",
        in_bytes=nbytes,
        group_size=2,
    )


def cpu_all_reduce_call(
    call: int, comm: tuple[int, int], *, rank: int = 0, nbytes: int = 4000
) -> list[dict[str, Any]]:
    """A blocking all-reduce on a CPU rank: the ``c10d::allreduce_`` call at ``call`` (1 µs), the gloo
    transfer over ``comm`` on the communication thread, and the main thread waiting for it until its end."""
    return [
        cpu("cpu_op", call, call + 1_000, rank=rank, name="c10d::allreduce_"),
        gloo_all_reduce(*comm, rank=rank, nbytes=nbytes),
        cpu("sync", call + 1_000, comm[1], rank=rank, name="c10d::wait"),
    ]


def after_backward_rank(rank: int) -> list[dict[str, Any]]:
    """One CPU rank, one 100 µs step: gradients of 1,000 bytes ready at 30, 45 and 60 µs (markers) during
    a backward pass [0, 60); three blocking all-reduces called after it at 60, 70, 80 (10 µs each); the
    update [90, 100). Communication that could have overlapped the backward pass, and did not."""
    us = 1_000
    rows: list[dict[str, Any]] = [
        step(1, 0, 100 * us, rank=rank),
        cpu("cpu_op", 0, 60 * us, rank=rank, name="backward"),
        cpu("cpu_op", 90 * us, 100 * us, rank=rank, name="update"),
    ]
    for k, at in enumerate((30, 45, 60)):
        rows.append(cpu("cpu_op", at * us, at * us + 10, rank=rank, name=f"timeline.grad_ready:p{k}:1000"))
    for call in (60, 70, 80):
        rows += cpu_all_reduce_call(call * us, (call * us, (call + 10) * us), rank=rank, nbytes=1000)
    return rows


def launch(correlation: int, at: int, *, rank: int = 0) -> dict[str, Any]:
    """A runtime kernel launch at ``at`` with a correlation id."""
    return cpu(
        "runtime", at, at + 1, rank=rank, name="cudaLaunchKernel", cat="cuda_runtime", correlation=correlation
    )


def make_events(rows: list[dict[str, Any]]) -> pl.DataFrame:
    """Return a canonical events frame from partial rows (missing columns are null)."""
    filled = []
    for row in rows:
        full: dict[str, Any] = dict.fromkeys(EVENTS_SCHEMA.names())
        full.update({"source": "kineto", "name": row.get("name", row["kind"])})
        full.update(row)
        full["dur_ns"] = full["end_ns"] - full["start_ns"]
        filled.append(full)
    frame = pl.DataFrame(
        filled,
        schema_overrides={"kind": pl.String, "source": pl.String, "name": pl.String, "cat": pl.String},
        infer_schema_length=None,
    )
    for name in EVENTS_SCHEMA.names():
        if name not in frame.columns:
            frame = frame.with_columns(pl.lit(None).alias(name))
    return validate(frame, EVENTS_SCHEMA, what="test events")


def run_of(
    source: pl.DataFrame | Trace,
    *,
    files: pl.DataFrame | None = None,
    groups: pl.DataFrame | None = None,
    **options: Any,
) -> Run:
    """Return the :class:`~timeline.run.Run` of events built in a test, or of a loaded trace.

    ``files``: the trace's file table (default: none, so no world size); ``groups``: its declared
    process groups; ``options``: :class:`~timeline.run.RunOptions` fields.
    """
    from timeline.run import Run, RunOptions
    from timeline.schema import FILES_SCHEMA, PROCESS_GROUPS_SCHEMA
    from timeline.trace import Trace

    if isinstance(source, Trace):
        return Run.from_trace(source, RunOptions(**options))
    trace = Trace(
        events=source,
        files=files if files is not None else FILES_SCHEMA.to_frame(),
        groups=groups if groups is not None else PROCESS_GROUPS_SCHEMA.to_frame(),
    )
    return Run.from_trace(trace, RunOptions(**options))


def frames_of(
    source: pl.DataFrame | Trace,
    *,
    label: str = "run",
    matched: bool = False,
    dimensions: bool = False,
    diagnosed: bool = False,
    files: pl.DataFrame | None = None,
    **options: Any,
) -> MetricFrames:
    """Return the budgets' frames of events built in a test, or of a loaded trace (:func:`run_of`)."""
    from timeline.budgets.frames import frames_of_run

    run = run_of(source, files=files, **options)
    return frames_of_run(run, label=label, matched=matched, dimensions=dimensions, diagnosed=diagnosed)


def older_summary(summary: Summary, *, version: int) -> dict[str, Any]:
    """Return the plain JSON a timeline before #36 wrote for this summary: layout ``version`` (1 to 3).

    Layout 3: ``version`` first (no ``kind``, ``timeline``), the per-rank rows' span named
    ``step_ns``, ``clock_offsets``, ``utilisation`` and ``flight_recorder`` only when set, none of
    the figures layout 4 added; 2: no ``dimensions`` either; 1: no ``verdict`` and ``findings``.
    """
    import msgspec

    added = ("kind", "timeline", "iterations_across_ranks", "iterations_by_exposure")
    plain: dict[str, Any] = {k: v for k, v in msgspec.to_builtins(summary).items() if k not in added}
    for key in ("clock_offsets", "utilisation", "flight_recorder"):
        if plain[key] is None:
            del plain[key]
    plain["ranks"] = [
        {("step_ns" if k == "span_ns" else k): v for k, v in row.items()} for row in plain["ranks"]
    ]
    if plain["dimensions"] is not None:
        plain["dimensions"] = {k: v for k, v in plain["dimensions"].items() if k != "across_ranks"}
    plain["version"] = version
    if version < 3:
        del plain["dimensions"]
    if version < 2:
        del plain["verdict"], plain["findings"]
    return plain


# --- the console script -------------------------------------------------------------------------------


def raw_sample_traces(sample: str) -> dict[int, dict[str, Any]]:
    """Return each rank's raw JSON of a sample (``sample_traces/SAMPLE/rank*.pt.trace.json.gz``), by rank.

    Read with the standard library only: the plain-Python references of the tests compute from it.
    """
    traces = {}
    for path in sorted((SAMPLES / sample).glob("rank*.pt.trace.json.gz")):
        with gzip.open(path, "rb") as f:
            trace = json.loads(f.read())
        traces[trace["distributedInfo"]["rank"]] = trace
    return traces


def timeline_command() -> list[str]:
    """The console script installed beside this interpreter, else its entry point through ``-c``."""
    script = Path(sys.executable).with_name("timeline")
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-c", "from cli.main import main; main()"]


def run_timeline(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``timeline ARGS`` and return its exit code, stdout and stderr (never raises on failure).

    Its output is 200 columns wide (``COLUMNS``): a test reads whole lines whatever its own process
    exports (pytest imports readline, which exports the terminal's ``COLUMNS``, often 80).
    """
    return subprocess.run(
        [*timeline_command(), *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
        timeout=300,
        env={**os.environ, "COLUMNS": "200"},
    )


# --- small trace files --------------------------------------------------------------------------------


def tiny_kineto(rank: int | None = None) -> bytes:
    """A Kineto trace of one kernel, with ``distributedInfo`` of a 2-rank job when ``rank`` is given."""
    doc: dict[str, Any] = {
        "schemaVersion": 1,
        "traceEvents": [
            {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": EPOCH_US, "dur": 5,
             "args": {"device": 0, "stream": 7}},
        ],
    }  # fmt: skip
    if rank is not None:
        doc["distributedInfo"] = {"rank": rank, "world_size": 2}
    return json.dumps(doc).encode()


def write_horovod_run_kineto(path: Path, *, rank: int = 0) -> None:
    """Rank 0's profiler trace: step 1 over [0, 400) µs, compute [100, 220), an NCCL kernel [150, 300).

    The profile of the run :func:`write_horovod_run_timeline` writes the Horovod timeline of.
    """

    def kernel(name: str, ts: int, dur: int) -> dict[str, Any]:
        return {
            "ph": "X",
            "cat": "kernel",
            "name": name,
            "pid": 0,
            "tid": 7,
            "ts": EPOCH_US + ts,
            "dur": dur,
            "args": {"device": 0, "stream": 7},
        }

    doc = {
        "schemaVersion": 1,
        "distributedInfo": {"rank": rank, "world_size": 2, "backend": "nccl"},
        "traceEvents": [
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": "ProfilerStep#1",
                "pid": 100,
                "tid": 1,
                "ts": EPOCH_US,
                "dur": 400,
            },
            kernel("volta_sgemm_128x64_nn", 100, 120),
            kernel("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", 150, 150),
        ],
    }
    path.write_text(json.dumps(doc))


def write_horovod_run_timeline(path: Path, *, header: bool = True) -> None:
    """One tensor: negotiation [0, 100), QUEUE [110, 120), wire [120, 320) µs since the header."""
    records: list[dict[str, Any]] = []
    if header:
        records.append(
            {
                "name": "process_name",
                "ph": "M",
                "pid": 0,
                "args": {"start_time_since_epoch_in_micros": EPOCH_US},
            }
        )
    records += [
        {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "allreduce.w"}},
        {"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": 0, "pid": 1},
        {"ph": "X", "name": "0", "ts": 0, "pid": 1, "dur": 0},
        {"ph": "X", "name": "1", "ts": 100, "pid": 1, "dur": 0},
        {"ph": "E", "ts": 100, "pid": 1},
        {"ph": "B", "name": "ALLREDUCE", "ts": 110, "pid": 1},
        {"ph": "B", "name": "QUEUE", "ts": 110, "pid": 1},
        {"ph": "E", "ts": 120, "pid": 1},
        {"ph": "B", "name": "NCCL_ALLREDUCE", "ts": 120, "pid": 1},
        {"ph": "E", "ts": 320, "pid": 1},
        {"ph": "E", "ts": 330, "pid": 1, "args": {"dtype": "float32", "shape": "[1000]"}},
    ]
    path.write_text(json.dumps(records))


def stream_kernel_record(i: int) -> str:
    """A kernel record whose name holds braces and a comma, as a streaming parser must skip them."""
    return (
        f'{{"ph": "X", "cat": "kernel", "name": "k{i} }}, {{ in a name", "pid": 0, "tid": 7, '
        f'"ts": {i * 10}.5, "dur": 2.25, "args": {{"device": 0, "stream": 7, "correlation": {i}}}}}'
    )


def stream_trace_text(n: int, *, metadata_after: bool) -> str:
    """A Kineto trace of ``n`` kernel records, one a line, its metadata before or after ``traceEvents``."""
    events = ",\n".join(stream_kernel_record(i) for i in range(n))
    meta = '"distributedInfo": {"rank": 3, "world_size": 4}, "baseTimeNanoseconds": 1700000000000000000'
    if metadata_after:
        return f'{{"schemaVersion": 1, "traceEvents": [\n{events}\n], {meta}, "traceName": "x"}}'
    return f'{{"schemaVersion": 1, {meta}, "traceEvents": [\n{events}\n]}}'


# --- malformed inputs: one error line, exit code 2, from every command that reads traces ---------------


def file_digests(root: Path) -> dict[str, tuple[str, int]]:
    """Content hash and modification time of every file under ``root``."""
    return {
        str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


# Each case writes its inputs under a folder and returns (arguments, expected start of the
# message after "error: ", strings the line must also contain).
BadInput = Callable[[Path], tuple[list[str], str, list[str]]]


def _single(name: str, data: bytes, start: str) -> BadInput:
    def build(root: Path) -> tuple[list[str], str, list[str]]:
        path = root / name
        path.write_bytes(data)
        return [str(path)], start.format(path=path), [str(path)]

    return build


def _missing_rank(root: Path) -> tuple[list[str], str, list[str]]:
    (root / "a.json").write_bytes(tiny_kineto())
    (root / "b.json").write_bytes(tiny_kineto())
    return [str(root)], f"{root / 'a.json'}: no rank:", ["--rank-regex"]


def _duplicate_rank(root: Path) -> tuple[list[str], str, list[str]]:
    (root / "a.json").write_bytes(tiny_kineto(rank=1))
    (root / "b.json").write_bytes(tiny_kineto(rank=1))
    return [str(root)], f"{root / 'b.json'}: rank 1 is also claimed by {root / 'a.json'}", []


def _empty_directory(root: Path) -> tuple[list[str], str, list[str]]:
    folder = root / "traces"
    folder.mkdir()
    (folder / "notes.txt").write_bytes(b"not a trace")
    return [str(folder)], f"{folder}: directory holds no trace files", []


def _missing_file(root: Path) -> tuple[list[str], str, list[str]]:
    (root / "rank0.json").write_bytes(tiny_kineto())
    missing = root / "rank1.json"
    return [str(root / "rank0.json"), str(missing)], f"{missing}: no such file or directory", []


def _pattern_matching_nothing(root: Path) -> tuple[list[str], str, list[str]]:
    (root / "rank0.json").write_bytes(tiny_kineto())
    pattern = str(root / "*.json.gz")
    return [pattern], f"{pattern}: pattern matches no file", []


def _bad_rank_regex(root: Path) -> tuple[list[str], str, list[str]]:
    # The option is what is wrong, so the line names it rather than a file.
    path = root / "gpu0.json"
    path.write_bytes(tiny_kineto())
    return ["--rank-regex", "gpu(", str(path)], "--rank-regex 'gpu(': not a valid regex", []


def _rank_regex_without_group(root: Path) -> tuple[list[str], str, list[str]]:
    path = root / "gpu0.json"
    path.write_bytes(tiny_kineto())
    return ["--rank-regex", r"gpu\d", str(path)], r"--rank-regex 'gpu\\d': needs one capturing group", []


def _rank_regex_matching_no_file(root: Path) -> tuple[list[str], str, list[str]]:
    path = root / "gpu0.json"
    path.write_bytes(tiny_kineto())
    return ["--rank-regex", r"node(\d+)", str(path)], f"{path}: no rank:", []


def _rank_with_several_files(root: Path) -> tuple[list[str], str, list[str]]:
    (root / "rank0.json").write_bytes(tiny_kineto())
    (root / "rank1.json").write_bytes(tiny_kineto())
    return ["--rank", "3", str(root)], "--rank applies to a single file; 2 files given", []


BAD_INPUTS: dict[str, BadInput] = {
    "not JSON": _single("rank0.json", b"hello world\n", "{path}:1:1: not a trace"),
    "binary": _single("rank0.json", bytes(range(256)), "{path}:1:1: not a trace"),
    "truncated beyond repair": _single(
        "rank0.json",
        b'{"traceEvents": [{"ph": "X", "cat": "kernel", "na',
        "{path}:1:50: input data was truncated",
    ),
    "unrepairable record": _single(
        "rank0.json",
        b'{"traceEvents": [\n  {"ph": "X", "dur": 1, "ts": }\n]}',
        "{path}:2:31: invalid character",
    ),
    "empty file": _single("rank0.json", b"", "{path}:1:1: empty file"),
    "whitespace only": _single("rank0.json", b"  \n\n", "{path}:1:1: empty file"),
    "empty traceEvents": _single("rank0.json", b'{"traceEvents": []}', "{path}: traceEvents holds no events"),
    "object without traceEvents": _single(
        "rank0.json", b'{"schemaVersion": 1, "deviceProperties": []}', "{path}:1:1: no traceEvents array"
    ),
    "JSON number": _single("rank0.json", b"42\n", "{path}:1:1: not a trace"),
    "JSON string": _single("rank0.json", b'"trace"', "{path}:1:1: not a trace"),
    "damaged gzip": _single("rank0.json.gz", b"\x1f\x8b" + b"\x00" * 40, "{path}:1:1: damaged gzip file"),
    "empty gzip": _single("rank0.json.gz", gzip.compress(b""), "{path}:1:1: empty file"),
    "foreign parquet": _single("run.parquet", b"PAR1" + b"\x00" * 16 + b"PAR1", "{path}:"),
    "missing rank": _missing_rank,
    "duplicate rank": _duplicate_rank,
    "directory without traces": _empty_directory,
    "missing file": _missing_file,
    "pattern matching nothing": _pattern_matching_nothing,
    "bad --rank-regex": _bad_rank_regex,
    "--rank-regex without a group": _rank_regex_without_group,
    "--rank-regex matching no file": _rank_regex_matching_no_file,
    "--rank with several files": _rank_with_several_files,
}
"""Malformed inputs by name: each writes its files under a folder (left untouched by the command)."""


# --- the runs every rank-by-rank path is compared on with the in-memory analysis -----------------
# (tests/execution, tests/cli/test_commands_by_rank.py)

SAMPLES = REPO / "sample_traces"
SAMPLE_HOROVOD = SAMPLES / "horovod" / "horovod_v021.json"
KINETO = TRACES / "kineto"

CASES: dict[str, list[Path]] = {
    "param_dlrm_8rank": [PARAM],
    "ddp_gloo_4rank": [SAMPLES / "ddp_gloo_4rank"],
    "ddp_gloo_windows": [SAMPLES / "ddp_gloo_markers"],
    "trace_filter_2rank": [KINETO / "hta_trace_filter_2rank"],
    # one file: control.json.gz is rank 3 of another run (world size 8), refused beside it (#19)
    "trace_diff": [KINETO / "hta_trace_diff" / "test.json.gz"],
    "nccl_parser_config": [KINETO / "hta_nccl_parser_config"],
    "negative_queue_length": [KINETO / "hta_negative_queue_length"],
    "horovod": [SAMPLE_HOROVOD],
    "horovod_beside_kineto": [SAMPLE_HOROVOD, SAMPLES / "ddp_gloo"],
}


def assert_overlap_equal(expected: Overlap, got: Overlap) -> None:
    """Every view of two overlap analyses is equal, row for row."""
    for view in ("ranks", "iterations", "collectives", "windows", "comm"):
        left: pl.DataFrame = getattr(expected, view)
        right: pl.DataFrame = getattr(got, view)
        try:
            assert_frame_equal(left, right)
        except AssertionError as exc:
            raise AssertionError(f"{view}: {exc}") from None


# --- a small GPU run: ProfilerStep#N, a GEMM and an NCCL all-reduce per step (tests of #19) -------------

STEP_US = 1000
"""Each step of :func:`gpu_run_kineto` lasts 1 ms: GEMM [100, 400) µs, all-reduce [450, 650) µs in it."""
NCCL_KERNEL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"


def gpu_kernel(name: str, ts: float, dur: float, *, correlation: int | None = None) -> dict[str, Any]:
    """A Kineto GPU kernel record on device 0, stream 7 (``ts`` and ``dur`` in µs)."""
    args: dict[str, Any] = {"device": 0, "stream": 7}
    if correlation is not None:
        args["correlation"] = correlation
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur, "args": args}


def profiler_step(n: int, ts: float, dur: float) -> dict[str, Any]:
    """A ``ProfilerStep#n`` record on the main CPU thread (µs)."""
    return {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": 100, "tid": 1,
            "ts": ts, "dur": dur}  # fmt: skip


def gpu_run_kineto(
    rank: int | None,
    *,
    world_size: int | None = 2,
    base_us: float = EPOCH_US,
    steps: int = 3,
    extra: list[dict[str, Any]] | None = None,
    base_time_ns: int | None = None,
) -> dict[str, Any]:
    """A Kineto trace of ``steps`` steps of :data:`STEP_US` from ``base_us``, each launching a GEMM
    [100, 400) µs and an all-reduce [450, 650) µs into the step, plus ``extra`` records.

    ``distributedInfo`` holds ``rank`` and ``world_size`` where given (none when both are None).
    """
    records: list[dict[str, Any]] = []
    correlation = 1
    for s in range(steps):
        t0 = base_us + s * STEP_US
        records.append(profiler_step(s + 1, t0, STEP_US))
        for offset, dur, name in ((100, 300, "volta_sgemm_128x64_nn"), (450, 200, NCCL_KERNEL)):
            launch_at = t0 + offset - 50
            records.append(
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": 1,
                 "ts": launch_at, "dur": 5, "args": {"correlation": correlation}}
            )  # fmt: skip
            records.append(gpu_kernel(name, t0 + offset, dur, correlation=correlation))
            correlation += 1
    records += extra or []
    doc: dict[str, Any] = {"schemaVersion": 1, "traceEvents": records}
    info = {key: value for key, value in (("rank", rank), ("world_size", world_size)) if value is not None}
    if info:
        doc["distributedInfo"] = {**info, "backend": "nccl"}
    if base_time_ns is not None:
        doc["baseTimeNanoseconds"] = base_time_ns
    return doc


def write_json(path: Path, doc: Any) -> Path:
    """Write ``doc`` as JSON to ``path``; return the path."""
    path.write_text(json.dumps(doc))
    return path


# -- real captures of the demo jobs on a device mesh (tests/capture/jobs) ----------------------


def capture_job_traces(out: Path, job: str) -> dict[int, dict[str, Any]]:
    """Run the demo ``job`` on 4 gloo ranks (steps 1-2 recorded) into ``out``; return the traces by rank.

    The traces are read from the gzipped files with the standard library, independently of
    timeline's importer. Takes 10-20 s on 2 cores.
    """
    import pytest

    from timeline.capture import DemoSettings, import_torch, run_demo

    if importlib.util.find_spec("torch") is None:
        pytest.skip("needs torch")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)
        dist = import_torch().distributed
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch was built without gloo")
    settings = DemoSettings(job=job, ranks=4, steps=3, wait=0, warmup=1, active=2, timeout_s=240)
    result = run_demo(out, settings=settings)
    traces: dict[int, dict[str, Any]] = {}
    for path in result.files:
        with gzip.open(path, "rb") as f:
            trace: dict[str, Any] = json.loads(f.read())
        traces[trace["distributedInfo"]["rank"]] = trace
    assert sorted(traces) == [0, 1, 2, 3], [p.name for p in result.files]
    return traces


def mesh_groups(rank: int, world_size: int) -> tuple[list[int], list[int]]:
    """Return the ranks of ``rank``'s groups along dims 0 and 1 of a ``(2, world_size // 2)`` mesh.

    The mesh is ``arange(world_size).view(2, -1)``: dim 0 groups are its columns, dim 1 groups its rows.
    """
    width = world_size // 2
    return [rank % width, rank % width + width], [rank // width * width + i for i in range(width)]


def assert_mesh_pg_config(traces: dict[int, dict[str, Any]], dims: tuple[str, str]) -> None:
    """Assert each rank's ``pg_config``: the default group and its groups along the mesh ``dims``.

    The mesh is ``(2, 2)`` over ranks 0-3; every member of a group must call it by the same
    ``pg_name``, and the 5 groups (default, two per dimension) must have 5 different names.
    """
    names: dict[tuple[str, tuple[int, ...]], set[str]] = {}
    for rank, trace in traces.items():
        info = trace["distributedInfo"]
        assert (info["backend"], info["rank"], info["world_size"], info["pg_count"]) == ("gloo", rank, 4, 5)
        groups = groups_by_description(trace)
        first, second = mesh_groups(rank, 4)
        assert {desc: ranks for desc, (_, ranks) in groups.items()} == {
            "default_pg": [0, 1, 2, 3],
            f"mesh_{dims[0]}": first,
            f"mesh_{dims[1]}": second,
        }
        for desc, (name, ranks) in groups.items():
            names.setdefault((desc, tuple(ranks)), set()).add(name)
    assert all(len(found) == 1 for found in names.values()), names
    assert len({name for found in names.values() for name in found}) == len(names) == 5


def groups_by_description(trace: dict[str, Any]) -> dict[str, tuple[str, list[int]]]:
    """Return ``pg_desc → (pg_name, ranks)`` from a trace's ``distributedInfo.pg_config``."""
    groups = {g["pg_desc"]: (g["pg_name"], g["ranks"]) for g in trace["distributedInfo"]["pg_config"]}
    assert len(groups) == len(trace["distributedInfo"]["pg_config"]), "a description listed twice"
    for group in trace["distributedInfo"]["pg_config"]:
        assert group["pg_size"] == len(group["ranks"])
    return groups


def step_events(trace: dict[str, Any], name: str) -> list[list[dict[str, Any]]]:
    """Return, for each ``ProfilerStep#`` in order, the complete events called ``name`` starting in it."""
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    steps = sorted(
        (int(e["name"].removeprefix("ProfilerStep#")), e["ts"], e["ts"] + e["dur"])
        for e in events
        if e["name"].startswith("ProfilerStep#")
    )
    named = sorted((e for e in events if e["name"] == name), key=lambda e: e["ts"])
    return [[e for e in named if start <= e["ts"] < end] for _, start, end in steps]


def thread_names(trace: dict[str, Any]) -> dict[int, str]:
    """Return ``tid → name`` from a trace's ``thread_name`` metadata records."""
    return {
        e["tid"]: e["args"]["name"]
        for e in trace["traceEvents"]
        if e.get("ph") == "M" and e.get("name") == "thread_name"
    }


def loaded_collectives(run_dir: Path) -> Counter[tuple[int, str]]:
    """Count the communication events of a run folder by ``(rank, collective)`` through ``timeline.load``."""
    from timeline.trace import load

    events = load([run_dir], workers=1).events.filter(pl.col("kind") == "communication")
    return Counter(
        zip(events.get_column("rank").to_list(), events.get_column("collective").to_list(), strict=True)
    )


def raw_gloo_collectives(traces: dict[int, dict[str, Any]]) -> Counter[tuple[int, str]]:
    """Count the ``gloo:<collective>`` events of raw traces by ``(rank, collective)``."""
    return Counter(
        (rank, e["name"].removeprefix("gloo:"))
        for rank, trace in traces.items()
        for e in trace["traceEvents"]
        if e.get("ph") == "X" and e["name"].startswith("gloo:")
    )


# --- PyTorch Flight Recorder dumps: a small job simulated with known faults (tests of #24) ------------
#
# Flight Recorder dumps written by the project's own generator: a small job simulated, its faults known.
#
# The layout is copied field by field from torch's writer (``FlightRecorderDetail.hpp``:
# ``getCollectiveTrace``, ``getPgConfig``, ``getPgStatus``, ``dump_dict`` pickled with protocol 2;
# ``dump_json``) and checked against the real dumps in ``../shared/traces/flight_recorder`` (2.9) and
# a gloo job's dump made with torch 2.13 (2.10):
#
# - pickle: a dict ``version``, ``pg_config`` (name → ``{name, desc, ranks}``, ranks as the text
#   ``"[0, 1]"``), ``comm_lib_version`` (``nccl_version`` up to 2.9), ``pg_status`` (the rank-local
#   ``pg_id`` as text → ``last_enqueued_collective``, ``last_started_collective``,
#   ``last_completed_collective``, -1 for none), ``entries`` (a list of dicts; ``process_group`` a
#   tuple);
# - JSON: the same with keys sorted, ``process_group`` a list, ``pg_status`` values as text,
#   ``time_discovered_*`` 0 when not discovered, no ``entries`` key when there are none.
#
# :func:`simulate` runs a program of collectives over process groups on every rank, with faults:
# ``host_stop`` (a rank never issues a step and anything after it: its host stopped),
# ``device_stop`` (a rank's device never starts a step nor anything after it: with timing on, its
# ``last_started`` stays behind), ``blind`` (a rank's watchdog sees no completion from a step on while
# its peers complete them, as in the GPU-error dumps of the shared set), ``desync`` (a rank issues
# another collective at a step). Each rank's device runs its steps in program order, one at a time;
# a collective completes when every member started it and all issued the same one.

EPOCH_NS = 1_758_610_505_000_000_000
"""When the simulated job starts (2025-09-23, like the shared dumps)."""
_STEP_NS = 1_000_000  # each step of the program is issued 1 ms after the previous one
_DURATION_MS = 0.25

_ELEMENT_SIZE = {"Float": 4, "BFloat16": 2, "Half": 2, "Long": 8, "Byte": 1}


@dataclass(frozen=True)
class Group:
    """A process group: its torch name, description (``pg_desc``) and global member ranks."""

    name: str
    desc: str
    ranks: tuple[int, ...]


@dataclass(frozen=True)
class Step:
    """One collective of the program, in one group: its op (a torch op name), shape and dtype."""

    group: str
    op: str
    shape: tuple[int, ...] = (1024,)
    dtype: str = "Float"


@dataclass(frozen=True)
class Faults:
    """What goes wrong: rank → index of the program step from which it happens (see the module)."""

    host_stop: Mapping[int, int] = field(default_factory=dict)
    device_stop: Mapping[int, int] = field(default_factory=dict)
    blind: Mapping[int, int] = field(default_factory=dict)
    desync: Mapping[tuple[int, int], Step] = field(default_factory=dict)


def _sizes(step: Step, size: int) -> tuple[list[list[int]], list[list[int]]]:
    """Input and output sizes as torch records them for the op (all_gather: output ``size`` times)."""
    shape = list(step.shape)
    if step.op in ("_all_gather_base", "all_gather"):
        return [shape], [[shape[0] * size, *shape[1:]]]
    if step.op in ("_reduce_scatter_base", "reduce_scatter"):
        return [shape], [[shape[0] // size, *shape[1:]]]
    return [shape], [shape]


def _entry(
    *, record_id: int, pg_id: int, group: Group, seq: int, op_id: int, step: Step, created: int,
    started: int | None, completed: int | None, timing: bool,
) -> dict[str, Any]:  # fmt: skip
    """One entry, its keys in the order ``getCollectiveTrace`` inserts them."""
    inputs, outputs = _sizes(step, len(group.ranks))
    entry: dict[str, Any] = {
        "record_id": record_id,
        "pg_id": pg_id,
        "process_group": (group.name, group.desc),
        "thread_name": "pt_main_thread",
        "thread_id": "140000000000000",
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "op_id": op_id,
        "profiling_name": f"nccl:{step.op}",
        "time_created_ns": created,
    }
    if timing and completed is not None:
        entry["duration_ms"] = _DURATION_MS
    entry.update(
        {
            "input_sizes": inputs,
            "input_dtypes": [step.dtype],
            "output_sizes": outputs,
            "output_dtypes": [step.dtype],
            "state": "completed"
            if completed is not None
            else "started"
            if started is not None
            else "scheduled",
            "time_discovered_started_ns": started,
            "time_discovered_completed_ns": completed,
            "retired": completed is not None,
            "timeout_ms": 600000,
            "is_p2p": False,
        }
    )
    return entry


def _run(groups: Sequence[Group], program: Sequence[Step], faults: Faults) -> dict[str, Any]:
    """Play the program: which rank issued, started and completed (as it sees it) each step."""
    by_name = {g.name: g for g in groups}
    world = sorted({r for g in groups for r in g.ranks})
    issued: dict[int, list[int]] = {r: [] for r in world}
    started: dict[int, set[int]] = {r: set() for r in world}
    seen_done: dict[int, set[int]] = {r: set() for r in world}
    blocked: set[int] = set()  # ranks whose device waits on a step that never completes
    for i, step in enumerate(program):
        members = by_name[step.group].ranks
        for r in members:
            if i < faults.host_stop.get(r, math.inf):
                issued[r].append(i)
        can_start = [
            r
            for r in members
            if i in issued[r] and r not in blocked and i < faults.device_stop.get(r, math.inf)
        ]
        for r in can_start:
            started[r].add(i)
        ops = {faults.desync.get((r, i), step) for r in members}
        if len(can_start) == len(members) and len(ops) == 1:
            for r in members:
                if i < faults.blind.get(r, math.inf):
                    seen_done[r].add(i)
        else:
            blocked.update(members)
    return {"issued": issued, "started": started, "done": seen_done}


def simulate(
    groups: Sequence[Group],
    program: Sequence[Step],
    *,
    faults: Faults | None = None,
    timing: bool = False,
    only_active: bool = False,
    buffer: int = 2000,
    version: str = "2.10",
) -> dict[int, dict[str, Any]]:
    """Return each rank's dump (a dict as torch pickles it) after the program ran with the faults.

    ``timing``: ``TORCH_NCCL_ENABLE_TIMING`` (start times, ``last_started``, durations);
    ``only_active``: keep only entries not completed (as torch's dump on timeout may);
    ``buffer``: ``TORCH_NCCL_TRACE_BUFFER_SIZE``, the last entries kept.
    """
    faults = faults or Faults()
    ran = _run(groups, program, faults)
    dumps = {}
    for rank in sorted({r for g in groups for r in g.ranks}):
        mine = [g for g in groups if rank in g.ranks]
        pg_ids = {g.name: uid for uid, g in enumerate(mine)}
        seqs = {g.name: 0 for g in mine}
        status = {g.name: {"last_enqueued_collective": -1, "last_started_collective": -1,
                           "last_completed_collective": -1} for g in mine}  # fmt: skip
        entries: list[dict[str, Any]] = []
        for i in ran["issued"][rank]:
            step = faults.desync.get((rank, i), program[i])
            group = next(g for g in mine if g.name == program[i].group)
            seqs[group.name] += 1
            seq = seqs[group.name]
            created = EPOCH_NS + i * _STEP_NS + rank * 1000
            begun = created + 10_000 if timing and i in ran["started"][rank] else None
            done = created + 300_000 if i in ran["done"][rank] else None
            record = {"last_enqueued_collective": seq}
            if begun is not None:
                record["last_started_collective"] = seq
            if done is not None:
                record["last_completed_collective"] = seq
            status[group.name].update(record)
            entries.append(
                _entry(
                    record_id=len(entries),
                    pg_id=pg_ids[group.name],
                    group=group,
                    seq=seq,
                    op_id=seq,
                    step=step,
                    created=created,
                    started=begun,
                    completed=done,
                    timing=timing,
                )
            )
        if only_active:
            entries = [e for e in entries if e["time_discovered_completed_ns"] is None]
        dumps[rank] = _dump(mine, pg_ids, status, entries[-buffer:], version)
    return dumps


def _dump(
    mine: Sequence[Group],
    pg_ids: Mapping[str, int],
    status: Mapping[str, Mapping[str, int]],
    entries: list[dict[str, Any]],
    version: str,
) -> dict[str, Any]:
    """A rank's dump dict, keys in ``dump_dict``'s order."""
    lib_key = "nccl_version" if tuple(map(int, version.split("."))) < (2, 10) else "comm_lib_version"
    return {
        "version": version,
        "pg_config": {g.name: {"name": g.name, "desc": g.desc, "ranks": str(list(g.ranks))} for g in mine},
        lib_key: "2.27.3",
        "pg_status": {str(pg_ids[g.name]): dict(status[g.name]) for g in mine},
        "entries": entries,
    }


def to_json_dump(dump: Mapping[str, Any]) -> str:
    """The dump as torch's JSON writer writes it (``dump_json``)."""
    out: dict[str, Any] = {k: v for k, v in dump.items() if k != "entries"}
    out["pg_status"] = {
        pg: {key: str(value) for key, value in status.items()} for pg, status in dump["pg_status"].items()
    }
    entries = []
    for entry in dump["entries"]:
        converted = dict(entry)
        converted["process_group"] = list(entry["process_group"])
        for key in ("time_discovered_started_ns", "time_discovered_completed_ns"):
            converted[key] = entry[key] or 0
        entries.append(converted)
    if entries:
        out["entries"] = entries
    return json.dumps(out, sort_keys=True, separators=(",", ":"))


def write_dumps(
    folder: Path, dumps: Mapping[int, Mapping[str, Any]], *, encoding: str = "pickle", prefix: str = "_dump_"
) -> list[Path]:
    """Write each rank's dump to ``folder/<prefix><rank>`` (pickle protocol 2, as torch does, or JSON)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"{prefix}{rank}" for rank in sorted(dumps)]
    for path, rank in zip(paths, sorted(dumps), strict=True):
        if encoding == "pickle":
            path.write_bytes(pickle.dumps(dict(dumps[rank]), protocol=2))
        else:
            path.write_text(to_json_dump(dumps[rank]))
    return paths


def clean_job(world: int = 4, steps: int = 6) -> tuple[list[Group], list[Step]]:
    """A data-parallel job: the world group and two halves, all-reduces and all-gathers in turn."""
    half = world // 2
    groups = [
        Group("0", "default_pg", tuple(range(world))),
        Group("1", "mesh_tp", tuple(range(half))),
        Group("2", "mesh_tp", tuple(range(half, world))),
    ]
    program: list[Step] = []
    for i in range(steps):
        program.append(Step("0", "all_reduce", (4096,), "Float"))
        program.extend(Step(name, "_all_gather_base", (256, 8), "BFloat16") for name in ("1", "2"))
        if i % 2:
            program.append(Step("0", "broadcast", (16,), "Long"))
    return groups, program


# --- an independent reading, for tests: plain Python over the raw dicts, no polars, no timeline ---


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused {module}.{name}")


def read_dump_plainly(path: Path) -> dict[str, Any]:
    """Return a dump's raw dict: pickle (classes refused) or JSON."""
    data = path.read_bytes()
    if data[:1] == b"\x80":
        loaded: dict[str, Any] = _PlainUnpickler(io.BytesIO(data)).load()
        return loaded
    loaded = json.loads(data)
    return loaded


def read_folder_plainly(folder: Path, prefix: str = "_dump_") -> dict[int, dict[str, Any]]:
    """Return every ``<prefix><rank>`` dump of a folder by rank."""
    return {
        int(p.name[len(prefix) :]): read_dump_plainly(p)
        for p in folder.iterdir()
        if p.name.startswith(prefix) and p.name[len(prefix) :].isdigit()
    }


def plain_progress(
    dumps: Mapping[int, Mapping[str, Any]],
) -> dict[tuple[str, tuple[int, ...]], dict[int, tuple[int, int, bool]]]:
    """Per group (name, member ranks), per rank: ``(last_enqueued, last_completed, any_p2p_entry)``.

    A ``pg_status`` id is named by the rank's entries, else by creation order (both numbered in the
    order groups are created); -1 reads as 0. An entry found completed (NCCL: its state; gloo:
    retired) with a higher number than ``pg_status`` says counts as the last completed.
    """
    out: dict[tuple[str, tuple[int, ...]], dict[int, tuple[int, int, bool]]] = {}
    for rank, dump in dumps.items():
        entries = dump.get("entries", [])
        named = {str(e["pg_id"]): e["process_group"][0] for e in entries}
        p2p = {e["process_group"][0] for e in entries if e["is_p2p"]}
        ids = sorted(dump["pg_status"], key=int)
        names = sorted(dump["pg_config"], key=int)
        for i, pg_id in enumerate(ids):
            name = named.get(pg_id, names[i])
            ranks = tuple(ast.literal_eval(dump["pg_config"][name]["ranks"]))
            status = dump["pg_status"][pg_id]
            enqueued = max(int(status["last_enqueued_collective"]), 0)
            done = [
                e["op_id"] if e["profiling_name"].startswith("gloo:") else e["collective_seq_id"]
                for e in entries
                if e["process_group"][0] == name and not e["is_p2p"]
                and (e["state"] == "completed" or (e["retired"] and e["profiling_name"].startswith("gloo:")))
            ]  # fmt: skip
            completed = max([int(status["last_completed_collective"]), 0, *done])
            out.setdefault((name, ranks), {})[rank] = (enqueued, completed, name in p2p)
    return out


def plain_states(progress: Mapping[int, tuple[int, int, bool]]) -> dict[int, str]:
    """The state of each rank of one collective group, by the rules of docs/flight-recorder.md."""
    top = max(c for _, c, _ in progress.values())
    ahead = max(e for e, _, _ in progress.values())
    states = {}
    for rank, (enqueued, completed, _) in progress.items():
        if completed < top:
            states[rank] = "not_completed" if enqueued > completed else "not_entered"
        elif enqueued == completed:
            states[rank] = "not_entered" if ahead > top else "idle"
        else:
            states[rank] = "open"
    stopped = any(s.startswith("not_") for s in states.values())
    return {r: ("waiting" if stopped else "stalled") if s == "open" else s for r, s in states.items()}


def profiler_kernel(
    op: str, seq: int, ts_us: float, nelems: int, dtype: str, correlation: int
) -> dict[str, Any]:
    """A 2026-style Kineto NCCL kernel record of group ``"0"``: collective, group and ``Seq`` in its args."""
    kernel = {"allreduce": "AllReduce", "broadcast": "Broadcast"}[op]
    return {
        "ph": "X", "cat": "kernel", "name": f"ncclDevKernel_{kernel}_RING_LL(ncclDevKernelArgsStorage)",
        "pid": 0, "tid": 7, "ts": ts_us, "dur": 50,
        "args": {"device": 0, "stream": 7, "correlation": correlation, "Collective name": op,
                 "Process Group Name": "0", "Seq": seq, "In msg nelems": nelems, "Out msg nelems": nelems,
                 "dtype": dtype, "Group size": 4},
    }  # fmt: skip


class _Shell:
    """An object whose pickle runs a shell command when a plain unpickler loads it."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[Any, ...]:
        import os

        return (os.system, (self.command,))


def hostile_dump(dump: Mapping[str, Any], marker: Path) -> bytes:
    """A pickle of ``dump`` whose loading with ``pickle.load`` would create ``marker`` (``os.system``)."""
    hostile = dict(dump)
    hostile["entries"] = [*dump.get("entries", []), _Shell(f"touch {marker}")]
    return pickle.dumps(hostile, protocol=2)


# --- plain interval arithmetic over raw Kineto JSON: the reference of the exposure per dimension (#20) --


def interval_union(intervals: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The union of half-open intervals, as disjoint sorted intervals (empty ones dropped)."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(intervals):
        if end <= start:
            continue
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def interval_length(intervals: Sequence[tuple[int, int]]) -> int:
    """The total length of disjoint intervals."""
    return sum(end - start for start, end in intervals)


def interval_intersection(
    a: Sequence[tuple[int, int]], b: Sequence[tuple[int, int]]
) -> list[tuple[int, int]]:
    """The intersection of two sets of disjoint intervals (O(n·m): small inputs)."""
    return [(max(s, t), min(e, f)) for s, e in a for t, f in b if max(s, t) < min(e, f)]


def raw_kernels(
    document: Mapping[str, Any],
) -> tuple[list[tuple[int, int]], list[tuple[str, tuple[int, int]]]]:
    """A raw trace's GPU kernels in ns: compute kernels, and (dimension, interval) of the collective ones.

    A kernel is a collective when its args carry ``Process Group Description`` (``mesh_tp`` -> ``tp``).
    """
    compute: list[tuple[int, int]] = []
    comm: list[tuple[str, tuple[int, int]]] = []
    for event in document["traceEvents"]:
        if event.get("cat") != "kernel":
            continue
        start = round(event["ts"] * 1000)
        interval = (start, start + round(event["dur"] * 1000))
        desc = event["args"].get("Process Group Description")
        if desc is None:
            compute.append(interval)
        else:
            comm.append((desc.removeprefix("mesh_"), interval))
    return compute, comm


def exposure_reference(document: Mapping[str, Any]) -> dict[str, tuple[int, int]]:
    """Per mesh dimension of one rank's raw trace: (exposed, hidden) ns over the whole trace."""
    compute, comm = raw_kernels(document)
    busy = interval_union(compute)
    by_dimension: dict[str, list[tuple[int, int]]] = {}
    for dim, interval in comm:
        by_dimension.setdefault(dim, []).append(interval)
    result = {}
    for dim, intervals in by_dimension.items():
        union = interval_union(intervals)
        hidden = interval_length(interval_intersection(union, busy))
        result[dim] = (interval_length(union) - hidden, hidden)
    return result


# --- plain-Python interval arithmetic (the tests' independent computations) ---------------------------


def merged_intervals(intervals: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """The union of ``[start, end)`` intervals (empty ones dropped), disjoint, by start."""
    out: list[tuple[int, int]] = []
    for a, b in sorted(i for i in intervals if i[1] > i[0]):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def intersection_ns(x: list[tuple[int, int]], y: list[tuple[int, int]]) -> int:
    """The length of the intersection of two lists of disjoint intervals, each by start."""
    i = j = total = 0
    while i < len(x) and j < len(y):
        lo, hi = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        total += max(0, hi - lo)
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return total


# --- Nsight Systems exports, read independently ------------------------------------------------------


def _merged(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def nsys_kernel_exposure(path: Path) -> dict[tuple[int, int], tuple[int, int, int]]:
    """Per (OS pid, CUDA device) of an Nsight Systems export: (communication, hidden, exposed) ns.

    Read with the standard library's ``sqlite3`` from the kernel table alone: a kernel whose
    demangled name starts with ``nccl`` is communication, every other kernel compute; hidden is the
    length of the union of communication intersected with the union of compute (plain interval
    arithmetic, quadratic and obvious).
    """
    import sqlite3

    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    rows = conn.execute(
        "SELECT k.globalPid, k.deviceId, k.start, k.end, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        "JOIN StringIds s ON s.id = k.demangledName"
    ).fetchall()
    conn.close()
    kernels: dict[tuple[int, int], dict[str, list[tuple[int, int]]]] = {}
    for gpid, device, start, end, name in rows:
        sets = kernels.setdefault(((gpid >> 24) & 0xFFFFFF, device), {"comm": [], "compute": []})
        sets["comm" if name.startswith("nccl") else "compute"].append((start, end))
    out = {}
    for key, sets in kernels.items():
        comm, compute = _merged(sets["comm"]), _merged(sets["compute"])
        hidden = sum(max(0, min(e1, e2) - max(s1, s2)) for s1, e1 in comm for s2, e2 in compute)
        length = sum(e - s for s, e in comm)
        out[key] = (length, hidden, length - hidden)
    return out


def latency_bound_gloo_rank(rank: int) -> list[dict[str, Any]]:
    """One CPU (gloo) rank, one 112 µs step whose all-reduces cost exactly 10 µs + 0.8 ns per byte.

    Backward [0, 56); gradients of 1,000, 2,000, 4,000, 8,000 bytes ready at 50, 52, 54, 56, each
    all-reduced at once, one after the other on gloo's thread: [50, 60.8), [60.8, 72.4), [72.4, 85.6),
    [85.6, 102); the update [102, 112) waits for the last."""
    us = 1_000
    rows = [
        step(1, 0, 112 * us, rank=rank),
        cpu("cpu_op", 0, 56 * us, rank=rank, name="backward"),
        cpu("cpu_op", 102 * us, 112 * us, rank=rank, name="update"),
    ]
    start = 50 * us
    for k, nbytes in enumerate((1000, 2000, 4000, 8000)):
        at = (50 + 2 * k) * us
        rows.append(cpu("cpu_op", at - 10, at, rank=rank, name=f"timeline.grad_ready:p{k}:{nbytes}"))
        rows.append(cpu("cpu_op", at, at + 10, rank=rank, name="c10d::allreduce_"))
        end = start + 10 * us + round(0.8 * nbytes)
        rows.append(gloo_all_reduce(start, end, rank=rank, nbytes=nbytes))
        start = end
    return rows


def after_backward_gloo_rank(
    rank: int, sizes: tuple[int, ...] = (1000, 2000, 4000, 8000)
) -> list[dict[str, Any]]:
    """One gloo rank reducing each gradient alone after backward: all-reduces of 10 µs + 0.8 ns per byte.

    Backward [0, 56); gradients of 1, 2, 4 and 8 kB (``sizes``) ready at 50, 52, 54 and 56 µs
    (markers 10 ns long, ending then); their all-reduces, one after the other from 56 µs:
    [56, 66.8), [66.8, 78.4), [78.4, 91.6), [91.6, 108); the update (10 µs) after the last.
    """
    us = 1_000
    rows = [cpu("cpu_op", 0, 56 * us, rank=rank, name="backward")]
    start = 56 * us
    for k, nbytes in enumerate(sizes):
        at = (50 + 2 * k) * us
        rows.append(cpu("cpu_op", at - 10, at, rank=rank, name=f"timeline.grad_ready:p{k}:{nbytes}"))
        rows.append(cpu("cpu_op", start, start + 10, rank=rank, name="c10d::allreduce_"))
        end = start + 10 * us + round(0.8 * nbytes)
        rows.append(gloo_all_reduce(start, end, rank=rank, nbytes=nbytes))
        start = end
    rows.append(cpu("cpu_op", start, start + 10 * us, rank=rank, name="update"))
    return [step(1, 0, start + 10 * us, rank=rank), *rows]


def kineto_document(rows: list[dict[str, Any]], rank: int) -> dict[str, Any]:
    """Return one rank's event rows (as :func:`make_events` takes them) as a gloo rank's Kineto trace (µs)."""
    events = []
    for row in rows:
        if row["rank"] != rank:
            continue
        args: dict[str, Any] = {}
        if row.get("collective"):
            args = {"Collective name": "allreduce", "In msg nelems": row["in_bytes"] // 4, "dtype": "Float",
                    "Group size": 2}  # fmt: skip
        events.append(
            {"ph": "X", "cat": row.get("cat", "cpu_op"), "name": row["name"], "pid": 100, "tid": row["tid"],
             "ts": row["start_ns"] / 1000, "dur": (row["end_ns"] - row["start_ns"]) / 1000, "args": args}
        )  # fmt: skip
    return {"distributedInfo": {"backend": "gloo", "rank": rank, "world_size": 2}, "traceEvents": events}


# --- commands rendered at several widths (tests/cli/test_widths.py, tests/test_docs.py) --------------

_SAMPLES = REPO / "sample_traces"
_FLIGHT = TRACES / "flight_recorder" / "nvrx_megatron16_gpu_error_1st"
_HOROVOD_TF = TRACES / "horovod" / "andrewor14_tf-logs__horovod_timeline__e2205b98.json"
_BUDGET = REPO / "tests" / "cli" / "golden" / "budget.toml"

WIDTH_CASES: dict[str, tuple[str, ...]] = {
    "analyze": ("analyze", str(_SAMPLES / "ddp_gloo")),
    "analyze-mesh-link-align": ("analyze", str(_SAMPLES / "fsdp2_tp_gloo"), "--link-gbps", "10", "--align"),
    "analyze-dlrm": ("analyze", str(PARAM)),
    "analyze-horovod": ("analyze", str(_HOROVOD_TF)),
    "collectives": ("collectives", str(_SAMPLES / "fsdp2_tp_gloo"), "--link-gbps", "100GB"),
    "collectives-horovod": ("collectives", str(_HOROVOD_TF)),
    "whatif": ("whatif", str(_SAMPLES / "ddp_gloo"), "-b", "1,10,100gbe", "-n", "2,8", "--link-gbps", "10"),
    "check": ("check", str(_SAMPLES / "ddp_gloo"), "--budget", str(_BUDGET)),
    "flight-recorder-verdict": ("analyze", str(_FLIGHT)),
    "flight-recorder-progress": ("collectives", str(_FLIGHT)),
}
"""Commands whose output the width tests fit to 60-200 columns and the glossary test reads: analyze,
collectives, whatif, check, the Flight Recorder verdict and progress, on samples and public traces."""
