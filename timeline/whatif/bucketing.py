"""Gradient bucketing policies: which gradients travel together, and when each bucket can leave.

Takes the gradients of one backward pass in the order they became ready (time and bytes each);
gives buckets (the gradients they hold, their bytes, the time they are ready to be sent):

- :func:`ddp_buckets`, PyTorch DDP's policy after its first iteration (the reducer rebuilds its
  buckets in the order gradients became ready): gradients are appended to the current bucket,
  which closes as soon as it holds at least its cap; the first bucket's cap is 1 MiB
  (``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES``), the others ``bucket_cap_mb`` (25 MiB by
  default). A bucket is ready when its last gradient is, and buckets leave in order.
- :func:`fusion_buckets`, Horovod's tensor fusion as the seed paper's simulator models it: a bucket
  closes, and leaves, at the first gradient after which ``cycle`` has passed since the previous
  bucket left or the bucket holds at least ``fusion`` bytes (Horovod: 64 MiB and a 5 ms cycle).

:class:`DDPBuckets`, :class:`FusionBuckets` and :data:`MEASURED` name a policy for the what-if
engine; :func:`parse_bucket_policy` reads the command line's spelling of one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import msgspec

from timeline.errors import UsageError

__all__ = [
    "DDP_DEFAULT_BUCKET_BYTES",
    "DDP_FIRST_BUCKET_BYTES",
    "HOROVOD_CYCLE_NS",
    "HOROVOD_FUSION_BYTES",
    "MEASURED",
    "Bucket",
    "BucketPolicy",
    "DDPBuckets",
    "FusionBuckets",
    "GradientReady",
    "MeasuredBuckets",
    "ddp_buckets",
    "fusion_buckets",
    "make_buckets",
    "parse_bucket_policy",
]

MIB = 1024 * 1024
DDP_FIRST_BUCKET_BYTES = 1 * MIB
"""DDP's first bucket cap (``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES``)."""
DDP_DEFAULT_BUCKET_BYTES = 25 * MIB
"""DDP's ``bucket_cap_mb`` default."""
HOROVOD_FUSION_BYTES = 64 * MIB
"""Horovod's ``HOROVOD_FUSION_THRESHOLD`` default."""
HOROVOD_CYCLE_NS = 5_000_000
"""Horovod's ``HOROVOD_CYCLE_TIME`` of the seed paper (5 ms)."""


class GradientReady(msgspec.Struct, frozen=True):
    """One gradient: when it became ready (ns, any origin) and its size in bytes."""

    ready_ns: int
    nbytes: int


class Bucket(msgspec.Struct, frozen=True):
    """Gradients sent by one collective."""

    ready_ns: int
    """When the bucket can be sent (its last gradient is ready, and the previous bucket has left)."""
    nbytes: int
    """The sum of its gradients' bytes."""
    members: tuple[int, ...]
    """Indices of its gradients in the input sequence."""


@dataclass(frozen=True)
class MeasuredBuckets:
    """Keep the buckets the trace shows (one per measured gradient collective)."""

    @property
    def label(self) -> str:
        """The policy as the command line spells it."""
        return "measured"


@dataclass(frozen=True)
class DDPBuckets:
    """PyTorch DDP's bucketing with a bucket cap (``bucket_cap_mb``) and a first-bucket cap."""

    cap_bytes: int = DDP_DEFAULT_BUCKET_BYTES
    first_cap_bytes: int = DDP_FIRST_BUCKET_BYTES

    @property
    def label(self) -> str:
        """The policy as the command line spells it."""
        first = "" if self.first_cap_bytes == DDP_FIRST_BUCKET_BYTES else f":{_mib(self.first_cap_bytes)}"
        return f"ddp:{_mib(self.cap_bytes)}{first}"


@dataclass(frozen=True)
class FusionBuckets:
    """Horovod-style tensor fusion: a fusion buffer size and a cycle time."""

    fusion_bytes: int = HOROVOD_FUSION_BYTES
    cycle_ns: int = HOROVOD_CYCLE_NS

    @property
    def label(self) -> str:
        """The policy as the command line spells it."""
        return f"fusion:{_mib(self.fusion_bytes)}:{self.cycle_ns / 1e6:g}"


BucketPolicy = MeasuredBuckets | DDPBuckets | FusionBuckets
"""A bucketing policy for the what-if engine."""

MEASURED = MeasuredBuckets()
"""The policy that keeps the trace's own buckets."""


def _mib(nbytes: int) -> str:
    return f"{nbytes / MIB:g}"


def ddp_buckets(
    gradients: Sequence[GradientReady],
    *,
    cap_bytes: int = DDP_DEFAULT_BUCKET_BYTES,
    first_cap_bytes: int = DDP_FIRST_BUCKET_BYTES,
) -> list[Bucket]:
    """Group gradients, in the order given, as DDP's reducer does after its first iteration.

    Parameters
    ----------
    gradients
        In the order they became ready.
    cap_bytes
        Every bucket but the first closes once it holds at least this many bytes.
    first_cap_bytes
        The first bucket's cap.

    Returns
    -------
    list[Bucket]
        In launch order; a bucket is ready at ``max(its last gradient, the previous bucket)``.

    Examples
    --------
    >>> grads = [GradientReady(t, 600) for t in (10, 20, 30, 40)]
    >>> [(b.ready_ns, b.nbytes, b.members) for b in ddp_buckets(grads, cap_bytes=1000, first_cap_bytes=500)]
    [(10, 600, (0,)), (30, 1200, (1, 2)), (40, 600, (3,))]
    """
    if cap_bytes <= 0 or first_cap_bytes <= 0:
        raise UsageError(f"bucket caps {cap_bytes}, {first_cap_bytes} bytes: must be positive")
    buckets: list[Bucket] = []
    members: list[int] = []
    size = 0
    ready = None
    for index, gradient in enumerate(gradients):
        members.append(index)
        size += gradient.nbytes
        ready = gradient.ready_ns if ready is None else max(ready, gradient.ready_ns)
        if size >= (first_cap_bytes if not buckets else cap_bytes):
            buckets.append(_close(buckets, ready, size, members))
            members, size, ready = [], 0, None
    if members and ready is not None:
        buckets.append(_close(buckets, ready, size, members))
    return buckets


def _close(buckets: list[Bucket], ready: int, size: int, members: list[int]) -> Bucket:
    after = buckets[-1].ready_ns if buckets else ready
    return Bucket(ready_ns=max(ready, after), nbytes=size, members=tuple(members))


def fusion_buckets(
    gradients: Sequence[GradientReady],
    *,
    fusion_bytes: int = HOROVOD_FUSION_BYTES,
    cycle_ns: int = HOROVOD_CYCLE_NS,
    start_ns: int | None = None,
) -> list[Bucket]:
    """Group gradients by Horovod-style fusion, the seed paper's rule.

    The gradients are taken in order; after each one, the bucket closes (and is sent at that
    gradient's ready time) when at least ``cycle_ns`` have passed since the previous bucket was
    sent (since ``start_ns`` for the first) or it holds at least ``fusion_bytes``. What is left
    after the last gradient is sent at its ready time.

    Parameters
    ----------
    gradients
        In the order they became ready (ready times non-decreasing).
    fusion_bytes
        The fusion buffer size.
    cycle_ns
        The cycle time.
    start_ns
        When the clock of the first cycle starts: the start of the backward pass (the seed's
        simulator counts from it); default: the first gradient's ready time.

    Examples
    --------
    >>> grads = [GradientReady(t, 10) for t in (1, 2, 6, 7, 8, 20)]
    >>> [(b.ready_ns, b.nbytes) for b in fusion_buckets(grads, fusion_bytes=100, cycle_ns=5, start_ns=0)]
    [(6, 30), (20, 30)]
    """
    if fusion_bytes <= 0 or cycle_ns <= 0:
        raise UsageError(f"fusion {fusion_bytes} bytes, cycle {cycle_ns} ns: must be positive")
    buckets: list[Bucket] = []
    if not gradients:
        return buckets
    last_sent = gradients[0].ready_ns if start_ns is None else start_ns
    members: list[int] = []
    size = 0
    for index, gradient in enumerate(gradients):
        members.append(index)
        size += gradient.nbytes
        if gradient.ready_ns - last_sent >= cycle_ns or size >= fusion_bytes:
            buckets.append(Bucket(ready_ns=gradient.ready_ns, nbytes=size, members=tuple(members)))
            last_sent = gradient.ready_ns
            members, size = [], 0
    if members:
        buckets.append(Bucket(ready_ns=gradients[-1].ready_ns, nbytes=size, members=tuple(members)))
    return buckets


def make_buckets(
    policy: DDPBuckets | FusionBuckets, gradients: Sequence[GradientReady], *, start_ns: int | None = None
) -> list[Bucket]:
    """Apply a policy to gradients in ready order (``start_ns``: when backward started, for fusion)."""
    if isinstance(policy, DDPBuckets):
        return ddp_buckets(gradients, cap_bytes=policy.cap_bytes, first_cap_bytes=policy.first_cap_bytes)
    return fusion_buckets(
        gradients, fusion_bytes=policy.fusion_bytes, cycle_ns=policy.cycle_ns, start_ns=start_ns
    )


_NUMBER = r"[0-9]*\.?[0-9]+"
_DDP = re.compile(rf"ddp:(?P<cap>{_NUMBER})(?::(?P<first>{_NUMBER}))?")
_FUSION = re.compile(rf"(?:fusion|horovod):(?P<bytes>{_NUMBER})(?::(?P<cycle>{_NUMBER}))?")


def parse_bucket_policy(text: str) -> BucketPolicy:
    """Read a bucketing policy: ``measured``, ``ddp:<cap MiB>[:<first MiB>]``, ``fusion:<MiB>[:<cycle ms>]``.

    ``horovod:`` is a synonym of ``fusion:``; the cycle defaults to 5 ms, DDP's first cap to 1 MiB.

    Raises
    ------
    UsageError
        Any other spelling, or a zero size.

    Examples
    --------
    >>> parse_bucket_policy("ddp:25")
    DDPBuckets(cap_bytes=26214400, first_cap_bytes=1048576)
    >>> parse_bucket_policy("fusion:64:5")
    FusionBuckets(fusion_bytes=67108864, cycle_ns=5000000)
    """
    spelled = text.strip().lower()
    if spelled == "measured":
        return MEASURED
    policy: BucketPolicy
    if (ddp := _DDP.fullmatch(spelled)) is not None:
        cap = int(float(ddp["cap"]) * MIB)
        first = int(float(ddp["first"]) * MIB) if ddp["first"] else DDP_FIRST_BUCKET_BYTES
        policy = DDPBuckets(cap_bytes=cap, first_cap_bytes=first)
        sizes = (cap, first)
    elif (fusion := _FUSION.fullmatch(spelled)) is not None:
        size = int(float(fusion["bytes"]) * MIB)
        cycle = int(float(fusion["cycle"]) * 1e6) if fusion["cycle"] else HOROVOD_CYCLE_NS
        policy = FusionBuckets(fusion_bytes=size, cycle_ns=cycle)
        sizes = (size, cycle)
    else:
        msg = (
            f"{text!r}: not a bucketing policy; use measured, ddp:<cap MiB>[:<first MiB>] "
            "or fusion:<MiB>[:<cycle ms>]"
        )
        raise UsageError(msg)
    if min(sizes) <= 0:
        raise UsageError(f"{text!r}: sizes and cycle must be positive")
    return policy
