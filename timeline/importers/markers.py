"""Gradient-ready marker names: the contract between :mod:`timeline.capture.markers` and the what-if.

``timeline.capture`` writes, in every profiled backward pass, one event per parameter named
``timeline.grad_ready:<param name>:<bytes>`` when its gradient is ready; the what-if engine reads
the exact ready time and size of every gradient from these events. The name format:

- prefix ``timeline.grad_ready:`` (:data:`GRAD_READY_PREFIX`);
- the parameter name as ``model.named_parameters()`` gives it (``module.`` stripped for a DDP
  wrapper), which may contain dots but never ``:``;
- ``:`` and the gradient size in bytes as a decimal integer (``numel × element_size``).

Parse it with :func:`parse_grad_ready_name`.
"""

from __future__ import annotations

import re

__all__ = ["GRAD_READY_PREFIX", "format_grad_ready_name", "parse_grad_ready_name"]

GRAD_READY_PREFIX = "timeline.grad_ready:"

_NAME = re.compile(r"timeline\.grad_ready:(?P<param>[^:]+):(?P<bytes>\d+)")


def format_grad_ready_name(param_name: str, nbytes: int) -> str:
    """Return the marker name for a parameter: ``timeline.grad_ready:<param name>:<bytes>``.

    Parameters
    ----------
    param_name
        The parameter's name; must not contain ``:``.
    nbytes
        Size of its gradient in bytes.

    Returns
    -------
    str
        The event name.

    Examples
    --------
    >>> format_grad_ready_name("layers.0.weight", 1048576)
    'timeline.grad_ready:layers.0.weight:1048576'
    """
    return f"{GRAD_READY_PREFIX}{param_name}:{nbytes}"


def parse_grad_ready_name(name: str) -> tuple[str, int] | None:
    """Return ``(param name, bytes)`` from a marker name, or None for any other event name.

    Parameters
    ----------
    name
        An event name from a trace.

    Returns
    -------
    tuple[str, int] | None
        The parameter name and its gradient size in bytes.

    Examples
    --------
    >>> parse_grad_ready_name("timeline.grad_ready:layers.0.weight:1048576")
    ('layers.0.weight', 1048576)
    >>> parse_grad_ready_name("ProfilerStep#3") is None
    True
    """
    match = _NAME.fullmatch(name)
    if match is None:
        return None
    return match["param"], int(match["bytes"])
