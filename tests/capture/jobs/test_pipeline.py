"""A real 4-rank pipeline-parallel job on a 2 x 2 ``("pp", "dp")`` mesh (gloo), checked in the raw JSON.

One run of the ``pipeline`` demo job (two stages, ``Schedule1F1B`` with 4 micro-batches, each stage
under DDP; steps 1-2 recorded, 10-20 s on 2 cores) serves every test. The sends and receives are
paired across ranks from the files themselves, read with the standard library.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.builders import (
    assert_mesh_pg_config,
    capture_job_traces,
    groups_by_description,
    loaded_collectives,
    raw_gloo_collectives,
    step_events,
)

_MICROBATCH = [4, 64]  # 16 rows in 4 micro-batches, 64 features
_STAGE_PARAMS = 64 * 128 + 128 + 128 * 64 + 64  # one DDP bucket: Linear(64, 128) + Linear(128, 64)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[int, dict[str, Any]]]:
    out = tmp_path_factory.mktemp("pipeline")
    return out, capture_job_traces(out, "pipeline")


def test_pg_config_lists_the_mesh_groups_of_each_rank(run: tuple[Path, dict[int, dict[str, Any]]]) -> None:
    assert_mesh_pg_config(run[1], ("pp", "dp"))


def _p2p(trace: dict[str, Any], op: str) -> list[tuple[int, int, str]]:
    """Return ``(step index, peer's global rank, Input Dims)`` of every ``op`` in the recorded steps.

    ``c10d::send`` / ``c10d::recv_`` take ``(tensors, process_group, peer, tag)``; with
    ``record_shapes`` the peer is in ``Concrete Inputs``, as its rank in the ``pp`` group.
    """
    _, pp = groups_by_description(trace)["mesh_pp"]
    return [
        (i, pp[int(e["args"]["Concrete Inputs"][2])], str(e["args"]["Input Dims"][0]))
        for i, step in enumerate(step_events(trace, op))
        for e in step
    ]


def test_every_send_has_its_receive(run: tuple[Path, dict[int, dict[str, Any]]]) -> None:
    _, traces = run
    for rank, trace in traces.items():
        sends, recvs = _p2p(trace, "c10d::send"), _p2p(trace, "c10d::recv_")
        # 1F1B with 4 micro-batches: stage 0 sends 4 activations and receives 4 gradients per
        # step, stage 1 the reverse; every peer is the other stage of the same pp group.
        assert [step for step, _, _ in sends] == [0] * 4 + [1] * 4
        assert [step for step, _, _ in recvs] == [0] * 4 + [1] * 4
        other = (rank + 2) % 4
        assert {peer for _, peer, _ in sends + recvs} == {other}
        # The k-th send of this rank to its peer is the k-th receive of the peer from it, same size.
        assert sends == [(step, other, dims) for step, _, dims in _p2p(traces[other], "c10d::recv_")]
        assert {dims for _, _, dims in sends} == {str([_MICROBATCH])}


def test_gloo_p2p_runs_on_the_main_thread(run: tuple[Path, dict[int, dict[str, Any]]]) -> None:
    _, traces = run
    for trace in traces.values():
        for name in ("gloo:send", "gloo:recv"):
            events = [e for step in step_events(trace, name) for e in step]
            assert len(events) == 8, name
            assert {(e["cat"], e["tid"] == e["pid"]) for e in events} == {("user_annotation", True)}
            assert {str(e["args"]["Input Dims"]) for e in events} == {str([_MICROBATCH])}


def test_ddp_all_reduces_on_dp_once_a_step(run: tuple[Path, dict[int, dict[str, Any]]]) -> None:
    _, traces = run
    for trace in traces.values():
        steps = step_events(trace, "c10d::allreduce_")
        assert [[str(e["args"]["Input Dims"][0]) for e in step] for step in steps] == [
            [str([[_STAGE_PARAMS]])]
        ] * 2
        gloo = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e["name"] == "gloo:all_reduce"]
        assert [e["args"]["Input Dims"] for e in gloo] == [[[_STAGE_PARAMS]]] * 2
        assert all(e["tid"] != e["pid"] for e in gloo)  # on a pt_gloo_runloop thread


def test_timeline_loads_every_send_and_receive(run: tuple[Path, dict[int, dict[str, Any]]]) -> None:
    run_dir, traces = run
    raw = raw_gloo_collectives(traces)
    assert {kind for _, kind in raw} == {"send", "recv", "all_reduce"}
    assert loaded_collectives(run_dir) == raw
