"""What-if per dimension (#20): collectives matched within their process group instance, links per dimension.

Expected figures come from the traces' raw JSON (``distributedInfo.pg_config``), the generator's
ground truth (:mod:`tests.generators.nccl`) and a plain-Python cost model written here, never from
the code under test.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.builders import SAMPLES
from tests.generators.nccl import device_mesh_job, write_job
from timeline.execution import LocalExecutor, graph_files
from timeline.trace import load
from timeline.whatif.engine import Scenario, cost_fit, link_times, replay, self_replay
from timeline.whatif.graph import TraceGraph, combine_graph_parts, graph_from_parts, graph_parts, trace_graph

FSDP_TP = SAMPLES / "fsdp2_tp_gloo"
SYNCHRONISING = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "barrier"}


def _raw_groups(directory: Path) -> dict[int, dict[str, tuple[int, ...]]]:
    """Rank → dimension label → the global ranks of the rank's group of it, from raw ``pg_config``."""
    out: dict[int, dict[str, tuple[int, ...]]] = {}
    for path in sorted(directory.glob("*.json*")):
        if path.name == "manifest.json":
            continue
        opener: Any = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt") as handle:
            info = json.load(handle)["distributedInfo"]
        groups = {}
        for pg in info["pg_config"]:
            desc = pg["pg_desc"]
            label = "world" if desc == "default_pg" else desc.removeprefix("mesh_")
            ranks = pg["ranks"] if isinstance(pg["ranks"], list) else json.loads(pg["ranks"])
            groups[label] = tuple(ranks)
        out[int(info["rank"])] = groups
    return out


def _bus_factor(kind: str, n: int) -> float:
    """nccl-tests' bus factors (ring): all-reduce 2(n-1)/n, gather/scatter kinds (n-1)/n."""
    if kind == "all_reduce":
        return 2 * (n - 1) / n
    return (n - 1) / n


def _steps(kind: str, n: int) -> int:
    """Ring steps: all-reduce 2(n-1), the others n-1."""
    return 2 * (n - 1) if kind == "all_reduce" else n - 1


def _expected_ns(kind: str, nbytes: int, n: int, *, gbps: float, latency_s: float) -> float:
    """``steps · α + bytes · 8 · bus factor / bandwidth``, in ns."""
    return (_steps(kind, n) * latency_s + nbytes * 8 * _bus_factor(kind, n) / (gbps * 1e9)) * 1e9


@pytest.fixture(scope="module")
def fsdp() -> tuple[TraceGraph, dict[int, dict[str, tuple[int, ...]]]]:
    return trace_graph(load(FSDP_TP), link_gbps=10.0), _raw_groups(FSDP_TP)


@pytest.fixture(scope="module")
def nccl(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[TraceGraph, dict[int, dict[str, tuple[int, ...]]]]:
    directory = tmp_path_factory.mktemp("mesh")
    job = device_mesh_job([("dp", 2), ("tp", 4)], steps=2, gpus_per_node=8, seed=5)
    write_job(job, directory)
    graph = trace_graph(load(directory), link_gbps=100.0)
    # the graph's bytes are the generator's (nccl-tests' convention: an all-gather's gathered total)
    truth = sorted(
        (c.dim, c.kind, c.out_bytes if c.kind == "all_gather" else c.in_bytes)
        for c in job.collectives
        for _ in c.ranks
    )
    got = sorted((o.dimension, o.collective, o.nbytes) for o in graph.ops)
    assert got == truth
    return graph, _raw_groups(directory)


@pytest.fixture(params=["fsdp2_tp_gloo", "nccl_dp2_tp4"])
def case(
    request: pytest.FixtureRequest,
) -> tuple[TraceGraph, dict[int, dict[str, tuple[int, ...]]]]:
    fixture = "fsdp" if request.param == "fsdp2_tp_gloo" else "nccl"
    value: tuple[TraceGraph, dict[int, dict[str, tuple[int, ...]]]] = request.getfixturevalue(fixture)
    return value


def test_collectives_are_matched_within_the_ranks_of_their_group_only(
    case: tuple[TraceGraph, dict[int, dict[str, tuple[int, ...]]]],
) -> None:
    graph, groups = case
    ops = {o.op_id: o for o in graph.ops}
    assert set(graph.dimensions) == {"dp", "tp"}
    matched: dict[str, int] = {"dp": 0, "tp": 0}
    for o in graph.ops:
        assert o.dimension in ("dp", "tp")
        assert o.group_size == len(groups[o.rank][o.dimension])
    for inst in graph.instances:
        if len(inst.ops) < 2:
            continue
        members = [ops[i] for i in inst.ops]
        dimension = members[0].dimension
        assert dimension is not None
        assert {m.dimension for m in members} == {dimension}
        ranks = {m.rank for m in members}
        # every member's own group of that dimension holds every rank of the instance
        for m in members:
            assert ranks <= set(groups[m.rank][dimension]), (inst, groups[m.rank])
        if inst.synchronising:
            matched[dimension] += 1
    assert matched["dp"] > 0
    assert matched["tp"] > 0


def test_a_tp_link_moves_only_the_tp_collectives(
    case: tuple[TraceGraph, dict[int, dict[str, tuple[int, ...]]]],
) -> None:
    graph, groups = case
    base = Scenario(efficiency="full", bandwidth_gbps=10.0, latency_s=5e-6)
    faster_tp = replace(base, dimension_bandwidths=(("tp", 100.0),))
    before = link_times(graph, scenario=base).sort("op_id")
    after = link_times(graph, scenario=faster_tp).sort("op_id")
    assert before.get_column("op_id").to_list() == after.get_column("op_id").to_list()
    tp_rows = 0
    for old, new in zip(before.iter_rows(named=True), after.iter_rows(named=True), strict=True):
        n = len(groups[new["rank"]][new["dimension"]])
        kind, nbytes = new["collective"], new["nbytes"]
        if nbytes is None:  # gloo's all-gathers record no bytes: they keep their measured time
            assert new["link_ns"] == old["link_ns"]
            continue
        if new["dimension"] == "tp":
            tp_rows += 1
            expected = _expected_ns(kind, nbytes, n, gbps=100.0, latency_s=5e-6)
            assert new["link_ns"] == pytest.approx(expected, rel=1e-9)
            assert new["link_ns"] < old["link_ns"]
        else:
            assert new["link_ns"] == old["link_ns"]
        expected_before = _expected_ns(kind, nbytes, n, gbps=10.0, latency_s=5e-6)
        assert old["link_ns"] == pytest.approx(expected_before, rel=1e-9)
    assert tp_rows > 0


def _fixed_ns(graph: TraceGraph) -> dict[int, float]:
    """Per collective (op id): its fixed cost per call, its kind and group's fitted ``α`` (at most its time).

    The fit itself is tested on generated traces (``tests/analysis/test_collective_costs.py``); here
    it is what a faster link does not shorten.
    """
    alpha = {
        (row["collective"], row["group"]): row["alpha_ns"] or 0.0
        for row in cost_fit(graph).iter_rows(named=True)
    }
    work = {op_id: inst.work_ns for inst in graph.instances for op_id in inst.ops}
    return {o.op_id: min(alpha.get((o.collective, o.group), 0.0), work[o.op_id]) for o in graph.ops}


def test_observed_efficiency_scales_the_tp_bandwidth_term_alone(
    case: tuple[TraceGraph, dict[int, dict[str, tuple[int, ...]]]],
) -> None:
    graph, _ = case
    measured = graph.link_gbps
    assert measured is not None
    fixed = _fixed_ns(graph)
    before = link_times(graph, scenario=Scenario()).sort("op_id")
    after = link_times(graph, scenario=Scenario(dimension_bandwidths=(("tp", measured * 4),))).sort("op_id")
    for old, new in zip(before.iter_rows(named=True), after.iter_rows(named=True), strict=True):
        factor = 0.25 if new["dimension"] == "tp" else 1.0
        alpha = fixed[new["op_id"]]
        assert new["link_ns"] == pytest.approx(alpha + (old["link_ns"] - alpha) * factor, rel=1e-9)


def test_a_tp_latency_moves_only_the_tp_collectives(
    case: tuple[TraceGraph, dict[int, dict[str, tuple[int, ...]]]],
) -> None:
    graph, groups = case
    base = Scenario(efficiency="full", bandwidth_gbps=10.0)
    slow_tp = replace(base, dimension_latencies=(("tp", 1e-3),))
    before = link_times(graph, scenario=base).sort("op_id")
    after = link_times(graph, scenario=slow_tp).sort("op_id")
    fixed = _fixed_ns(graph)
    for old, new in zip(before.iter_rows(named=True), after.iter_rows(named=True), strict=True):
        n = len(groups[new["rank"]][new["dimension"]])
        # the tp latency replaces the fixed cost fitted from the trace by its steps of 1 ms
        added = (
            _steps(new["collective"], n) * 1e-3 * 1e9 - fixed[new["op_id"]]
            if new["dimension"] == "tp"
            else 0.0
        )
        assert new["link_ns"] - old["link_ns"] == pytest.approx(added, abs=1e-3)


def test_a_tp_and_a_dp_speed_up_are_different_questions(
    case: tuple[TraceGraph, dict[int, dict[str, tuple[int, ...]]]],
) -> None:
    graph, _ = case
    slow = Scenario(efficiency="full", bandwidth_gbps=1.0)
    steps = {
        name: replay(graph, scenario=replace(slow, dimension_bandwidths=pairs)).iteration_ns
        for name, pairs in {
            "none": (),
            "tp": (("tp", 100.0),),
            "dp": (("dp", 100.0),),
            "both": (("tp", 100.0), ("dp", 100.0)),
        }.items()
    }
    everything = replay(graph, scenario=replace(slow, bandwidth_gbps=100.0)).iteration_ns
    assert abs(steps["tp"] - steps["dp"]) > 1_000  # more than a microsecond apart
    assert steps["both"] <= min(steps["tp"], steps["dp"]) <= max(steps["tp"], steps["dp"]) < steps["none"]
    assert steps["both"] == pytest.approx(everything, rel=1e-9)  # every collective is tp or dp


def test_the_measured_settings_still_reproduce_the_measured_step(
    case: tuple[TraceGraph, dict[int, dict[str, tuple[int, ...]]]],
) -> None:
    graph, _ = case
    check = self_replay(graph)
    assert check.error_ratio <= 0.005
    # naming a dimension at the measured link changes nothing
    assert graph.link_gbps is not None
    same = replay(graph, scenario=Scenario(dimension_bandwidths=(("tp", graph.link_gbps),)))
    assert same.iteration_ns == pytest.approx(check.iteration_ns, rel=1e-9)


def test_collectives_of_a_group_the_traces_cannot_tell_are_matched_with_no_rank(tmp_path: Path) -> None:
    """Two dimensions of the same size, no group names on the events, no clocks compared: ambiguous."""
    job = device_mesh_job([("dp", 2), ("tp", 2)], steps=1, names=False, seed=12)
    write_job(job, tmp_path)
    trace = load(tmp_path)
    graph = combine_graph_parts([graph_parts(trace.events, groups=trace.groups)], clocks=None)
    ambiguous = [o for o in graph.ops if o.group is None]
    assert ambiguous
    alone = {i for inst in graph.instances if len(inst.ops) == 1 for i in inst.ops}
    assert {o.op_id for o in ambiguous} <= alone
    assert all(o.dimension is None for o in ambiguous)
    # with the clocks of one node compared, as `timeline collectives` leaves them: ambiguous, alone
    loaded = trace_graph(trace)
    assert {o.op_id for o in loaded.ops if o.group is None} == {o.op_id for o in ambiguous}
    assert all(len(inst.ops) == 1 for inst in loaded.instances)


def test_a_trace_of_one_group_is_matched_as_before() -> None:
    """DDP on the world group: with or without its ``pg_config``, the same logical collectives."""
    trace = load(SAMPLES / "ddp_gloo")
    undeclared = combine_graph_parts([graph_parts(trace.events)])
    declared = trace_graph(trace)
    assert [i.ops for i in declared.instances] == [i.ops for i in undeclared.instances]
    assert sum(len(i.ops) > 1 for i in declared.instances) > 0
    assert {o.dimension for o in declared.ops} == {"world"}
    assert pl.Series([o.group_size for o in declared.ops]).unique().to_list() == [2]


def test_rank_by_rank_parts_tell_the_same_groups() -> None:
    """Each rank's part keeps its ``pg_config`` rows: combined, the graph of the loaded trace."""
    trace = load(FSDP_TP)
    expected = trace_graph(trace)
    ranks = trace.events.get_column("rank").unique().sort().to_list()
    parts = [
        graph_parts(trace.events.filter(pl.col("rank") == r), groups=trace.groups) for r in reversed(ranks)
    ]
    got = graph_from_parts(parts, files=trace.files)
    assert got.ops == expected.ops
    assert got.instances == expected.instances
    on_executor = graph_files(FSDP_TP, executor=LocalExecutor(2)).graph()
    assert on_executor.ops == expected.ops
    assert on_executor.instances == expected.instances
    assert sum(inst.synchronising for inst in expected.instances) > 0


def test_a_measured_link_per_dimension_scales_that_dimension_from_its_own_link(
    case: tuple[TraceGraph, dict[int, dict[str, tuple[int, ...]]]],
) -> None:
    graph, _ = case
    assert graph.link_gbps is not None
    measured = replace(graph, dimension_links=(("tp", graph.link_gbps * 4),))
    before = link_times(graph, scenario=Scenario()).sort("op_id")
    # tp's collectives ran on a link 4 times faster: at that link they keep their time, at twice it halve
    same = link_times(measured, scenario=Scenario(dimension_bandwidths=(("tp", graph.link_gbps * 4),)))
    halved = link_times(measured, scenario=Scenario(dimension_bandwidths=(("tp", graph.link_gbps * 8),)))
    rows = zip(
        before.iter_rows(named=True),
        same.sort("op_id").iter_rows(named=True),
        halved.sort("op_id").iter_rows(named=True),
        strict=True,
    )
    fixed = _fixed_ns(measured)  # tp's fixed costs, fitted with tp's own link
    for old, kept, new in rows:
        assert kept["link_ns"] == pytest.approx(old["link_ns"], rel=1e-9)
        factor = 0.5 if new["dimension"] == "tp" else 1.0
        alpha = fixed[new["op_id"]]
        assert new["link_ns"] == pytest.approx(alpha + (old["link_ns"] - alpha) * factor, rel=1e-9)
