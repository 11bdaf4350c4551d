"""Two runs compared (``timeline diff BASE NEW``): per iteration, per rank, per collective.

Takes the :class:`~timeline.budgets.frames.MetricFrames` of two runs (traces analysed, or summary
JSON files written by ``timeline analyze --json``: :func:`timeline.budgets.runs.read_run`) and
gives a :class:`Diff` (kind ``diff``, ``docs/diff.md``): each figure of both runs, the change
(absolute and relative) and whether the change is beyond the run-to-run noise.

An iteration's figure is the median over the run's ranks of each rank's value in that iteration
(the step the diagnosis measures); the summary holds the median of those over the iterations. The
noise of a change is its standard error (:func:`timeline.stats.noise`: the rule ``timeline check``
shares); a change is significant when ``|new - base| > k × noise`` (``k``: :data:`DEFAULT_NOISE_K`
unless given), and unknown when either run has fewer than :data:`MIN_VALUES` values. Iterations are
paired by position: each run's iteration numbers sorted ascending, the first of one with the first
of the other (two runs number their steps differently).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from timeline.results.base import Result, Row
from timeline.stats import MIN_VALUES, NOISE_K, Statistic, beyond_noise, median, noise

if TYPE_CHECKING:
    import polars as pl

    from timeline.budgets.frames import MetricFrames

__all__ = [
    "DEFAULT_NOISE_K",
    "DIFF_METRICS",
    "DIFF_VERSION",
    "MIN_VALUES",
    "TIME_METRICS",
    "Change",
    "CollectiveChange",
    "Diff",
    "Figures",
    "IterationPair",
    "RankChange",
    "TimeFigures",
    "build_diff",
    "change",
]

DIFF_VERSION = 2
"""The layout version of :class:`Diff` (its ``version`` key)."""

DEFAULT_NOISE_K = NOISE_K
"""How many times the noise a change must exceed to be significant (``--noise-k``)."""

TIME_METRICS = ("step_ns", "compute_ns", "exposed_comm_ns", "hidden_comm_ns")
"""The per-iteration times compared, columns of the rank × iteration rows."""

DIFF_METRICS = (*TIME_METRICS, "busbw_gbps")
"""Every figure compared per iteration (``busbw_gbps``: the matched collectives' bus bandwidth)."""


class Change(Row, frozen=True, kw_only=True):
    """One figure of both runs, its change, and whether the change is beyond the noise.

    Attributes
    ----------
    base, new
        The figure in each run (ns or Gbit/s; None when unknown).
    delta
        ``new - base``.
    relative
        ``delta / base`` (None when base is 0).
    noise
        The standard error of the change (:func:`timeline.stats.noise`); None with fewer than
        :data:`MIN_VALUES` values in either run.
    significant
        ``|delta| > k × noise``; None when the change or the noise is unknown.
    """

    base: float | None
    new: float | None
    delta: float | None
    relative: float | None
    noise: float | None
    significant: bool | None


class TimeFigures(Row, frozen=True, kw_only=True):
    """The change of each time an iteration holds (:data:`TIME_METRICS`)."""

    step_ns: Change
    compute_ns: Change
    exposed_comm_ns: Change
    hidden_comm_ns: Change

    def figures(self) -> tuple[tuple[str, Change], ...]:
        """Return ``(metric, change)`` of every figure, in the layout's order."""
        return tuple((name, getattr(self, name)) for name in self.__struct_fields__)


class Figures(TimeFigures, frozen=True, kw_only=True):
    """The change of every figure compared (:data:`DIFF_METRICS`): the times and the bus bandwidth."""

    busbw_gbps: Change


class IterationPair(Row, frozen=True, kw_only=True):
    """Two iterations paired by position: their numbers and the change of every figure."""

    position: int
    base_iteration: int | None
    new_iteration: int | None
    metrics: Figures


class RankChange(Row, frozen=True, kw_only=True):
    """One rank (matched by number): how many iterations each run has, the change of its medians."""

    rank: int
    base_iterations: int
    new_iterations: int
    metrics: TimeFigures


class CollectiveChange(Row, frozen=True, kw_only=True):
    """One kind of collective: how many each run matched, the change of their median bus bandwidth."""

    collective: str
    base_collectives: int
    new_collectives: int
    busbw_gbps: Change


class Diff(Result, tag="diff", kw_only=True):
    """Two runs compared (``timeline diff --json``, ``kind`` ``diff``, layout version 2).

    Layout 2 (from 1): ``kind`` and ``timeline`` come first; ``paired`` and ``beyond_noise`` are added
    last (what the headline says); an iteration's figure is the median over ranks (layout 1: the
    mean), so the summary is the median over iterations of the step the diagnosis measures; the
    noise of a change is its standard error (layout 1: the pooled median absolute deviation of the
    per-iteration values), the rule ``timeline check`` shares (:mod:`timeline.stats`).

    Attributes
    ----------
    base, new
        The runs as given.
    noise_k
        ``k``: a change is significant beyond ``k`` times its noise.
    min_values
        The fewest values a run needs for its noise to be known.
    warnings
        What the comparison leaves out.
    summary
        Per figure: the change of the medians over iterations.
    iterations
        The iterations paired by position.
    ranks
        The ranks matched by number.
    collectives
        Per kind of collective; None when a run is a summary JSON, which keeps no collectives.
    paired
        How many iterations were paired (in both runs).
    beyond_noise
        The figures of ``summary`` whose change is beyond the noise, in its order.
    """

    version: int = DIFF_VERSION
    base: str
    new: str
    noise_k: float
    min_values: int
    warnings: list[str]
    summary: Figures
    iterations: list[IterationPair]
    ranks: list[RankChange]
    collectives: list[CollectiveChange] | None
    paired: int
    beyond_noise: list[str]


def change(base: float | None, new: float | None, *, spread: float | None, k: float) -> Change:
    """Return one figure of both runs, its change and whether the change is beyond ``k`` × ``spread``."""
    delta = None if base is None or new is None else new - base
    relative = None if delta is None or not base else delta / base
    return Change(
        base=base,
        new=new,
        delta=delta,
        relative=relative,
        noise=spread,
        significant=beyond_noise(delta, spread, k=k),
    )


def _median(values: Sequence[float]) -> float | None:
    return float(median(values)) if values else None


def _known(frame: pl.DataFrame, metric: str) -> list[float]:
    """Return the known values of a column (none when the frame lacks it)."""
    if metric not in frame.columns:
        return []
    return [float(v) for v in frame.get_column(metric).to_list() if v is not None]


def _per_iteration(frames: MetricFrames) -> pl.DataFrame:
    """Return one row per iteration: the median over ranks of each time, and the busbw; by iteration."""
    import polars as pl

    known = [m for m in TIME_METRICS if m in frames.iterations.columns]
    rows = frames.iterations.group_by("iteration").agg(pl.col(m).cast(pl.Float64).median() for m in known)
    for metric in TIME_METRICS:
        if metric not in rows.columns:
            rows = rows.with_columns(pl.lit(None, dtype=pl.Float64).alias(metric))
    utilisation = frames.iteration_utilisation
    if utilisation is not None:
        busbw = utilisation.select("iteration", pl.col("busbw_gbps").cast(pl.Float64))
        rows = rows.join(busbw, on="iteration", how="left", nulls_equal=True)
    else:
        rows = rows.with_columns(busbw_gbps=pl.lit(None, dtype=pl.Float64))
    return rows.select("iteration", *DIFF_METRICS).sort("iteration", nulls_last=True)


def _changes(
    base: pl.DataFrame, new: pl.DataFrame, metrics: Sequence[str], k: float, statistic: Statistic
) -> dict[str, Change]:
    """Return, per metric, the median of each run's values and its change against their noise."""
    out = {}
    for metric in metrics:
        left, right = _known(base, metric), _known(new, metric)
        out[metric] = change(_median(left), _median(right), spread=noise(left, right, statistic), k=k)
    return out


def _iteration_rows(base: pl.DataFrame, new: pl.DataFrame, k: float) -> list[IterationPair]:
    """Return the iterations paired by position, each figure's change against one iteration's noise."""
    spreads = {m: noise(_known(base, m), _known(new, m), "value") for m in DIFF_METRICS}
    out = []
    for position in range(max(base.height, new.height)):
        left = base.row(position, named=True) if position < base.height else None
        right = new.row(position, named=True) if position < new.height else None
        figures = {
            m: change(
                None if left is None else left[m],
                None if right is None else right[m],
                spread=spreads[m],
                k=k,
            )
            for m in DIFF_METRICS
        }
        out.append(
            IterationPair(
                position=position,
                base_iteration=None if left is None else left["iteration"],
                new_iteration=None if right is None else right["iteration"],
                metrics=Figures(**figures),
            )
        )
    return out


def _rank_rows(base: MetricFrames, new: MetricFrames, k: float) -> list[RankChange]:
    """Return, per rank (matched by number), the median per-iteration times and their change."""
    import polars as pl

    ranks = sorted(
        set(base.iterations.get_column("rank").drop_nulls().to_list())
        | set(new.iterations.get_column("rank").drop_nulls().to_list())
    )
    out = []
    for rank in ranks:
        left = base.iterations.filter(pl.col("rank") == rank)
        right = new.iterations.filter(pl.col("rank") == rank)
        out.append(
            RankChange(
                rank=rank,
                base_iterations=left.height,
                new_iterations=right.height,
                metrics=TimeFigures(**_changes(left, right, TIME_METRICS, k, "median")),
            )
        )
    return out


def _busbw_by_kind(frames: MetricFrames) -> dict[str, tuple[int, list[float]]]:
    """Return, by kind, how many collectives were matched and the busbw of each plausible one."""
    import polars as pl

    collectives = frames.logical_collectives
    if collectives is None:
        return {}
    rows = collectives.select(
        pl.col("collective").fill_null("unknown"),
        pl.when(~pl.col("implausible").fill_null(False)).then(pl.col("busbw_gbps").cast(pl.Float64)),
    )
    out: dict[str, tuple[int, list[float]]] = {}
    for kind, busbw in rows.iter_rows():
        count, values = out.get(kind, (0, []))
        out[kind] = (count + 1, [*values, busbw] if busbw is not None else values)
    return out


def _collective_rows(base: MetricFrames, new: MetricFrames, k: float) -> list[CollectiveChange] | None:
    """Return, per kind of collective, how many were matched and the median busbw of each run."""
    if not base.matched or not new.matched:
        return None
    left, right = _busbw_by_kind(base), _busbw_by_kind(new)
    out = []
    for kind in sorted(set(left) | set(right)):
        (a_count, a), (b_count, b) = left.get(kind, (0, [])), right.get(kind, (0, []))
        out.append(
            CollectiveChange(
                collective=kind,
                base_collectives=a_count,
                new_collectives=b_count,
                busbw_gbps=change(_median(a), _median(b), spread=noise(a, b, "median"), k=k),
            )
        )
    return out


def _unmatched_warnings(base: MetricFrames, new: MetricFrames, iterations: int) -> list[str]:
    """Say what the comparison leaves out: iterations of one run only, collectives of a summary."""
    warnings = []
    b, n = (f.iterations.get_column("iteration").n_unique() for f in (base, new))
    if b != n:
        longer, label = (base, "BASE") if b > n else (new, "NEW")
        warnings.append(
            f"{longer.label}: {label} has {max(b, n)} iterations, the other run {min(b, n)}: the last "
            f"{iterations - min(b, n)} are compared with nothing (iterations are paired by position)"
        )
    ranks = [set(f.iterations.get_column("rank").drop_nulls().to_list()) for f in (base, new)]
    if ranks[0] != ranks[1]:
        only = [", ".join(map(str, sorted(a - b))) or "none" for a, b in (ranks, ranks[::-1])]
        warnings.append(
            f"{new.label}: ranks are matched by number: BASE only has rank(s) {only[0]}, NEW only "
            f"{only[1]}; their rows compare nothing"
        )
    warnings.extend(
        f"{frames.label}: a summary JSON keeps no collectives: no bus bandwidth is compared; "
        "give the run's traces to compare it"
        for frames in (base, new)
        if not frames.matched
    )
    return warnings


def build_diff(base: MetricFrames, new: MetricFrames, *, k: float = DEFAULT_NOISE_K) -> Diff:
    """Return two runs compared (``timeline diff --json``): see :class:`Diff`.

    Parameters
    ----------
    base, new
        The runs (:func:`timeline.budgets.runs.read_run`).
    k
        A change is significant beyond ``k`` times its noise.

    Examples
    --------
    >>> from timeline.budgets.runs import read_run  # doctest: +SKIP
    >>> from timeline.run import Inputs, RunOptions  # doctest: +SKIP
    >>> runs = [read_run(Inputs(paths=[p]), RunOptions(), match=True) for p in ("a/", "b/")]  # doctest: +SKIP
    >>> build_diff(*runs).summary.step_ns.significant  # doctest: +SKIP
    """
    left, right = _per_iteration(base), _per_iteration(new)
    summary = Figures(**_changes(left, right, DIFF_METRICS, k, "median"))
    iterations = _iteration_rows(left, right, k)
    return Diff(
        base=base.label,
        new=new.label,
        noise_k=k,
        min_values=MIN_VALUES,
        warnings=_unmatched_warnings(base, new, len(iterations)),
        summary=summary,
        iterations=iterations,
        ranks=_rank_rows(base, new, k),
        collectives=_collective_rows(base, new, k),
        paired=sum(1 for p in iterations if p.base_iteration is not None and p.new_iteration is not None),
        beyond_noise=[metric for metric, figure in summary.figures() if figure.significant],
    )
