"""Collective names and element sizes shared by the importers.

Profilers spell one collective many ways (``allreduce``, ``all_reduce``, ``nccl:all_reduce``,
``ncclKernel_AllReduce_RING_LL_Sum_float``, ``c10d::allreduce_``, Horovod ``ALLREDUCE``); the
canonical ``collective`` column uses one snake_case name each.
"""

from __future__ import annotations

import re

__all__ = [
    "CANONICAL_COLLECTIVES",
    "DTYPE_BYTES",
    "collective_from_kernel",
    "dtype_size",
    "normalise_collective",
]

CANONICAL_COLLECTIVES: tuple[str, ...] = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "broadcast",
    "reduce",
    "gather",
    "scatter",
    "send",
    "recv",
    "send_recv",
    "barrier",
    "wait",
    "adasum",
)

# Element sizes by every dtype spelling seen in traces: torch ScalarType names in kernel args
# ("Float", "BFloat16"), C type names in "Input type" ("float", "c10::Half", "long int"), numpy
# names in Horovod timelines ("float32").
DTYPE_BYTES: dict[str, int] = {
    "float": 4,
    "float32": 4,
    "fp32": 4,
    "single": 4,
    "double": 8,
    "float64": 8,
    "fp64": 8,
    "half": 2,
    "float16": 2,
    "fp16": 2,
    "c10::half": 2,
    "bfloat16": 2,
    "bf16": 2,
    "c10::bfloat16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "float8_e4m3fnuz": 1,
    "float8_e5m2fnuz": 1,
    "byte": 1,
    "uint8": 1,
    "unsigned char": 1,
    "char": 1,
    "int8": 1,
    "signed char": 1,
    "bool": 1,
    "short": 2,
    "int16": 2,
    "short int": 2,
    "uint16": 2,
    "int": 4,
    "int32": 4,
    "uint32": 4,
    "unsigned int": 4,
    "long": 8,
    "int64": 8,
    "long int": 8,
    "long long": 8,
    "long long int": 8,
    "uint64": 8,
    "complexfloat": 8,
    "complex64": 8,
    "c10::complex<float>": 8,
    "complexdouble": 16,
    "complex128": 16,
    "c10::complex<double>": 16,
}

_ALIASES: dict[str, str] = {
    "allreduce": "all_reduce",
    "allreduce_coalesced": "all_reduce",
    "allreduce_sparse": "all_reduce",
    "all_reduce_coalesced": "all_reduce",
    "allgather": "all_gather",
    "all_gather_into_tensor": "all_gather",
    "allgather_into_tensor": "all_gather",
    "allgather_into_tensor_coalesced": "all_gather",
    "all_gather_into_tensor_coalesced": "all_gather",
    "allgather_base": "all_gather",
    "all_gather_base": "all_gather",
    "allgather_coalesced": "all_gather",
    "reducescatter": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "reduce_scatter_base": "reduce_scatter",
    "reducescatter_base": "reduce_scatter",
    "alltoall": "all_to_all",
    "alltoall_base": "all_to_all",
    "all_to_allv": "all_to_all",
    "alltoallv": "all_to_all",
    "all_to_all_single": "all_to_all",
    "sendrecv": "send_recv",
    "bcast": "broadcast",
    "_broadcast_oop": "broadcast",
    "broadcast_oop": "broadcast",
    "reduce_oop": "reduce",
}

_KERNEL_OPS: dict[str, str] = {
    "allreduce": "all_reduce",
    "allgather": "all_gather",
    "reducescatter": "reduce_scatter",
    "alltoall": "all_to_all",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "sendrecv": "send_recv",
    "send": "send",
    "recv": "recv",
}
# ncclKernel_* (NCCL < 2.19), ncclDevKernel_* (2.19+), ncclSymDevKernel_* (2.27 symmetric kernels),
# ncclSymkDevKernel_* (2.28+), rccl*/hccl* alike: the collective follows the first underscore.
_KERNEL_OP = re.compile(
    r"(?:nccl|rccl|hccl)[A-Za-z]*?(?:Kernel|DevKernel|SymDevKernel|SymkDevKernel)?_(AllReduce|AllGather|"
    r"ReduceScatter|AllToAll|Broadcast|Reduce|SendRecv|Send|Recv)",
    re.IGNORECASE,
)
# The custom all-reduce kernels of timeline.importers.rules.CUSTOM_ALL_REDUCE_KERNELS
_CUSTOM_ALL_REDUCE = re.compile(
    r"\b(?:cross_device_reduce_[12]stage|allreduce_fusion_kernel|(?:one|two)_shot_all_reduce_kernel|"
    r"multimem_(?:one_shot_)?all_reduce_kernel)"
)


def normalise_collective(name: str | None) -> str | None:
    """Return the canonical collective name of any spelling, or None when it names no collective.

    Examples
    --------
    >>> normalise_collective("nccl:all_reduce")
    'all_reduce'
    >>> normalise_collective("_allgather_base")
    'all_gather'
    >>> normalise_collective("ALLREDUCE")
    'all_reduce'
    """
    if not name:
        return None
    key = name.strip().lower()
    for prefix in ("nccl:", "gloo:", "mpi:", "ucc:", "hccl:", "xccl:", "c10d::", "c10d:"):
        if key.startswith(prefix):
            key = key[len(prefix) :]
            break
    key = key.strip("_")
    if key in CANONICAL_COLLECTIVES:
        return key
    return _ALIASES.get(key)


def collective_from_kernel(kernel_name: str) -> str | None:
    """Return the collective a communication kernel implements, from its name, or None.

    RCCL's ``ncclDevKernel_Generic`` does not name its collective: None. The custom all-reduce
    kernels of vLLM, SGLang, FlashInfer/TensorRT-LLM and torch's symmetric memory are ``all_reduce``.

    Examples
    --------
    >>> collective_from_kernel("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)")
    'all_reduce'
    >>> collective_from_kernel("ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)")
    'send_recv'
    >>> collective_from_kernel("ncclSymkDevKernel_AllGather_LLMC(ncclSymkDevWorkArgs4K)")
    'all_gather'
    >>> collective_from_kernel("void vllm::cross_device_reduce_2stage<__nv_bfloat16, 8>(vllm::RankData*)")
    'all_reduce'
    """
    match = _KERNEL_OP.search(kernel_name)
    if match is None:
        return "all_reduce" if _CUSTOM_ALL_REDUCE.search(kernel_name) else None
    return _KERNEL_OPS[match.group(1).lower()]


def dtype_size(dtype: str | None) -> int | None:
    """Return the size in bytes of one element of ``dtype`` (any spelling), or None if unknown."""
    if not dtype:
        return None
    key = dtype.strip().lower()
    if key.startswith("torch."):
        key = key[len("torch.") :]
    return DTYPE_BYTES.get(key)
