"""Two runs compared (``timeline diff BASE NEW``): per iteration, per rank, per collective.

Takes the :class:`~timeline.budgets.frames.MetricFrames` of two runs (traces analysed, or summary
JSON files written by ``timeline analyze --json``: :func:`timeline.budgets.runs.read_run`) and
gives plain data in a stable, versioned layout (``docs/diff.md``): each figure of both runs, the
change (absolute and relative) and whether the change is beyond the run-to-run noise.

The noise of a figure is the pooled median absolute deviation of its per-iteration values: each
run's values are taken from that run's own median, and the median of all those deviations, of both
runs together, is the noise. A change is significant when ``|new - base| > k × noise`` (``k``:
:data:`DEFAULT_NOISE_K` unless given), and unknown when either run has fewer than
:data:`MIN_VALUES` values. Iterations are paired by position: each run's iteration numbers sorted
ascending, the first of one with the first of the other (two runs number their steps differently).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import polars as pl

from timeline.budgets.frames import MetricFrames, frames_from_overlap, read_summary
from timeline.budgets.runs import summary_path
from timeline.paths import path_text

if TYPE_CHECKING:
    from timeline.execution.session import Inputs

__all__ = [
    "DEFAULT_NOISE_K",
    "DIFF_METRICS",
    "DIFF_VERSION",
    "MIN_VALUES",
    "build_diff",
    "change",
    "noise",
    "read_diff_run",
]

DIFF_VERSION = 1
"""The layout version of :func:`build_diff`'s result (its ``version`` key)."""

DEFAULT_NOISE_K = 3.0
"""How many times the noise a change must exceed to be significant (``--noise-k``)."""

MIN_VALUES = 3
"""The fewest values a run must have for its noise to be known: below it, significance is unknown."""

TIME_METRICS = ("step_ns", "compute_ns", "exposed_comm_ns", "hidden_comm_ns")
"""The per-iteration times compared, columns of the rank × iteration rows."""

DIFF_METRICS = (*TIME_METRICS, "busbw_gbps")
"""Every figure compared per iteration (``busbw_gbps``: the matched collectives' bus bandwidth)."""


def read_diff_run(
    inputs: Inputs,
    *,
    progress: Callable[[str, int, int], None] | None = None,
    warn: Callable[[Sequence[str]], None] | None = None,
) -> MetricFrames:
    """Return the frames of one run of a diff: a summary JSON read back, or its traces analysed.

    A run's collectives are matched across its ranks with the job's world size of its traces
    (:func:`timeline.results.collectives.world_size_of`), as ``timeline collectives`` matches them:
    a trace of some of the job's ranks keeps the bus factor of the whole group. ``warn``: called with
    the load warnings and the matching's.

    Raises
    ------
    TimelineError
        Bad input.
    """
    from timeline.analysis.collectives import compute_iteration_utilisation, match_collectives
    from timeline.execution.session import analyze_inputs
    from timeline.results.collectives import clocks_of, world_size_of

    summary = summary_path(inputs)
    if summary is not None:
        return read_summary(summary)
    analysed = analyze_inputs(inputs, communication=True, progress=progress, warn=warn)
    overlap, trace = analysed.overlap, analysed.trace
    match = match_collectives(
        trace.events,
        windows=overlap.windows,
        world_size=world_size_of(trace),
        groups=trace.groups,
        clocks=clocks_of(trace, offsets=analysed.offsets),
    )
    utilisation = compute_iteration_utilisation(
        match.collectives, windows=overlap.windows, iteration_overlap=overlap.iterations
    )
    if warn is not None:
        warn(match.warnings)
    frames = frames_from_overlap(overlap, label=" ".join(map(path_text, inputs.paths)), files=trace.files)
    return replace(
        frames,
        logical_collectives=match.collectives,
        collective_ranks=match.ranks,
        iteration_utilisation=utilisation,
        warnings=match.warnings,
    )


def noise(base: Sequence[float], new: Sequence[float]) -> float | None:
    """Return the pooled median absolute deviation of two runs' values, or None with too few values.

    Each value's deviation is taken from its own run's median; the noise is the median of the
    deviations of both runs together. None when either run has fewer than :data:`MIN_VALUES`.
    """
    if len(base) < MIN_VALUES or len(new) < MIN_VALUES:
        return None
    deviations = [abs(v - statistics.median(base)) for v in base]
    deviations += [abs(v - statistics.median(new)) for v in new]
    return float(statistics.median(deviations))


def change(
    base: float | None, new: float | None, *, spread: float | None, k: float
) -> dict[str, float | bool | None]:
    """Return one figure of both runs, its change and whether the change is beyond ``k`` × ``spread``.

    Keys: ``base``, ``new``, ``delta`` (new - base), ``relative`` (delta / base; None when base is 0),
    ``noise`` (``spread``), ``significant`` (``|delta| > k × noise``; None when a value or the noise
    is unknown).
    """
    delta = None if base is None or new is None else new - base
    relative = None if delta is None or not base else delta / base
    significant = None if delta is None or spread is None else abs(delta) > k * spread
    return {
        "base": base,
        "new": new,
        "delta": delta,
        "relative": relative,
        "noise": spread,
        "significant": significant,
    }


def _median(values: Sequence[float]) -> float | None:
    return float(statistics.median(values)) if values else None


def _known(values: Sequence[float | None]) -> list[float]:
    return [float(v) for v in values if v is not None]


def _per_iteration(frames: MetricFrames) -> pl.DataFrame:
    """Return one row per iteration: the mean over ranks of each time, and the busbw; sorted by iteration."""
    known = [m for m in TIME_METRICS if m in frames.iterations.columns]
    rows = frames.iterations.group_by("iteration").agg(pl.col(m).cast(pl.Float64).mean() for m in known)
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


def _iteration_rows(
    base: pl.DataFrame, new: pl.DataFrame, spreads: dict[str, float | None], k: float
) -> list[dict[str, Any]]:
    """Return the iterations paired by position, each figure's change against the whole-run noise."""
    out = []
    for position in range(max(base.height, new.height)):
        left = base.row(position, named=True) if position < base.height else None
        right = new.row(position, named=True) if position < new.height else None
        out.append(
            {
                "position": position,
                "base_iteration": None if left is None else left["iteration"],
                "new_iteration": None if right is None else right["iteration"],
                "metrics": {
                    m: change(
                        None if left is None else left[m],
                        None if right is None else right[m],
                        spread=spreads[m],
                        k=k,
                    )
                    for m in DIFF_METRICS
                },
            }
        )
    return out


def _summary(base: pl.DataFrame, new: pl.DataFrame, metrics: Sequence[str], k: float) -> dict[str, Any]:
    """Return, per metric, the median over iterations of both runs and its change against their noise."""
    out = {}
    for metric in metrics:
        left = _known(base.get_column(metric).to_list()) if metric in base.columns else []
        right = _known(new.get_column(metric).to_list()) if metric in new.columns else []
        out[metric] = change(_median(left), _median(right), spread=noise(left, right), k=k)
    return out


def _rank_rows(base: MetricFrames, new: MetricFrames, k: float) -> list[dict[str, Any]]:
    """Return, per rank (matched by number), the median per-iteration times and their change."""
    ranks = sorted(
        set(base.iterations.get_column("rank").drop_nulls().to_list())
        | set(new.iterations.get_column("rank").drop_nulls().to_list())
    )
    out = []
    for rank in ranks:
        left = base.iterations.filter(pl.col("rank") == rank)
        right = new.iterations.filter(pl.col("rank") == rank)
        out.append(
            {
                "rank": rank,
                "base_iterations": left.height,
                "new_iterations": right.height,
                "metrics": _summary(left, right, TIME_METRICS, k),
            }
        )
    return out


def _busbw_by_kind(frames: MetricFrames) -> dict[str, tuple[int, list[float]]]:
    """Return, by kind, how many collectives were matched and the busbw of each plausible one."""
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


def _collective_rows(base: MetricFrames, new: MetricFrames, k: float) -> list[dict[str, Any]] | None:
    """Return, per kind of collective, how many were matched and the median busbw of each run."""
    if not base.matched or not new.matched:
        return None
    left, right = _busbw_by_kind(base), _busbw_by_kind(new)
    out = []
    for kind in sorted(set(left) | set(right)):
        (a_count, a), (b_count, b) = left.get(kind, (0, [])), right.get(kind, (0, []))
        out.append(
            {
                "collective": kind,
                "base_collectives": a_count,
                "new_collectives": b_count,
                "busbw_gbps": change(_median(a), _median(b), spread=noise(a, b), k=k),
            }
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


def build_diff(base: MetricFrames, new: MetricFrames, *, k: float = DEFAULT_NOISE_K) -> dict[str, Any]:
    """Return two runs compared, as plain data (``timeline diff --json``).

    Keys: ``version`` (:data:`DIFF_VERSION`), ``base`` and ``new`` (the inputs), ``noise_k``,
    ``min_values``, ``warnings``, ``summary`` (per metric: the median over iterations of both runs),
    ``iterations`` (paired by position), ``ranks`` (matched by rank number), ``collectives`` (per
    kind; None when a run is a summary JSON, which keeps no collectives). Every figure is a
    :func:`change`.
    """
    left, right = _per_iteration(base), _per_iteration(new)
    summary = _summary(left, right, DIFF_METRICS, k)
    spreads = {
        metric: noise(_known(left.get_column(metric).to_list()), _known(right.get_column(metric).to_list()))
        for metric in DIFF_METRICS
    }
    iterations = _iteration_rows(left, right, spreads, k)
    return {
        "version": DIFF_VERSION,
        "base": base.label,
        "new": new.label,
        "noise_k": k,
        "min_values": MIN_VALUES,
        "warnings": _unmatched_warnings(base, new, len(iterations)),
        "summary": summary,
        "iterations": iterations,
        "ranks": _rank_rows(base, new, k),
        "collectives": _collective_rows(base, new, k),
    }
