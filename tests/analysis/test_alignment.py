"""Clock alignment: offsets recovered from the ends of synchronising collectives, then applied."""

from __future__ import annotations

import functools
from typing import Any

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import TRACES, gpu, make_events
from timeline import load
from timeline.analysis.alignment import apply_clock_offsets, estimate_clock_offsets
from timeline.analysis.collectives import match_collectives
from timeline.analysis.schemas import CLOCK_OFFSETS_SCHEMA
from timeline.errors import TraceContentError, UsageError
from timeline.schema import EVENTS_SCHEMA

PARAM = TRACES / "kineto" / "param_dlrm_8rank"
TOLERANCE_NS = 5_000  # the acceptance bound: recover injected offsets within 5 µs

# Three "hosts": ranks 0-3 keep rank 0's clock, ranks 4-5 run 1.234567 ms ahead, ranks 6-7 850 µs behind.
HOSTS = {0: "a", 1: "a", 2: "a", 3: "a", 4: "b", 5: "b", 6: "c", 7: "c"}
INJECTED = {0: 0, 1: 0, 2: 0, 3: 0, 4: 1_234_567, 5: 1_234_567, 6: -850_000, 7: -850_000}


@functools.cache
def param_events() -> pl.DataFrame:
    return load(PARAM, workers=1).events


def shifted(offsets: dict[int, int]) -> pl.DataFrame:
    """The PARAM events with each rank's clock moved by ``offsets[rank]``."""
    by = pl.col("rank").replace_strict(offsets, default=0, return_dtype=pl.Int64)
    return param_events().with_columns(start_ns=pl.col("start_ns") + by, end_ns=pl.col("end_ns") + by)


def errors(estimated: pl.DataFrame, injected: dict[int, int]) -> dict[int, int]:
    return {
        row["rank"]: row["offset_ns"] - injected.get(row["rank"], 0)
        for row in estimated.iter_rows(named=True)
    }


def test_recovers_injected_host_offsets_within_5_us() -> None:
    estimated = estimate_clock_offsets(shifted(INJECTED))
    assert estimated.schema == CLOCK_OFFSETS_SCHEMA
    assert estimated["rank"].to_list() == list(range(8))
    assert estimated["reference_rank"].to_list() == [0] * 8
    assert estimated["collectives"].to_list() == [8] * 8
    error = errors(estimated, INJECTED)
    assert max(abs(e) for e in error.values()) <= TOLERANCE_NS, error
    assert estimated["mad_ns"].max() <= TOLERANCE_NS  # type: ignore[operator]


def test_per_host_offsets_recover_within_5_us() -> None:
    estimated = estimate_clock_offsets(shifted(INJECTED), hosts=HOSTS)
    assert estimated["host"].to_list() == [HOSTS[r] for r in range(8)]
    error = errors(estimated, INJECTED)
    assert max(abs(e) for e in error.values()) <= TOLERANCE_NS, error
    # One offset per host; the reference's host is pinned to 0.
    per_host = estimated.group_by("host").agg(pl.col("offset_ns").n_unique())
    assert per_host["offset_ns"].to_list() == [1, 1, 1]
    assert estimated.filter(pl.col("host") == "a")["offset_ns"].to_list() == [0] * 4


def test_applying_offsets_restores_the_skews() -> None:
    skewed = shifted(INJECTED)
    original = match_collectives(param_events()).collectives
    broken = match_collectives(skewed).collectives
    assert broken["end_skew_ns"].min() > 1_000_000  # type: ignore[operator]
    aligned = apply_clock_offsets(skewed, estimate_clock_offsets(skewed))
    assert aligned.schema == EVENTS_SCHEMA
    repaired = match_collectives(aligned).collectives
    assert (repaired["end_skew_ns"] <= 10_000).all()
    diff = (repaired["start_skew_ns"] - original["start_skew_ns"]).abs()
    assert diff.max() <= 2 * TOLERANCE_NS  # type: ignore[operator]
    assert repaired["last_rank"].to_list() == original["last_rank"].to_list()
    assert (aligned["end_ns"] - aligned["start_ns"]).equals(aligned["dur_ns"])


def test_reference_rank_can_be_chosen() -> None:
    estimated = estimate_clock_offsets(shifted(INJECTED), reference_rank=4)
    relative = {r: INJECTED[r] - INJECTED[4] for r in INJECTED}
    assert max(abs(e) for e in errors(estimated, relative).values()) <= TOLERANCE_NS


@settings(max_examples=15, deadline=None)
@given(st.lists(st.integers(-50_000_000, 50_000_000), min_size=7, max_size=7))
def test_recovers_random_per_rank_offsets(offsets: list[int]) -> None:
    injected = {0: 0, **{r + 1: o for r, o in enumerate(offsets)}}
    error = errors(estimate_clock_offsets(shifted(injected)), injected)
    assert max(abs(e) for e in error.values()) <= TOLERANCE_NS, error


def comm(rank: int, start: int, end: int, collective: str = "all_reduce", **extra: Any) -> dict[str, Any]:
    return gpu("communication", start, end, rank=rank, stream=9, collective=collective, **extra)


def test_exact_offsets_on_hand_made_ranks() -> None:
    # Rank 1 runs 1,000 ns ahead, rank 2 500 ns behind; one collective's end is 40 ns late on rank 1.
    rows = [
        comm(0, 0, 100),
        comm(1, 1_050, 1_100),
        comm(2, -480, -400),
        comm(0, 200, 300),
        comm(1, 1_200, 1_340),
        comm(2, -300, -200),
        comm(0, 400, 500),
        comm(1, 1_400, 1_500),
        comm(2, -100, 0),
    ]
    estimated = estimate_clock_offsets(make_events(rows))
    assert estimated.select("rank", "offset_ns", "collectives", "mad_ns").rows() == [
        (0, 0, 3, 0),
        (1, 1_000, 3, 0),
        (2, -500, 3, 0),
    ]


def test_non_synchronising_collectives_are_not_anchors() -> None:
    rows = [
        comm(0, 0, 100, "broadcast"),
        comm(1, 500, 700, "broadcast"),
        comm(0, 200, 300),
        comm(1, 1_200, 1_300),
    ]
    estimated = estimate_clock_offsets(make_events(rows))
    assert estimated["offset_ns"].to_list() == [0, 1_000]
    assert estimated["collectives"].to_list() == [1, 1]


def test_rank_sharing_no_collective_gets_a_null_offset() -> None:
    rows = [
        comm(0, 0, 100, pg_name="0"),
        comm(1, 0, 100, pg_name="0"),
        comm(2, 0, 100, pg_name="1"),
        comm(3, 0, 100, pg_name="1"),
    ]
    estimated = estimate_clock_offsets(make_events(rows))
    assert estimated["offset_ns"].to_list() == [0, 0, None, None]
    assert estimated["collectives"].to_list() == [1, 1, 0, 0]
    # A null offset leaves the rank where it was.
    events = make_events(rows)
    assert apply_clock_offsets(events, estimated)["start_ns"].to_list() == [0, 0, 0, 0]


def test_no_synchronising_collective_is_an_error() -> None:
    with pytest.raises(TraceContentError, match="no synchronising collective"):
        estimate_clock_offsets(make_events([comm(0, 0, 100, "broadcast"), comm(1, 0, 100, "broadcast")]))


def test_unknown_reference_rank_is_an_error() -> None:
    with pytest.raises(UsageError, match="reference rank 9"):
        estimate_clock_offsets(make_events([comm(0, 0, 100), comm(1, 0, 100)]), reference_rank=9)


def test_horovod_events_move_with_the_writer_rank() -> None:
    rows = [
        comm(0, 1_000, 2_000),
        {"rank": 3, "kind": "instant", "start_ns": 5_000, "end_ns": 5_000, "source": "horovod", "name": "3"},
        {
            "rank": 0,
            "kind": "communication",
            "start_ns": 1_000,
            "end_ns": 2_000,
            "source": "horovod",
            "name": "NCCL_ALLREDUCE",
        },
    ]
    offsets = pl.DataFrame({"rank": [0, 3], "offset_ns": [100, 7_000]})
    aligned = apply_clock_offsets(make_events(rows), offsets)
    assert aligned.select("rank", "source", "start_ns").rows() == [
        (0, "kineto", 900),
        (0, "horovod", 900),
        (3, "horovod", 4_900),
    ]
