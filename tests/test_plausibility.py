"""Plausibility checks of a loaded trace (#19): rows no profiler wrote, steps counted twice, clocks apart.

Each case is a trace the test builds with one hostile part, read on both roads: in memory and rank by
rank (``Inputs(executor="local")``). Where rows are left out, the figures are compared with a naive
computation on the rows kept (the GEMMs and all-reduces the builder wrote), and the warning names
the file and the rank.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.builders import (
    EPOCH_US,
    NCCL_KERNEL,
    STEP_US,
    TRACES,
    gpu_kernel,
    gpu_run_kineto,
    profiler_step,
    run_timeline,
    write_horovod_run_kineto,
    write_horovod_run_timeline,
    write_json,
)
from timeline.errors import RankError, TimelineError
from timeline.results.collectives import build_collectives_report
from timeline.run import Inputs, Run, RunOptions
from timeline.trace import load

ROADS = ("memory", "by_rank")
US = 1_000  # ns
YEAR_US = 365 * 86_400 * 1_000_000


def _analyse(paths: list[Path], road: str, **options: Any) -> Run:
    """Analyse ``paths`` in memory or rank by rank (the policy forced with ``executor="local"``)."""
    inputs = Inputs(paths=[str(p) for p in paths], executor="local" if road == "by_rank" else None, **options)
    analysed = Run(inputs).read()
    assert analysed.rank_by_rank == (road == "by_rank")
    return analysed


def _union(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _length(intervals: list[tuple[int, int]]) -> int:
    return sum(end - start for start, end in _union(intervals))


def _naive(doc: dict[str, Any], *, kept: set[str] | None = None) -> dict[str, int]:
    """Whole-trace figures of a rank from its kernels alone (``kept``: the names of the kernels kept)."""
    comm: list[tuple[int, int]] = []
    compute: list[tuple[int, int]] = []
    base = doc.get("baseTimeNanoseconds", 0)
    for record in doc["traceEvents"]:
        if record.get("cat") != "kernel" or (kept is not None and record["name"] not in kept):
            continue
        span = (base + round(record["ts"] * US), base + round((record["ts"] + record["dur"]) * US))
        (comm if record["name"].startswith("nccl") else compute).append(span)
    every = comm + compute
    hidden = _length(comm) + _length(compute) - _length(every)
    return {
        "step_ns": max(e for _, e in every) - min(s for s, _ in every),
        "comm_ns": _length(comm),
        "compute_ns": _length(compute),
        "hidden_comm_ns": hidden,
        "exposed_comm_ns": _length(comm) - hidden,
    }


def _rank_row(analysed: Run, rank: int) -> dict[str, int]:
    row = analysed.overlap.ranks.filter(pl.col("rank") == rank).row(0, named=True)
    return {k: row[k] for k in ("step_ns", "comm_ns", "compute_ns", "hidden_comm_ns", "exposed_comm_ns")}


# --- times outside the trace ---------------------------------------------------------------------------

OUTSIDE = {
    "100 years ahead": gpu_kernel("late_kernel", EPOCH_US + 100 * YEAR_US, 5),
    "negative ts": gpu_kernel("late_kernel", -1_000, 5),
}


@pytest.mark.parametrize("road", ROADS)
@pytest.mark.parametrize("case", sorted(OUTSIDE))
def test_a_time_far_outside_the_trace_is_left_out_with_a_warning(
    tmp_path: Path, case: str, road: str
) -> None:
    doc = gpu_run_kineto(0, extra=[OUTSIDE[case]])
    rank0 = write_json(tmp_path / "rank0.json", doc)
    write_json(tmp_path / "rank1.json", gpu_run_kineto(1))
    analysed = _analyse([tmp_path], road)
    assert analysed.warnings == (
        f"{rank0}: rank 0: left out 1 event(s) starting more than 1 day from the median start of the "
        "rank's events (corrupt timestamps)",
    )
    expected = _naive(doc, kept={"volta_sgemm_128x64_nn", NCCL_KERNEL})
    assert _rank_row(analysed, 0) == expected == _rank_row(analysed, 1)
    assert expected["step_ns"] == (2 * STEP_US + 650 - 100) * US  # the three steps, not 1e18 ns


def test_analyze_json_carries_the_warning_and_the_kept_rows_figures(tmp_path: Path) -> None:
    doc = gpu_run_kineto(0, world_size=1, extra=[OUTSIDE["negative ts"]])
    path = write_json(tmp_path / "rank0.json", doc)
    result = run_timeline("analyze", "--json", path)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    line = f"{path}: rank 0: left out 1 event(s) starting more than 1 day from the median start"
    assert [w for w in summary["warnings"] if w.startswith(line)] == summary["warnings"]
    assert len(summary["warnings"]) == 1
    assert result.stderr.count(f"warning: {line}") == 1
    row = summary["ranks"][0]
    expected = _naive(doc, kept={"volta_sgemm_128x64_nn", NCCL_KERNEL})
    expected["span_ns"] = expected.pop("step_ns")  # a rank's whole trace: the span of its iterations
    assert {k: row[k] for k in expected} == expected


def test_a_multi_day_trace_keeps_its_days(tmp_path: Path) -> None:
    """Outside means beyond ten interquartile ranges too: a timeline of a week-long run keeps every event."""
    day_us = 86_400 * 1_000_000
    extra = [gpu_kernel("volta_sgemm_128x64_nn", EPOCH_US + d * day_us, 5) for d in range(1, 8)]
    path = write_json(tmp_path / "rank0.json", gpu_run_kineto(0, world_size=1, extra=extra))
    trace = load(path)
    assert trace.warnings == ()
    assert trace.events.filter(pl.col("kind") == "compute").height == 3 + 7


# --- durations longer than the trace --------------------------------------------------------------------


@pytest.mark.parametrize("road", ROADS)
def test_a_duration_longer_than_the_trace_is_left_out(tmp_path: Path, road: str) -> None:
    # 100 s long in a 2.55 ms trace; a second one, to show each is measured against the starts
    extra = [
        gpu_kernel("stuck_kernel", EPOCH_US + 10, 100e6),
        gpu_kernel("stuck_kernel", EPOCH_US + 20, 200e6),
    ]
    doc = gpu_run_kineto(0, world_size=1, extra=extra)
    path = write_json(tmp_path / "rank0.json", doc)
    analysed = _analyse([path], road)
    assert analysed.warnings == (
        f"{path}: rank 0: left out 2 event(s) longer than 1.000 s (10 times the span of the rank's event "
        "starts, at least 1 s): durations the trace cannot hold",
    )
    assert _rank_row(analysed, 0) == _naive(doc, kept={"volta_sgemm_128x64_nn", NCCL_KERNEL})
    assert analysed.overlap.iterations.get_column("iteration").to_list() == [1, 2, 3]


@pytest.mark.parametrize(
    "folder", ["hta_trace_filter_2rank", "param_dlrm_8rank", "hta_negative_queue_length"]
)
def test_real_traces_lose_nothing(folder: str) -> None:
    """The profiler's own span is up to 1.7 times the span of starts (sampled traces): never left out."""
    trace = load(TRACES / "kineto" / folder)
    assert trace.warnings == ()
    assert trace.clock_note is None
    profiler_spans = trace.events.filter(pl.col("name").cast(pl.String).str.starts_with("PyTorch Profiler"))
    assert profiler_spans.height == trace.files.height  # one per file, each kept


# --- clocks that disagree ------------------------------------------------------------------------------


def _relative_run(tmp_path: Path) -> tuple[Path, Path]:
    """Rank 0 on the epoch clock; rank 1 relative (no baseTimeNanoseconds, µs from its start)."""
    rank0 = write_json(tmp_path / "rank0.json", gpu_run_kineto(0))
    rank1 = write_json(tmp_path / "rank1.json", gpu_run_kineto(1, base_us=1_000))
    return rank0, rank1


@pytest.mark.parametrize("road", ROADS)
def test_clocks_with_different_origins_give_no_skew_and_no_straggler(tmp_path: Path, road: str) -> None:
    rank0, rank1 = _relative_run(tmp_path)
    analysed = _analyse([tmp_path], road)
    assert analysed.warnings == (
        f"{rank1}: its times count from an unknown origin (no baseTimeNanoseconds or timeline header) but "
        f"those of {rank0} from the Unix epoch: the ranks' clocks are not comparable; skews, arrival order "
        "and stragglers across ranks are left out "
        "(--align puts every rank on one clock from their collectives)",
    )
    report = build_collectives_report(analysed)
    assert len(report.collectives) == 3
    for row in report.collectives:
        assert (row.start_skew_ns, row.end_skew_ns, row.last_rank) == (None, None, None)
        assert row.transfer_ns == 200 * US  # measured on each rank's own clock: kept
    assert (report.stragglers.iterations, report.stragglers.ranks) == ([], [])
    assert all(r.arrival_lag_ns is None for r in report.collective_ranks)
    # each rank's own figures are untouched
    assert _rank_row(analysed, 0) == _rank_row(analysed, 1) == _naive(gpu_run_kineto(0))


def test_collectives_command_says_so_instead_of_a_skew_of_years(tmp_path: Path) -> None:
    _, rank1 = _relative_run(tmp_path)
    result = run_timeline("collectives", tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr.startswith(f"warning: {rank1}: its times count from an unknown origin")
    assert "the ranks' clocks are not comparable" in result.stderr
    assert "slow link" not in result.stdout
    assert "1699999999" not in result.stdout  # no skew of 1.7e9 s


@pytest.mark.parametrize("road", ROADS)
def test_align_puts_the_clocks_together(tmp_path: Path, road: str) -> None:
    _relative_run(tmp_path)
    inputs = Inputs(paths=[str(tmp_path)], executor="local" if road == "by_rank" else None)
    analysed = Run(inputs, RunOptions(align=True))
    assert analysed.trace.clock_note is None
    report = build_collectives_report(analysed)
    assert all(row.start_skew_ns is not None and abs(row.start_skew_ns) < 1_000 for row in report.collectives)
    assert report.stragglers.iterations


@pytest.mark.parametrize("road", ROADS)
def test_ranks_hours_apart_are_not_on_one_clock(tmp_path: Path, road: str) -> None:
    rank0 = write_json(tmp_path / "rank0.json", gpu_run_kineto(0))
    rank1 = write_json(tmp_path / "rank1.json", gpu_run_kineto(1, base_us=EPOCH_US + 2 * 3_600_000_000))
    analysed = _analyse([tmp_path], road)
    assert analysed.warnings == (
        f"{rank1}: rank 1's events start 2.0 h after those of rank 0 ({rank0}) end: the ranks' clocks "
        "disagree (more than 1.0 h apart); skews, arrival order and stragglers across ranks are left out "
        "(--align puts every rank on one clock from their collectives)",
    )
    report = build_collectives_report(analysed)
    assert report.stragglers.ranks == []


@pytest.mark.parametrize("road", ROADS)
def test_a_horovod_timeline_on_a_relative_clock_beside_an_epoch_trace(tmp_path: Path, road: str) -> None:
    write_horovod_run_kineto(tmp_path / "rank0.json")
    timeline = tmp_path / "horovod_timeline.json"
    write_horovod_run_timeline(timeline, header=False)  # v0.9-v0.15: µs from the timeline's start
    analysed = _analyse([tmp_path], road)
    assert analysed.trace.warnings[-1].startswith(f"{timeline}: its times count from an unknown origin")
    assert analysed.trace.warnings[-1].endswith(
        "from the Unix epoch: the ranks' clocks are not comparable; "
        + (
            "skews, arrival order and stragglers across ranks are left out "
            "(--align puts every rank on one clock from their collectives)"
        )
    )


def test_one_clock_says_nothing(tmp_path: Path) -> None:
    write_horovod_run_kineto(tmp_path / "rank0.json")
    write_horovod_run_timeline(tmp_path / "horovod_timeline.json")  # v0.20.1+: epoch header
    write_json(tmp_path / "rank1.json", gpu_run_kineto(1, base_us=EPOCH_US + 30_000_000))  # 30 s later
    trace = load(tmp_path)
    assert trace.clock_note is None
    assert trace.warnings == ()


# --- ranks outside the world --------------------------------------------------------------------------


@pytest.mark.parametrize("road", ROADS)
def test_a_rank_outside_its_world_is_an_error(tmp_path: Path, road: str) -> None:
    path = write_json(tmp_path / "a.json", gpu_run_kineto(7, world_size=2))
    with pytest.raises(RankError) as error:
        _analyse([path], road)
    assert str(error.value) == (
        f"{path}: rank 7 (from distributedInfo) is outside its job of world_size 2 (ranks 0 to 1); a rank is "
        "an index below world_size: fix the rank (distributedInfo.rank, --rank, --rank-regex) or "
        "distributedInfo.world_size"
    )


def test_a_rank_given_outside_the_world_is_an_error(tmp_path: Path) -> None:
    path = write_json(tmp_path / "trace.json", gpu_run_kineto(None, world_size=2))
    with pytest.raises(
        RankError, match=rf"^{path}: rank 5 \(from --rank\) is outside its job of world_size 2"
    ):
        load(path, rank=5)
    with pytest.raises(RankError, match=r"^--rank -1: a rank is an index from 0 to world_size - 1; pass 0"):
        load(path, rank=-1)


@pytest.mark.parametrize(("rank", "world"), [(-1, 2), (0, 0), (0, -4)])
def test_a_negative_rank_or_an_empty_world_in_the_trace_is_an_error(
    tmp_path: Path, rank: int, world: int
) -> None:
    path = write_json(tmp_path / "a.json", gpu_run_kineto(rank, world_size=world))
    with pytest.raises(TimelineError) as error:
        load(path)
    message = str(error.value)
    assert message.startswith(f"{path}:")
    assert str(rank if rank < 0 else world) in message
    assert "fix" in message
    result = run_timeline("analyze", path)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == f"error: {message}\n"


@pytest.mark.parametrize("road", ROADS)
def test_world_sizes_that_disagree_are_an_error_naming_both_files(tmp_path: Path, road: str) -> None:
    rank0 = write_json(tmp_path / "rank0.json", gpu_run_kineto(0, world_size=2))
    rank1 = write_json(tmp_path / "rank1.json", gpu_run_kineto(1, world_size=8))
    with pytest.raises(RankError) as error:
        _analyse([tmp_path], road)
    assert str(error.value) == (
        f"{rank1}: distributedInfo.world_size is 8 but {rank0} says 2; the traces of one run share one "
        "world size: pass the traces of one run only"
    )


def test_two_runs_of_the_public_traces_are_refused_together() -> None:
    folder = TRACES / "kineto" / "hta_trace_diff"  # rank 3 of 8 (control), rank 1 of 2 (test)
    result = run_timeline("analyze", folder)
    assert result.returncode == 2
    assert result.stderr == (
        f"error: {folder / 'test.json.gz'}: distributedInfo.world_size is 2 but {folder / 'control.json.gz'} "
        "says 8; the traces of one run share one world size: pass the traces of one run only\n"
    )


def test_check_world_reads_every_row_of_a_file_table() -> None:
    from timeline.inputs import check_world
    from timeline.schema import FILES_SCHEMA

    def table(*rows: tuple[int, int | None, str]) -> pl.DataFrame:
        return pl.DataFrame(
            [{"rank": r, "path": f"r{i}.parquet", "format": f, "rank_from": "distributedInfo",
              "world_size": w} for i, (r, w, f) in enumerate(rows)],
            schema=FILES_SCHEMA,
        )  # fmt: skip

    # a Horovod timeline's world size is a lower bound: not compared
    check_world(table((0, 2, "kineto"), (1, 2, "kineto"), (0, 4, "horovod")))
    check_world(table((0, None, "kineto"), (3, 4, "kineto")))
    with pytest.raises(
        RankError, match=r"^r0.parquet: distributedInfo.world_size is 0; a job has at least one"
    ):
        check_world(table((0, 0, "kineto")))
    with pytest.raises(RankError, match=r"^r1.parquet: rank -2 \(from distributedInfo\) is negative"):
        check_world(table((0, 2, "kineto"), (-2, 2, "kineto")))


# --- ProfilerStep#N counted twice ---------------------------------------------------------------------


def _stepped(tmp_path: Path, extra: list[dict[str, Any]]) -> tuple[Path, dict[str, Any]]:
    doc = gpu_run_kineto(0, world_size=1, extra=extra)
    return write_json(tmp_path / "rank0.json", doc), doc


OVERLAP_FIGURES = ("step_ns", "comm_ns", "compute_ns", "hidden_comm_ns", "exposed_comm_ns", "idle_ns")


@pytest.mark.parametrize("road", ROADS)
def test_duplicate_and_nested_steps_make_one_row_per_iteration(tmp_path: Path, road: str) -> None:
    extra = [
        profiler_step(2, EPOCH_US + STEP_US, STEP_US),  # an exact copy of step 2
        profiler_step(9, EPOCH_US + 2 * STEP_US + 300, 200),  # nested in step 3
    ]
    path, doc = _stepped(tmp_path, extra)
    analysed = _analyse([path], road)
    assert analysed.warnings == (
        f"{path}: rank 0: left out 2 ProfilerStep#N span(s) (ProfilerStep#2, ProfilerStep#9) nested in (or "
        "copies of) another step of the rank; the enclosing step is the iteration",
    )
    iterations = analysed.overlap.iterations
    assert iterations.get_column("iteration").to_list() == [1, 2, 3]
    whole = analysed.overlap.ranks.row(0, named=True)
    sums = iterations.select(pl.col(OVERLAP_FIGURES[1:5]).sum()).row(0, named=True)
    assert sums == {k: whole[k] for k in OVERLAP_FIGURES[1:5]}
    assert _rank_row(analysed, 0) == _naive(doc)
    assert iterations.get_column("step_ns").to_list() == [STEP_US * US] * 3


@pytest.mark.parametrize("road", ROADS)
def test_a_step_number_seen_again_keeps_its_first_span(tmp_path: Path, road: str) -> None:
    extra = [profiler_step(2, EPOCH_US + 3 * STEP_US, STEP_US)]  # a fourth span, numbered 2 again
    path, _ = _stepped(tmp_path, extra)
    analysed = _analyse([path], road)
    assert analysed.warnings == (
        f"{path}: rank 0: left out 1 ProfilerStep#N span(s) (ProfilerStep#2) whose number appeared earlier "
        "on the rank; the first span of each number is the iteration",
    )
    iterations = analysed.overlap.iterations
    assert iterations.get_column("iteration").to_list() == [1, 2, 3]
    assert iterations.filter(pl.col("iteration") == 2).get_column("start_ns").to_list() == [
        (EPOCH_US + STEP_US) * US
    ]


def test_redundant_steps_names_each_span_and_why() -> None:
    from tests.builders import make_events, step
    from timeline.analysis.iterations import assign_iterations, redundant_steps

    events = make_events(
        [step(1, 0, 100), step(2, 100, 200), step(2, 100, 200), step(9, 120, 150), step(3, 200, 300),
         step(2, 400, 500), step(1, 0, 100, rank=1), step(1, 50, 150, rank=1)]
    )  # fmt: skip
    assert redundant_steps(events).rows() == [(2, 0, 2, "nested"), (3, 0, 9, "nested"), (5, 0, 2, "repeated"),
                                              (7, 1, 1, "repeated")]  # fmt: skip
    windows = assign_iterations(events)
    assert windows.select("rank", "iteration").rows() == [(0, 1), (0, 2), (0, 3), (1, 1)]


# --- a converted Parquet file holds several ranks: each is checked on its own --------------------------


def _parquet(tmp_path: Path, *, clocks: tuple[str, str]) -> tuple[Path, pl.DataFrame]:
    """A Parquet file of two ranks (as ``timeline convert`` writes), rank 1 with a kernel 100 years ahead."""
    from tests.builders import gpu, make_events
    from timeline.schema import FILES_SCHEMA
    from timeline.trace import Trace

    base = EPOCH_US * US
    rows = [gpu("compute", base + 10 * i, base + 10 * i + 5, rank=r) for r in (0, 1) for i in range(20)]
    rows.append(gpu("compute", base + 100 * YEAR_US * US, base + 100 * YEAR_US * US + 5, rank=1))
    events = make_events(rows)
    files = pl.DataFrame(
        [{"rank": r, "path": f"rank{r}.json", "format": "kineto", "rank_from": "distributedInfo",
          "world_size": 2, "clock": clocks[r], "events": 20 + r} for r in (0, 1)],
        schema=FILES_SCHEMA,
    )  # fmt: skip
    path = tmp_path / "run.parquet"
    Trace(events=events, files=files).write_parquet(path)
    return path, events


def test_a_parquet_file_is_checked_rank_by_rank(tmp_path: Path) -> None:
    path, events = _parquet(tmp_path, clocks=("epoch", "epoch"))
    trace = load(path)
    assert trace.warnings == (
        f"{path}: rank 1: left out 1 event(s) starting more than 1 day from the median start of the "
        "rank's events (corrupt timestamps)",
    )
    assert trace.events.height == events.height - 1
    assert trace.events.get_column("end_ns").max() == EPOCH_US * US + 10 * 19 + 5


def test_a_parquet_file_of_ranks_on_two_clocks_says_so(tmp_path: Path) -> None:
    path, _ = _parquet(tmp_path, clocks=("epoch", "boot"))
    trace = load(path)
    assert trace.clock_note == (
        f"{path}: its times count from machine boot but those of {path} from the Unix epoch: the ranks' "
        "clocks are not comparable; skews, arrival order and stragglers across ranks are left out "
        "(--align puts every rank on one clock from their collectives)"
    )
    assert trace.warnings[-1] == trace.clock_note


def test_time_outliers_of_each_rank_against_its_own_median() -> None:
    from tests.builders import gpu, make_events
    from timeline.plausibility import OUTLIER_MIN_NS, long_events, time_outliers

    day = 86_400 * 10**9
    rows = [gpu("compute", i * 10, i * 10 + 5, rank=0) for i in range(5)]
    rows += [gpu("compute", 7 * day + i * 10, 7 * day + i * 10 + 5, rank=1) for i in range(5)]  # a week later
    rows += [gpu("compute", -3 * day, -3 * day + 5, rank=1), gpu("compute", 20, 20 + 2 * 10**9, rank=0)]
    events = make_events(rows)
    # rank 1's week-later starts are its own: only its event 10 days before them is outside
    assert time_outliers(events).rows() == [(10, 1, float(OUTLIER_MIN_NS))]
    # rank 0's 2 s kernel in 40 ns of starts; rank 1's span of starts, the outlier included, is 10 days
    assert long_events(events).rows() == [(11, 0, 1e9)]


def test_check_reports_no_skew_when_the_clocks_disagree(tmp_path: Path) -> None:
    """A skew budget on ranks on two clocks has no data (base: a skew of 1.7e9 s, a verdict on it)."""
    _relative_run(tmp_path)
    budget = tmp_path / "budget.toml"
    budget.write_text('[[budgets]]\nmetric = "collective_start_skew_ns"\nmax = 1_000_000_000\n')
    result = run_timeline("check", tmp_path, "--budget", budget, "--json")
    assert result.returncode == 1, result.stderr
    assert "the ranks' clocks are not comparable" in result.stderr
    [verdict] = json.loads(result.stdout)["verdicts"]
    assert verdict["status"] == "nodata", verdict
    assert verdict["value"] is None
