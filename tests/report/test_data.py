"""The report's data, without bokeh: lanes, segments, exposed pieces, level of detail.

The exposed segments of the Gantt must be the analyzer's numbers exactly; merging what is shorter
than a pixel must keep every event (counted) and every nanosecond of busy time.
"""

from __future__ import annotations

import sys

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from tests.builders import REPO, TRACES, gpu, launch, make_events, run_of, step
from tests.report.builders import synthetic_events
from timeline.report.data import (
    BARS_SCHEMA,
    BREAKDOWN_PARTS,
    LANES_SCHEMA,
    SEGMENTS_SCHEMA,
    VIEWS_SCHEMA,
    ReportData,
    bar_label,
    default_view,
    level_of_detail,
    prepare_report_data,
    view_bars,
    view_levels,
)
from timeline.trace import load

PARAM = TRACES / "kineto" / "param_dlrm_8rank"
HOROVOD = (
    TRACES / "horovod" / "dexhunter_allreduce-experiments" / "horovod-results__32gpu__100g-32-nccl-slow.json"
)
EXPOSED = "exposed communication"


def _prepare(events: pl.DataFrame) -> ReportData:
    return prepare_report_data(run_of(events))


@pytest.fixture(scope="module")
def param() -> ReportData:
    return _prepare(load([PARAM]).events)


def _exposed_strip(data: ReportData) -> pl.DataFrame:
    """Total length of the ``exposed comm`` lane per rank and view."""
    strip = data.lanes.filter(pl.col("role") == "exposed").select("lane_id")
    return (
        data.segments.join(strip, on="lane_id")
        .group_by("rank", "view")
        .agg(exposed=(pl.col("end_ns") - pl.col("start_ns")).sum())
    )


def _assert_exposed_matches_analyzer(data: ReportData) -> None:
    expected = data.breakdown.filter(pl.col("mode") != "horovod").select("rank", "view", "exposed_comm_ns")
    got = expected.join(_exposed_strip(data), on=["rank", "view"], how="left").with_columns(
        pl.col("exposed").fill_null(0)
    )
    assert got.height > 0
    assert (got.get_column("exposed") == got.get_column("exposed_comm_ns")).all(), got


def test_frames_have_their_declared_schemas(param: ReportData) -> None:
    assert param.lanes.schema == LANES_SCHEMA
    assert param.views.schema == VIEWS_SCHEMA
    assert param.segments.schema == SEGMENTS_SCHEMA
    assert param.breakdown.columns[-len(BREAKDOWN_PARTS) :] == list(BREAKDOWN_PARTS)


def test_param_has_one_exposed_lane_and_one_lane_per_stream_for_each_rank(param: ReportData) -> None:
    assert param.lanes.get_column("rank").unique().sort().to_list() == list(range(8))
    for rank in range(8):
        lanes = param.lanes.filter(pl.col("rank") == rank)
        assert lanes.get_column("label").to_list() == [
            "exposed comm",
            "stream 84 · comm",
            "stream 7 · compute",
            "stream 24 · compute",
            "stream 22 · copy",
        ]
        assert lanes.get_column("group").unique().to_list() == [f"rank {rank}"]
    assert param.lanes.get_column("lane_id").to_list() == list(range(param.lanes.height))


def test_exposed_segments_equal_the_analyzers_exposed_comm_param(param: ReportData) -> None:
    _assert_exposed_matches_analyzer(param)
    # ... and they are real: rank 1 waits 11.056 ms in step 10 (docs/report.md quotes it).
    assert _exposed_strip(param).filter(pl.col("rank") == 1).item(0, "exposed") == 11_056_000


def test_exposed_segments_equal_the_analyzers_exposed_comm_cpu_ranks() -> None:
    data = _prepare(load([REPO / "sample_traces" / "ddp_gloo_4rank"]).events)
    assert data.views.height == 3
    _assert_exposed_matches_analyzer(data)


def test_exposed_pieces_of_a_comm_lane_are_its_communication_under_no_compute() -> None:
    # compute [0, 10) on stream 7; communication [5, 20) on stream 20; step window [0, 30).
    events = make_events(
        [
            step(1, 0, 30),
            launch(1, 1),
            launch(2, 2),
            gpu("compute", 0, 10, correlation=1),
            gpu("communication", 5, 20, stream=20, correlation=2, collective="all_reduce", in_bytes=64),
        ]
    )
    data = _prepare(events)
    lanes = dict(data.lanes.select("label", "lane_id").rows())
    assert list(lanes) == ["exposed comm", "stream 20 · comm", "stream 7 · compute"]
    rows = data.segments.select(
        "lane_id", "style", "start_ns", "end_ns", "exposed_ns", "collective", "in_bytes"
    )
    expected = pl.DataFrame(
        {
            "lane_id": [lanes["exposed comm"], lanes["stream 20 · comm"], lanes["stream 20 · comm"],
                        lanes["stream 7 · compute"]],
            "style": [EXPOSED, "communication (hidden)", EXPOSED, "compute"],
            "start_ns": [10, 5, 10, 0],
            "end_ns": [20, 20, 20, 10],
            "exposed_ns": [10, 10, 10, None],
            "collective": [None, "all_reduce", None, None],
            "in_bytes": [None, 64, None, None],
        },
        schema_overrides={"lane_id": pl.Int32, "style": rows.schema["style"]},
    )  # fmt: skip
    assert_frame_equal(rows.sort("lane_id", "style"), expected.sort("lane_id", "style"), check_dtypes=False)


def test_an_event_crossing_iterations_is_split_at_the_boundary() -> None:
    # Step 1's compute runs until 150, so step 1's window is [0, 150); step 2's all-reduce,
    # launched at 110, starts at 120 on another stream: it crosses into step 2's window [150, 200).
    events = make_events(
        [
            step(1, 0, 100),
            step(2, 100, 200),
            launch(1, 50),
            launch(2, 110),
            gpu("compute", 60, 150, correlation=1),
            gpu("communication", 120, 180, stream=20, correlation=2),
        ]
    )
    data = _prepare(events)
    assert data.views.get_column("iteration").to_list() == [1, 2]
    comm = data.segments.filter(pl.col("style") == "communication (hidden)").sort("start_ns")
    assert comm.select("view", "start_ns", "end_ns").rows() == [(0, 120, 150), (1, 150, 180)]
    _assert_exposed_matches_analyzer(data)
    strip = _exposed_strip(data).sort("view")
    assert strip.select("view", "exposed").rows() == [(1, 30)]  # hidden under compute in step 1


def test_zero_length_events_are_kept_not_dropped() -> None:
    events = make_events([step(1, 0, 100), gpu("compute", 10, 50), gpu("compute", 60, 60)])
    data = _prepare(events)
    assert data.segments.filter(pl.col("start_ns") == 60).height == 1
    assert data.omitted.filter(pl.col("kind") == "outside every iteration window").height == 0


def test_omitted_events_are_counted(param: ReportData) -> None:
    events = load([PARAM]).events
    drawn = events.filter(pl.col("device").is_not_null() & ~pl.col("kind").is_in(["annotation"])).height
    omitted = dict(param.omitted.iter_rows())
    assert omitted["cpu_op"] == events.filter(pl.col("kind") == "cpu_op").height
    assert sum(omitted.values()) + drawn == events.height


def test_horovod_lanes_are_tensors_with_phases_and_no_exposure() -> None:
    data = _prepare(load([HOROVOD]).events)
    assert set(data.lanes.get_column("role").to_list()) == {"tensor"}
    assert data.lanes.height == 28
    assert data.lanes.item(0, "label").startswith("allreduce.")
    styles = set(data.segments.get_column("style").cast(pl.String).to_list())
    assert {"negotiation", "queue", "wait for data", "wire (exposure unknown)"} <= styles
    assert EXPOSED not in styles
    assert data.segments.get_column("exposed_ns").null_count() == data.segments.height
    # The whole-trace view is widened to every drawn event: the negotiation before the first wire phase.
    assert data.omitted.filter(pl.col("kind") == "outside every iteration window").height == 0
    assert dict(data.omitted.iter_rows())["instant"] == 896
    row = data.breakdown.row(0, named=True)
    assert row["unknown_comm_ns"] + row["unknown_ns"] + row["other_busy_ns"] == row["step_ns"]


def test_breakdown_parts_sum_to_the_step(param: ReportData) -> None:
    total = param.breakdown.select(pl.sum_horizontal(*BREAKDOWN_PARTS)).to_series()
    assert (total == param.breakdown.get_column("step_ns")).all()


def test_default_view_is_the_slowest_iteration() -> None:
    data = _prepare(load([REPO / "sample_traces" / "ddp_gloo_4rank"]).events)
    slowest = data.views.sort("step_ns", descending=True).item(0, "view")
    assert default_view(data) == slowest
    assert data.views.filter(pl.col("view") == slowest).item(0, "label").endswith("(slowest)")


def test_bar_label_says_how_many_events_a_bar_holds() -> None:
    assert bar_label("gemm", 1) == "gemm"
    assert bar_label("gemm", 1234) == "1,234 events, mostly gemm"


@pytest.fixture(scope="module")
def big() -> ReportData:
    return _prepare(synthetic_events(200_000))


def test_synthetic_iteration_has_200k_events_and_exact_exposure(big: ReportData) -> None:
    assert big.segments.filter(pl.col("style") != EXPOSED).height >= 200_000
    _assert_exposed_matches_analyzer(big)


def test_level_of_detail_keeps_every_event_and_every_nanosecond(big: ReportData) -> None:
    bars = view_bars(big, 0, pixels=1600)
    assert bars.schema == BARS_SCHEMA
    segments = big.segments.filter(pl.col("view") == 0)
    assert bars.height < 20_000 < segments.height  # a few thousand bars for 280,000 segments

    def per_lane(frame: pl.DataFrame) -> pl.DataFrame:
        return (
            frame.group_by("lane_id", top=pl.col("style") == EXPOSED)
            .agg(pl.col("count").sum(), pl.col("dur_ns").sum())
            .sort("lane_id", "top")
        )

    assert_frame_equal(per_lane(bars), per_lane(segments))
    assert_frame_equal(
        bars.join(big.lanes.filter(pl.col("role") == "exposed"), on="lane_id").group_by("rank").agg(
            pl.col("dur_ns").sum()).sort("rank"),
        _exposed_strip(big).select("rank", dur_ns="exposed").sort("rank"),
    )  # fmt: skip


def test_every_segment_lies_inside_a_bar_of_its_lane(big: ReportData) -> None:
    view = big.views.row(0, named=True)
    rows = big.segments.filter(pl.col("view") == 0, pl.col("lane_id") < 5)
    bars = level_of_detail(rows, start_ns=view["start_ns"], end_ns=view["end_ns"], pixels=400)
    inside = (
        rows.with_row_index("i")
        .join(bars.select("lane_id", b_start="start_ns", b_end="end_ns"), on="lane_id")
        .filter((pl.col("start_ns") >= pl.col("b_start")) & (pl.col("end_ns") <= pl.col("b_end")))
        .get_column("i")
        .n_unique()
    )
    assert inside == rows.height


def test_zooming_in_refines_to_single_events(big: ReportData) -> None:
    view = big.views.row(0, named=True)
    whole = view_bars(big, 0, pixels=1600)
    assert whole.select(pl.col("count").max()).item() > 100
    start = view["start_ns"] + 100_000_000
    zoomed = view_bars(big, 0, start_ns=start, end_ns=start + 200_000, pixels=1600)
    assert zoomed.height > 0
    assert zoomed.select(pl.col("count").max()).item() == 1  # 200 µs on 1600 px: every kernel is its own bar
    assert zoomed.filter(pl.col("end_ns") < start).height == 0


def test_view_levels_end_unmerged_or_within_budget(param: ReportData, big: ReportData) -> None:
    levels, bins = view_levels(param, 0)
    assert bins[-1] == 0
    assert levels.filter(pl.col("level") == len(bins) - 1).height == param.segments.height
    levels, bins = view_levels(big, 0, max_rows=60_000)
    assert levels.height <= 60_000 or levels.get_column("level").max() == 0
    assert bins == sorted(bins, reverse=True)
    assert levels.get_column("level").n_unique() == len(bins)


def test_data_module_does_not_import_bokeh() -> None:
    import subprocess

    code = (
        "import sys, timeline.report.data; print([m for m in sys.modules if m.startswith(('bokeh', 'holo'))])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]"
