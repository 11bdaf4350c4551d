"""A saved summary JSON as a run: layout 4 (``kind`` first) into :class:`Summary`, layouts 1-3 as they were.

``timeline analyze --json`` of a sample is written to a file, then read back by
:func:`~timeline.budgets.runs.is_summary_file` and :func:`~timeline.budgets.frames.read_summary`; the
same summary in layout 3 (what a timeline before #36 wrote, built here by
:func:`tests.builders.older_summary`) must give the same frames. Another kind of result, or a layout
this timeline does not know, is refused with one error line that says what it is.
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
from polars.testing import assert_frame_equal

from tests.builders import REPO, older_summary, run_timeline
from timeline.budgets.frames import frames_from_summary, read_summary
from timeline.budgets.runs import is_summary_file
from timeline.errors import TraceFormatError
from timeline.results.base import TIMELINE_VERSION
from timeline.results.summary import SUMMARY_VERSION, Summary

FSDP2_TP = REPO / "sample_traces" / "fsdp2_tp_gloo"


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    done = run_timeline("analyze", FSDP2_TP, "--json")
    assert done.returncode == 0, done.stderr
    path = tmp_path_factory.mktemp("summary") / "summary.json"
    path.write_text(done.stdout)
    return path


def test_analyze_json_decodes_into_the_summary_type(written: Path) -> None:
    raw = written.read_bytes()
    assert raw.startswith(b'{"kind":"summary","version":4,"timeline":')
    summary = msgspec.json.decode(raw, type=Summary)
    assert (summary.version, summary.timeline) == (SUMMARY_VERSION, TIMELINE_VERSION) == (4, "0.1.0")
    plain = json.loads(raw)
    assert list(plain)[:3] == ["kind", "version", "timeline"]
    assert msgspec.json.decode(msgspec.json.encode(summary)) == plain  # nothing lost on the way back


def test_both_layouts_are_summary_files(written: Path, tmp_path: Path) -> None:
    summary = msgspec.json.decode(written.read_bytes(), type=Summary)
    old = tmp_path / "old.json"
    old.write_text(json.dumps(older_summary(summary, version=3), indent=2))
    assert is_summary_file(written)
    assert is_summary_file(old)
    assert not is_summary_file(next(FSDP2_TP.glob("*.json*")))


def test_layout_3_and_layout_4_give_the_same_frames(written: Path, tmp_path: Path) -> None:
    summary = msgspec.json.decode(written.read_bytes(), type=Summary)
    old = tmp_path / "old.json"
    old.write_text(json.dumps(older_summary(summary, version=3)))
    new, older = read_summary(written), read_summary(old)
    for name in ("iterations", "ranks"):
        a, b = getattr(new, name), getattr(older, name)
        assert_frame_equal(a, b.select(a.columns), check_dtypes=False)
    # the ranks' span is the analysis' step_ns column again, as the budgets read it
    assert new.ranks.get_column("step_ns").to_list() == [row.span_ns for row in summary.ranks]
    assert new.dimensions is not None
    assert older.dimensions is not None
    assert new.dimensions.height == len(summary.dimensions.rows if summary.dimensions else [])
    assert_frame_equal(new.dimensions, older.dimensions)
    assert new.findings is not None
    assert older.findings is not None
    assert_frame_equal(new.findings, older.findings)
    assert new.diagnosis is not None
    assert older.diagnosis is not None
    assert new.diagnosis.findings == older.diagnosis.findings == summary.findings
    assert new.diagnosis.verdict == older.diagnosis.verdict == summary.verdict
    assert new.job == older.job


def test_the_summary_struct_itself_gives_the_frames_of_its_json(written: Path) -> None:
    summary = msgspec.json.decode(written.read_bytes(), type=Summary)
    direct = frames_from_summary(summary, label="s")
    assert_frame_equal(direct.iterations, read_summary(written).iterations)
    worst = direct.iterations.sort("exposed_comm_ns", descending=True, nulls_last=True).row(0, named=True)
    assert summary.worst is not None
    assert worst["exposed_comm_ns"] == summary.worst.exposed_comm_ns


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"kind": "collectives", "version": 3}, "s.json: a collectives result of timeline, not a summary"),
        (
            {"kind": "summary", "version": 9},
            "s.json: summary layout version 9, this timeline reads versions 1",
        ),
        ({"kind": "summary", "version": 4, "files": 1}, "s.json: not a summary of layout 4"),
    ],
)
def test_what_is_not_a_readable_summary_is_refused(document: dict[str, object], message: str) -> None:
    with pytest.raises(TraceFormatError, match=message):
        frames_from_summary(document, label="s.json")


def test_check_refuses_another_kind_of_result_with_one_error_line(tmp_path: Path) -> None:
    path = tmp_path / "collectives.json"
    path.write_text('{"kind": "collectives", "version": 3, "collectives": []}')
    budget = tmp_path / "b.toml"
    budget.write_text('[[budgets]]\nmetric = "step_ns"\nmax = 1\n')
    done = run_timeline("check", path, "--budget", budget)
    assert done.returncode == 2
    what = "a collectives result of timeline, not a summary; write one with timeline analyze --json"
    assert done.stderr.splitlines() == [f"error: {path}: {what}"]
