"""Cost models of collectives: how long a collective takes on a link of a given bandwidth.

Takes a collective (its kind, its size by nccl-tests' convention, the number of ranks), a link
bandwidth, an efficiency and a per-step latency; gives seconds. The model is the classic
``α + β`` one (Hockney; Thakur, Rabenseifner and Gropp, "Optimization of collective communication
operations in MPICH", 2005), in the form the seed paper's simulator uses for ring all-reduce:

``time = steps(collective, n, algorithm) · α + bits(collective, S, n, algorithm) / (B · efficiency)``

with ``S`` the collective's bytes (``docs/collectives.md``: ``in_bytes``, or the gathered total for
all-gather), ``n`` ranks, ``B`` the link in bit/s (one direction), ``α`` the latency of one step.
:func:`bandwidth_bits` is what each rank must push through its link, :func:`latency_steps` how many
sequential steps the algorithm takes. Every formula is in ``docs/whatif.md``.
"""

from __future__ import annotations

import math
import re
from typing import Literal

from timeline.errors import UsageError

__all__ = [
    "ALGORITHMS",
    "MAX_LATENCY_S",
    "MAX_TIME_NS",
    "MAX_WORLD_SIZE",
    "Algorithm",
    "Efficiency",
    "bandwidth_bits",
    "collective_time_s",
    "latency_steps",
    "parse_duration_s",
]

# The limits of a scenario and its efficiency, read by the replay and by the settings' parsers
# (timeline.whatif.settings, the seed paper's simulator), which import no polars.
MAX_LATENCY_S = 3600.0
"""The largest latency of one collective step a scenario takes (1 hour; real links: microseconds)."""
MAX_WORLD_SIZE = 1_048_576
"""The largest world size a scenario takes (2**20 ranks)."""
MAX_TIME_NS = 2**62
"""The latest time a replay may reach (epoch ns, year 2116): half the ``Int64`` range, so that sums
of predicted times stay in range. A scenario that goes past it is an error, not an overflow."""

Efficiency = Literal["observed", "uniform", "full"] | float
"""How much of the link collectives achieve: as each did in the trace, one trace-wide figure per
collective kind, all of it, or a given fraction."""

Algorithm = Literal["ring", "tree"]
"""How a collective is implemented: a ring, or (double binary) trees."""

ALGORITHMS: tuple[Algorithm, ...] = ("ring", "tree")

_HALF = frozenset({"all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"})
_WHOLE = frozenset({"broadcast", "reduce"})
_POINT_TO_POINT = frozenset({"send", "recv", "send_recv"})


def _log2_ceil(n: int) -> int:
    return max(1, math.ceil(math.log2(n)))


def bandwidth_bits(
    collective: str | None, nbytes: float, world_size: int, *, algorithm: Algorithm = "ring"
) -> float:
    """Return the bits each rank sends over its link during a collective: the bandwidth term's numerator.

    - all-reduce, ring: ``2(n−1)/n · 8S`` (a reduce-scatter then an all-gather, each moving
      ``(n−1)/n`` of the data; Patarasuk and Yuan 2009, bandwidth-optimal);
    - all-reduce, tree: ``2 · 8S`` (the data goes up a tree and comes down again, pipelined; NCCL's
      double binary tree splits it over two trees, which keeps each link at ``2 · 8S``);
    - all-gather, reduce-scatter, all-to-all, gather, scatter: ``(n−1)/n · 8S`` (``S`` the total);
    - broadcast, reduce: ``8S`` (pipelined); send, recv: ``8S``;
    - barrier, ``wait`` and unknown collectives: 0 (latency only).

    Parameters
    ----------
    collective
        The collective's name as in the events frame (``all_reduce``, ``all_gather`` …).
    nbytes
        Its size by nccl-tests' convention (see ``docs/collectives.md``).
    world_size
        Ranks taking part; one rank moves nothing.
    algorithm
        ``ring`` or ``tree``.

    Examples
    --------
    >>> bandwidth_bits("all_reduce", 1000, 4)
    12000.0
    >>> bandwidth_bits("all_reduce", 1000, 4, algorithm="tree")
    16000.0
    """
    n = world_size
    if n <= 1 or nbytes <= 0 or collective is None:
        return 0.0
    bits = 8.0 * nbytes
    if collective == "all_reduce":
        return 2.0 * bits if algorithm == "tree" else 2.0 * (n - 1) / n * bits
    if collective in _HALF:
        return (n - 1) / n * bits
    if collective in _WHOLE or collective in _POINT_TO_POINT:
        return bits
    return 0.0


def latency_steps(collective: str | None, world_size: int, *, algorithm: Algorithm = "ring") -> int:
    """Return the number of sequential steps (each paying the latency ``α``) of a collective.

    Ring: all-reduce ``2(n−1)``; all-gather, reduce-scatter, all-to-all, gather, scatter,
    broadcast, reduce ``n−1``. Tree: all-reduce ``2⌈log2 n⌉``, the others ``⌈log2 n⌉``.
    Point-to-point: 1. Barrier: ``⌈log2 n⌉`` (dissemination). One rank: 0.

    Examples
    --------
    >>> latency_steps("all_reduce", 64), latency_steps("all_reduce", 64, algorithm="tree")
    (126, 12)
    """
    n = world_size
    if n <= 1:
        return 0
    if collective in _POINT_TO_POINT:
        return 1
    if collective == "barrier":
        return _log2_ceil(n)
    tree = algorithm == "tree"
    if collective == "all_reduce":
        return 2 * _log2_ceil(n) if tree else 2 * (n - 1)
    if collective in _HALF or collective in _WHOLE:
        return _log2_ceil(n) if tree else n - 1
    return 1


def collective_time_s(
    collective: str | None,
    nbytes: float,
    world_size: int,
    *,
    link_bps: float,
    efficiency: float = 1.0,
    latency_s: float = 0.0,
    algorithm: Algorithm = "ring",
    compression: float = 1.0,
) -> float:
    """Return the modelled time of one collective, in seconds.

    ``latency_steps · latency_s + bandwidth_bits / compression / (link_bps · efficiency)``.

    Parameters
    ----------
    collective, nbytes, world_size, algorithm
        As in :func:`bandwidth_bits`.
    link_bps
        The link's one-direction bandwidth in bit/s.
    efficiency
        The fraction of the link the collective achieves (1: full utilisation).
    latency_s
        The latency of one step, ``α``.
    compression
        The gradient compression ratio (divides the bits sent; the latency is unchanged).

    Raises
    ------
    UsageError
        A non-positive link, efficiency or compression ratio.

    Examples
    --------
    >>> round(collective_time_s("all_reduce", 100e6, 64, link_bps=100e9), 6)
    0.01575
    """
    if link_bps <= 0 or efficiency <= 0 or compression <= 0:
        msg = (
            f"link {link_bps} bit/s, efficiency {efficiency}, compression {compression}: must all be positive"
        )
        raise UsageError(msg)
    bits = bandwidth_bits(collective, nbytes, world_size, algorithm=algorithm) / compression
    steps = latency_steps(collective, world_size, algorithm=algorithm)
    return steps * latency_s + bits / (link_bps * efficiency)


_DURATION = re.compile(r"\s*(?P<value>[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(?P<unit>ns|us|µs|μs|ms|s)?\s*")
_PER_SECOND = {"ns": 1e9, "us": 1e6, "µs": 1e6, "μs": 1e6, "ms": 1e3, "s": 1.0}


def parse_duration_s(text: str) -> float:
    """Return a duration in seconds from ``5us``, ``0.2 ms``, ``1e-5s``, ``100ns`` (``0`` needs no unit).

    Raises
    ------
    UsageError
        Not a number with a unit, or negative.

    Examples
    --------
    >>> parse_duration_s("5us"), parse_duration_s("2 ms"), parse_duration_s("0")
    (5e-06, 0.002, 0.0)
    """
    match = _DURATION.fullmatch(text)
    if match is None:
        raise UsageError(f"{text!r}: not a duration; write a number and a unit: 5us, 0.2ms, 100ns, 1s")
    value = float(match["value"])
    unit = match["unit"]
    if unit is None:
        if value != 0:
            raise UsageError(f"{text!r}: a duration needs a unit: {text}us, {text}ms or {text}s")
        return 0.0
    return value / _PER_SECOND[unit]
