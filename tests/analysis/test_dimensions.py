"""Exposure per dimension × iteration × rank: hand-computed cases, a plain-Python reference, both roads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from tests.builders import REPO, cpu, exposure_reference, gpu, make_events, step
from tests.generators.nccl import device_mesh_job, write_job
from timeline import load
from timeline.analysis.dimensions import AMBIGUOUS, compute_dimension_exposure, exposure_by, named_dimensions
from timeline.analysis.groups import shared_clocks
from timeline.analysis.overlap import compute_overlap
from timeline.execution.reduce import analyze_files
from timeline.executors import LocalExecutor
from timeline.schema import PROCESS_GROUPS_SCHEMA

US = 1_000
FSDP2_TP = REPO / "sample_traces" / "fsdp2_tp_gloo"


def _kernel(start: int, end: int, pg: str, desc: str, *, stream: int) -> dict[str, Any]:
    return gpu(
        "communication",
        start * US,
        end * US,
        stream=stream,
        name="ncclDevKernel_AllReduce_Sum_f32_RING_LL",
        collective="all_reduce",
        pg_name=pg,
        pg_desc=desc,
    )


def _two_dimensions() -> pl.DataFrame:
    """One GPU rank, one step [0, 100) µs, compute [0, 50); tp on [10, 40) and [45, 55); dp on [30, 70)
    and [60, 80) (two streams: dp's own collectives overlap, and tp's overlap dp's)."""
    return make_events(
        [
            step(1, 0, 100 * US),
            gpu("compute", 0, 50 * US, name="gemm"),
            _kernel(10, 40, "1", "mesh_tp", stream=20),
            _kernel(45, 55, "1", "mesh_tp", stream=20),
            _kernel(30, 70, "2", "mesh_dp", stream=21),
            _kernel(60, 80, "2", "mesh_dp", stream=22),
        ]
    )


def test_two_dimensions_overlapping_in_time_count_their_shared_time_in_both() -> None:
    events = _two_dimensions()
    overlap = compute_overlap(events)
    rows = {r["dimension"]: r for r in compute_dimension_exposure(events, overlap).iter_rows(named=True)}
    # tp: [10,40) ∪ [45,55) = 40 µs; under compute [10,40) ∪ [45,50) = 35; exposed [50,55) = 5, during
    # which dp ran too: nothing exposed that tp alone ran
    assert (rows["tp"]["comm_ns"], rows["tp"]["hidden_ns"], rows["tp"]["exposed_ns"]) == (
        40 * US,
        35 * US,
        5 * US,
    )
    assert rows["tp"]["exclusive_exposed_ns"] == 0
    # dp: [30,70) ∪ [60,80) = [30,80): 50 µs, not 60; hidden [30,50) = 20; exposed [50,80) = 30, of
    # which [55,80) = 25 without tp
    assert (rows["dp"]["comm_ns"], rows["dp"]["hidden_ns"], rows["dp"]["exposed_ns"]) == (
        50 * US,
        20 * US,
        30 * US,
    )
    assert rows["dp"]["exclusive_exposed_ns"] == 25 * US
    # the rank's exposed communication is [50, 80) = 30 µs: the dimensions' exposed add up to more (35),
    # their exclusive exposed to less (25)
    assert overlap.iterations.get_column("exposed_comm_ns").to_list() == [30 * US]
    assert rows["tp"]["iteration"] == rows["dp"]["iteration"] == 1


def test_split_by_description_gives_the_same_figures_under_the_descriptions() -> None:
    events = _two_dimensions()
    overlap = compute_overlap(events)
    by_dim = compute_dimension_exposure(events, overlap)
    by_desc = compute_dimension_exposure(events, overlap, by="pg_desc")
    renamed = by_dim.with_columns(pl.col("dimension").replace({"tp": "mesh_tp", "dp": "mesh_dp"})).sort(
        "dimension"
    )
    assert_frame_equal(by_desc.sort("dimension"), renamed)


def test_a_user_label_renames_the_dimension() -> None:
    events = _two_dimensions()
    exposure = compute_dimension_exposure(events, compute_overlap(events), overrides={"mesh_dp": "fsdp"})
    assert named_dimensions(exposure) == ["fsdp", "tp"]


def _gloo_ambiguous() -> pl.DataFrame:
    """One CPU rank whose all-reduce names no group, with two declared 2-rank groups it could have run on."""
    return make_events(
        [
            step(1, 0, 100 * US),
            cpu("cpu_op", 0, 40 * US, name="forward"),
            cpu(
                "communication",
                50 * US,
                70 * US,
                tid=2,
                name="gloo:all_reduce",
                cat="user_annotation",
                collective="all_reduce",
                in_bytes=4000,
                group_size=2,
            ),
        ]
    )


def test_a_collective_of_an_uncertain_group_counts_as_ambiguous_and_in_no_dimension() -> None:
    events = _gloo_ambiguous()
    declared = pl.DataFrame(
        {
            "rank": [0, 0],
            "pg_name": ["1", "2"],
            "pg_desc": ["mesh_dp", "mesh_tp"],
            "ranks": [[0, 1], [0, 2]],
            "ranks_text": [None, None],
            "ranks_truncated": [False, False],
            "pg_size": [2, 2],
            "backend": ["gloo", "gloo"],
        }
    )
    exposure = compute_dimension_exposure(
        events, compute_overlap(events), groups=declared.cast(PROCESS_GROUPS_SCHEMA)
    )
    assert exposure.get_column("dimension").to_list() == [AMBIGUOUS]
    assert exposure.select("comm_ns", "exposed_ns", "hidden_ns").row(0) == (20 * US, 20 * US, 0)
    assert named_dimensions(exposure) == []


# --- generated NCCL traces against plain interval arithmetic over their raw JSON -----------------------


@pytest.fixture(scope="module")
def mesh_job(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[int, dict[str, Any]]]:
    job = device_mesh_job([("dp", 2), ("tp", 2)], steps=3, gpus_per_node=2, seed=2)
    directory = tmp_path_factory.mktemp("mesh")
    write_job(job, directory)
    return directory, job.traces


def test_generated_nccl_mesh_matches_plain_interval_arithmetic(
    mesh_job: tuple[Path, dict[int, dict[str, Any]]],
) -> None:
    directory, documents = mesh_job
    trace = load(directory)
    overlap = compute_overlap(trace.events)
    exposure = compute_dimension_exposure(trace.events, overlap, groups=trace.groups)
    got = exposure.group_by("dimension", "rank").agg(pl.col("exposed_ns").sum(), pl.col("hidden_ns").sum())
    measured = {(d, r): (e, h) for d, r, e, h in got.iter_rows()}
    expected = {
        (dim, rank): figures
        for rank, document in documents.items()
        for dim, figures in exposure_reference(document).items()
    }
    assert measured == expected
    assert AMBIGUOUS not in set(exposure.get_column("dimension").to_list())


def test_rank_by_rank_gives_the_rows_of_the_in_memory_analysis(
    mesh_job: tuple[Path, dict[int, dict[str, Any]]],
) -> None:
    directory, _ = mesh_job
    trace = load(directory)
    in_memory = compute_dimension_exposure(trace.events, compute_overlap(trace.events), groups=trace.groups)
    analysis = analyze_files(directory, executor=LocalExecutor(2))
    by_rank = compute_dimension_exposure(analysis.communication, analysis.overlap, groups=analysis.groups)
    assert by_rank.height > 0
    assert_frame_equal(by_rank, in_memory)


# --- the FSDP2 + TP sample (gloo, a 2×2 mesh) ----------------------------------------------------------


def test_fsdp2_tp_sample_splits_every_collective_between_dp_and_tp_on_both_roads() -> None:
    trace = load(FSDP2_TP)
    overlap = compute_overlap(trace.events)
    clocks = shared_clocks(trace.files, comparable=trace.clock_note is None)
    exposure = compute_dimension_exposure(trace.events, overlap, groups=trace.groups, clocks=clocks)
    assert named_dimensions(exposure) == ["dp", "tp"]
    assert AMBIGUOUS not in set(exposure.get_column("dimension").to_list())
    # where the dimensions never run at once, their exposed times add up to the rank's, exactly
    totals = exposure.group_by("rank", "iteration").agg(
        pl.col("exposed_ns").sum(), pl.col("exclusive_exposed_ns").sum()
    )
    joined = totals.join(
        overlap.iterations.select("rank", "iteration", "exposed_comm_ns"), on=["rank", "iteration"]
    )
    for exposed, exclusive, rank_total in joined.select(
        "exposed_ns", "exclusive_exposed_ns", "exposed_comm_ns"
    ).rows():
        assert exclusive <= rank_total <= exposed
    analysis = analyze_files(FSDP2_TP, executor=LocalExecutor(2))
    by_rank = compute_dimension_exposure(
        analysis.communication, analysis.overlap, groups=analysis.groups, clocks=clocks
    )
    assert_frame_equal(by_rank, exposure)


def test_without_windows_the_rows_have_no_iteration() -> None:
    events = _two_dimensions().filter(pl.col("kind") != "annotation")
    exposure = exposure_by(
        compute_overlap(events),
        pl.DataFrame(
            {
                "rank": [0],
                "start_ns": [10 * US],
                "end_ns": [40 * US],
                "dimension": ["tp"],
                "pg_desc": ["mesh_tp"],
            },
            schema={
                "rank": pl.Int32,
                "start_ns": pl.Int64,
                "end_ns": pl.Int64,
                "dimension": pl.String,
                "pg_desc": pl.String,
            },
        ),
    )
    assert exposure.select("dimension", "comm_ns", "hidden_ns").rows() == [("tp", 30 * US, 30 * US)]
