"""The demo jobs by name: the rank rules and options each refuses, before any process starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from timeline.capture import DEMO_JOBS, DemoSettings, demo_job, run_demo
from timeline.errors import UsageError


def test_the_jobs_and_their_default_ranks() -> None:
    assert {name: job.default_ranks for name, job in DEMO_JOBS.items()} == {
        "ddp": 2,
        "fsdp2_tp": 4,
        "pipeline": 4,
        "expert": 4,
    }
    assert all(demo_job(name) is job for name, job in DEMO_JOBS.items())


def test_an_unknown_job() -> None:
    with pytest.raises(UsageError) as info:
        demo_job("zero3")
    assert str(info.value) == "demo job 'zero3': unknown; choose one of ddp, fsdp2_tp, pipeline, expert"


@pytest.mark.parametrize("job", ["fsdp2_tp", "pipeline", "expert"])
@pytest.mark.parametrize("ranks", [1, 2, 3, 5])
def test_mesh_jobs_need_an_even_number_of_ranks_from_4(job: str, ranks: int, tmp_path: Path) -> None:
    message = (
        f"ranks={ranks}: the {job} demo job runs on a device mesh with a dimension of 2; "
        "pass an even number of ranks, at least 4"
    )
    with pytest.raises(UsageError) as info:
        demo_job(job).check(ranks=ranks, grad_ready_markers=False)
    assert str(info.value) == message
    with pytest.raises(UsageError):  # run_demo refuses before it starts a process or makes the folder
        run_demo(tmp_path / "run", settings=DemoSettings(job=job, ranks=ranks))
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("ranks", [4, 6, 8])
def test_mesh_jobs_take_even_counts_from_4(ranks: int) -> None:
    for job in ("fsdp2_tp", "pipeline", "expert"):
        demo_job(job).check(ranks=ranks, grad_ready_markers=False)


def test_only_ddp_records_grad_ready_markers() -> None:
    demo_job("ddp").check(ranks=1, grad_ready_markers=True)
    with pytest.raises(UsageError) as info:
        demo_job("expert").check(ranks=4, grad_ready_markers=True)
    assert str(info.value) == (
        "grad_ready_markers: only the ddp demo job records them, not expert; "
        "drop the option or run the ddp job"
    )


def test_ddp_needs_one_rank() -> None:
    with pytest.raises(UsageError) as info:
        demo_job("ddp").check(ranks=0, grad_ready_markers=False)
    assert str(info.value) == "ranks=0: need at least 1 rank"
