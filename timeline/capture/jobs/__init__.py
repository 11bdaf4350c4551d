"""The demo jobs of ``timeline capture --demo``, by name: what each rank trains.

Takes a job name; gives a :class:`DemoJob`: its rank rule and the function that builds one rank's
model and training step inside a spawned process (the runner, :func:`timeline.capture.run_demo`,
passes torch in: nothing here imports torch).

- ``ddp``: an MLP under ``DistributedDataParallel`` (any number of ranks);
- ``fsdp2_tp``: FSDP2 on ``dp`` and tensor parallelism on ``tp``, a ``(ranks/2, 2)`` mesh;
- ``pipeline``: on a ``(2, ranks/2)`` mesh, two pipeline stages (``torch.distributed.pipelining``,
  1F1B, point-to-point sends and receives) on ``pp``, each stage under DDP on ``dp``;
- ``expert``: on a ``(2, ranks/2)`` mesh, a mixture-of-experts layer, tokens exchanged by
  ``all_to_all_single`` with uneven splits on ``ep``, gradients all-reduced on ``dp`` and on the
  default group.

Each job's module docstring lists the collectives one step runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from timeline.capture.jobs.base import JobSetup, Training
from timeline.capture.jobs.ddp import DEMO_BUCKET_CAP_MB, setup_ddp
from timeline.capture.jobs.expert import setup_expert
from timeline.capture.jobs.fsdp2_tp import setup_fsdp2_tp
from timeline.capture.jobs.pipeline import setup_pipeline
from timeline.errors import UsageError

__all__ = ["DEMO_BUCKET_CAP_MB", "DEMO_JOBS", "DemoJob", "JobSetup", "Training", "demo_job"]


@dataclass(frozen=True)
class DemoJob:
    """One demo job: its name, what it runs, and the ranks it needs."""

    name: str
    summary: str
    """One line: the parallelism and the collectives it shows."""
    default_ranks: int
    mesh_2d: bool
    """Whether it runs on a 2-D device mesh with a dimension of 2 (an even number of ranks, at least 4)."""
    setup: JobSetup
    """``setup(torch, *, rank, world_size, seed) -> Training``, called in each rank's process."""

    def check(self, *, ranks: int, grad_ready_markers: bool) -> None:
        """Refuse a rank count or option this job cannot run with.

        Raises
        ------
        UsageError
            Too few ranks, an odd count for a mesh job, or grad-ready markers on a job other than ``ddp``.
        """
        if ranks < 1:
            raise UsageError(f"ranks={ranks}: need at least 1 rank")
        if self.mesh_2d and (ranks < 4 or ranks % 2):
            raise UsageError(
                f"ranks={ranks}: the {self.name} demo job runs on a device mesh with a dimension of 2; "
                "pass an even number of ranks, at least 4"
            )
        if grad_ready_markers and self.name != "ddp":
            raise UsageError(
                f"grad_ready_markers: only the ddp demo job records them, not {self.name}; "
                "drop the option or run the ddp job"
            )


DEMO_JOBS: dict[str, DemoJob] = {
    job.name: job
    for job in (
        DemoJob("ddp", "an MLP under DDP: gradient all-reduces in 4 buckets", 2, False, setup_ddp),
        DemoJob(
            "fsdp2_tp",
            "FSDP2 on dp + tensor parallel on tp (ranks/2 x 2 mesh): all-gathers, reduce-scatters, "
            "all-reduces on two kinds of groups",
            4,
            True,
            setup_fsdp2_tp,
        ),
        DemoJob(
            "pipeline",
            "two pipeline stages (1F1B, 4 micro-batches) on pp, DDP on dp: sends, receives, all-reduces",
            4,
            True,
            setup_pipeline,
        ),
        DemoJob(
            "expert",
            "mixture of experts on ep: all_to_all_single with uneven splits; all-reduces on dp and world",
            4,
            True,
            setup_expert,
        ),
    )
}
"""Every demo job, by name (``timeline capture --demo --demo-job NAME``)."""


def demo_job(name: str) -> DemoJob:
    """Return the demo job called ``name``.

    Raises
    ------
    UsageError
        No job has that name.
    """
    job = DEMO_JOBS.get(name)
    if job is None:
        raise UsageError(f"demo job {name!r}: unknown; choose one of {', '.join(DEMO_JOBS)}")
    return job
