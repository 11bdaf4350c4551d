"""The report per dimension: the breakdown per view and the dimension of each Gantt bar (#20)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.builders import REPO, exposure_reference, raw_kernels, run_of
from tests.generators.nccl import device_mesh_job, write_job
from timeline.report.data import ReportData, prepare_report_data, view_bars
from timeline.trace import load

pytest.importorskip("bokeh")

from timeline.report.breakdown import dimension_rows, summary_tables
from timeline.report.gantt import build_gantt, gantt_columns


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> tuple[ReportData, dict[int, dict[str, Any]]]:
    job = device_mesh_job([("dp", 2), ("tp", 2)], steps=2, gpus_per_node=2, seed=9)
    directory: Path = tmp_path_factory.mktemp("mesh")
    write_job(job, directory)
    trace = load(directory)
    return prepare_report_data(run_of(trace)), job.traces


def test_the_breakdown_per_dimension_adds_up_to_the_raw_trace(
    mesh: tuple[ReportData, dict[int, dict[str, Any]]],
) -> None:
    data, documents = mesh
    assert data.dimensions is not None
    measured = data.dimensions.group_by("dimension", "rank").agg(
        pl.col("exposed_ns").sum(), pl.col("hidden_ns").sum()
    )
    got = {(d, r): (e, h) for d, r, e, h in measured.iter_rows()}
    expected = {(d, r): v for r, doc in documents.items() for d, v in exposure_reference(doc).items()}
    assert got == expected
    # every view's table lists both dimensions, and the views' rows cover every row
    views = data.views.get_column("view").to_list()
    assert sum(data.dimensions.filter(pl.col("view") == v).height for v in views) == data.dimensions.height
    for view in views:
        assert sorted(row[0] for row in dimension_rows(data, view)) == ["dp", "tp"]
        assert "Communication per dimension" in summary_tables(data)[view]


def test_every_collective_bar_says_its_dimension(mesh: tuple[ReportData, dict[int, dict[str, Any]]]) -> None:
    data, documents = mesh
    comm = data.segments.filter(pl.col("style") == "communication (hidden)")
    assert comm.height > 0
    assert set(comm.get_column("dimension").to_list()) == {"dp", "tp"}
    # as many bars of each dimension on each rank as the raw JSON has kernels of that group description
    drawn = comm.group_by("rank", "dimension").len()
    counts = {(r, d): n for r, d, n in drawn.iter_rows()}
    raw: dict[tuple[int, str], int] = {}
    for rank, document in documents.items():
        for dim, _ in raw_kernels(document)[1]:
            raw[(rank, dim)] = raw.get((rank, dim), 0) + 1
    assert counts == raw
    bars = view_bars(data, 0, pixels=10**9)  # nothing merged
    columns = gantt_columns(bars, data, origin_ns=0)
    shown = {
        d
        for d, s in zip(columns["dimension"], columns["style"], strict=True)
        if s == "communication (hidden)"
    }
    assert shown == {"dp", "tp"}
    assert any(t == ("dimension", "@dimension") for t in build_gantt(data, 0).figure.tools[-1].tooltips)


def test_without_groups_the_report_has_no_dimensions() -> None:
    trace = load(REPO / "sample_traces" / "ddp_gloo")
    events = trace.events.with_columns(pg_name=pl.lit(None, pl.String).cast(trace.events.schema["pg_name"]))
    data = prepare_report_data(run_of(events))
    assert data.dimensions is None
    assert set(data.segments.get_column("dimension").drop_nulls().to_list()) == set()


def test_fsdp2_tp_sample_has_dp_and_tp_in_every_view_with_clocks() -> None:
    trace = load(REPO / "sample_traces" / "fsdp2_tp_gloo")
    data = prepare_report_data(run_of(trace))
    for view in data.views.get_column("view").to_list():
        assert sorted(row[0] for row in dimension_rows(data, view)) == ["dp", "tp"]
