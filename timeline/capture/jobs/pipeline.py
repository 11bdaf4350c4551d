"""The ``pipeline`` demo job: a two-stage pipeline (``torch.distributed.pipelining``, 1F1B) with DDP.

Takes the ``torch`` module, the rank, the world size (even, at least 4) and a seed; gives the rank's
:class:`~timeline.capture.jobs.base.Training`.

The mesh: ``init_device_mesh("cpu", (2, world_size // 2), mesh_dim_names=("pp", "dp"))``; with 4
ranks the ``pp`` groups are {0, 2} and {1, 3} (stage 0 on ranks 0 and 1, stage 1 on ranks 2 and
3) and the ``dp`` groups {0, 1} and {2, 3}. Each stage is a small MLP (64 → 128 → 64) wrapped in
``DistributedDataParallel`` on its ``dp`` group and driven by ``PipelineStage`` and
``Schedule1F1B`` with 4 micro-batches of 4 rows on the ``pp`` group. A step on one rank runs, on
gloo: 4 sends and 4 receives on ``pp`` (stage 0 sends activations and receives gradients, stage 1
the reverse; ``gloo:send`` / ``gloo:recv`` on the main thread, each inside ``c10d::send`` /
``c10d::recv_`` whose arguments name the peer by its rank in the ``pp`` group), and one DDP
all-reduce of the stage's gradients on ``dp`` after the last micro-batch's backward pass.
The batch (16 rows) and the targets are fixed per ``dp`` replica.
"""

from __future__ import annotations

from types import ModuleType

from timeline.capture.jobs.base import Training, mesh_2d, torch_module

__all__ = ["setup_pipeline"]

_WIDTH = 64
_HIDDEN = 128
_BATCH = 16
_MICROBATCHES = 4
_STAGES = 2


def setup_pipeline(torch: ModuleType, *, rank: int, world_size: int, seed: int) -> Training:
    """Build this rank's pipeline stage on a ``("pp", "dp")`` mesh; return its training step.

    The ``pipeline`` job's :class:`~timeline.capture.jobs.base.JobSetup`. Seeds: the stage's
    weights ``seed + stage`` (the same on the ranks of one stage, as DDP expects), the batch and
    targets ``seed + 10 + dp rank`` (the same on both stages of one pipeline). The returned
    training's model is the stage's DDP wrapper.
    """
    del rank  # the mesh knows it
    mesh = mesh_2d(torch, world_size=world_size, names=("pp", "dp"))
    pipelining = torch_module("torch.distributed.pipelining")
    nn = torch.nn
    stage_index = mesh["pp"].get_local_rank()
    torch.manual_seed(seed + stage_index)
    module = nn.Sequential(nn.Linear(_WIDTH, _HIDDEN), nn.ReLU(), nn.Linear(_HIDDEN, _WIDTH))
    model = nn.parallel.DistributedDataParallel(module, process_group=mesh.get_group("dp"))
    stage = pipelining.PipelineStage(
        model, stage_index, _STAGES, torch.device("cpu"), group=mesh.get_group("pp")
    )

    def loss_fn(output: object, target: object) -> object:
        return (output - target).pow(2).mean()  # type: ignore[operator]  # torch tensors

    schedule = pipelining.Schedule1F1B(stage, n_microbatches=_MICROBATCHES, loss_fn=loss_fn)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(seed + 10 + mesh["dp"].get_local_rank())
    inputs = torch.randn(_BATCH, _WIDTH, generator=generator)
    targets = torch.randn(_BATCH, _WIDTH, generator=generator)

    def step(i: int) -> None:
        del i  # one fixed batch
        optimizer.zero_grad(set_to_none=True)
        if stage_index == 0:
            schedule.step(inputs)
        else:
            schedule.step(target=targets)
        optimizer.step()

    return Training(step=step, model=model)
