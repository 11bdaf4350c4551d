"""Budgets evaluated: a :class:`Verdict` per budget and per regression check, in a :class:`CheckReport`.

Takes a :class:`~timeline.budgets.budget_file.BudgetFile` and the :class:`MetricFrames` of a run
(and of a baseline run) and gives verdicts: ``pass``, ``fail``, ``nodata`` (nothing to measure: a
failure too, a gate never passes blind) or ``skip`` (a regression check without a baseline).

A budget aggregates the samples of its metric (one per rank-iteration, per communication event, per
logical collective matched across ranks…) over all ranks pooled, or per rank with the worst rank
deciding, and compares the result with its limits; the link utilisation metrics read the link's
bandwidth from the entry, ``--link-gbps`` or the budget file, in that order
(:func:`~timeline.budgets.budget_file.check_links`).
A regression check compares the aggregate with the baseline's and flags it only when it got worse
by more than the tolerance *and* by more than the noise, ``NOISE_K`` × the larger of the two runs'
standard errors (see :func:`noise_of` and ``docs/ci.md``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import polars as pl

from timeline.analysis.collectives import ALL_COMMUNICATION_GROUP
from timeline.budgets.budget_file import Budget, BudgetFile, Over, Regression, Scope, check_links
from timeline.budgets.frames import JobFacts, MetricFrames
from timeline.budgets.metrics import Metric, format_value
from timeline.errors import BudgetError
from timeline.results.diagnosis import DiagnosisReport

__all__ = [
    "NOISE_K",
    "CheckReport",
    "Status",
    "Verdict",
    "Worst",
    "compare_jobs",
    "evaluate_budgets",
    "noise_of",
    "select_samples",
]

NOISE_K = 2.0
"""A regression is flagged only when it exceeds ``NOISE_K`` standard errors of either run."""

_MEDIAN_SE = math.sqrt(math.pi / 2)  # the standard error of a median is √(π/2) ≈ 1.2533 × that of a mean

Status = Literal["pass", "fail", "nodata", "skip"]
Kind = Literal["budget", "regression"]

_WHAT = {
    "collective": "collective",
    "pg_name": "process group",
    "dimension": "dimension",
    "pg_desc": "pg_desc",
}

_SAMPLE_SCHEMA = pl.Schema(
    {"rank": pl.Int64(), "iteration": pl.Int64(), "collective": pl.String(), "value": pl.Float64()}
)


@dataclass(frozen=True)
class Worst:
    """The sample that decided a verdict (the one closest to, or furthest past, the limit)."""

    rank: int | None
    iteration: int | None
    collective: str | None
    value: float

    def describe(self, unit: str) -> str:
        """``rank 1, iteration 2: 30.00%``."""
        parts = []
        if self.rank is not None:
            parts.append(f"rank {self.rank}")
        if self.iteration is not None:
            parts.append(f"iteration {self.iteration}")
        if self.collective is not None:
            parts.append(self.collective)
        return f"{', '.join(parts) or 'all'}: {format_value(self.value, unit)}"


@dataclass(frozen=True)
class Verdict:
    """The outcome of one budget or one regression check.

    Attributes
    ----------
    kind
        ``budget`` or ``regression``.
    name
        The budget's name.
    metric, unit, aggregate, over
        What was measured, as in the budget file.
    status
        ``pass``, ``fail``, ``nodata`` or ``skip``.
    value
        The aggregate (of the worst rank with ``over = "rank"``); ``None`` when not measured.
    upper, lower
        The limits the value was held to; for a regression, the baseline plus or minus the larger of
        the tolerance and the noise.
    samples
        How many samples the aggregate is over.
    worst
        The worst sample (of the worst rank).
    message
        One line saying why it passed or failed.
    where, line
        Where the budget was read (``timeline.toml:budgets[0]``), and its line.
    baseline, tolerance, noise
        For a regression: the baseline aggregate, the allowed worsening from the tolerances, and the
        noise threshold.
    link_gbps
        The link's bandwidth the metric was measured against (link utilisation metrics), in Gbit/s.
    """

    kind: Kind
    name: str
    metric: str
    unit: str
    aggregate: str
    over: Over
    status: Status
    value: float | None
    upper: float | None
    lower: float | None
    samples: int
    worst: Worst | None
    message: str
    where: str
    line: int | None = None
    baseline: float | None = None
    tolerance: float | None = None
    noise: float | None = None
    link_gbps: float | None = None

    @property
    def failed(self) -> bool:
        """Whether this verdict fails the check (``fail`` or ``nodata``)."""
        return self.status in ("fail", "nodata")

    def describe_measure(self) -> str:
        """``exposed_comm_ratio p90 per rank``."""
        return f"{self.metric} {self.aggregate}" + (" per rank" if self.over == "rank" else "")

    def describe_limit(self) -> str:
        """``<= 25.00%``, ``>= 80.00%``, or both."""
        parts = []
        if self.lower is not None:
            parts.append(f">= {format_value(self.lower, self.unit)}")
        if self.upper is not None:
            parts.append(f"<= {format_value(self.upper, self.unit)}")
        text = ", ".join(parts) or "-"
        if self.kind == "regression" and self.baseline is not None:
            text += f" (baseline {format_value(self.baseline, self.unit)})"
        return text


@dataclass(frozen=True)
class CheckReport:
    """Every verdict of one ``timeline check``.

    Attributes
    ----------
    verdicts
        Budgets first, then regression checks, in file order.
    budget_file
        The budget file.
    inputs
        The run checked.
    baseline
        The baseline run, if any.
    warnings
        What makes the verdicts doubtful: a baseline that looks like another job
        (:func:`compare_jobs`).
    diagnosis
        The run's diagnosis (:class:`~timeline.results.diagnosis.DiagnosisReport`: its verdict and
        findings), when it was diagnosed: the markdown summary lists its top findings.
    """

    verdicts: tuple[Verdict, ...]
    budget_file: str
    inputs: str
    baseline: str | None = None
    warnings: tuple[str, ...] = ()
    diagnosis: DiagnosisReport | None = None

    @property
    def failed(self) -> tuple[Verdict, ...]:
        """The verdicts that fail the check."""
        return tuple(v for v in self.verdicts if v.failed)

    @property
    def ok(self) -> bool:
        """Whether every budget holds."""
        return not self.failed

    @property
    def exit_code(self) -> int:
        """0 when every budget holds, 1 otherwise."""
        return 0 if self.ok else 1

    def counts(self) -> dict[str, int]:
        """How many verdicts have each status."""
        out = {"pass": 0, "fail": 0, "nodata": 0, "skip": 0}
        for verdict in self.verdicts:
            out[verdict.status] += 1
        return out


def evaluate_budgets(
    budgets: BudgetFile,
    frames: MetricFrames,
    *,
    baseline: MetricFrames | None = None,
    link_gbps: float | None = None,
) -> CheckReport:
    """Evaluate every budget and regression check of a budget file on a run.

    Parameters
    ----------
    budgets
        :func:`~timeline.budgets.budget_file.read_budget_file`.
    frames
        The run to check.
    baseline
        The run to compare with; without it regression checks are skipped.
    link_gbps
        The link's bandwidth in Gbit/s (``--link-gbps``) for the link utilisation metrics: it wins
        over the file's ``link_gbps``; an entry's own ``link_gbps`` wins over both.

    Returns
    -------
    CheckReport

    Raises
    ------
    BudgetError
        A metric the input cannot provide: a collective metric on a summary JSON, a column an older
        summary lacks, a cross-rank metric on frames built without matching, or a link utilisation
        metric without a link.

    Examples
    --------
    >>> import timeline  # doctest: +SKIP
    >>> from timeline.budgets import frames_of_run, read_budget_file  # doctest: +SKIP
    >>> run = timeline.analyze("sample_traces/ddp_gloo")  # doctest: +SKIP
    >>> frames = frames_of_run(  # doctest: +SKIP
    ...     run, label="ddp_gloo", matched=True, dimensions=False, diagnosed=False
    ... )
    >>> report = evaluate_budgets(read_budget_file("timeline.toml"), frames)  # doctest: +SKIP
    >>> report.exit_code  # doctest: +SKIP
    0
    """
    links = check_links(budgets, link_gbps=link_gbps)
    verdicts = [_evaluate_budget(b, frames, links.get(b.where)) for b in budgets.budgets]
    verdicts += [_evaluate_regression(r, frames, baseline, links.get(r.where)) for r in budgets.regressions]
    warnings: list[str] = []
    if baseline is not None and frames.job is not None and baseline.job is not None:
        other_job = compare_jobs(frames.job, baseline.job)
        if other_job is not None:
            warnings.append(other_job)
    return CheckReport(
        verdicts=tuple(verdicts),
        budget_file=budgets.path,
        inputs=frames.label,
        baseline=None if baseline is None else baseline.label,
        warnings=tuple(warnings),
        diagnosis=frames.diagnosis,
    )


_MODE_NAMES = {"gpu": "GPU kernels", "cpu": "CPU only", "horovod": "a Horovod timeline"}


def _listed(values: tuple[str, ...], names: dict[str, str] | None = None) -> str:
    return " + ".join((names or {}).get(v, v) for v in values) or "none"


def compare_jobs(run: JobFacts, baseline: JobFacts) -> str | None:
    """Return a warning when the baseline looks like another job than the run, else None.

    Compared where both sides know them: the world size, the communication backends, the device
    mode of the ranks (GPU kernels, CPU only, a Horovod timeline) and the collective mix (the set of
    collective kinds; a summary JSON does not keep it). Regression checks between two jobs compare
    different things: the warning says which facts differ.

    Examples
    --------
    >>> pr = JobFacts(world_size=8, backends=("nccl",), modes=("gpu",), collectives=("all_reduce",))
    >>> base = JobFacts(world_size=2, backends=("gloo",), modes=("cpu",), collectives=("all_reduce",))
    >>> print(compare_jobs(pr, base))  # doctest: +NORMALIZE_WHITESPACE
    the baseline looks like another job: world size 8 vs 2 in the baseline; backend nccl vs gloo;
    device mode GPU kernels vs CPU only; its regression checks compare different runs
    """
    differences = []
    if (
        run.world_size is not None
        and baseline.world_size is not None
        and run.world_size != baseline.world_size
    ):
        differences.append(f"world size {run.world_size} vs {baseline.world_size} in the baseline")
    if run.backends and baseline.backends and run.backends != baseline.backends:
        differences.append(f"backend {_listed(run.backends)} vs {_listed(baseline.backends)}")
    if run.modes and baseline.modes and run.modes != baseline.modes:
        differences.append(
            f"device mode {_listed(run.modes, _MODE_NAMES)} vs {_listed(baseline.modes, _MODE_NAMES)}"
        )
    if (
        run.collectives is not None
        and baseline.collectives is not None
        and run.collectives != baseline.collectives
    ):
        differences.append(f"collectives {_listed(run.collectives)} vs {_listed(baseline.collectives)}")
    if not differences:
        return None
    return (
        f"the baseline looks like another job: {'; '.join(differences)}; its regression checks compare "
        "different runs"
    )


def select_samples(
    frames: MetricFrames, metric: Metric, scope: Scope, *, where: str, link_gbps: float | None = None
) -> tuple[pl.DataFrame, str]:
    """Return the samples of a metric in a scope, and why there are none when there are none.

    Parameters
    ----------
    frames
        The run.
    metric
        The metric.
    scope
        Ranks, collectives, process groups, warm-up iterations.
    where
        The budget, for messages.
    link_gbps
        The link's bandwidth in Gbit/s, for a metric that needs one.

    Returns
    -------
    tuple[pl.DataFrame, str]
        Columns ``rank``, ``iteration``, ``collective``, ``value`` (nulls dropped); and ``""``, or
        the reason the frame is empty. ``rank`` is null for metrics measured across ranks;
        ``collective`` names a logical collective with its ``collective_id`` (``all_to_all #0``).

    Raises
    ------
    BudgetError
        The input cannot provide the metric at all.
    """
    empty = pl.DataFrame(schema=_SAMPLE_SCHEMA)
    if scope.by_dimension and metric.source == "iterations":
        frame, reason = _dimension_iterations(frames, scope, where)
        if reason:
            return empty, reason
    else:
        frame = _source(frames, metric, where)
    if frame.height == 0:
        if metric.matched:
            hint = " (a Horovod timeline alone has none)"
            return empty, f"no collectives matched across ranks in {frames.label}{hint}"
        return empty, f"{frames.label} has no {metric.source} rows"
    if metric.needs_link:
        if link_gbps is None:
            raise BudgetError(f"{where}: {metric.name} needs the link's bandwidth; pass link_gbps")
        frame = frame.with_columns(link_gbps=pl.lit(link_gbps, dtype=pl.Float64))
    if "pg_name" not in frame.columns and "group" in frame.columns:
        frame = frame.with_columns(
            pg_name=pl.when(pl.col("group") != ALL_COMMUNICATION_GROUP).then(pl.col("group"))
        )
    if scope.ranks is not None:
        if "rank" not in frame.columns:
            raise BudgetError(f"{where}: {metric.name} is measured across ranks; it has no ranks to scope")
        present = sorted(frame.get_column("rank").unique().to_list())
        frame = frame.filter(pl.col("rank").is_in(scope.ranks))
        if frame.height == 0:
            return empty, f"no rank {_list(scope.ranks)} in {frames.label} (ranks {_list(present)})"
    frame, reason = _named(frame, frames, metric, scope, where)
    if reason:
        return empty, reason
    if scope.skip_iterations:
        frame = _skip_warmup(frame, frames, metric, scope.skip_iterations)
        if frame.height == 0:
            return empty, f"every iteration is skipped (skip_iterations = {scope.skip_iterations})"
    if "rank" not in frame.columns:
        frame = frame.with_columns(rank=pl.lit(None, pl.Int64))
    if "iteration" not in frame.columns:
        frame = frame.with_columns(iteration=pl.lit(None, pl.Int64))
    if "collective" not in frame.columns:
        frame = frame.with_columns(collective=pl.lit(None, pl.String))
    collective = pl.col("collective").cast(pl.String)
    if "collective_id" in frame.columns and not metric.per_iteration:
        # a logical collective: its name alone does not say which one
        collective = pl.concat_str(
            collective.fill_null("collective"), pl.lit(" #"), pl.col("collective_id").cast(pl.String)
        )
    samples = frame.select(
        pl.col("rank").cast(pl.Int64),
        pl.col("iteration").cast(pl.Int64),
        collective.alias("collective"),
        value=metric.value.cast(pl.Float64),
        is_horovod=(pl.col("mode") == "horovod") if "mode" in frame.columns else pl.lit(False),
    )
    horovod = bool(samples.get_column("is_horovod").any())
    samples = samples.filter(pl.col("value").is_not_null() & pl.col("value").is_not_nan()).drop("is_horovod")
    if metric.per_iteration:
        # Events outside every iteration window are left out, unless the rank has no windows at all.
        in_window = pl.col("iteration").is_not_null() | pl.col("iteration").is_null().all().over("rank")
        samples = (
            samples.filter(in_window)
            .group_by("rank", "iteration", maintain_order=True)
            .agg(collective=pl.col("collective").unique().sort().str.join(","), value=pl.col("value").sum())
            .select(_SAMPLE_SCHEMA.names())
        )
    if samples.height == 0:
        hint = " (a Horovod timeline alone has no compute events)" if horovod else ""
        return empty, f"{metric.name} is unknown on every selected row{hint}"
    return samples.cast(_SAMPLE_SCHEMA), ""


def noise_of(values: pl.Series, aggregate: str) -> float:
    """Return the noise of an aggregate: its standard error estimated from the spread of the samples.

    With ``s`` the sample standard deviation and ``n`` the number of samples: ``s / √n`` for
    ``mean``, ``1.2533 s / √n`` for ``p50`` (the standard error of a median), and ``s`` for ``max``,
    ``min`` and the other percentiles, which move by about one standard deviation between runs.
    ``0`` for fewer than two samples.
    """
    n = values.len()
    if n < 2:
        return 0.0
    s = values.std(ddof=1)
    spread = float(s) if isinstance(s, int | float) else 0.0
    if aggregate == "mean":
        return spread / math.sqrt(n)
    if aggregate == "p50":
        return _MEDIAN_SE * spread / math.sqrt(n)
    return spread


def _source(frames: MetricFrames, metric: Metric, where: str) -> pl.DataFrame:
    frame = {
        "iterations": frames.iterations,
        "ranks": frames.ranks,
        "collectives": frames.collectives,
        "logical_collectives": frames.logical_collectives,
        "collective_ranks": frames.collective_ranks,
        "iteration_utilisation": frames.iteration_utilisation,
        "straggler_iterations": frames.straggler_iterations,
        "findings": frames.findings,
    }[metric.source]
    if frame is None and metric.finding:
        msg = (
            f"{where}: {metric.name} needs the diagnosis' findings, and {frames.label} was read without "
            "them (a summary JSON written with --no-findings, or by a timeline before the diagnosis): "
            "re-run timeline analyze --json, or pass the trace"
        )
        raise BudgetError(msg)
    if frame is None and metric.matched and frames.collectives is not None:
        msg = (
            f"{where}: {metric.name} needs the collectives matched across ranks, and {frames.label} "
            "was analysed without; build its frames with frames_of_run(..., matched=True)"
        )
        raise BudgetError(msg)
    if frame is None:
        rows = "the collectives matched across ranks" if metric.matched else "per-collective rows"
        msg = (
            f"{where}: {metric.name} needs {rows}, which a summary JSON ({frames.label}) "
            "does not keep; pass the trace or its Parquet file instead"
        )
        raise BudgetError(msg)
    missing = [c for c in metric.columns if c not in frame.columns]
    if missing:
        msg = (
            f"{where}: {frames.label} has no column {', '.join(missing)} for {metric.name} "
            "(an older summary?); re-run timeline analyze --json, or pass the trace"
        )
        raise BudgetError(msg)
    return frame


def _named(
    frame: pl.DataFrame, frames: MetricFrames, metric: Metric, scope: Scope, where: str
) -> tuple[pl.DataFrame, str]:
    """Keep the rows of the scoped collectives, process groups, dimensions and descriptions."""
    per_collective = metric.source != "iterations"
    for column, names in (
        ("collective", scope.collectives),
        ("pg_name", scope.pg_names),
        ("dimension", scope.dimensions if per_collective else None),
        ("pg_desc", scope.pg_descs if per_collective else None),
    ):
        if names is not None:
            if column not in frame.columns:
                raise BudgetError(
                    f"{where}: {frames.label} was read without the {column} of each collective; "
                    "pass the trace"
                )
            present = sorted({str(n) for n in frame.get_column(column).drop_nulls().unique().to_list()})
            frame = frame.filter(pl.col(column).cast(pl.String).is_in(names))
            if frame.height == 0:
                what = _WHAT[column]
                return (
                    frame.clear(),
                    f"no {what} {_list(names)} in {frames.label} ({what}s: {_list(present) or 'none'})",
                )
    return frame, ""


def _dimension_iterations(frames: MetricFrames, scope: Scope, where: str) -> tuple[pl.DataFrame, str]:
    """Return the rank × iteration rows of the scoped dimensions (or descriptions), one set per key.

    Every iteration window of every rank is a sample of each key the scope names and the run holds:
    ``comm_ns``, ``hidden_comm_ns`` and ``exposed_comm_ns`` are that key's (0 in a window where it ran
    nothing), the ratios over the window's ``step_ns`` (``hidden_comm_ratio`` over its ``comm_ns``).
    """
    if frames.dimensions is None:
        msg = (
            f"{where}: a dimension or pg_desc scope needs the exposure per dimension, which {frames.label} "
            "does not hold (a summary JSON of layout 1 or 2); re-run timeline analyze --json, or pass the "
            "trace"
        )
        raise BudgetError(msg)
    by, names = (
        ("dimension", scope.dimensions) if scope.dimensions is not None else ("pg_desc", scope.pg_descs)
    )
    rows = frames.dimensions.filter(pl.col("by") == by)
    if by == "pg_desc" and rows.height == 0 and frames.collectives is None:
        raise BudgetError(
            f"{where}: a summary JSON holds the exposure per dimension only, not per pg_desc; pass the trace"
        )
    present = sorted({str(d) for d in rows.get_column("dimension").to_list()})
    chosen = [name for name in names or () if name in present]
    if not chosen:
        return (
            pl.DataFrame(),
            f"no {by} {_list(names or ())} in {frames.label} ({by}s: {_list(present) or 'none'})",
        )
    key_rows = rows.select(
        pl.col("rank").cast(pl.Int32),
        pl.col("iteration").cast(pl.Int64),
        "comm_ns",
        "hidden_ns",
        "exposed_ns",
        _key="dimension",
    )
    windows = frames.iterations.drop(
        [
            c
            for c in frames.iterations.columns
            if c.endswith(("_ns", "_ratio")) and c not in ("start_ns", "end_ns", "step_ns")
        ]
    ).with_columns(pl.col("rank").cast(pl.Int32), pl.col("iteration").cast(pl.Int64))
    joined = windows.join(pl.DataFrame({"_key": chosen}), how="cross").join(
        key_rows, on=["rank", "iteration", "_key"], how="left", nulls_equal=True
    )
    step = pl.col("step_ns")
    comm, hidden, exposed = (pl.col(c).fill_null(0) for c in ("comm_ns", "hidden_ns", "exposed_ns"))
    frame = joined.with_columns(
        comm_ns=comm,
        hidden_comm_ns=hidden,
        exposed_comm_ns=exposed,
        comm_ratio=pl.when(step > 0).then(comm / step),
        exposed_comm_ratio=pl.when(step > 0).then(exposed / step),
        hidden_comm_ratio=pl.when(comm > 0).then(hidden / comm),
        collective=pl.col("_key"),
    )
    return frame, ""


def _skip_warmup(frame: pl.DataFrame, frames: MetricFrames, metric: Metric, skip: int) -> pl.DataFrame:
    """Drop the rows of each rank's first ``skip`` iteration windows."""
    order = pl.int_range(pl.len()).over(
        ["rank", "_key"] if "_key" in frame.columns else "rank", order_by="start_ns"
    )
    if metric.source == "iterations":
        return frame.filter(order >= skip)
    skipped = frames.iterations.filter(order < skip).select(
        pl.col("rank").cast(pl.Int64), pl.col("iteration").cast(pl.Int64)
    )
    keys = ["rank", "iteration"] if metric.per_rank else ["iteration"]
    if not metric.per_rank:
        # Rows across ranks: an iteration any rank skips (ProfilerStep numbers are the same on every rank).
        skipped = skipped.select("iteration").unique()
    keyed = frame.with_columns(pl.col(k).cast(pl.Int64) for k in keys)
    # Events outside every counted window (before the first, or on a rank without steps) go too.
    return keyed.filter(pl.col("iteration").is_not_null()).join(skipped, on=keys, how="anti")


def _excess(value: pl.Expr, upper: float | None, lower: float | None, better: str) -> pl.Expr:
    """How far past its limits a value is (positive: violated); with both limits, the worse side."""
    sides = []
    if upper is not None:
        sides.append(value - upper)
    if lower is not None:
        sides.append(lower - value)
    if not sides:  # not reached for budgets; regressions pass their direction through upper/lower
        sides.append(value if better == "lower" else -value)
    return pl.max_horizontal(sides)


def _aggregate_expr(aggregate: str) -> pl.Expr:
    value = pl.col("value")
    if aggregate == "max":
        return value.max()
    if aggregate == "min":
        return value.min()
    if aggregate == "mean":
        return value.mean()
    return value.quantile(float(aggregate[1:]) / 100, interpolation="linear")


def _worst_row(samples: pl.DataFrame, excess: pl.Expr) -> Worst:
    row = (
        samples.with_columns(_excess=excess)
        .sort(["_excess", "rank", "iteration"], descending=[True, False, False], nulls_last=True)
        .row(0, named=True)
    )
    return Worst(
        rank=row["rank"], iteration=row["iteration"], collective=row["collective"], value=row["value"]
    )


def _scalar(frame: pl.DataFrame) -> float:
    value = frame.item()
    return float(value)


def _against(link_gbps: float | None) -> str:
    """`` against a 100 Gbit/s link`` for a link utilisation metric, else ``""``."""
    return "" if link_gbps is None else f" against a {link_gbps:g} Gbit/s link"


def _evaluate_budget(budget: Budget, frames: MetricFrames, link_gbps: float | None) -> Verdict:
    metric = budget.metric
    samples, reason = select_samples(frames, metric, budget.scope, where=budget.where, link_gbps=link_gbps)

    def verdict(
        status: Status, value: float | None, samples: int, worst: Worst | None, message: str
    ) -> Verdict:
        return Verdict(
            kind="budget",
            name=budget.name,
            metric=metric.name,
            unit=metric.unit,
            aggregate=budget.aggregate,
            over=budget.over,
            status=status,
            value=value,
            upper=budget.upper,
            lower=budget.lower,
            samples=samples,
            worst=worst,
            message=message,
            where=budget.where,
            line=budget.line,
            link_gbps=link_gbps,
        )

    if reason:
        return verdict("nodata", None, 0, None, f"no data: {reason}")
    aggregate = _aggregate_expr(budget.aggregate)

    def excess(expr: pl.Expr) -> pl.Expr:
        return _excess(expr, budget.upper, budget.lower, metric.better)

    if budget.over == "all":
        value = _scalar(samples.select(aggregate))
        decided = samples
    else:
        per_rank = samples.group_by("rank").agg(aggregate.alias("value"))
        rank = (
            per_rank.with_columns(_excess=excess(pl.col("value")))
            .sort(["_excess", "rank"], descending=[True, False])
            .row(0, named=True)
        )
        value = float(rank["value"])
        decided = samples.filter(pl.col("rank") == rank["rank"])
    worst = _worst_row(decided, excess(pl.col("value")))
    violated = _scalar(pl.select(excess(pl.lit(value)))) > 0
    status: Status = "fail" if violated else "pass"
    measure = f"{metric.name} {budget.aggregate}" + (
        f" of rank {worst.rank} (the worst rank)" if budget.over == "rank" else ""
    )
    measure += _against(link_gbps)
    shown = format_value(value, metric.unit)
    if violated:
        side = (
            f"> max {format_value(budget.upper, metric.unit)}"
            if budget.upper is not None and value > budget.upper
            else f"< min {format_value(budget.lower, metric.unit)}"
        )
        message = f"{measure} = {shown} {side}; worst sample {worst.describe(metric.unit)}"
    else:
        message = f"{measure} = {shown}, within {_limits(budget.upper, budget.lower, metric.unit)}"
    return verdict(status, value, decided.height, worst, message)


@dataclass(frozen=True)
class _Comparison:
    rank: int | None
    new: float
    old: float
    worse_by: float
    allowed: float
    noise: float
    samples: int

    @property
    def flagged(self) -> bool:
        return self.worse_by > self.allowed and self.worse_by > self.noise

    @property
    def margin(self) -> float:
        return self.worse_by - max(self.allowed, self.noise)


def _compare(check: Regression, new: pl.Series, old: pl.Series, rank: int | None) -> _Comparison:
    aggregate = _aggregate_expr(check.aggregate)
    new_value = _scalar(pl.DataFrame({"value": new}).select(aggregate))
    old_value = _scalar(pl.DataFrame({"value": old}).select(aggregate))
    sign = 1.0 if check.metric.better == "lower" else -1.0
    noise = NOISE_K * max(noise_of(new, check.aggregate), noise_of(old, check.aggregate))
    return _Comparison(
        rank=rank,
        new=new_value,
        old=old_value,
        worse_by=sign * (new_value - old_value),
        allowed=check.allowed(old_value),
        noise=noise,
        samples=new.len(),
    )


def _evaluate_regression(
    check: Regression, frames: MetricFrames, baseline: MetricFrames | None, link_gbps: float | None
) -> Verdict:
    metric = check.metric

    def unmeasured(status: Status, message: str) -> Verdict:
        return Verdict(
            kind="regression",
            name=check.name,
            metric=metric.name,
            unit=metric.unit,
            aggregate=check.aggregate,
            over=check.over,
            status=status,
            value=None,
            upper=None,
            lower=None,
            samples=0,
            worst=None,
            message=message,
            where=check.where,
            line=check.line,
            link_gbps=link_gbps,
        )

    if baseline is None:
        return unmeasured("skip", "not checked: no --baseline given")
    new, reason = select_samples(frames, metric, check.scope, where=check.where, link_gbps=link_gbps)
    old, old_reason = select_samples(baseline, metric, check.scope, where=check.where, link_gbps=link_gbps)
    if old_reason and not reason:
        reason = f"baseline: {old_reason}"
    if reason:
        return unmeasured("nodata", f"no data: {reason}")
    if check.over == "all":
        comparisons = [_compare(check, new.get_column("value"), old.get_column("value"), None)]
    else:
        common = sorted(set(new.get_column("rank").to_list()) & set(old.get_column("rank").to_list()))
        if not common:
            return unmeasured("nodata", "no data: no rank is in both the run and the baseline")
        comparisons = [
            _compare(
                check,
                new.filter(pl.col("rank") == r).get_column("value"),
                old.filter(pl.col("rank") == r).get_column("value"),
                r,
            )
            for r in common
        ]
    decisive = max(comparisons, key=lambda c: (c.flagged, c.margin))
    threshold = max(decisive.allowed, decisive.noise)
    upper = decisive.old + threshold if metric.better == "lower" else None
    lower = decisive.old - threshold if metric.better == "higher" else None
    decided = new if decisive.rank is None else new.filter(pl.col("rank") == decisive.rank)
    worst = _worst_row(decided, pl.col("value") if metric.better == "lower" else -pl.col("value"))
    unit = metric.unit
    who = "" if decisive.rank is None else f" on rank {decisive.rank}"
    head = (
        f"{metric.name} {check.aggregate}{who}{_against(link_gbps)} = {format_value(decisive.new, unit)} "
        f"vs baseline {format_value(decisive.old, unit)}"
    )
    tolerance = f"the tolerance {format_value(decisive.allowed, unit)}"
    noise = f"the noise {format_value(decisive.noise, unit)} ({NOISE_K:g} standard errors)"
    amount = format_value(abs(decisive.worse_by), unit)
    if decisive.flagged:
        message = f"{head}: worse by {amount}, more than {tolerance} and {noise}"
    elif decisive.worse_by <= 0:
        message = f"{head}: {'no change' if decisive.worse_by == 0 else f'better by {amount}'}"
    elif decisive.worse_by <= decisive.allowed:
        message = f"{head}: worse by {amount}, within {tolerance}"
    else:
        message = f"{head}: worse by {amount}, past {tolerance} but within {noise}: not flagged"
    return Verdict(
        kind="regression",
        name=check.name,
        metric=metric.name,
        unit=unit,
        aggregate=check.aggregate,
        over=check.over,
        where=check.where,
        line=check.line,
        status="fail" if decisive.flagged else "pass",
        value=decisive.new,
        upper=upper,
        lower=lower,
        samples=decisive.samples,
        worst=worst,
        message=message,
        baseline=decisive.old,
        tolerance=decisive.allowed,
        noise=decisive.noise,
        link_gbps=link_gbps,
    )


def _limits(upper: float | None, lower: float | None, unit: str) -> str:
    if upper is not None and lower is not None:
        return f"[{format_value(lower, unit)}, {format_value(upper, unit)}]"
    if upper is not None:
        return f"max {format_value(upper, unit)}"
    return f"min {format_value(lower, unit)}"


def _list(items: tuple[object, ...] | list[object] | tuple[str, ...] | list[str] | tuple[int, ...]) -> str:
    return ", ".join(map(str, items))
