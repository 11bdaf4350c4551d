"""Collectives matched within their process group, pairs of sends, ambiguity, on generated NCCL jobs.

The traces come from ``tests.generators.nccl`` (the field layout of torch 2.10+ / NCCL 2.27 records);
every expected figure is computed here from the generator's ground truth (plain Python), never by
the code under test.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.generators.nccl import CollectiveTruth, Job, device_mesh_job, write_job
from timeline.analysis.collectives import CollectiveMatch, match_collectives
from timeline.analysis.groups import nodes_of
from timeline.analysis.overlap import compute_overlap
from timeline.execution.dataset import write_dataset
from timeline.execution.reduce import analyze_files
from timeline.executors import LocalExecutor
from timeline.trace import Trace, load


def loaded(job: Job, directory: Path) -> Trace:
    write_job(job, directory)
    return load(directory, workers=1)


def matched(trace: Trace, **options: Any) -> CollectiveMatch:
    return match_collectives(trace.events, groups=trace.groups, **options)


def expected_factor(kind: str, n: int) -> float:
    """nccl-tests' bus factor (PERFORMANCE.md), written out."""
    return {"all_reduce": 2 * (n - 1) / n, "broadcast": 1.0}.get(kind, (n - 1) / n)


def expected_bytes(truth: CollectiveTruth) -> int:
    """nccl-tests' bytes: the gathered total for an all-gather, else the input."""
    return truth.out_bytes if truth.kind == "all_gather" else truth.in_bytes


def by_group_and_seq(job: Job) -> dict[tuple[str, int], CollectiveTruth]:
    return {(t.group, t.seq): t for t in job.collectives}


@pytest.fixture(scope="module")
def mesh_8(tmp_path_factory: pytest.TempPathFactory) -> tuple[Job, Trace]:
    """8 ranks, dp 2 x tp 4 (tp inside a node of 4 GPUs), rank 5 computing slowly."""
    job = device_mesh_job([("dp", 2), ("tp", 4)], steps=2, gpus_per_node=4, slow_rank=5, seed=3)
    return job, loaded(job, tmp_path_factory.mktemp("mesh8"))


def test_no_collective_is_matched_across_groups(mesh_8: tuple[Job, Trace]) -> None:
    job, trace = mesh_8
    match = matched(trace)
    members = {g.name: set(g.ranks) for g in job.groups}
    per_collective = match.ranks.group_by("collective_id").agg(pl.col("rank"), pl.col("group").unique())
    for _, ranks, groups in per_collective.iter_rows():
        assert len(groups) == 1
        assert set(ranks) <= members[groups[0]]
    assert match.collectives.height == len(job.collectives)
    assert match.collectives["complete"].all()
    assert not match.warnings


def test_without_details_the_collectives_and_ranks_are_the_full_matchs(mesh_8: tuple[Job, Trace]) -> None:
    """``details=False`` (what the diagnosis reads) matches the same collectives; the rest is empty."""
    _job, trace = mesh_8
    full, light = matched(trace), matched(trace, details=False)
    assert light.collectives.equals(full.collectives)
    assert light.ranks.equals(full.ranks)
    assert full.groups.height > 0
    assert light.groups.height == light.point_to_point.height == light.ambiguous.height == 0
    assert light.mismatches.height == 0
    assert light.warnings == ()


def test_each_collective_is_the_generated_one_with_its_groups_figures(mesh_8: tuple[Job, Trace]) -> None:
    job, trace = mesh_8
    truth = by_group_and_seq(job)
    rows = matched(trace).collectives.iter_rows(named=True)
    for row in rows:
        t = truth[(row["group"], row["index"])]
        n = len(t.ranks)
        starts, ends = t.start_ns, t.end_ns
        transfer = min(ends[r] - starts[r] for r in t.ranks)
        assert row["collective"] == t.kind
        assert row["dimension"] == t.dim
        assert row["ranks"] == row["expected_ranks"] == row["group_size"] == n
        assert row["matched_by"] == "comms_id"
        assert row["attributed_by"] == "named"
        assert row["start_skew_ns"] == max(starts.values()) - min(starts.values())
        assert row["transfer_ns"] == transfer
        assert row["bytes"] == expected_bytes(t)
        assert row["bus_factor"] == pytest.approx(expected_factor(t.kind, n))
        assert row["busbw_gbps"] == pytest.approx(
            expected_bytes(t) * 8 / transfer * expected_factor(t.kind, n)
        )
        assert row["iteration"] == t.step
        last = max(t.ranks, key=lambda r: (starts[r], -r))
        assert row["last_rank"] == last


def test_bus_factor_is_the_groups_never_the_worlds(mesh_8: tuple[Job, Trace]) -> None:
    _, trace = mesh_8
    factors = (
        matched(trace).collectives.group_by("dimension", "collective").agg(pl.col("bus_factor").unique())
    )
    assert sorted(factors.rows()) == [
        ("dp", "all_gather", [0.5]),  # n = 2, not 8: (2-1)/2
        ("dp", "reduce_scatter", [0.5]),
        ("tp", "all_reduce", [1.5]),  # n = 4: 2(4-1)/4
    ]


def test_groups_summary_and_nodes(mesh_8: tuple[Job, Trace]) -> None:
    job, trace = mesh_8
    match = matched(trace, nodes=nodes_of(trace.files))
    groups = match.groups.select("group", "dimension", "ranks", "size", "spans_nodes", "collectives").rows()
    per_group = {g.name: sum(1 for t in job.collectives if t.group == g.name) for g in job.groups}
    # host_name is node<rank // 4>: tp groups [0..3], [4..7] inside a node; dp [r, r+4] across two
    assert groups == [
        (
            g.name,
            g.desc.removeprefix("mesh_") if g.desc != "default_pg" else "world",
            list(g.ranks),
            len(g.ranks),
            len({r // 4 for r in g.ranks}) > 1,
            per_group[g.name],
        )
        for g in job.groups
    ]
    spans = match.collectives.group_by("dimension").agg(pl.col("spans_nodes").unique()).sort("dimension")
    assert spans.rows() == [("dp", [True]), ("tp", [False])]


def test_order_matches_the_same_collectives_without_seq(tmp_path: Path) -> None:
    job = device_mesh_job([("dp", 2), ("tp", 2)], steps=2, seq=False, seed=1)
    match = matched(loaded(job, tmp_path))
    assert set(match.collectives["matched_by"]) == {"order"}
    per_group: dict[str, list[CollectiveTruth]] = {}
    for t in job.collectives:
        per_group.setdefault(t.group, []).append(t)
    for row in match.collectives.iter_rows(named=True):
        t = per_group[row["group"]][row["index"]]  # the k-th collective of the group
        assert row["transfer_ns"] == min(t.end_ns[r] - t.start_ns[r] for r in t.ranks)
        assert row["collective"] == t.kind


def test_pipeline_sends_are_paired_with_their_receives(tmp_path: Path) -> None:
    job = device_mesh_job([("pp", 2), ("dp", 2), ("tp", 2)], steps=3, seed=5)
    match = matched(loaded(job, tmp_path))
    pairs = {
        (r["group"], r["src"], r["dst"], r["index"]): r for r in match.point_to_point.iter_rows(named=True)
    }
    assert len(pairs) == len(job.pairs) > 0
    for t in job.pairs:
        row = pairs[(t.group, t.src, t.dst, t.index)]
        send_dur, recv_dur = t.send[1] - t.send[0], t.recv[1] - t.recv[0]
        transfer = min(send_dur, recv_dur)
        assert row["complete"]
        assert row["consistent"]
        assert (row["send_start_ns"], row["send_end_ns"]) == t.send
        assert (row["recv_start_ns"], row["recv_end_ns"]) == t.recv
        assert row["bytes"] == t.nbytes
        assert row["transfer_ns"] == transfer
        assert (row["send_wait_ns"], row["recv_wait_ns"]) == (send_dur - transfer, recv_dur - transfer)
        assert row["start_skew_ns"] == t.recv[0] - t.send[0]
        assert row["busbw_gbps"] == pytest.approx(t.nbytes * 8 / transfer)
        assert row["dimension"] == "pp"
        assert row["iteration"] == t.step
    # sends are no collectives
    assert not match.collectives.filter(pl.col("collective").is_in(["send", "recv"])).height
    assert match.groups.filter(pl.col("dimension") == "pp")["point_to_point"].sum() == len(job.pairs)


def test_groups_that_cannot_be_told_apart_are_reported_not_matched(tmp_path: Path) -> None:
    # no group names, two groups of 2 on every rank (dp and tp): nothing tells which one ran what
    job = device_mesh_job([("dp", 2), ("tp", 2)], steps=2, names=False, seed=2)
    match = matched(loaded(job, tmp_path))
    kernels = sum(len(t.ranks) for t in job.collectives)
    assert match.collectives.height == 0  # no complete match that may be wrong
    assert match.ranks.height == 0
    assert match.ambiguous.height == kernels
    assert set(match.ambiguous["matched_by"]) == {"ambiguous"}
    mine = {
        r: sorted(g.name for g in job.groups if r in g.ranks and g.desc != "default_pg") for r in range(4)
    }
    for rank, candidates in match.ambiguous.select("rank", "candidates").unique(maintain_order=True).rows():
        assert candidates == mine[rank]  # Group size 2 rules the world (4) out, never dp from tp
    assert any("do not say which process group" in w for w in match.warnings)
    counted = dict(match.groups.select("group", "ambiguous").iter_rows())
    for name in ("1", "2", "3", "4"):
        assert counted[name] == sum(1 for t in job.collectives for r in t.ranks if name in mine[r])


def test_sizes_tell_groups_apart_without_names(tmp_path: Path) -> None:
    job = device_mesh_job([("dp", 2), ("tp", 4)], steps=2, names=False, seed=4)
    match = matched(loaded(job, tmp_path))
    assert match.ambiguous.height == 0
    assert set(match.collectives["attributed_by"]) == {"size"}
    truth = by_group_and_seq(job)
    for row in match.collectives.iter_rows(named=True):
        assert row["group"] is not None
        t = truth[(row["group"], row["index"])]
        assert row["transfer_ns"] == min(t.end_ns[r] - t.start_ns[r] for r in t.ranks)
        assert row["ranks"] == len(t.ranks)


def test_without_names_or_sizes_only_gathers_and_scatters_tell_their_group(tmp_path: Path) -> None:
    job = device_mesh_job([("dp", 2), ("tp", 4)], steps=1, names=False, sizes=False, seed=4)
    match = matched(loaded(job, tmp_path))
    # all-gather out/in = 2 and reduce-scatter in/out = 2: the dp group (2); the tp all-reduces say nothing
    assert sorted(set(match.collectives["collective"])) == ["all_gather", "reduce_scatter"]
    assert set(match.collectives["dimension"]) == {"dp"}
    tp_kernels = sum(len(t.ranks) for t in job.collectives if t.dim == "tp")
    assert match.ambiguous.height == tp_kernels
    assert set(match.ambiguous["collective"]) == {"all_reduce"}


def test_both_roads_and_parquet_give_the_same_match(tmp_path: Path) -> None:
    job = device_mesh_job([("pp", 2), ("dp", 2), ("tp", 2)], steps=2, names=True, seed=6)
    directory = tmp_path / "job"
    trace = loaded(job, directory)
    memory = match_collectives(
        trace.events, windows=compute_overlap(trace.events).windows, groups=trace.groups
    )
    by_rank = analyze_files(directory, executor=LocalExecutor(1))
    assert by_rank.groups.equals(trace.groups)
    reduced = match_collectives(by_rank.communication, windows=by_rank.overlap.windows, groups=by_rank.groups)
    write_dataset(directory, tmp_path / "dataset", executor=LocalExecutor(1))
    converted = load(tmp_path / "dataset", workers=1)
    assert converted.groups.equals(trace.groups)
    stored = match_collectives(
        converted.events, windows=compute_overlap(converted.events).windows, groups=converted.groups
    )
    for other in (reduced, stored):
        for frame in ("collectives", "ranks", "point_to_point", "groups", "ambiguous"):
            assert getattr(other, frame).equals(getattr(memory, frame)), frame
        assert other.warnings == memory.warnings
