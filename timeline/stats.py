"""The median and the mode as :mod:`statistics` computes them, without importing it.

:mod:`statistics` imports :mod:`fractions` and :mod:`decimal` (about 5 ms of every ``timeline
analyze`` with findings); the diagnosis and the what-if replay need only these two. Same results as
:func:`statistics.median` and :func:`statistics.mode`, errors included (``tests/test_stats.py``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable
from typing import TypeVar

__all__ = ["median", "mode"]

_H = TypeVar("_H", bound=Hashable)


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
