"""Stragglers: who everyone waits for, per iteration and over the trace; slow rank vs slow link."""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest

from tests.builders import TRACES, gpu, make_events, step
from timeline import load
from timeline.analysis.collectives import match_collectives
from timeline.analysis.overlap import compute_overlap
from timeline.analysis.schemas import STRAGGLER_ITERATIONS_SCHEMA, STRAGGLER_RANKS_SCHEMA
from timeline.analysis.stragglers import find_stragglers

PARAM = TRACES / "kineto" / "param_dlrm_8rank"


def comm(rank: int, start: int, end: int, collective: str = "all_reduce", **extra: Any) -> dict[str, Any]:
    return gpu(
        "communication", start, end, rank=rank, stream=9, collective=collective, in_bytes=1_000, **extra
    )


def collective(at: int, arrivals: list[int], transfer: int) -> list[dict[str, Any]]:
    """One all-reduce: rank r starts at ``at + arrivals[r]``; all end ``transfer`` after the last arrival."""
    end = at + max(arrivals) + transfer
    return [comm(r, at + a, end) for r, a in enumerate(arrivals)]


def stragglers_of(rows: list[dict[str, Any]]) -> Any:
    events = make_events(rows)
    overlap = compute_overlap(events)
    return find_stragglers(
        match_collectives(events, windows=overlap.windows), iteration_overlap=overlap.iterations
    )


def test_one_late_rank_is_a_slow_rank() -> None:
    steps = [step(1, 0, 10_000, rank=r) for r in range(3)]
    computes = [gpu("compute", 0, 1_000 + 2_000 * (r == 2), rank=r) for r in range(3)]
    rows = steps + computes + collective(1_000, [0, 100, 2_000], 200) + collective(5_000, [0, 0, 1_000], 200)
    result = stragglers_of(rows)
    assert result.iterations.schema == STRAGGLER_ITERATIONS_SCHEMA
    row = result.iterations.row(0, named=True)
    assert row["iteration"] == 1
    assert row["straggler_rank"] == 2
    assert row["straggler_times_last"] == 2
    # Ranks 0 and 1 waited 2,000 + 1,900 in the first, 1,000 + 1,000 in the second.
    assert row["straggler_caused_wait_ns"] == 5_900
    assert row["caused_wait_ns"] == 5_900
    assert row["straggler_share_ratio"] == 1.0
    assert row["transfer_ns"] == 400
    assert row["mean_wait_ns"] == round(5_900 / 3)
    assert row["verdict"] == "slow_rank"
    # The straggler computed longer than the median rank: late because compute-bound.
    assert row["straggler_compute_ns"] == 3_000
    assert row["median_compute_ns"] == 1_000


def test_long_transfers_with_little_wait_are_a_slow_link() -> None:
    rows = collective(0, [0, 10, 20], 50_000) + collective(100_000, [30, 0, 10], 50_000)
    row = stragglers_of(rows).iterations.row(0, named=True)
    assert row["iteration"] is None  # no ProfilerStep: outside every window
    assert row["verdict"] == "slow_link"
    assert row["wait_ratio"] < 0.01


def test_ranks_late_by_turns_are_imbalance() -> None:
    rows = (
        collective(0, [1_000, 0, 0, 0], 10)
        + collective(10_000, [0, 1_000, 0, 0], 10)
        + collective(20_000, [0, 0, 1_000, 0], 10)
        + collective(30_000, [0, 0, 0, 1_000], 10)
    )
    result = stragglers_of(rows)
    row = result.iterations.row(0, named=True)
    assert row["verdict"] == "imbalance"
    assert row["straggler_share_ratio"] == pytest.approx(0.25)
    assert result.ranks["times_last"].to_list() == [1, 1, 1, 1]


def test_ranking_over_the_trace() -> None:
    rows = (
        collective(0, [0, 500, 100], 10)
        + collective(1_000, [0, 300, 0], 10)
        + collective(2_000, [0, 0, 50], 10)
    )
    ranks = stragglers_of(rows).ranks
    assert ranks.schema == STRAGGLER_RANKS_SCHEMA
    assert ranks["position"].to_list() == [1, 2, 3]
    assert ranks["rank"].to_list() == [1, 2, 0]
    assert ranks["times_last"].to_list() == [2, 1, 0]
    assert ranks["caused_wait_ns"].to_list() == [500 + 400 + 300 + 300, 100, 0]
    assert ranks["caused_wait_ratio"].sum() == pytest.approx(1.0)


def test_non_synchronising_collectives_do_not_count() -> None:
    rows = [comm(0, 0, 100, "broadcast"), comm(1, 50, 100, "broadcast")]
    result = stragglers_of(rows)
    assert result.iterations.is_empty()
    assert result.ranks.is_empty()


def test_param_rank_7_is_the_straggler() -> None:
    events = load(PARAM, workers=1).events
    overlap = compute_overlap(events)
    result = find_stragglers(
        match_collectives(events, windows=overlap.windows), iteration_overlap=overlap.iterations
    )
    row = result.iterations.row(0, named=True)
    assert (row["iteration"], row["straggler_rank"], row["straggler_times_last"]) == (10, 7, 5)
    assert row["verdict"] == "slow_rank"
    assert row["straggler_share_ratio"] > 0.7
    assert result.ranks["rank"].to_list()[:3] == [7, 5, 4]
    assert result.ranks.filter(pl.col("times_last") > 0)["times_last"].to_list() == [5, 2, 1]
