"""A real 4-rank FSDP2 + TP job on a 2 x 2 ``("dp", "tp")`` mesh (gloo), checked in the raw JSON.

One run of the ``fsdp2_tp`` demo job (steps 1-2 recorded, 10-20 s on 2 cores) serves every test.
What is asserted is what issue #20 needs from a trace of a parallel job: the groups of the mesh in
``distributedInfo.pg_config``, and each kind of collective on its group, read from the files with
the standard library rather than through timeline's importer (the last test checks that the
importer keeps them all).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.builders import (
    assert_mesh_pg_config,
    capture_job_traces,
    loaded_collectives,
    raw_gloo_collectives,
    step_events,
)

# The model of timeline/capture/jobs/fsdp2_tp.py: blocks of Linear(64, 256) + Linear(256, 64). TP on 2
# ranks halves up.weight, up.bias (Colwise) and down.weight (Rowwise); down.bias stays whole. FSDP2 on
# 2 ranks then halves every local parameter along dim 0: a rank holds _SHARD elements of a block.
_TP_LOCAL = 128 * 64 + 128 + 64 * 128 + 64
_SHARD = _TP_LOCAL // 2
_TP_ACTIVATION = [16, 64]  # the batch through RowwiseParallel's all-reduce


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[int, dict[str, Any]]]:
    out = tmp_path_factory.mktemp("fsdp2_tp")
    return out, capture_job_traces(out, "fsdp2_tp")


def test_pg_config_lists_the_mesh_groups_of_each_rank(run: tuple[Path, dict[int, dict[str, Any]]]) -> None:
    assert_mesh_pg_config(run[1], ("dp", "tp"))


def test_each_step_runs_fsdp_on_dp_and_tp_all_reduces(run: tuple[Path, dict[int, dict[str, Any]]]) -> None:
    _, traces = run
    for trace in traces.values():
        # c10d's ops on the main thread: 4 parameter all-gathers (2 in forward, 2 in backward after
        # resharding), 2 gradient reduce-scatters, 3 activation all-reduces of tensor parallelism.
        per_step = {"c10d::_allgather_base_": 4, "c10d::_reduce_scatter_base_": 2, "c10d::allreduce_": 3}
        for op, count in per_step.items():
            assert [len(step) for step in step_events(trace, op)] == [count, count], op
        # Input Dims of both ops: (output, input).
        gathers = [e for step in step_events(trace, "c10d::_allgather_base_") for e in step]
        assert {tuple(d[0] for d in e["args"]["Input Dims"][:2]) for e in gathers} == {(2 * _SHARD, _SHARD)}
        scatters = [e for step in step_events(trace, "c10d::_reduce_scatter_base_") for e in step]
        assert {tuple(d[0] for d in e["args"]["Input Dims"][:2]) for e in scatters} == {(_SHARD, 2 * _SHARD)}
        tp = [e for step in step_events(trace, "c10d::allreduce_") for e in step]
        assert {str(e["args"]["Input Dims"][0]) for e in tp} == {str([_TP_ACTIVATION])}


def test_gloo_runs_each_group_on_its_own_threads(run: tuple[Path, dict[int, dict[str, Any]]]) -> None:
    _, traces = run
    for trace in traces.values():
        events = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e["name"].startswith("gloo:")]
        assert {e["cat"] for e in events} == {"user_annotation"}
        assert all(e["tid"] != e["pid"] for e in events)  # never on the main thread
        kinds = Counter((e["name"], tuple(e["args"]["Input Dims"][0])) for e in events)
        # gloo runs _reduce_scatter_base_ as an all-reduce of the whole input: no gloo:reduce_scatter.
        assert kinds == {
            ("gloo:all_gather", (_SHARD,)): 8,
            ("gloo:all_reduce", (2 * _SHARD,)): 4,
            ("gloo:all_reduce", tuple(_TP_ACTIVATION)): 6,
        }
        dp_threads = {e["tid"] for e in events if e["name"] == "gloo:all_gather"}
        tp_threads = {e["tid"] for e in events if e["args"]["Input Dims"][0] == _TP_ACTIVATION}
        assert dp_threads.isdisjoint(tp_threads)
        assert {e["tid"] for e in events} == dp_threads | tp_threads


def test_no_event_names_its_group(run: tuple[Path, dict[int, dict[str, Any]]]) -> None:
    """On gloo only ``pg_config`` and the threads tell groups apart: no event carries group args."""
    _, traces = run
    group_args = {"Process Group Name", "Process Group Description", "Process Group Ranks", "Seq"}
    for trace in traces.values():
        for event in trace["traceEvents"]:
            assert not group_args & set(event.get("args", {})), event
            assert event.get("name") != "record_param_comms"


def test_timeline_loads_every_collective(run: tuple[Path, dict[int, dict[str, Any]]]) -> None:
    run_dir, traces = run
    raw = raw_gloo_collectives(traces)
    assert {kind for _, kind in raw} == {"all_gather", "all_reduce"}
    assert loaded_collectives(run_dir) == raw
