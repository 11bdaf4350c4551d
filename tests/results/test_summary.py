"""The summary's aggregates, by hand."""

from __future__ import annotations

import polars as pl
from polars.testing import assert_frame_equal

from timeline.results.summary import top_collectives
from timeline.schema import COLLECTIVE_EXPOSURE_SCHEMA


def _row(rank: int, collective: str | None, nbytes: int, dur: int, exposed: int) -> dict[str, object]:
    return {
        "rank": rank,
        "iteration": 1,
        "name": "ncclKernel",
        "collective": collective,
        "pg_name": "0",
        "start_ns": 0,
        "end_ns": dur,
        "dur_ns": dur,
        "in_bytes": nbytes,
        "out_bytes": nbytes,
        "hidden_ns": dur - exposed,
        "exposed_ns": exposed,
        "exposed_ratio": exposed / dur,
    }


def test_top_collectives_groups_by_collective_group_and_size() -> None:
    rows = [
        _row(0, "all_reduce", 100, 10, 4),
        _row(1, "all_reduce", 100, 20, 6),
        _row(1, "all_reduce", 100, 10, 0),
        _row(0, "all_gather", 50, 8, 8),
        _row(0, None, 7, 5, 1),
    ]
    frame = pl.DataFrame(rows, schema=COLLECTIVE_EXPOSURE_SCHEMA)
    got = top_collectives(frame, limit=2)
    expected = pl.DataFrame(
        {
            "collective": ["all_reduce", "all_gather"],
            "pg_name": ["0", "0"],
            "in_bytes": [100, 50],
            "calls": [3, 1],
            "ranks": [2, 1],
            "dur_ns": [40, 8],
            "exposed_ns": [10, 8],
            "exposed_ratio": [0.25, 1.0],
        },
        schema_overrides={"calls": pl.UInt32, "ranks": pl.UInt32},
    )
    assert_frame_equal(got, expected)
    unknown = top_collectives(frame, limit=10).filter(pl.col("collective") == "unknown")
    assert unknown.get_column("exposed_ns").to_list() == [1]
    assert top_collectives(frame.clear()).schema == expected.schema
