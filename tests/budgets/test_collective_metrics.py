"""Budgets on the collectives matched across ranks: skew, bandwidth, link utilisation, wait, stragglers.

Hand-computed synthetic runs (two ranks, one all-reduce per 1000 ns step, see ``runs.py``), the PARAM
8-rank DLRM set with the numbers of ``docs/collectives.md`` (first all-to-all start skew 7.624 ms,
every end skew ≤ 7 µs), the budget-file errors of the new keys, and ``timeline check --link-gbps``
through the real console script.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec
import polars as pl
import pytest
from typer.testing import CliRunner

from tests.budgets.runs import run_events
from tests.builders import REPO, TRACES, frames_of
from timeline import load
from timeline.analysis.collectives import match_collectives
from timeline.budgets import (
    MATCHED_SOURCES,
    Metric,
    MetricFrames,
    Verdict,
    check_links,
    evaluate_budgets,
    get_metric,
    parse_budgets,
    read_budget_file,
    register_metric,
    registered_metrics,
)
from timeline.budgets import metrics as metrics_module
from timeline.errors import BudgetError

PARAM = TRACES / "kineto" / "param_dlrm_8rank"
_SCRIPT = Path(sys.executable).parent / "timeline"
COMMAND = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-c", "from cli.main import main; main()"]

# exposed ns per iteration: every all-reduce starts at t + 500 on both ranks and ends at t + 600 + exposed,
# so per iteration the end skew is |e0 - e1|, the transfer 100 + min(e), and the later rank's wait |e0 - e1|.
RUN = {0: [100, 110, 120], 1: [390, 50, 60]}
BYTES = 1000  # per all-reduce; 2 ranks: bus factor 2(n-1)/n = 1, so busbw = algbw = 8 * 1000 / transfer_ns


def matched_run(*, in_bytes: int | None = BYTES) -> MetricFrames:
    events = run_events(RUN)
    if in_bytes is not None:
        comm = pl.col("kind") == "communication"
        events = events.with_columns(
            in_bytes=pl.when(comm).then(pl.lit(in_bytes)).cast(events.schema["in_bytes"]),
            group_size=pl.when(comm).then(pl.lit(2)).cast(events.schema["group_size"]),
        )
    return frames_of(events, label="run", matched=True)


@pytest.fixture(scope="module")
def run() -> MetricFrames:
    return matched_run()


@pytest.fixture(scope="module")
def param() -> MetricFrames:
    events = load(PARAM).events
    return frames_of(events, label="param", matched=True)


def check(
    budgets: list[dict[str, object]],
    frames: MetricFrames,
    *,
    link_gbps: float | None = None,
    top: Mapping[str, object] | None = None,
) -> list[Verdict]:
    document: dict[str, object] = {**(top or {}), "budgets": budgets}
    report = evaluate_budgets(parse_budgets(document, source="t.toml"), frames, link_gbps=link_gbps)
    return list(report.verdicts)


def one(budget: dict[str, object], frames: MetricFrames, **options: Any) -> Verdict:
    (verdict,) = check([budget], frames, **options)
    return verdict


# --- the registry ----------------------------------------------------------------------------------------

NEW_METRICS = {
    # name: (source, unit, better, needs_link, per_iteration)
    "collective_start_skew_ns": ("logical_collectives", "ns", "lower", False, False),
    "collective_end_skew_ns": ("logical_collectives", "ns", "lower", False, False),
    "collective_algbw_gbps": ("logical_collectives", "Gbit/s", "higher", False, False),
    "collective_busbw_gbps": ("logical_collectives", "Gbit/s", "higher", False, False),
    "collective_link_utilisation_ratio": ("logical_collectives", "ratio", "higher", True, False),
    "collective_wait_ns": ("collective_ranks", "ns", "lower", False, False),
    "collective_iteration_wait_ns": ("collective_ranks", "ns", "lower", False, True),
    "iteration_busbw_gbps": ("iteration_utilisation", "Gbit/s", "higher", False, False),
    "iteration_link_utilisation_ratio": ("iteration_utilisation", "ratio", "higher", True, False),
    "iteration_wait_ratio": ("straggler_iterations", "ratio", "lower", False, False),
    "straggler_share_ratio": ("straggler_iterations", "ratio", "lower", False, False),
}


def test_cross_rank_metrics_are_registered() -> None:
    for name, (source, unit, better, needs_link, per_iteration) in NEW_METRICS.items():
        metric = get_metric(name, where="x")
        assert (metric.source, metric.unit, metric.better, metric.needs_link, metric.per_iteration) == (
            source,
            unit,
            better,
            needs_link,
            per_iteration,
        ), name
        assert metric.matched
    matched = {m.name for m in registered_metrics() if m.matched}
    assert matched == set(NEW_METRICS)
    assert {m.source for m in registered_metrics() if m.matched} == MATCHED_SOURCES
    # bandwidth and utilisation improve upwards, everything else here downwards
    for name in NEW_METRICS:
        higher = "gbps" in name or "utilisation" in name
        assert get_metric(name, where="x").better == ("higher" if higher else "lower"), name


def test_per_iteration_needs_per_rank_collective_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics_module, "_REGISTRY", dict(metrics_module._REGISTRY))
    with pytest.raises(ValueError, match="per_iteration applies to collectives and collective_ranks"):
        register_metric(Metric("bad", "x", "ns", "logical_collectives", per_iteration=True))
    register_metric(Metric("ok", "x", "ns", "collective_ranks", expr=pl.col("dur_ns"), per_iteration=True))


# --- hand-computed on the synthetic run -------------------------------------------------------------------


def test_end_skew_per_logical_collective(run: MetricFrames) -> None:
    verdict = one({"metric": "collective_end_skew_ns", "max": 100}, run)
    assert (verdict.status, verdict.value, verdict.samples) == ("fail", 290, 3)
    assert verdict.worst is not None
    assert (verdict.worst.rank, verdict.worst.iteration, verdict.worst.collective) == (
        None,
        0,
        "all_reduce #0",
    )
    assert verdict.message == (
        "collective_end_skew_ns max = 290 ns > max 100 ns; worst sample iteration 0, all_reduce #0: 290 ns"
    )
    skipped = one({"metric": "collective_end_skew_ns", "max": 100, "skip_iterations": 1}, run)
    assert (skipped.status, skipped.value, skipped.samples) == ("pass", 60, 2)
    assert one({"metric": "collective_start_skew_ns", "max": 0}, run).status == "pass"


def test_bandwidth_and_utilisation(run: MetricFrames) -> None:
    # transfers 200, 150, 160 ns: busbw = 8000 / transfer Gbit/s = 40, 53.3, 50
    busbw = one({"metric": "collective_busbw_gbps", "min": 45}, run)
    assert (busbw.status, busbw.value) == ("fail", 40)
    assert busbw.message.startswith(
        "collective_busbw_gbps min = 40.00 Gbit/s < min 45.00 Gbit/s; worst sample"
    )
    mean = one({"metric": "collective_algbw_gbps", "aggregate": "mean", "min": 45}, run)
    assert mean.value == pytest.approx((40 + 8000 / 150 + 50) / 3)
    assert mean.status == "pass"
    per_iteration = one({"metric": "iteration_busbw_gbps", "min": 40, "skip_iterations": 1}, run)
    assert (per_iteration.status, per_iteration.value) == ("pass", 50)
    link = one({"metric": "iteration_link_utilisation_ratio", "min": 0.45}, run, link_gbps=100)
    assert (link.status, link.value, link.link_gbps) == ("fail", 0.4, 100)
    assert link.message.startswith("iteration_link_utilisation_ratio min against a 100 Gbit/s link = 40.00%")
    collective = one({"metric": "collective_link_utilisation_ratio", "max": 0.6}, run, link_gbps=100)
    assert collective.status == "pass"
    assert collective.value == pytest.approx(8000 / 150 / 100)


def test_wait_per_rank_and_per_iteration(run: MetricFrames) -> None:
    # rank 1 waits 290 ns in iteration 0; rank 0 waits 60 ns in iterations 1 and 2
    worst = one({"metric": "collective_wait_ns", "over": "rank", "max": 100}, run)
    assert (worst.status, worst.value) == ("fail", 290)
    assert worst.worst is not None
    assert (worst.worst.rank, worst.worst.iteration, worst.worst.collective) == (1, 0, "all_reduce #0")
    rank0 = one({"metric": "collective_wait_ns", "ranks": 0, "aggregate": "mean", "max": 40}, run)
    assert (rank0.status, rank0.value, rank0.samples) == ("pass", 40, 3)
    summed = one(
        {"metric": "collective_iteration_wait_ns", "over": "rank", "aggregate": "mean", "max": 50}, run
    )
    assert summed.status == "fail"
    assert summed.value == pytest.approx(290 / 3)
    assert summed.worst is not None
    assert (summed.worst.rank, summed.worst.collective) == (1, "all_reduce")
    later = one({"metric": "collective_iteration_wait_ns", "max": 60, "skip_iterations": 1}, run)
    assert (later.status, later.value, later.samples) == ("pass", 60, 4)


def test_straggler_metrics(run: MetricFrames) -> None:
    # iteration 0: mean wait (290 + 0) / 2 = 145 ns against a 200 ns transfer
    wait = one({"metric": "iteration_wait_ratio", "max": 0.4}, run)
    assert wait.status == "fail"
    assert wait.value == pytest.approx(145 / 345, abs=1e-6)
    # only iteration 0 has a rank that caused wait: rank 1's all of it
    share = one({"metric": "straggler_share_ratio", "max": 0.5}, run)
    assert (share.status, share.value, share.samples) == ("fail", 1.0, 1)


def test_scopes_of_logical_collectives(run: MetricFrames) -> None:
    assert one({"metric": "collective_end_skew_ns", "max": 300, "pg_name": "0"}, run).status == "pass"
    missing = one({"metric": "collective_end_skew_ns", "max": 300, "pg_name": "7"}, run)
    assert (missing.status, missing.message) == (
        "nodata",
        "no data: no process group 7 in run (process groups: 0)",
    )
    other = one({"metric": "collective_end_skew_ns", "max": 300, "collective": "all_to_all"}, run)
    assert other.message == "no data: no collective all_to_all in run (collectives: all_reduce)"


def test_unknown_bytes_have_no_bandwidth() -> None:
    frames = matched_run(in_bytes=None)
    verdict = one({"metric": "collective_busbw_gbps", "min": 1}, frames)
    assert (verdict.status, verdict.message) == (
        "nodata",
        "no data: collective_busbw_gbps is unknown on every selected row",
    )
    # the skews need no bytes
    assert one({"metric": "collective_end_skew_ns", "max": 300}, frames).status == "pass"


def test_link_precedence(run: MetricFrames) -> None:
    budget: dict[str, object] = {"metric": "iteration_link_utilisation_ratio", "min": 0.1}
    # the file's top-level link, then --link-gbps, then the entry's own
    assert one(budget, run, top={"link_gbps": "400GbE"}).link_gbps == 400
    assert one(budget, run, top={"link_gbps": "400GbE"}, link_gbps=100).link_gbps == 100
    own = one({**budget, "link_gbps": "nvlink4"}, run, top={"link_gbps": 400}, link_gbps=100)
    assert own.link_gbps == 3600
    assert own.value == pytest.approx(40 / 3600)


def test_missing_link_is_bad_input(run: MetricFrames) -> None:
    budgets = parse_budgets(
        {
            "budgets": [
                {"metric": "step_ns", "max": 1},
                {"metric": "collective_link_utilisation_ratio", "min": 0.1},
            ]
        },
        source="timeline.toml",
    )
    message = (
        "timeline.toml:budgets[1]: collective_link_utilisation_ratio needs the link's bandwidth; set "
        "link_gbps = ... (Gbit/s or a preset such as '100gbe') in the entry or at the top of timeline.toml, "
        "or pass --link-gbps"
    )
    with pytest.raises(BudgetError) as info:
        check_links(budgets)
    assert str(info.value) == message
    with pytest.raises(BudgetError) as info:
        evaluate_budgets(budgets, run)
    assert str(info.value) == message
    assert check_links(budgets, link_gbps=25) == {"timeline.toml:budgets[1]": 25}


def test_frames_without_matching(run: MetricFrames) -> None:
    plain = frames_of(run_events(RUN), label="plain")
    assert not plain.matched
    assert run.matched
    with pytest.raises(
        BudgetError, match=r"t\.toml:budgets\[0\]: collective_wait_ns needs the collectives matched"
    ):
        one({"metric": "collective_wait_ns", "max": 1}, plain)
    # what frames_from_summary gives: no per-collective rows
    summary = MetricFrames(label="base.json", iterations=plain.iterations, ranks=plain.ranks)
    with pytest.raises(BudgetError) as info:
        one({"metric": "iteration_wait_ratio", "max": 1}, summary)
    assert str(info.value) == (
        "t.toml:budgets[0]: iteration_wait_ratio needs the collectives matched across ranks, which a summary "
        "JSON (base.json) does not keep; pass the trace or its Parquet file instead"
    )


def test_needs_matching() -> None:
    budgets = parse_budgets(
        {
            "budgets": [{"metric": "exposed_comm_ratio", "max": 1}],
            "regression": {"collective_wait_ns": {"relative": 0.1}},
        }
    )
    assert budgets.needs_matching()
    assert budgets.needs_matching(regressions_only=True)
    assert not budgets.needs_link()
    plain = parse_budgets({"budgets": [{"metric": "collective_exposed_ns", "max": 1}]})
    assert not plain.needs_matching()


def test_horovod_timeline_alone_has_no_matched_collectives() -> None:
    events = load(TRACES / "horovod" / "smdebug__horovod_timeline_small.json").events
    frames = frames_of(events, label="hvd", matched=True)
    verdict = one({"metric": "collective_start_skew_ns", "max": 1}, frames)
    assert (verdict.status, verdict.message) == (
        "nodata",
        "no data: no collectives matched across ranks in hvd (a Horovod timeline alone has none)",
    )


# --- the PARAM 8-rank set (docs/collectives.md, "Measured on the reference traces") ----------------------


def test_param_start_skew(param: MetricFrames) -> None:
    failing = one({"metric": "collective_start_skew_ns", "max": 5_000_000}, param)
    assert (failing.status, failing.value, failing.samples) == ("fail", 7_624_000, 8)
    assert failing.worst is not None
    assert (failing.worst.iteration, failing.worst.collective) == (10, "all_to_all #0")
    assert failing.message == (
        "collective_start_skew_ns max = 7.62 ms > max 5.00 ms; "
        "worst sample iteration 10, all_to_all #0: 7.62 ms"
    )
    assert one({"metric": "collective_start_skew_ns", "max": 8_000_000}, param).status == "pass"
    # without the first all-to-all's arrival of rank 7, every all-reduce arrived within 1 ms
    reduce = one({"metric": "collective_start_skew_ns", "collective": "all_reduce", "max": 1_000_000}, param)
    assert (reduce.status, reduce.value, reduce.samples) == ("pass", 885_000, 3)


def test_param_end_skew(param: MetricFrames) -> None:
    holds = one({"metric": "collective_end_skew_ns", "max": 7_000}, param)
    assert (holds.status, holds.value) == ("pass", 7_000)
    tight = one({"metric": "collective_end_skew_ns", "max": 6_999}, param)
    assert tight.status == "fail"
    assert tight.worst is not None
    assert tight.worst.collective == "all_reduce #7"


def test_param_bus_bandwidth(param: MetricFrames) -> None:
    # all-reduces: 256.7, 0.31 and 184.2 Gbit/s
    median = one(
        {"metric": "collective_busbw_gbps", "collective": "all_reduce", "aggregate": "p50", "min": 100}, param
    )
    assert median.status == "pass"
    assert median.value == pytest.approx(184.19942, rel=1e-6)
    every = one({"metric": "collective_busbw_gbps", "collective": "all_reduce", "min": 100}, param)
    assert every.status == "fail"
    assert every.value == pytest.approx(0.3136)
    assert every.worst is not None
    assert every.worst.collective == "all_reduce #6"


def test_param_link_utilisation(param: MetricFrames) -> None:
    # the iteration's bus bandwidth is 162.4 Gbit/s: 41 % of 400 Gbit/s, 16 % of 1000
    budget: dict[str, object] = {"metric": "iteration_link_utilisation_ratio", "min": 0.4}
    passing = one(budget, param, link_gbps=400)
    assert passing.status == "pass"
    assert passing.value == pytest.approx(162.417806 / 400, rel=1e-6)
    assert one(budget, param, link_gbps=1000).status == "fail"


def test_param_wait_per_rank(param: MetricFrames) -> None:
    expected = (
        param.collective_ranks.group_by("rank")  # type: ignore[union-attr]
        .agg(pl.col("wait_ns").sum())
        .sort("rank")
        .get_column("wait_ns")
        .to_list()
    )
    assert expected == [
        5_581_000,
        11_119_000,
        3_275_000,
        9_557_000,
        6_370_000,
        6_034_000,
        3_341_000,
        1_529_000,
    ]
    per_rank = one({"metric": "collective_iteration_wait_ns", "over": "rank", "max": 10_000_000}, param)
    assert (per_rank.status, per_rank.value) == ("fail", 11_119_000)
    assert per_rank.worst is not None
    assert (per_rank.worst.rank, per_rank.worst.iteration) == (1, 10)
    last = one({"metric": "collective_iteration_wait_ns", "ranks": [7], "max": 2_000_000}, param)
    assert (last.status, last.value) == ("pass", 1_529_000)
    # rank 1 arrived first at the first all-to-all, 7.624 ms before rank 7, and ended 2 µs after the
    # first end: 7.635 ms in it, of which 10 µs transfer
    single = one(
        {"metric": "collective_wait_ns", "ranks": [1], "collective": "all_to_all", "max": 8_000_000}, param
    )
    assert (single.status, single.value) == ("pass", 7_625_000)
    assert single.worst is not None
    assert single.worst.collective == "all_to_all #0"
    # rank 7 arrived last at the first all-to-all: it waited no more than the transfer
    assert one({"metric": "collective_wait_ns", "ranks": 7, "max": 0, "aggregate": "min"}, param).value == 0


def test_param_stragglers(param: MetricFrames) -> None:
    # rank 7 caused 76 % of the wait: the slow_rank verdict
    share = one({"metric": "straggler_share_ratio", "max": 0.5}, param)
    assert share.status == "fail"
    assert share.value == pytest.approx(0.759368, abs=1e-6)
    wait = one({"metric": "iteration_wait_ratio", "max": 0.99}, param)
    assert wait.status == "pass"
    assert wait.value == pytest.approx(0.964237, abs=1e-6)


# --- budget-file errors of the new keys -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            'link_gbps = "fast"\n[[budgets]]\nmetric = "step_ns"\nmax = 1\n',
            "timeline.toml:link_gbps: 'fast' is not a positive bandwidth; give Gbit/s "
            "(100, '25G', '12.5GB/s') or a preset ('100gbe', 'ib-hdr', 'nvlink4'; "
            "see docs/collectives.md#link-utilisation)",
            id="top-link-unknown",
        ),
        pytest.param(
            'link_gbps = "0G"\n[[budgets]]\nmetric = "step_ns"\nmax = 1\n',
            "timeline.toml:link_gbps: '0G' is not a positive bandwidth; give Gbit/s (100, '25G', '12.5GB/s') "
            "or a preset ('100gbe', 'ib-hdr', 'nvlink4'; see docs/collectives.md#link-utilisation)",
            id="top-link-zero-string",
        ),
        pytest.param(
            'link_gbps = -100\n[[budgets]]\nmetric = "step_ns"\nmax = 1\n',
            "timeline.toml:link_gbps: the bandwidth must be a positive number of Gbit/s, got -100",
            id="top-link-negative",
        ),
        pytest.param(
            'link_gbps = true\n[[budgets]]\nmetric = "step_ns"\nmax = 1\n',
            "timeline.toml:link_gbps: must be Gbit/s (a number) or a string such as '100GbE', got true",
            id="top-link-bool",
        ),
        pytest.param(
            '[[budgets]]\nmetric = "iteration_link_utilisation_ratio"\nmin = 0.5\n'
            'link_gbps = "10 furlongs"\n',
            "timeline.toml:budgets[0].link_gbps: '10 furlongs' is not a positive bandwidth; give Gbit/s "
            "(100, '25G', '12.5GB/s') or a preset ('100gbe', 'ib-hdr', 'nvlink4'; "
            "see docs/collectives.md#link-utilisation)",
            id="entry-link-unknown",
        ),
        pytest.param(
            '[[budgets]]\nmetric = "collective_busbw_gbps"\nmin = 10\nlink_gbps = 100\n',
            "timeline.toml:budgets[0].link_gbps: applies to the link utilisation metrics "
            "(collective_link_utilisation_ratio, iteration_link_utilisation_ratio), "
            "not to collective_busbw_gbps",
            id="entry-link-on-other-metric",
        ),
        pytest.param(
            "[regression]\ncollective_link_utilisation_ratio = { relative = 0.1, link_gbps = [100] }\n",
            "timeline.toml:regression.collective_link_utilisation_ratio.link_gbps: must be Gbit/s (a number) "
            "or a string such as '100GbE', got [100]",
            id="regression-link-type",
        ),
        pytest.param(
            '[[budgets]]\nmetric = "collective_start_skew_ns"\nmax = 1\nover = "rank"\n',
            "timeline.toml:budgets[0].over: collective_start_skew_ns is measured across ranks "
            "(one sample per logical collective), not per rank; leave out over",
            id="over-rank-across-ranks",
        ),
        pytest.param(
            "[regression]\niteration_wait_ratio = { relative = 0.1, over = 'rank' }\n",
            "timeline.toml:regression.iteration_wait_ratio.over: iteration_wait_ratio is measured "
            "across ranks (one sample per iteration), not per rank; leave out over",
            id="regression-over-rank",
        ),
        pytest.param(
            '[[budgets]]\nmetric = "iteration_busbw_gbps"\nmin = 1\nranks = [0, 1]\n',
            "timeline.toml:budgets[0].ranks: iteration_busbw_gbps is measured across ranks (one sample per "
            "iteration); it cannot be limited to some ranks",
            id="ranks-across-ranks",
        ),
        pytest.param(
            '[[budgets]]\nmetric = "straggler_share_ratio"\nmax = 0.5\ncollective = "all_reduce"\n',
            "timeline.toml:budgets[0].collective: applies to collective metrics (collective_dur_ns, "
            "collective_exposed_ns, collective_exposed_ratio, collective_iteration_dur_ns, "
            "collective_iteration_exposed_ns, collective_start_skew_ns, collective_end_skew_ns, "
            "collective_algbw_gbps, collective_busbw_gbps, collective_link_utilisation_ratio, "
            "collective_wait_ns, collective_iteration_wait_ns), not to straggler_share_ratio",
            id="collective-on-iteration-metric",
        ),
        pytest.param(
            '[[budgets]]\nmetric = "collective_link_utilisation_ratio"\nmin = 50\n',
            "timeline.toml:budgets[0].min: a ratio limit is a fraction in [0, 1], got 50; write 0.5 for 50%",
            id="utilisation-percent",
        ),
    ],
)
def test_budget_file_errors(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "timeline.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(BudgetError) as info:
        read_budget_file(path)
    assert str(info.value) == message.replace("timeline.toml", str(path), 1)


def test_pyproject_link(tmp_path: Path) -> None:
    path = tmp_path / "pyproject.toml"
    path.write_text(
        '[tool.timeline]\nlink_gbps = "ib-hdr"\n\n[[tool.timeline.budgets]]\n'
        'metric = "iteration_link_utilisation_ratio"\nmin = 0.5\n',
        encoding="utf-8",
    )
    assert read_budget_file(path).link_gbps == 200
    path.write_text('[tool.timeline]\nlink_gbps = "x"\n', encoding="utf-8")
    with pytest.raises(
        BudgetError, match=r"pyproject\.toml:tool\.timeline\.link_gbps: 'x' is not a positive"
    ):
        read_budget_file(path)


def test_documented_link_example(param: MetricFrames) -> None:
    text = (REPO / "docs" / "ci.md").read_text(encoding="utf-8")
    match = re.search(r"```toml\n(link_gbps = .*?)```", text, flags=re.DOTALL)
    assert match is not None, "docs/ci.md lost its link_gbps example"
    budgets = parse_budgets(tomllib.loads(match.group(1)), source="timeline.toml")
    assert budgets.link_gbps == 100
    assert [b.metric.name for b in budgets.budgets] == [
        "collective_busbw_gbps",
        "iteration_link_utilisation_ratio",
        "collective_link_utilisation_ratio",
        "collective_start_skew_ns",
    ]
    assert budgets.budgets[2].link_gbps == 3600
    report = evaluate_budgets(budgets, param)
    # PARAM has no process group names (nodata for the NVLink entry) and a single iteration (skipped)
    assert [v.status for v in report.verdicts] == ["pass", "nodata", "nodata", "fail"]


# --- through the command line ----------------------------------------------------------------------------


def timeline(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*COMMAND, *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "200"},
        check=False,
    )


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


SKEW = """\
[[budgets]]
name = "ranks arrive together"
metric = "collective_start_skew_ns"
max = {max}

[[budgets]]
name = "collectives end together"
metric = "collective_end_skew_ns"
max = 7_000
"""

UTILISATION = """\
[[budgets]]
name = "network use"
metric = "iteration_link_utilisation_ratio"
min = 0.4
"""


@pytest.mark.parametrize(("limit", "code"), [(5_000_000, 1), (8_000_000, 0)])
def test_cli_skew_budget(tmp_path: Path, limit: int, code: int) -> None:
    write(tmp_path / "timeline.toml", SKEW.format(max=limit))
    result = timeline("check", PARAM, "--json", cwd=tmp_path)
    assert result.returncode == code, result.stdout + result.stderr
    assert result.stderr == ""
    report = msgspec.json.decode(result.stdout)
    start, end = report["verdicts"]
    assert (start["status"], start["value"]) == ("fail" if code else "pass", 7_624_000)
    assert start["worst"] == {
        "rank": None,
        "iteration": 10,
        "collective": "all_to_all #0",
        "value": 7_624_000,
    }
    assert (end["status"], end["value"]) == ("pass", 7_000)


def test_cli_link_gbps(tmp_path: Path) -> None:
    write(tmp_path / "timeline.toml", UTILISATION)
    passing = timeline("check", PARAM, "--link-gbps", "400GbE", cwd=tmp_path)
    assert passing.returncode == 0, passing.stdout + passing.stderr
    assert passing.stdout.splitlines()[0] == "timeline check: 1 check, all hold"
    assert "iteration_link_utilisation_ratio min" in passing.stdout
    failing = timeline("check", PARAM, "--link-gbps", "1.6Tbps", cwd=tmp_path)
    assert failing.returncode == 1
    assert (
        "FAIL network use: iteration_link_utilisation_ratio min against a 1600 Gbit/s link = 10.15% "
        "< min 40.00%" in failing.stdout
    )
    # the file's link, overridden by --link-gbps
    write(tmp_path / "timeline.toml", 'link_gbps = "1.6Tbps"\n' + UTILISATION)
    assert timeline("check", PARAM, cwd=tmp_path).returncode == 1
    assert timeline("check", PARAM, "--link-gbps", "400", cwd=tmp_path).returncode == 0


def test_cli_link_errors(tmp_path: Path) -> None:
    write(tmp_path / "timeline.toml", UTILISATION)
    # a missing link stops before the (here missing) traces are read
    result = timeline("check", tmp_path / "missing", cwd=tmp_path)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "error: timeline.toml:budgets[0]: iteration_link_utilisation_ratio needs the link's bandwidth; set "
        "link_gbps = ... (Gbit/s or a preset such as '100gbe') in the entry or at the top of timeline.toml, "
        "or pass --link-gbps\n"
    )
    bad = timeline("check", PARAM, "--link-gbps", "fast", cwd=tmp_path)
    assert (bad.returncode, bad.stdout) == (2, "")
    assert bad.stderr.startswith("error: --link-gbps 'fast': not a bandwidth; give Gbit/s")
    assert bad.stderr.count("\n") == 1
    write(tmp_path / "timeline.toml", 'link_gbps = "fast"\n' + UTILISATION)
    in_file = timeline("check", PARAM, cwd=tmp_path)
    assert (in_file.returncode, in_file.stdout) == (2, "")
    assert in_file.stderr.startswith("error: timeline.toml:link_gbps: 'fast' is not a positive bandwidth; ")
    assert in_file.stderr.count("\n") == 1


def test_cli_unused_link_warns(tmp_path: Path) -> None:
    write(tmp_path / "timeline.toml", SKEW.format(max=8_000_000))
    result = timeline("check", PARAM, "--link-gbps", "100", cwd=tmp_path)
    assert result.returncode == 0
    assert result.stderr == "warning: timeline.toml has no link utilisation budget; --link-gbps is not used\n"


def test_cli_summary_baseline_for_matched_regression(tmp_path: Path) -> None:
    analyze = timeline("analyze", PARAM, "--json", cwd=tmp_path)
    assert analyze.returncode == 0, analyze.stderr
    (tmp_path / "base.json").write_text(analyze.stdout, encoding="utf-8")
    write(tmp_path / "timeline.toml", "[regression]\ncollective_busbw_gbps = { relative = 0.1 }\n")
    result = timeline("check", PARAM, "--baseline", "base.json", cwd=tmp_path)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "error: timeline.toml:regression.collective_busbw_gbps: collective_busbw_gbps needs the collectives "
        "matched across ranks, which a summary JSON (base.json) does not keep; pass the trace or its Parquet "
        "file instead\n"
    )
    same = timeline("check", PARAM, "--baseline", PARAM, cwd=tmp_path)
    assert same.returncode == 0, same.stdout + same.stderr
    assert "collective_busbw_gbps mean vs baseline" in same.stdout


def test_cli_matches_only_when_a_budget_needs_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cli.main import app

    calls: list[int] = []
    real = match_collectives

    def counting(events: pl.DataFrame, **options: Any) -> Any:
        calls.append(events.height)
        return real(events, **options)

    monkeypatch.setattr("timeline.analysis.collectives.match_collectives", counting)
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "timeline.toml", "[[budgets]]\nmetric = 'exposed_comm_ratio'\nmax = 1\n")
    runner = CliRunner()
    plain = runner.invoke(app, ["check", str(PARAM), "--baseline", str(PARAM)])
    assert plain.exit_code == 0, plain.output
    assert calls == []
    # a matched budget and a plain regression: the run is matched, the baseline is not
    write(
        tmp_path / "timeline.toml",
        SKEW.format(max=8_000_000) + "\n[regression]\nexposed_comm_ratio = { relative = 0.1 }\n",
    )
    matched = runner.invoke(app, ["check", str(PARAM), "--baseline", str(PARAM)])
    assert matched.exit_code == 0, matched.output
    assert len(calls) == 1
