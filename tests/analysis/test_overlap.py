"""Overlap analyzer: hand-computed cases through the public functions."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import cpu, gpu, launch, make_events, step
from timeline.analysis.iterations import assign_iterations
from timeline.analysis.overlap import (
    compute_collective_exposure,
    compute_iteration_overlap,
    compute_overlap,
    compute_rank_overlap,
)
from timeline.schema import COLLECTIVE_EXPOSURE_SCHEMA, ITERATION_OVERLAP_SCHEMA, RANK_OVERLAP_SCHEMA


def rank_row(rows: list[dict[str, object]]) -> dict[str, object]:
    result = compute_rank_overlap(make_events(rows))
    assert result.schema == RANK_OVERLAP_SCHEMA
    assert result.height == 1
    return result.row(0, named=True)


def test_fully_hidden_communication() -> None:
    row = rank_row([gpu("compute", 0, 100), gpu("communication", 20, 60, stream=9)])
    assert (row["comm_ns"], row["compute_ns"], row["hidden_comm_ns"], row["exposed_comm_ns"]) == (
        40,
        100,
        40,
        0,
    )
    assert row["hidden_comm_ratio"] == 1.0
    assert row["step_ns"] == 100
    assert row["idle_ns"] == 0


def test_fully_exposed_communication() -> None:
    row = rank_row([gpu("compute", 0, 100), gpu("communication", 100, 150, stream=9)])
    assert (row["hidden_comm_ns"], row["exposed_comm_ns"], row["step_ns"]) == (0, 50, 150)
    assert row["exposed_comm_ratio"] == pytest.approx(50 / 150)


def test_partial_overlap() -> None:
    row = rank_row([gpu("compute", 0, 100), gpu("communication", 80, 130, stream=9)])
    assert (row["hidden_comm_ns"], row["exposed_comm_ns"]) == (20, 30)


def test_nested_and_multi_stream_communication_is_a_union() -> None:
    row = rank_row(
        [
            gpu("compute", 0, 50),
            gpu("communication", 40, 100, stream=9),
            gpu("communication", 60, 80, stream=11),  # nested inside the first, another stream
            gpu("communication", 90, 120, stream=13),  # overlaps the first
        ]
    )
    assert row["comm_ns"] == 80  # [40, 120)
    assert (row["hidden_comm_ns"], row["exposed_comm_ns"]) == (10, 70)


def test_compute_on_several_streams_is_a_union() -> None:
    row = rank_row(
        [
            gpu("compute", 0, 30, stream=7),
            gpu("compute", 20, 60, stream=8),
            gpu("communication", 10, 70, stream=9),
        ]
    )
    assert row["compute_ns"] == 60
    assert (row["hidden_comm_ns"], row["exposed_comm_ns"]) == (50, 10)


def test_touching_intervals_are_not_overlap() -> None:
    row = rank_row([gpu("compute", 0, 10), gpu("communication", 10, 20, stream=9)])
    assert (row["hidden_comm_ns"], row["exposed_comm_ns"]) == (0, 10)


def test_memcpy_sync_and_idle() -> None:
    row = rank_row(
        [
            gpu("compute", 0, 10),
            gpu("communication", 5, 20, stream=9),
            gpu("memcpy", 25, 30),
            gpu("sync", 30, 40),  # sync is never compute: idle
            gpu("compute", 40, 50),
        ]
    )
    assert row["step_ns"] == 50
    assert row["other_busy_ns"] == 5
    assert row["idle_ns"] == 50 - (20 + 5 + 10)
    assert row["compute_ns"] == 20


def test_cpu_events_do_not_count_on_gpu_ranks() -> None:
    row = rank_row([gpu("compute", 0, 10), gpu("communication", 20, 30, stream=9), cpu("cpu_op", 0, 100)])
    assert (row["compute_ns"], row["exposed_comm_ns"], row["mode"]) == (10, 10, "gpu")


def test_ranks_are_separate() -> None:
    events = make_events(
        [
            gpu("compute", 0, 100, rank=0),
            gpu("communication", 0, 50, rank=1, stream=9),
            gpu("communication", 0, 50, rank=0, stream=9),
            gpu("compute", 100, 200, rank=1),
        ]
    )
    result = compute_rank_overlap(events)
    assert result["rank"].to_list() == [0, 1]
    assert result["exposed_comm_ns"].to_list() == [0, 50]


def test_cpu_only_rank_comm_threads_and_waits() -> None:
    # main thread 1 computes, gloo thread 2 communicates; a wait op on the main thread is not compute,
    # and a cpu_op nested inside the wait does not count either.
    row = rank_row(
        [
            cpu("cpu_op", 0, 40, tid=1, name="aten::addmm"),
            cpu("communication", 30, 90, tid=2, name="gloo:all_reduce", cat="user_annotation"),
            cpu("sync", 50, 90, tid=1, name="torch.distributed.ddp.reducer::copy_bucket_to_grad"),
            cpu("cpu_op", 51, 89, tid=1, name="aten::copy_"),
            cpu("cpu_op", 35, 45, tid=2, name="aten::add_"),  # on the comm thread: not compute
        ]
    )
    assert row["mode"] == "cpu"
    assert row["comm_ns"] == 60
    assert row["compute_ns"] == 40
    assert (row["hidden_comm_ns"], row["exposed_comm_ns"]) == (10, 50)


def test_cpu_training_thread_computes_while_it_sends_and_receives() -> None:
    # gloo runs sends and receives on the calling thread: the thread holding ProfilerStep#1 still
    # computes; the time inside the c10d call that posts the send is not compute
    row = rank_row(
        [
            step(1, 0, 200),
            cpu("cpu_op", 0, 30, tid=1, name="c10d::send"),
            cpu("communication", 30, 120, tid=1, name="gloo:send", cat="user_annotation", collective="send"),
            cpu("cpu_op", 40, 100, tid=1, name="aten::addmm"),
            cpu("cpu_op", 150, 190, tid=1, name="aten::relu"),
        ]
    )
    assert row["comm_ns"] == 90
    assert row["compute_ns"] == 60 + 40
    assert (row["hidden_comm_ns"], row["exposed_comm_ns"]) == (60, 30)


def test_calls_into_c10d_are_not_compute_on_cpu_ranks() -> None:
    # DDP's reducer calls c10d::allreduce_ inside an autograd op; a functional collective waits in
    # _c10d_functional::wait_tensor: neither is compute, though the op around them is
    row = rank_row(
        [
            step(1, 0, 300),
            cpu("cpu_op", 0, 100, tid=1, name="autograd::engine::evaluate_function: AccumulateGrad"),
            cpu("cpu_op", 20, 60, tid=1, name="c10d::allreduce_"),
            cpu("communication", 30, 150, tid=2, name="gloo:all_reduce", cat="user_annotation"),
            cpu("cpu_op", 100, 200, tid=1, name="aten::mm"),
            cpu("cpu_op", 120, 140, tid=1, name="_c10d_functional::wait_tensor"),
        ]
    )
    assert row["compute_ns"] == 200 - 40 - 20
    assert row["hidden_comm_ns"] == (30 - 30) + (100 - 60) + (150 - 100) - 20
    assert row["exposed_comm_ns"] == 120 - row["hidden_comm_ns"]


def test_horovod_only_rank_reports_comm_but_not_compute() -> None:
    events = make_events(
        [
            {
                "rank": 0,
                "kind": "communication",
                "start_ns": 0,
                "end_ns": 10,
                "source": "horovod",
                "name": "NCCL_ALLREDUCE",
            },
            {
                "rank": 0,
                "kind": "communication",
                "start_ns": 5,
                "end_ns": 12,
                "source": "horovod",
                "name": "NCCL_ALLREDUCE",
            },
            {"rank": 3, "kind": "instant", "start_ns": 2, "end_ns": 2, "source": "horovod", "name": "3"},
        ]
    )
    result = compute_rank_overlap(events)
    assert result["rank"].to_list() == [0]  # a rank with only negotiation ticks has no activity to measure
    row = result.row(0, named=True)
    assert row["mode"] == "horovod"
    assert row["comm_ns"] == 12
    assert row["hidden_comm_ns"] is None
    assert row["exposed_comm_ns"] is None
    assert row["compute_ns"] is None


# --- iterations -------------------------------------------------------------------------------


def two_step_trace() -> pl.DataFrame:
    """Two CPU steps; the GPU lags: kernels launched in step 1 run after the CPU step ended."""
    return make_events(
        [
            step(1, 0, 100),
            step(2, 100, 200),
            launch(1, 10),
            launch(2, 50),
            launch(3, 150),
            gpu("compute", 20, 120, correlation=1),  # launched in step 1, ends after the CPU step
            gpu("communication", 110, 140, stream=9, correlation=2),  # step 1's all-reduce
            gpu("compute", 160, 190, correlation=3),
        ]
    )


def test_iterations_projected_onto_gpu() -> None:
    windows = assign_iterations(two_step_trace())
    assert windows.select("iteration", "window", "start_ns", "end_ns").rows() == [
        (1, "profiler_step", 0, 140),  # extended to the end of what step 1 launched
        (2, "profiler_step", 140, 200),  # starts where step 1 ended on the GPU
    ]


def test_iteration_overlap_partitions_time() -> None:
    events = two_step_trace()
    result = compute_iteration_overlap(events)
    assert result.schema == ITERATION_OVERLAP_SCHEMA
    rows = result.select(
        "iteration", "step_ns", "comm_ns", "compute_ns", "hidden_comm_ns", "exposed_comm_ns"
    ).rows()
    assert rows == [(1, 140, 30, 100, 10, 20), (2, 60, 0, 30, 0, 0)]


def test_no_profiler_steps_gives_one_whole_trace_window() -> None:
    events = make_events([gpu("compute", 10, 100), gpu("communication", 90, 130, stream=9)])
    result = compute_iteration_overlap(events)
    row = result.row(0, named=True)
    assert (row["iteration"], row["window"], row["start_ns"], row["end_ns"]) == (None, "whole_trace", 10, 130)
    assert (row["hidden_comm_ns"], row["exposed_comm_ns"]) == (10, 30)


def test_gpu_annotation_copy_of_step_is_not_a_boundary() -> None:
    events = make_events(
        [
            step(1, 0, 100),
            gpu("annotation", 3, 19, name="ProfilerStep#1", cat="gpu_user_annotation"),
            gpu("compute", 10, 50),
        ]
    )
    windows = assign_iterations(events)
    assert windows.select("iteration", "start_ns", "end_ns").rows() == [(1, 0, 100)]


def test_collective_exposure_per_event() -> None:
    events = two_step_trace()
    result = compute_collective_exposure(events)
    assert result.schema == COLLECTIVE_EXPOSURE_SCHEMA
    row = result.row(0, named=True)
    assert (row["iteration"], row["dur_ns"], row["hidden_ns"], row["exposed_ns"]) == (1, 30, 10, 20)
    assert row["exposed_ratio"] == pytest.approx(20 / 30)


def test_compute_overlap_bundles_consistent_views() -> None:
    overlap = compute_overlap(two_step_trace())
    ranks = overlap.ranks.row(0, named=True)
    assert ranks["comm_ns"] == overlap.iterations["comm_ns"].sum()
    assert ranks["exposed_comm_ns"] == overlap.collectives["exposed_ns"].sum()


events_strategy = st.lists(
    st.tuples(
        st.sampled_from(["compute", "communication", "memcpy"]),
        st.integers(0, 1000),
        st.integers(0, 200),
        st.sampled_from([7, 9, 11]),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(rows=events_strategy)
def test_properties_hold_on_random_traces(rows: list[tuple[str, int, int, int]]) -> None:
    events = make_events(
        [gpu(kind, start, start + length, stream=stream) for kind, start, length, stream in rows]
    )
    result = compute_rank_overlap(events)
    if result.height == 0:
        return
    row = result.row(0, named=True)
    assert row["hidden_comm_ns"] + row["exposed_comm_ns"] == row["comm_ns"]
    assert 0 <= row["hidden_comm_ns"] <= min(row["comm_ns"], row["compute_ns"])
    assert row["idle_ns"] >= 0
    # the naive reference: mark every nanosecond
    comm = {t for k, s, n, _ in rows if k == "communication" for t in range(s, s + n)}
    compute = {t for k, s, n, _ in rows if k == "compute" for t in range(s, s + n)}
    assert (row["comm_ns"], row["compute_ns"], row["hidden_comm_ns"]) == (
        len(comm),
        len(compute),
        len(comm & compute),
    )
