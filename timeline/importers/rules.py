"""Configurable rules that classify trace events into kinds.

Defaults follow the format facts in ``docs/formats.md``: NCCL, RCCL (including the name-less
``ncclDevKernel_Generic``), HCCL and MSCCL kernels are communication; gloo collectives are
communication on CPU-only jobs; ``cuda_sync`` events are sync and never compute. Users add patterns for
custom all-reduce kernels (``--comm-kernel 'cross_device_reduce_.*'``) or ops that block on a collective.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["ClassificationRules"]

DEFAULT_COMM_KERNELS: tuple[str, ...] = (
    r"^nccl",  # ncclKernel_*, ncclDevKernel_*, ncclSymDevKernel_*; RCCL keeps the nccl prefix
    r"^rccl",
    r"^hccl",
    r"^msccl",
    r"^c10d::",  # device-side collectives named by c10d (rare)
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
        User patterns added to ``comm_kernels`` (custom all-reduce kernels, e.g.
        ``cross_device_reduce_1stage``, ``allreduce_fusion``).
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

    def comm_kernel_regex(self) -> str:
        """Return the one regex that matches communication kernel names."""
        return _compile(self.comm_kernels + self.extra_comm_kernels)

    def cpu_comm_regex(self) -> str:
        """Return the one regex that matches CPU-side collectives."""
        return _compile(self.cpu_comm_ops)

    def cpu_sync_regex(self) -> str:
        """Return the one regex that matches CPU ops that wait."""
        return _compile(self.cpu_sync_ops + self.extra_cpu_sync_ops)
