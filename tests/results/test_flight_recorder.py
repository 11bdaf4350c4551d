"""The Flight Recorder report: its layout, its findings, and the docs that define every key and column."""

from __future__ import annotations

import html
import re
import tomllib
from pathlib import Path

import msgspec
import pytest

from tests.builders import (
    REPO,
    TRACES,
    Faults,
    Step,
    clean_job,
    plain_progress,
    plain_states,
    read_folder_plainly,
    simulate,
    write_dumps,
)
from timeline.analysis.flight_recorder import (
    FLIGHT_GROUPS_SCHEMA,
    FLIGHT_MATCHES_SCHEMA,
    FLIGHT_MISMATCHES_SCHEMA,
    FLIGHT_PROGRESS_SCHEMA,
    FLIGHT_ROOTS_SCHEMA,
    FLIGHT_WAITS_SCHEMA,
)
from timeline.dumps import DUMP_FILES_SCHEMA, load_dumps
from timeline.importers.flight_recorder import FLIGHT_ENTRIES_SCHEMA, FLIGHT_STATUS_SCHEMA
from timeline.importers.flight_recorder import FLIGHT_GROUPS_SCHEMA as CONFIG_SCHEMA
from timeline.render.html import render_html
from timeline.results.findings import CAUSES
from timeline.results.flight_recorder import (
    FLIGHT_REPORT_VERSION,
    FlightDumps,
    FlightFinding,
    FlightGroup,
    FlightMatch,
    FlightMatches,
    FlightMismatch,
    FlightProgress,
    FlightReport,
    FlightRoot,
    FlightVerdict,
    FlightWait,
    build_flight_report,
    rank_list,
)

DOC = REPO / "docs" / "flight-recorder.md"
REPORT_KEYS = [
    "kind", "version", "timeline", "dumps", "verdict", "findings_version", "findings", "roots", "first_stop",
    "groups", "progress", "mismatches", "waits", "warnings", "matches",
]  # fmt: skip
ROWS = (
    FlightDumps, FlightVerdict, FlightFinding, FlightRoot, FlightGroup, FlightProgress, FlightMismatch,
    FlightWait, FlightMatch, FlightMatches,
)  # fmt: skip
GROUP_STATES = ("stopped", "stalled", "outstanding", "unknown", "idle")


@pytest.mark.parametrize(
    "schema",
    [
        FLIGHT_ENTRIES_SCHEMA, FLIGHT_STATUS_SCHEMA, CONFIG_SCHEMA, DUMP_FILES_SCHEMA, FLIGHT_PROGRESS_SCHEMA,
        FLIGHT_GROUPS_SCHEMA, FLIGHT_MISMATCHES_SCHEMA, FLIGHT_WAITS_SCHEMA, FLIGHT_ROOTS_SCHEMA,
        FLIGHT_MATCHES_SCHEMA,
    ],
)  # fmt: skip
def test_every_column_is_defined_in_the_docs(schema: object) -> None:
    text = DOC.read_text()
    missing = [c for c in schema.names() if f"`{c}`" not in text]  # type: ignore[attr-defined]
    assert missing == []


def test_every_key_of_the_report_and_its_evidence_is_documented(tmp_path: Path) -> None:
    text = DOC.read_text()
    groups, program = clean_job()
    faults = Faults(host_stop={1: 9}, desync={(2, 6): Step("0", "all_gather", (16,), "Long")})
    write_dumps(tmp_path, simulate(groups, program, faults=faults))
    report = build_flight_report(load_dumps(tmp_path))
    assert list(msgspec.to_builtins(report)) == REPORT_KEYS
    assert report.version == FLIGHT_REPORT_VERSION == 2
    keys = {field for row in ROWS for field in row.__struct_fields__}
    for finding in report.findings:
        keys |= set(finding.evidence)
    assert [k for k in sorted(keys | set(REPORT_KEYS)) if f"`{k}`" not in text] == []
    assert {"hang", "desync"} <= set(CAUSES)


def test_the_json_decodes_into_the_report_with_its_kind_and_versions() -> None:
    report = build_flight_report(load_dumps(TRACES / "flight_recorder" / "nvrx_megatron16_gpu_error_1st"))
    decoded = msgspec.json.decode(msgspec.json.encode(report), type=FlightReport)
    assert decoded == report
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    plain = msgspec.json.decode(msgspec.json.encode(report))
    assert (plain["kind"], plain["version"], plain["timeline"]) == ("flight_recorder", 2, project["version"])
    assert plain["matches"] is None


def test_a_clean_run_has_no_finding(tmp_path: Path) -> None:
    groups, program = clean_job()
    write_dumps(tmp_path, simulate(groups, program))
    report = build_flight_report(load_dumps(tmp_path))
    assert report.findings == []
    assert report.verdict.hang is False
    assert report.roots == []


def test_a_stall_no_rank_explains_is_a_hang_naming_no_rank(tmp_path: Path) -> None:
    groups, program = clean_job()
    write_dumps(tmp_path, simulate(groups, program, faults=Faults(device_stop={2: 6})))
    report = build_flight_report(load_dumps(tmp_path))
    (hang,) = report.findings
    assert (hang.cause, hang.ranks) == ("hang", None)
    assert (hang.evidence["group"], hang.evidence["seq"], hang.evidence["stalled"]) == ("0", 3, [0, 1, 2, 3])
    assert "none completed it" in hang.summary


def _stalled_in_world(folder: Path) -> list[int]:
    """The ranks of the world group (``"0"``) in state ``stalled``, read plainly from the dumps."""
    progress = plain_progress(read_folder_plainly(folder))
    (members,) = [m for (name, _), m in progress.items() if name == "0"]
    return sorted(r for r, s in plain_states(members).items() if s == "stalled")


def test_a_desync_names_the_ranks_stalled_where_it_happened(tmp_path: Path) -> None:
    """``stalled`` holds ranks in every finding: those of the group that stalled at the desync, or none."""
    groups, program = clean_job()
    wrong = Step("0", "all_gather", (16,), "Long")  # program step 6: the world group's broadcast #3
    cases = {
        "alone": Faults(desync={(3, 6): wrong}),
        "after_a_stop": Faults(host_stop={1: 4}, desync={(3, 6): wrong}),
    }
    for name, faults in cases.items():
        write_dumps(tmp_path / name, simulate(groups, program, faults=faults))
        report = build_flight_report(load_dumps(tmp_path / name))
        (desync,) = [f for f in report.findings if f.cause == "desync"]
        expected = _stalled_in_world(tmp_path / name)
        assert desync.evidence["stalled"] == expected
        assert ("The group stalled there" in desync.summary) == bool(expected)
    assert _stalled_in_world(tmp_path / "alone") == [0, 1, 2, 3]
    assert _stalled_in_world(tmp_path / "after_a_stop") == []  # rank 1 never entered: the group stopped


@pytest.mark.parametrize("name", ["nvrx_megatron16_gpu_error_1st", "nvrx_megatron16_lock_gil_1st"])
def test_groups_and_members_are_ordered_most_telling_first(name: str) -> None:
    report = build_flight_report(load_dumps(TRACES / "flight_recorder" / name))
    by_state = sorted(
        report.groups,
        key=lambda g: (
            GROUP_STATES.index(g.state),
            g.stop_created_ns is None,
            g.stop_created_ns or 0,
            g.group,
        ),
    )
    assert [g.order for g in by_state] == list(range(len(report.groups)))
    first = ("not_entered", "not_completed", "waiting", "stalled", "outstanding")
    rank_of = {"not_entered": 0, "not_completed": 0, "waiting": 1, "stalled": 2, "outstanding": 3}
    members = sorted(report.progress, key=lambda m: (rank_of.get(m.state, 4), m.group, m.rank))
    assert [m.order for m in members] == list(range(len(report.progress)))
    assert {m.state for m in members[: sum(m.state in first for m in members)]} <= set(first)
    # the rows themselves keep the analysis' order: by group name, then group, then rank
    assert [(g.pg_name, g.group) for g in report.groups] == sorted(
        (g.pg_name, g.group) for g in report.groups
    )


def test_both_shared_sets_give_one_hang_finding_first() -> None:
    for name in ("nvrx_megatron16_gpu_error_1st", "nvrx_megatron16_lock_gil_1st"):
        report = build_flight_report(load_dumps(TRACES / "flight_recorder" / name))
        assert [f.cause for f in report.findings] == ["hang"]
        assert report.verdict.summary == report.findings[0].summary


def test_rank_lists_read_as_words() -> None:
    assert rank_list([3]) == "rank 3"
    assert rank_list([12, 14]) == "ranks 12 and 14"
    assert rank_list([1, 2, 5]) == "ranks 1, 2 and 5"


def test_the_html_of_a_notebook_shows_the_verdict_roots_and_groups_that_did_not_finish() -> None:
    folder = TRACES / "flight_recorder" / "nvrx_megatron16_gpu_error_1st"
    report = build_flight_report(load_dumps(folder))
    page = render_html(report)
    assert "timeline Flight Recorder dumps: hang" in page
    assert html.escape(report.verdict.summary) in page
    roots = re.search(r'data-table="roots">(.*?)</table>', page)
    assert roots is not None
    faulted = re.findall(r"Rank (\d+), fault_type", (folder / "fault_injection.log").read_text())
    shown = re.findall(r'<tr><td data-value="(\d+)">', roots.group(1))
    assert shown == sorted(faulted, key=int) == ["12", "14"]
    # the groups where a member stopped or all stalled, read plainly from the dumps
    progress = plain_progress(read_folder_plainly(folder))
    unfinished = set()
    for (name, _), members in progress.items():
        if any(p2p for _, _, p2p in members.values()):
            continue
        if any(s.startswith("not_") or s == "stalled" for s in plain_states(members).values()):
            unfinished.add(name)
    groups = re.search(r'data-table="groups">(.*?)</table>', page)
    assert groups is not None
    listed = re.findall(r'<tr><td class="text">([^<]+)</td>', groups.group(1))
    assert set(listed) == unfinished
    assert listed[: len([g for g in report.groups if g.state == "stopped"])] == [
        g.group for g in sorted(report.groups, key=lambda g: g.order) if g.state == "stopped"
    ]


def test_the_renderers_of_the_report_read_attributes_not_keys() -> None:
    """No string subscript (``row["state"]``) in the Flight Recorder renderers: they read the typed report."""
    keyed = re.compile(r'\["[a-z_]+"\]')
    for path in ("timeline/render/terminal/flight_recorder.py", "timeline/report/flight_view.py"):
        lines = (REPO / path).read_text().splitlines()
        assert [line for line in lines if keyed.search(line)] == [], path
