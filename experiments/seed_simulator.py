"""The seed paper's simulator, on its released data: backward profiles and the vector-add cost table.

Zhang et al., "Is Network the Bottleneck of Distributed Training?" (NetAI 2020) predict the
scaling factor of data-parallel training from a one-GPU backward profile (repository
``netx-repo/training-bottleneck``, ``simulation/``). This module reads its two data formats and
re-implements its simulator analytically (the original spins real processes and measures wall
time; it models the same thing):

**Backward profile** (``bk_time_logs/<model>.bk.log``), plain text::

    first line is for explaination; sec line: # of batches; 3rd line:# of layers; ...
    1                        <- number of batches B
    161                      <- number of gradients L per batch
    552.6383717854818,4000   <- L·B rows: µs waited since the previous gradient, gradient bytes
    ...

Gradients are listed in the order backward produces them; the first wait counts from the start of
the backward pass.

**Vector-add cost** (``cuda_vec_add.log``): rows ``bytes,seconds``, the GPU time of adding two
vectors of that size, interpolated linearly (and held constant outside the table), read as float32
like the original.

**The simulator**: gradients become ready at the cumulated waits; Horovod-style fusion
(:func:`~timeline.whatif.bucketing.fusion_buckets`: a bucket leaves once 5 ms have passed since the
previous one left or it holds 64 MiB); buckets are all-reduced one at a time, in order, each taking
``2(N−1)/N · 8S / (B·c) + (N−1) · add(S/N)`` seconds (a ring all-reduce's reduce-scatter and
all-gather over a link of ``B`` bit/s with compression ``c``, plus the reductions); the scaling
factor is ``T_single / (T_single + max(0, end of the last all-reduce − end of backward))``.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from timeline.errors import TraceFormatError
from timeline.whatif.bucketing import HOROVOD_CYCLE_NS, HOROVOD_FUSION_BYTES, GradientReady, fusion_buckets

__all__ = [
    "SEED_BANDWIDTHS_GBPS",
    "SEED_EXPECTED_SCALING",
    "SEED_MODELS",
    "SEED_SINGLE_GPU_S",
    "BackwardProfile",
    "SeedResult",
    "VectorAddCost",
    "read_backward_profile",
    "read_vector_add_cost",
    "reproduce_seed",
    "simulate_seed",
]

SEED_MODELS = ("resnet50", "resnet101", "vgg16")
SEED_SINGLE_GPU_S = {
    "resnet50": 0.12808580219559176,
    "resnet101": 0.19200599479476405,
    "vgg16": 0.19452352295080985,
}
"""One-GPU iteration times of the paper's runs (``sim_with_compression_*.py``: 128.1, 192.0, 194.5 ms)."""
SEED_BANDWIDTHS_GBPS = (100.0, 40.0, 25.0, 10.0)
SEED_EXPECTED_SCALING = {
    "resnet50": (0.995, 0.994, 0.910, 0.540),
    "resnet101": (0.997, 0.997, 0.890, 0.500),
    "vgg16": (0.993, 0.622, 0.439, 0.201),
}
"""Scaling factors at 64 GPUs without compression, at 100/40/25/10 Gbit/s (``RESEARCH.md``)."""


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


def _float32(value: float) -> float:
    result: float = struct.unpack("f", struct.pack("f", value))[0]
    return result


def read_backward_profile(path: str | Path) -> BackwardProfile:
    """Read a ``*.bk.log`` backward profile (format in the module docstring).

    Raises
    ------
    TraceFormatError
        A header that is not two counts, or a row that is not ``wait,bytes``.
    """
    path = Path(path)
    lines = path.read_text().splitlines()
    try:
        batches, layers = int(lines[1]), int(lines[2])
    except (IndexError, ValueError) as exc:
        raise TraceFormatError(
            f"{path}:2: expected the number of batches and of gradients on lines 2-3"
        ) from exc
    rows = lines[3 : 3 + batches * layers]
    if len(rows) < batches * layers:
        raise TraceFormatError(f"{path}: {batches} × {layers} rows announced, {len(rows)} found")
    parsed: list[tuple[float, int]] = []
    for number, row in enumerate(rows, start=4):
        wait, _, size = row.partition(",")
        try:
            parsed.append((float(wait) / 1e6, int(size)))
        except ValueError as exc:
            raise TraceFormatError(f"{path}:{number}: expected 'µs waited,bytes', got {row!r}") from exc
    grouped = tuple(tuple(parsed[b * layers : (b + 1) * layers]) for b in range(batches))
    return BackwardProfile(name=path.name.split(".")[0], batches=grouped)


def read_vector_add_cost(path: str | Path) -> VectorAddCost:
    """Read ``cuda_vec_add.log`` (rows ``bytes,seconds``).

    Raises
    ------
    TraceFormatError
        A row that is not two numbers.
    """
    path = Path(path)
    sizes: list[float] = []
    seconds: list[float] = []
    for number, row in enumerate(path.read_text().splitlines(), start=1):
        if not row.strip():
            continue
        size, _, cost = row.partition(",")
        try:
            sizes.append(_float32(float(size)))
            seconds.append(_float32(float(cost)))
        except ValueError as exc:
            raise TraceFormatError(f"{path}:{number}: expected 'bytes,seconds', got {row!r}") from exc
    if not sizes:
        raise TraceFormatError(f"{path}: no rows")
    return VectorAddCost(sizes=tuple(sizes), seconds=tuple(seconds))


@dataclass(frozen=True)
class SeedResult:
    """One simulated configuration."""

    model: str
    world_size: int
    bandwidth_gbps: float
    compression: float
    backward_s: float
    comm_end_s: float
    overhead_s: float
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
    fusion_bytes: int = HOROVOD_FUSION_BYTES,
    cycle_s: float = HOROVOD_CYCLE_NS / 1e9,
) -> SeedResult:
    """Simulate one configuration as the seed paper does (averaged over the profile's batches).

    Parameters
    ----------
    profile
        The backward profile.
    world_size
        ``N``, GPUs in the ring.
    bandwidth_gbps
        ``B``, the link in Gbit/s.
    add_cost
        The vector-add cost table.
    single_s
        ``T_single``, the one-GPU iteration time.
    compression
        ``c``, dividing the bits on the wire.
    fusion_bytes, cycle_s
        Horovod's fusion buffer and cycle time.

    Examples
    --------
    >>> profile = BackwardProfile("toy", (((0.001, 4_000_000), (0.001, 4_000_000)),))
    >>> table = VectorAddCost((1.0, 1e9), (0.0, 0.0))
    >>> result = simulate_seed(profile, world_size=2, bandwidth_gbps=8, add_cost=table, single_s=0.01)
    >>> round(result.overhead_s, 6), round(result.scaling_factor, 3)
    (0.008, 0.556)
    """
    link = bandwidth_gbps * 1e9
    n = world_size
    backward: list[float] = []
    ends: list[float] = []
    count = 0
    for batch in profile.batches:
        elapsed = 0.0
        ready: list[GradientReady] = []
        for wait, size in batch:
            elapsed += wait
            ready.append(GradientReady(round(elapsed * 1e9), size))
        buckets = fusion_buckets(ready, fusion_bytes=fusion_bytes, cycle_ns=round(cycle_s * 1e9), start_ns=0)
        end = 0.0
        for bucket in buckets:
            size = bucket.nbytes
            network = size * 8 * (n - 1) / n / link / compression
            end = max(end, bucket.ready_ns / 1e9) + 2 * network + (n - 1) * add_cost(size / n)
        backward.append(elapsed)
        ends.append(end)
        count = len(buckets)
    backward_s = sum(backward) / len(backward)
    comm_end_s = sum(ends) / len(ends)
    overhead = sum(max(0.0, e - b) for e, b in zip(ends, backward, strict=True)) / len(ends)
    return SeedResult(
        model=profile.name,
        world_size=world_size,
        bandwidth_gbps=bandwidth_gbps,
        compression=compression,
        backward_s=backward_s,
        comm_end_s=comm_end_s,
        overhead_s=overhead,
        single_s=single_s,
        scaling_factor=single_s / (single_s + overhead),
        buckets=count,
    )


def reproduce_seed(
    folder: str | Path,
    *,
    world_sizes: Sequence[int] = (64,),
    bandwidths_gbps: Sequence[float] = SEED_BANDWIDTHS_GBPS,
    compressions: Sequence[float] = (1.0,),
) -> pl.DataFrame:
    """Run the simulator on the paper's data folder (``bk_time_logs/`` and ``cuda_vec_add.log``).

    Returns
    -------
    pl.DataFrame
        One row per model, world size, bandwidth and compression: ``model``, ``world_size``,
        ``bandwidth_gbps``, ``compression``, ``buckets``, ``backward_s``, ``overhead_s``,
        ``scaling_factor``, and ``expected`` (``RESEARCH.md``'s value at 64 GPUs without
        compression, else null).
    """
    folder = Path(folder)
    add_cost = read_vector_add_cost(folder / "cuda_vec_add.log")
    rows: list[dict[str, object]] = []
    for model in SEED_MODELS:
        profile = read_backward_profile(folder / "bk_time_logs" / f"{model}.bk.log")
        for world in world_sizes:
            for bandwidth in bandwidths_gbps:
                for ratio in compressions:
                    result = simulate_seed(
                        profile,
                        world_size=world,
                        bandwidth_gbps=bandwidth,
                        add_cost=add_cost,
                        single_s=SEED_SINGLE_GPU_S[model],
                        compression=ratio,
                    )
                    expected = None
                    if world == 64 and ratio == 1 and bandwidth in SEED_BANDWIDTHS_GBPS:
                        expected = SEED_EXPECTED_SCALING[model][SEED_BANDWIDTHS_GBPS.index(bandwidth)]
                    rows.append(
                        {
                            "model": model,
                            "world_size": world,
                            "bandwidth_gbps": bandwidth,
                            "compression": ratio,
                            "buckets": result.buckets,
                            "backward_s": result.backward_s,
                            "overhead_s": result.overhead_s,
                            "scaling_factor": result.scaling_factor,
                            "expected": expected,
                        }
                    )
    return pl.DataFrame(
        rows,
        schema={
            "model": pl.String,
            "world_size": pl.Int32,
            "bandwidth_gbps": pl.Float64,
            "compression": pl.Float64,
            "buckets": pl.Int32,
            "backward_s": pl.Float64,
            "overhead_s": pl.Float64,
            "scaling_factor": pl.Float64,
            "expected": pl.Float64,
        },
    )
