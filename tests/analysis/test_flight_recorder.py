"""The Flight Recorder analysis: who stopped, where, how, and who waits, on real and generated dumps.

The expected answers come from outside the code under test: the fault logs of the shared dump sets
(the ranks faulted, and the kind of fault), the faults the generator injected, and a plain-Python
reading of the raw dumps (:func:`plain_progress`, :func:`plain_states`).
"""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest

from tests.builders import (
    TRACES,
    Faults,
    Group,
    Step,
    clean_job,
    plain_progress,
    plain_states,
    profiler_kernel,
    read_folder_plainly,
    simulate,
    write_dumps,
)
from timeline.analysis.flight_recorder import FlightAnalysis, analyze_dumps
from timeline.dumps import load_dumps

FLIGHT = TRACES / "flight_recorder"
SETS = ("nvrx_megatron16_gpu_error_1st", "nvrx_megatron16_lock_gil_1st")
KIND_OF_FAULT = {"GPU_ERROR": "not_completed", "LOCK_GIL": "not_entered"}
"""What each injected fault stops: a GPU error its device (entered, never completed), a held GIL its
host (never entered)."""


def _faults(name: str) -> dict[int, str]:
    """The ranks ``fault_injection.log`` says were faulted, with the kind of stop each fault is."""
    text = (FLIGHT / name / "fault_injection.log").read_text()
    return {int(r): KIND_OF_FAULT[k] for r, k in re.findall(r"Rank (\d+), fault_type: (\w+)", text)}


def _analyse(folder: Path) -> FlightAnalysis:
    dumps = load_dumps(folder)
    return analyze_dumps(dumps.entries, dumps.status, dumps.groups, ranks=dumps.ranks)


@pytest.mark.parametrize("name", SETS)
def test_the_roots_are_exactly_the_faulted_ranks_with_their_kind_of_stop(name: str) -> None:
    analysis = _analyse(FLIGHT / name)
    got = dict(
        zip(analysis.roots.get_column("rank"), analysis.roots.get_column("kind").cast(pl.String), strict=True)
    )
    assert got == _faults(name)


@pytest.mark.parametrize("name", SETS)
def test_every_collective_groups_states_are_the_plain_reading(name: str) -> None:
    raw = read_folder_plainly(FLIGHT / name)
    progress = _analyse(FLIGHT / name).progress
    for (pg_name, ranks), members in plain_progress(raw).items():
        rows = progress.filter((pl.col("pg_name") == pg_name) & (pl.col("group_ranks") == list(ranks)))
        if any(p2p for _, _, p2p in members.values()):
            assert set(rows.get_column("seq_kind")) == {"p2p"}
            continue
        assert set(rows.get_column("seq_kind")) <= {"collective", "none"}
        expected = plain_states(members)
        got = dict(zip(rows.get_column("rank"), rows.get_column("state").cast(pl.String), strict=True))
        assert got == expected, (pg_name, ranks)
        for row in rows.iter_rows(named=True):
            enqueued, completed, _ = members[row["rank"]]
            assert (row["last_enqueued"] or 0, row["last_completed"] or 0) == (enqueued, completed)


def test_gpu_error_why_nvidia_names_one_rank() -> None:
    """NVIDIA's attribution compares the last *enqueued* sequence numbers only; completions tell more.

    In the expert-parallel group 74 (ranks 12-15): ranks 13, 14 and 15 enqueued up to #20538, rank 12
    up to #20536, so a test on enqueueing finds rank 12 alone "missing" from #20537. But ranks 12 and 14
    both last completed #20529, while 13 and 15 completed up to #20536: 14's device stopped too.
    """
    raw = read_folder_plainly(FLIGHT / "nvrx_megatron16_gpu_error_1st")
    ep = plain_progress(raw)[("74", (12, 13, 14, 15))]
    assert {r: (e, c) for r, (e, c, _) in ep.items()} == {
        12: (20536, 20529),
        13: (20538, 20536),
        14: (20538, 20529),
        15: (20538, 20536),
    }
    top_enqueued = max(e for e, _, _ in ep.values())
    assert [r for r, (e, _, _) in ep.items() if e < top_enqueued] == [12]  # the enqueue-only reading
    analysis = _analyse(FLIGHT / "nvrx_megatron16_gpu_error_1st")
    assert analysis.headline == "74"
    group = analysis.groups.filter(pl.col("group") == "74").row(0, named=True)
    assert (group["not_completed"], group["waiting"]) == ([12, 14], [13, 15])
    assert (group["stop_seq"], group["wait_seq"], group["stop_op"]) == (20530, 20537, "nccl:all_to_all")
    # rank 12's 20530 is the first entry of its dump in group 74: its time is when it was enqueued
    entry = next(e for e in raw[12]["entries"] if e["process_group"][0] == "74")
    assert (entry["collective_seq_id"], group["stop_created_ns"]) == (20530, entry["time_created_ns"])


def test_lock_gil_the_others_wait_in_the_collective_9_and_14_never_entered() -> None:
    raw = read_folder_plainly(FLIGHT / "nvrx_megatron16_lock_gil_1st")
    analysis = _analyse(FLIGHT / "nvrx_megatron16_lock_gil_1st")
    assert analysis.headline == "72"
    group = analysis.groups.filter(pl.col("group") == "72").row(0, named=True)
    assert (group["not_entered"], group["waiting"]) == ([9, 14], [8, 10, 11, 12, 13, 15])
    assert (group["stop_seq"], group["wait_seq"]) == (45265, 45265)
    ops = {e["profiling_name"] for r in (8, 10, 11, 12, 13, 15) for e in raw[r]["entries"]
           if e["process_group"][0] == "72" and e["collective_seq_id"] == 45265}  # fmt: skip
    assert ops == {group["stop_op"]} == {"nccl:all_to_all"}


def test_waits_name_the_roots_and_the_pipeline_peers() -> None:
    analysis = _analyse(FLIGHT / "nvrx_megatron16_gpu_error_1st")
    waits = analysis.waits
    on_roots = waits.filter(pl.col("via") == "collective")
    assert set(on_roots.get_column("on_rank")) == {12, 14}
    assert set(on_roots.get_column("rank")) == {13, 15}
    # rank 0's oldest send (0 -> 3 in pipeline group 43: [0, 4, 8, 12]) goes to rank 12
    row = waits.filter((pl.col("rank") == 0) & (pl.col("on_rank") == 12)).row(0, named=True)
    assert (row["group"], row["via"], row["seq"], row["op"]) == ("43", "p2p", 11981, "nccl:send 0->3")


def test_no_mismatch_in_the_real_dumps_all_to_all_sizes_may_differ() -> None:
    for name in SETS:
        assert _analyse(FLIGHT / name).mismatches.is_empty()


def _generated(tmp_path: Path, faults: Faults, *, timing: bool = False) -> FlightAnalysis:
    groups, program = clean_job()
    write_dumps(tmp_path, simulate(groups, program, faults=faults, timing=timing))
    return _analyse(tmp_path)


def _roots(analysis: FlightAnalysis) -> dict[int, str]:
    return dict(
        zip(analysis.roots.get_column("rank"), analysis.roots.get_column("kind").cast(pl.String), strict=True)
    )


def test_a_clean_run_is_idle_everywhere(tmp_path: Path) -> None:
    analysis = _generated(tmp_path, Faults())
    assert set(analysis.progress.get_column("state")) == {"idle"}
    assert set(analysis.groups.get_column("state")) == {"idle"}
    assert analysis.roots.is_empty()
    assert analysis.waits.is_empty()
    assert analysis.mismatches.is_empty()
    assert analysis.headline is None


def test_a_rank_that_never_entered(tmp_path: Path) -> None:
    # program step 6 is the world group's broadcast #3: rank 1's host never issues it
    analysis = _generated(tmp_path, Faults(host_stop={1: 6}))
    assert _roots(analysis) == {1: "not_entered"}
    group = analysis.groups.filter(pl.col("group") == "0").row(0, named=True)
    assert (group["state"], group["not_entered"], group["waiting"], group["stop_seq"]) == (
        "stopped",
        [1],
        [0, 2, 3],
        3,
    )
    assert group["stop_op"] == "nccl:broadcast"


def test_a_rank_whose_device_stopped_is_named_with_timing_on(tmp_path: Path) -> None:
    analysis = _generated(tmp_path, Faults(device_stop={2: 6}), timing=True)
    assert _roots(analysis) == {2: "not_completed"}
    group = analysis.groups.filter(pl.col("group") == "0").row(0, named=True)
    assert (group["not_completed"], group["waiting"], group["stop_seq"]) == ([2], [0, 1, 3], 3)


def test_without_timing_a_stopped_device_cannot_be_told_from_a_network_fault(tmp_path: Path) -> None:
    analysis = _generated(tmp_path, Faults(device_stop={2: 6}))
    assert analysis.roots.is_empty()
    group = analysis.groups.filter(pl.col("group") == "0").row(0, named=True)
    assert (group["state"], group["stalled"], group["stop_seq"]) == ("stalled", [0, 1, 2, 3], 3)


def test_a_rank_that_stops_seeing_completions_its_peers_see(tmp_path: Path) -> None:
    """The GPU-error dumps' pattern: the peers completed what the faulted ranks' watchdogs never saw."""
    analysis = _generated(tmp_path, Faults(blind={1: 4, 2: 4}))
    assert _roots(analysis) == {1: "not_completed", 2: "not_completed"}


def test_a_desync_names_the_rank_and_the_collective(tmp_path: Path) -> None:
    analysis = _generated(tmp_path, Faults(desync={(3, 6): Step("0", "all_gather", (16,), "Long")}))
    rows = analysis.mismatches.to_dicts()
    assert len(rows) == 1
    row = rows[0]
    assert (row["group"], row["seq"], row["rank"], row["field"]) == ("0", 3, 3, "collective")
    assert (row["value"], row["expected"], row["agreeing"], row["ranks_compared"]) == (
        "all_gather",
        "broadcast",
        3,
        4,
    )
    assert analysis.groups.filter(pl.col("group") == "0").item(0, "state") == "stalled"


@pytest.mark.parametrize(
    ("step", "field", "value", "expected"),
    [
        (Step("0", "broadcast", (32,), "Long"), "input_sizes", "32", "16"),
        (Step("0", "broadcast", (16,), "Float"), "input_dtypes", "Float", "Long"),
    ],
)
def test_a_desync_of_size_or_dtype(tmp_path: Path, step: Step, field: str, value: str, expected: str) -> None:
    analysis = _generated(tmp_path, Faults(desync={(2, 6): step}))
    row = analysis.mismatches.row(0, named=True)
    assert (row["rank"], row["seq"], row["field"], row["value"], row["expected"]) == (
        2,
        3,
        field,
        value,
        expected,
    )


def test_first_to_stop_when_times_allow(tmp_path: Path) -> None:
    groups, program = clean_job(world=4, steps=8)
    faults = Faults(host_stop={1: 9, 3: 12})
    dumps = simulate(groups, program, faults=faults)
    write_dumps(tmp_path, dumps)
    analysis = _analyse(tmp_path)
    roots = analysis.roots
    assert set(roots.get_column("rank")) <= {1, 3}
    for row in roots.iter_rows(named=True):
        last = max(e["time_created_ns"] for e in dumps[row["rank"]]["entries"])
        assert row["stopped_at_ns"] == last
    first = min(roots.iter_rows(named=True), key=lambda r: r["stopped_at_ns"])["rank"]
    assert analysis.first_stop == first == 1


def test_ranks_waiting_on_one_another_are_a_circular_wait(tmp_path: Path) -> None:
    """Two groups, two ranks, issued in opposite orders: each waits in one group on the other."""
    groups = [Group("0", "a", (0, 1)), Group("1", "b", (0, 1))]
    program = [Step("0", "all_reduce"), Step("1", "all_reduce")]
    dumps = simulate(groups, program)
    # rank 0 issued group 0's second all_reduce, rank 1 group 1's: each then blocked on the other
    for rank, group in ((0, "0"), (1, "1")):
        pg_id = next(k for k, g in enumerate(groups) if g.name == group)
        dumps[rank]["pg_status"][str(pg_id)]["last_enqueued_collective"] = 2
    write_dumps(tmp_path, dumps)
    analysis = _analyse(tmp_path)
    assert _roots(analysis) == {0: "circular_wait", 1: "circular_wait"}


def test_a_member_without_a_dump(tmp_path: Path) -> None:
    groups, program = clean_job()
    dumps = simulate(groups, program, faults=Faults(host_stop={1: 6}))
    del dumps[1]
    write_dumps(tmp_path, dumps)
    analysis = _analyse(tmp_path)
    group = analysis.groups.filter(pl.col("group") == "0").row(0, named=True)
    assert (group["state"], group["no_dump"], group["stalled"]) == ("stalled", [1], [0, 2, 3])
    assert analysis.roots.is_empty()


def test_dump_collectives_matched_to_the_profilers_by_group_and_sequence(tmp_path: Path) -> None:
    import json

    import timeline
    from tests.builders import EPOCH_US, gpu_run_kineto
    from timeline.analysis.flight_recorder import match_profiler_collectives

    groups, program = clean_job()
    dumps = simulate(groups, program, faults=Faults(host_stop={1: 6}))
    write_dumps(tmp_path / "dumps", dumps)
    world = [e for e in dumps[0]["entries"] if e["process_group"][0] == "0"]
    kernels = []
    for i, entry in enumerate(world):
        op = "allreduce" if entry["profiling_name"] == "nccl:all_reduce" else "broadcast"
        shape = entry["input_sizes"][0][0]
        # the last one says another size than the dump: a mismatch the match must show
        nelems = shape * 2 if i == len(world) - 1 else shape
        dtype, at = entry["input_dtypes"][0], EPOCH_US + 100 * i
        kernels.append(profiler_kernel(op, entry["collective_seq_id"], at, nelems, dtype, 900 + i))
    # a collective the dump does not hold
    kernels.append(profiler_kernel("allreduce", 99, EPOCH_US + 5000, 4096, "Float", 999))
    trace = tmp_path / "rank0.json"
    trace.write_text(json.dumps(gpu_run_kineto(0, world_size=4, extra=kernels)))
    events = timeline.load(trace).events
    loaded = load_dumps(tmp_path / "dumps")
    matches = match_profiler_collectives(events, loaded.entries)
    assert matches.get_column("rank").unique().to_list() == [0]
    assert matches.get_column("seq").to_list() == [e["collective_seq_id"] for e in world]
    assert matches.get_column("profiling_name").to_list() == [e["profiling_name"] for e in world]
    assert matches.get_column("start_ns").to_list() == [
        (EPOCH_US + 100 * i) * 1000 for i in range(len(world))
    ]
    assert matches.get_column("same_collective").all()
    assert matches.get_column("same_bytes").to_list() == [True] * (len(world) - 1) + [False]


def test_without_pg_status_progress_comes_from_the_entries(tmp_path: Path) -> None:
    """Older dumps have no pg_status: each rank's progress is read from its entries (counted warning)."""
    groups, program = clean_job()
    dumps = simulate(groups, program, faults=Faults(host_stop={1: 6}))
    for dump in dumps.values():
        del dump["pg_status"]
    write_dumps(tmp_path, dumps)
    loaded = load_dumps(tmp_path)
    assert len(loaded.warnings) == 4
    analysis = analyze_dumps(loaded.entries, loaded.status, loaded.groups, ranks=loaded.ranks)
    assert _roots(analysis) == {1: "not_entered"}
    world = analysis.progress.filter(pl.col("group") == "0")
    assert set(world.get_column("progress_from")) == {"entries"}
    # rank 0 issued the world group's 9 collectives (6 all-reduces, 3 broadcasts) and completed the first 2
    row = world.filter(pl.col("rank") == 0).row(0, named=True)
    issued = [e for e in dumps[0]["entries"] if e["process_group"][0] == "0"]
    done = [e for e in issued if e["state"] == "completed"]
    assert (row["last_enqueued"], row["last_completed"]) == (len(issued), len(done))
