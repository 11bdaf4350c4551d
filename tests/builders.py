"""Builders shared by the test packages (one module: no test module imports from another).

Canonical event frames, small trace files, the malformed inputs every command must refuse with one
error line, and the installed ``timeline`` console script run in a subprocess.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
from polars.testing import assert_frame_equal

from timeline.analysis.overlap import Overlap
from timeline.schema import EVENTS_SCHEMA, validate

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


# --- the console script -------------------------------------------------------------------------------


def timeline_command() -> list[str]:
    """The console script installed beside this interpreter, else its entry point through ``-c``."""
    script = Path(sys.executable).with_name("timeline")
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-c", "from cli.main import main; main()"]


def run_timeline(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``timeline ARGS`` and return its exit code, stdout and stderr (never raises on failure)."""
    return subprocess.run(
        [*timeline_command(), *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
        timeout=300,
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
    for view in ("ranks", "iterations", "collectives", "windows"):
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
