"""The seed paper's inputs and simulator: one-GPU backward profiles and the vector-add cost table.

Zhang et al., "Is Network the Bottleneck of Distributed Training?" (NetAI 2020) predict the
scaling factor of data-parallel training from a one-GPU backward profile (repository
``netx-repo/training-bottleneck``, ``simulation/``). This module reads its two data formats and
re-implements its simulator analytically (the original spins real processes and measures wall
time; it models the same thing); ``timeline whatif PROFILE.bk.log`` runs it.

**Backward profile** (``bk_time_logs/<model>.bk.log``), plain text::

    first line is for explaination; sec line: # of batches; 3rd line:# of layers; ...
    1                        <- number of batches B
    161                      <- number of gradients L per batch
    552.6383717854818,4000   <- L·B rows: µs waited since the previous gradient, gradient bytes
    ...

Gradients are listed in the order backward produces them; the first wait counts from the start of
the backward pass.

**Vector-add cost** (``cuda_vec_add.log``, kept one folder above the profiles): rows
``bytes,seconds``, the GPU time of adding two vectors of that size, interpolated linearly (and held
constant outside the table), read as float32 like the original (``numpy.interp``).

**The simulator**: gradients become ready at the cumulated waits; they are grouped into buckets
(Horovod-style fusion by default, :func:`~timeline.whatif.bucketing.fusion_buckets`: a bucket leaves
once 5 ms have passed since the previous one left or it holds 64 MiB); buckets are all-reduced one
at a time, in order, each taking ``2(N−1)/N · 8S / (B·c) + (N−1) · add(S/N)`` seconds (a ring
all-reduce's reduce-scatter and all-gather over a link of ``B`` bit/s with compression ``c``, plus
the reductions); the scaling factor is
``T_single / (T_single + max(0, end of the last all-reduce − end of backward))``.
"""

from __future__ import annotations

import bisect
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from timeline.errors import TraceFormatError, UsageError
from timeline.whatif.bucketing import DDPBuckets, FusionBuckets, GradientReady, make_buckets
from timeline.whatif.costs import MAX_TIME_NS
from timeline.whatif.settings import Settings

__all__ = [
    "FREE_ADDS",
    "VECTOR_ADD_COST_NAME",
    "BackwardProfile",
    "SeedGrid",
    "SeedResult",
    "VectorAddCost",
    "find_vector_add_cost",
    "is_backward_profile",
    "read_backward_profile",
    "read_vector_add_cost",
    "seed_grid",
    "simulate_seed",
    "sweep_seed",
]

VECTOR_ADD_COST_NAME = "cuda_vec_add.log"
"""The cost table's name in the paper's repository, one folder above ``bk_time_logs/``."""


@dataclass(frozen=True)
class BackwardProfile:
    """A backward profile: per batch, each gradient's wait (s, since the previous one) and bytes."""

    name: str
    batches: tuple[tuple[tuple[float, int], ...], ...]


@dataclass(frozen=True)
class VectorAddCost:
    """The GPU vector-add time by size, interpolated (float32 table, as the original reads it)."""

    sizes: tuple[float, ...]
    seconds: tuple[float, ...]

    def __call__(self, nbytes: float) -> float:
        """Return the seconds to add two vectors of ``nbytes`` (linear interpolation, clamped)."""
        xs, ys = self.sizes, self.seconds
        if nbytes <= xs[0]:
            return ys[0]
        if nbytes >= xs[-1]:
            return ys[-1]
        k = bisect.bisect_right(xs, nbytes)
        x0, x1, y0, y1 = xs[k - 1], xs[k], ys[k - 1], ys[k]
        return y0 + (y1 - y0) * (nbytes - x0) / (x1 - x0)


FREE_ADDS = VectorAddCost(sizes=(0.0,), seconds=(0.0,))
"""Reductions counted as free: what the simulator uses without a cost table."""


def is_backward_profile(path: str) -> bool:
    """Return whether a path names a seed backward profile (``*.bk.log``)."""
    return path.lower().endswith(".bk.log")


def _float32(value: float) -> float:
    result: float = struct.unpack("f", struct.pack("f", value))[0]
    return result


def _lines(path: Path, what: str) -> list[str]:
    try:
        data = path.read_bytes()
    except OSError as exc:
        msg = f"{path}: cannot read: {exc.strerror or exc}; check that the {what} exists and is readable"
        raise UsageError(msg) from exc
    try:
        return data.decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        msg = f"{path}: not text (byte {exc.start} is not UTF-8); give the {what} as the paper wrote it"
        raise TraceFormatError(msg) from exc


def _count(lines: list[str], index: int, path: Path) -> int:
    what = ("batches", "gradients per batch")[index - 1]
    try:
        value = int(lines[index].strip())
    except (IndexError, ValueError):
        value = -1
    if value < 1:
        text = repr(lines[index]) if index < len(lines) else "nothing"
        msg = (
            f"{path}:{index + 1}: expected the number of {what} (a positive integer), got {text}; "
            "a .bk.log holds a comment line, the number of batches, the number of gradients, then "
            "'µs waited,bytes' rows"
        )
        raise TraceFormatError(msg)
    return value


def read_backward_profile(path: str | Path) -> BackwardProfile:
    """Read a ``*.bk.log`` backward profile (format in the module docstring).

    Raises
    ------
    TraceFormatError
        A header that is not two positive counts, fewer rows than announced, a row that is not
        ``wait,bytes`` with a finite wait of at least 0 µs and a whole number of bytes of at least 0,
        or a non-blank line after the announced rows.
    UsageError
        A file that cannot be read.
    """
    path = Path(path)
    lines = _lines(path, "backward profile")
    batches, layers = _count(lines, 1, path), _count(lines, 2, path)
    rows = lines[3 : 3 + batches * layers]
    if len(rows) < batches * layers:
        msg = (
            f"{path}: {batches} batch(es) × {layers} gradients = {batches * layers} rows announced on "
            f"lines 2-3, {len(rows)} found; the file is truncated or its counts are wrong"
        )
        raise TraceFormatError(msg)
    for number, extra in enumerate(lines[3 + batches * layers :], start=4 + batches * layers):
        if extra.strip():
            msg = (
                f"{path}:{number}: a row after the {batches * layers} announced; fix the counts on lines 2-3"
            )
            raise TraceFormatError(msg)
    parsed: list[tuple[float, int]] = []
    for number, row in enumerate(rows, start=4):
        wait, _, size = row.partition(",")
        try:
            item = (float(wait) / 1e6, int(size))
        except ValueError:
            item = (math.nan, -1)
        if not (math.isfinite(item[0]) and item[0] >= 0 and item[1] >= 0):
            msg = (
                f"{path}:{number}: expected 'µs waited,bytes' (a finite wait of at least 0, a whole "
                f"number of bytes), got {row!r}"
            )
            raise TraceFormatError(msg)
        parsed.append(item)
    grouped = tuple(tuple(parsed[b * layers : (b + 1) * layers]) for b in range(batches))
    return BackwardProfile(name=path.name.split(".")[0], batches=grouped)


def read_vector_add_cost(path: str | Path) -> VectorAddCost:
    """Read ``cuda_vec_add.log`` (rows ``bytes,seconds``, sizes increasing).

    Raises
    ------
    TraceFormatError
        A row that is not two finite numbers of at least 0 (within float32's range), sizes that do
        not increase, or no rows.
    UsageError
        A file that cannot be read.
    """
    path = Path(path)
    sizes: list[float] = []
    seconds: list[float] = []
    for number, row in enumerate(_lines(path, "vector-add cost table"), start=1):
        if not row.strip():
            continue
        size, _, cost = row.partition(",")
        try:
            pair = (_float32(float(size)), _float32(float(cost)))
        except (ValueError, OverflowError):
            pair = (math.nan, math.nan)
        if not all(math.isfinite(v) and v >= 0 for v in pair):
            msg = f"{path}:{number}: expected 'bytes,seconds' (two finite numbers of at least 0), got {row!r}"
            raise TraceFormatError(msg)
        if sizes and pair[0] <= sizes[-1]:
            msg = f"{path}:{number}: sizes must increase from row to row ({pair[0]:g} after {sizes[-1]:g})"
            raise TraceFormatError(msg)
        sizes.append(pair[0])
        seconds.append(pair[1])
    if not sizes:
        raise TraceFormatError(f"{path}: no rows; expected 'bytes,seconds' rows")
    return VectorAddCost(sizes=tuple(sizes), seconds=tuple(seconds))


def find_vector_add_cost(profile: str | Path) -> Path | None:
    """Return the cost table where the paper keeps it: ``<dir of the profile>/../cuda_vec_add.log``."""
    candidate = Path(profile).parent / ".." / VECTOR_ADD_COST_NAME  # ".." as the OS reads it (after links)
    return candidate if candidate.is_file() else None


@dataclass(frozen=True)
class SeedResult:
    """One simulated configuration (times in seconds, means over the profile's batches).

    ``comm_s`` is the all-reduces' time end to end with nothing overlapped (their sum: they run one
    at a time), so ``single_s + comm_s`` is the no-overlap iteration.
    """

    model: str
    world_size: int
    bandwidth_gbps: float
    compression: float
    backward_s: float
    comm_end_s: float
    overhead_s: float
    comm_s: float
    single_s: float
    scaling_factor: float
    buckets: int


def simulate_seed(
    profile: BackwardProfile,
    *,
    world_size: int,
    bandwidth_gbps: float,
    add_cost: VectorAddCost,
    single_s: float,
    compression: float = 1.0,
    buckets: DDPBuckets | FusionBuckets = FusionBuckets(),  # noqa: B008 (frozen, immutable)
) -> SeedResult:
    """Simulate one configuration as the seed paper does (averaged over the profile's batches).

    Parameters
    ----------
    profile
        The backward profile.
    world_size
        ``N``, GPUs in the ring (at least 1).
    bandwidth_gbps
        ``B``, the link in Gbit/s (positive).
    add_cost
        The vector-add cost table (:data:`FREE_ADDS`: reductions cost nothing).
    single_s
        ``T_single``, the one-GPU iteration time (positive).
    compression
        ``c``, dividing the bits on the wire (at least 1).
    buckets
        The bucketing policy; Horovod's fusion (64 MiB, 5 ms) as in the paper by default.

    Raises
    ------
    UsageError
        A setting out of its range, or an iteration too long for ``Int64`` nanoseconds (more than
        :data:`~timeline.whatif.engine.MAX_TIME_NS`).

    Examples
    --------
    >>> profile = BackwardProfile("toy", (((0.001, 4_000_000), (0.001, 4_000_000)),))
    >>> result = simulate_seed(profile, world_size=2, bandwidth_gbps=8, add_cost=FREE_ADDS, single_s=0.01)
    >>> round(result.overhead_s, 6), round(result.scaling_factor, 3)
    (0.008, 0.556)
    """
    _check_settings(world_size, bandwidth_gbps, single_s, compression)
    times = _seed_times(profile, buckets, add_cost, world_size, bandwidth_gbps * 1e9, compression)
    _check_fits(single_s, times.longest_comm_s)
    return SeedResult(
        model=profile.name,
        world_size=world_size,
        bandwidth_gbps=bandwidth_gbps,
        compression=compression,
        backward_s=times.backward_s,
        comm_end_s=times.comm_end_s,
        overhead_s=times.overhead_s,
        comm_s=times.comm_s,
        single_s=single_s,
        scaling_factor=single_s / (single_s + times.overhead_s),
        buckets=times.buckets,
    )


@dataclass(frozen=True)
class _SeedTimes:
    """A configuration's times (seconds), means over the profile's batches, and the longest comm."""

    backward_s: float
    comm_end_s: float
    overhead_s: float
    comm_s: float
    longest_comm_s: float
    buckets: int
    """The buckets of the last batch."""


def _seed_times(
    profile: BackwardProfile,
    buckets: DDPBuckets | FusionBuckets,
    add_cost: VectorAddCost,
    n: int,
    link: float,
    compression: float,
) -> _SeedTimes:
    """Return the times of the profile's batches on a ring of ``n`` over ``link`` bit/s (the seed paper's)."""
    backward: list[float] = []
    ends: list[float] = []
    comm: list[float] = []
    count = 0
    for batch in profile.batches:
        elapsed = 0.0
        ready: list[GradientReady] = []
        for wait, size in batch:
            elapsed += wait
            ready.append(GradientReady(round(elapsed * 1e9), size))
        end = total = 0.0
        made = make_buckets(buckets, ready, start_ns=0)
        for bucket in made:
            size = bucket.nbytes
            network = size * 8 * (n - 1) / n / link / compression
            took = 2 * network + (n - 1) * add_cost(size / n)
            end = max(end, bucket.ready_ns / 1e9) + took
            total += took
        backward.append(elapsed)
        ends.append(end)
        comm.append(total)
        count = len(made)
    overhead = sum(max(0.0, e - b) for e, b in zip(ends, backward, strict=True)) / len(ends)
    return _SeedTimes(
        backward_s=sum(backward) / len(backward),
        comm_end_s=sum(ends) / len(ends),
        overhead_s=overhead,
        comm_s=sum(comm) / len(comm),
        longest_comm_s=max(comm),
        buckets=count,
    )


def _check_fits(single_s: float, longest_comm_s: float) -> None:
    """Raise :class:`UsageError` when the longest predicted iteration overflows ``Int64`` nanoseconds."""
    if (single_s + longest_comm_s) * 1e9 > MAX_TIME_NS:
        years = (single_s + longest_comm_s) / (365.25 * 86_400)
        msg = (
            f"what-if: this scenario's predicted iteration lasts more than {years:.0f} years, longer than "
            "timeline's nanosecond times can hold; lower --world-size or --single-step-ms, or raise "
            "--bandwidth"
        )
        raise UsageError(msg)


def _check_settings(world_size: int, bandwidth_gbps: float, single_s: float, compression: float) -> None:
    if world_size < 1:
        raise UsageError(f"world size {world_size}: must be at least 1")
    if not (math.isfinite(bandwidth_gbps) and bandwidth_gbps > 0):
        raise UsageError(f"bandwidth {bandwidth_gbps:g} Gbit/s: must be a positive number")
    if not (math.isfinite(single_s) and single_s > 0):
        raise UsageError(f"single-GPU iteration {single_s:g} s: must be a positive number")
    if not (math.isfinite(compression) and compression >= 1):
        raise UsageError(f"compression {compression:g}: must be a finite ratio of at least 1 (1 = none)")


def sweep_seed(
    profile: BackwardProfile,
    *,
    world_sizes: Sequence[int],
    bandwidths_gbps: Sequence[float],
    compressions: Sequence[float],
    add_cost: VectorAddCost,
    single_s: float,
    buckets: Sequence[DDPBuckets | FusionBuckets] = (FusionBuckets(),),
) -> list[tuple[DDPBuckets | FusionBuckets, SeedResult]]:
    """Simulate every combination, in the order bandwidth, world size, compression, buckets."""
    return [
        (
            policy,
            simulate_seed(
                profile,
                world_size=world,
                bandwidth_gbps=link,
                add_cost=add_cost,
                single_s=single_s,
                compression=ratio,
                buckets=policy,
            ),
        )
        for link in bandwidths_gbps
        for world in world_sizes
        for ratio in compressions
        for policy in buckets
    ]


@dataclass(frozen=True, kw_only=True)
class SeedGrid:
    """The settings ``timeline whatif PROFILE.bk.log`` simulates, checked for a backward profile."""

    single_s: float
    bandwidths_gbps: list[float]
    world_sizes: list[int]
    compressions: list[float]
    buckets: list[DDPBuckets | FusionBuckets]


def seed_grid(settings: Settings, *, single_step_ms: float | None) -> SeedGrid:
    """Check the what-if settings for a backward profile, which has no measured link, world or buckets.

    Raises
    ------
    UsageError
        No ``--single-step-ms`` (or one that is not a positive number), no ``--bandwidth`` or
        ``--world-size`` or one of them ``measured``, the ``measured`` buckets, or settings a
        backward profile cannot take (``--algorithm tree``, ``--latency``, ``--codec-gbps``,
        ``--target-sf``).
    """
    if single_step_ms is None or not (math.isfinite(single_step_ms) and single_step_ms > 0):
        given = "missing" if single_step_ms is None else f"{single_step_ms:g}"
        msg = (
            f"--single-step-ms {given}: a backward profile needs the one-GPU iteration time in ms "
            "(a positive number: the paper's resnet50 takes 128.1)"
        )
        raise UsageError(msg)
    bandwidths = [b for b in settings.bandwidths if b is not None]
    worlds = [w for w in settings.world_sizes if w is not None]
    if len(bandwidths) < len(settings.bandwidths):
        raise UsageError(
            "--bandwidth: a backward profile has no measured link; give Gbit/s, e.g. 10,25,100Gbps"
        )
    if len(worlds) < len(settings.world_sizes):
        raise UsageError("--world-size: a backward profile has no measured world size; give it, e.g. 16,64")
    policies = [p for p in settings.buckets if isinstance(p, DDPBuckets | FusionBuckets)]
    if len(policies) < len(settings.buckets):
        msg = "--buckets measured: a backward profile has no measured buckets; use fusion:<MiB>[:<cycle ms>]"
        raise UsageError(msg + " or ddp:<cap MiB>[:<first MiB>]")
    unsupported = {
        "--algorithm tree": settings.algorithm != "ring",
        "--latency": settings.latency_s is not None or bool(settings.dimension_latencies),
        "--codec-gbps": settings.codec_gbps is not None,
        "--target-sf": settings.target_sf is not None,
    }
    for option, asked in unsupported.items():
        if asked:
            raise UsageError(f"{option}: not in the seed paper's model of a backward profile (.bk.log)")
    return SeedGrid(
        single_s=single_step_ms / 1e3,
        bandwidths_gbps=bandwidths,
        world_sizes=worlds,
        compressions=list(settings.compressions),
        buckets=policies,
    )
