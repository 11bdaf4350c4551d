"""timeline.stats gives what the standard library's statistics gives, value, type and error."""

from __future__ import annotations

import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from timeline.stats import StatisticsError, median, mode

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
