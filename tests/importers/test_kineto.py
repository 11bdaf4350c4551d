"""The Kineto importer against every real PyTorch profiler trace, and synthetic edge cases.

Expected values come from the raw JSON, read here with the standard library (``json`` with exact
``Decimal`` timestamps, ``gzip``) and an independent reference of the format rules, or were counted
by hand from the traces (``/work/shared/traces/kineto``, present beside the repository in CI).
"""

from __future__ import annotations

import gzip
import json
import math
from collections import Counter
from collections.abc import Iterator
from decimal import Decimal
from functools import lru_cache
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from timeline.errors import TraceContentError
from timeline.importers.files import read_trace_bytes, sniff_format
from timeline.importers.kineto import _MAX_US, _all_valid, _invalid, parse_kineto
from timeline.importers.result import FileResult, ImportOptions
from timeline.importers.rules import ClassificationRules
from timeline.schema import EVENTS_SCHEMA
from timeline.trace import load

KINETO = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "kineto"

PARAM = KINETO / "param_dlrm_8rank"
PARAM_FILES = (
    "worker0_step_12.1694128201545.pt.trace.json.gz",
    "worker1_step_12.1694128201556.pt.trace.json.gz",
    "worker2_step_12.1694128201554.pt.trace.json.gz",
    "worker3_step_12.1694128201557.pt.trace.json.gz",
    "worker4_step_12.1694128201547.pt.trace.json.gz",
    "worker5_step_12.1694128201549.pt.trace.json.gz",
    "worker6_step_12.1694128201553.pt.trace.json.gz",
    "worker7_step_12.1694128201553.pt.trace.json.gz",
)
NCCL_2024 = "hta_nccl_parser_config/nccl_data.json.gz"
NS_RESOLUTION = "hta_ns_resolution/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
DF_INDEX = "hta_df_index_resolver/df_index_resolver.json.gz"
AMD = "hta_amd_mi250/mi250_minitoy_train_ROCm6_2_kineto.json.gz"
TORCH19 = "kineto_tb_plugin_resnet50_torch19/worker0.1623143089861.pt.trace.json.gz"
ALL_FILES = (
    *(f"param_dlrm_8rank/{name}" for name in PARAM_FILES),
    NCCL_2024,
    NS_RESOLUTION,
    DF_INDEX,
    AMD,
    TORCH19,
    "hta_trace_diff/control.json.gz",
    "hta_trace_diff/test.json.gz",
    "hta_trace_filter_2rank/sampled_rank-0.json.gz",
    "hta_trace_filter_2rank/sampled_rank-1.json.gz",
    "hta_negative_queue_length/rank0.json.gz",
)

# ---------------------------------------------------------------------------------------------
# An independent reference of the format rules (docs/formats.md), written without the importer.
# ---------------------------------------------------------------------------------------------

_ELEMENT_BYTES = {
    "float": 4, "Float": 4, "int": 4, "long": 8, "long int": 8, "Long": 8,
    "unsigned char": 1, "signed char": 1, "Byte": 1,
}  # fmt: skip
_OP_COLLECTIVE = {
    "allreduce": "all_reduce",
    "all_reduce": "all_reduce",
    "broadcast": "broadcast",
    "all_to_all": "all_to_all",
    "_all_gather_base": "all_gather",
    "_reduce_scatter_base": "reduce_scatter",
}
_KERNEL_COLLECTIVE = {"AllReduce": "all_reduce", "Broadcast": "broadcast", "SendRecv": "send_recv"}
# The only CPU op of these traces that the default rules call a wait (DDP's reducer waiting for a bucket).
_SYNC_OPS = ("torch.distributed.ddp.reducer::copy_bucket_to_grad",)


def _ns(us: Decimal | int) -> int:
    """Exact nanoseconds of a µs value written in the file."""
    return int((Decimal(us) * 1000).to_integral_value())


def _complete(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The complete ('X') events the importer keeps by default, in file order."""
    return [
        e
        for e in doc["traceEvents"]
        if e.get("ph") == "X" and e.get("cat") != "python_function" and e.get("dur", 0) >= 0
    ]


def _is_comm_kernel(e: dict[str, Any]) -> bool:
    return e.get("cat") in ("kernel", "Kernel") and str(e["name"]).startswith(("nccl", "rccl"))


def _expected_kind(e: dict[str, Any]) -> str:
    """The kind of one raw event under the default rules."""
    cat, name = e.get("cat"), str(e.get("name"))
    if cat in ("kernel", "Kernel"):
        return "communication" if _is_comm_kernel(e) else "compute"
    if cat in ("cpu_op", "Operator", "user_annotation"):
        if name.startswith("gloo:"):
            return "communication"
        if name in _SYNC_OPS:
            return "sync"
        if name.startswith("ProfilerStep#") or cat == "user_annotation":
            return "annotation"
        return "cpu_op"
    by_cat = {
        "gpu_memcpy": "memcpy", "Memcpy": "memcpy", "gpu_memset": "memset", "Memset": "memset",
        "cuda_sync": "sync", "cuda_runtime": "runtime", "cuda_driver": "runtime", "Runtime": "runtime",
        "gpu_user_annotation": "annotation",
    }  # fmt: skip
    return by_cat.get(str(cat), "other")


def _expected_comm(doc: dict[str, Any]) -> list[tuple[int, str, int | None]]:
    """(start ns, collective, input bytes) of each communication kernel, found by hand-written rules.

    The kernel's own args where present (torch >= 2.4); else the innermost ``nccl:*`` op on the
    thread that launched it (the launch shares the kernel's correlation id), its first input's
    shape × element size; else the kernel name.
    """
    events = _complete(doc)
    base = int(doc.get("baseTimeNanoseconds") or 0)
    launches: dict[int, dict[str, Any]] = {}
    ops: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for e in events:
        args = e.get("args", {})
        if e.get("cat") in ("cuda_runtime", "Runtime") and "correlation" in args:
            launches.setdefault(args["correlation"], e)
        if str(e.get("name")).startswith("nccl:"):
            ops.setdefault((e["pid"], e["tid"]), []).append(e)
    out: list[tuple[int, str, int | None]] = []
    for kernel in filter(_is_comm_kernel, events):
        args = kernel.get("args", {})
        collective: str | None = None
        nbytes: int | None = None
        if "Collective name" in args:
            collective = _OP_COLLECTIVE[args["Collective name"]]
            nbytes = args["In msg nelems"] * _ELEMENT_BYTES[args["dtype"]]
        elif (launch := launches.get(args.get("correlation"))) is not None:
            around = [
                op
                for op in ops.get((launch["pid"], launch["tid"]), [])
                if op["ts"] <= launch["ts"] <= op["ts"] + op["dur"]
            ]
            if around:
                op = max(around, key=lambda o: o["ts"])
                collective = _OP_COLLECTIVE[op["name"].removeprefix("nccl:")]
                dims, types = op["args"].get("Input Dims"), op["args"].get("Input type")
                if dims and types:
                    nbytes = _ELEMENT_BYTES[types[0]]
                    for d in dims[0]:
                        nbytes *= d
        if collective is None:
            collective = _KERNEL_COLLECTIVE[kernel["name"].split("_")[1]]
        out.append((base + _ns(kernel["ts"]), collective, nbytes))
    return sorted(out, key=_comm_key)


def _comm_key(row: tuple[int, str, int | None]) -> tuple[int, str, int]:
    return row[0], row[1], -1 if row[2] is None else row[2]


@lru_cache(maxsize=2)
def _raw(name: str) -> bytes:
    return gzip.decompress((KINETO / name).read_bytes())


@lru_cache(maxsize=2)
def _doc(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(_raw(name), parse_float=Decimal)
    return doc


@lru_cache(maxsize=2)
def _parsed(name: str) -> FileResult:
    return parse_kineto(_raw(name), source=name)


@pytest.fixture(scope="module", autouse=True)
def _free_parsed_traces() -> Iterator[None]:
    """Drop the cached traces (hundreds of MB as Python objects) once this module is done."""
    yield
    for cached in (_raw, _doc, _parsed):
        cached.cache_clear()


def _comm(result: FileResult) -> pl.DataFrame:
    return result.events.filter(pl.col("kind") == "communication")


def _collective_counts(result: FileResult) -> Counter[str]:
    return Counter(_comm(result).get_column("collective").cast(pl.String).to_list())


# ---------------------------------------------------------------------------------------------
# Every real trace: schema, times, kinds and collectives agree with the raw JSON.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL_FILES)
def test_real_trace_matches_raw_json(name: str) -> None:
    doc, result = _doc(name), _parsed(name)
    events = result.events
    assert result.format == "kineto"
    assert events.schema == EVENTS_SCHEMA
    assert result.warnings == []
    assert events.get_column("rank").null_count() == events.height  # filled in by the loader
    assert events.get_column("source").cast(pl.String).unique().to_list() == ["kineto"]

    kept = _complete(doc)
    assert events.height == len(kept)
    assert events.get_column("name").cast(pl.String).to_list() == [str(e["name"]) for e in kept]
    assert Counter(events.get_column("kind").cast(pl.String).to_list()) == Counter(map(_expected_kind, kept))
    # Durations are exact in every generation; end = start + dur.
    assert events.get_column("dur_ns").to_list() == [_ns(e["dur"]) for e in kept]
    # Start times to the nanosecond the file states (relative ones moved by baseTimeNanoseconds),
    # except in the float-epoch generation, where a double cannot hold them (see below).
    if name != NS_RESOLUTION:
        base = int(doc.get("baseTimeNanoseconds") or 0)
        assert events.get_column("start_ns").to_list() == [base + _ns(e["ts"]) for e in kept]
        assert result.clock == "epoch"
    assert (events.get_column("end_ns") - events.get_column("start_ns") == events.get_column("dur_ns")).all()

    assert sorted(_comm(result).select("start_ns", "collective", "in_bytes").iter_rows(), key=_comm_key) == (
        _expected_comm(doc)
    )
    # Communication kernels sit on a device and a stream; nothing else carries collective columns.
    comm = _comm(result)
    assert comm.filter(pl.col("cat") == "kernel").get_column("stream").null_count() == 0
    other = events.filter(pl.col("kind") != "communication")
    assert other.get_column("collective").null_count() == other.height
    assert other.get_column("in_bytes").null_count() == other.height


# ---------------------------------------------------------------------------------------------
# Facts of each trace, counted by hand.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rank", range(8))
def test_param_dlrm_rank(rank: int) -> None:
    name = f"param_dlrm_8rank/{PARAM_FILES[rank]}"
    result = _parsed(name)
    assert (result.rank, result.world_size, result.backend, result.host) == (rank, 8, "nccl", None)
    assert result.clock == "epoch"
    doc = _doc(name)
    nccl_kernels = [
        e for e in doc["traceEvents"] if e.get("cat") == "kernel" and e["name"].startswith("nccl")
    ]
    assert len(nccl_kernels) == 8
    comm = _comm(result)
    assert comm.height == len(nccl_kernels)
    # 5 SendRecv kernels that implement nccl:all_to_all, 3 all-reduce kernels.
    assert _collective_counts(result) == Counter({"all_to_all": 5, "all_reduce": 3})
    assert set(comm.get_column("device").to_list()) == {rank}
    assert set(comm.get_column("stream").to_list()) == {84}
    # DDP's gradient buckets are the same on every rank: nccl:all_reduce Input Dims [[394241]],
    # [[112]], [[226960]], Input type float.
    all_reduce = comm.filter(pl.col("collective") == "all_reduce")
    assert sorted(all_reduce.get_column("in_bytes").to_list()) == [112 * 4, 226960 * 4, 394241 * 4]
    assert all_reduce.get_column("out_bytes").to_list() == all_reduce.get_column("in_bytes").to_list()
    # 2023 format: no collective args on kernels, no process group.
    assert comm.get_column("group_size").null_count() == 8
    assert comm.get_column("pg_name").null_count() == 8
    kernels = sum(1 for e in doc["traceEvents"] if e.get("cat") == "kernel")
    assert result.events.filter(pl.col("kind") == "compute").height == kernels - 8


def test_param_dlrm_rank0_collectives_by_hand() -> None:
    comm = _comm(_parsed(f"param_dlrm_8rank/{PARAM_FILES[0]}")).sort("start_ns")
    rows = comm.select(
        pl.col("name").cast(pl.String).str.extract(r"^ncclKernel_(\w+?)_"),
        pl.col("collective").cast(pl.String),
        "in_bytes",
        pl.col("dtype").cast(pl.String),
        "start_ns",
        "dur_ns",
    ).rows()
    # From the nccl:* ops around each launch (Input Dims × Input type) and the kernels' ts/dur.
    assert rows == [
        ("SendRecv", "all_to_all", 6144 * 4, "float", 1694128201429795000, 2146000),
        ("SendRecv", "all_to_all", 24 * 8, "long int", 1694128201433686000, 1032000),
        ("SendRecv", "all_to_all", 384 * 4, "int", 1694128201434943000, 176000),
        ("SendRecv", "all_to_all", 3392 * 4, "int", 1694128201435120000, 131000),
        ("AllReduce", "all_reduce", 394241 * 4, "float", 1694128201436304000, 246000),
        ("SendRecv", "all_to_all", 6144 * 4, "float", 1694128201437789000, 514000),
        ("AllReduce", "all_reduce", 112 * 4, "float", 1694128201438305000, 601000),
        ("AllReduce", "all_reduce", 226960 * 4, "float", 1694128201439384000, 952000),
    ]


def test_nccl_parser_config_2024_kernel_args() -> None:
    result = _parsed(NCCL_2024)
    assert (result.rank, result.world_size, result.backend) == (0, 2, "nccl")
    comm = _comm(result)
    assert comm.height == 21
    assert _collective_counts(result) == Counter({"all_reduce": 15, "broadcast": 6})
    # Every kernel carries Group size 2, Process Group Name "0", Process Group Ranks "[0, 1]".
    assert comm.get_column("group_size").to_list() == [2] * 21
    assert comm.get_column("pg_name").cast(pl.String).to_list() == ["0"] * 21
    assert comm.get_column("pg_ranks").to_list() == ["[0, 1]"] * 21
    assert comm.get_column("seq").null_count() == 21  # Seq arrived in 2026
    # In msg nelems × dtype: five all-reduce buckets (Float), two broadcasts (Float and Long), 3 steps.
    by_bytes = Counter(
        zip(comm["collective"].cast(pl.String), comm["in_bytes"], comm["dtype"].cast(pl.String), strict=True)
    )
    assert by_bytes == Counter(
        {
            **{("all_reduce", n * 4, "Float"): 3 for n in (6637568, 2431040, 2049000, 7875584, 6563840)},
            ("broadcast", 53120 * 4, "Float"): 3,
            ("broadcast", 53 * 8, "Long"): 3,
        }
    )
    # record_param_comms 'wait' ops (6 of them) are CPU ops, never communication with bytes.
    waits = result.events.filter(pl.col("name") == "record_param_comms")
    assert waits.height == 27
    assert set(waits.get_column("kind").cast(pl.String)) == {"cpu_op"}
    assert waits.get_column("in_bytes").null_count() == 27
    # DDP's reducer waiting for its buckets is a wait, not compute.
    assert result.events.filter(pl.col("kind") == "sync").get_column("name").cast(
        pl.String
    ).unique().to_list() == ["torch.distributed.ddp.reducer::copy_bucket_to_grad"]
    assert result.events.filter(pl.col("kind") == "sync").height == 483


def test_nccl_parser_config_keeps_nanoseconds() -> None:
    # 2024-05 format: "ts": 4458677009853.422 relative to baseTimeNanoseconds 1711964646000000000.
    raw = _raw(NCCL_2024)
    assert b'"ts": 4458677009853.422, "dur": 2636.669,' in raw
    assert b'"baseTimeNanoseconds": 1711964646000000000' in raw
    result = _parsed(NCCL_2024)
    assert result.clock == "epoch"
    kernel = result.events.filter(pl.col("start_ns") == 1711964646000000000 + 4458677009853422)
    assert kernel.height == 1
    assert (
        kernel.get_column("name").cast(pl.String).item().startswith("ncclKernel_AllReduce_RING_LL_Sum_float")
    )
    assert kernel.get_column("dur_ns").item() == 2636669
    assert kernel.get_column("in_bytes").item() == 6637568 * 4
    # Not a multiple of 1 µs: float rounding of µs (HTA) would lose the 422 ns.
    assert kernel.get_column("start_ns").item() % 1000 == 422


def test_ns_resolution_float_epoch_generation() -> None:
    doc, result = _doc(NS_RESOLUTION), _parsed(NS_RESOLUTION)
    assert "baseTimeNanoseconds" not in doc
    assert (result.rank, result.world_size, result.backend) == (0, 1, "nccl")
    assert result.host == "twshared39868.02.pnb3.facebook.com"
    assert result.clock == "epoch"
    kept = _complete(doc)
    starts = result.events.get_column("start_ns").to_list()
    # Float µs since the epoch (1712195495519689.047 …): a double holds them to 0.25 µs, so the
    # importer is within 125 ns of the written value, never off by a whole µs.
    assert max(abs(s - _ns(e["ts"])) for s, e in zip(starts, kept, strict=True)) <= 125
    assert kept[0]["ts"] == Decimal("1712195495519689.047")
    assert abs(starts[0] - 1712195495519689047) <= 125
    # World size 1: no NCCL kernels, but 25 nccl:all_reduce and 10 nccl:broadcast annotations.
    assert _comm(result).height == 0
    names = Counter(result.events.get_column("name").cast(pl.String).to_list())
    assert (names["nccl:all_reduce"], names["nccl:broadcast"]) == (25, 10)
    assert result.events.filter(pl.col("kind") == "sync").height == 805


def test_df_index_resolver_has_no_shapes() -> None:
    result = _parsed(DF_INDEX)
    assert (result.rank, result.world_size, result.backend) == (1, 2, "nccl")
    comm = _comm(result)
    assert comm.height == 2020
    assert _collective_counts(result) == Counter({"all_reduce": 2020})
    assert set(comm.get_column("stream").to_list()) == {14}
    assert set(comm.get_column("device").to_list()) == {1}
    # record_shapes was off: no Input Dims anywhere, so no bytes rather than a guess.
    assert b'"Input Dims"' not in _raw(DF_INDEX)
    assert comm.get_column("in_bytes").null_count() == 2020
    assert result.events.height == 216092 - 28010 - 42373 - 22290 - 38 - 2  # minus i, f, s, M, i


@pytest.mark.parametrize(
    ("name", "rank", "world", "collectives", "streams", "without_bytes"),
    [
        ("hta_trace_diff/control.json.gz", 3, 8, {"all_to_all": 42, "all_reduce": 18}, {21}, 0),
        # 4 kernels whose launch lies before the profiled window: one SendRecv (send_recv by its
        # name, no bytes) and 3 all-reduces with no bytes.
        ("hta_trace_diff/test.json.gz", 1, 2, {"all_to_all": 42, "all_reduce": 21, "send_recv": 1}, {15}, 4),
        (
            "hta_trace_filter_2rank/sampled_rank-0.json.gz",
            0,
            128,
            {"all_to_all": 4, "all_reduce": 4, "all_gather": 2},
            {84, 203},
            0,
        ),
        (
            "hta_trace_filter_2rank/sampled_rank-1.json.gz",
            1,
            128,
            {"all_to_all": 4, "all_reduce": 4, "all_gather": 2},
            {84, 203},
            0,
        ),
        (
            "hta_negative_queue_length/rank0.json.gz",
            0,
            16,
            {"all_to_all": 45, "all_reduce": 10, "all_gather": 10, "reduce_scatter": 10, "send_recv": 5},
            {84, 285, 363},
            5,
        ),
    ],
)
def test_hta_nccl_traces(
    name: str, rank: int, world: int, collectives: dict[str, int], streams: set[int], without_bytes: int
) -> None:
    result = _parsed(name)
    assert (result.rank, result.world_size, result.backend) == (rank, world, "nccl")
    comm = _comm(result)
    nccl_kernels = sum(1 for e in _doc(name)["traceEvents"] if e.get("ph") == "X" and _is_comm_kernel(e))
    assert comm.height == nccl_kernels == sum(collectives.values())
    assert _collective_counts(result) == Counter(collectives)
    assert set(comm.get_column("stream").to_list()) == streams
    assert comm.get_column("in_bytes").null_count() == without_bytes


def test_trace_diff_control_all_reduce_bytes() -> None:
    comm = _comm(_parsed("hta_trace_diff/control.json.gz"))
    all_reduce = comm.filter(pl.col("collective") == "all_reduce")
    # nccl:all_reduce Input Dims [[45310188]], [[4432073]], [[267040]], float, once per step (6 steps).
    assert Counter(all_reduce.get_column("in_bytes").to_list()) == Counter(
        {45310188 * 4: 6, 4432073 * 4: 6, 267040 * 4: 6}
    )


def test_amd_rocm_trace() -> None:
    doc, result = _doc(AMD), _parsed(AMD)
    assert "distributedInfo" not in doc
    assert (result.rank, result.world_size, result.backend) == (None, None, None)
    # µs relative to baseTimeNanoseconds 1735632360000000000 (the 2024-05 format, ROCm 6.2).
    assert result.clock == "epoch"
    kinds = Counter(result.events.get_column("kind").cast(pl.String).to_list())
    assert kinds == Counter(
        {"cpu_op": 70, "runtime": 21, "compute": 14, "annotation": 5, "memcpy": 2, "other": 1}
    )
    gpu = result.events.filter(pl.col("device").is_not_null())
    # GPU activities on pid 2 (device 2), tid 0 (stream 0).
    assert set(gpu.select("device", "stream").iter_rows()) == {(2, 0)}
    assert gpu.height == 14 + 2 + 2
    runtime = result.events.filter(pl.col("kind") == "runtime").get_column("name").cast(pl.String)
    assert runtime.str.starts_with("hip").all()
    memcpy = result.events.filter(pl.col("kind") == "memcpy").head(1)
    assert memcpy.get_column("start_ns").item() == 1735632360000000000 + 4203669603454206
    assert memcpy.get_column("correlation").item() == 117
    assert memcpy.get_column("external_id").item() == 8


def test_torch19_legacy_format() -> None:
    doc, result = _doc(TORCH19), _parsed(TORCH19)
    assert (result.rank, result.world_size) == (None, None)
    events = result.events
    kinds = Counter(events.get_column("kind").cast(pl.String).to_list())
    # Operator (23646, of which 6 ProfilerStep#5..#10), Runtime, Kernel, Memcpy, Memset, Trace.
    assert kinds == Counter(
        {
            "cpu_op": 23640,
            "runtime": 11923,
            "compute": 8772,
            "memset": 312,
            "memcpy": 12,
            "annotation": 6,
            "other": 1,
        }
    )
    steps = events.filter(pl.col("name").cast(pl.String).str.starts_with("ProfilerStep#"))
    assert steps.get_column("name").cast(pl.String).to_list() == [f"ProfilerStep#{n}" for n in range(5, 11)]
    assert set(steps.get_column("cat").cast(pl.String)) == {"Operator"}
    # String tids: "stream 7" on the GPU → stream 7; "25738" on the CPU → 25738.
    gpu = events.filter(pl.col("cat").is_in(["Kernel", "Memcpy", "Memset"]))
    assert gpu.height == 8772 + 12 + 312
    assert set(gpu.select("device", "stream", "tid").iter_rows()) == {(0, 7, 7)}
    ops = events.filter(pl.col("cat") == "Operator")
    raw_ops = [e for e in _complete(doc) if e["cat"] == "Operator"]
    assert {type(e["tid"]) for e in raw_ops} == {str}
    assert ops.get_column("tid").to_list() == [int(e["tid"]) for e in raw_ops]
    assert set(ops.get_column("tid")) == {25738, 25772}  # the main and the autograd threads
    # 'External id' on CPU ops, lowercase 'external id' on runtime calls and GPU activities.
    raw_kernels = [e for e in _complete(doc) if e["cat"] == "Kernel"]
    kernels = events.filter(pl.col("cat") == "Kernel")
    assert kernels.get_column("external_id").to_list() == [e["args"]["external id"] for e in raw_kernels]
    assert kernels.get_column("correlation").to_list() == [e["args"]["correlation"] for e in raw_kernels]
    runtime = events.filter(pl.col("cat") == "Runtime")
    assert runtime.get_column("external_id").null_count() == 0
    assert ops.get_column("external_id").to_list() == [e["args"]["External id"] for e in raw_ops]
    # The "Traces" pid of the Trace span is a label, not a number.
    assert events.filter(pl.col("cat") == "Trace").get_column("pid").to_list() == [None]


# ---------------------------------------------------------------------------------------------
# Synthetic traces: one format fact each.
# ---------------------------------------------------------------------------------------------


def _x(
    name: str,
    cat: str,
    ts: float,
    dur: float,
    *,
    pid: int | str = 100,
    tid: int | str = 100,
    args: dict[str, Any] | None = None,
    **more_args: Any,
) -> dict[str, Any]:
    """A complete event; ``args`` holds keys with spaces ("Input Dims"), ``more_args`` the others."""
    event: dict[str, Any] = {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": pid,
        "tid": tid,
        "ts": ts,
        "dur": dur,
    }
    merged = {**(args or {}), **more_args}
    if merged:
        event["args"] = merged
    return event


def _kernel(
    name: str,
    ts: float,
    dur: float,
    *,
    correlation: int,
    stream: int = 7,
    args: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return _x(
        name,
        "kernel",
        ts,
        dur,
        pid=0,
        tid=stream,
        args=args,
        device=0,
        stream=stream,
        correlation=correlation,
    )


def _launch(ts: float, correlation: int, *, tid: int = 100) -> dict[str, Any]:
    return _x("cudaLaunchKernel", "cuda_runtime", ts, 2, tid=tid, correlation=correlation)


def _trace(events: list[dict[str, Any]], **top: Any) -> bytes:
    return json.dumps({"schemaVersion": 1, "traceEvents": events, **top}).encode()


EPOCH_US = 1_700_000_000_000_000  # an integer-µs epoch time (2023)


def _parse(data: bytes, **options: Any) -> FileResult:
    return parse_kineto(data, source="synthetic.json", options=ImportOptions(**options))


def test_metadata_after_trace_events() -> None:
    events = [_x("aten::mm", "cpu_op", 1000.5, 10)]
    data = json.dumps(
        {"traceEvents": events, "distributedInfo": {"rank": 5, "world_size": 6, "backend": "nccl"},
         "baseTimeNanoseconds": 1711964646000000000, "host_name": "node7"}
    ).encode()  # fmt: skip
    assert data.index(b"traceEvents") < data.index(b"distributedInfo")
    result = _parse(data)
    assert (result.rank, result.world_size, result.backend, result.host) == (5, 6, "nccl", "node7")
    assert result.clock == "epoch"
    assert result.events.get_column("start_ns").to_list() == [1711964646000000000 + 1000500]


def test_relative_times_without_base_are_flagged() -> None:
    result = _parse(_trace([_x("aten::mm", "cpu_op", 1000.25, 10)]))
    assert result.clock == "relative"
    assert result.events.get_column("start_ns").to_list() == [1000250]


@pytest.mark.parametrize("gzipped", [True, False])
@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_gzip_recognised_by_content(tmp_path: Path, gzipped: bool, suffix: str) -> None:
    plain = _trace([_x("aten::mm", "cpu_op", EPOCH_US, 10)], distributedInfo={"rank": 0})
    path = tmp_path / f"rank0{suffix}"
    path.write_bytes(gzip.compress(plain) if gzipped else plain)
    warnings: list[str] = []
    assert read_trace_bytes(path, warnings) == plain
    assert warnings == []
    assert sniff_format(plain, str(path)) == "kineto"
    trace = load(path)
    assert trace.events.get_column("name").cast(pl.String).to_list() == ["aten::mm"]
    assert trace.files.get_column("format").to_list() == ["kineto"]


def test_cuda_sync_is_sync_not_compute() -> None:
    result = _parse(
        _trace(
            [
                _x("cudaStreamSynchronize", "cuda_sync", EPOCH_US, 50, pid=0, tid=7, device=0, stream=7),
                _x("Event Sync", "cuda_sync", EPOCH_US + 60, 5, pid=0, tid=1000007, device=0, stream=1000007),
                _kernel("void gemm<float>()", EPOCH_US + 100, 20, correlation=1),
            ]
        )
    )
    assert result.events.get_column("kind").cast(pl.String).to_list() == ["sync", "sync", "compute"]
    assert result.events.get_column("device").to_list() == [0, 0, 0]
    assert result.events.get_column("stream").to_list() == [7, 1000007, 7]


def test_rccl_generic_kernel_takes_collective_from_linked_op() -> None:
    # RCCL names no collective in ncclDevKernel_Generic and writes no args: the nccl:* op around
    # the launch (correlation 41) says all_reduce of 1024 floats; the one around launch 42, a
    # broadcast of 10 int64.
    events = [
        _x("record_param_comms", "cpu_op", EPOCH_US, 100),
        _x(
            "nccl:all_reduce",
            "user_annotation",
            EPOCH_US + 5,
            80,
            args={"Input Dims": [[1024]], "Input type": ["float"]},
        ),
        _x("hipLaunchKernel", "cuda_runtime", EPOCH_US + 10, 5, correlation=41),
        _x(
            "nccl:broadcast",
            "user_annotation",
            EPOCH_US + 200,
            50,
            args={"Input Dims": [[10]], "Input type": ["long int"]},
        ),
        _x("hipLaunchKernel", "cuda_runtime", EPOCH_US + 210, 5, correlation=42),
        _kernel(
            "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", EPOCH_US + 20, 300, correlation=41
        ),
        _kernel(
            "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", EPOCH_US + 400, 30, correlation=42
        ),
        _kernel(
            "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", EPOCH_US + 500, 30, correlation=43
        ),
    ]
    comm = _comm(_parse(_trace(events)))
    assert comm.select(pl.col("collective").cast(pl.String), "in_bytes", "out_bytes").rows() == [
        ("all_reduce", 4096, 4096),
        ("broadcast", 80, 80),
        (None, None, None),  # no launch in the trace: communication of an unknown collective
    ]
    assert comm.get_column("start_ns").to_list() == [(EPOCH_US + t) * 1000 for t in (20, 400, 500)]


def test_extra_comm_kernels_rule() -> None:
    # a custom all-reduce kernel the defaults do not know (#20 made vLLM's cross_device_reduce_1stage
    # a default: tests/importers/test_kernel_names.py)
    events = [
        _kernel("void my_allreduce_kernel<float, 8>(float*)", EPOCH_US, 40, correlation=1),
        _kernel("void gemm<float>()", EPOCH_US + 50, 40, correlation=2),
    ]
    default = _parse(_trace(events))
    assert default.events.get_column("kind").cast(pl.String).to_list() == ["compute", "compute"]
    custom = _parse(_trace(events), rules=ClassificationRules(extra_comm_kernels=("my_allreduce",)))
    assert custom.events.get_column("kind").cast(pl.String).to_list() == ["communication", "compute"]


@pytest.mark.parametrize(
    ("collective", "nbytes"), [("wait", None), ("barrier", None), ("allreduce", 4096 * 2)]
)
def test_wait_and_barrier_carry_no_bytes(collective: str, nbytes: int | None) -> None:
    # torch >= 2.4: the collective's record_param_comms around the launch names it and its size.
    args = {"Collective name": collective, "In msg nelems": 4096, "Out msg nelems": 4096, "dtype": "BFloat16"}
    events = [
        _x("record_param_comms", "cpu_op", EPOCH_US, 100, args=args),
        _launch(EPOCH_US + 10, 7),
        _kernel("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", EPOCH_US + 20, 30, correlation=7),
    ]
    comm = _comm(_parse(_trace(events)))
    assert comm.height == 1
    expected = {"wait": "wait", "barrier": "barrier", "allreduce": "all_reduce"}[collective]
    assert comm.get_column("collective").cast(pl.String).item() == expected
    assert comm.get_column("in_bytes").item() == nbytes
    assert comm.get_column("out_bytes").item() == nbytes


def test_kernel_args_win_over_linked_op() -> None:
    kernel_args = {
        "Collective name": "_allgather_base",
        "In msg nelems": 100,
        "Out msg nelems": 800,
        "dtype": "Float",
        "Group size": 8,
        "Process Group Name": "3",
        "Seq": 17,
    }
    events = [
        _x(
            "nccl:all_reduce",
            "user_annotation",
            EPOCH_US,
            100,
            args={"Input Dims": [[5]], "Input type": ["float"]},
        ),
        _launch(EPOCH_US + 10, 7),
        _kernel(
            "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            EPOCH_US + 20,
            30,
            correlation=7,
            args=kernel_args,
        ),
    ]
    comm = _comm(_parse(_trace(events)))
    row = comm.select(
        pl.col("collective").cast(pl.String),
        "in_bytes",
        "out_bytes",
        "group_size",
        pl.col("pg_name").cast(pl.String),
        "seq",
    ).row(0)
    assert row == ("all_gather", 400, 3200, 8, "3", 17)


def test_events_ending_before_they_start_are_dropped_with_one_warning() -> None:
    events = [
        _x("aten::mm", "cpu_op", EPOCH_US, 10),
        _x("broken", "cpu_op", EPOCH_US + 20, -5),
        _kernel("void gemm<float>()", EPOCH_US + 30, -1, correlation=3),
        _x("aten::add", "cpu_op", EPOCH_US + 40, 0),
    ]
    result = _parse(_trace(events))
    assert result.events.get_column("name").cast(pl.String).to_list() == ["aten::mm", "aten::add"]
    assert result.warnings == ["synthetic.json: dropped 2 events with end < start"]


def test_events_without_timestamps_are_dropped_with_one_warning() -> None:
    events = [_x("aten::mm", "cpu_op", EPOCH_US, 10), {"ph": "X", "cat": "cpu_op", "name": "no ts", "dur": 3}]
    result = _parse(_trace(events))
    assert result.events.height == 1
    assert result.warnings == ["synthetic.json: dropped 1 events without ts or dur"]


_EDGE_TIMES = [
    0.0,
    1.0,
    -1.0,
    _MAX_US,
    -_MAX_US,
    _MAX_US * 1.5,
    -_MAX_US * 1.5,
    math.inf,
    -math.inf,
    math.nan,
]


def _validity(times: list[tuple[float | None, float | None]]) -> tuple[bool, bool]:
    """``_all_valid`` of the times, and whether none of the three masks of ``_invalid`` is set."""
    frame = pl.DataFrame(
        {"ts": [t for t, _ in times], "dur": [d for _, d in times]},
        schema={"ts": pl.Float64, "dur": pl.Float64},
    )
    any_invalid = frame.select(pl.any_horizontal(*_invalid(pl.col("ts"), pl.col("dur"))).any()).item()
    return _all_valid(frame.get_column("ts"), frame.get_column("dur")), not any_invalid


@pytest.mark.parametrize("position", [0, 1, 2])
@pytest.mark.parametrize(
    "bad",
    [
        (None, 1.0),
        (1.0, None),
        (math.nan, 1.0),
        (1.0, math.nan),
        (_MAX_US * 1.5, 1.0),
        (-_MAX_US * 1.5, 1.0),
        (1.0, _MAX_US * 1.5),
        (1.0, -1.0),
        (math.inf, 1.0),
        (1.0, math.inf),
        (-math.inf, 1.0),
    ],
)
def test_one_invalid_time_among_valid_ones_fails_the_quick_check(
    bad: tuple[float | None, float | None], position: int
) -> None:
    # _all_valid is the fast path of the drop counts: one bad value anywhere must send it to the masks
    times: list[tuple[float | None, float | None]] = [(1.0, 2.0), (-_MAX_US, 0.0), (_MAX_US, _MAX_US)]
    assert _validity(times) == (True, True)
    times[position] = bad
    assert _validity(times) == (False, False)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(
                st.floats(min_value=-10, max_value=10), st.none(), st.sampled_from(_EDGE_TIMES), st.floats()
            ),
            st.one_of(
                st.floats(min_value=-10, max_value=10), st.none(), st.sampled_from(_EDGE_TIMES), st.floats()
            ),
        ),
        max_size=6,
    )
)
def test_the_quick_validity_check_agrees_with_the_three_masks(
    times: list[tuple[float | None, float | None]],
) -> None:
    quick, by_masks = _validity(times)
    assert quick is by_masks


def test_gloo_cpu_collectives_are_communication_with_bytes() -> None:
    # CPU-only job: gloo:* user_annotations on the pt_gloo_runloop thread carry Input Dims.
    events = [
        _x("aten::mm", "cpu_op", EPOCH_US, 500, tid=1),
        _x("gloo:all_reduce", "user_annotation", EPOCH_US + 100, 300, tid=2,
           args={"Input Dims": [[1000, 25]], "Input type": ["float"]}),
        _x("gloo:broadcast", "user_annotation", EPOCH_US + 600, 30, tid=2,
           args={"Input Dims": [[7]], "Input type": ["long int"]}),
        _x("c10d::wait", "cpu_op", EPOCH_US + 500, 100, tid=1),
    ]  # fmt: skip
    result = _parse(_trace(events))
    kinds = result.events.get_column("kind").cast(pl.String).to_list()
    assert kinds == ["cpu_op", "communication", "communication", "sync"]
    comm = _comm(result)
    assert comm.select(
        pl.col("collective").cast(pl.String), "in_bytes", pl.col("dtype").cast(pl.String)
    ).rows() == [
        ("all_reduce", 1000 * 25 * 4, "float"),
        ("broadcast", 7 * 8, "long int"),
    ]
    assert comm.get_column("device").null_count() == 2


def test_python_functions_dropped_by_default_and_kept_on_request() -> None:
    events = [
        _x("train.py(12): step", "python_function", EPOCH_US, 100),
        _x("aten::mm", "cpu_op", EPOCH_US + 10, 10),
        _x("torch/nn/modules/module.py(1501): _call_impl", "python_function", EPOCH_US + 20, 50),
    ]
    default = _parse(_trace(events))
    assert default.events.get_column("name").cast(pl.String).to_list() == ["aten::mm"]
    assert default.warnings == []
    kept = _parse(_trace(events), include_python=True)
    assert kept.events.get_column("kind").cast(pl.String).to_list() == [
        "python_function",
        "cpu_op",
        "python_function",
    ]


def test_include_python_through_load(tmp_path: Path) -> None:
    path = tmp_path / "rank0.json"
    path.write_bytes(
        _trace(
            [
                _x("train.py(12): step", "python_function", EPOCH_US, 100),
                _x("aten::mm", "cpu_op", EPOCH_US, 1),
            ]
        )
    )
    assert load(path).events.height == 1
    assert load(path, include_python=True).events.height == 2


def test_non_event_records_are_ignored() -> None:
    events = [
        {"ph": "M", "name": "process_name", "pid": 100, "tid": 0, "args": {"name": "python"}},
        {"ph": "i", "s": "t", "name": "[memory]", "pid": 100, "tid": 100, "ts": EPOCH_US},
        {"ph": "s", "id": 1, "pid": 100, "tid": 100, "ts": EPOCH_US, "cat": "ac2g", "name": "ac2g"},
        {"ph": "f", "id": 1, "pid": 0, "tid": 7, "ts": EPOCH_US, "cat": "ac2g", "name": "ac2g", "bp": "e"},
        _x("aten::mm", "cpu_op", EPOCH_US, 10),
    ]
    assert _parse(_trace(events)).events.get_column("name").cast(pl.String).to_list() == ["aten::mm"]


def test_unexpected_shapes_are_tolerated() -> None:
    # args that is a list, a string pid, a string tid that is a number: decoded generically.
    events = [
        {**_x("aten::mm", "cpu_op", EPOCH_US, 10), "args": ["odd"]},
        _x("aten::add", "cpu_op", EPOCH_US + 20, 10, pid="Spans", tid="123"),
    ]
    result = _parse(_trace(events))
    assert result.events.select("name", "pid", "tid").rows() == [
        ("aten::mm", 100, 100),
        ("aten::add", None, 123),
    ]


def test_no_trace_events_key_is_a_content_error() -> None:
    with pytest.raises(TraceContentError, match=r"^synthetic\.json:1:1: no traceEvents array"):
        _parse(b'{"schemaVersion": 1, "deviceProperties": []}')


def test_empty_trace_events_parse_to_no_rows() -> None:
    result = _parse(b'{"traceEvents": []}')
    assert result.events.height == 0
    assert result.events.schema == EVENTS_SCHEMA
