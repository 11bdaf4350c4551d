"""Generate Nsight Systems SQLite exports (nsys-schema 3.25) of any size, for benchmarks and tests.

Writes a valid ``nsys export --type sqlite`` database: the tables and columns of Nsight Systems
2026.2 (schema 3.25.0, as in ``shared/traces/nsys/nsysai_2xh100_nccl_before.sqlite``) that
timeline reads, with the other columns of those tables filled as nsys fills them (so that a row
weighs what a real one does). ``N`` processes, one CUDA device each, each running ``M`` kernels:
steps of compute kernels (``ampere_sgemm_128x64_tn``…) launched by ``cudaLaunchKernel`` inside
PyTorch's ``emit_nvtx`` ranges (``aten::mm, seq = S, op_id = O``), and one NCCL all-reduce per step
(``ncclDevKernel_AllReduce_Sum_f32_RING_LL``) on its own stream, launched inside
``nccl:all_reduce, op_id = O`` and NCCL's ``ncclAllReduce`` range, whose payload (communicator,
message size) follows NCCL's schema; each process creates its communicator first
(``ncclCommInitRank``: communicator, number of ranks, rank, CUDA device). Steps are
``ProfilerStep#K`` ranges, or ``train_step`` ranges, or none.

The all-reduce of step ``k`` starts on every rank ``overlap_ns`` before the last compute kernel of
the step ends, so its hidden and exposed parts are known exactly (:class:`Layout`). Deterministic.

Command line (sizes are decimal; ``benchmarks/out/`` is git-ignored)::

    python benchmarks/generate_nsys.py --processes 8 --size 1G -o benchmarks/out/nsys_1g.sqlite
    python benchmarks/generate_nsys.py --processes 2 --kernels 1000 -o /tmp/small.sqlite
"""

from __future__ import annotations

import argparse
import sqlite3
import struct
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.generate import parse_size  # noqa: E402

__all__ = ["Layout", "kernels_for_size", "write_export"]

EPOCH_NS = 1_779_782_330_176_752_435  # the session start of the real 2026.2 export
SYSTEM_NS = 28_254_349_605  # its system clock at that instant: the events' clock
NCCL_DOMAIN = 1
COMM_ID = 0x1A2B3C4D5E6F7081
STATIC = 1 << 24  # NVTX_PAYLOAD_ENTRY_TYPE_SCHEMA_ID_STATIC_START
INIT_SCHEMA, ALLREDUCE_SCHEMA = STATIC + 2, STATIC + 5
BYTES_PER_KERNEL = 233  # measured on disk per kernel (its launch and NVTX range included)

# The columns nsys 2026.2 writes for these tables (the real export's PRAGMA table_info).
_KERNEL_COLUMNS = (
    "start, end, deviceId, contextId, greenContextId, streamId, correlationId, globalPid, demangledName, "
    "shortName, mangledName, launchType, cacheConfig, registersPerThread, gridX, gridY, gridZ, blockX, "
    "blockY, blockZ, staticSharedMemory, dynamicSharedMemory, localMemoryPerThread, localMemoryTotal, "
    "gridId, sharedMemoryExecuted, graphNodeId, sharedMemoryLimitConfig, qmdBulkReleaseDone, "
    "qmdPreexitDone, qmdLastCtaDone, graphId, clusterX, clusterY, clusterZ, clusterSchedulingPolicy, "
    "maxPotentialClusterSize, maxActiveClusters, sharedMemoryRequestedPercentage, "
    "tensorSizeMinusOneElements"
)
_SCHEMA = [
    "CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT)",
    "CREATE TABLE META_DATA_CAPTURE (name TEXT, value TEXT)",
    "CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, localTime TEXT, "
    "systemClockNs INTEGER)",
    "CREATE TABLE ANALYSIS_DETAILS (globalVid INTEGER, duration INTEGER, startTime INTEGER, "
    "stopTime INTEGER)",
    "CREATE TABLE TARGET_INFO_SYSTEM_ENV (globalVid INTEGER, devStateName TEXT, name TEXT, "
    "nameEnum INTEGER, value TEXT)",
    "CREATE TABLE PROCESSES (globalPid INTEGER, pid INTEGER, name TEXT)",
    "CREATE TABLE ENUM_NSYS_EVENT_TYPE (id INTEGER PRIMARY KEY, name TEXT, label TEXT)",
    f"CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL ({_KERNEL_COLUMNS.replace(', ', ' INTEGER, ')} INTEGER)",
    "CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, "
    "eventClass INTEGER, globalTid INTEGER, correlationId INTEGER, nameId INTEGER, returnValue INTEGER, "
    "callchainId INTEGER)",
    "CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, "
    "rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, "
    "textId INTEGER, domainId INTEGER, uint64Value INTEGER, int64Value INTEGER, doubleValue REAL, "
    "uint32Value INTEGER, int32Value INTEGER, floatValue REAL, jsonTextId INTEGER, jsonText TEXT, "
    "binaryData TEXT)",  # TEXT as nsys declares it; a blob inserted keeps its bytes
    "CREATE TABLE NVTX_PAYLOAD_SCHEMAS (domainId INTEGER, schemaId INTEGER, name TEXT, type INTEGER, "
    "flags INTEGER, numEntries INTEGER, payloadSize INTEGER, alignTo INTEGER)",
    "CREATE TABLE NVTX_PAYLOAD_SCHEMA_ENTRIES (domainId INTEGER, schemaId INTEGER, idx INTEGER, "
    "flags INTEGER, type INTEGER, name TEXT, description TEXT, arrayOrUnionDetail INTEGER, offset INTEGER)",
]
_COMPUTE = ("ampere_sgemm_128x64_tn", "vectorized_elementwise_kernel", "reduce_kernel", "layer_norm_kernel")
_STRINGS = {
    1: "cudaLaunchKernel_v7000",
    2: "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    3: "ncclCommInitRank",
    4: "ncclAllReduce",
    5: "python3",
    **{10 + i: name for i, name in enumerate(_COMPUTE)},
}


@dataclass(frozen=True)
class Layout:
    """The timing of every generated step (ns): the same on every rank, shifted by ``rank * skew_ns``.

    A step is ``compute`` kernels of ``kernel_ns`` each, back to back from the step's start plus
    ``launch_ns``; its all-reduce starts ``overlap_ns`` before the last compute kernel ends and lasts
    ``comm_ns``, so ``overlap_ns`` of it is hidden (when ``overlap_ns <= comm_ns``), the rest
    exposed. Steps follow each other every ``step_ns``.
    """

    compute: int = 8
    kernel_ns: int = 20_000
    comm_ns: int = 50_000
    overlap_ns: int = 15_000
    launch_ns: int = 5_000
    gap_ns: int = 30_000
    skew_ns: int = 1_000

    @property
    def step_ns(self) -> int:
        """Nanoseconds from one step's start to the next one's."""
        return self.launch_ns + self.compute * self.kernel_ns + self.comm_ns - self.overlap_ns + self.gap_ns


def kernels_for_size(size_bytes: int, processes: int) -> int:
    """Return the kernels per process that make an export of about ``size_bytes``."""
    return max(1, size_bytes // (BYTES_PER_KERNEL * processes))


def _global_pid(process: int) -> int:
    return (1 << 48) | ((1000 + process) << 24)


def write_export(
    path: Path,
    *,
    processes: int = 2,
    kernels: int = 90,
    layout: Layout = Layout(),
    steps: str = "profiler",
    payloads: bool = True,
    schema_version: str = "3.25.0",
    environment: dict[str, str] | None = None,
) -> Path:
    """Write an export of ``processes`` × about ``kernels`` kernels (whole steps) to ``path``.

    ``steps``: ``profiler`` (``ProfilerStep#K`` ranges), ``train_step`` (user ranges named so) or
    ``none``. ``payloads``: write NCCL's payloads (communicator creation gives the ranks).
    ``environment``: variables recorded as the launched process's environment.
    """
    path.unlink(missing_ok=True)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode = OFF")
    conn.execute("PRAGMA synchronous = OFF")
    for statement in _SCHEMA:
        conn.execute(statement)
    n_steps = max(1, kernels // (layout.compute + 1))
    _write_metadata(conn, processes, n_steps, layout, schema_version, environment or {})
    for p in range(processes):
        _write_process(conn, p, processes, n_steps, layout, steps, payloads)
    conn.commit()
    conn.close()
    return path


def _write_metadata(
    conn: sqlite3.Connection,
    processes: int,
    n_steps: int,
    layout: Layout,
    version: str,
    environment: dict[str, str],
) -> None:
    major, minor, micro = [*version.split("."), "0", "0"][:3]
    conn.executemany("INSERT INTO StringIds VALUES (?, ?)", sorted(_STRINGS.items()))
    export = {
        "EXPORT_PRODUCT_NAME": "NVIDIA Nsight Systems",
        "EXPORT_PRODUCT_VERSION": "2026.2.1.210",
        "EXPORT_SCHEMA_VERSION": version,
        "EXPORT_SCHEMA_VERSION_MAJOR": major,
        "EXPORT_SCHEMA_VERSION_MINOR": minor,
        "EXPORT_SCHEMA_VERSION_MICRO": micro,
        "EXPORT_HOST": "generated",
    }
    conn.executemany("INSERT INTO META_DATA_EXPORT VALUES (?, ?)", export.items())
    conn.executemany(
        "INSERT INTO META_DATA_CAPTURE VALUES ('PROCESS_0:ENVIRONMENT_VARIABLE', ?)",
        [(f'{k}="{v}"',) for k, v in environment.items()],
    )
    duration = SYSTEM_NS + (n_steps + 2) * layout.step_ns + processes * layout.skew_ns
    conn.execute(
        "INSERT INTO TARGET_INFO_SESSION_START_TIME "
        "VALUES (?, '2026-05-26T07:58:50', '2026-05-26T07:58:50', ?)",
        (EPOCH_NS, SYSTEM_NS),
    )
    conn.execute(
        "INSERT INTO ANALYSIS_DETAILS VALUES (?, ?, ?, ?)",
        (1 << 48, duration - SYSTEM_NS, SYSTEM_NS, duration),
    )
    conn.execute(
        "INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES (?, 'Local (CLI)', 'Hostname', 619, 'node0')", (1 << 48,)
    )
    conn.executemany(
        "INSERT INTO ENUM_NSYS_EVENT_TYPE VALUES (?, ?, ?)",
        [(59, "NvtxPushPopRange", "NVTX push-pop range"), (75, "NvtxDomainCreate", "NVTX domain create")],
    )
    conn.executemany(
        "INSERT INTO PROCESSES VALUES (?, ?, 'python3')",
        [(_global_pid(p), 1000 + p) for p in range(processes)],
    )
    _write_payload_schemas(conn)


def _write_payload_schemas(conn: sqlite3.Connection) -> None:
    """NCCL's payload schemas, as NCCL 2.25 registers them (ids differ between versions: read by name)."""
    conn.executemany(
        "INSERT INTO NVTX_PAYLOAD_SCHEMAS VALUES (?, ?, NULL, 1, NULL, ?, ?, NULL)",
        [(NCCL_DOMAIN, INIT_SCHEMA, 4, 24), (NCCL_DOMAIN, ALLREDUCE_SCHEMA, 3, 24)],
    )
    entries = [
        (INIT_SCHEMA, 0, 18, "NCCL communicator ID", None),
        (INIT_SCHEMA, 1, 5, "No. of ranks", 8),
        (INIT_SCHEMA, 2, 5, "Rank", 12),
        (INIT_SCHEMA, 3, 5, "CUDA device", 16),
        (ALLREDUCE_SCHEMA, 0, 18, "NCCL communicator ID", None),
        (ALLREDUCE_SCHEMA, 1, 22, "Message size [bytes]", 8),
        (ALLREDUCE_SCHEMA, 2, STATIC + 16, "Reduction operation", 16),
    ]
    conn.executemany(
        "INSERT INTO NVTX_PAYLOAD_SCHEMA_ENTRIES VALUES (?, ?, ?, NULL, ?, ?, NULL, NULL, ?)",
        [(NCCL_DOMAIN, s, i, t, n, o) for s, i, t, n, o in entries],
    )
    conn.execute(
        "INSERT INTO NVTX_EVENTS (start, eventType, text, globalTid, domainId) VALUES (?, 75, 'NCCL', ?, ?)",
        (SYSTEM_NS, _global_pid(0), NCCL_DOMAIN),
    )


def payload_blob(schema: int, payload: bytes) -> bytes:
    """Return a ``binaryData`` blob: the 32-byte header (domain, schema, size, offset), then the payload."""
    return struct.pack("<4Q", NCCL_DOMAIN, schema, len(payload), 32) + payload


def _write_process(
    conn: sqlite3.Connection, p: int, processes: int, n_steps: int, layout: Layout, steps: str, payloads: bool
) -> None:
    gpid = _global_pid(p)
    tid = gpid | (1000 + p)
    origin = SYSTEM_NS + layout.step_ns + p * layout.skew_ns
    nvtx: list[tuple[object, ...]] = []
    if payloads:
        init = payload_blob(INIT_SCHEMA, struct.pack("<Qiii4x", COMM_ID, processes, p, p))
        nvtx.append((origin - 20_000, origin - 10_000, None, tid, 3, NCCL_DOMAIN, init))
    conn.executemany(
        f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL ({_KERNEL_COLUMNS}) VALUES ({', '.join('?' * 40)})",
        _kernel_rows(p, gpid, n_steps, layout, origin),
    )
    conn.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 1, ?, ?, 1, 0, NULL)",
        _launch_rows(tid, n_steps, layout, origin),
    )
    nvtx.extend(_range_rows(tid, n_steps, layout, origin, steps, payloads))
    conn.executemany(
        "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, textId, domainId, binaryData) "
        "VALUES (?, ?, 59, ?, ?, ?, ?, ?)",
        nvtx,
    )


def _kernel_rows(
    p: int, gpid: int, n_steps: int, layout: Layout, origin: int
) -> Iterator[tuple[object, ...]]:
    correlation = 0
    for k in range(n_steps):
        start = origin + k * layout.step_ns + layout.launch_ns
        for i in range(layout.compute):
            correlation += 1
            s = start + i * layout.kernel_ns
            name = 10 + i % len(_COMPUTE)
            yield (s, s + layout.kernel_ns, p, 1, 0, 7, correlation, gpid, name, name, name, 1, 0, 128,
                   256, 1, 1, 128, 1, 1, 0, 49152, 0, 0, correlation, 0, None, 1, None, None, None, None,
                   0, 0, 0, 0, 0, 0, 100, 0)  # fmt: skip
        correlation += 1
        s = start + layout.compute * layout.kernel_ns - layout.overlap_ns
        yield (s, s + layout.comm_ns, p, 1, 0, 15, correlation, gpid, 2, 2, 2, 1, 0, 96, 2, 1, 1, 640, 1,
               1, 0, 4096, 0, 0, correlation, 0, None, 1, None, None, None, None, 0, 0, 0, 0, 0, 0, 100,
               0)  # fmt: skip


def _launch_ns(k: int, i: int, layout: Layout, origin: int) -> int:
    """The launch of kernel ``i`` of step ``k`` (``i == compute``: the all-reduce), before it starts."""
    return origin + k * layout.step_ns + i * (layout.launch_ns // (layout.compute + 2))


def _launch_rows(tid: int, n_steps: int, layout: Layout, origin: int) -> Iterator[tuple[object, ...]]:
    correlation = 0
    for k in range(n_steps):
        for i in range(layout.compute + 1):
            correlation += 1
            at = _launch_ns(k, i, layout, origin)
            yield (at, at + 100, tid, correlation)


def _range_rows(
    tid: int, n_steps: int, layout: Layout, origin: int, steps: str, payloads: bool
) -> Iterator[tuple[object, ...]]:
    op_id = 0
    size = 64 * 1024 * 1024
    for k in range(n_steps):
        step_start = origin + k * layout.step_ns
        if steps != "none":
            name = f"ProfilerStep#{k}" if steps == "profiler" else "train_step"
            yield (step_start, step_start + layout.step_ns - layout.gap_ns // 2, name, tid, None, None, None)
        for i in range(layout.compute + 1):
            op_id += 1
            at = _launch_ns(k, i, layout, origin)
            if i < layout.compute:
                yield (at - 10, at + 150, f"aten::mm, seq = {op_id}, op_id = {op_id}", tid, None, None, None)
                continue
            yield (at - 40, at + 200, f"nccl:all_reduce, op_id = {op_id}", tid, None, None, None)
            blob = payload_blob(ALLREDUCE_SCHEMA, struct.pack("<QQQ", COMM_ID, size, 0)) if payloads else None
            yield (at - 20, at + 150, None, tid, 4, NCCL_DOMAIN, blob)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output", type=Path, required=True)
    parser.add_argument("--processes", type=int, default=8)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--kernels", type=int, help="kernels per process")
    group.add_argument("--size", help="about this many bytes on disk (1G, 200M)")
    parser.add_argument("--steps", choices=("profiler", "train_step", "none"), default="profiler")
    args = parser.parse_args(argv)
    kernels = args.kernels or kernels_for_size(parse_size(args.size or "100M"), args.processes)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    write_export(args.output, processes=args.processes, kernels=kernels, steps=args.steps)
    size = args.output.stat().st_size
    print(f"{args.output}: {args.processes} processes x {kernels:,} kernels, {size / 1e6:,.1f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
