"""The ``fsdp2_tp`` demo job: FSDP2 on the ``dp`` dimension and tensor parallelism on ``tp``.

Takes the ``torch`` module, the rank, the world size (even, at least 4) and a seed; gives the rank's
:class:`~timeline.capture.jobs.base.Training`.

The mesh: ``init_device_mesh("cpu", (world_size // 2, 2), mesh_dim_names=("dp", "tp"))`` (tensor
parallelism on pairs of ranks, so every layer splits evenly); with 4 ranks the ``dp`` groups are
{0, 2} and {1, 3}, the ``tp`` groups {0, 1} and {2, 3}. The model: two
residual MLP blocks (64 → 256 → 64, about 66 k parameters); in each block the first linear layer is
``ColwiseParallel`` and the second ``RowwiseParallel`` on ``tp`` (``parallelize_module``), then
each block and the root are sharded with FSDP2's ``fully_shard`` on ``dp``. A step on one rank
runs, on gloo: 4 all-gathers of parameters on ``dp`` (2 in forward, 2 again in backward, since
``fully_shard`` reshards after forward), 2 reduce-scatters of gradients on ``dp``, and 3
all-reduces of activations on ``tp`` (one per block in forward, by ``RowwiseParallel``; one in
backward, for the input gradient of the second block). SGD; a fixed batch of 16 per ``dp`` replica
(the ranks of one ``tp`` group see the same batch, as tensor parallelism needs).
"""

from __future__ import annotations

from types import ModuleType

from timeline.capture.jobs.base import Training, mesh_2d, torch_module

__all__ = ["setup_fsdp2_tp"]

_WIDTH = 64
_HIDDEN = 256
_BLOCKS = 2
_BATCH = 16


def setup_fsdp2_tp(torch: ModuleType, *, rank: int, world_size: int, seed: int) -> Training:
    """Build this rank's FSDP2 + TP model on a ``("dp", "tp")`` mesh; return its training step.

    The ``fsdp2_tp`` job's :class:`~timeline.capture.jobs.base.JobSetup`. Seeds: the model weights
    ``seed`` (the same on every rank, as ``fully_shard`` and ``parallelize_module`` expect), the
    batch ``seed + 1 + dp rank``. The returned training's model is the root FSDP module.
    """
    del rank  # the mesh knows it
    mesh = mesh_2d(torch, world_size=world_size, names=("dp", "tp"), pair_last=True)
    parallel = torch_module("torch.distributed.tensor.parallel")
    fsdp = torch_module("torch.distributed.fsdp")
    nn = torch.nn

    class Block(nn.Module):  # type: ignore[misc,name-defined]  # torch.nn is dynamic here
        def __init__(self) -> None:
            super().__init__()
            self.up = nn.Linear(_WIDTH, _HIDDEN)
            self.down = nn.Linear(_HIDDEN, _WIDTH)

        def forward(self, x: object) -> object:
            return x + self.down(torch.relu(self.up(x)))

    torch.manual_seed(seed)
    model = nn.Sequential(*(Block() for _ in range(_BLOCKS)))
    plan = {"up": parallel.ColwiseParallel(), "down": parallel.RowwiseParallel()}
    for block in model:
        parallel.parallelize_module(block, mesh["tp"], plan)
        fsdp.fully_shard(block, mesh=mesh["dp"])
    fsdp.fully_shard(model, mesh=mesh["dp"])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(seed + 1 + mesh["dp"].get_local_rank())
    batch = torch.randn(_BATCH, _WIDTH, generator=generator)

    def step(i: int) -> None:
        del i  # one fixed batch
        optimizer.zero_grad(set_to_none=True)
        model(batch).pow(2).mean().backward()
        optimizer.step()

    return Training(step=step, model=model)
