"""The ``ddp`` demo job: an MLP under ``DistributedDataParallel`` on the default gloo group.

Takes the ``torch`` module, the rank and a seed; gives the rank's
:class:`~timeline.capture.jobs.base.Training`.

The model: 256 → 4 × 512 → 10 (about 0.9 M parameters, 3.6 MB of gradients) wrapped in
``DistributedDataParallel(bucket_cap_mb=1)``, so the gradients travel in 4 buckets and the first
all-reduces overlap the rest of the backward pass; SGD on fixed random batches of 64. On gloo each
bucket is one ``gloo:all_reduce`` on a ``pt_gloo_runloop`` thread.
"""

from __future__ import annotations

from types import ModuleType

from timeline.capture.jobs.base import Training

__all__ = ["DEMO_BUCKET_CAP_MB", "setup_ddp"]

DEMO_BUCKET_CAP_MB = 1.0
_INPUT = 256
_HIDDEN = 512
_HIDDEN_LAYERS = 4
_CLASSES = 10
_BATCH = 64
_BATCHES = 4


def setup_ddp(torch: ModuleType, *, rank: int, world_size: int, seed: int) -> Training:
    """Build this rank's DDP model, optimizer and batches; return its training step.

    The ``ddp`` job's :class:`~timeline.capture.jobs.base.JobSetup`. Seeds: the model weights
    ``seed``, the batches ``seed + 1 + rank``. The returned training's model is the DDP wrapper
    (for grad-ready markers).
    """
    del world_size  # DDP uses the whole default group
    torch.manual_seed(seed)
    nn = torch.nn
    layers = [nn.Linear(_INPUT, _HIDDEN), nn.ReLU()]
    for _ in range(_HIDDEN_LAYERS - 1):
        layers += [nn.Linear(_HIDDEN, _HIDDEN), nn.ReLU()]
    layers.append(nn.Linear(_HIDDEN, _CLASSES))
    model = nn.parallel.DistributedDataParallel(nn.Sequential(*layers), bucket_cap_mb=DEMO_BUCKET_CAP_MB)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    generator = torch.Generator().manual_seed(seed + 1 + rank)
    batches = [
        (
            torch.randn(_BATCH, _INPUT, generator=generator),
            torch.randint(0, _CLASSES, (_BATCH,), generator=generator),
        )
        for _ in range(_BATCHES)
    ]

    def step(i: int) -> None:
        inputs, targets = batches[i % len(batches)]
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(inputs), targets).backward()
        optimizer.step()

    return Training(step=step, model=model)
