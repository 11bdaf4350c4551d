"""The groups of collectives the traces leave ambiguous (timing, thread, pairing); the order under doubt.

Hand-made gloo events (``tests.builders``) on a 2 x 2 mesh, the expected groups written out by
hand from the rules of docs/collectives.md (The group of an event); then the bundled real gloo
samples, each event's true group read from the raw JSON's ``pg_config`` and the job code's layout
(docs/capturing.md, timeline/capture/jobs/), never from the code under test.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.builders import REPO, cpu, make_events, raw_sample_traces, step
from tests.generators.nccl import device_mesh_job, write_job
from timeline.analysis.collectives import attributed_communication, match_collectives
from timeline.analysis.group_inference import TIMING_TOLERANCE_NS
from timeline.analysis.groups import attribute_groups, shared_clocks
from timeline.analysis.iterations import assign_iterations
from timeline.analysis.overlap import compute_overlap
from timeline.execution.reduce import analyze_files
from timeline.executors import LocalExecutor
from timeline.schema import FILES_SCHEMA, PROCESS_GROUPS_SCHEMA
from timeline.trace import Trace, load

SAMPLES = REPO / "sample_traces"
US = 1_000

# every rank of a 2 x 2 ("dp", "tp") mesh declares the world, its dp and its tp group
MESH = {"0": ("default_pg", [0, 1, 2, 3]), "1": ("mesh_dp", [0, 2]), "2": ("mesh_dp", [1, 3])}
MESH |= {"3": ("mesh_tp", [0, 1]), "4": ("mesh_tp", [2, 3])}


def mesh_groups(
    ranks: Sequence[int] = (0, 1, 2, 3), mesh: dict[str, tuple[str, list[int]]] = MESH
) -> pl.DataFrame:
    """``Trace.groups`` of the mesh as the given ranks' traces declare it."""
    rows = [
        {
            "rank": r,
            "pg_name": name,
            "pg_desc": desc,
            "ranks": members,
            "ranks_text": None,
            "ranks_truncated": False,
            "pg_size": len(members),
            "backend": "cpu:gloo,cuda:gloo",
        }
        for r in ranks
        for name, (desc, members) in mesh.items()
        if r in members
    ]
    return pl.DataFrame(rows, schema=PROCESS_GROUPS_SCHEMA)


def gloo(
    rank: int, start_us: float, end_us: float, kind: str = "all_reduce", *, tid: int = 50, **extra: Any
) -> dict[str, Any]:
    """A ``gloo:<kind>`` annotation on a worker thread (sends and receives: give the main thread's tid)."""
    return cpu(
        "communication",
        int(start_us * US),
        int(end_us * US),
        rank=rank,
        tid=tid,
        name=f"gloo:{kind}",
        cat="user_annotation",
        collective=kind,
        in_bytes=extra.pop("in_bytes", 4096),
        **extra,
    )


def steps(ranks: Sequence[int] = (0, 1, 2, 3), *, until_us: int = 10_000) -> list[dict[str, Any]]:
    """One ProfilerStep#1 window per rank over the whole test, so every rank covers every event."""
    return [step(1, 0, until_us * US, rank=r) for r in ranks]


def files(hosts: Sequence[str | None]) -> pl.DataFrame:
    return pl.DataFrame(
        [
            {"rank": r, "path": f"rank{r}.json", "format": "kineto", "host": h, "clock": "epoch"}
            for r, h in enumerate(hosts)
        ],
        schema=FILES_SCHEMA,
    )


ONE_HOST = files(["vm"] * 4)


def attributed(
    rows: list[dict[str, Any]],
    *,
    groups: pl.DataFrame | None = None,
    host_files: pl.DataFrame | None = ONE_HOST,
    warnings: list[str] | None = None,
) -> dict[tuple[int, int], tuple[str | None, str, list[str]]]:
    """(rank, start µs) → (group, attributed_by, candidates) of every communication event."""
    events = make_events(rows)
    frame = attribute_groups(
        events,
        mesh_groups() if groups is None else groups,
        clocks=None if host_files is None else shared_clocks(host_files),
        windows=assign_iterations(events),
        warnings=warnings,
    )
    return {
        (rank, start // US): (group, how, candidates)
        for rank, start, group, how, candidates in frame.select(
            "rank", "start_ns", "group", "attributed_by", "candidates"
        ).iter_rows()
    }


def dp_then_tp() -> list[dict[str, Any]]:
    """A dp all-reduce ({0, 2} at 0-100 µs, {1, 3} at 200-300 µs), then a tp one ({0, 1}, {2, 3}) later."""
    return [
        *steps(),
        gloo(0, 0, 100),
        gloo(2, 10, 110),
        gloo(1, 200, 300),
        gloo(3, 210, 310),
        gloo(0, 1000, 1100, tid=60, in_bytes=64),
        gloo(1, 1010, 1110, tid=61, in_bytes=64),
        gloo(2, 1500, 1600, tid=62, in_bytes=64),
        gloo(3, 1510, 1610, tid=63, in_bytes=64),
    ]


def test_timing_tells_dp_from_tp_on_one_host() -> None:
    got = attributed(dp_then_tp())
    # rank 0 at 0-100: its tp partner (1) and the world have no overlapping all-reduce of its size
    assert got[(0, 0)] == ("1", "timing", ["1"])
    assert got[(1, 200)] == ("2", "timing", ["2"])
    assert got[(0, 1000)] == ("3", "timing", ["3"])
    assert got[(3, 1510)] == ("4", "timing", ["4"])


def test_nothing_is_claimed_across_hosts_without_alignment() -> None:
    got = attributed(dp_then_tp(), host_files=files(["a", "b", "c", "d"]))
    assert {how for _, how, _ in got.values()} == {"ambiguous"}
    assert got[(0, 0)] == (None, "ambiguous", ["0", "1", "3"])
    # nor without any clocks: no rule compares times
    assert {how for _, how, _ in attributed(dp_then_tp(), host_files=None).values()} == {"ambiguous"}


def test_concurrent_identical_collectives_on_both_groups_stay_ambiguous() -> None:
    rows = [*steps(), *(gloo(r, 0, 100) for r in range(4))]  # dp and tp could both hold each
    got = attributed(rows)
    assert got[(0, 0)] == (None, "ambiguous", ["0", "1", "3"])
    assert got[(3, 0)] == (None, "ambiguous", ["0", "2", "4"])


def test_a_size_of_another_kind_is_no_partner() -> None:
    rows = [*steps(), *(gloo(r, 0, 100, in_bytes=64 if r in (1, 3) else 4096) for r in range(4))]
    got = attributed(rows)
    # 4096 on 0 and 2 only: rank 0's tp partner (1) holds another size, the world's members too
    assert got[(0, 0)] == ("1", "timing", ["1"])
    assert got[(1, 0)] == ("2", "timing", ["2"])


def test_a_gloo_thread_serves_one_group() -> None:
    # then all four ranks all-reduce at once at 3000 µs; rank 0 on thread 50, its dp all-reduce's
    rows = [*dp_then_tp(), *(gloo(r, 3000, 3100, tid=50 + r * 10) for r in range(4))]
    got = attributed(rows)
    assert got[(0, 0)] == ("1", "timing", ["1"])
    assert got[(0, 3000)] == ("1", "thread", ["1"])  # what its thread's other collective ran on
    # rank 1's instance: its tp partner's (rank 0's) is on dp now, and the world needs rank 0's too
    assert got[(1, 3000)] == ("2", "timing", ["2"])
    # ranks 2 and 3 may still be a tp pair or each on its dp group: nothing tells
    assert got[(2, 3000)] == (None, "ambiguous", ["1", "4"])
    assert got[(3, 3000)] == (None, "ambiguous", ["2", "4"])


def test_sends_and_receives_are_never_grouped_by_thread() -> None:
    # on rank 0's main thread (tid 1): an all-reduce whose Group size (4) says the world, and a send
    rows = [*steps(), gloo(0, 0, 100, tid=1, group_size=4), gloo(0, 500, 600, "send", tid=1, group_peer=1)]
    got = attributed(rows, host_files=None)
    assert got[(0, 0)][:2] == ("0", "size")
    assert got[(0, 500)] == (None, "ambiguous", ["0", "1", "3"])  # not the all-reduce's group


def test_pairing_finds_the_pipeline_group_of_a_send() -> None:
    # (pp, dp) mesh: pp {0, 2}, {1, 3}; dp {0, 1}, {2, 3}. Rank 0 sends to its group rank 1: rank 2
    # on pp, rank 1 on the world or dp; rank 1 receives nothing from rank 0.
    pipeline = {"0": ("default_pg", [0, 1, 2, 3]), "1": ("mesh_pp", [0, 2]), "2": ("mesh_pp", [1, 3])}
    pipeline |= {"3": ("mesh_dp", [0, 1]), "4": ("mesh_dp", [2, 3])}
    rows = [
        *steps(),
        gloo(0, 0, 100, "send", tid=1, group_peer=1),
        gloo(2, 50, 150, "recv", tid=2, group_peer=0),
        gloo(1, 300, 400, "send", tid=3, group_peer=1),  # rank 1 → 3 on pp (peer, as before)
        gloo(3, 300, 400, "recv", tid=4, group_peer=0),
    ]
    got = attributed(rows, groups=mesh_groups(mesh=pipeline))
    assert got[(1, 300)][:2] == ("2", "peer")
    assert got[(0, 0)] == ("1", "pairing", ["1"])
    # rank 2's receive from group rank 0: rank 0 on the world or on pp; rank 0 sends nothing on the world
    assert got[(2, 50)] == ("1", "pairing", ["1"])
    # rank 3 from group rank 0: rank 0 (world), 1 (pp) or 2 (dp): only rank 1 sends to it
    assert got[(3, 300)] == ("2", "pairing", ["2"])


def test_a_rank_asks_only_about_the_steps_it_recorded() -> None:
    # rank 1 recorded step 1 only (0-1000 µs): rank 0's all-reduce in step 2 cannot be refuted by it
    rows = [
        step(1, 0, 1000 * US, rank=1),
        step(3, 2000 * US, 3000 * US, rank=1),
        *(step(n, (n - 1) * 1000 * US, n * 1000 * US, rank=r) for n in (1, 2, 3) for r in (0, 2, 3)),
        gloo(0, 1100, 1200),
        gloo(2, 1110, 1210),
        gloo(1, 2500, 2600),
        gloo(3, 2510, 2610),
    ]
    got = attributed(rows)
    assert got[(0, 1100)] == (None, "ambiguous", ["1", "3"])  # the world: rank 3 has none
    assert got[(2, 1110)] == ("1", "timing", ["1"])  # its tp partner, rank 3, recorded step 2


def test_an_alignment_is_uncertain_by_twice_its_mad() -> None:
    # rank 2 misses rank 0 by 50 µs: on one host the dp group is refuted for rank 0 …
    rows = [*steps(), gloo(0, 0, 100), gloo(1, 0, 100), gloo(2, 150, 250), gloo(3, 200, 300)]
    assert attributed(rows)[(0, 0)][0] == "3"
    # … after an alignment with a mad of 20 µs per rank (tolerance 10 + 4 × 20 = 90 µs) it is not
    offsets = pl.DataFrame(
        {"rank": [0, 1, 2, 3], "offset_ns": [0, 0, 0, 0], "mad_ns": [20 * US] * 4},
        schema={"rank": pl.Int32, "offset_ns": pl.Int64, "mad_ns": pl.Int64},
    )
    clocks = shared_clocks(ONE_HOST, offsets=offsets)
    assert clocks["uncertainty_ns"].to_list() == [40 * US] * 4
    events = make_events(rows)
    frame = attribute_groups(events, mesh_groups(), clocks=clocks, windows=assign_iterations(events))
    assert frame.filter(pl.col("rank") == 0)["candidates"].to_list() == [["1", "3"]]
    assert TIMING_TOLERANCE_NS == 10 * US


def test_contradicting_facts_keep_nothing_inferred() -> None:
    # rank 0's thread 50 runs an all-reduce only dp can hold, then one only tp can hold: impossible
    rows = [
        *steps(),
        gloo(0, 0, 100),
        gloo(2, 10, 110),
        gloo(0, 500, 600),
        gloo(1, 510, 610),
        gloo(2, 3000, 3100, tid=77),
        gloo(1, 3000, 3100, tid=78),
    ]
    warnings: list[str] = []
    got = attributed(rows, warnings=warnings)
    assert {how for _, how, _ in got.values()} == {"ambiguous"}
    assert got[(0, 0)][2] == ["0", "1", "3"]
    assert len(warnings) == 1
    assert warnings[0].startswith("the timing of the traces contradicts the groups they declare")


def test_a_rank_without_pg_config_is_never_narrowed_and_fits_any_group() -> None:
    rows = dp_then_tp()
    got = attributed(rows, groups=mesh_groups(ranks=(0, 2, 3)))
    assert got[(1, 200)][1] == "ambiguous"  # rank 1 declares nothing: its list of groups is unknown
    assert got[(0, 0)] == ("1", "timing", ["1"])
    # rank 0's tp instance overlaps rank 1's, which may be on any group: tp is not refuted, the world is
    assert got[(0, 1000)] == ("3", "timing", ["3"])


def test_shared_clocks_by_node_and_counting() -> None:
    table = files(["a", "a", "b", None]).with_columns(clock=pl.Series(["epoch", "epoch", "epoch", "epoch"]))
    assert shared_clocks(table).select("rank", "clock").rows() == [
        (0, "a/epoch"),
        (1, "a/epoch"),
        (2, "b/epoch"),
    ]
    assert shared_clocks(table, gpus_per_node=4)["clock"].to_list() == ["0/epoch"] * 4
    mixed = table.with_columns(clock=pl.Series(["epoch", "relative", "epoch", "epoch"]))
    assert shared_clocks(mixed)["clock"].to_list() == ["a/epoch", "a/relative", "b/epoch"]
    assert shared_clocks(table, comparable=False).height == 0


def test_an_event_after_an_ambiguous_one_of_its_kind_is_not_ordered() -> None:
    # dp {0, 2}: rank 0 and 2 all-reduce at 0 µs (dp, by timing), then at 3000 µs all four ranks
    # all-reduce at once (ambiguous), then dp again at 5000 µs on ranks 0 and 2 only
    rows = [
        *steps(),
        gloo(0, 0, 100),
        gloo(2, 10, 110),
        gloo(1, 200, 300),
        gloo(3, 210, 310),
        *(gloo(r, 3000, 3100, tid=90 + r) for r in range(4)),
        gloo(0, 5000, 5100, tid=51),
        gloo(2, 5010, 5110, tid=52),
        gloo(0, 6000, 6100, tid=53, kind="all_gather"),
        gloo(2, 6010, 6110, tid=54, kind="all_gather"),
    ]
    events = make_events(rows)
    match = match_collectives(events, groups=mesh_groups(), clocks=shared_clocks(ONE_HOST))
    logical = match.collectives.select("group", "collective", "first_start_ns", "ranks").rows()
    assert logical == [
        ("1", "all_reduce", 0, 2),
        ("2", "all_reduce", 200 * US, 2),
        ("1", "all_gather", 6000 * US, 2),  # another kind: its place is certain
    ]
    unordered = match.ambiguous.filter(pl.col("matched_by") == "unordered")
    assert unordered.select("rank", "start_ns", "candidates").rows() == [
        (0, 5000 * US, ["1"]),
        (2, 5010 * US, ["1"]),
    ]
    assert any("place in its order is not" in w for w in match.warnings)


# --- the real gloo samples ------------------------------------------------------------------------


def true_description(sample: str, collective: str, in_bytes: int) -> str:
    """The group description each sample's job code runs a collective on (docs/capturing.md)."""
    if sample == "fsdp2_tp_gloo":  # TP all-reduces the activations: 16 rows x 64 float32 = 4096 bytes
        return "mesh_tp" if (collective, in_bytes) == ("all_reduce", 16 * 64 * 4) else "mesh_dp"
    if sample == "pipeline_gloo":  # sends and receives between stages, DDP all-reduces on dp
        return "mesh_pp" if collective in ("send", "recv") else "mesh_dp"
    # expert: all-to-alls on ep; the router's gradients (32 x 4 + 4 float32) on the world
    if collective == "all_to_all":
        return "mesh_ep"
    return "default_pg" if in_bytes == (32 * 4 + 4) * 4 else "mesh_dp"


def truth(sample: str) -> dict[int, dict[str, str]]:
    """rank → description → pg_name, from each raw trace's pg_config."""
    return {
        rank: {g["pg_desc"]: g["pg_name"] for g in trace["distributedInfo"]["pg_config"]}
        for rank, trace in raw_sample_traces(sample).items()
    }


def loaded_sample(sample: str) -> tuple[Trace, pl.DataFrame]:
    trace = load(SAMPLES / sample, workers=1)
    frame = attributed_communication(
        trace.events,
        groups=trace.groups,
        clocks=shared_clocks(trace.files),
        windows=compute_overlap(trace.events).windows,
    )
    return trace, frame


# what each rule decides on each sample (docs/collectives.md lists the same counts)
DECIDED = {
    "fsdp2_tp_gloo": {"timing": 52, "thread": 56},
    "pipeline_gloo": {"pairing": 72, "peer": 24, "timing": 12},
    "expert_gloo": {"timing": 34, "thread": 34, "ambiguous": 16},
}


@pytest.mark.parametrize("sample", sorted(DECIDED))
def test_every_group_decided_on_the_samples_is_the_one_the_job_ran_it_on(sample: str) -> None:
    _, frame = loaded_sample(sample)
    names = truth(sample)
    for rank, collective, in_bytes, group, candidates in frame.select(
        "rank", "collective", "in_bytes", "group", "candidates"
    ).iter_rows():
        expected = names[rank][true_description(sample, collective, in_bytes)]
        if group is None:
            assert expected in candidates  # the truth is never refuted
        else:
            assert group == expected, (rank, collective, in_bytes)
    assert dict(Counter(frame["attributed_by"].to_list())) == DECIDED[sample]
    raw = sum(
        1
        for t in raw_sample_traces(sample).values()
        for e in t["traceEvents"]
        if e["name"].startswith("gloo:")
    )
    assert frame.height == raw


def test_the_expert_samples_ambiguity_is_the_worlds_and_the_concurrent_dp_all_reduces() -> None:
    _, frame = loaded_sample("expert_gloo")
    left = frame.filter(pl.col("group").is_null())
    sizes = Counter(left["in_bytes"].to_list())
    assert sizes == {(32 * 4 + 4) * 4: 12, 8384 * 4: 4}  # router gradients x 3 steps x 4 ranks; 4 dp
    dp = left.filter(pl.col("in_bytes") == 8384 * 4).sort("start_ns")
    # the four dp all-reduces of that step overlap on every rank: every group's members hold one
    assert dp["start_ns"].max() <= dp["end_ns"].min()  # type: ignore[operator]


def test_fsdp2_tp_sample_matches_within_groups_with_the_groups_size() -> None:
    trace, _ = loaded_sample("fsdp2_tp_gloo")
    overlap = compute_overlap(trace.events)
    match = match_collectives(
        trace.events, windows=overlap.windows, groups=trace.groups, clocks=shared_clocks(trace.files)
    )
    members = {
        g["pg_name"]: set(g["ranks"])
        for t in raw_sample_traces("fsdp2_tp_gloo").values()
        for g in t["distributedInfo"]["pg_config"]
    }
    per_collective = match.ranks.group_by("collective_id").agg(pl.col("rank"), pl.col("group").unique())
    for _, ranks, groups in per_collective.iter_rows():
        assert len(groups) == 1
        assert set(ranks) == members[groups[0]]
    rows = match.collectives
    assert rows.height == 54
    assert rows["complete"].all()
    assert rows["consistent"].all()
    assert set(rows["group_size"]) == {2}
    # nccl-tests: all-reduce 2(n-1)/n = 1, all-gather (n-1)/n = 0.5, over the group's 2 ranks
    factors = dict(rows.select("collective", "bus_factor").unique().iter_rows())
    assert factors == {"all_reduce": 1.0, "all_gather": 0.5}
    assert dict(Counter(rows["dimension"].to_list())) == {"dp": 36, "tp": 18}
    # a synchronising collective matched on one host overlaps on its ranks
    assert (rows["last_start_ns"] <= rows["first_end_ns"] + TIMING_TOLERANCE_NS).all()
    assert match.ambiguous.height == 0


def raw_ns(trace: dict[str, Any], event: dict[str, Any]) -> int:
    """An event's start in ns from the raw JSON (torch ≥ 2.4: µs, ns digits, after baseTimeNanoseconds)."""
    return int(trace["baseTimeNanoseconds"]) + round(float(event["ts"]) * 1000)


def test_pipeline_sample_pairs_each_send_with_its_receive() -> None:
    trace, _ = loaded_sample("pipeline_gloo")
    overlap = compute_overlap(trace.events)
    match = match_collectives(
        trace.events, windows=overlap.windows, groups=trace.groups, clocks=shared_clocks(trace.files)
    )
    pairs = match.point_to_point
    raw = raw_sample_traces("pipeline_gloo")

    def starts(rank: int, name: str) -> list[int]:
        return sorted(raw_ns(raw[rank], e) for e in raw[rank]["traceEvents"] if e["name"] == name)

    # the job: stage 0 (ranks 0, 1) and stage 1 (2, 3) of each pp group {0, 2}, {1, 3} exchange only
    # with each other, so the k-th send of src is the k-th receive of dst
    expected = set()
    for src, dst in ((0, 2), (2, 0), (1, 3), (3, 1)):
        sends, recvs = starts(src, "gloo:send"), starts(dst, "gloo:recv")
        assert len(sends) == len(recvs) == 12
        expected |= {(src, dst, k, s, r) for k, (s, r) in enumerate(zip(sends, recvs, strict=True))}
    got = set(pairs.select("src", "dst", "index", "send_start_ns", "recv_start_ns").iter_rows())
    assert got == expected
    assert pairs["complete"].all()
    assert set(pairs["dimension"]) == {"pp"}
    assert not match.ambiguous.height
    assert not any("without their other side" in w for w in match.warnings)


def test_both_roads_tell_the_same_groups(tmp_path: Path) -> None:
    del tmp_path
    trace, memory = loaded_sample("pipeline_gloo")
    reduced = analyze_files(SAMPLES / "pipeline_gloo", executor=LocalExecutor(1))
    by_rank = attributed_communication(
        reduced.communication,
        groups=reduced.groups,
        clocks=shared_clocks(reduced.files),
        windows=reduced.overlap.windows,
    )
    columns = ["rank", "start_ns", "group", "attributed_by", "candidates", "peer"]
    assert (
        by_rank.select(columns)
        .sort("rank", "start_ns")
        .equals(memory.select(columns).sort("rank", "start_ns"))
    )
    assert trace.groups.equals(reduced.groups)


@pytest.mark.parametrize("gpus_per_node", [8, 1])
def test_generated_nccl_job_without_names_claims_nothing_wrong(tmp_path: Path, gpus_per_node: int) -> None:
    # dp 2 x tp 2 kernels without Process Group args. The generator runs each operation on every
    # group of its dimension at once, so both candidate groups have an instance at that moment: the
    # timing decides little even on one host (node0), nothing across four hosts (node0..3, no
    # alignment); whatever it decides is the group the kernel ran on
    job = device_mesh_job([("dp", 2), ("tp", 2)], steps=2, names=False, gpus_per_node=gpus_per_node, seed=2)
    write_job(job, tmp_path)
    trace = load(tmp_path, workers=1)
    frame = attributed_communication(trace.events, groups=trace.groups, clocks=shared_clocks(trace.files))
    truth = {(r, t.start_ns[r]): t.group for t in job.collectives for r in t.ranks}
    assert frame.height == len(truth)
    for rank, start, group, candidates in frame.select("rank", "start_ns", "group", "candidates").iter_rows():
        if group is None:
            assert truth[(rank, start)] in candidates
        else:
            assert group == truth[(rank, start)]
    decided = frame.filter(pl.col("group").is_not_null()).height
    if gpus_per_node == 1:
        assert decided == 0
    match = match_collectives(trace.events, groups=trace.groups, clocks=shared_clocks(trace.files))
    seen = {(t.group, t.seq): t for t in job.collectives}
    for row in match.ranks.iter_rows(named=True):
        assert row["start_ns"] == seen[(row["group"], row["index"])].start_ns[row["rank"]]
