"""The graph changes a fix makes (``timeline.whatif.transform``), and ``window_lengths``, on hand-made runs.

Times in µs. Each expected replayed step is worked out by hand from the run written here.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tests.builders import KINETO, SAMPLES, after_backward_rank, cpu, cpu_all_reduce_call, make_events, step
from timeline.trace import load
from timeline.whatif.engine import Scenario, replay, window_lengths
from timeline.whatif.graph import build_graph, trace_graph
from timeline.whatif.transform import contract, launch_when_ready, restrict

US = 1_000


def _two_steps(rank: int, *, idle: int) -> list[dict[str, object]]:
    """Two steps of 100 µs: idle, a 40 µs backward, a blocking all-reduce until 90, an update until 100."""
    rows: list[dict[str, object]] = []
    for n in (1, 2):
        t0 = 100 * (n - 1)
        rows += [
            step(n, t0 * US, (t0 + 100) * US, rank=rank),
            cpu("cpu_op", (t0 + idle) * US, (t0 + idle + 40) * US, rank=rank, name="backward"),
            *cpu_all_reduce_call((t0 + idle + 40) * US, ((t0 + idle + 40) * US, (t0 + 90) * US), rank=rank),
            cpu("cpu_op", (t0 + 90) * US, (t0 + 100) * US, rank=rank, name="update"),
        ]
    return rows


def _graph() -> object:
    # rank 1 idles 30 µs at the start of each step; rank 0 waits for it in the all-reduce
    return build_graph(make_events(_two_steps(0, idle=0) + _two_steps(1, idle=30)))


def _lengths_by(graph: object) -> dict[tuple[int, int], int]:
    lengths = window_lengths(graph)  # type: ignore[arg-type]
    rows = graph.windows.select("window_id", "rank", "iteration").iter_rows()  # type: ignore[attr-defined]
    return {(rank, iteration): lengths[w] for w, rank, iteration in rows}


def test_window_lengths_are_replay_s_predicted_windows() -> None:
    graph = _graph()
    predicted = replay(graph).windows  # type: ignore[arg-type]
    expected = {(r, i): p for r, i, p in predicted.select("rank", "iteration", "predicted_ns").iter_rows()}
    assert _lengths_by(graph) == expected
    single = replay(graph, scenario=Scenario()).windows.select("window_id", "single_ns")  # type: ignore[arg-type]
    alone = window_lengths(graph, scenario=Scenario(communication=False))  # type: ignore[arg-type]
    assert dict(single.iter_rows()) == alone


def test_restrict_keeps_an_iteration_and_replays_it_as_measured() -> None:
    graph = _graph()
    second = restrict(graph, [2])  # type: ignore[arg-type]
    assert set(second.windows.get_column("iteration").to_list()) == {2}
    assert all(o.start_ns >= 100 * US for o in second.ops)
    assert {w.rank for w in second.waits} == {0, 1}
    assert _lengths_by(second) == {(0, 2): 100 * US, (1, 2): 100 * US}


def test_contract_removes_a_rank_s_idle_as_if_never_spent() -> None:
    graph = _graph()
    # rank 1's 30 µs of idle of each step removed: both ranks compute [0, 40), then the transfer (20 µs:
    # rank 1 started the all-reduce at 70 and every rank ended it at 90), update until 70
    fixed = contract(graph, {1: [(0, 30 * US), (100 * US, 130 * US)]})  # type: ignore[arg-type]
    assert _lengths_by(fixed) == {(0, 1): 70 * US, (1, 1): 70 * US, (0, 2): 70 * US, (1, 2): 70 * US}
    # rank 1's own times moved: its first window ends 30 µs earlier, its second 30 µs earlier still
    windows = {
        (r, i): (s, e)
        for r, i, s, e in fixed.windows.select("rank", "iteration", "start_ns", "end_ns").iter_rows()
    }
    assert windows[(1, 1)] == (0, 70 * US)
    assert windows[(1, 2)] == (70 * US, 140 * US)
    assert windows[(0, 1)] == (0, 100 * US)  # other ranks unchanged


def test_contract_of_nothing_is_the_same_graph() -> None:
    graph = _graph()
    assert contract(graph, {}) is graph  # type: ignore[arg-type]
    assert contract(graph, {1: []}) is graph


def test_launch_when_ready_moves_each_collective_to_its_gradients() -> None:
    graph = build_graph(make_events(after_backward_rank(0) + after_backward_rank(1)))
    ready = launch_when_ready(graph)
    moved = sorted((o.rank, o.ready_ns) for o in ready.ops)
    assert moved == [(0, 30 * US), (0, 45 * US), (0, 60 * US), (1, 30 * US), (1, 45 * US), (1, 60 * US)]
    # the collectives end at 40, 55, 70: the main thread resumes at 61, 62, then at 70; update until 80
    assert set(_lengths_by(ready).values()) == {80 * US}
    assert set(_lengths_by(graph).values()) == {100 * US}


def test_launch_when_ready_never_delays_a_collective() -> None:
    graph = trace_graph(load(SAMPLES / "ddp_gloo_markers"))
    ready = launch_when_ready(graph)
    for before, after in zip(graph.ops, ready.ops, strict=True):
        assert after.ready_ns <= before.ready_ns
        assert after.op_id == before.op_id


@pytest.mark.parametrize(
    "path",
    [
        KINETO / "param_dlrm_8rank",
        KINETO / "hta_nccl_parser_config",
        KINETO / "hta_trace_diff" / "test.json.gz",
        KINETO / "hta_negative_queue_length",
        SAMPLES / "ddp_gloo_markers",
    ],
)
def test_a_load_of_the_overlap_s_events_gives_the_full_load_s_graph(path: Path) -> None:
    full = trace_graph(load(path))
    light = trace_graph(load(path, overlap_only=True))
    assert light.ops == full.ops
    assert light.instances == full.instances
    assert light.waits == full.waits
    assert light.gradients == full.gradients
    assert light.gradient_source == full.gradient_source
    assert light.windows.equals(full.windows)
    assert light.compute.equals(full.compute)
    assert pl.DataFrame({"n": [len(full.gradients)]}).item() == len(light.gradients)
