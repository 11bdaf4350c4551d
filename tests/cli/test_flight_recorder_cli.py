"""``timeline analyze`` and ``timeline collectives`` on Flight Recorder dumps, through the command line.

Every number printed is checked against a plain reading of the dumps (:func:`plain_progress`,
:func:`plain_states`, the raw entries) and the fault logs; the text tables against the same rows.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tests.builders import (
    REPO,
    TRACES,
    Faults,
    Step,
    clean_job,
    hostile_dump,
    plain_progress,
    plain_states,
    profiler_kernel,
    read_folder_plainly,
    run_timeline,
    simulate,
    write_dumps,
)
from timeline.results.flight_recorder import FlightReport

FLIGHT = TRACES / "flight_recorder"
SETS = ("nvrx_megatron16_gpu_error_1st", "nvrx_megatron16_lock_gil_1st")
_P2P = re.compile(r"^nccl:(send|recv) (\d+)(->|<-)(\d+)$")


def _faulted(name: str) -> list[int]:
    text = (FLIGHT / name / "fault_injection.log").read_text()
    return sorted(int(r) for r in re.findall(r"Rank (\d+), fault_type", text))


class Plain:
    """What the dumps say, read without timeline: the states of every collective group, the p2p waits."""

    def __init__(self, folder: Path) -> None:
        self.raw = read_folder_plainly(folder)
        self.progress = plain_progress(self.raw)
        self.states = {
            key: plain_states(members)
            for key, members in self.progress.items()
            if not any(p2p for _, _, p2p in members.values())
        }

    def culprits(self) -> dict[int, set[tuple[str, tuple[int, ...]]]]:
        out: dict[int, set[tuple[str, tuple[int, ...]]]] = {}
        for key, states in self.states.items():
            for rank, state in states.items():
                if state.startswith("not_"):
                    out.setdefault(rank, set()).add(key)
        return out

    def roots(self) -> list[int]:
        waiting = {r for states in self.states.values() for r, s in states.items() if s == "waiting"}
        return sorted(set(self.culprits()) - waiting)

    def waiting_on(self, rank: int) -> set[int]:
        """Ranks waiting on ``rank``: in a collective group it stopped in, or by an outstanding p2p op."""
        out = {
            r for key in self.culprits().get(rank, ()) for r, s in self.states[key].items() if s == "waiting"
        }
        for other, dump in self.raw.items():
            for entry in dump["entries"]:
                match = _P2P.match(entry["profiling_name"])
                if not match or entry["state"] == "completed":
                    continue
                # "send a->b" and "recv a<-b": the peer is b (a group rank)
                peer_in_group = int(match.group(4))
                name = entry["process_group"][0]
                ranks = next(key[1] for key in self.progress if key[0] == name and other in key[1])
                peer = ranks[peer_in_group]
                if peer == rank:
                    out.add(other)
        return out

    def blocked(self) -> int:
        """Ranks other than the roots with something enqueued and not completed in some group."""
        busy = {r for members in self.progress.values() for r, (e, c, _) in members.items() if e > c}
        return len(busy - set(self.roots()))


def _json(*args: str | Path) -> dict[str, Any]:
    result = run_timeline(*args, "--json")
    assert result.returncode == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def _report(*args: str | Path) -> FlightReport:
    """The ``--json`` of a command on dumps, decoded into the report's type (its kind checked)."""
    result = run_timeline(*args, "--json")
    assert result.returncode == 0, result.stderr
    return msgspec.json.decode(result.stdout, type=FlightReport)


@pytest.mark.parametrize("command", ["analyze", "collectives"])
def test_json_names_its_kind_layout_and_timeline_first_and_decodes_into_the_type(command: str) -> None:
    result = run_timeline(command, FLIGHT / SETS[0], "--json")
    assert result.returncode == 0, result.stderr
    raw = json.loads(result.stdout)
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert list(raw.items())[:3] == [("kind", "flight_recorder"), ("version", 2), ("timeline", version)]
    assert list(raw)[3:] == [
        "dumps", "verdict", "findings_version", "findings", "roots", "first_stop", "groups", "progress",
        "mismatches", "waits", "warnings", "matches",
    ]  # fmt: skip
    report = msgspec.json.decode(result.stdout, type=FlightReport)
    assert (report.version, report.timeline, report.matches) == (2, version, None)
    assert msgspec.to_builtins(report) == raw


@pytest.mark.parametrize("name", SETS)
def test_analyze_json_names_the_faulted_ranks_group_collective_and_kind(name: str) -> None:
    folder = FLIGHT / name
    plain = Plain(folder)
    report = _report("analyze", folder)
    assert report.verdict.hang is True
    assert report.verdict.desync is False
    hang = report.findings[0]
    assert set(hang.__struct_fields__) == {"cause", "summary", "ranks", "iterations", "evidence", "fix",
                                           "predicted_step_ns", "predicted_gain_ratio", "basis"}  # fmt: skip
    assert (hang.cause, hang.basis, hang.predicted_step_ns) == ("hang", "observed", None)
    assert hang.ranks == _faulted(name) == plain.roots()
    evidence: dict[str, Any] = dict(hang.evidence)
    key = (evidence["pg_name"], tuple(evidence["group_ranks"]))
    states = plain.states[key]
    members = plain.progress[key]
    roots = hang.ranks
    assert roots is not None
    assert evidence["pg_desc"] == "EXPERT_MODEL_PARALLEL_GROUP"
    assert evidence["dimension"] == "expert_model_parallel"
    assert evidence["stop_kinds"] == [states[r] for r in roots]
    assert evidence["last_enqueued"] == [members[r][0] for r in roots]
    assert evidence["last_completed"] == [members[r][1] for r in roots]
    assert evidence["seq"] == min(members[r][1] for r in roots) + 1
    waiting = sorted(r for r, s in states.items() if s == "waiting")
    assert evidence["waiting"] == waiting
    assert evidence["wait_seq"] == max(c for _, c, _ in members.values()) + 1
    assert evidence["blocked_ranks"] == plain.blocked() == 14
    ops = {e["profiling_name"] for d in plain.raw.values() for e in d["entries"]
           if e["process_group"][0] == key[0] and e["collective_seq_id"] == evidence["seq"]}  # fmt: skip
    assert ops == {evidence["profiling_name"]}
    assert evidence["collective"] == "all_to_all"
    total = sum(len(d["entries"]) for d in plain.raw.values())
    assert report.dumps.entries == total
    for root in report.roots:
        assert root.groups == len(plain.culprits()[root.rank])
        assert root.waited_on_by == len(plain.waiting_on(root.rank))
    for group in report.groups:
        group_key = (group.pg_name, tuple(group.group_ranks or ()))
        if group_key not in plain.states:
            continue
        group_states = plain.states[group_key]
        by_state = {"not_entered": group.not_entered, "not_completed": group.not_completed,
                    "waiting": group.waiting, "stalled": group.stalled}  # fmt: skip
        for state, ranks in by_state.items():
            assert ranks == sorted(r for r, s in group_states.items() if s == state)
        busy = [members_c + 1 for r, (_, members_c, _) in plain.progress[group_key].items()
                if group_states[r] != "idle"]  # fmt: skip
        assert group.stop_seq == (min(busy) if busy else None)
        waiting_c = [plain.progress[group_key][r][1] + 1 for r, st in group_states.items() if st == "waiting"]
        assert group.wait_seq == (max(waiting_c) if waiting_c else None)
        name, stop = group_key[0], group.stop_seq
        at_stop = {e["profiling_name"] for d in plain.raw.values() for e in d["entries"]
                   if e["process_group"][0] == name and e["collective_seq_id"] == stop}  # fmt: skip
        assert {group.stop_op} == (at_stop or {None})


@pytest.mark.parametrize("name", SETS)
def test_analyze_text_prints_the_same_answer(name: str) -> None:
    folder = FLIGHT / name
    report = _report("analyze", folder)
    result = run_timeline("analyze", folder)
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    hang = report.findings[0]
    evidence = hang.evidence
    plain = Plain(folder)
    assert f"Flight Recorder dumps of 16 ranks (0-15), version 2.9, {report.dumps.entries} entries" in text
    assert f"1. hang (ranks {', '.join(map(str, _faulted(name)))})" in text
    assert " ".join(hang.summary.split()) in text
    words = {"not_completed": "entered it and never completed it", "not_entered": "never entered it"}
    kinds = evidence["stop_kinds"]
    assert isinstance(kinds, list)
    assert words[str(kinds[0])] in text
    assert f"group {evidence['group']} (expert_model_parallel, EXPERT_MODEL_PARALLEL_GROUP;" in text
    assert f"at all_to_all #{evidence['seq']}" in text
    assert f"wait in #{evidence['wait_seq']}" in text
    assert f"{plain.blocked()} other ranks blocked in all" in text
    for root in report.roots:
        line = rf"│ +{root.rank} │ +{root.kind} │ +{root.groups} │ +{root.waited_on_by} │ +- │"
        assert re.search(line, result.stdout)
    for group in report.groups:
        if group.state in ("stopped", "stalled"):
            line = rf"│ {re.escape(group.group)} +│.*│ +{group.state} │ +#{group.stop_seq} │"
            assert re.search(line, result.stdout), line
    # listed in the report's order: the stopped and stalled groups as their `order` says
    listed = [
        g.group for g in sorted(report.groups, key=lambda g: g.order) if g.state in ("stopped", "stalled")
    ]
    at = [result.stdout.index(f"│ {g} ") for g in listed]
    assert at == sorted(at)


def test_collectives_lists_every_groups_progress() -> None:
    folder = FLIGHT / "nvrx_megatron16_gpu_error_1st"
    plain = Plain(folder)
    report = _report("collectives", folder)
    rows = {(r.pg_name, tuple(r.group_ranks or ()), r.rank): r for r in report.progress}
    expected = {
        (n, ranks, rank): v for (n, ranks), members in plain.progress.items() for rank, v in members.items()
    }
    assert set(rows) == set(expected)
    for key, (enqueued, completed, _) in expected.items():
        assert (rows[key].last_enqueued, rows[key].last_completed) == (enqueued, completed)
    result = run_timeline("collectives", folder, "--limit", "200")
    assert result.returncode == 0, result.stderr
    for row in report.progress:
        if row.state == "idle":
            continue
        group, rank, state = re.escape(row.group), row.rank, row.state
        line = (
            rf"│ {group} +│ +{rank} │ +{state} +│ +#{row.last_enqueued} │ +- │ "
            rf"+#{row.last_completed} │ +{row.outstanding} │ +#{row.stop_seq} │"
        )
        assert re.search(line, result.stdout), line


def test_a_directory_a_glob_and_files_give_one_answer(tmp_path: Path) -> None:
    folder = FLIGHT / "nvrx_megatron16_lock_gil_1st"
    by_folder = _report("analyze", folder)
    by_glob = _report("analyze", f"{folder}/_dump_*")
    by_files = _report("analyze", *sorted(folder.glob("_dump_*")))
    assert by_folder == by_glob == by_files


def test_json_dumps_give_the_answer_of_pickles(tmp_path: Path) -> None:
    groups, program = clean_job()
    dumps = simulate(groups, program, faults=Faults(host_stop={2: 9}))
    write_dumps(tmp_path / "p", dumps)
    write_dumps(tmp_path / "j", dumps, encoding="json")
    assert _report("analyze", tmp_path / "p").findings == _report("analyze", tmp_path / "j").findings
    assert _report("analyze", tmp_path / "j").findings[0].ranks == [2]


def test_a_generated_desync_is_reported_with_the_rank_and_the_collective(tmp_path: Path) -> None:
    groups, program = clean_job()
    # program step 6 is the world group's broadcast #3; rank 3 issues an all_gather there
    dumps = simulate(groups, program, faults=Faults(desync={(3, 6): Step("0", "all_gather", (16,), "Long")}))
    write_dumps(tmp_path, dumps)
    entry = next(
        e for e in dumps[3]["entries"] if e["process_group"][0] == "0" and e["collective_seq_id"] == 3
    )
    assert entry["profiling_name"] == "nccl:all_gather"
    report = _report("analyze", tmp_path)
    assert report.verdict.desync is True
    desync = [f for f in report.findings if f.cause == "desync"]
    assert len(desync) == 1
    assert desync[0].ranks == [3]
    evidence = desync[0].evidence
    assert (evidence["group"], evidence["seq"], evidence["field"]) == ("0", 3, "collective")
    assert (evidence["values"], evidence["expected"], evidence["agreeing"]) == (
        ["all_gather"],
        "broadcast",
        3,
    )
    text = run_timeline("analyze", tmp_path).stdout
    assert "2. desync" not in text
    assert "1. desync (rank 3)" in text
    assert "Rank 3 of group 0 (world, default_pg; ranks 0, 1, 2, 3) issued all_gather at #3" in " ".join(
        text.split()
    )


def test_a_clean_run_says_no_hang(tmp_path: Path) -> None:
    groups, program = clean_job()
    write_dumps(tmp_path, simulate(groups, program))
    report = _report("analyze", tmp_path)
    assert msgspec.to_builtins(report.verdict) == {
        "hang": False,
        "desync": False,
        "communication_bound": None,
        "summary": "No hang: every rank completed every collective it enqueued, as far as the dumps show.",
    }
    assert report.findings == []


def test_a_hostile_pickle_is_refused_with_one_error_line_and_nothing_runs(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    groups, program = clean_job()
    dumps = simulate(groups, program)
    write_dumps(tmp_path, dumps)
    (tmp_path / "_dump_1").write_bytes(hostile_dump(dumps[1], marker))
    for command in ("analyze", "collectives"):
        result = run_timeline(command, tmp_path)
        assert result.returncode == 2
        assert result.stdout == ""
        lines = result.stderr.splitlines()
        assert len(lines) == 1
        where = re.escape(str(tmp_path / "_dump_1"))
        assert re.fullmatch(
            rf"error: {where}: the pickle asks for the class (posix|os)\.system; "
            r"a Flight Recorder dump holds plain data only, so it was refused and nothing in it was run: "
            r"pass the dumps torch wrote",
            lines[0],
        )
        assert not marker.exists()


def test_a_dump_with_no_rank_in_its_name_is_one_error_line(tmp_path: Path) -> None:
    groups, program = clean_job()
    write_dumps(tmp_path, simulate(groups, program))
    (tmp_path / "_dump_2").rename(tmp_path / "dump")
    result = run_timeline("analyze", tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: {tmp_path / 'dump'}: no rank: ")
    assert len(result.stderr.splitlines()) == 1


def test_other_commands_say_a_dump_is_not_a_trace(tmp_path: Path) -> None:
    groups, program = clean_job()
    (path,) = write_dumps(tmp_path, {0: simulate(groups, program)[0]})
    result = run_timeline("whatif", path)
    assert result.returncode == 2
    assert "a PyTorch Flight Recorder dump, not a profiler trace" in result.stderr


def test_profiler_traces_and_dumps_of_one_job_together(tmp_path: Path) -> None:
    from tests.builders import EPOCH_US, gpu_run_kineto

    groups, program = clean_job()
    dumps = simulate(groups, program, faults=Faults(host_stop={1: 6}))
    write_dumps(tmp_path / "dumps", dumps)
    world = [e for e in dumps[0]["entries"] if e["process_group"][0] == "0"]
    kernels = [
        profiler_kernel(
            "allreduce" if e["profiling_name"] == "nccl:all_reduce" else "broadcast",
            e["collective_seq_id"], EPOCH_US + 100 * i, e["input_sizes"][0][0], e["input_dtypes"][0], 900 + i,
        )
        for i, e in enumerate(world)
    ]  # fmt: skip
    trace = tmp_path / "rank0.json"
    trace.write_text(json.dumps(gpu_run_kineto(0, world_size=4, extra=kernels)))
    summary = _json("analyze", trace, tmp_path / "dumps")
    flight = msgspec.convert(summary["flight_recorder"], FlightReport)
    assert list(summary["flight_recorder"])[:3] == ["kind", "version", "timeline"]
    assert flight.findings[0].ranks == [1]
    matches = flight.matches
    assert matches is not None
    total = sum(len(d["entries"]) for d in dumps.values())
    assert (matches.entries, matches.trace_collectives, matches.matched) == (total, len(world), len(world))
    assert (matches.different_collective, matches.different_bytes) == (0, 0)
    assert [(m.rank, m.seq) for m in matches.rows] == [(0, e["collective_seq_id"]) for e in world]
    text = " ".join(run_timeline("analyze", trace, tmp_path / "dumps").stdout.split())
    assert f"Profiler traces and dumps: {len(world)} of the dumps' {total} entries matched" in text
    assert "1. hang (rank 1)" in text
