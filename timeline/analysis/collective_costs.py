"""What a collective costs: a fixed cost per call and a time per byte, fitted from the trace's own transfers.

Takes the transfers of a trace's collectives (kind, process group, dimension, group size, bytes and
the time each transfer took alone on its link) and gives, per collective kind and process group,
the α-β model (Hockney; the form of nccl-tests' bus bandwidth)::

    time = α + β · bytes · bus_factor(collective, group size)

``α`` (``alpha_ns``) is what one call costs whatever its size (the per-message latency, the
protocol's round trips, the library's own work); ``β`` (``beta_ns_per_byte``) the time per bus byte
(``1 / β`` is the bus bandwidth the transfers reached). The fit is robust (Theil and Sen: the median
of the slopes between the sizes, then the median intercept), so that a transfer slowed by something
else does not move it, and gives its uncertainty. Where one process group sends one size only, the
time cannot be split between ``α`` and ``β`` on its own: ``β`` then comes from the other collectives
on the same link (the same dimension, or the job's one link), else ``α`` from a given per-step
latency; and where neither exists the fit says it cannot separate them (``basis``
``cannot_separate``) rather than guess. The link's bandwidth, when given (``--link-gbps``), is a
floor of ``β``: no transfer is faster.

- :func:`transfer_points`: the points of a collective match (``timeline collectives``);
- :func:`fit_collective_costs`: the fit (:data:`COLLECTIVE_COSTS_SCHEMA`);
- :func:`cell_costs`: the fit as a lookup, ``(collective, group) → CellCost``;
- :func:`exclusive_work`: a transfer's time had it had its ranks' links to itself (concurrent
  transfers share a link equally), which the points use, and the what-if graph too.

``docs/collectives.md`` and ``docs/whatif.md`` define the model, the fit and its limits.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Literal

import msgspec
import polars as pl

from timeline.analysis.collectives import bus_factor
from timeline.stats import median
from timeline.units import format_ns

if TYPE_CHECKING:
    from timeline.analysis.collectives import CollectiveMatch

__all__ = [
    "COLLECTIVE_COSTS_SCHEMA",
    "COST_POINTS_SCHEMA",
    "DETERMINED_SHARE",
    "FIT_SIZE_SPREAD",
    "CellCost",
    "CostBasis",
    "cell_costs",
    "describe_cost",
    "exclusive_work",
    "fit_collective_costs",
    "link_key",
    "transfer_points",
]

CostBasis = Literal["fit", "pooled", "latency", "cannot_separate"]
"""Where a group's ``α`` and ``β`` come from: its own sizes (``fit``); ``β`` from the other collectives
on its link (``pooled``); ``α`` from a given latency (``latency``); or nowhere (``cannot_separate``:
one size, nothing else to tell them apart)."""

FIT_SIZE_SPREAD = 2.0
"""A group's own sizes separate ``α`` from ``β`` when the largest sends at least this many times the
bus bytes of the smallest (closer sizes leave the slope to the noise)."""

MAX_FIT_SIZES = 256
"""At most this many distinct sizes of a group enter the pairwise slopes (evenly spaced by size):
the fit stays quadratic in a bounded number."""

DETERMINED_SHARE = 0.5
"""A slope determines ``α`` and ``β`` when its standard error, times the group's mean size, is at most
this share of the group's median time (:func:`_determined`)."""

_MAD_TO_SD = 1.4826
"""The median absolute deviation of normal noise times this is its standard deviation."""

COST_POINTS_SCHEMA = pl.Schema(
    {
        "collective": pl.String(),
        "group": pl.String(),
        "dimension": pl.String(),
        "group_size": pl.Int32(),
        "bytes": pl.Int64(),
        "time_ns": pl.Float64(),
    }
)
"""One transfer: its collective, group, dimension, group size, bytes (nccl-tests' ``S``) and time."""

COLLECTIVE_COSTS_SCHEMA = pl.Schema(
    {
        "collective": pl.String(),
        "group": pl.String(),
        "dimension": pl.String(),
        "group_size": pl.Int32(),
        "calls": pl.Int64(),
        "sizes": pl.Int32(),
        "bus_factor": pl.Float64(),
        "alpha_ns": pl.Float64(),
        "beta_ns_per_byte": pl.Float64(),
        "busbw_gbps": pl.Float64(),
        "alpha_se_ns": pl.Float64(),
        "beta_se_ns_per_byte": pl.Float64(),
        "median_ns": pl.Float64(),
        "basis": pl.String(),
    }
)
"""One row per collective kind and process group: the fitted ``α`` and ``β`` (``docs/collectives.md``)."""


class CellCost(msgspec.Struct, frozen=True):
    """The cost of one call of a collective kind on one process group.

    ``alpha_ns + beta_ns_per_byte · bus bytes``; ``basis``: where they come from (:data:`CostBasis`).
    """

    alpha_ns: float
    beta_ns_per_byte: float
    basis: CostBasis


# ----------------------------------------------------------------------------------------------
# Points


def exclusive_work(transfers: list[tuple[int, int, int, list[int]]]) -> dict[int, float]:
    """Return each transfer's link time had it been alone: ``∫ min over its ranks of 1/n_rank(t) dt``.

    Parameters
    ----------
    transfers
        ``(id, begin_ns, end_ns, ranks)``: a transfer in progress on every rank of ``ranks`` over
        ``[begin, end)``; ``n_rank(t)`` counts the transfers of the rank in progress at ``t``.

    Returns
    -------
    dict[int, float]
        Nanoseconds per id; equal to ``end − begin`` for a transfer that never shared a link.

    Examples
    --------
    >>> exclusive_work([(0, 0, 10, [0]), (1, 5, 10, [0])])  # two halves of [5, 10) each
    {0: 7.5, 1: 2.5}
    """
    steps = _transfer_counts(transfers)
    out: dict[int, float] = {}
    for transfer_id, begin, end, ranks in transfers:
        if end <= begin:
            out[transfer_id] = 0.0
            continue
        # each rank's count at the start, then its changes inside the transfer, by time
        levels: list[int] = []
        changes: list[tuple[int, int, int]] = []
        for slot, (times, counts) in enumerate({id(steps[r]): steps[r] for r in ranks}.values()):
            lo = bisect.bisect_right(times, begin)
            hi = bisect.bisect_left(times, end)
            levels.append(counts[lo - 1])
            changes += zip(times[lo:hi], itertools.repeat(slot), counts[lo:hi])
        changes.sort()
        # min over ranks of 1 / max(1, n) is 1 / max(1, the largest n), float for float
        total = 0.0
        at = begin
        for t, slot, level in changes:
            if t != at:
                total += (t - at) * (1.0 / max(1, max(levels)))
                at = t
            levels[slot] = level
        out[transfer_id] = total + (end - at) * (1.0 / max(1, max(levels, default=1)))
    return out


def _transfer_counts(
    transfers: list[tuple[int, int, int, list[int]]],
) -> dict[int, tuple[list[int], list[int]]]:
    """Per rank, the number of transfers in progress: piecewise constant, ``(times, counts)``.

    Ranks in the same transfers share one pair (every rank of a data-parallel job, often),
    computed once: the transfers on them look at it once.
    """
    members: dict[int, list[int]] = defaultdict(list)  # per rank, its transfers (by index)
    for k, (_id, begin, end, ranks) in enumerate(transfers):
        if end > begin:
            for r in ranks:
                members[r].append(k)
    shared: dict[tuple[int, ...], tuple[list[int], list[int]]] = {}
    steps: dict[int, tuple[list[int], list[int]]] = {}
    for r, indexes in members.items():
        key = tuple(indexes)
        if key not in shared:
            changes: dict[int, int] = {}
            for k in indexes:
                begin, end = transfers[k][1], transfers[k][2]
                changes[begin] = changes.get(begin, 0) + 1
                changes[end] = changes.get(end, 0) - 1
            times = sorted(changes)
            shared[key] = (times, list(itertools.accumulate(changes[t] for t in times)))
        steps[r] = shared[key]
    return steps


def transfer_points(match: CollectiveMatch) -> pl.DataFrame:
    """Return the transfer of every logical collective of a match with bytes, as fit points.

    A synchronising collective seen on several ranks (every rank ended it after the last one
    started) transfers over ``[last_start_ns, last_start_ns + transfer_ns]`` on each of its ranks;
    any other one over its shortest duration on a rank (all one rank's trace can say). Its time is
    that transfer's :func:`exclusive_work` (transfers in progress together on a rank share its link);
    with clocks that disagree (no last start across ranks), the transfer itself.
    Collectives without bytes, or with a bandwidth beyond any link (``implausible``), are left out;
    the group size is the group's (else the ranks expected to take part, as the bus factor reads it).

    Returns
    -------
    pl.DataFrame
        :data:`COST_POINTS_SCHEMA`, one row per logical collective.
    """
    rows = match.collectives.filter(pl.col("bytes").is_not_null() & ~pl.col("implausible").fill_null(False))
    members = match.ranks.group_by("collective_id").agg(
        _ranks=pl.col("rank").unique().sort(),
        _shortest=pl.col("dur_ns").min(),
        _shortest_start=pl.col("start_ns").sort_by("dur_ns").first(),
    )
    joined = rows.join(members, on="collective_id", how="inner").select(
        "collective_id",
        "collective",
        "group",
        "dimension",
        pl.coalesce("group_size", "expected_ranks").alias("group_size"),
        "bytes",
        "synchronising",
        "ranks",
        "last_start_ns",
        "transfer_ns",
        "_ranks",
        "_shortest",
        "_shortest_start",
    )
    transfers: list[tuple[int, int, int, list[int]]] = []
    unplaced: dict[int, float] = {}  # clocks that disagree: a transfer without a place in time is alone
    for row in joined.iter_rows(named=True):
        together = bool(row["synchronising"]) and (row["ranks"] or 0) > 1 and row["transfer_ns"] is not None
        if together and row["transfer_ns"] >= 0:
            begin, length, ranks = row["last_start_ns"], row["transfer_ns"], row["_ranks"]
        else:
            begin, length = row["_shortest_start"], row["_shortest"]
            ranks = row["_ranks"][:1]
        if length is None:
            continue
        if begin is None:
            unplaced[row["collective_id"]] = float(length)
            continue
        transfers.append((row["collective_id"], begin, begin + length, list(ranks)))
    work = {**exclusive_work(transfers), **unplaced}
    return (
        joined.filter(pl.col("collective_id").is_in(list(work)))
        .with_columns(time_ns=pl.col("collective_id").replace_strict(work, return_dtype=pl.Float64))
        .select(COST_POINTS_SCHEMA.names())
        .cast(COST_POINTS_SCHEMA)
    )


# ----------------------------------------------------------------------------------------------
# The fit


def link_key(dimension: str | None) -> str:
    """Return the link a process group's transfers run on: its dimension, or the job's one link (``*``)."""
    return dimension if dimension is not None else "*"


class _Cell(msgspec.Struct):
    """The points of one collective kind on one process group: bus bytes and times."""

    collective: str
    group: str | None
    dimension: str | None
    group_size: int
    factor: float
    xs: list[float]
    ys: list[float]

    def by_size(self) -> list[tuple[float, float]]:
        """Return the median time of each distinct size, by size (at most :data:`MAX_FIT_SIZES`)."""
        grouped: dict[float, list[float]] = defaultdict(list)
        for x, y in zip(self.xs, self.ys, strict=True):
            grouped[x].append(y)
        sizes = sorted(grouped)
        if len(sizes) > MAX_FIT_SIZES:
            step = (len(sizes) - 1) / (MAX_FIT_SIZES - 1)
            sizes = [sizes[round(k * step)] for k in range(MAX_FIT_SIZES)]
        return [(x, float(median(grouped[x]))) for x in sizes]

    @property
    def separable(self) -> bool:
        """Whether its own sizes spread enough to tell ``α`` from ``β``."""
        return bool(self.xs) and max(self.xs) >= FIT_SIZE_SPREAD * min(self.xs) > 0


def _slopes(cell: _Cell) -> list[float]:
    """Return the slopes between every two distinct sizes of a cell (their median times)."""
    points = cell.by_size()
    return [(y2 - y1) / (x2 - x1) for (x1, y1), (x2, y2) in itertools.combinations(points, 2) if x2 > x1]


def _robust_sd(residuals: Sequence[float]) -> float:
    """Return the noise's standard deviation from the median absolute residual (0 for an exact fit)."""
    return _MAD_TO_SD * float(median(abs(r) for r in residuals)) if residuals else 0.0


def _with_slope(cell: _Cell, beta: float, beta_se: float | None) -> tuple[float, float, float | None, float]:
    """Return ``(α, β, se(α), se(β))`` of a cell given its slope: ``α`` the median intercept.

    ``α`` below 0 (a slope the sizes do not support) gives ``α`` 0 and the median of ``time / x``.
    """
    alpha = float(median(y - beta * x for x, y in zip(cell.xs, cell.ys, strict=True)))
    if alpha < 0:
        alpha, beta = 0.0, float(median(y / x for x, y in zip(cell.xs, cell.ys, strict=True)))
    n = len(cell.xs)
    sd = _robust_sd([y - alpha - beta * x for x, y in zip(cell.xs, cell.ys, strict=True)])
    mean_x = sum(cell.xs) / n
    sxx = sum((x - mean_x) ** 2 for x in cell.xs)
    if beta_se is None:  # its own slope: the least-squares standard errors, with the robust noise
        beta_se = sd / math.sqrt(sxx) if sxx > 0 else 0.0
        alpha_se: float | None = sd * math.sqrt(1 / n + mean_x**2 / sxx) if sxx > 0 else sd / math.sqrt(n)
    else:
        alpha_se = math.sqrt(sd**2 / n + (mean_x * beta_se) ** 2)
    return alpha, beta, alpha_se, beta_se


def _determined(cell: _Cell, beta_se: float) -> bool:
    """Whether a slope's uncertainty leaves ``α`` and ``β`` apart: ``se(β) · mean size ≤`` half a call.

    :data:`DETERMINED_SHARE` of the cell's median time: beyond it, the same times are explained as
    well by a per-call cost as by a per-byte one.
    """
    mean_x = sum(cell.xs) / len(cell.xs)
    return beta_se * mean_x <= DETERMINED_SHARE * float(median(cell.ys))


def _pooled_slope(cells: Sequence[_Cell]) -> tuple[float, float] | None:
    """Return the slope of a link's cells and its standard error, or None when none of them separates.

    The median of the slopes between the sizes of each cell whose own sizes separate ``α`` from
    ``β``; its standard error from the noise of each such cell around its own intercept.
    """
    spread = [c for c in cells if c.separable]
    slopes = [s for c in spread for s in _slopes(c)]
    if not slopes:
        return None
    beta = max(0.0, float(median(slopes)))
    sxx = 0.0
    residuals: list[float] = []
    for c in spread:
        intercept = float(median(y - beta * x for x, y in zip(c.xs, c.ys, strict=True)))
        residuals += [y - intercept - beta * x for x, y in zip(c.xs, c.ys, strict=True)]
        mean_x = sum(c.xs) / len(c.xs)
        sxx += sum((x - mean_x) ** 2 for x in c.xs)
    se = _robust_sd(residuals) / math.sqrt(sxx) if sxx > 0 else 0.0
    return beta, se


_Fit = tuple[float | None, float | None, float | None, float | None, CostBasis]


def _fit_cell(
    cell: _Cell,
    pooled: tuple[float, float] | None,
    link_gbps: float | None,
    latency_s: float | None,
) -> _Fit:
    """Return ``(α, β, se(α), se(β), basis)`` of one cell, in the order :data:`CostBasis` lists.

    Its own sizes, when they spread and determine the slope (:func:`_determined`); else the slope
    of its link's other cells, when it determines it for this cell's sizes; else a given latency;
    else it cannot separate them. The link, when known, is a floor of the slope (no transfer is
    faster), never its value: taking it would call every transfer slower than the link a fixed
    cost per call, which bucketing would then remove, where the link may be what is underused.
    """
    floor = 8.0 / link_gbps if link_gbps else 0.0  # ns per byte of the link: no transfer is faster
    if cell.separable:
        slopes = _slopes(cell)
        own = _with_slope(cell, max(float(median(slopes)) if slopes else 0.0, floor), None)
        if _determined(cell, own[3]):
            return (*own, "fit")
    if pooled is not None and _determined(cell, pooled[1]):
        return (*_with_slope(cell, max(pooled[0], floor), pooled[1]), "pooled")
    if latency_s is not None:
        alpha = latency_s * 1e9 * _ring_steps(cell.collective, cell.group_size)
        betas = [max(0.0, y - alpha) / x for x, y in zip(cell.xs, cell.ys, strict=True)]
        beta = float(median(betas))
        sd = _robust_sd([y - alpha - beta * x for x, y in zip(cell.xs, cell.ys, strict=True)])
        mean_x = sum(cell.xs) / len(cell.xs)
        return alpha, beta, 0.0, sd / math.sqrt(len(cell.xs)) / mean_x, "latency"
    return None, None, None, None, "cannot_separate"


def _ring_steps(collective: str, n: int) -> int:
    """Return the sequential steps of a ring collective over ``n`` ranks, each paying the latency once.

    As :func:`timeline.whatif.costs.latency_steps` with the ring (the convention of the bus factor):
    all-reduce ``2(n−1)``, point-to-point 1, the others ``n−1``.
    """
    if n <= 1:
        return 0
    if collective == "all_reduce":
        return 2 * (n - 1)
    if collective in ("send", "recv", "send_recv"):
        return 1
    return n - 1


def _cells(points: pl.DataFrame) -> list[_Cell]:
    """Group the points by collective kind and group: bus bytes (``bytes · bus_factor``) and times."""
    cells: dict[tuple[str, str | None], _Cell] = {}
    usable = points.filter(
        pl.col("bytes").is_not_null() & (pl.col("bytes") > 0) & pl.col("time_ns").is_not_null()
    )
    for collective, group, dimension, size, nbytes, time_ns in usable.select(
        COST_POINTS_SCHEMA.names()
    ).iter_rows():
        factor = bus_factor(collective, int(size or 0))
        if factor is None or factor <= 0 or time_ns < 0:
            continue
        key = (collective, group)
        if key not in cells:
            cells[key] = _Cell(collective, group, dimension, int(size), factor, [], [])
        cells[key].xs.append(float(nbytes) * factor)
        cells[key].ys.append(float(time_ns))
    return sorted(cells.values(), key=lambda c: (c.dimension or "", c.group or "", c.collective))


def fit_collective_costs(
    points: pl.DataFrame,
    *,
    link_gbps: float | None = None,
    dimension_links: Mapping[str, float] | None = None,
    latency_s: float | None = None,
    dimension_latencies: Mapping[str, float] | None = None,
) -> pl.DataFrame:
    """Return ``α`` and ``β`` per collective kind and process group, fitted from its transfers.

    Parameters
    ----------
    points
        :data:`COST_POINTS_SCHEMA` (:func:`transfer_points`, or the what-if graph's collectives).
    link_gbps
        The link's one-direction bandwidth, when known: no transfer is faster (``β ≥ 8 / link``).
    dimension_links
        The link of a dimension's groups, in place of ``link_gbps``.
    latency_s
        The latency of one step of a collective, when known: where neither the sizes, the other
        collectives of the link nor the link separate them, ``α = steps · latency``.
    dimension_latencies
        The latency of a dimension's collectives, in place of ``latency_s``.

    Returns
    -------
    pl.DataFrame
        :data:`COLLECTIVE_COSTS_SCHEMA`, by dimension, group and collective; ``alpha_ns`` and
        ``beta_ns_per_byte`` null where ``basis`` is ``cannot_separate``.

    Examples
    --------
    >>> pts = pl.DataFrame(
    ...     {"collective": ["all_reduce"] * 3, "group": ["0"] * 3, "dimension": [None] * 3,
    ...      "group_size": [2] * 3, "bytes": [1000, 2000, 4000], "time_ns": [1500.0, 2000.0, 3000.0]},
    ...     schema=COST_POINTS_SCHEMA,
    ... )
    >>> fit_collective_costs(pts).select("alpha_ns", "beta_ns_per_byte", "basis").row(0)
    (1000.0, 0.5, 'fit')
    """
    cells = _cells(points)
    by_link: dict[str, list[_Cell]] = defaultdict(list)
    for cell in cells:
        by_link[link_key(cell.dimension)].append(cell)
    pooled = {key: _pooled_slope(members) for key, members in by_link.items()}
    links = dict(dimension_links or {})
    latencies = dict(dimension_latencies or {})
    rows = []
    for cell in cells:
        link = links.get(cell.dimension or "", link_gbps)
        latency = latencies.get(cell.dimension or "", latency_s)
        pool = pooled[link_key(cell.dimension)]
        rows.append(_cost_row(cell, _fit_cell(cell, pool, link, latency)))
    return pl.DataFrame(rows, schema=COLLECTIVE_COSTS_SCHEMA)


def _cost_row(cell: _Cell, fit: _Fit) -> dict[str, object]:
    """Return a cell's row of :data:`COLLECTIVE_COSTS_SCHEMA` with its fitted ``α`` and ``β``."""
    alpha, beta, alpha_se, beta_se, basis = fit
    return {
        "collective": cell.collective,
        "group": cell.group,
        "dimension": cell.dimension,
        "group_size": cell.group_size,
        "calls": len(cell.xs),
        "sizes": len(set(cell.xs)),
        "bus_factor": cell.factor,
        "alpha_ns": alpha,
        "beta_ns_per_byte": beta,
        "busbw_gbps": 8.0 / beta if beta else None,
        "alpha_se_ns": alpha_se,
        "beta_se_ns_per_byte": beta_se,
        "median_ns": float(median(cell.ys)),
        "basis": basis,
    }


def cell_costs(fit: pl.DataFrame) -> dict[tuple[str, str | None], CellCost]:
    """Return the fit as a lookup: ``(collective, group) → CellCost``, the cells it could separate only."""
    out: dict[tuple[str, str | None], CellCost] = {}
    for collective, group, alpha, beta, basis in fit.select(
        "collective", "group", "alpha_ns", "beta_ns_per_byte", "basis"
    ).iter_rows():
        if alpha is not None and beta is not None:
            out[(collective, group)] = CellCost(alpha_ns=alpha, beta_ns_per_byte=beta, basis=basis)
    return out


def describe_cost(cost: CellCost | None) -> str:
    """Return a cost in words: ``α 1.2 ms + 3.4 ns/byte (fit)``, or that it cannot be separated."""
    if cost is None:
        return "fixed and per-byte cost cannot be separated (one size, no other collective on its link)"
    return f"{format_ns(round(cost.alpha_ns))} per call + {cost.beta_ns_per_byte:.3g} ns/byte ({cost.basis})"
