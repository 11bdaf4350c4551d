"""The registry of metrics a budget can name: what each measures, its unit, and where its values come from.

A :class:`Metric` reads one value per row of one analysis frame (``iterations``: rank × iteration;
``collectives``: one communication event; ``ranks``: one rank over its whole trace). The registry is
open: a later analysis registers its own metrics with :func:`register_metric`, and every budget file,
renderer and ``docs/ci.md`` picks them up.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

import polars as pl

from timeline.errors import BudgetError

__all__ = [
    "Better",
    "Metric",
    "MetricSource",
    "format_value",
    "get_metric",
    "register_metric",
    "registered_metrics",
]

MetricSource = Literal["iterations", "collectives", "ranks"]
"""The frame a metric reads: rank × iteration rows, communication events, or whole-trace rank rows."""

Better = Literal["lower", "higher"]
"""Which way is an improvement; a regression is a move the other way."""


@dataclass(frozen=True, eq=False)
class Metric:
    """A number a budget can bound, read from one analysis frame.

    Attributes
    ----------
    name
        The name budget files use (``exposed_comm_ratio``).
    description
        One line for people, shown in ``docs/ci.md``.
    unit
        ``ns``, ``ratio`` (a fraction in ``[0, 1]``), ``bytes``, ``B/s`` or ``count``; limits are
        written in this unit.
    source
        The frame whose rows are the samples.
    expr
        The value of one row; ``pl.col(name)`` when not given (then :attr:`value` holds it).
    better
        ``lower`` or ``higher``: the direction of an improvement.
    per_iteration
        For ``collectives`` metrics: sum the row values of each rank's iteration first, so a sample
        is one rank-iteration rather than one event.
    """

    name: str
    description: str
    unit: str
    source: MetricSource
    expr: pl.Expr | None = None
    better: Better = "lower"
    per_iteration: bool = False
    value: pl.Expr = field(init=False, repr=False)
    """The expression giving the value of one row of the source frame."""
    columns: tuple[str, ...] = field(init=False, repr=False)
    """The columns of the source frame that :attr:`value` reads."""

    def __post_init__(self) -> None:
        value = pl.col(self.name) if self.expr is None else self.expr
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "columns", tuple(value.meta.root_names()))


_REGISTRY: dict[str, Metric] = {}


def register_metric(metric: Metric, *, replace: bool = False) -> Metric:
    """Add a metric to the registry, so budget files can name it.

    Parameters
    ----------
    metric
        The metric.
    replace
        Replace a metric of the same name instead of failing.

    Returns
    -------
    Metric
        ``metric``, so the call can be used as an expression.

    Raises
    ------
    ValueError
        If a metric of that name is registered and ``replace`` is false (a bug, not bad input).

    Examples
    --------
    >>> import polars as pl
    >>> register_metric(  # doctest: +SKIP
    ...     Metric("busy_ratio", "compute and communication over the step", "ratio", "iterations",
    ...            expr=1 - pl.col("idle_ratio"), better="higher")
    ... )
    """
    if metric.name in _REGISTRY and not replace:
        msg = f"metric {metric.name!r} is already registered; pass replace=True to replace it"
        raise ValueError(msg)
    if metric.per_iteration and metric.source != "collectives":
        msg = f"metric {metric.name!r}: per_iteration applies to collectives metrics only"
        raise ValueError(msg)
    _REGISTRY[metric.name] = metric
    return metric


def registered_metrics() -> Iterator[Metric]:
    """Yield every registered metric, in registration order."""
    yield from list(_REGISTRY.values())


def get_metric(name: str, *, where: str) -> Metric:
    """Return the registered metric ``name``.

    Parameters
    ----------
    name
        A metric name from a budget file.
    where
        Where the name was read (``timeline.toml:budgets[2].metric``), for the message.

    Raises
    ------
    BudgetError
        If no metric has that name; the message names the closest one.
    """
    try:
        return _REGISTRY[name]
    except KeyError:
        pass
    close = difflib.get_close_matches(name, list(_REGISTRY), n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}?" if close else "see docs/ci.md for the list"
    raise BudgetError(f"{where}: unknown metric {name!r}; {hint}")


def format_value(value: float | None, unit: str) -> str:
    """Format a value of a metric for people: ``12.35 ms``, ``25.00%``, ``1.20 GB/s``; ``-`` when unknown.

    Ratios are stored as fractions and shown as percentages (rendering only).
    """
    if value is None:
        return "-"
    if unit == "ns":
        magnitude = abs(value)
        if magnitude >= 1e9:
            return f"{value / 1e9:.3f} s"
        if magnitude >= 1e6:
            return f"{value / 1e6:.2f} ms"
        if magnitude >= 1e3:
            return f"{value / 1e3:.1f} µs"
        return f"{round(value, 1):g} ns"
    if unit == "ratio":
        return f"{100 * value:.2f}%"
    if unit in ("bytes", "B/s"):
        suffix = "B" if unit == "bytes" else "B/s"
        for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
            if abs(value) >= scale:
                return f"{value / scale:.2f} {prefix}{suffix}"
        return f"{value:.0f} {suffix}"
    if unit == "count":
        return f"{value:g}"
    return f"{value:.4g} {unit}"


def _iteration_metric(name: str, description: str, unit: str, better: Better = "lower") -> None:
    register_metric(Metric(name, description, unit, "iterations", better=better))


_iteration_metric("exposed_comm_ns", "communication during which no compute ran: it stretched the step", "ns")
_iteration_metric("exposed_comm_ratio", "exposed communication over the step length", "ratio")
_iteration_metric(
    "hidden_comm_ratio",
    "communication that ran under compute over all communication (HTA's overlap %)",
    "ratio",
    "higher",
)
_iteration_metric("hidden_comm_ns", "communication that ran under compute", "ns", "higher")
_iteration_metric("step_ns", "the length of the iteration window", "ns")
_iteration_metric("comm_ns", "time with any communication running (a union over streams)", "ns")
_iteration_metric("comm_ratio", "communication time over the step length", "ratio")
_iteration_metric("compute_ns", "time with any compute running (a union over streams)", "ns")
_iteration_metric("compute_ratio", "compute time over the step length", "ratio", "higher")
_iteration_metric("other_busy_ns", "memcpy/memset time outside communication and compute", "ns")
_iteration_metric("idle_ns", "time with nothing measured running", "ns")
_iteration_metric("idle_ratio", "idle time over the step length", "ratio")

register_metric(
    Metric(
        "collective_dur_ns",
        "the duration of one communication event (one call on one rank)",
        "ns",
        "collectives",
        expr=pl.col("dur_ns"),
    )
)
register_metric(
    Metric(
        "collective_exposed_ns",
        "the exposed time of one communication event",
        "ns",
        "collectives",
        expr=pl.col("exposed_ns"),
    )
)
register_metric(
    Metric(
        "collective_exposed_ratio",
        "the exposed fraction of one communication event",
        "ratio",
        "collectives",
        expr=pl.col("exposed_ratio"),
    )
)
register_metric(
    Metric(
        "collective_iteration_dur_ns",
        "the duration of the scoped communication events",
        "ns",
        "collectives",
        expr=pl.col("dur_ns"),
        per_iteration=True,
    )
)
register_metric(
    Metric(
        "collective_iteration_exposed_ns",
        "the exposed time of the scoped communication events",
        "ns",
        "collectives",
        expr=pl.col("exposed_ns"),
        per_iteration=True,
    )
)
