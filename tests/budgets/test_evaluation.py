"""Budgets evaluated on synthetic runs with hand-computed values, the sample traces and the PARAM set."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.budgets.runs import iteration_frames, run_events, run_frames
from tests.builders import REPO, TRACES, frames_of, run_of
from timeline import compute_overlap, load
from timeline.budgets import (
    NOISE_K,
    CheckReport,
    MetricFrames,
    Verdict,
    evaluate_budgets,
    frames_from_summary,
    parse_budgets,
    statistic_of,
)
from timeline.errors import BudgetError
from timeline.results.summary import build_summary
from timeline.schema import COLLECTIVE_EXPOSURE_SCHEMA


def check(
    budgets: Sequence[Mapping[str, object]],
    frames: MetricFrames,
    *,
    regression: dict[str, object] | None = None,
    baseline: MetricFrames | None = None,
) -> CheckReport:
    document: dict[str, object] = {"budgets": [dict(b) for b in budgets]}
    if regression:
        document["regression"] = regression
    return evaluate_budgets(parse_budgets(document, source="t.toml"), frames, baseline=baseline)


def one(budget: dict[str, object], frames: MetricFrames) -> Verdict:
    report = check([budget], frames)
    assert len(report.verdicts) == 1
    return report.verdicts[0]


# exposed ns per iteration: rank 0 steady, rank 1 with a slow warm-up iteration
RUN = {0: [100, 110, 120, 130], 1: [390, 50, 60, 70]}


@pytest.fixture(scope="module")
def run() -> MetricFrames:
    return run_frames(RUN)


# --- limits ------------------------------------------------------------------------------------------


def test_pass_and_fail_on_max(run: MetricFrames) -> None:
    passing = one({"metric": "exposed_comm_ratio", "max": 0.39}, run)
    assert (passing.status, passing.value, passing.samples) == ("pass", 0.39, 8)
    assert passing.worst is not None
    assert (passing.worst.rank, passing.worst.iteration, passing.worst.value) == (1, 0, 0.39)
    assert passing.message == "exposed_comm_ratio max = 39.00%, within max 39.00%"  # the limit is inclusive
    failing = one({"metric": "exposed_comm_ratio", "max": 0.3, "name": "exposed"}, run)
    assert (failing.status, failing.value, failing.name) == ("fail", 0.39, "exposed")
    assert failing.message == (
        "exposed_comm_ratio max = 39.00% > max 30.00%; worst sample rank 1, iteration 0: 39.00%"
    )
    report = check([{"metric": "exposed_comm_ratio", "max": 0.39}, {"metric": "step_ns", "max": 999}], run)
    counts = report.counts
    assert (report.ok, report.exit_code, counts.passed, counts.fail, counts.nodata, counts.skip) == (
        False,
        1,
        1,
        1,
        0,
        0,
    )


def test_aggregates(run: MetricFrames) -> None:
    values = sorted(v / 1000 for per_rank in RUN.values() for v in per_rank)
    n = len(values)

    def percentile(q: float) -> float:  # numpy's default: linear between closest ranks
        pos = q * (n - 1)
        lo = math.floor(pos)
        return values[lo] + (values[min(lo + 1, n - 1)] - values[lo]) * (pos - lo)

    expected = {
        "max": max(values),
        "min": min(values),
        "mean": statistics.fmean(values),
        "p50": percentile(0.5),
        "p90": percentile(0.9),
        "p99": percentile(0.99),
        "p99.9": percentile(0.999),
    }
    for aggregate, value in expected.items():
        verdict = one({"metric": "exposed_comm_ratio", "aggregate": aggregate, "max": 1.0}, run)
        assert verdict.value == pytest.approx(value), aggregate


def test_per_rank_vs_pooled(run: MetricFrames) -> None:
    budget = {"metric": "exposed_comm_ns", "aggregate": "mean", "max": 140}
    pooled = one(budget, run)  # (460 + 570) / 8 = 128.75
    assert (pooled.status, pooled.value, pooled.over) == ("pass", 128.75, "all")
    per_rank = one({**budget, "over": "rank"}, run)  # rank 0: 115, rank 1: 142.5
    assert (per_rank.status, per_rank.value, per_rank.samples) == ("fail", 142.5, 4)
    assert per_rank.worst is not None
    assert (per_rank.worst.rank, per_rank.worst.iteration) == (1, 0)
    assert per_rank.message.startswith(
        "exposed_comm_ns mean of rank 1 (the worst rank) = 142.5 ns > max 140 ns"
    )


def test_skip_iterations(run: MetricFrames) -> None:
    budget = {"metric": "exposed_comm_ns", "max": 200}
    assert one(budget, run).status == "fail"  # rank 1's warm-up: 390 ns
    skipped = one({**budget, "skip_iterations": 1}, run)
    assert (skipped.status, skipped.value, skipped.samples) == ("pass", 130, 6)
    everything = one({**budget, "skip_iterations": 4}, run)
    assert (everything.status, everything.message) == (
        "nodata",
        "no data: every iteration is skipped (skip_iterations = 4)",
    )
    # collective metrics skip the same iterations
    per_event = one({"metric": "collective_exposed_ns", "max": 200, "skip_iterations": 1}, run)
    assert (per_event.status, per_event.value, per_event.samples) == ("pass", 130, 6)


def test_rank_scope(run: MetricFrames) -> None:
    only_0 = one({"metric": "exposed_comm_ns", "max": 200, "ranks": [0]}, run)
    assert (only_0.status, only_0.value) == ("pass", 130)
    missing = one({"metric": "exposed_comm_ns", "max": 200, "ranks": [5, 7]}, run)
    assert (missing.status, missing.message) == ("nodata", "no data: no rank 5, 7 in run (ranks 0, 1)")
    assert missing.failed


def test_min_limit_for_higher_is_better(run: MetricFrames) -> None:
    # hidden_comm_ratio = 100 / (100 + exposed): lowest on rank 1's warm-up
    verdict = one({"metric": "hidden_comm_ratio", "min": 0.5}, run)
    assert verdict.status == "fail"
    assert verdict.value == pytest.approx(100 / 490)
    assert verdict.worst is not None
    assert (verdict.worst.rank, verdict.worst.iteration) == (1, 0)
    assert (verdict.aggregate, verdict.name) == ("min", "hidden_comm_ratio min")  # the default with min only
    assert verdict.message.startswith("hidden_comm_ratio min = 20.41% < min 50.00%")
    both = one({"metric": "hidden_comm_ratio", "min": 0.2, "max": 0.95}, run)
    assert (both.aggregate, both.status) == ("max", "pass")
    mean = one({"metric": "hidden_comm_ratio", "aggregate": "mean", "min": 0.45}, run)
    assert mean.status == "pass"


def collective_frames(rows: list[tuple[int, int | None, str, str, int, int]]) -> MetricFrames:
    """Frames with the given (rank, iteration, collective, pg_name, dur_ns, exposed_ns) events."""
    frame = pl.DataFrame(
        [
            {
                "rank": r,
                "iteration": i,
                "collective": c,
                "pg_name": g,
                "dur_ns": d,
                "exposed_ns": e,
                "exposed_ratio": e / d,
            }
            for r, i, c, g, d, e in rows
        ],
    )
    for name, dtype in COLLECTIVE_EXPOSURE_SCHEMA.items():
        if name not in frame.columns:
            frame = frame.with_columns(pl.lit(None, dtype).alias(name))
    base = iteration_frames({0: [0.0, 0.0], 1: [0.0, 0.0]})
    return MetricFrames(
        label="events",
        iterations=base.iterations,
        ranks=base.ranks,
        collectives=frame.select(COLLECTIVE_EXPOSURE_SCHEMA.names()).cast(COLLECTIVE_EXPOSURE_SCHEMA),
    )


EVENTS = collective_frames(
    [
        (0, 0, "all_reduce", "0", 100, 10),
        (0, 0, "all_to_all", "1", 300, 250),
        (0, 1, "all_reduce", "0", 100, 30),
        (0, 1, "all_reduce", "1", 200, 40),
        (1, 0, "all_reduce", "0", 100, 0),
        (1, 1, "all_to_all", "1", 400, 390),
        (1, None, "all_reduce", "0", 500, 500),  # outside every iteration window
    ]
)


def test_collective_and_group_scopes() -> None:
    all_reduce = one({"metric": "collective_exposed_ns", "collective": "all_reduce", "max": 1000}, EVENTS)
    assert (all_reduce.value, all_reduce.samples) == (500, 5)
    assert all_reduce.worst is not None
    assert (all_reduce.worst.rank, all_reduce.worst.iteration, all_reduce.worst.collective) == (
        1,
        None,
        "all_reduce",
    )
    group = one({"metric": "collective_exposed_ns", "pg_name": "1", "max": 1000}, EVENTS)
    assert (group.value, group.samples) == (390, 3)
    both = one(
        {"metric": "collective_dur_ns", "collective": "all_reduce", "pg_name": ["1"], "max": 1000}, EVENTS
    )
    assert (both.value, both.samples) == (200, 1)
    ratio = one(
        {"metric": "collective_exposed_ratio", "collective": "all_to_all", "aggregate": "min", "max": 1},
        EVENTS,
    )
    assert ratio.value == pytest.approx(250 / 300)
    missing = one({"metric": "collective_exposed_ns", "collective": "allreduce", "max": 1}, EVENTS)
    assert missing.message == (
        "no data: no collective allreduce in events (collectives: all_reduce, all_to_all)"
    )


def test_collective_sums_per_iteration() -> None:
    verdict = one(
        {
            "metric": "collective_iteration_exposed_ns",
            "collective": "all_reduce",
            "max": 1000,
            "over": "rank",
        },
        EVENTS,
    )
    # rank 0: iteration 0 → 10, iteration 1 → 30 + 40; rank 1: iteration 0 → 0 (the event outside is left out)
    assert (verdict.value, verdict.samples) == (70, 2)
    assert verdict.worst is not None
    assert (verdict.worst.rank, verdict.worst.iteration, verdict.worst.collective) == (0, 1, "all_reduce")
    every = one({"metric": "collective_iteration_dur_ns", "max": 1000, "aggregate": "min"}, EVENTS)
    assert every.value == 100  # rank 1, iteration 0
    skipped = one({"metric": "collective_iteration_exposed_ns", "max": 1000, "skip_iterations": 1}, EVENTS)
    assert (skipped.value, skipped.samples) == (390, 2)


def test_collective_metric_on_real_run(run: MetricFrames) -> None:
    verdict = one(
        {
            "metric": "collective_iteration_exposed_ns",
            "collective": "all_reduce",
            "pg_name": "0",
            "max": 1000,
        },
        run,
    )
    assert (verdict.value, verdict.samples) == (390, 8)


def test_unknown_values_are_no_data() -> None:
    frames = iteration_frames({0: [0.1, 0.2]}, mode="horovod", column="comm_ratio")
    verdict = one({"metric": "exposed_comm_ratio", "max": 0.5}, frames)
    assert (verdict.status, verdict.message) == (
        "nodata",
        "no data: exposed_comm_ratio is unknown on every selected row (a Horovod timeline alone has no "
        "compute events)",
    )
    known = one({"metric": "comm_ratio", "max": 0.5}, frames)
    assert (known.status, known.value) == ("pass", 0.2)


def test_horovod_sample_trace() -> None:
    frames = frames_of(load(REPO / "sample_traces/horovod/horovod_v021.json"), label="horovod")
    report = check(
        [
            {"metric": "exposed_comm_ratio", "max": 0.5},
            {"metric": "comm_ratio", "max": 0.5},
            {"metric": "collective_dur_ns", "collective": "broadcast", "max": 1e12},
        ],
        frames,
    )
    assert [v.status for v in report.verdicts] == ["nodata", "pass", "pass"]
    assert report.exit_code == 1


def test_summary_cannot_give_collective_metrics(run: MetricFrames) -> None:
    summary = MetricFrames(label="base.json", iterations=run.iterations, ranks=run.ranks, collectives=None)
    with pytest.raises(BudgetError) as info:
        check([{"metric": "collective_exposed_ns", "max": 1}], summary)
    assert str(info.value) == (
        "t.toml:budgets[0]: collective_exposed_ns needs per-collective rows, which a summary JSON "
        "(base.json) does "
        "not keep; pass the trace or its Parquet file instead"
    )
    old = MetricFrames(label="old.json", iterations=run.iterations.drop("idle_ratio"), ranks=run.ranks)
    with pytest.raises(
        BudgetError, match=r"old\.json has no column idle_ratio for idle_ratio \(an older summary\?\)"
    ):
        check([{"metric": "idle_ratio", "max": 1}], old)


def test_summary_round_trip_gives_the_same_verdicts() -> None:
    trace = load(REPO / "sample_traces/ddp_gloo")
    budgets = [
        {
            "metric": name,
            "aggregate": aggregate,
            "over": over,
            "max": 1 if "ratio" in name else 1e12,
            "skip_iterations": 1,
        }
        for name in ("exposed_comm_ratio", "step_ns", "idle_ratio", "hidden_comm_ratio")
        for aggregate in ("mean", "p90")
        for over in ("all", "rank")
    ]
    direct = check(budgets, frames_of(trace, label="x"))
    summary = build_summary(run_of(trace), findings=False)
    import msgspec

    decoded = msgspec.json.decode(msgspec.json.encode(summary))
    read_back = check(budgets, frames_from_summary(decoded, label="x"))
    assert [(v.value, v.worst) for v in direct.verdicts] == [(v.value, v.worst) for v in read_back.verdicts]


def test_param_dlrm_worst_rank() -> None:
    events = load(TRACES / "kineto/param_dlrm_8rank").events
    overlap = compute_overlap(events)
    frames = frames_of(events, label="param")
    verdict = one({"metric": "exposed_comm_ratio", "over": "rank", "max": 0.1}, frames)
    rows = overlap.iterations.select("rank", "exposed_comm_ratio").sort("exposed_comm_ratio", descending=True)
    worst_rank, worst_value = rows.row(0)
    assert verdict.status == "fail"
    assert verdict.worst is not None
    assert (verdict.worst.rank, verdict.value) == (worst_rank, worst_value)
    all_to_all = one({"metric": "collective_exposed_ns", "collective": "all_to_all", "max": 1e12}, frames)
    expected = overlap.collectives.filter(pl.col("collective") == "all_to_all")
    assert (all_to_all.samples, all_to_all.value) == (
        expected.height,
        expected.get_column("exposed_ns").max(),
    )


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.integers(0, 399), min_size=1, max_size=12),
    limit=st.integers(0, 400),
    aggregate=st.sampled_from(["max", "min", "mean", "p50", "p90", "p99"]),
)
def test_property_limits_against_a_reference(values: list[int], limit: int, aggregate: str) -> None:
    frames = iteration_frames({0: [float(v) for v in values]}, column="exposed_comm_ns")
    verdict = one({"metric": "exposed_comm_ns", "aggregate": aggregate, "max": limit}, frames)
    assert verdict.value is not None
    assert min(values) - 1e-9 <= verdict.value <= max(values) + 1e-9
    if aggregate == "max":
        assert verdict.value == max(values)
        assert (verdict.status == "fail") == any(v > limit for v in values)
    if aggregate == "mean":
        assert verdict.value == pytest.approx(statistics.fmean(values))
    assert (verdict.status == "fail") == (verdict.value > limit)
    assert verdict.worst is not None
    assert verdict.worst.value == max(values)  # the sample furthest past an upper limit


# --- regressions ----------------------------------------------------------------------------------------


def regression(
    entry: dict[str, object], new: MetricFrames, old: MetricFrames | None, metric: str = "exposed_comm_ns"
) -> Verdict:
    report = check([], new, regression={metric: entry}, baseline=old)
    return report.verdicts[0]


# a noisy baseline: alternating 50 / 250 ns → mean 150, s ≈ 103, standard error ≈ 26 (n = 16)
NOISY = {0: [50, 250] * 4, 1: [250, 50] * 4}


def test_each_aggregate_is_a_mean_a_median_or_one_value_for_the_noise_rule() -> None:
    assert NOISE_K == 3.0
    assert [statistic_of(a) for a in ("mean", "p50", "p90", "p99", "max", "min", "p10")] == [
        "mean",
        "median",
        *["value"] * 5,
    ]


def test_regression_within_noise_passes() -> None:
    old = run_frames(NOISY, label="old")
    new = run_frames({0: [80, 280] * 4, 1: [280, 80] * 4}, label="new")  # +30 ns: 20 %, past a 10 % tolerance
    verdict = regression({"relative": 0.10}, new, old)
    # each run: 16 samples, s = stdev of 50/250 alternating; a mean's standard error s / 4; the change's
    # standard error is √(se_old² + se_new²); flagged beyond 3 of them
    s = statistics.stdev([50, 250] * 8)
    assert statistics.stdev([80, 280] * 8) == pytest.approx(s)
    noise = math.sqrt(2 * (s / 4) ** 2)
    assert (verdict.status, verdict.value, verdict.baseline) == ("pass", 180, 150)
    assert verdict.tolerance == pytest.approx(15)
    assert verdict.noise == pytest.approx(noise)
    assert verdict.upper == pytest.approx(150 + 3 * noise)
    assert verdict.message == (
        f"exposed_comm_ns mean = 180 ns vs baseline 150 ns: worse by 30 ns, past the tolerance 15 "
        f"ns but within the noise threshold {3 * noise:.1f} ns (3 × the noise {noise:.1f} ns, the change's "
        "standard error): not flagged"
    )


def test_regression_with_too_few_samples_is_held_to_the_tolerance_alone() -> None:
    old = run_frames({0: [100, 300]}, label="old")  # 2 samples: the noise cannot be told
    worse = regression({"relative": 0.10}, run_frames({0: [150, 350]}), old)  # mean 200 → 250: +25 %
    assert (worse.status, worse.noise) == ("fail", None)
    assert worse.upper == pytest.approx(220)
    assert worse.message == (
        "exposed_comm_ns mean = 250 ns vs baseline 200 ns: worse by 50 ns, more than the tolerance 20 ns; "
        "the noise is unknown (fewer than 3 samples in a run): the tolerance alone decides"
    )
    within = regression({"relative": 0.30}, run_frames({0: [150, 350]}), old)
    assert within.status == "pass"
    assert within.upper == pytest.approx(260)
    assert within.message.endswith("worse by 50 ns, within the tolerance 60 ns")


def test_regression_beyond_noise_fails() -> None:
    old = run_frames(NOISY, label="old")
    new = run_frames({0: [200, 390] * 4, 1: [390, 200] * 4}, label="new")  # +145 ns
    verdict = regression({"relative": 0.10}, new, old)
    assert (verdict.status, verdict.value) == ("fail", 295)
    assert verdict.message.startswith(
        "exposed_comm_ns mean = 295 ns vs baseline 150 ns: worse by 145 ns, more than "
        "the tolerance 15 ns and the noise"
    )


def test_a_quiet_run_flags_a_small_regression() -> None:
    old = run_frames({0: [150] * 8, 1: [150] * 8})
    new = run_frames({0: [180] * 8, 1: [180] * 8})
    verdict = regression({"relative": 0.10}, new, old)
    assert (verdict.status, verdict.noise) == ("fail", 0.0)
    within = regression({"relative": 0.25}, new, old)
    assert within.status == "pass"
    assert (
        within.message
        == "exposed_comm_ns mean = 180 ns vs baseline 150 ns: worse by 30 ns, within the tolerance 37.5 ns"
    )
    absolute = regression({"absolute": 29}, new, old)
    assert absolute.status == "fail"
    improved = regression({"relative": 0.0}, old, new)
    assert (improved.status, improved.message) == (
        "pass",
        "exposed_comm_ns mean = 150 ns vs baseline 180 ns: better by 30 ns",
    )


def test_regression_of_a_higher_is_better_metric() -> None:
    old = run_frames({0: [0] * 6})  # hidden 100 / comm 100
    new = run_frames({0: [100] * 6})  # hidden 100 / comm 200
    verdict = regression({"absolute": 0.1}, new, old, metric="hidden_comm_ratio")
    assert (verdict.status, verdict.value, verdict.baseline) == ("fail", 0.5, 1.0)
    assert verdict.lower == pytest.approx(0.9)
    assert verdict.upper is None
    assert regression({"absolute": 0.1}, old, new, metric="hidden_comm_ratio").status == "pass"


def test_regression_per_rank() -> None:
    old = run_frames({0: [100] * 6, 1: [100] * 6})
    new = run_frames({0: [80] * 6, 1: [130] * 6})  # pooled mean 105: +5 %; rank 1: +30 %
    assert regression({"relative": 0.10}, new, old).status == "pass"
    verdict = regression({"relative": 0.10, "over": "rank"}, new, old)
    assert (verdict.status, verdict.value, verdict.baseline) == ("fail", 130, 100)
    assert verdict.message.startswith("exposed_comm_ns mean on rank 1 = 130 ns vs baseline 100 ns")
    other_ranks = run_frames({4: [100] * 6})
    assert regression({"relative": 0.1, "over": "rank"}, new, other_ranks).message == (
        "no data: no rank is in both the run and the baseline"
    )


def test_regression_without_baseline_is_skipped(run: MetricFrames) -> None:
    report = check([{"metric": "step_ns", "max": 1000}], run, regression={"step_ns": {"relative": 0.1}})
    assert [v.status for v in report.verdicts] == ["pass", "skip"]
    assert report.ok
    assert report.verdicts[1].message == "not checked: no --baseline given"


def test_regression_baseline_without_data(run: MetricFrames) -> None:
    verdict = regression({"relative": 0.1, "ranks": [1]}, run, run_frames({0: [1]}, label="old"))
    assert (verdict.status, verdict.message) == ("nodata", "no data: baseline: no rank 1 in old (ranks 0)")


def test_empty_trace_rows() -> None:
    frames = frames_of(run_events({0: [10]}), label="x")
    empty = MetricFrames(
        label="empty",
        iterations=frames.iterations.clear(),
        ranks=frames.ranks,
        collectives=frames.collectives,
    )
    assert one({"metric": "step_ns", "max": 1}, empty).message == "no data: empty has no iterations rows"


def test_ranks_source_metrics_are_supported(monkeypatch: pytest.MonkeyPatch, run: MetricFrames) -> None:
    from timeline.budgets import Metric, register_metric
    from timeline.budgets import metrics as metrics_module

    monkeypatch.setattr(metrics_module, "_REGISTRY", dict(metrics_module._REGISTRY))
    register_metric(
        Metric("trace_exposed_comm_ns", "whole trace", "ns", "ranks", expr=pl.col("exposed_comm_ns"))
    )
    verdict = one({"metric": "trace_exposed_comm_ns", "max": 1e9, "over": "rank"}, run)
    assert (verdict.value, verdict.samples) == (sum(RUN[1]), 1)
    with pytest.raises(BudgetError, match="measured over each rank's whole trace"):
        one({"metric": "trace_exposed_comm_ns", "max": 1, "skip_iterations": 1}, run)
