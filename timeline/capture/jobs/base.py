"""What every demo job gives the runner, and the pieces the parallel jobs share.

Takes the ``torch`` module (imported by the runner in the rank's process, passed in as a
:class:`types.ModuleType`, so nothing here imports torch and type checking never reads torch);
gives :class:`JobSetup` (the signature every job's set-up has), :class:`Training` (one rank's
step function and model), :func:`mesh_2d` (a named 2-D
``DeviceMesh`` on CPU, one of its dimensions of size 2) and :func:`torch_module` (a torch
submodule, imported on demand).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol

__all__ = ["JobSetup", "Training", "mesh_2d", "torch_module"]


@dataclass(frozen=True)
class Training:
    """One rank's part of a demo job, built in that rank's process and ready to run."""

    step: Callable[[int], None]
    """Run training step ``i`` (forward, backward, communication, optimizer step)."""
    model: object
    """The module handed to :func:`~timeline.capture.capture` as ``model=`` (grad-ready markers)."""


class JobSetup(Protocol):
    """Build one rank's part of a demo job, in that rank's process."""

    def __call__(self, torch: ModuleType, *, rank: int, world_size: int, seed: int) -> Training:
        """Return the rank's :class:`Training`.

        Parameters
        ----------
        torch
            The ``torch`` module, imported by the runner.
        rank, world_size
            This process' rank and the number of ranks; the default gloo group is initialised.
        seed
            The run's seed; each job derives the seeds of its weights and batches from it, so every
            run computes the same numbers.
        """
        ...


def torch_module(name: str) -> ModuleType:
    """Return the torch submodule ``name`` (``"torch.distributed.fsdp"``), importing it on first use."""
    return importlib.import_module(name)


def mesh_2d(torch: ModuleType, *, world_size: int, names: tuple[str, str], pair_last: bool = False) -> Any:
    """Return a CPU ``DeviceMesh`` of shape ``(2, world_size // 2)`` with the dimension ``names``.

    ``pair_last`` gives the shape ``(world_size // 2, 2)`` instead. ``init_device_mesh`` makes one
    gloo process group per row and per column (``pg_desc`` ``mesh_<name>`` in the traces'
    ``distributedInfo.pg_config``) on top of the default group the runner has initialised.
    ``world_size`` must be even (the jobs check it before starting). With 4 ranks both shapes are
    ``[[0, 1], [2, 3]]``: the first dimension's groups are {0, 2} and {1, 3}, the second's {0, 1}
    and {2, 3}.
    """
    device_mesh = torch_module("torch.distributed.device_mesh")
    shape = (world_size // 2, 2) if pair_last else (2, world_size // 2)
    return device_mesh.init_device_mesh("cpu", shape, mesh_dim_names=names)
