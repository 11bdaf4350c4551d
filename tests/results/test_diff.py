"""``timeline.results.diff``: the change, and two runs paired, on frames built here.

Every expected figure is computed here from the rows the test builds, with :mod:`statistics`: a
median, a sample standard deviation, and the noise rule (the change's standard error,
``√(se_base² + se_new²)``; a median's standard error ``1.2533 s / √n``, one value's ``s``).
"""

from __future__ import annotations

import math
import statistics

import msgspec
import polars as pl
import pytest

from timeline.budgets.frames import MetricFrames
from timeline.results.base import TIMELINE_VERSION
from timeline.results.diff import DIFF_VERSION, Change, Diff, build_diff, change

K = 3.0


def se(values: list[float], statistic: str) -> float:
    s = statistics.stdev(values)
    if statistic == "median":
        return math.sqrt(math.pi / 2) * s / math.sqrt(len(values))
    return s


def noise_of(a: list[float], b: list[float], statistic: str) -> float | None:
    if len(a) < 3 or len(b) < 3:
        return None
    return math.sqrt(se(a, statistic) ** 2 + se(b, statistic) ** 2)


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


def test_change_is_significant_only_strictly_beyond_k_times_the_noise() -> None:
    assert change(100.0, 130.0, spread=10.0, k=3.0) == Change(
        base=100.0, new=130.0, delta=30.0, relative=0.3, noise=10.0, significant=False
    )
    assert change(100.0, 130.5, spread=10.0, k=3.0).significant is True
    assert change(100.0, 69.0, spread=10.0, k=3.0).significant is True
    assert change(100.0, 101.0, spread=0.0, k=3.0).significant is True


def test_change_unknowns() -> None:
    assert change(0.0, 5.0, spread=1.0, k=3.0).relative is None
    assert change(1.0, 5.0, spread=None, k=3.0).significant is None
    unknown = change(None, 5.0, spread=1.0, k=3.0)
    assert (unknown.delta, unknown.relative, unknown.significant) == (None, None, None)


def test_iterations_are_paired_by_position_and_take_the_median_over_ranks() -> None:
    base = frames(
        "base",
        [
            (0, 7, 10_000_000),
            (1, 7, 12_000_000),
            (2, 7, 20_000_000),
            (0, 5, 10_000_000),
            (1, 5, 10_000_000),
            (0, 6, 11_000_000),
        ],
        busbw={5: 1.0, 6: 2.0, 7: 3.0},
    )
    new = frames(
        "new",
        [(0, 100, 20_000_000), (0, 101, 21_000_000), (0, 102, 22_000_000), (0, 103, 23_000_000)],
        busbw={100: 4.0, 101: 4.0, 102: 4.0, 103: 8.0},
    )
    diff = build_diff(base, new, k=K)
    assert (diff.version, diff.timeline) == (DIFF_VERSION, TIMELINE_VERSION) == (2, "0.1.0")
    pairs = [(row.base_iteration, row.new_iteration) for row in diff.iterations]
    assert pairs == [(5, 100), (6, 101), (7, 102), (None, 103)]
    assert diff.paired == 3
    # iteration 7: the median of ranks 0, 1 and 2 (10, 12, 20 ms) is 12 ms (their mean would be 14)
    base_steps = [10_000_000.0, 11_000_000.0, 12_000_000.0]  # iterations 5, 6, 7
    new_steps = [20_000_000.0, 21_000_000.0, 22_000_000.0, 23_000_000.0]
    step = diff.iterations[2].metrics.step_ns
    assert (step.base, step.new, step.delta) == (12_000_000.0, 22_000_000.0, 10_000_000.0)
    # one iteration against another: the noise of one value of each run
    assert step.noise == pytest.approx(noise_of(base_steps, new_steps, "value"))
    assert diff.iterations[3].metrics.step_ns.delta is None
    summary = diff.summary.step_ns
    assert (summary.base, summary.new) == (statistics.median(base_steps), statistics.median(new_steps))
    spread = noise_of(base_steps, new_steps, "median")
    assert spread is not None
    assert summary.noise == pytest.approx(spread)
    assert summary.significant is (abs(summary.new - summary.base) > K * spread)  # type: ignore[operator]
    assert summary.significant is True  # 10.5 ms against a noise of about 1 ms
    assert diff.summary.hidden_comm_ns.significant is False  # 1 ms in both: no change
    busbw = diff.summary.busbw_gbps
    assert (busbw.base, busbw.new, busbw.delta) == (2.0, 4.0, 2.0)
    assert diff.iterations[0].metrics.busbw_gbps.delta == 3.0
    assert diff.beyond_noise == [m for m, f in diff.summary.figures() if f.significant]
    assert "step_ns" in diff.beyond_noise


def test_unpaired_iterations_and_ranks_are_warned_about() -> None:
    base = frames("runs/base", [(0, 1, 10), (1, 1, 10), (0, 2, 10), (1, 2, 10)])
    new = frames("runs/new", [(0, 1, 10), (2, 1, 10)])
    diff = build_diff(base, new)
    assert diff.warnings[0] == (
        "runs/base: BASE has 2 iterations, the other run 1: the last 1 are compared with nothing "
        "(iterations are paired by position)"
    )
    assert diff.warnings[1] == (
        "runs/new: ranks are matched by number: BASE only has rank(s) 1, NEW only 2; "
        "their rows compare nothing"
    )
    assert [(r.rank, r.base_iterations, r.new_iterations) for r in diff.ranks] == [
        (0, 2, 1),
        (1, 2, 0),
        (2, 0, 1),
    ]
    assert diff.ranks[1].metrics.step_ns.new is None
    # fewer than 3 iterations: the noise, so whether a change is significant, is unknown
    assert diff.ranks[0].metrics.step_ns.significant is None


def test_runs_without_collectives_compare_no_busbw() -> None:
    base = frames("summary.json", [(0, i, 10) for i in range(3)])
    new = frames("runs/new", [(0, i, 10) for i in range(3)], collectives=[("all_reduce", 1.0, False)])
    diff = build_diff(base, new)
    assert diff.collectives is None
    assert diff.warnings == [
        "summary.json: a summary JSON keeps no collectives: no bus bandwidth is compared; "
        "give the run's traces to compare it"
    ]
    assert diff.summary.busbw_gbps.base is None


@pytest.mark.parametrize(("k", "significant"), [(3.0, True), (4.0, False)])
def test_collectives_by_kind_leave_implausible_ones_out_of_the_busbw(k: float, significant: bool) -> None:
    base_busbw = [10.0, 12.0, 14.0, 11.0, 13.0]
    new_busbw = [15.5, 14.5, 16.5, 16.0, 15.0]
    base = frames(
        "base",
        [(0, 1, 10)],
        collectives=[
            *(("all_reduce", b, False) for b in base_busbw),
            ("all_reduce", 9_000.0, True),
            ("all_to_all", None, False),
        ],
    )
    new = frames("new", [(0, 1, 10)], collectives=[("all_reduce", b, False) for b in new_busbw])
    rows = build_diff(base, new, k=k).collectives
    assert rows is not None
    assert [(r.collective, r.base_collectives, r.new_collectives) for r in rows] == [
        ("all_reduce", 6, 5),
        ("all_to_all", 1, 0),
    ]
    busbw = rows[0].busbw_gbps
    spread = noise_of(base_busbw, new_busbw, "median")
    assert spread is not None
    # medians 12 and 15.5: |3.5| against 3 and 4 times the noise (about 0.99)
    assert (busbw.base, busbw.new) == (12.0, 15.5)
    assert busbw.noise == pytest.approx(spread)
    assert 3 * spread < 3.5 < 4 * spread
    assert busbw.significant is significant
    assert rows[1].busbw_gbps.base is None


def test_json_keeps_layout_1_keys_in_order_after_kind_version_and_timeline() -> None:
    base = frames("base", [(0, i, 10 + i) for i in range(3)], collectives=[("all_reduce", 1.0, False)])
    diff = build_diff(base, base)
    data = msgspec.json.decode(msgspec.json.encode(diff))
    assert list(data) == [
        "kind",
        "version",
        "timeline",
        "base",
        "new",
        "noise_k",
        "min_values",
        "warnings",
        "summary",
        "iterations",
        "ranks",
        "collectives",
        "paired",
        "beyond_noise",
    ]
    assert (data["kind"], data["version"], data["timeline"]) == ("diff", 2, TIMELINE_VERSION)
    assert list(data["summary"]) == [
        "step_ns",
        "compute_ns",
        "exposed_comm_ns",
        "hidden_comm_ns",
        "busbw_gbps",
    ]
    assert list(data["summary"]["step_ns"]) == ["base", "new", "delta", "relative", "noise", "significant"]
    assert list(data["iterations"][0]) == ["position", "base_iteration", "new_iteration", "metrics"]
    assert list(data["ranks"][0]["metrics"]) == ["step_ns", "compute_ns", "exposed_comm_ns", "hidden_comm_ns"]
    assert list(data["collectives"][0]) == ["collective", "base_collectives", "new_collectives", "busbw_gbps"]
    assert msgspec.json.decode(msgspec.json.encode(diff), type=Diff) == diff
