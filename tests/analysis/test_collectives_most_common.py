"""A logical collective's kind and iteration: the most common of its ranks', the least of those tied."""

from __future__ import annotations

from typing import Any

from tests.builders import gpu, make_events, step
from timeline.analysis.collectives import match_collectives


def comm(rank: int, start: int, end: int, collective: str = "all_reduce", **extra: Any) -> dict[str, Any]:
    return gpu("communication", start, end, rank=rank, stream=9, collective=collective, **extra)


def steps(ranks: int) -> list[dict[str, Any]]:
    """Iteration 1 over [0, 1 ms), iteration 2 over [1 ms, 2 ms) on every rank."""
    return [step(n, (n - 1) * 1_000_000, n * 1_000_000, rank=rank) for rank in range(ranks) for n in (1, 2)]


def test_iteration_most_ranks_started_in() -> None:
    # ranks 0 and 1 start the collective in iteration 2, rank 2 (skewed) at the end of iteration 1
    rows = [
        *steps(3),
        comm(0, 1_100_000, 1_200_000),
        comm(1, 1_150_000, 1_200_000),
        comm(2, 900_000, 1_200_000),
    ]
    frame = match_collectives(make_events(rows)).collectives
    assert frame["iteration"].to_list() == [2]
    assert frame["collective"].to_list() == ["all_reduce"]


def test_iteration_tied_is_the_least() -> None:
    rows = [*steps(2), comm(0, 1_100_000, 1_200_000), comm(1, 900_000, 1_200_000)]
    assert match_collectives(make_events(rows)).collectives["iteration"].to_list() == [1]


def test_kind_most_ranks_ran_and_iterations_that_agree() -> None:
    rows = [
        *steps(3),
        comm(0, 100_000, 200_000, "broadcast"),
        comm(1, 100_000, 200_000),
        comm(2, 100_000, 200_000),
        comm(0, 1_100_000, 1_200_000),
        comm(1, 1_100_000, 1_200_000),
        comm(2, 1_100_000, 1_200_000),
    ]
    frame = match_collectives(make_events(rows)).collectives
    assert frame["collective"].to_list() == ["all_reduce", "all_reduce"]
    assert frame["consistent"].to_list() == [False, True]
    assert frame["iteration"].to_list() == [1, 2]
