"""The median, the mode and the noise rule: plain Python, without importing :mod:`statistics`.

:mod:`statistics` imports :mod:`fractions` and :mod:`decimal` (about 5 ms of every ``timeline
analyze`` with findings). :func:`median` and :func:`mode` give what :func:`statistics.median` and
:func:`statistics.mode` give, errors included (``tests/test_stats.py``); they are timeline's one
median: polars' ``Expr.median()`` and ``Expr.quantile(0.5, interpolation="linear")``, which the
frames use, are the same definition (the middle value, or the mean of the two middle ones), and a
test checks that they agree.

The **noise rule** of ``timeline check`` (regression checks) and ``timeline diff`` (beyond the noise)
is :func:`noise` and :func:`beyond_noise`: the noise of a change between two runs is the standard
error of that change, ``√(se(base)² + se(new)²)``, each run's standard error computed from its own
samples (:func:`standard_error`); a change is beyond the noise when ``|change| > k × noise`` with
``k`` = :data:`NOISE_K` unless given; the noise is unknown (None) when either run has fewer than
:data:`MIN_VALUES` samples. ``docs/ci.md`` and ``docs/diff.md`` say why, with the numbers.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Iterable, Sequence
from typing import Literal, TypeVar

__all__ = [
    "MEDIAN_SE",
    "MIN_VALUES",
    "NOISE_K",
    "Statistic",
    "StatisticsError",
    "beyond_noise",
    "median",
    "mode",
    "noise",
    "standard_deviation",
    "standard_error",
]

_H = TypeVar("_H", bound=Hashable)

NOISE_K = 3.0
"""How many times its noise a change must exceed to be beyond the noise (``check``, ``diff --noise-k``)."""

MIN_VALUES = 3
"""The fewest samples a run must have for its noise to be known."""

MEDIAN_SE = math.sqrt(math.pi / 2)
"""The standard error of a median is √(π/2) ≈ 1.2533 times that of a mean (normal samples)."""

Statistic = Literal["mean", "median", "value"]
"""What is compared: a mean of the samples, their median, or one value (one sample, a maximum, a
minimum, a percentile other than the median), which moves by about one standard deviation between
runs."""


class StatisticsError(ValueError):
    """No data: what :class:`statistics.StatisticsError` says (a :class:`ValueError` too)."""


def median(values: Iterable[float]) -> float:
    """Return the middle value, or the mean of the two middle ones (:func:`statistics.median`).

    >>> median([3, 1, 2]), median([4, 1, 2, 3])
    (2, 2.5)

    Raises
    ------
    StatisticsError
        No values.
    """
    data = sorted(values)
    n = len(data)
    if n == 0:
        raise StatisticsError("no median for empty data")
    if n % 2 == 1:
        return data[n // 2]
    return (data[n // 2 - 1] + data[n // 2]) / 2


def mode(values: Iterable[_H]) -> _H:
    """Return the most common value, the first seen of those tied (:func:`statistics.mode`).

    >>> mode(["b", "a", "a", "b"])
    'b'

    Raises
    ------
    StatisticsError
        No values.
    """
    pairs = Counter(values).most_common(1)
    if not pairs:
        raise StatisticsError("no mode for empty data")
    return pairs[0][0]


def standard_deviation(values: Sequence[float]) -> float:
    """Return the sample standard deviation (``n - 1`` in the denominator); 0 for fewer than 2 values.

    >>> standard_deviation([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0])
    2.138089935299395
    """
    n = len(values)
    if n < 2:
        return 0.0
    mean = math.fsum(values) / n
    return math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))


def standard_error(values: Sequence[float], statistic: Statistic) -> float | None:
    """Return the standard error of a statistic of one run's samples; None below :data:`MIN_VALUES`.

    With ``s`` the samples' standard deviation and ``n`` their number: ``s / √n`` for a mean,
    ``1.2533 × s / √n`` for a median, ``s`` for one value.

    >>> standard_error([1.0, 2.0, 3.0, 4.0], "mean")
    0.6454972243679028
    >>> standard_error([1.0, 2.0], "value") is None
    True
    """
    n = len(values)
    if n < MIN_VALUES:
        return None
    spread = standard_deviation(values)
    if statistic == "mean":
        return spread / math.sqrt(n)
    if statistic == "median":
        return MEDIAN_SE * spread / math.sqrt(n)
    return spread


def noise(base: Sequence[float], new: Sequence[float], statistic: Statistic) -> float | None:
    """Return the noise of the change of a statistic between two runs: the standard error of the change.

    ``√(se(base)² + se(new)²)`` (:func:`standard_error`); None when either run has fewer than
    :data:`MIN_VALUES` samples.

    >>> noise([1.0, 2.0, 3.0], [2.0, 4.0, 6.0], "value")
    2.23606797749979
    """
    left, right = standard_error(base, statistic), standard_error(new, statistic)
    if left is None or right is None:
        return None
    return math.hypot(left, right)


def beyond_noise(change: float | None, spread: float | None, *, k: float = NOISE_K) -> bool | None:
    """Return whether a change is beyond ``k`` times its noise (strictly); None when either is unknown.

    >>> beyond_noise(3.5, 1.0), beyond_noise(-3.0, 1.0), beyond_noise(1.0, None)
    (True, False, None)
    """
    if change is None or spread is None:
        return None
    return abs(change) > k * spread
