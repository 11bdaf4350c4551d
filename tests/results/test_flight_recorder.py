"""The Flight Recorder report: its layout, its findings, and the docs that define every key and column."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.builders import REPO, TRACES, Faults, Step, clean_job, simulate, write_dumps
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
from timeline.results.findings import CAUSES
from timeline.results.flight_recorder import FLIGHT_REPORT_VERSION, build_flight_report, rank_list

DOC = REPO / "docs" / "flight-recorder.md"
REPORT_KEYS = {
    "version", "kind", "dumps", "verdict", "findings_version", "findings", "roots", "first_stop", "groups",
    "progress", "mismatches", "waits", "warnings",
}  # fmt: skip


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
    assert set(report) == REPORT_KEYS
    assert report["version"] == FLIGHT_REPORT_VERSION
    keys = set(report["dumps"]) | set(report["verdict"])
    for finding in report["findings"]:
        keys |= set(finding["evidence"])
    assert [k for k in sorted(keys) if f"`{k}`" not in text] == []
    assert {"hang", "desync"} <= set(CAUSES)


def test_a_clean_run_has_no_finding(tmp_path: Path) -> None:
    groups, program = clean_job()
    write_dumps(tmp_path, simulate(groups, program))
    report = build_flight_report(load_dumps(tmp_path))
    assert report["findings"] == []
    assert report["verdict"]["hang"] is False
    assert report["roots"] == []


def test_a_stall_no_rank_explains_is_a_hang_naming_no_rank(tmp_path: Path) -> None:
    groups, program = clean_job()
    write_dumps(tmp_path, simulate(groups, program, faults=Faults(device_stop={2: 6})))
    report = build_flight_report(load_dumps(tmp_path))
    (hang,) = report["findings"]
    assert (hang["cause"], hang["ranks"]) == ("hang", None)
    assert (hang["evidence"]["group"], hang["evidence"]["seq"], hang["evidence"]["stalled"]) == (
        "0",
        3,
        [0, 1, 2, 3],
    )
    assert "none completed it" in hang["summary"]


def test_both_shared_sets_give_one_hang_finding_first() -> None:
    for name in ("nvrx_megatron16_gpu_error_1st", "nvrx_megatron16_lock_gil_1st"):
        report = build_flight_report(load_dumps(TRACES / "flight_recorder" / name))
        assert [f["cause"] for f in report["findings"]] == ["hang"]
        assert report["verdict"]["summary"] == report["findings"][0]["summary"]


def test_rank_lists_read_as_words() -> None:
    assert rank_list([3]) == "rank 3"
    assert rank_list([12, 14]) == "ranks 12 and 14"
    assert rank_list([1, 2, 5]) == "ranks 1, 2 and 5"
