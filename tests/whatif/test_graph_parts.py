"""The graph built rank by rank: ``combine_graph_parts`` of per-rank parts equals ``build_graph``.

Each case splits a run's events by rank (one part per rank, uneven groups, interleaved groups, in
a shuffled order) and checks that combining the parts gives exactly the graph of all the events:
the same frames row for row, the same ops, instances, waits, gradients and warnings.
"""

from __future__ import annotations

import json
import pickle
import random
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from tests.builders import REPO, TRACES, cpu, gpu, launch, make_events, step
from tests.whatif.synthetic import US, gloo_rank, gpu_rank, gpu_run
from timeline import load
from timeline.errors import RankError, TraceContentError
from timeline.trace import Trace
from timeline.whatif.graph import (
    GraphParts,
    TraceGraph,
    build_graph,
    combine_graph_parts,
    graph_from_parts,
    graph_parts,
    trace_graph,
)

KINETO = TRACES / "kineto"
HOROVOD = TRACES / "horovod" / "alcf_workshop__timeline_cpu_n1.json"
MULTI_RANK = [
    REPO / "sample_traces" / "ddp_gloo",  # CPU gloo DDP, AccumulateGrad, a capture manifest
    REPO / "sample_traces" / "ddp_gloo_markers",  # grad_ready markers
    REPO / "sample_traces" / "ddp_gloo_4rank",
    KINETO / "param_dlrm_8rank",  # PARAM DLRM, 8 GPU ranks
    KINETO / "hta_trace_filter_2rank",  # GPU, collectives that differ in kind across ranks
]


@cache
def _load(path: Path) -> Trace:
    return load(path)


def assert_same_graph(actual: TraceGraph, expected: TraceGraph) -> None:
    """Assert that two graphs are equal: frames row for row, everything else with ``==``."""
    assert_frame_equal(actual.windows, expected.windows)
    assert_frame_equal(actual.compute, expected.compute)
    assert actual.ranks == expected.ranks
    assert list(actual.modes.items()) == list(expected.modes.items())
    assert actual.ops == expected.ops
    assert actual.instances == expected.instances
    assert actual.waits == expected.waits
    assert actual.gradients == expected.gradients
    assert actual.gradient_source == expected.gradient_source
    assert actual.world_size == expected.world_size
    assert actual.link_gbps == expected.link_gbps
    assert actual.warnings == expected.warnings


def groupings(ranks: Sequence[int], *, seed: int = 0) -> list[list[list[int]]]:
    """Ways to split ``ranks`` into parts, each part list in a shuffled order.

    One part per rank; uneven groups ({first}, {next three}, {rest}); even ranks and odd ranks
    (interleaved); everything in one part.
    """
    ranks = sorted(ranks)
    splits = [
        [[r] for r in ranks],
        [g for g in (ranks[:1], ranks[1:4], ranks[4:]) if g],
        [g for g in (ranks[1::2], ranks[::2]) if g],
        [ranks],
    ]
    rng = random.Random(seed)
    shuffled = []
    for split in splits:
        order = list(split)
        rng.shuffle(order)
        shuffled.append(order)
    return shuffled


def split_events(events: pl.DataFrame, groups: Sequence[Sequence[int]]) -> list[pl.DataFrame]:
    """The events of each group of ranks (each rank's rows in their order)."""
    return [events.filter(pl.col("rank").is_in(list(group))) for group in groups]


def ranks_of(events: pl.DataFrame) -> list[int]:
    return sorted(int(r) for r in events.get_column("rank").unique().to_list())


def assert_rank_by_rank_equal(events: pl.DataFrame, **options: Any) -> TraceGraph:
    """Check every grouping of the ranks of ``events``; return the graph of all of them."""
    expected = build_graph(events, **options)
    for groups in groupings(ranks_of(events)):
        pieces = split_events(events, groups)
        combined = combine_graph_parts([graph_parts(piece) for piece in pieces], **options)
        assert_same_graph(combined, expected)
        assert_same_graph(combined, build_graph(pl.concat(pieces), **options))
    return expected


def horovod_rows(rank: int) -> list[dict[str, Any]]:
    """A Horovod timeline's rank: communication phases, no compute."""
    phases = [("communication", 0, 10 * US), ("memcpy", 10 * US, 12 * US)]
    return [
        {"rank": rank, "kind": kind, "source": "horovod", "start_ns": start, "end_ns": end, "pid": 1}
        for kind, start, end in phases
    ]


# -- real traces ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", MULTI_RANK, ids=lambda p: p.name)
def test_real_trace_rank_by_rank_equals_build_graph(path: Path) -> None:
    events = _load(path).events
    assert len(ranks_of(events)) > 1
    graph = assert_rank_by_rank_equal(events)
    assert graph.ops
    assert_rank_by_rank_equal(events, world_size=64, link_gbps=10.0, resume_tolerance_ns=5_000)


@pytest.mark.parametrize("path", MULTI_RANK, ids=lambda p: p.name)
def test_real_trace_graph_from_parts_equals_trace_graph(path: Path) -> None:
    trace = _load(path)
    for groups in groupings(trace.ranks, seed=1):
        parts = [graph_parts(piece) for piece in split_events(trace.events, groups)]
        assert_same_graph(graph_from_parts(parts, files=trace.files), trace_graph(trace))
        assert_same_graph(
            graph_from_parts(parts, files=trace.files, link_gbps=2.5, resume_tolerance_ns=0),
            trace_graph(trace, link_gbps=2.5, resume_tolerance_ns=0),
        )


def test_parts_shifted_by_clock_offsets_build_the_graph_of_the_shifted_events() -> None:
    """``--align`` rank by rank: each task's parts moved by the offsets (``shift_parts``) build the graph
    of the events moved by them (``apply_clock_offsets``), groups and unmatched calls kept."""
    from timeline.analysis.alignment import apply_clock_offsets
    from timeline.execution.reduce import shift_parts

    trace = _load(REPO / "sample_traces" / "ddp_gloo_4rank")
    offsets = pl.DataFrame(
        {"rank": [0, 1, 2, 3], "offset_ns": [0, 7_000, -3_000, None], "mad_ns": [0, 10, 10, None]},
        schema={"rank": pl.Int32, "offset_ns": pl.Int64, "mad_ns": pl.Int64},
    )
    moved = apply_clock_offsets(trace.events, offsets)
    parts = [graph_parts(piece) for piece in split_events(trace.events, [[0, 1], [2, 3]])]
    shifted = [shift_parts(part, offsets) for part in parts]
    for moved_part, part in zip(shifted, parts, strict=True):
        assert moved_part.groups is part.groups
        assert moved_part.unmatched_calls == part.unmatched_calls
    expected = combine_graph_parts([graph_parts(piece) for piece in split_events(moved, [[0, 1], [2, 3]])])
    assert_same_graph(combine_graph_parts(shifted), expected)
    assert combine_graph_parts(shifted).ops != combine_graph_parts(parts).ops  # the offsets did move them


def test_the_manifest_link_comes_from_the_files_table(tmp_path: Path) -> None:
    sample = REPO / "sample_traces" / "ddp_gloo_markers"
    manifest = json.loads((sample / "manifest.json").read_text())
    manifest["link_gbps"] = 12.5
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    loaded = _load(sample)
    trace = Trace(
        loaded.events, loaded.files.with_columns(path=pl.format(f"{tmp_path}/rank{{}}.json", "rank"))
    )
    parts = [graph_parts(piece) for piece in split_events(trace.events, [[1], [0]])]
    graph = graph_from_parts(parts, files=trace.files)
    assert graph.link_gbps == 12.5
    assert_same_graph(graph, trace_graph(trace))
    assert graph_from_parts(parts, files=trace.files, link_gbps=3.0).link_gbps == 3.0
    assert graph_from_parts(parts, files=loaded.files).link_gbps is None  # the sample's manifest: null


@pytest.mark.parametrize("path", MULTI_RANK, ids=lambda p: p.name)
def test_parts_are_small_and_picklable(path: Path) -> None:
    events = _load(path).events
    parts = [graph_parts(piece) for piece in split_events(events, [[r] for r in ranks_of(events)])]
    sizes = [len(pickle.dumps(part)) for part in parts]
    assert sum(sizes) < len(pickle.dumps(events)) / 10
    copies: list[GraphParts] = [pickle.loads(pickle.dumps(part)) for part in parts]
    assert_same_graph(combine_graph_parts(copies), build_graph(events))
    assert [p.ranks for p in parts] == [(r,) for r in ranks_of(events)]


def test_a_real_horovod_timeline_among_real_ranks_warns_once() -> None:
    gloo = _load(REPO / "sample_traces" / "ddp_gloo_4rank").events
    horovod = _load(HOROVOD).events
    runs = [horovod.with_columns(rank=pl.lit(r, dtype=pl.Int32)) for r in (5, 4)]
    events = pl.concat([gloo, *runs])
    graph = assert_rank_by_rank_equal(events)
    assert graph.ranks == (0, 1, 2, 3)
    assert graph.warnings[0].startswith("rank(s) [4, 5]: a Horovod timeline has no compute events")
    assert sum("Horovod" in w for w in graph.warnings) == 1


def test_a_real_horovod_timeline_alone_is_refused_the_same_way() -> None:
    horovod = _load(HOROVOD).events
    events = pl.concat([horovod.with_columns(rank=pl.lit(r, dtype=pl.Int32)) for r in (0, 1)])
    with pytest.raises(TraceContentError) as expected:
        build_graph(events)
    parts = [graph_parts(piece) for piece in split_events(events, [[1], [0]])]
    with pytest.raises(TraceContentError) as actual:
        combine_graph_parts(parts)
    assert str(actual.value) == str(expected.value)
    assert "needs compute events" in str(actual.value)


# -- synthetic runs ------------------------------------------------------------------------------


def test_synthetic_gpu_run_rank_by_rank() -> None:
    events = gpu_run(*(gpu_rank(r, comm=(110 + 10 * r, 250 + r)) for r in range(5)))
    # rank 3's collective says its group has 16 ranks: the world size is the largest over all ranks
    events = events.with_columns(group_size=pl.when(pl.col("rank") == 3).then(16).otherwise("group_size"))
    graph = assert_rank_by_rank_equal(events)
    assert graph.world_size == 16
    # a part without events adds nothing
    parts = [graph_parts(events.clear()), graph_parts(events)]
    assert_same_graph(combine_graph_parts(parts), graph)
    (instance,) = graph.instances
    assert instance.synchronising
    assert len(instance.ops) == 5
    assert graph.windows.get_column("window_id").to_list() == [0, 1, 2, 3, 4]
    assert graph.windows.get_column("rank").to_list() == [0, 1, 2, 3, 4]


def test_rows_of_several_ranks_interleaved() -> None:
    # The events of all ranks sorted by time (not by rank): rank by rank still gives their graph.
    rows = [row for r in range(4) for row in gloo_rank(r, comm=(60 + r, 160 + 2 * r))]
    events = make_events(rows).sort("start_ns", maintain_order=True)
    assert events.get_column("rank").head(4).to_list() != [0, 0, 0, 0]
    assert_rank_by_rank_equal(events)


def _accumulate_grad(rank: int) -> list[dict[str, Any]]:
    ops = [
        cpu("cpu_op", a * US, (a + 1) * US, rank=rank, name="torch::autograd::AccumulateGrad")
        for a in (44, 47)
    ]
    return [*gloo_rank(rank, markers=False), *ops]


def test_the_gradient_source_is_decided_over_all_ranks() -> None:
    # Rank 2 alone has markers: every rank's gradients come from markers (ranks 0 and 1: the
    # collectives stand for them), not from the AccumulateGrad ops of ranks 0 and 1.
    events = make_events(_accumulate_grad(0) + _accumulate_grad(1) + gloo_rank(2))
    graph = assert_rank_by_rank_equal(events)
    assert graph.gradient_source == "markers"
    assert [g.name for g in graph.gradients if g.rank == 2] == ["fc.bias", "fc.weight"]
    assert [g.name for g in graph.gradients if g.rank == 0] == ["collective 0"]
    # The part of rank 0 alone would use its AccumulateGrad ops: the choice is the combine's.
    alone = combine_graph_parts([graph_parts(events.filter(pl.col("rank") == 0))])
    assert alone.gradient_source == "accumulate_grad"
    # No rank with markers: the AccumulateGrad ops of every rank.
    events = make_events(_accumulate_grad(0) + _accumulate_grad(1) + gloo_rank(2, markers=False))
    graph = assert_rank_by_rank_equal(events)
    assert graph.gradient_source == "accumulate_grad"
    assert [g.name for g in graph.gradients if g.rank == 2] == ["collective 2"]


def test_tied_gradient_markers_keep_the_order_of_their_events() -> None:
    # GPU ranks whose two markers fall between the same launches: both ready when K1 ends.
    def rank_rows(rank: int) -> list[dict[str, Any]]:
        names = ["timeline.grad_ready:b:10", "timeline.grad_ready:a:20", "timeline.grad_ready:c:30"]
        markers = [
            cpu("cpu_op", 100 + 100 * k, 150 + 100 * k, rank=rank, name=n) for k, n in enumerate(names)
        ]
        return gpu_rank(rank, comm=(110 + rank, 250)) + markers

    events = make_events([row for r in range(4) for row in rank_rows(r)]).sort(
        "start_ns", maintain_order=True
    )
    graph = assert_rank_by_rank_equal(events)
    assert graph.gradient_source == "markers"
    assert {g.ready_ns for g in graph.gradients} == {100 * US}
    assert [g.name for g in graph.gradients if g.rank == 3] == ["b", "a", "c"]


def _tied_rank(rank: int, ties: int = 8) -> list[dict[str, Any]]:
    """A GPU rank with exact ties: zero-length steps, collectives and gradient markers at one time.

    Steps 2 to ``ties + 1`` are empty windows at 50 µs (each launches a kernel ending then); the last
    step launches ``ties`` collectives on as many streams, all over [61, 68) µs; ``ties`` markers,
    issued after the same launches, are all ready at 50 µs.
    """
    rows = [step(1, 0, 10 * US, rank=rank), launch(1, 1 * US, rank=rank)]
    rows.append(gpu("compute", 20 * US, 50 * US, rank=rank, correlation=1, name="K1"))
    for n in range(2, ties + 2):
        at = 10 * US + 100 * n
        rows += [step(n, at, at + 50, rank=rank), launch(n, at + 10, rank=rank)]
        rows.append(gpu("compute", 40 * US, 50 * US, rank=rank, correlation=n, name=f"K{n}"))
    last = ties + 2
    rows += [step(last, 13 * US, 14 * US, rank=rank), launch(last, 13 * US + 100, rank=rank)]
    rows.append(gpu("compute", 60 * US, 70 * US, rank=rank, correlation=last, name="K"))
    for j in range(ties):
        kind = "all_reduce" if j % 2 else "all_gather"
        rows.append(launch(100 + j, 13 * US + 200 + j, rank=rank))
        rows.append(
            gpu("communication", 61 * US, 68 * US, rank=rank, stream=20 + j, correlation=100 + j,
                name=f"nccl {kind}", collective=kind, in_bytes=100 + j, group_size=8)
        )  # fmt: skip
        name = f"timeline.grad_ready:p{(7 * j) % ties}:{10 + j}"
        rows.append(cpu("cpu_op", 12 * US + 500, 12 * US + 510, rank=rank, name=name))
    return rows


@pytest.mark.parametrize("seed", [1, 2])
def test_exact_ties_are_ordered_by_each_rank_s_events(seed: int) -> None:
    # Rows in a random order: tied collectives and markers keep the order of their rank's rows,
    # whatever the other ranks (a sort that is not stable would order them by all ranks' rows).
    events = make_events([row for r in range(8) for row in _tied_rank(r)]).sample(
        fraction=1.0, shuffle=True, seed=seed
    )
    graph = assert_rank_by_rank_equal(events)
    assert graph.windows.filter(pl.col("rank") == 0).get_column("iteration").to_list() == list(range(1, 11))
    for rank in (0, 5):
        rows = events.filter(pl.col("rank") == rank)
        streams = rows.filter(pl.col("kind") == "communication").get_column("stream").to_list()
        assert [op.channel for op in graph.ops if op.rank == rank] == [f"stream {s}" for s in streams]
        names = rows.filter(pl.col("name").cast(pl.String).str.starts_with("timeline.grad_ready:"))
        params = [name.split(":")[1] for name in names.get_column("name").cast(pl.String).to_list()]
        assert [g.name for g in graph.gradients if g.rank == rank and g.name.startswith("p")] == params


def test_unmatched_c10d_calls_warn_once_for_the_union_of_ranks() -> None:
    rows = [row for r in (0, 2) for row in gloo_rank(r)]
    extra = [*gloo_rank(1), cpu("cpu_op", 20 * US, 21 * US, rank=1, name="c10d::broadcast_")]
    missing = [row for row in gloo_rank(3) if row.get("name") != "c10d::allreduce_"]
    events = make_events(rows + extra + missing)
    graph = assert_rank_by_rank_equal(events)
    expected = (
        "rank(s) [1, 3]: as many c10d:: calls as collectives expected on CPU-only ranks, found otherwise; "
        "their collectives count as ready when they started"
    )
    assert [w for w in graph.warnings if "c10d::" in w] == [expected]
    ready = {op.rank: op.ready_ns for op in graph.ops}
    assert (ready[0], ready[1], ready[3]) == (50 * US, 60 * US, 60 * US)  # the call; else the start


def test_horovod_ranks_in_several_parts_warn_once() -> None:
    events = make_events(gloo_rank(0) + horovod_rows(3) + gloo_rank(1) + horovod_rows(2))
    graph = assert_rank_by_rank_equal(events)
    assert graph.ranks == (0, 1)
    assert graph.warnings == (
        "rank(s) [2, 3]: a Horovod timeline has no compute events; left out of the what-if replay",
    )


@pytest.mark.parametrize(
    "rows",
    [horovod_rows(0) + horovod_rows(1) + horovod_rows(2), []],
    ids=["horovod-only", "no-events"],
)
def test_no_compute_raises_the_same_error(rows: list[dict[str, Any]]) -> None:
    events = make_events(rows)
    with pytest.raises(TraceContentError) as expected:
        build_graph(events)
    for groups in [*groupings(ranks_of(events)), []]:
        parts = [graph_parts(piece) for piece in split_events(events, groups)]
        with pytest.raises(TraceContentError) as actual:
            combine_graph_parts(parts)
        assert str(actual.value) == str(expected.value)
    assert str(expected.value).startswith(
        "no PyTorch profiler trace: the what-if replay needs compute events"
    )


def test_a_rank_in_two_parts_is_refused() -> None:
    events = gpu_run(gpu_rank(0), gpu_rank(1), gpu_rank(2))
    parts = [graph_parts(piece) for piece in split_events(events, [[0, 1], [1, 2], [2]])]
    with pytest.raises(RankError, match=r"rank\(s\) \[1, 2\]: in several graph parts"):
        combine_graph_parts(parts)


@st.composite
def runs(draw: st.DrawFn) -> tuple[pl.DataFrame, list[list[int]]]:
    """A run of GPU, gloo and Horovod ranks (never Horovod alone), and a split of its ranks."""
    count = draw(st.integers(1, 6))
    kinds = draw(
        st.lists(st.sampled_from(["gpu", "gloo", "gloo-markers", "horovod"]), min_size=count, max_size=count)
    )
    if all(k == "horovod" for k in kinds):
        kinds[0] = "gpu"
    rows: list[dict[str, Any]] = []
    for rank, kind in enumerate(kinds):
        if kind == "gpu":
            start = draw(st.integers(100, 240))
            rows += gpu_rank(rank, comm=(start, start + draw(st.integers(1, 150))))
        elif kind == "horovod":
            rows += horovod_rows(rank)
        else:
            start = draw(st.integers(50, 100))
            rows += gloo_rank(
                rank, comm=(start, start + draw(st.integers(10, 150))), markers=kind == "gloo-markers"
            )
    if draw(st.booleans()):
        rows = draw(st.permutations(rows))
    labels = draw(st.lists(st.integers(0, count - 1), min_size=count, max_size=count))
    groups = [[r for r in range(count) if labels[r] == label] for label in dict.fromkeys(labels)]
    return make_events(rows), draw(st.permutations(groups))


@settings(max_examples=30, deadline=None)
@given(runs())
def test_any_split_of_any_run_gives_the_graph_of_all_its_events(
    run: tuple[pl.DataFrame, list[list[int]]],
) -> None:
    events, groups = run
    pieces = split_events(events, groups)
    expected = build_graph(events)
    assert_same_graph(combine_graph_parts([graph_parts(piece) for piece in pieces]), expected)
    assert_same_graph(build_graph(pl.concat(pieces)), expected)


def test_the_splits_are_not_trivial() -> None:
    # Parts concatenated as they come are in no rank order: the combine has to restore it.
    events = _load(KINETO / "param_dlrm_8rank").events
    for groups in groupings(ranks_of(events))[:3]:
        parts = [graph_parts(piece) for piece in split_events(events, groups)]
        naive = pl.concat([p.windows for p in parts])
        assert not naive.get_column("rank").is_sorted()
        combined = combine_graph_parts(parts).windows
        assert combined.get_column("rank").is_sorted()
        assert combined.get_column("window_id").to_list() == list(range(combined.height))
