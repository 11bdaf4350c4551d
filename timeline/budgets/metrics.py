"""The registry of metrics a budget can name: what each measures, its unit, and where its values come from.

A :class:`Metric` reads one value per row of one analysis frame (``iterations``: rank × iteration;
``collectives``: one communication event; ``ranks``: one rank over its whole trace), or of one frame
of the collectives matched across ranks (:data:`MATCHED_SOURCES`: ``logical_collectives``: one
logical collective; ``collective_ranks``: one logical collective on one rank;
``iteration_utilisation`` and ``straggler_iterations``: one iteration, ranks together). The registry
is open: a later analysis registers its own metrics with :func:`register_metric`, and every budget
file, renderer and ``docs/ci.md`` picks them up.

The built-in metrics give their expressions as functions, built when a budget is first evaluated:
reading and checking a budget file imports no polars (a bad budget file fails fast).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Literal

from timeline.diagnosis.verdict import DIAGNOSED_CAUSES
from timeline.errors import BudgetError

if TYPE_CHECKING:
    import polars as pl

__all__ = [
    "DIMENSION_METRICS",
    "MATCHED_SOURCES",
    "Better",
    "Metric",
    "MetricSource",
    "get_metric",
    "register_metric",
    "registered_metrics",
]

MetricSource = Literal[
    "iterations",
    "collectives",
    "ranks",
    "logical_collectives",
    "collective_ranks",
    "iteration_utilisation",
    "straggler_iterations",
    "findings",
]
"""The frame a metric reads: rank × iteration rows, communication events, whole-trace rank rows, a
frame of the collectives matched across ranks (:data:`MATCHED_SOURCES`), or the diagnosis' findings
(one row per cause it examined: :func:`timeline.budgets.frames.findings_frame`)."""

MATCHED_SOURCES: frozenset[str] = frozenset(
    {"logical_collectives", "collective_ranks", "iteration_utilisation", "straggler_iterations"}
)
"""The sources built from :func:`~timeline.analysis.collectives.match_collectives`: a run's collectives
are matched across ranks only when a budget reads one of them."""

DIMENSION_METRICS: frozenset[str] = frozenset(
    {"comm_ns", "hidden_comm_ns", "exposed_comm_ns", "comm_ratio", "hidden_comm_ratio", "exposed_comm_ratio"}
)
"""The per-iteration communication metrics a ``dimension`` / ``pg_desc`` scope applies to: scoped, they
read the exposure per dimension × iteration × rank (:mod:`timeline.analysis.dimensions`) in place of
the rank's whole communication."""

_ACROSS_RANKS = frozenset(
    {"logical_collectives", "iteration_utilisation", "straggler_iterations", "findings"}
)
_PER_COLLECTIVE = frozenset({"collectives", "logical_collectives", "collective_ranks"})
_PER_RANK_COLLECTIVE = frozenset({"collectives", "collective_ranks"})

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
        ``ns``, ``ratio`` (a fraction in ``[0, 1]``), ``bytes``, ``B/s``, ``Gbit/s`` or ``count``;
        limits are written in this unit.
    source
        The frame whose rows are the samples.
    expr
        The value of one row, or a function that returns it (called once, when :attr:`value` is
        first read); ``pl.col(name)`` when not given.
    better
        ``lower`` or ``higher``: the direction of an improvement.
    per_iteration
        For ``collectives`` and ``collective_ranks`` metrics: sum the row values of each rank's
        iteration first, so a sample is one rank-iteration rather than one event.
    needs_link
        The value reads ``link_gbps``, the bandwidth of the link (``link_gbps`` of the budget file
        or ``--link-gbps``), which the evaluation fills in.
    """

    name: str
    description: str
    unit: str
    source: MetricSource
    expr: pl.Expr | Callable[[], pl.Expr] | None = None
    better: Better = "lower"
    per_iteration: bool = False
    needs_link: bool = False

    @cached_property
    def value(self) -> pl.Expr:
        """The expression giving the value of one row of the source frame."""
        if self.expr is None:
            import polars as pl

            return pl.col(self.name)
        return self.expr() if callable(self.expr) else self.expr

    @cached_property
    def columns(self) -> tuple[str, ...]:
        """The columns of the source frame that :attr:`value` reads."""
        return tuple(self.value.meta.root_names())

    @property
    def matched(self) -> bool:
        """Whether the metric reads the collectives matched across ranks (:data:`MATCHED_SOURCES`)."""
        return self.source in MATCHED_SOURCES

    @property
    def finding(self) -> bool:
        """Whether the metric reads the diagnosis' findings (the run is then diagnosed)."""
        return self.source == "findings"

    @property
    def per_rank(self) -> bool:
        """Whether each sample belongs to one rank (``ranks`` and ``over = "rank"`` apply)."""
        return self.source not in _ACROSS_RANKS

    @property
    def per_collective(self) -> bool:
        """Whether each sample belongs to one collective (``collective`` and ``pg_name`` apply)."""
        return self.source in _PER_COLLECTIVE

    @property
    def by_dimension(self) -> bool:
        """Whether ``dimension``/``pg_desc`` scopes apply (collective metrics, :data:`DIMENSION_METRICS`)."""
        return self.per_collective or (self.source == "iterations" and self.name in DIMENSION_METRICS)


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
    if metric.per_iteration and metric.source not in _PER_RANK_COLLECTIVE:
        msg = (
            f"metric {metric.name!r}: per_iteration applies to collectives and collective_ranks metrics only"
        )
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


def _col(name: str) -> Callable[[], pl.Expr]:
    """Return a built-in metric's expression, the column ``name``, as a function (built when used)."""

    def expr() -> pl.Expr:
        import polars as pl

        return pl.col(name)

    return expr


def _plausible(name: str, *, over_link: bool = False) -> Callable[[], pl.Expr]:
    """Return the bandwidth ``name`` of a logical collective, null where its transfer cannot be physical.

    ``implausible`` (:func:`timeline.analysis.collectives.match_collectives`): bus bandwidth above
    the physical ceiling. ``over_link``: the bandwidth over the link's (``link_gbps``), also null
    above the budget's link (a ratio above 1), so a budget never reads a transfer faster than
    physics as a measurement.
    """

    def expr() -> pl.Expr:
        import polars as pl

        kept = pl.col("implausible").not_()
        value = pl.col(name)
        if over_link:
            kept = kept & (pl.col(name) <= pl.col("link_gbps"))
            value = value / pl.col("link_gbps")
        return pl.when(kept).then(value)

    return expr


def _over_link(name: str) -> Callable[[], pl.Expr]:
    """Return the bandwidth ``name`` over the link's (``link_gbps``)."""

    def expr() -> pl.Expr:
        import polars as pl

        return pl.col(name) / pl.col("link_gbps")

    return expr


def _cause_gain(cause: str) -> Callable[[], pl.Expr]:
    """Return the predicted gain of the findings of one cause, null on the other causes' rows."""

    def expr() -> pl.Expr:
        import polars as pl

        return pl.when(pl.col("cause") == cause).then(pl.col("predicted_gain_ratio"))

    return expr


register_metric(
    Metric(
        "collective_dur_ns",
        "the duration of one communication event (one call on one rank)",
        "ns",
        "collectives",
        expr=_col("dur_ns"),
    )
)
register_metric(
    Metric(
        "collective_exposed_ns",
        "the exposed time of one communication event",
        "ns",
        "collectives",
        expr=_col("exposed_ns"),
    )
)
register_metric(
    Metric(
        "collective_exposed_ratio",
        "the exposed fraction of one communication event",
        "ratio",
        "collectives",
        expr=_col("exposed_ratio"),
    )
)
register_metric(
    Metric(
        "collective_iteration_dur_ns",
        "the duration of the scoped communication events",
        "ns",
        "collectives",
        expr=_col("dur_ns"),
        per_iteration=True,
    )
)
register_metric(
    Metric(
        "collective_iteration_exposed_ns",
        "the exposed time of the scoped communication events",
        "ns",
        "collectives",
        expr=_col("exposed_ns"),
        per_iteration=True,
    )
)

# The collectives matched across ranks (timeline.analysis.collectives, docs/collectives.md).
register_metric(
    Metric(
        "collective_start_skew_ns",
        "how far apart the ranks started one logical collective (last start − first start)",
        "ns",
        "logical_collectives",
        expr=_col("start_skew_ns"),
    )
)
register_metric(
    Metric(
        "collective_end_skew_ns",
        "how far apart the ranks finished one logical collective: µs on one clock, more if clocks are skewed",
        "ns",
        "logical_collectives",
        expr=_col("end_skew_ns"),
    )
)
register_metric(
    Metric(
        "collective_algbw_gbps",
        "the algorithm bandwidth of one logical collective: its bytes over its transfer time (none where "
        "implausible)",
        "Gbit/s",
        "logical_collectives",
        expr=_plausible("algbw_gbps"),
        better="higher",
    )
)
register_metric(
    Metric(
        "collective_busbw_gbps",
        "the bus bandwidth of one logical collective (nccl-tests' factors), comparable with the link (none "
        "where implausible)",
        "Gbit/s",
        "logical_collectives",
        expr=_plausible("busbw_gbps"),
        better="higher",
    )
)
register_metric(
    Metric(
        "collective_link_utilisation_ratio",
        "the bus bandwidth of one logical collective over the link's bandwidth (link_gbps; none above 1 or "
        "where implausible)",
        "ratio",
        "logical_collectives",
        expr=_plausible("busbw_gbps", over_link=True),
        better="higher",
        needs_link=True,
    )
)
register_metric(
    Metric(
        "collective_wait_ns",
        "how long one rank waited for the others in one logical collective (its duration − the transfer)",
        "ns",
        "collective_ranks",
        expr=_col("wait_ns"),
    )
)
register_metric(
    Metric(
        "collective_iteration_wait_ns",
        "how long a rank waited for the others in the scoped logical collectives of an iteration",
        "ns",
        "collective_ranks",
        expr=_col("wait_ns"),
        per_iteration=True,
    )
)
register_metric(
    Metric(
        "iteration_busbw_gbps",
        "the bus bandwidth of an iteration's matched collectives (weighted by transfer time)",
        "Gbit/s",
        "iteration_utilisation",
        expr=_col("busbw_gbps"),
        better="higher",
    )
)
register_metric(
    Metric(
        "iteration_link_utilisation_ratio",
        "the bus bandwidth of an iteration's matched collectives over the link's bandwidth (link_gbps)",
        "ratio",
        "iteration_utilisation",
        expr=_over_link("busbw_gbps"),
        better="higher",
        needs_link=True,
    )
)
register_metric(
    Metric(
        "iteration_wait_ratio",
        "the share of an average rank's time in synchronising collectives spent waiting for the others",
        "ratio",
        "straggler_iterations",
        expr=_col("wait_ratio"),
    )
)
register_metric(
    Metric(
        "straggler_share_ratio",
        "the share of an iteration's wait in synchronising collectives caused by its straggler",
        "ratio",
        "straggler_iterations",
    )
)

# The diagnosis (timeline.diagnosis, docs/diagnosis.md): one row per cause it examined.
register_metric(
    Metric(
        "finding_gain_ratio",
        "the share of the step a finding's fix is predicted to save (every cause examined; 0 for a cause "
        "without a finding)",
        "ratio",
        "findings",
        expr=_col("predicted_gain_ratio"),
    )
)
for _cause in DIAGNOSED_CAUSES:
    register_metric(
        Metric(
            f"{_cause}_gain_ratio",
            f"the share of the step fixing {_cause} is predicted to save (0 without a {_cause} finding; no "
            "value when the diagnosis could not examine it)",
            "ratio",
            "findings",
            expr=_cause_gain(_cause),
        )
    )
