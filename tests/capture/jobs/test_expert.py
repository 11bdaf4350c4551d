"""A real 4-rank expert-parallel job on a 2 x 2 ``("dp", "ep")`` mesh (gloo), checked in the raw JSON.

One run of the ``expert`` demo job (top-1 routing of 32 tokens per rank to 2 experts per rank,
``all_to_all_single`` with uneven splits; steps 1-2 recorded, 10-20 s on 2 cores) serves every test.
The splits are read from the files with the standard library and checked across the ranks of each
``ep`` group: what one rank sends to another is what that rank receives from it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.builders import (
    assert_mesh_pg_config,
    capture_job_traces,
    loaded_collectives,
    mesh_groups,
    raw_gloo_collectives,
    step_events,
)

_TOKENS, _WIDTH = 32, 32
_EXPERT_GRADS = 2 * (32 * 64 + 64 + 64 * 32 + 32)  # 2 local experts, all-reduced on dp
_ROUTER_GRADS = 32 * 4 + 4  # Linear(32, 2 ranks x 2 experts), all-reduced on every rank


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[int, dict[str, Any]]]:
    out = tmp_path_factory.mktemp("expert")
    return out, capture_job_traces(out, "expert")


def test_pg_config_lists_the_mesh_groups_of_each_rank(run: tuple[Path, dict[int, dict[str, Any]]]) -> None:
    assert_mesh_pg_config(run[1], ("dp", "ep"))


def _token_exchanges(trace: dict[str, Any]) -> list[tuple[list[int], list[int], int, int]]:
    """Return ``(output splits, input splits, output rows, input rows)`` of each float all-to-all.

    ``c10d::alltoall_base_`` takes ``(output, input, process_group, output_split_sizes,
    input_split_sizes, asyncOp, timeout)``; the splits are in ``Concrete Inputs``.
    """
    out = []
    for step in step_events(trace, "c10d::alltoall_base_"):
        for e in step:
            args = e["args"]
            if args["Input type"][1] == "float":
                rows = [dims[0] for dims in args["Input Dims"][:2]]
                out.append(
                    (json.loads(args["Concrete Inputs"][3]), json.loads(args["Concrete Inputs"][4]), *rows)
                )
    return out


def test_each_step_exchanges_counts_then_tokens(run: tuple[Path, dict[int, dict[str, Any]]]) -> None:
    _, traces = run
    for trace in traces.values():
        # 1 exchange of the int64 counts per expert, 2 of tokens forward, 2 of their gradients.
        steps = step_events(trace, "c10d::alltoall_base_")
        assert [[e["args"]["Input type"][1] for e in step] for step in steps] == [
            ["long int"] + ["float"] * 4
        ] * 2
        for output_splits, input_splits, output_rows, input_rows in _token_exchanges(trace):
            assert (sum(output_splits), sum(input_splits)) == (output_rows, input_rows)
        gloo = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e["name"] == "gloo:all_to_all"]
        assert len(gloo) == 10
        assert all(e["tid"] != e["pid"] for e in gloo)


def test_splits_are_uneven_and_agree_across_the_ep_group(run: tuple[Path, dict[int, dict[str, Any]]]) -> None:
    _, traces = run
    exchanges = {rank: _token_exchanges(trace) for rank, trace in traces.items()}
    uneven = 0
    for rank in traces:
        _, ep = mesh_groups(rank, 4)
        me = ep.index(rank)
        for k, (_, input_splits, _, _) in enumerate(exchanges[rank]):
            uneven += len(set(input_splits)) > 1
            for peer, sent in zip(ep, input_splits, strict=True):
                assert exchanges[peer][k][0][me] == sent, (rank, peer, k)
    assert uneven > 0


def test_gradients_all_reduce_on_dp_and_on_the_world(run: tuple[Path, dict[int, dict[str, Any]]]) -> None:
    _, traces = run
    for trace in traces.values():
        steps = step_events(trace, "c10d::allreduce_")
        expected = [str([[_EXPERT_GRADS]]), str([[_ROUTER_GRADS]])]
        assert [[str(e["args"]["Input Dims"][0]) for e in step] for step in steps] == [expected] * 2
        gloo = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e["name"] == "gloo:all_reduce"]
        dp_threads = {e["tid"] for e in gloo if e["args"]["Input Dims"] == [[_EXPERT_GRADS]]}
        world_threads = {e["tid"] for e in gloo if e["args"]["Input Dims"] == [[_ROUTER_GRADS]]}
        assert dp_threads
        assert world_threads
        assert dp_threads.isdisjoint(world_threads)  # two groups, two sets of gloo threads


def test_timeline_loads_every_collective(run: tuple[Path, dict[int, dict[str, Any]]]) -> None:
    run_dir, traces = run
    raw = raw_gloo_collectives(traces)
    assert {kind for _, kind in raw} == {"all_to_all", "all_reduce"}
    assert loaded_collectives(run_dir) == raw
