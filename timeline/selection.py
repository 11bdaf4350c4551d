"""The ranks and iterations a run restricts itself to (``--ranks``, ``--iterations``).

Takes the options' text (``0-3,7``) and gives a :class:`Selection`; takes a rank's (or a run's)
events and overlap analysis and gives those of the selected ranks and iterations, the same way in
memory and in each rank-by-rank task, so that every door gives the same answer:

- ``--ranks``: only the events of those ranks are kept;
- ``--iterations``: each rank's iteration windows are found on all its events (as without the
  option); only the selected windows are kept, and the events that overlap one of them (whole, not
  cut at the window's edges). The per-iteration figures are those the run without the option gives;
  a rank's figures over its whole trace become sums over its selected iterations (its ``step_ns``
  the sum of their lengths, its ratios of those sums). A rank with no iteration (one whole-trace
  window) has none to select.

Parsing imports no polars (a command reads its options first); the restrictions are
:mod:`timeline.analysis.selection`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from timeline.errors import UsageError

if TYPE_CHECKING:
    pass

__all__ = ["SELECTION_MAX", "Selection", "describe_numbers", "parse_numbers"]

SELECTION_MAX = 2**31 - 1
"""The largest rank or iteration a selection names."""
_SPAN_MAX = 1_000_000
"""The most numbers one range of a selection spans (``0-999999``)."""


@dataclass(frozen=True)
class Selection:
    """The ranks and the iterations a run keeps; None keeps them all.

    Attributes
    ----------
    ranks
        Rank numbers, sorted, without repeats.
    iterations
        Iteration numbers (``ProfilerStep#N``), sorted, without repeats.
    """

    ranks: tuple[int, ...] | None = None
    iterations: tuple[int, ...] | None = None

    @property
    def everything(self) -> bool:
        """Whether nothing is left out."""
        return self.ranks is None and self.iterations is None

    def describe(self) -> str:
        """Say what is kept: ``ranks 0-3, 7 and iterations 2-4``."""
        parts = []
        if self.ranks is not None:
            parts.append(f"rank{'s' if len(self.ranks) > 1 else ''} {describe_numbers(self.ranks)}")
        if self.iterations is not None:
            many = len(self.iterations) > 1
            parts.append(f"iteration{'s' if many else ''} {describe_numbers(self.iterations)}")
        return " and ".join(parts) or "every rank and iteration"


def parse_numbers(text: str | None, option: str) -> tuple[int, ...] | None:
    """Return the numbers a selection option names: a comma-separated list of numbers and ranges.

    Examples
    --------
    >>> parse_numbers("0-3,7", "--ranks")
    (0, 1, 2, 3, 7)
    >>> parse_numbers(None, "--ranks") is None
    True

    Raises
    ------
    UsageError
        Not a list of non-negative numbers and ``LOW-HIGH`` ranges (the message names the option
        and a value that works).
    """
    if text is None:
        return None
    numbers: set[int] = set()
    for part in text.split(","):
        item = part.strip()
        low, dash, high = item.partition("-")
        if not (low.strip().isdigit() and (not dash or high.strip().isdigit())):
            msg = (
                f"{option} {text!r}: {item!r} is not a number or a range; give numbers and ranges "
                f"separated by commas, e.g. {option} 0-3,7"
            )
            raise UsageError(msg)
        first, last = int(low), int(high) if dash else int(low)
        if last < first:
            raise UsageError(f"{option} {text!r}: the range {item} runs backwards; write it {last}-{first}")
        if last > SELECTION_MAX or last - first >= _SPAN_MAX:
            msg = (
                f"{option} {text!r}: {item} is out of range (at most {_SPAN_MAX:,} numbers, each up to "
                f"{SELECTION_MAX})"
            )
            raise UsageError(msg)
        numbers.update(range(first, last + 1))
    return tuple(sorted(numbers))


def describe_numbers(numbers: Sequence[int]) -> str:
    """Return numbers as ``0-3, 7`` (runs of consecutive numbers as ranges).

    Examples
    --------
    >>> describe_numbers([0, 1, 2, 3, 7])
    '0-3, 7'
    """
    values = sorted(set(numbers))
    if not values:
        return "none"
    parts: list[str] = []
    start = prev = values[0]
    for value in [*values[1:], None]:
        if value is not None and value == prev + 1:
            prev = value
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if value is not None:
            start = prev = value
    return ", ".join(parts)


# ---------------------------------------------------------------------------------------------
# The restriction (imports polars)
