"""Communication kernel names of NCCL 2.12-2.28, RCCL, and the custom all-reduce kernels of serving stacks.

Each name as a profiler writes it (demangled, with its arguments), the kind and collective written
out by hand from the kernel's source (NCCL ``src/device``, vLLM/SGLang ``custom_all_reduce.cuh``,
FlashInfer ``trtllm_allreduce_fusion``, torch ``CUDASymmetricMemoryOps.cu``).
"""

from __future__ import annotations

import json

import polars as pl
import pytest

from timeline.importers.kineto import parse_kineto

NAMES = [
    (
        "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
        "all_reduce",
    ),  # < 2.19
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "all_gather"),  # 2.19+
    ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "reduce_scatter"),
    ("ncclDevKernel_AllReduce_Sum_f32_NVLS_SIMPLE(ncclDevKernelArgsStorage<4096ul>)", "all_reduce"),
    ("ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "broadcast"),
    ("ncclDevKernel_Reduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "reduce"),
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "send_recv"),
    ("ncclSymDevKernel_AllReduce_RSxLD_AGxST_sum_bf16(ncclSymDevArgs)", "all_reduce"),  # 2.27 symmetric
    ("ncclSymDevKernel_AllGather_LL(ncclSymDevArgs)", "all_gather"),
    ("ncclSymDevKernel_ReduceScatter_LD_sum_f8e5m2(ncclSymDevArgs)", "reduce_scatter"),
    ("ncclSymkDevKernel_AllReduce_AGxLLMC_R_sum_bf16(ncclSymkDevWorkArgs4K)", "all_reduce"),  # 2.28+
    ("ncclDevKernel_Generic(ncclDevComm*, unsigned long, ncclWork*)", None),  # RCCL: not in the name
    (
        "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, "
        "vllm::Signal*, __nv_bfloat16*, int, int)",
        "all_reduce",
    ),
    (
        "void sglang::cross_device_reduce_2stage<half, 4>(sglang::RankData*, sglang::RankSignals, "
        "sglang::Signal*, half*, int, int)",
        "all_reduce",
    ),
    (
        "void flashinfer::trtllm_allreduce_fusion::allreduce_fusion_kernel_oneshot_lamport<(flashinfer::"
        "trtllm_allreduce_fusion::AllReduceFusionPattern)1, __nv_bfloat16, 8, false, false>(flashinfer::"
        "trtllm_allreduce_fusion::AllReduceFusionParams<__nv_bfloat16>)",
        "all_reduce",
    ),
    (
        "void (anonymous namespace)::two_shot_all_reduce_kernel_inplace<c10::BFloat16, 16, 2>("
        "c10::BFloat16**, unsigned long, unsigned long, unsigned int**, unsigned long, unsigned long)",
        "all_reduce",
    ),
    (
        "void c10d::symmetric_memory::multimem_all_reduce_kernel<c10::BFloat16, 16, 8>(c10::BFloat16*)",
        "all_reduce",
    ),
]
NOT_COMMUNICATION = [
    "triton_poi_fused_add_all_reduce_4",  # an inductor kernel that only names the op it was fused near
    "inkling_two_shot_all_reduce_kernel",  # not the torch kernel: no word boundary before two_shot
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, float)",
]


def kernels(names: list[str]) -> bytes:
    events = [
        {
            "ph": "X",
            "cat": "kernel",
            "name": name,
            "pid": 0,
            "tid": 7,
            "ts": 10.0 * i,
            "dur": 5.0,
            "args": {"device": 0, "stream": 7, "correlation": i + 1},
        }
        for i, name in enumerate(names)
    ]
    return json.dumps({"traceEvents": events}).encode()


def test_communication_kernels_and_their_collective() -> None:
    frame = parse_kineto(kernels([name for name, _ in NAMES]), source="t.json").events.sort("start_ns")
    assert frame["kind"].to_list() == ["communication"] * len(NAMES)
    assert frame["collective"].cast(pl.String).to_list() == [collective for _, collective in NAMES]


@pytest.mark.parametrize("name", NOT_COMMUNICATION)
def test_compute_kernels_that_only_look_alike(name: str) -> None:
    frame = parse_kineto(kernels([name]), source="t.json").events
    assert frame["kind"].to_list() == ["compute"]
