"""Gradient-ready markers: one tiny profiler range per parameter when its gradient is ready.

Takes a model; gives, in every profiled backward pass, one event per parameter named
``timeline.grad_ready:<param name>:<bytes>``, on the thread that runs the backward pass: a
near-zero-length ``cpu_op`` (torch ≥ 2.2 fast path) or a ``user_annotation`` (older torch); match
it by name, not category. The event starts when autograd has
accumulated the parameter's gradient into ``.grad`` (``register_post_accumulate_grad_hook``,
torch ≥ 2.1), which is the moment DDP may hand it to a bucket. The what-if engine reads the exact
ready time and size of every gradient from these events instead of inferring them from kernels.

The name format is the contract with the parser:

- prefix ``timeline.grad_ready:`` (:data:`GRAD_READY_PREFIX`);
- the parameter name as ``model.named_parameters()`` gives it (``module.`` stripped for a DDP
  wrapper), which may contain dots but never ``:``;
- ``:`` and the gradient size in bytes as a decimal integer (``numel × element_size``).

Parse it with :func:`parse_grad_ready_name`, which splits on the *last* ``:``.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from types import ModuleType

from timeline.errors import UsageError
from timeline.importers.markers import GRAD_READY_PREFIX, format_grad_ready_name, parse_grad_ready_name

__all__ = [
    "GRAD_READY_PREFIX",
    "MarkerHandles",
    "format_grad_ready_name",
    "install_grad_ready_markers",
    "parse_grad_ready_name",
]


class MarkerHandles:
    """The hooks installed by :func:`install_grad_ready_markers`; :meth:`remove` takes them off."""

    def __init__(self, handles: list[object], names: list[str]) -> None:
        self._handles = handles
        self.names: tuple[str, ...] = tuple(names)
        """The marker names, in ``named_parameters()`` order."""

    def remove(self) -> None:
        """Remove every hook; calling it again does nothing."""
        for handle in self._handles:
            remove = getattr(handle, "remove", None)
            if callable(remove):
                remove()
        self._handles = []


def install_grad_ready_markers(model: object, *, torch: ModuleType) -> MarkerHandles:
    """Register a post-accumulate-grad hook on every trainable parameter of ``model``.

    Each hook opens and closes a profiler range named by :func:`format_grad_ready_name` while a
    profiler is recording, and does nothing otherwise.

    Parameters
    ----------
    model
        A ``torch.nn.Module`` (a ``DistributedDataParallel`` wrapper is fine: the ``module.``
        prefix is dropped from names).
    torch
        The torch module.

    Returns
    -------
    MarkerHandles
        The hooks, to remove when capturing ends.

    Raises
    ------
    UsageError
        ``model`` has no ``named_parameters``, a parameter name contains ``:``, or torch is older
        than 2.1.
    """
    named_parameters = getattr(model, "named_parameters", None)
    if not callable(named_parameters):
        raise UsageError(
            f"model={type(model).__name__}: grad_ready_markers needs a torch.nn.Module (or its DDP wrapper)"
        )
    strip_module = type(model).__name__ == "DistributedDataParallel"
    # _RecordFunctionFast (torch >= 2.2) costs about 2 µs per marker while profiling and records a
    # near-zero-length ``cpu_op``; record_function costs about 15 µs and records a ``user_annotation``.
    record_function = getattr(torch._C._profiler, "_RecordFunctionFast", None)
    if record_function is None:
        record_function = torch.autograd.profiler.record_function
    profiler_enabled: Callable[[], bool] = torch.autograd._profiler_enabled
    handles: list[object] = []
    names: list[str] = []
    for param_name, param in named_parameters():
        if not param.requires_grad:
            continue
        register = getattr(param, "register_post_accumulate_grad_hook", None)
        if register is None:
            raise UsageError(
                f"torch {torch.__version__}: grad_ready_markers needs torch >= 2.1 "
                "(Tensor.register_post_accumulate_grad_hook)"
            )
        name = param_name.removeprefix("module.") if strip_module else param_name
        if ":" in name:
            raise UsageError(f"parameter {name!r}: a name with ':' cannot be written in a grad-ready marker")
        marker = format_grad_ready_name(name, int(param.numel()) * int(param.element_size()))
        handles.append(register(_marker_hook(marker, record_function, profiler_enabled)))
        names.append(marker)
    return MarkerHandles(handles, names)


def _marker_hook(
    marker: str,
    record_function: Callable[[str], AbstractContextManager[object]],
    profiler_enabled: Callable[[], bool],
) -> Callable[[object], None]:
    """Return a hook that records a zero-length range named ``marker`` while profiling."""

    def hook(_param: object) -> None:
        if profiler_enabled():
            with record_function(marker):
                pass

    return hook
