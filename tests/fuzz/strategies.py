"""Hypothesis strategies for the fuzz test: plausible Kineto and Horovod traces, then damaged.

:func:`fuzz_cases` draws one run: one to three Kineto traces (one per rank), a Horovod timeline, or
a Horovod timeline beside rank 0's Kineto trace. Each file starts as a trace the importers read
(the facts of ``../shared/FORMATS.md``): a Kineto trace with ``ProfilerStep#N``, CPU operators,
kernel launches with correlation ids, compute and NCCL kernels with their collective args, memcpy/memset,
flows, metadata and ``distributedInfo`` (or a CPU-only gloo trace, or a torch 1.9 one); a Horovod
timeline in one of its three layouts with negotiations, ticks, phases and ``CYCLE_START`` markers.
Then some files are damaged, three ways that compose:

- in the document: a value (an event's, or one the whole file hangs on: ``baseTimeNanoseconds``,
  ``distributedInfo``, the Horovod header) replaced by a hostile one (numbers as strings, bools,
  nulls, huge ints, ``1e400``, ``-0.0``, ``NaN``/``Infinity`` literals, objects and arrays where
  scalars belong, control characters, unicode), a field deleted, an unknown ``ph``, ``args`` as a
  list, a key written twice, odd events inserted, events dropped, an empty event array; or
  plausible values in the wrong place: a field copied from another event, an event written twice,
  a time moved or a duration scaled (overlapping and duplicated steps, kernels on CPU threads);
- in the bytes: cut at a random byte, left unterminated, a BOM, junk inserted, a byte changed,
  trailing garbage, CRLF line ends;
- in the container: plain or gzip (with or without a ``.gz`` name), gzip cut short, two gzip members.

Every file says how it was made and damaged (:attr:`TraceFile.how`), so a failing case reads as a
recipe.
"""

from __future__ import annotations

import copy
import gzip
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

__all__ = [
    "FuzzCase",
    "Pairs",
    "Raw",
    "TraceFile",
    "fuzz_cases",
    "horovod_records",
    "kineto_document",
    "write_json",
]

EPOCH_US = 1_700_000_000_000_000
"""Wall clock of the generated runs, µs since the epoch (2023-11)."""
EPOCH_NS = EPOCH_US * 1000
_BASE_STEP_NS = 7_889_238 * 10**9  # torch floors baseTimeNanoseconds to a multiple of 7,889,238 s
BASE_NS = EPOCH_NS // _BASE_STEP_NS * _BASE_STEP_NS
BOOT_US = 3_600_000_000
"""Horovod v0.16-v0.20.0 timestamps: µs since machine boot (a writer bug), here one hour."""

Draw = st.DrawFn
Path_ = tuple[str | int, ...]

# --- a JSON writer that writes what json.dumps refuses ---------------------------------------------


@dataclass(frozen=True)
class Raw:
    """Text written as is: ``NaN``, ``1e400``, ``-0.0``, bare ``N/A``, an unescaped quote."""

    text: str


@dataclass(frozen=True)
class Pairs:
    """An object written from its (key, value) pairs, so that a key can appear twice."""

    items: tuple[tuple[str, Any], ...]


def write_json(value: Any, *, ascii_only: bool = True) -> str:
    """Return ``value`` as JSON text; :class:`Raw` and :class:`Pairs` written as they say."""
    special: list[str] = []

    def written(obj: Any) -> str:
        # json.dumps (fast, in C) writes everything else; these become placeholders replaced below
        if isinstance(obj, Raw):
            text = obj.text
        elif isinstance(obj, Pairs):
            pairs = (f"{json.dumps(k, ensure_ascii=ascii_only)}: {write_json(v, ascii_only=ascii_only)}"
                     for k, v in obj.items)  # fmt: skip
            text = "{" + ", ".join(pairs) + "}"
        else:
            raise TypeError(type(obj).__name__)
        special.append(text)
        return f"\x00{len(special) - 1}\x00"

    text = json.dumps(value, ensure_ascii=ascii_only, default=written)  # NaN, Infinity as such
    return _PLACEHOLDER.sub(lambda m: special[int(m.group(1))], text) if special else text


_PLACEHOLDER = re.compile(r'"\\u0000(\d+)\\u0000"')


# --- plausible Kineto traces ---------------------------------------------------------------------------

_COLLECTIVES = {
    # collective: (record_param_comms name, nccl:* op, kernel name stem, torch 1.9 kernel name)
    "all_reduce": ("allreduce", "nccl:all_reduce", "AllReduce_Sum_f32_RING_LL",
                   "ncclAllReduceRingLLKernel_sum_f32"),
    "all_gather": ("_allgather_base", "nccl:_all_gather_base", "AllGather_RING_LL",
                   "ncclAllGatherRingLLKernel_copy_i8"),
    "reduce_scatter": ("_reduce_scatter_base", "nccl:_reduce_scatter_base", "ReduceScatter_Sum_bf16_RING_LL",
                       "ncclReduceScatterRingLLKernel_sum_f32"),
    "broadcast": ("broadcast", "nccl:broadcast", "Broadcast_RING_LL", "ncclBroadcastRingLLKernel_copy_i8"),
    "all_to_all": ("all_to_all", "nccl:all_to_all", "SendRecv", "ncclSendRecvKernel_copy_i8"),
    "send": ("send", "nccl:send", "SendRecv", "ncclSendRecvKernel_copy_i8"),
    "barrier": ("barrier", "nccl:all_reduce", "AllReduce_Sum_u8_RING_LL", "ncclAllReduceRingLLKernel_sum_u8"),
}  # fmt: skip
_COMPUTE_KERNELS = (
    "volta_sgemm_128x64_nn",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int, float*)",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off",
    "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1>(cudnnTensorStruct, float const*)",
)
_KERNEL_TEMPLATES = (
    "ncclKernel_{stem}(ncclWorkElem)",
    "ncclKernel_{stem}(ncclDevComm*, unsigned long, ncclWork*)",
    "ncclDevKernel_{stem}(ncclDevComm*, unsigned long, ncclWork*)",
    "ncclDevKernel_Generic(ncclDevComm*, unsigned long, ncclWork*)",
)
_DTYPES = (("Float", "float"), ("BFloat16", "c10::BFloat16"), ("Byte", "unsigned char"))

# (kind, start offset in the step, duration), both in ns
_GpuSpec = tuple[str, int, int]


class _KinetoWriter:
    """Collects the events of one rank's trace with consistent ids, times in ns from the trace start."""

    def __init__(self, *, rank: int, world: int, clock: str, legacy: bool) -> None:
        self.rank, self.world, self.clock, self.legacy = rank, world, clock, legacy
        self.events: list[Any] = []
        self.next_id = 1
        self.cpu_pid = 4242 + rank

    def cat(self, modern: str) -> str:
        legacy = {"cpu_op": "Operator", "kernel": "Kernel", "cuda_runtime": "Runtime", "gpu_memcpy": "Memcpy",
                  "gpu_memset": "Memset", "user_annotation": "Operator"}  # fmt: skip
        return legacy.get(modern, modern) if self.legacy else modern

    def stream(self, stream: int) -> int | str:
        return f"stream {stream}" if self.legacy else stream

    def time(self, ns: int) -> Any:
        """A timestamp as this trace's generation writes it (FORMATS.md, Time)."""
        absolute = EPOCH_NS + ns
        if self.clock == "epoch_int":
            return absolute // 1000
        if self.clock == "epoch_float":
            return absolute / 1000
        relative = absolute - BASE_NS
        return Raw(f"{relative // 1000}.{relative % 1000:03d}")

    def dur(self, ns: int) -> Any:
        if self.clock == "epoch_int":
            return ns // 1000
        if self.clock == "epoch_float":
            return ns / 1000
        return Raw(f"{ns // 1000}.{ns % 1000:03d}")

    def fresh(self) -> int:
        self.next_id += 1
        return self.next_id

    def x(self, cat: str, name: str, pid: Any, tid: Any, start: int, dur: int, **args: Any) -> dict[str, Any]:
        event: dict[str, Any] = {"ph": "X", "cat": self.cat(cat), "name": name, "pid": pid, "tid": tid,
                                 "ts": self.time(start), "dur": self.dur(dur)}  # fmt: skip
        if args:
            event["args"] = args
        self.events.append(event)
        return event

    def ext(self, value: int) -> dict[str, int]:
        return {"external id" if self.legacy else "External id": value}

    def launch(self, at: int, kernel: str, start: int, dur: int, stream: int, **kernel_args: Any) -> None:
        """A CPU launch at ``at`` and its kernel on ``stream``, linked by correlation id and a flow."""
        correlation, external = self.fresh(), self.fresh()
        self.x("cuda_runtime", "cudaLaunchKernel", self.cpu_pid, 1, at, 4000,
               correlation=correlation, **self.ext(external))  # fmt: skip
        args = {
            "device": 0,
            "stream": stream,
            "correlation": correlation,
            **self.ext(external),
            **kernel_args,
        }
        self.x("kernel", kernel, 0, self.stream(stream), start, dur, **args)
        flow = {"ph": "s", "id": correlation, "pid": self.cpu_pid, "tid": 1, "ts": self.time(at),
                "cat": "ac2g", "name": "ac2g"}  # fmt: skip
        self.events += [flow, {**flow, "ph": "f", "pid": 0, "tid": stream, "ts": self.time(start), "bp": "e"}]

    def gpu(self, spec: _GpuSpec, step_start: int, collective: str, dtype: int) -> None:
        kind, offset, dur = spec
        start = step_start + offset
        at = max(0, start - 20_000)
        if kind == "compute":
            name = _COMPUTE_KERNELS[offset % len(_COMPUTE_KERNELS)]
            self.x("cpu_op", "aten::mm", self.cpu_pid, 1, at - 1000 if at >= 1000 else at, 8000)
            self.launch(at, name, start, dur, 7)
        elif kind == "comm":
            self.comm(at, start, dur, collective, dtype)
        elif kind == "memcpy":
            self.x("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 0, self.stream(7), start, dur,
                   device=0, stream=7, bytes=4096)  # fmt: skip
        elif kind == "memset":
            self.x("gpu_memset", "Memset (Device)", 0, self.stream(7), start, dur, device=0, stream=7)
        else:
            self.x("cuda_sync", "Stream Sync", 0, self.stream(7), start, dur, device=0, stream=7)

    def comm(self, at: int, start: int, dur: int, collective: str, dtype: int) -> None:
        """A collective: c10d op ⊃ record_param_comms ⊃ nccl:* on the CPU, an NCCL kernel on stream 20."""
        op_name, nccl_op, stem, legacy_kernel = _COLLECTIVES[collective]
        torch_dtype, c_type = _DTYPES[dtype]
        nelems = 1024 * (dur % 7 + 1)
        self.x("cpu_op", f"c10d::{op_name}_", self.cpu_pid, 1, at, 6000)
        ranks = str(list(range(self.world)))
        comms = {"Collective name": op_name, "In msg nelems": nelems, "Out msg nelems": nelems,
                 "dtype": torch_dtype, "Group size": self.world, "Process Group Name": "0",
                 "Process Group Description": "default_pg", "Process Group Ranks": ranks}  # fmt: skip
        external = self.fresh()
        self.x("cpu_op", "record_param_comms", self.cpu_pid, 1, at, 5000, **comms, **self.ext(external))
        self.x("user_annotation", nccl_op, self.cpu_pid, 1, at, 4500,
               **{"Input Dims": [[nelems]], "Input type": [c_type]})  # fmt: skip
        if self.legacy:
            self.launch(at, f"{legacy_kernel}(ncclColl)", start, dur, 20)
            return
        template = _KERNEL_TEMPLATES[nelems % len(_KERNEL_TEMPLATES)]
        kernel_args = comms if nelems % 2 else {}  # torch >= 2.4 copies the comms args onto the kernel
        self.launch(at, template.format(stem=stem), start, dur, 20, **kernel_args)

    def gloo(self, spec: _GpuSpec, step_start: int, collective: str) -> None:
        """CPU-only: compute ops on the main thread, gloo ops on the ``pt_gloo_runloop`` thread."""
        kind, offset, dur = spec
        start = step_start + offset
        if kind == "comm":
            op = "gloo:all_reduce" if collective != "broadcast" else "gloo:broadcast"
            self.x("user_annotation", op, self.cpu_pid, 2, start, dur,
                   **{"Input Dims": [[256 * (dur % 5 + 1)]], "Input type": ["float"]})  # fmt: skip
        else:
            self.x("cpu_op", "aten::addmm", self.cpu_pid, 1, start, dur, **self.ext(self.fresh()))

    def metadata(self, gloo: bool) -> None:
        self.events += [
            {"name": "process_name", "ph": "M", "ts": self.time(0), "pid": self.cpu_pid, "tid": 0,
             "args": {"name": "python"}},
            {"name": "thread_name", "ph": "M", "ts": self.time(0), "pid": self.cpu_pid, "tid": 2,
             "args": {"name": "pt_gloo_runloop" if gloo else "pt_autograd_0"}},
            {"name": "process_name", "ph": "M", "ts": self.time(0), "pid": 0, "tid": 0,
             "args": {"name": "GPU 0"}},
            {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": self.cpu_pid, "tid": 1,
             "ts": self.time(500), "s": "t", "args": {"Bytes": 512, "Total Allocated": 4096}},
            {"ph": "X", "cat": "python_function", "name": 'train.py(12): step "quoted"', "pid": self.cpu_pid,
             "tid": 1, "ts": self.time(0), "dur": self.dur(1000)},
            {"ph": "X", "cat": "overhead", "name": "Buffer Flush", "pid": -1, "tid": 0, "ts": self.time(0),
             "dur": self.dur(100)},
        ]  # fmt: skip


_GPU_SPEC = st.tuples(
    st.sampled_from(("compute", "comm", "compute", "comm", "memcpy", "memset", "sync")),
    st.integers(0, 400_000),
    st.integers(0, 300_000),
)


@st.composite
def kineto_document(draw: Draw, *, rank: int, world: int) -> dict[str, Any]:
    """A plausible Kineto trace of one rank (a JSON object as Python data, :class:`Raw` times)."""
    clock = draw(st.sampled_from(("relative", "epoch_float", "epoch_int")))
    legacy = clock == "epoch_int" and draw(st.booleans())
    gloo = not legacy and draw(st.integers(0, 4)) == 0
    writer = _KinetoWriter(rank=rank, world=world, clock=clock, legacy=legacy)
    writer.metadata(gloo)
    steps = draw(st.integers(0, 3))
    first = draw(st.sampled_from((4, 1, 10, 550, 1009)))
    collective = draw(st.sampled_from(sorted(_COLLECTIVES)))
    dtype = draw(st.integers(0, len(_DTYPES) - 1))
    step_ns = draw(st.integers(100_000, 600_000))
    for i in range(max(steps, 1)):
        start = 1_000_000 + i * step_ns
        if steps:
            step = f"ProfilerStep#{first + i}"
            writer.x("user_annotation", step, writer.cpu_pid, 1, start, step_ns, **writer.ext(writer.fresh()))
            if not gloo and draw(st.booleans()):  # the 16 µs GPU copy (newer traces), not a boundary
                writer.x("gpu_user_annotation", step, 0, writer.stream(7), start + 30_000, 16_000)
        for spec in draw(st.lists(_GPU_SPEC, max_size=5)):
            if gloo:
                writer.gloo(spec, start, collective)
            else:
                writer.gpu(spec, start, collective, dtype)
    doc: dict[str, Any] = {"schemaVersion": 1}
    if not legacy:
        doc["deviceProperties"] = [
            {"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85_031_714_816}
        ]
    info = draw(st.sampled_from(("plain", "pg_config", "none")))
    if info != "none":
        doc["distributedInfo"] = {"backend": "gloo" if gloo else "nccl", "rank": rank, "world_size": world}
        if info == "pg_config":
            ranks = list(range(world))
            doc["distributedInfo"].update(
                pg_count=1, nccl_version="2.21.5",
                pg_config=[{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl",
                            "pg_size": world, "ranks": ranks}],
            )  # fmt: skip
    if clock == "relative":
        doc["baseTimeNanoseconds"] = BASE_NS
    events = writer.events
    doc["traceEvents"] = events
    if draw(st.booleans()):  # 2024 traces: some metadata after traceEvents
        doc["traceName"] = f"/tmp/rank{rank}.pt.trace.json"
        doc["displayTimeUnit"] = "ms"
    return doc


# --- plausible Horovod timelines ---------------------------------------------------------------------

_HOROVOD_OPS = ("ALLREDUCE", "ALLGATHER", "BROADCAST", "ALLTOALL", "REDUCESCATTER", "ADASUM")
_WIRES = ("NCCL_{op}", "MPI_{op}", "GLOO_{op}", "CCL_{op}")
_PHASES = ("WAIT_FOR_DATA", "WAIT_FOR_OTHER_TENSOR_DATA", "INIT_FUSION_BUFFER", "QUEUE",
           "MEMCPY_IN_FUSION_BUFFER", "wire", "MEMCPY_OUT_FUSION_BUFFER")  # fmt: skip


@st.composite
def horovod_records(draw: Draw, *, world: int) -> tuple[list[Any], str]:
    """A plausible Horovod timeline: its records (rank 0 writes every worker's) and its layout."""
    layout = draw(st.sampled_from(("v021", "v015", "v020")))
    t = BOOT_US if layout == "v020" else 0
    records: list[tuple[int, int, Any]] = []  # (ts, order, record): sorted stably by time
    if layout == "v021":
        header = {
            "name": "process_name",
            "ph": "M",
            "pid": 0,
            "args": {"start_time_since_epoch_in_micros": EPOCH_US},
        }
        records.append((-1, 0, header))
    tensors = draw(st.integers(1, 3))
    names = (
        "allreduce.layer1.0.conv1.weight",
        "allreduce.noname.3",
        "DistributedAdam_HorovodAllreduce_grads_0",
    )
    for pid in range(1, tensors + 1):
        meta = {"name": "process_name", "ph": "M", "pid": pid, "args": {"name": names[pid - 1]}}
        records.append((-1, len(records), meta))
    op = draw(st.sampled_from(_HOROVOD_OPS))
    wire = draw(st.sampled_from(_WIRES)).format(op=op)
    fused = draw(st.booleans())  # fused tensors repeat identical spans on every pid
    for _ in range(draw(st.integers(1, 2))):
        t += 1000
        if layout != "v015":
            records.append((t, len(records), {"name": "CYCLE_START", "ph": "i", "ts": t, "s": "g"}))
        timing = draw(st.lists(st.integers(0, 400), min_size=len(_PHASES) + 2, max_size=len(_PHASES) + 2))
        phases = draw(st.lists(st.sampled_from(_PHASES), min_size=1, max_size=4, unique=True))
        for pid in range(1, tensors + 1):
            if not fused:
                timing = [v + 7 * pid for v in timing]
            at = t
            out: list[tuple[int, dict[str, Any]]] = [
                (at, {"ph": "B", "name": f"NEGOTIATE_{op}", "ts": at, "pid": pid})
            ]
            out += [(at + r * 5, {"ph": "X", "name": str(r), "ts": at + r * 5, "pid": pid, "dur": 0})
                    for r in range(world)]  # fmt: skip
            at += timing[0] + world * 5
            out.append((at, {"ph": "E", "ts": at, "pid": pid}))
            at += timing[1]
            out.append((at, {"ph": "B", "name": op, "ts": at, "pid": pid}))
            for phase in sorted(phases, key=_PHASES.index):
                out.append(
                    (at, {"ph": "B", "name": wire if phase == "wire" else phase, "ts": at, "pid": pid})
                )
                at += timing[2 + _PHASES.index(phase)]
                out.append((at, {"ph": "E", "ts": at, "pid": pid}))
            at += 3
            shape = str([172, 4096 // pid])
            out.append((at, {"ph": "E", "ts": at, "pid": pid, "args": {"dtype": "float32", "shape": shape}}))
            records += [(ts, len(records) + i, record) for i, (ts, record) in enumerate(out)]
        t = max(ts for ts, _, _ in records) + 50
    records.sort(key=lambda item: (item[0], item[1]))
    return [record for _, _, record in records], layout


def _horovod_text(records: Any, layout: str, *, ascii_only: bool) -> str:
    """The writer's layout: one record a line ending ``},`` never closed (v0.9-v0.20.0), else one line."""
    if not isinstance(records, list):  # the whole array was replaced
        return write_json(records, ascii_only=ascii_only)
    texts = [write_json(r, ascii_only=ascii_only) for r in records]
    if layout == "v021":
        return "[" + ",".join(texts) + "]"
    return "[\n" + "".join(f"{text},\n" for text in texts)


# --- hostile values and damage to the document -----------------------------------------------------

_DEEP = Raw("[" * 300 + "]" * 300)
HOSTILE_SCALARS: tuple[Any, ...] = (
    None, True, False, "", "12", "1.5", "1e3", " 7", "0x10", "N/A", "-1", 0, -1, 1, 7,
    2**31, 2**53 + 1, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64, 10**30, -(10**30),
    Raw("1" + "0" * 400),
    Raw("1e400"), Raw("-1e400"), Raw("-0.0"), Raw("0.0"), Raw("NaN"), Raw("Infinity"), Raw("-Infinity"),
    Raw("N/A"), Raw("nan"), Raw("undefined"), Raw("None"), 1e-320, 1.7976931348623157e308, 0.5, -1.5, 1e20,
    "ProfilerStep#", "ProfilerStep#-1", "ProfilerStep#1e5", "ProfilerStep#99999999999999999999999",
    "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "gloo:all_reduce", "record_param_comms",
    "nccl:all_reduce", "stream 7", "[0, 1, ...]", "[172, 4096", "float33",
    "\x00", "\x1b[31mred\x1b[0m", "tab\there", "line\nbreak", "名前", "🙂" * 3, "\u202egnp.exe", "\ud800",
    "é" * 50, "x" * 5000, Raw('"unescaped " quote"'), Raw('"raw\x01control\x1f"'), Raw('"C:\\temp\\new"'),
)  # fmt: skip
"""Values written where a scalar or anything else belongs."""
HOSTILE_CONTAINERS: tuple[Any, ...] = (
    {}, [], [1, 2], [[1024]], {"a": 1}, {"ts": 1, "dur": 2}, [None], ["X"], {"": {"": []}}, _DEEP,
    Pairs((("rank", 0), ("rank", 1))),
)  # fmt: skip
_ODD_PH = ("Z", "", "x", "B", "E", "b", "e", "C", "s", "f", "M", "i", "I", "n", "O", "XX", None, 1, ["X"])
_ODD_EVENTS: tuple[Any, ...] = (
    {}, [], None, 1, "X", {"ph": "X"}, {"ph": "X", "ts": 1, "dur": 1},
    {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10**20, "dur": 1},
    {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": -5, "dur": -7},
    {"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce", "pid": 0, "tid": 7, "ts": 0, "dur": 2**62},
    {"ph": "B", "name": "ALLREDUCE", "pid": 1, "ts": 5}, {"ph": "E", "pid": 1, "ts": 4},
    {"ph": "E", "pid": 99, "ts": 4, "args": {"dtype": "float32", "shape": "[1, 2, 3]"}},
    {"ph": "E", "pid": 1, "ts": 4, "args": {"dtype": "complex1024", "shape": "[99999999999, 99999999999]"}},
    {"ph": "X", "name": "0", "pid": 1, "ts": 3, "dur": 0},
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 1, "tid": 1, "ts": 0, "dur": 0},
    {"ph": "i", "name": "CYCLE_START", "s": "g", "ts": Raw("NaN")},
    {"name": "process_name", "ph": "M", "pid": 0, "args": {"start_time_since_epoch_in_micros": Raw("1e400")}},
    {"name": "process_name", "ph": "M", "pid": 2, "args": None},
)  # fmt: skip


def _fresh(values: tuple[Any, ...]) -> st.SearchStrategy[Any]:
    """One of ``values``, copied: later damage mutates it in place, and the constants must not change."""
    return st.sampled_from(values).map(copy.deepcopy)


_KNOWN_KEYS = ("ph", "ts", "dur", "name", "cat", "pid", "tid", "args", "id", "s", "bp")
_KNOWN_ARGS = ("device", "stream", "correlation", "External id", "Collective name", "In msg nelems",
               "dtype", "Group size", "Process Group Name", "Process Group Ranks", "Input Dims",
               "Input type", "shape")  # fmt: skip
_HOSTILE = _fresh(HOSTILE_SCALARS) | _fresh(HOSTILE_CONTAINERS)


def _walk(node: Any, at: Path_ = ()) -> Iterator[tuple[Path_, Any]]:
    """Every (path, value) of a document, the root first."""
    yield at, node
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _walk(value, (*at, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _walk(value, (*at, i))


def _replaced(doc: Any, at: Path_, value: Any) -> Any:
    """``doc`` with the value at ``at`` replaced (in place below the root)."""
    if not at:
        return value
    parent = doc
    for part in at[:-1]:
        parent = parent[part]
    parent[at[-1]] = value
    return doc


def _events(doc: Any) -> list[Any] | None:
    """The event list of a document (Kineto ``traceEvents``, or a Horovod array), if it is still one."""
    if isinstance(doc, dict):
        events = doc.get("traceEvents")
        return events if isinstance(events, list) else None
    return doc if isinstance(doc, list) else None


def _pick_event(draw: Draw, doc: Any) -> dict[str, Any] | None:
    events = _events(doc)
    objects = [e for e in events or [] if isinstance(e, dict)]
    return draw(st.sampled_from(objects)) if objects else None


_MUTATIONS = ("field", "anywhere", "delete", "ph", "args", "duplicate", "insert", "drop", "empty", "add_key",
              "copy_field", "copy_event", "nudge", "meta")  # fmt: skip


def _mutate(draw: Draw, doc: Any) -> tuple[Any, str]:
    """One damage to the document; returns the document and what was done."""
    how = draw(st.sampled_from(_MUTATIONS))
    event = _pick_event(draw, doc)
    if how == "field" and event is not None:
        args = event.get("args")
        target: dict[str, Any] = args if isinstance(args, dict) and draw(st.booleans()) else event
        key = draw(st.sampled_from(sorted(target))) if target else "ts"
        value = draw(_HOSTILE)
        target[key] = value
        return doc, f"{key}={value!r}"
    if how == "delete" and event is not None and event:
        key = draw(st.sampled_from(sorted(event)))
        del event[key]
        return doc, f"deleted {key}"
    if how == "ph" and event is not None:
        event["ph"] = draw(_fresh(_ODD_PH))
        return doc, f"ph={event['ph']!r}"
    if how == "args" and event is not None:
        event["args"] = draw(_fresh(([], [1, 2], ["device", 0], "args", 7, None, {"": None})))
        return doc, f"args={event['args']!r}"
    if how == "add_key" and event is not None:
        key = draw(st.sampled_from(_KNOWN_KEYS + _KNOWN_ARGS + ("ünïcode", "")))
        event[key] = draw(_HOSTILE)
        return doc, f"added {key}={event[key]!r}"
    events = _events(doc)
    if how == "duplicate" and events:
        i = draw(st.integers(0, len(events) - 1))
        if isinstance(events[i], dict) and events[i]:
            key = draw(st.sampled_from(sorted(events[i])))
            value = draw(_HOSTILE)
            events[i] = Pairs((*events[i].items(), (key, value)))
            return doc, f"event {i}: {key} twice, then {value!r}"
    if how == "insert" and events is not None:
        i = draw(st.integers(0, len(events)))
        events.insert(i, draw(_fresh(_ODD_EVENTS)))
        return doc, f"inserted {events[i]!r} at {i}"
    if how == "drop" and events:
        i = draw(st.integers(0, len(events) - 1))
        j = draw(st.integers(i, len(events)))
        del events[i:j]
        return doc, f"dropped events {i}:{j}"
    if how == "empty" and events is not None:
        events.clear()
        return doc, "no events"
    if how in ("copy_field", "copy_event", "nudge") and events:
        return _confuse(draw, how, doc, events)
    if how == "meta":
        return _meta(draw, doc)
    paths = list(_walk(doc))
    at, _ = paths[draw(st.integers(0, len(paths) - 1))]
    value = draw(_HOSTILE)
    return _replaced(doc, at, value), f"{'/'.join(map(str, at)) or 'root'}={value!r}"


_META = ("baseTimeNanoseconds", "schemaVersion", "traceEvents", "deviceProperties", "distributedInfo",
         "distributedInfo.rank", "distributedInfo.world_size", "distributedInfo.backend",
         "distributedInfo.pg_config", "distributedInfo.ranks")  # fmt: skip
_HEADER = "start_time_since_epoch_in_micros"


def _meta(draw: Draw, doc: Any) -> tuple[Any, str]:
    """A hostile value where the whole file's meaning hangs on one field.

    Kineto: ``baseTimeNanoseconds``, ``distributedInfo`` and its rank, world size, process groups;
    Horovod: the wall-clock header's ``start_time_since_epoch_in_micros``.
    """
    value = draw(_HOSTILE)
    if isinstance(doc, list):
        header = doc[0] if doc and isinstance(doc[0], dict) else None
        if header is None or not isinstance(header.get("args"), dict) or _HEADER not in header["args"]:
            return doc, "no header to damage"
        header["args"][_HEADER] = value
        return doc, f"{_HEADER}={value!r}"
    if not isinstance(doc, dict):
        return doc, "no metadata to damage"
    key = draw(st.sampled_from(_META))
    outer, _, inner = key.partition(".")
    if not inner:
        doc[outer] = value
    elif isinstance(doc.get(outer), dict):
        doc[outer][inner] = value
    else:
        doc[outer] = {inner: value}
    return doc, f"{key}={value!r}"


def _number(value: Any) -> float | None:
    """A timestamp or duration as a number (Raw 3-decimal text included), else None."""
    if isinstance(value, Raw):
        try:
            return float(value.text)
        except ValueError:
            return None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _confuse(draw: Draw, how: str, doc: Any, events: list[Any]) -> tuple[Any, str]:
    """Damage that keeps every value plausible but the trace wrong: what the analyses must survive.

    ``copy_field``: one event takes another's ``ts``, ``dur``, ``name``, ``cat``, ``ph``, ``pid``,
    ``tid`` or ``args`` (overlapping or duplicated steps, a kernel on a CPU thread, a step on a
    stream); ``copy_event``: an event written twice; ``nudge``: a time moved or a duration scaled.
    """
    i = draw(st.integers(0, len(events) - 1))
    j = draw(st.integers(0, len(events) - 1))
    source, target = events[i], events[j]
    if how == "copy_event":
        events.insert(j, copy.deepcopy(source))
        return doc, f"event {i} copied to {j}"
    if not isinstance(source, dict) or not isinstance(target, dict):
        return doc, "nothing confused"
    if how == "copy_field":
        key = draw(st.sampled_from(("ts", "dur", "name", "cat", "ph", "pid", "tid", "args")))
        if key not in source:
            return doc, "nothing confused"
        target[key] = copy.deepcopy(source[key])
        return doc, f"event {j}.{key} = event {i}.{key} ({target[key]!r})"
    key = draw(st.sampled_from(("ts", "dur")))
    value = _number(target.get(key))
    if value is None:
        return doc, "nothing confused"
    if key == "dur":
        factor = draw(st.sampled_from((0, -1, 2, 10, 1000, 0.001)))
        target[key] = value * factor
        return doc, f"event {j}.dur × {factor}"
    delta = draw(st.sampled_from((-1.0, 1.0, -500.0, 500.0, -1e6, 0.0005)))
    target[key] = value + delta
    return doc, f"event {j}.ts {delta:+}"


# --- damage to the bytes and the container ---------------------------------------------------------

_BYTE_DAMAGE = ("cut", "unterminated", "bom", "insert", "change", "trailing", "crlf", "nul_tail", "utf16",
                "drop_range", "leading_space")  # fmt: skip
_JUNK = (b"\x00", b"\xff\xfe", b"}", b"]", b",", b'"', b"\n", b"N/A", b"\xc3", b"{", b"[", b"\\", b"\x1f\x8b")


def _damage_bytes(draw: Draw, data: bytes) -> tuple[bytes, str]:
    how = draw(st.sampled_from(_BYTE_DAMAGE))
    n = len(data)
    if how == "cut":
        k = draw(st.integers(0, n))
        return data[:k], f"cut at byte {k} of {n}"
    if how == "unterminated":
        return data.rstrip(b"]} \n,"), "unterminated"
    if how == "bom":
        return b"\xef\xbb\xbf" + data, "UTF-8 BOM"
    if how == "utf16":
        bom, codec = draw(st.sampled_from(((b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"))))
        return bom + data.decode("utf-8", "replace").encode(codec), codec
    if how == "insert":
        k = draw(st.integers(0, n))
        junk = draw(st.sampled_from(_JUNK))
        return data[:k] + junk + data[k:], f"inserted {junk!r} at byte {k}"
    if how == "change" and n:
        k = draw(st.integers(0, n - 1))
        value = draw(st.integers(0, 255))
        return data[:k] + bytes([value]) + data[k + 1 :], f"byte {k} set to {value}"
    if how == "trailing":
        junk = draw(st.sampled_from((b"\n}{", b"\nINFO: done\n", b"]", b"}", b',{"ph": "X"}', b"\x00" * 8)))
        return data + junk, f"trailing {junk!r}"
    if how == "crlf":
        return data.replace(b"\n", b"\r\n"), "CRLF"
    if how == "nul_tail":
        return data + b"\x00" * draw(st.integers(1, 4096)), "NUL padding"
    if how == "drop_range" and n:
        i = draw(st.integers(0, n - 1))
        j = draw(st.integers(i, min(n, i + 200)))
        return data[:i] + data[j:], f"bytes {i}:{j} removed"
    return b" \n\t" + data, "leading whitespace"


def _container(draw: Draw, data: bytes, name: str) -> tuple[bytes, str, str]:
    """Plain or gzip (named ``.gz`` or not), gzip cut short, two gzip members."""
    how = draw(st.sampled_from(("plain", "plain", "gzip", "gzip", "gzip_unnamed", "gzip_cut", "two_members",
                                "named_gz_plain")))  # fmt: skip
    if how == "plain":
        return data, name, "plain"
    if how == "named_gz_plain":
        return data, name + ".gz", "plain named .gz"
    packed = gzip.compress(data, mtime=0)
    if how == "gzip_unnamed":
        return packed, name, "gzip without .gz"
    if how == "gzip_cut":
        k = draw(st.integers(0, len(packed)))
        return packed[:k], name + ".gz", f"gzip cut at byte {k} of {len(packed)}"
    if how == "two_members":
        k = len(data) // 2
        return (
            gzip.compress(data[:k], mtime=0) + gzip.compress(data[k:], mtime=0),
            name + ".gz",
            "two members",
        )
    return packed, name + ".gz", "gzip"


@dataclass(frozen=True)
class TraceFile:
    """One generated file: its name, its bytes, and how it was made and damaged."""

    name: str
    data: bytes = field(repr=False)
    how: str

    def __repr__(self) -> str:
        shown = self.data if len(self.data) <= 4000 else self.data[:4000] + b"..."
        return f"TraceFile(name={self.name!r}, how={self.how!r}, data={shown!r})"


@dataclass(frozen=True)
class FuzzCase:
    """The files of one run, written together into one folder."""

    files: tuple[TraceFile, ...]

    def write(self, root: Path) -> list[Path]:
        """Write every file under ``root``; return their paths."""
        paths = []
        for f in self.files:
            path = root / f.name
            path.write_bytes(f.data)
            paths.append(path)
        return paths


@st.composite
def _damaged(draw: Draw, doc: Any, name: str, how: str, layout: str | None) -> TraceFile:
    """The file of a document, damaged in its content, bytes and container (or not at all)."""
    steps = [how]
    for _ in range(draw(st.sampled_from((0, 0, 1, 1, 1, 2, 3)))):
        doc, what = _mutate(draw, doc)
        steps.append(what)
    ascii_only = draw(st.booleans())
    text = (
        _horovod_text(doc, layout, ascii_only=ascii_only)
        if layout
        else write_json(doc, ascii_only=ascii_only)
    )
    data = text.encode("utf-8", "surrogatepass")
    for _ in range(draw(st.sampled_from((0, 0, 0, 1, 1, 2)))):
        data, what = _damage_bytes(draw, data)
        steps.append(what)
    data, name, packed = _container(draw, data, name)
    steps.append(packed)
    return TraceFile(name=name, data=data, how="; ".join(steps))


def _kineto_name(draw: Draw, rank: int, single: bool) -> str:
    names = [f"rank{rank}.json", f"worker{rank}_step_12.1694128201545.pt.trace.json"]
    if single:
        names.append("host_1234.1700000000000.pt.trace.json")  # no rank in the name: distributedInfo's
    return str(draw(st.sampled_from(names)))


@st.composite
def fuzz_cases(draw: Draw) -> FuzzCase:
    """One run: Kineto traces of 1-3 ranks, a Horovod timeline, or both; each file maybe damaged."""
    run = draw(st.sampled_from(("kineto", "kineto", "horovod", "both")))
    ranks = draw(st.sampled_from((1, 2, 1, 3, 1, 2))) if run == "kineto" else 1
    world = max(ranks, draw(st.integers(1, 4)))
    files = []
    if run in ("horovod", "both"):
        records, layout = draw(horovod_records(world=world))
        files.append(draw(_damaged(records, "horovod_timeline.json", f"horovod {layout}", layout)))
    for rank in range(ranks):
        doc = draw(kineto_document(rank=rank, world=world))
        name = _kineto_name(draw, rank, ranks == 1)
        files.append(draw(_damaged(doc, name, f"kineto rank {rank}", None)))
    return FuzzCase(files=tuple(files))
