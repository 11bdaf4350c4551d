"""The dependency graph: ready times, pools, logical collectives, waits, gradients, link sharing."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.builders import after_backward_gloo_rank, cpu, gloo_all_reduce, make_events, step
from tests.whatif.synthetic import US, gloo_rank, gpu_rank, gpu_run
from timeline.errors import TraceContentError
from timeline.whatif.graph import build_graph, exclusive_work


def test_gpu_rank_graph() -> None:
    graph = build_graph(gpu_run(gpu_rank()))
    assert graph.modes == {0: "gpu"}
    assert graph.compute.select("start_ns", "end_ns").rows() == [(0, 200 * US), (255 * US, 300 * US)]
    (op,) = graph.ops
    assert op.ready_ns == 100 * US  # K1, launched before the all-reduce, ends at 100 µs
    assert op.launch_delay_ns == 10 * US
    assert (op.channel, op.pool, op.nbytes, op.group_size) == ("stream 20", "0/stream 20", 100_000, 2)
    assert op.gradient  # no gradient signals: every all-reduce synchronises gradients
    (instance,) = graph.instances
    assert not instance.synchronising  # one rank traced: its own duration is the transfer
    assert instance.transfer_ns == instance.work_ns == 140 * US
    (wait,) = graph.waits
    assert (wait.gap_start_ns, wait.resume_ns, wait.deps, wait.resume_delay_ns, wait.update) == (
        200 * US,
        255 * US,
        (0,),
        5 * US,
        True,
    )
    assert graph.gradient_source == "collectives"  # the all-reduce stands for its gradients
    assert graph.world_size == 2  # from Group size
    assert graph.has_iterations


def test_two_ranks_make_one_synchronising_collective() -> None:
    graph = build_graph(gpu_run(gpu_rank(0, comm=(110, 250)), gpu_rank(1, comm=(150, 251))))
    (instance,) = graph.instances
    assert instance.synchronising
    assert instance.transfer_ns == 100 * US  # min end − max start
    assert instance.lags_ns == (0, 1 * US)
    assert instance.work_ns == 100 * US


def test_a_late_resume_is_not_a_wait_before_backward_ends() -> None:
    rows = gpu_rank()
    # K3 resumes 60 µs after the all-reduce: too late to be waiting for it, and not after backward.
    rows[-1] = {**rows[-1], "start_ns": 310 * US, "end_ns": 320 * US}
    rows[-3] = {**rows[-3], "start_ns": 110 * US, "end_ns": 150 * US}
    rows.append({**rows[-1], "start_ns": 200 * US, "end_ns": 210 * US, "correlation": 5, "name": "K2b"})
    graph = build_graph(make_events(rows))
    assert all(w.update for w in graph.waits)  # only the update's wait is left


def test_gloo_rank_graph_with_markers() -> None:
    graph = build_graph(make_events(gloo_rank()), link_gbps=1.0)
    assert graph.modes == {0: "cpu"}
    (op,) = graph.ops
    assert op.ready_ns == 50 * US  # the c10d::allreduce_ call
    assert op.launch_delay_ns == 10 * US
    assert op.pool == "0/group *"
    assert graph.gradient_source == "markers"
    assert [(g.name, g.nbytes, g.ready_ns) for g in graph.gradients] == [
        ("fc.bias", 1000, 45 * US),
        ("fc.weight", 3000, 48 * US),
    ]
    (wait,) = graph.waits
    assert (wait.gap_start_ns, wait.resume_ns, wait.resume_delay_ns, wait.update) == (
        100 * US,
        170 * US,
        10 * US,
        True,
    )
    assert graph.link_gbps == 1.0


def test_accumulate_grad_shares_the_collectives_bytes() -> None:
    rows = gloo_rank(markers=False)
    rows += [
        {**rows[1], "name": "torch::autograd::AccumulateGrad", "start_ns": 44 * US, "end_ns": 45 * US},
        {**rows[1], "name": "torch::autograd::AccumulateGrad", "start_ns": 47 * US, "end_ns": 48 * US},
    ]
    graph = build_graph(make_events(rows))
    assert graph.gradient_source == "accumulate_grad"
    assert [(g.nbytes, g.ready_ns) for g in graph.gradients] == [(2000, 45 * US), (2000, 48 * US)]


def test_gradients_reduced_one_by_one_after_backward_each_ride_their_own_collective() -> None:
    graph = build_graph(make_events(after_backward_gloo_rank(0) + after_backward_gloo_rank(1)))
    for rank in (0, 1):
        ops = sorted((o for o in graph.ops if o.rank == rank), key=lambda o: o.ready_ns)
        gradients = [g for g in graph.gradients if g.rank == rank]
        # every marker precedes the first all-reduce; still each carries its own gradient, no other
        assert [(g.name, g.nbytes, g.ready_ns, g.signal) for g in gradients] == [
            ("p0", 1000, 49_990, True),
            ("p1", 2000, 51_990, True),
            ("p2", 4000, 53_990, True),
            ("p3", 8000, 55_990, True),
        ]
        assert [g.op_id for g in gradients] == [o.op_id for o in ops]
        assert [o.nbytes for o in ops] == [1000, 2000, 4000, 8000]


def test_a_collective_sending_half_its_gradients_bytes_carries_them_all() -> None:
    # p0 and p1 (1 kB each) in one all-reduce, p2 (2 kB) in the next, each sent at half its bytes
    rows = [step(1, 0, 100 * US), cpu("cpu_op", 0, 56 * US, name="backward")]
    for k, (nbytes, at) in enumerate(((1000, 50), (1000, 52), (2000, 54))):
        rows.append(cpu("cpu_op", at * US - 10, at * US, name=f"timeline.grad_ready:p{k}:{nbytes}"))
    for start, end in ((56 * US, 66 * US), (66 * US, 76 * US)):
        rows.append(cpu("cpu_op", start, start + 10, name="c10d::allreduce_"))
        rows.append(gloo_all_reduce(start, end, nbytes=1000))
    rows.append(cpu("cpu_op", 76 * US, 86 * US, name="update"))
    graph = build_graph(make_events(rows))
    first, second = sorted(graph.ops, key=lambda o: o.ready_ns)
    carried = {g.name: g.op_id for g in graph.gradients}
    assert carried == {"p0": first.op_id, "p1": first.op_id, "p2": second.op_id}
    assert sum(g.nbytes for g in graph.gradients) == 4000  # the gradients' bytes, none made up


def test_horovod_only_is_refused() -> None:
    rows = [{"rank": 0, "kind": "communication", "source": "horovod", "start_ns": 0, "end_ns": 10, "pid": 1}]
    with pytest.raises(TraceContentError, match="needs compute events"):
        build_graph(make_events(rows))


def test_exclusive_work_hand_cases() -> None:
    assert exclusive_work([(0, 0, 10, [0]), (1, 5, 10, [0])]) == {0: 7.5, 1: 2.5}
    # Two ranks: a transfer over both goes at the pace of its most loaded rank.
    work = exclusive_work([(0, 0, 10, [0, 1]), (1, 0, 10, [1]), (2, 0, 10, [1])])
    assert work == pytest.approx({0: 10 / 3, 1: 10 / 3, 2: 10 / 3})
    assert exclusive_work([(0, 5, 5, [0])]) == {0: 0.0}


intervals = st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 300)), min_size=1, max_size=12)


@given(intervals)
def test_exclusive_work_on_one_link_adds_up_to_its_busy_time(items: list[tuple[int, int]]) -> None:
    transfers = [(k, a, a + d, [0]) for k, (a, d) in enumerate(items)]
    work = exclusive_work(transfers)
    busy = 0
    reach = -1
    for a, b in sorted((a, a + d) for a, d in items if d > 0):
        if a > reach:
            busy += b - a
        elif b > reach:
            busy += b - reach
        reach = max(reach, b)
    assert sum(work.values()) == pytest.approx(busy)
    for k, (_a, d) in enumerate(items):
        assert 0 <= work[k] <= d + 1e-9
