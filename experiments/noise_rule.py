"""The noise rule of ``timeline check`` and ``timeline diff`` against the two it replaced, on real traces.

Run ``python -m experiments.noise_rule [TRACES]`` (default ``../shared/traces``); it prints the
tables ``docs/ci.md`` and ``docs/diff.md`` quote. Each series is one run's samples in time order: the
duration of every communication event (``collectives.dur_ns``) and the bus bandwidth of every
plausible logical collective (``busbw_gbps``), when the run has at least :data:`MIN_SERIES` of them.

- **A/A**: a run against itself, split in two: its even and odd samples (``interleaved``), or its
  first and second half (``halves``: a run that drifts differs from itself). No change is real: a
  rule that flags one is wrong.
- **A/B**: two runs of one job that differ (an A100 against a V100, a 10 Gb against a 100 Gb
  network): a rule that flags none of them sees nothing.

For each pair and each aggregate (``mean``, ``p50``, ``p90``, ``max``) a rule says whether the change
is beyond the noise: ``now`` is :func:`timeline.stats.noise` and :func:`timeline.stats.beyond_noise`
(``|Δ| > 3 × √(se_a² + se_b²)``); ``check, layout 1`` was ``|Δ| > 2 × max(se_a, se_b)`` (the same
standard errors); ``diff, layout 1`` was ``|Δ| > 3 × pooled MAD`` (every sample's absolute
deviation from its own run's median, the median of those of both runs).
"""

from __future__ import annotations

import math
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

from timeline.budgets.evaluation import statistic_of
from timeline.errors import TimelineError
from timeline.stats import beyond_noise, median, noise, standard_error

__all__ = ["AGGREGATES", "MIN_SERIES", "RULES", "aggregate", "flag_counts", "main", "series_of", "splits"]

MIN_SERIES = 20
"""The fewest samples of a series studied."""

AGGREGATES = ("mean", "p50", "p90", "max")

Rule = Callable[[Sequence[float], Sequence[float], str], bool]


def aggregate(values: Sequence[float], name: str) -> float:
    """Return an aggregate as budgets compute it (percentiles interpolated linearly)."""
    ordered = sorted(values)
    if name == "mean":
        return math.fsum(values) / len(values)
    if name == "max":
        return ordered[-1]
    rank = float(name[1:]) / 100 * (len(ordered) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _now(a: Sequence[float], b: Sequence[float], name: str) -> bool:
    spread = noise(a, b, statistic_of(name))
    return bool(beyond_noise(aggregate(b, name) - aggregate(a, name), spread))


def _check_layout_1(a: Sequence[float], b: Sequence[float], name: str) -> bool:
    statistic = statistic_of(name)
    errors = [standard_error(v, statistic) or 0.0 for v in (a, b)]
    return abs(aggregate(b, name) - aggregate(a, name)) > 2 * max(errors)


def _pooled_mad(a: Sequence[float], b: Sequence[float]) -> float:
    deviations = [abs(v - median(a)) for v in a] + [abs(v - median(b)) for v in b]
    return median(deviations)


def _diff_layout_1(a: Sequence[float], b: Sequence[float], name: str) -> bool:
    return abs(aggregate(b, name) - aggregate(a, name)) > 3 * _pooled_mad(a, b)


RULES: dict[str, Rule] = {
    "now: 3 × the change's standard error": _now,
    "check, layout 1: 2 × the larger standard error": _check_layout_1,
    "diff, layout 1: 3 × the pooled MAD": _diff_layout_1,
}
"""Each rule: whether the change of an aggregate between two series is beyond the noise."""


def splits(values: Sequence[float]) -> dict[str, tuple[list[float], list[float]]]:
    """Return a series split in two: ``interleaved`` (even, odd samples) and ``halves`` (first, second)."""
    half = len(values) // 2
    return {
        "interleaved": (list(values[0::2]), list(values[1::2])),
        "halves": (list(values[:half]), list(values[half:])),
    }


def series_of(path: Path) -> dict[str, list[float]]:
    """Return a run's series: event durations and logical collectives' busbw, in time order."""
    import polars as pl

    from timeline.budgets.runs import read_run
    from timeline.run import Inputs, RunOptions

    frames = read_run(Inputs(paths=[str(path)]), RunOptions(), match=True)
    out: dict[str, list[float]] = {}
    if frames.collectives is not None:
        durations = frames.collectives.sort("start_ns").get_column("dur_ns").drop_nulls()
        if durations.len() >= MIN_SERIES:
            out["dur_ns"] = [float(v) for v in durations.to_list()]
    logical = frames.logical_collectives
    if logical is not None:
        busbw = (
            logical.sort("first_start_ns")
            .filter(~pl.col("implausible").fill_null(False))
            .get_column("busbw_gbps")
            .drop_nulls()
        )
        if busbw.len() >= MIN_SERIES:
            out["busbw_gbps"] = [float(v) for v in busbw.to_list()]
    return out


def flag_counts(pairs: Sequence[tuple[str, list[float], list[float]]]) -> Counter[tuple[str, str, str]]:
    """Return how many pairs each rule flags: ``(rule, label, aggregate)`` → count, ``(…, "pairs")`` too."""
    counts: Counter[tuple[str, str, str]] = Counter()
    for label, a, b in pairs:
        for name in AGGREGATES:
            for rule, flags in RULES.items():
                counts[(rule, label, "pairs")] += 1
                counts[(rule, label, name)] += flags(a, b, name)
    return counts


def _a_a_pairs(paths: Sequence[Path]) -> tuple[list[tuple[str, list[float], list[float]]], int]:
    pairs = []
    studied = 0
    for path in paths:
        try:
            series = series_of(path)
        except TimelineError:
            continue
        for values in series.values():
            studied += 1
            pairs += [(split, a, b) for split, (a, b) in splits(values).items()]
    return pairs, studied


_A_B = (
    ("kineto/hta_trace_diff/control.json.gz", "kineto/hta_trace_diff/test.json.gz"),
    (
        "horovod/dexhunter_allreduce-experiments/horovod-results__32gpu__logs__10g-nccl-slow.json",
        "horovod/dexhunter_allreduce-experiments/horovod-results__32gpu__logs__100g__nccl-slow.json",
    ),
    (
        "horovod/dexhunter_allreduce-experiments/horovod-results__32gpu__logs__10g-mpi-only.json",
        "horovod/dexhunter_allreduce-experiments/horovod-results__32gpu__logs__100g-mpi-fast.json",
    ),
    (
        "horovod/dexhunter_allreduce-experiments/horovod-results__32gpu__10g-32-h-2.json",
        "horovod/dexhunter_allreduce-experiments/horovod-results__32gpu__100g-32-h-4.json",
    ),
)


def _a_b_pairs(traces: Path) -> list[tuple[str, list[float], list[float]]]:
    pairs = []
    for left, right in _A_B:
        a, b = series_of(traces / left), series_of(traces / right)
        pairs += [("A/B", a[name], b[name]) for name in sorted(set(a) & set(b))]
    return pairs


def _table(counts: Counter[tuple[str, str, str]], labels: Sequence[str]) -> list[str]:
    head = "| rule | " + " | ".join(f"{label}: flagged / pairs" for label in labels) + " |"
    out = [head, "|---|" + "--:|" * len(labels)]
    for rule in RULES:
        cells = []
        for label in labels:
            total = sum(counts[(rule, label, name)] for name in AGGREGATES)
            pairs = counts[(rule, label, "pairs")]
            by = ", ".join(f"{name} {counts[(rule, label, name)]}" for name in AGGREGATES)
            cells.append(f"{total} / {pairs} ({total / pairs:.1%}; {by})")
        out.append(f"| {rule} | " + " | ".join(cells) + " |")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Print the A/A and A/B tables of the rules on the traces (default ``../shared/traces``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    traces = Path(args[0] if args else "../shared/traces")
    paths = [*sorted((traces / "kineto").glob("*/*.json.gz")), traces / "kineto" / "param_dlrm_8rank"]
    paths += sorted((traces / "horovod").rglob("*.json"))
    a_a, studied = _a_a_pairs(paths)
    counts = flag_counts(a_a) + flag_counts(_a_b_pairs(traces))
    print(f"{studied} series of at least {MIN_SERIES} samples in {traces}")
    print("\n".join(_table(counts, ("interleaved", "halves", "A/B"))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
