"""Small hand-made runs for the what-if tests (times in ns)."""

from __future__ import annotations

from typing import Any

import polars as pl

from tests.builders import cpu, gpu, launch, make_events, step

US = 1_000


def gpu_rank(
    rank: int = 0, *, comm: tuple[int, int] = (110, 250), nbytes: int = 100_000
) -> list[dict[str, Any]]:
    """One GPU rank, one step: backward kernels, an all-reduce, an update that waits for it (µs below).

    - K1 [0, 100) launched at 0; the all-reduce launched at 1 (ready when K1 ends, at 100);
    - K2 [100, 200) launched at 2; the all-reduce runs ``comm`` on stream 20;
    - the update K3 [255, 300), launched at 3, resumes 5 µs after the all-reduce ends at 250.
    """
    return [
        step(1, 0, 5 * US, rank=rank),
        launch(1, 0, rank=rank),
        launch(3, 1 * US, rank=rank),
        launch(2, 2 * US, rank=rank),
        launch(4, 3 * US, rank=rank),
        gpu("compute", 0, 100 * US, rank=rank, correlation=1, name="K1"),
        gpu(
            "communication",
            comm[0] * US,
            comm[1] * US,
            rank=rank,
            stream=20,
            correlation=3,
            name="ncclKernel_AllReduce",
            collective="all_reduce",
            in_bytes=nbytes,
            group_size=2,
        ),
        gpu("compute", 100 * US, 200 * US, rank=rank, correlation=2, name="K2"),
        gpu("compute", 255 * US, 300 * US, rank=rank, correlation=4, name="K3"),
    ]


def gpu_run(*ranks: list[dict[str, Any]]) -> pl.DataFrame:
    return make_events([row for rows in ranks for row in rows])


def gloo_rank(
    rank: int = 0, *, comm: tuple[int, int] = (60, 160), markers: bool = True
) -> list[dict[str, Any]]:
    """One CPU-only (gloo) rank, one step (µs): backward ops with grad-ready markers, a c10d launch,
    the gloo all-reduce on its own thread, a wait, then the optimizer step.
    """
    rows = [
        step(1, 0, 200 * US, rank=rank),
        cpu("cpu_op", 0, 40 * US, rank=rank, name="forward"),
        cpu("cpu_op", 42 * US, 50 * US, rank=rank, name="backward a"),
        cpu("cpu_op", 50 * US, 55 * US, rank=rank, name="c10d::allreduce_"),
        cpu("cpu_op", 55 * US, 100 * US, rank=rank, name="backward b"),
        cpu("sync", 101 * US, 170 * US, rank=rank, name="torch.distributed.ddp.reducer::copy_bucket_to_grad"),
        cpu("cpu_op", 170 * US, 195 * US, rank=rank, name="aten::add_"),
        cpu(
            "communication",
            comm[0] * US,
            comm[1] * US,
            rank=rank,
            tid=2,
            name="gloo:all_reduce",
            cat="user_annotation",
            collective="all_reduce",
            in_bytes=4000,
            group_size=2,
        ),
    ]
    if markers:
        rows += [
            cpu("cpu_op", 45 * US, 45 * US + 10, rank=rank, name="timeline.grad_ready:fc.bias:1000"),
            cpu("cpu_op", 48 * US, 48 * US + 10, rank=rank, name="timeline.grad_ready:fc.weight:3000"),
        ]
    return rows
