"""The seed paper's experiment on its released data: its three models at 64 GPUs, against RESEARCH.md.

Zhang et al., "Is Network the Bottleneck of Distributed Training?" (NetAI 2020). The readers of its
backward profiles and vector-add cost table and the simulator live in the package
(:mod:`timeline.whatif.seed`, run by ``timeline seed PROFILE.bk.log``); this module holds what is
particular to the paper's experiment: its models, their one-GPU iteration times, the published
scaling factors, and :func:`reproduce_seed`, which runs the three models over a grid.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import polars as pl

from timeline.whatif.seed import read_backward_profile, read_vector_add_cost, simulate_seed

__all__ = [
    "SEED_BANDWIDTHS_GBPS",
    "SEED_EXPECTED_SCALING",
    "SEED_MODELS",
    "SEED_SINGLE_GPU_S",
    "reproduce_seed",
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
