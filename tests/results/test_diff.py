"""``timeline.results.diff``: the noise, the change, and two runs paired, on frames built here."""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest

from timeline.budgets.frames import MetricFrames
from timeline.results.diff import DIFF_VERSION, build_diff, change, noise


def frames(
    label: str,
    rows: list[tuple[int, int, int]],
    *,
    busbw: dict[int, float] | None = None,
    collectives: list[tuple[str, float | None, bool]] | None = None,
) -> MetricFrames:
    """A run of (rank, iteration, step_ns) rows: compute is half the step, exposed a tenth, hidden 1 ms."""
    iterations = pl.DataFrame(
        [
            {
                "rank": rank,
                "iteration": iteration,
                "step_ns": step,
                "compute_ns": step // 2,
                "exposed_comm_ns": step // 10,
                "hidden_comm_ns": 1_000_000,
            }
            for rank, iteration, step in rows
        ],
        schema_overrides={"rank": pl.Int32},
    )
    utilisation = None
    if busbw is not None:
        utilisation = pl.DataFrame(
            {"iteration": list(busbw), "busbw_gbps": list(busbw.values())},
            schema={"iteration": pl.Int64, "busbw_gbps": pl.Float64},
        )
    logical = None
    if collectives is not None:
        logical = pl.DataFrame(
            collectives,
            schema={"collective": pl.String, "busbw_gbps": pl.Float64, "implausible": pl.Boolean},
            orient="row",
        )
    return MetricFrames(
        label=label,
        iterations=iterations,
        ranks=pl.DataFrame(),
        logical_collectives=logical,
        iteration_utilisation=utilisation,
    )


def test_noise_is_the_median_of_both_runs_deviations_from_their_own_median() -> None:
    # base: median 2, deviations 1 0 1; new: median 10, deviations 0 0 4 → median of 0 0 0 1 1 4 = 0.5
    assert noise([1.0, 2.0, 3.0], [10.0, 10.0, 14.0]) == 0.5
    assert noise([5.0, 5.0, 5.0], [7.0, 7.0, 7.0]) == 0.0


def test_noise_is_unknown_below_three_values_in_either_run() -> None:
    assert noise([1.0, 2.0], [1.0, 2.0, 3.0]) is None
    assert noise([1.0, 2.0, 3.0], []) is None


def test_change_is_significant_only_strictly_beyond_k_times_the_noise() -> None:
    assert change(100.0, 130.0, spread=10.0, k=3.0) == {
        "base": 100.0,
        "new": 130.0,
        "delta": 30.0,
        "relative": 0.3,
        "noise": 10.0,
        "significant": False,
    }
    assert change(100.0, 130.5, spread=10.0, k=3.0)["significant"] is True
    assert change(100.0, 69.0, spread=10.0, k=3.0)["significant"] is True
    assert change(100.0, 101.0, spread=0.0, k=3.0)["significant"] is True


def test_change_unknowns() -> None:
    assert change(0.0, 5.0, spread=1.0, k=3.0)["relative"] is None
    assert change(1.0, 5.0, spread=None, k=3.0)["significant"] is None
    unknown = change(None, 5.0, spread=1.0, k=3.0)
    assert unknown["delta"] is None
    assert unknown["relative"] is None
    assert unknown["significant"] is None


def test_iterations_are_paired_by_position_and_averaged_over_ranks() -> None:
    base = frames(
        "base",
        [(0, 7, 10_000_000), (1, 7, 12_000_000), (0, 5, 10_000_000), (1, 5, 10_000_000), (0, 6, 11_000_000)],
        busbw={5: 1.0, 6: 2.0, 7: 3.0},
    )
    new = frames(
        "new",
        [(0, 100, 20_000_000), (0, 101, 21_000_000), (0, 102, 22_000_000), (0, 103, 23_000_000)],
        busbw={100: 4.0, 101: 4.0, 102: 4.0, 103: 8.0},
    )
    diff = build_diff(base, new, k=3.0)
    assert diff["version"] == DIFF_VERSION
    pairs = [(row["base_iteration"], row["new_iteration"]) for row in diff["iterations"]]
    assert pairs == [(5, 100), (6, 101), (7, 102), (None, 103)]
    # iteration 7: the mean of ranks 0 and 1 (11 ms) against 22 ms
    step = diff["iterations"][2]["metrics"]["step_ns"]
    assert (step["base"], step["new"], step["delta"]) == (11_000_000.0, 22_000_000.0, 11_000_000.0)
    assert diff["iterations"][3]["metrics"]["step_ns"]["delta"] is None
    # medians: base 10, 11, 11 ms → 11 ms; new 20..23 ms → 21.5 ms
    summary = diff["summary"]["step_ns"]
    assert (summary["base"], summary["new"]) == (11_000_000.0, 21_500_000.0)
    # deviations: base 1, 0, 0 ms; new 1.5, 0.5, 0.5, 1.5 ms → median 0.5 ms
    assert summary["noise"] == 500_000.0
    assert summary["significant"] is True
    assert diff["summary"]["hidden_comm_ns"]["significant"] is False  # 1 ms in both: no change
    busbw = diff["summary"]["busbw_gbps"]
    assert (busbw["base"], busbw["new"], busbw["delta"]) == (2.0, 4.0, 2.0)
    assert diff["iterations"][0]["metrics"]["busbw_gbps"]["delta"] == 3.0


def test_unpaired_iterations_and_ranks_are_warned_about() -> None:
    base = frames("runs/base", [(0, 1, 10), (1, 1, 10), (0, 2, 10), (1, 2, 10)])
    new = frames("runs/new", [(0, 1, 10), (2, 1, 10)])
    diff = build_diff(base, new)
    assert diff["warnings"][0] == (
        "runs/base: BASE has 2 iterations, the other run 1: the last 1 are compared with nothing "
        "(iterations are paired by position)"
    )
    assert diff["warnings"][1] == (
        "runs/new: ranks are matched by number: BASE only has rank(s) 1, NEW only 2; "
        "their rows compare nothing"
    )
    ranks: list[dict[str, Any]] = diff["ranks"]
    assert [(r["rank"], r["base_iterations"], r["new_iterations"]) for r in ranks] == [
        (0, 2, 1),
        (1, 2, 0),
        (2, 0, 1),
    ]
    assert ranks[1]["metrics"]["step_ns"]["new"] is None
    # fewer than 3 iterations: the noise, so whether a change is significant, is unknown
    assert ranks[0]["metrics"]["step_ns"]["significant"] is None


def test_runs_without_collectives_compare_no_busbw() -> None:
    base = frames("summary.json", [(0, i, 10) for i in range(3)])
    new = frames("runs/new", [(0, i, 10) for i in range(3)], collectives=[("all_reduce", 1.0, False)])
    diff = build_diff(base, new)
    assert diff["collectives"] is None
    assert diff["warnings"] == [
        "summary.json: a summary JSON keeps no collectives: no bus bandwidth is compared; "
        "give the run's traces to compare it"
    ]
    assert diff["summary"]["busbw_gbps"]["base"] is None


@pytest.mark.parametrize(("k", "significant"), [(3.0, True), (4.0, False)])
def test_collectives_by_kind_leave_implausible_ones_out_of_the_busbw(k: float, significant: bool) -> None:
    base = frames(
        "base",
        [(0, 1, 10)],
        collectives=[
            ("all_reduce", 10.0, False),
            ("all_reduce", 12.0, False),
            ("all_reduce", 14.0, False),
            ("all_reduce", 9_000.0, True),
            ("all_to_all", None, False),
        ],
    )
    new = frames(
        "new",
        [(0, 1, 10)],
        collectives=[("all_reduce", 15.0, False), ("all_reduce", 16.0, False), ("all_reduce", 17.0, False)],
    )
    rows = build_diff(base, new, k=k)["collectives"]
    assert [(r["collective"], r["base_collectives"], r["new_collectives"]) for r in rows] == [
        ("all_reduce", 4, 3),
        ("all_to_all", 1, 0),
    ]
    busbw = rows[0]["busbw_gbps"]
    # medians 12 and 16; deviations 2 0 2 and 1 0 1 → noise 1; |4| > 3 × 1, not > 4 × 1
    assert (busbw["base"], busbw["new"], busbw["noise"]) == (12.0, 16.0, 1.0)
    assert busbw["significant"] is significant
    assert rows[1]["busbw_gbps"]["base"] is None
