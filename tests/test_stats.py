"""timeline.stats gives what the standard library's statistics gives, value, type and error; polars'
median is the same; the noise rule computed independently."""

from __future__ import annotations

import math
import random
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from timeline.stats import (
    MEDIAN_SE,
    MIN_VALUES,
    NOISE_K,
    StatisticsError,
    beyond_noise,
    median,
    mode,
    noise,
    standard_deviation,
    standard_error,
)

NUMBERS = st.lists(st.integers(-(10**18), 10**18) | st.floats(allow_nan=False, allow_infinity=False))


@given(NUMBERS.filter(bool))
def test_median_is_the_standard_librarys(values: list[float]) -> None:
    ours, theirs = median(iter(values)), statistics.median(values)
    assert ours == theirs
    assert type(ours) is type(theirs)


@given(st.lists(st.sampled_from(["a", "b", "c", None, 1, 2]), min_size=1))
def test_mode_is_the_standard_librarys_first_seen_among_ties(values: list[object]) -> None:
    assert mode(iter(values)) == statistics.mode(values)


def test_both_refuse_empty_data_with_a_value_error() -> None:
    for function in (median, mode):
        with pytest.raises(StatisticsError) as caught:
            function([])
        assert isinstance(caught.value, ValueError)


# --- one median: polars' is the same definition ------------------------------------------------------

FINITE = st.lists(st.floats(-1e12, 1e12, allow_nan=False, allow_infinity=False), min_size=1, max_size=40)


@settings(deadline=None)  # the first example imports polars
@given(FINITE)
def test_polars_median_and_linear_p50_are_this_median(values: list[float]) -> None:
    import polars as pl

    frame = pl.DataFrame({"v": values}, schema={"v": pl.Float64})
    ours = median(values)
    by_median = frame.select(pl.col("v").median()).item()
    by_quantile = frame.select(pl.col("v").quantile(0.5, interpolation="linear")).item()
    assert by_median == pytest.approx(ours, rel=1e-12, abs=1e-9)
    assert by_quantile == pytest.approx(ours, rel=1e-12, abs=1e-9)


# --- the noise rule: the change's standard error -------------------------------------------------------


@given(st.lists(st.floats(-1e9, 1e9, allow_nan=False, allow_infinity=False), min_size=2, max_size=40))
def test_standard_deviation_is_the_sample_one(values: list[float]) -> None:
    assert standard_deviation(values) == pytest.approx(statistics.stdev(values), rel=1e-9, abs=1e-6)


def test_standard_errors_by_statistic() -> None:
    values = [1.0, 2.0, 3.0, 4.0]
    s = statistics.stdev(values)  # 1.2910
    assert standard_error(values, "mean") == pytest.approx(s / 2)
    assert standard_error(values, "median") == pytest.approx(math.sqrt(math.pi / 2) * s / 2)
    assert round(MEDIAN_SE, 4) == 1.2533
    assert standard_error(values, "value") == pytest.approx(s)
    assert standard_error([1.0, 2.0], "value") is None  # fewer than MIN_VALUES
    assert MIN_VALUES == 3


def test_noise_is_the_standard_error_of_the_change() -> None:
    base, new = [10.0, 12.0, 14.0], [20.0, 20.0, 26.0, 22.0]
    expected = math.sqrt(statistics.stdev(base) ** 2 + statistics.stdev(new) ** 2)
    assert noise(base, new, "value") == pytest.approx(expected)
    median_se = math.sqrt(math.pi / 2)
    expected_median = math.sqrt(
        (median_se * statistics.stdev(base) / math.sqrt(3)) ** 2
        + (median_se * statistics.stdev(new) / math.sqrt(4)) ** 2
    )
    assert noise(base, new, "median") == pytest.approx(expected_median)
    assert noise(base, [1.0, 2.0], "mean") is None
    assert noise([5.0] * 3, [7.0] * 5, "mean") == 0.0


def test_beyond_noise_is_strictly_beyond_k_times_the_noise() -> None:
    assert NOISE_K == 3.0
    assert beyond_noise(30.0, 10.0) is False
    assert beyond_noise(-30.5, 10.0) is True
    assert beyond_noise(0.1, 0.0) is True
    assert beyond_noise(0.0, 0.0) is False
    assert beyond_noise(30.0, 10.0, k=2.0) is True
    assert beyond_noise(None, 1.0) is None
    assert beyond_noise(1.0, None) is None


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_two_samples_of_one_normal_distribution_are_rarely_beyond_the_noise(seed: int) -> None:
    # under the rule, a change of the mean of two samples of one distribution is beyond 3 standard errors
    # about 0.27 % of the time; among 400 such pairs, more than 12 (3 %) would say the rule is too loose
    rng = random.Random(seed)
    flagged = 0
    for _ in range(400):
        a = [rng.gauss(100.0, 15.0) for _ in range(30)]
        b = [rng.gauss(100.0, 15.0) for _ in range(30)]
        flagged += bool(beyond_noise(statistics.fmean(b) - statistics.fmean(a), noise(a, b, "mean")))
    assert flagged <= 12
