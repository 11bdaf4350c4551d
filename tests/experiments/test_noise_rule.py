"""``experiments/noise_rule.py``: the study docs/ci.md and docs/diff.md quote, its parts checked by hand."""

from __future__ import annotations

import math
import statistics

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.noise_rule import AGGREGATES, RULES, aggregate, flag_counts, main, series_of, splits
from tests.builders import TRACES


@settings(deadline=None)
@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=30))
def test_aggregates_are_the_budgets_linear_percentiles(values: list[float]) -> None:
    series = pl.Series(values, dtype=pl.Float64)
    assert aggregate(values, "mean") == pytest.approx(statistics.fmean(values), abs=1e-6)
    assert aggregate(values, "max") == max(values)
    assert aggregate(values, "p50") == pytest.approx(statistics.median(values), abs=1e-6)
    assert aggregate(values, "p90") == pytest.approx(series.quantile(0.9, interpolation="linear"), abs=1e-6)


def test_splits() -> None:
    assert splits([1.0, 2.0, 3.0, 4.0, 5.0]) == {
        "interleaved": ([1.0, 3.0, 5.0], [2.0, 4.0]),
        "halves": ([1.0, 2.0], [3.0, 4.0, 5.0]),
    }


def test_each_rule_by_hand() -> None:
    now, check_1, diff_1 = RULES.values()
    # a: 1 2 3 4 5 6 (mean 3.5, s 1.871), b: 5 6 7 8 9 10 (mean 7.5, s 1.871); Δ mean = 4
    a, b = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [5.0, 6.0, 7.0, 8.0, 9.0, 10.0]
    se = statistics.stdev(a) / math.sqrt(6)  # 0.764
    assert 3 * math.sqrt(2) * se < 4  # now: beyond 3 × 1.080
    assert now(a, b, "mean") is True
    assert check_1(a, b, "mean") is True  # beyond 2 × 0.764
    # pooled MAD: deviations 2.5 1.5 0.5 0.5 1.5 2.5 in each run → 1.5; 3 × 1.5 = 4.5 > 4
    assert diff_1(a, b, "mean") is False
    # a run whose samples are mostly equal: the MAD is 0, any change is beyond the old diff rule
    same, other = [5.0] * 5 + [9.0], [5.0] * 5 + [5.5]
    assert diff_1(same, other, "mean") is True
    assert now(same, other, "mean") is False


def test_flag_counts_count_pairs_and_flags() -> None:
    a, b = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [5.0, 6.0, 7.0, 8.0, 9.0, 10.0]
    counts = flag_counts([("A/B", a, b), ("A/B", a, a)])
    for rule, flags in RULES.items():
        assert counts[(rule, "A/B", "pairs")] == 2 * len(AGGREGATES)
        for name in AGGREGATES:
            assert counts[(rule, "A/B", name)] == flags(a, b, name) + flags(a, a, name)


def test_series_of_a_real_trace() -> None:
    series = series_of(TRACES / "kineto" / "hta_nccl_parser_config")
    assert sorted(series) == ["busbw_gbps", "dur_ns"]
    assert len(series["dur_ns"]) == len(series["busbw_gbps"]) == 21


def test_main_prints_one_row_per_rule_on_the_public_traces(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(TRACES)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"45 series of at least 20 samples in {TRACES}"
    assert (
        lines[1] == "| rule | interleaved: flagged / pairs | halves: flagged / pairs | A/B: flagged / pairs |"
    )
    assert [line.split(" | ")[0] for line in lines[3:]] == [f"| {rule}" for rule in RULES]
    assert all("/ 180 (" in line and "/ 20 (" in line for line in lines[3:])
