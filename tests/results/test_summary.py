"""The summary's aggregates, by hand: the top collectives, each iteration across ranks, the order
of the most exposed iterations, and the per-rank span (a whole trace is not a step)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import polars as pl
import pytest
from polars.testing import assert_frame_equal

import timeline
from tests.builders import run_timeline
from tests.generators.nccl import device_mesh_job, write_job
from timeline.results.summary import IterationRow, Summary, top_collectives
from timeline.schema import COLLECTIVE_EXPOSURE_SCHEMA
from timeline.units import format_ns


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


@pytest.fixture(scope="module")
def long_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """8 GPU ranks × 6 profiler steps (48 rank-iterations: more than the terminal lists one by one)."""
    job = device_mesh_job([("dp", 2), ("tp", 4)], steps=6, gpus_per_node=4, slow_rank=5, seed=11)
    directory = tmp_path_factory.mktemp("long")
    write_job(job, directory)
    return directory


def _expected_across_ranks(iterations: list[IterationRow]) -> list[dict[str, int | None]]:
    """Per iteration across ranks, from the rank-iteration rows: plain Python (ties: the lowest rank)."""
    by_iteration: dict[int | None, list[IterationRow]] = {}
    for row in iterations:
        by_iteration.setdefault(row.iteration, []).append(row)
    out = []
    for iteration in sorted(by_iteration, key=lambda i: (i is None, i or 0)):
        rows = by_iteration[iteration]
        known = [r for r in rows if r.exposed_comm_ns is not None]
        exposures = [r.exposed_comm_ns for r in known if r.exposed_comm_ns is not None]
        most = max(exposures) if exposures else None
        out.append(
            {
                "iteration": iteration,
                "ranks": len(rows),
                "step_mean_ns": round(sum(r.step_ns for r in rows) / len(rows)),
                "step_max_ns": max(r.step_ns for r in rows),
                "exposed_mean_ns": None if not exposures else round(sum(exposures) / len(exposures)),
                "exposed_max_ns": most,
                "worst_rank": next(r.rank for r in rows if r.exposed_comm_ns == most)
                if known
                else rows[0].rank,
            }
        )
    return out


def test_the_summary_holds_each_iteration_across_ranks(long_job: Path) -> None:
    summary = timeline.analyze(long_job).summary_data(findings=False)
    assert len(summary.iterations) == 48
    got = [msgspec.structs.asdict(row) for row in summary.iterations_across_ranks]
    assert got == _expected_across_ranks(summary.iterations)
    assert len({row["exposed_max_ns"] for row in got}) > 1  # the figures differ by iteration


def test_the_summary_orders_the_iterations_by_exposure(long_job: Path) -> None:
    summary = timeline.analyze(long_job).summary_data(findings=False)
    order = summary.iterations_by_exposure
    assert sorted(order) == list(range(len(summary.iterations)))
    rows = [summary.iterations[k] for k in order]
    keys = [(r.exposed_comm_ns is None, -(r.exposed_comm_ns or 0), r.rank, r.iteration or 0) for r in rows]
    assert keys == sorted(keys)
    assert summary.worst is not None
    assert rows[0].exposed_comm_ns == summary.worst.exposed_comm_ns


def test_the_terminal_prints_the_iterations_across_ranks_as_the_summary_holds_them(long_job: Path) -> None:
    summary = msgspec.json.decode(
        run_timeline("analyze", long_job, "--json", "--no-findings").stdout, type=Summary
    )
    text = run_timeline("analyze", long_job, "--no-findings").stdout
    table = text.split("Per iteration (across ranks)", 1)[1].split("worst:", 1)[0]
    shown = [
        [cell.strip() for cell in line.split("│")[1:-1]]
        for line in table.splitlines()
        if line.startswith("│")
    ]
    assert shown == [
        [
            str(row["iteration"]),
            str(row["ranks"]),
            format_ns(row["step_mean_ns"]),
            format_ns(row["step_max_ns"]),
            format_ns(row["exposed_mean_ns"]),
            format_ns(row["exposed_max_ns"]),
            str(row["worst_rank"]),
        ]
        for row in _expected_across_ranks(summary.iterations)
    ]


def test_the_per_rank_table_names_a_whole_trace_a_span(long_job: Path) -> None:
    summary = timeline.analyze(long_job).summary_data(findings=False)
    plain = msgspec.to_builtins(summary)
    assert all("span_ns" in row and "step_ns" not in row for row in plain["ranks"])
    for row in summary.ranks:
        mine = [r for r in summary.iterations if r.rank == row.rank]
        # a span of every iteration: at least their sum (the steps follow each other), never one step
        assert row.span_ns >= sum(r.step_ns for r in mine) > max(r.step_ns for r in mine)
    text = run_timeline("analyze", long_job, "--no-findings").stdout
    header = text.split("Per rank (whole trace)", 1)[1].splitlines()[2]
    assert [c.strip() for c in header.split("┃")[1:-1]][2:] == [
        "span", "compute", "comm", "hidden", "exposed", "exposed/span", "hidden/comm", "idle/span",
    ]  # fmt: skip
