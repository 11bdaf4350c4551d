"""Configurable rules that classify trace events into kinds.

Defaults follow the format facts in ``docs/formats.md``: NCCL, RCCL (including the name-less
``ncclDevKernel_Generic``), HCCL and MSCCL kernels, and the custom all-reduce kernels of vLLM,
SGLang, FlashInfer/TensorRT-LLM and torch's symmetric memory (:data:`CUSTOM_ALL_REDUCE_KERNELS`),
are communication; gloo collectives are communication on CPU-only jobs; ``cuda_sync`` events are
sync and never compute. Users add patterns for other kernels (``--comm-kernel 'my_allreduce_.*'``)
or ops that block on a collective.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from timeline.errors import UsageError

__all__ = [
    "CPU_COMMUNICATION_CALLS",
    "CUSTOM_ALL_REDUCE_KERNELS",
    "DEFAULT_COMM_KERNELS",
    "ClassificationRules",
    "check_pattern",
]

CUSTOM_ALL_REDUCE_KERNELS: tuple[str, ...] = (
    # vLLM, SGLang (sgl-kernel) and AMD aiter's custom all-reduce (csrc/custom_all_reduce.cuh):
    # cross_device_reduce_1stage / _2stage, aiter's cross_device_reduce_1stage_naive
    r"\bcross_device_reduce_[12]stage",
    # FlashInfer / TensorRT-LLM's fused all-reduce (trtllm_allreduce_fusion): allreduce_fusion_kernel_
    # oneshot_lamport, allreduce_fusion_kernel_twoshot_sync
    r"\ballreduce_fusion_kernel",
    # torch symmetric memory (CUDASymmetricMemoryOps.cu): one_shot_all_reduce_kernel,
    # two_shot_all_reduce_kernel(_inplace), multimem_all_reduce_kernel, multimem_one_shot_all_reduce_kernel
    r"\b(?:one|two)_shot_all_reduce_kernel",
    r"\bmultimem_(?:one_shot_)?all_reduce_kernel",
)
"""Custom all-reduce kernels by the names their sources give them (demangled: ``void
vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(...)``): communication, collective ``all_reduce``
(:func:`timeline.importers.collectives.collective_from_kernel`). They run outside NCCL and carry no
process group: their group is told as for gloo's ops."""

DEFAULT_COMM_KERNELS: tuple[str, ...] = (
    r"^nccl",  # ncclKernel_*, ncclDevKernel_*, ncclSymDevKernel_*, ncclSymkDevKernel_*; RCCL keeps the prefix
    r"^rccl",
    r"^hccl",
    r"^msccl",
    r"^c10d::",  # device-side collectives named by c10d (rare)
    *CUSTOM_ALL_REDUCE_KERNELS,
)
DEFAULT_CPU_COMM_OPS: tuple[str, ...] = (
    r"^gloo:",  # torch >= 1.13: gloo:all_reduce etc., user_annotation on the gloo worker threads
    r"^mpi:",
    r"^ucc:",
)
# CPU ops that block the training thread until a collective finishes. On CPU-only jobs they are
# waiting, not computing. DDP's reducer waits for a bucket's all-reduce future inside
# copy_bucket_to_grad (torch 2.x, gloo backend), so its time is counted as a wait.
DEFAULT_CPU_SYNC_OPS: tuple[str, ...] = (
    r"^c10d::wait",
    r"^aten::wait",
    r"^torch\.distributed\..*\bwait",
    r"^ProcessGroup.*::wait",
    r"^torch\.distributed\.ddp\.reducer::copy_bucket_to_grad$",
    r"^cuda(Stream|Event|Device)Synchronize$",
    r"^hip(Stream|Event|Device)Synchronize$",
)


CPU_COMMUNICATION_CALLS: tuple[str, ...] = (
    r"^c10d::",  # c10d::allreduce_, c10d::send, c10d::recv_, c10d::_allgather_base_ …
    r"^_?c10d_functional::",  # functional collectives and _c10d_functional::wait_tensor
)
"""The calls into c10d, on the thread that issues or waits on communication. On CPU-only ranks the
time inside them is not compute (:func:`timeline.analysis.iterations.activity_sets`): the thread is
issuing, or waiting for, a collective or a transfer (gloo's send or receive, a functional
collective's ``wait_tensor``), not running the model."""


def check_pattern(pattern: str, *, label: str) -> None:
    r"""Check that a user's regex compiles in polars' engine (Rust ``regex``) and in Python's ``re``.

    Event names are matched by polars, whose engine has no look-around (``(?=``, ``(?<=``) and no
    backreferences (``\1``); the rules are also compiled by ``re``, joined with ``|`` (where a
    global flag such as ``(?i)`` must be scoped: ``(?i:...)``). A pattern must work in both.

    Parameters
    ----------
    pattern
        The user's pattern.
    label
        How the message names where it came from (``--comm-kernel``, ``comm_kernels pattern``).

    Raises
    ------
    UsageError
        ``--comm-kernel '(?<=gemm)': not a regex timeline can match with (look-around, ...); ...``.
    """
    import polars as pl

    reason = None
    wrapped = f"(?:{pattern})"  # as the classification rules join the patterns
    try:
        pl.Series("name", [""], dtype=pl.String).str.contains(wrapped)
    except pl.exceptions.PolarsError as exc:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        told = [line.removeprefix("error: ") for line in lines if line.startswith("error: ")]
        reason = told[0] if told else lines[0].removeprefix("regex error: ") if lines else "invalid"
    if reason is None:
        try:
            re.compile(f"(?:nccl)|{wrapped}")
        except re.error as exc:
            reason = exc.msg  # its position is in the joined pattern
    if reason is not None:
        reason = reason[:1].lower() + reason[1:].rstrip(".")
        msg = (
            f"{label} {pattern!r}: not a regex timeline can match with ({reason}); write it in the "
            "syntax of Rust's regex crate, which polars uses: no look-around, no backreferences, flags "
            "scoped as (?i:...)"
        )
        raise UsageError(msg)


def _compile(patterns: tuple[str, ...]) -> str:
    """Return one regex alternation, checked to compile."""
    joined = "|".join(f"(?:{p})" for p in patterns)
    re.compile(joined)
    return joined


@dataclass(frozen=True, kw_only=True)
class ClassificationRules:
    """Regex rules (Rust/Python regex syntax, matched with ``search``) that decide event kinds.

    Attributes
    ----------
    comm_kernels
        GPU kernels whose names match are communication; the other kernels are compute.
    extra_comm_kernels
        User patterns added to ``comm_kernels`` (custom kernels the defaults do not know, e.g.
        ``my_allreduce_kernel``).
    cpu_comm_ops
        CPU annotations/ops that are a collective running on a CPU thread (gloo on CPU-only jobs).
    cpu_sync_ops
        CPU ops that block on a collective or a device: sync, never compute.
    extra_cpu_sync_ops
        User patterns added to ``cpu_sync_ops``.
    """

    comm_kernels: tuple[str, ...] = DEFAULT_COMM_KERNELS
    extra_comm_kernels: tuple[str, ...] = field(default=())
    cpu_comm_ops: tuple[str, ...] = DEFAULT_CPU_COMM_OPS
    cpu_sync_ops: tuple[str, ...] = DEFAULT_CPU_SYNC_OPS
    extra_cpu_sync_ops: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        """Check the user's patterns (:func:`check_pattern`): a bad one is a :class:`UsageError`."""
        for pattern in self.extra_comm_kernels:
            check_pattern(pattern, label="comm kernel pattern")
        for pattern in self.extra_cpu_sync_ops:
            check_pattern(pattern, label="cpu sync pattern")

    def comm_kernel_regex(self) -> str:
        """Return the one regex that matches communication kernel names."""
        return _compile(self.comm_kernels + self.extra_comm_kernels)

    def cpu_comm_regex(self) -> str:
        """Return the one regex that matches CPU-side collectives."""
        return _compile(self.cpu_comm_ops)

    def cpu_sync_regex(self) -> str:
        """Return the one regex that matches CPU ops that wait."""
        return _compile(self.cpu_sync_ops + self.extra_cpu_sync_ops)
