"""Hostile Parquet input (#19): broken metadata, damaged bytes, bad times and columns, never a traceback.

Every damaged file is built here from a file timeline wrote: the metadata rewritten, bytes flipped,
columns changed. Reading ends in one clean ``TraceFormatError`` (exit code 2 on the command line), or
in exactly the numbers of the intact file: never in other numbers without a word.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from tests.builders import PARAM, gpu, make_events, run_timeline, step
from timeline.analysis.overlap import compute_overlap
from timeline.errors import TimelineError, TraceFormatError
from timeline.schema import FILES_SCHEMA
from timeline.trace import Trace, load

RECREATE = "re-create it with timeline convert"


@pytest.fixture(scope="module")
def param_parquet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The PARAM traces converted by the command line, once for the module."""
    target = tmp_path_factory.mktemp("hostile") / "param.parquet"
    result = run_timeline("convert", PARAM, "-o", target)
    assert result.returncode == 0, result.stderr
    return target


def _small_trace() -> Trace:
    events = make_events(
        [
            step(1, 0, 1000),
            gpu("compute", 100, 400, name="gemm"),
            gpu("communication", 300, 700, name="ncclKernel_AllReduce", stream=9, pg_ranks="[0, 1, 2, 3]"),
            step(2, 1000, 2000),
            gpu("compute", 1100, 1500, name="gemm"),
        ]
    )
    files = pl.DataFrame(
        [{"rank": 0, "path": "rank0.json", "format": "kineto", "rank_from": "distributedInfo", "events": 5}],
        schema=FILES_SCHEMA,
    )
    return Trace(events=events, files=files, warnings=())


def _rewrite(
    source: Path,
    target: Path,
    *,
    frame: pl.DataFrame | None = None,
    metadata: dict[str, str | None] | None = None,
) -> Path:
    """Write ``source``'s events (or ``frame``) again, its timeline metadata changed as given (None: removed).

    Only the timeline keys are kept: polars writes its own schema of the frame.
    """
    kept = {k: v for k, v in pl.read_parquet_metadata(source).items() if k.startswith("timeline.")}
    for key, value in (metadata or {}).items():
        name = "timeline." + key
        if value is None:
            kept.pop(name, None)
        else:
            kept[name] = value
    (pl.read_parquet(source) if frame is None else frame).write_parquet(target, metadata=kept)
    return target


def _flip(data: bytes, offset: int, width: int = 4) -> bytes:
    damaged = bytearray(data)
    for i in range(offset, min(offset + width, len(data))):
        damaged[i] ^= 0x5A
    return bytes(damaged)


def _single_error_line(result_stderr: str) -> str:
    lines = result_stderr.splitlines()
    assert len(lines) == 1, result_stderr
    assert lines[0].startswith("error: ")
    return lines[0]


# --- broken metadata (#19 defect 4) --------------------------------------------------------------------


BROKEN_METADATA = {
    "files not JSON": ({"files": "not json"}, "timeline.files"),
    "files an object": ({"files": '{"a": 1}'}, "timeline.files"),
    "files a list of numbers": ({"files": "[1, 2]"}, "timeline.files"),
    "files of wrong types": ({"files": '[{"rank": "x", "path": 3, "format": "kineto"}]'}, "timeline.files"),
    "files without a path": ({"files": '[{"rank": 0, "format": "kineto"}]'}, "timeline.files"),
    "rank too large": ({"files": '[{"rank": 9999999999, "path": "a", "format": "k"}]'}, "timeline.files"),
    "warnings not JSON": ({"warnings": "nope"}, "timeline.warnings"),
    "warnings a number": ({"warnings": "5"}, "timeline.warnings"),
    "warnings of numbers": ({"warnings": "[1, 2]"}, "timeline.warnings"),
}  # fmt: skip


@pytest.mark.parametrize("case", BROKEN_METADATA)
def test_broken_metadata_is_one_clean_error(tmp_path: Path, case: str) -> None:
    changes, key = BROKEN_METADATA[case]
    good = tmp_path / "good.parquet"
    _small_trace().write_parquet(good)
    bad = _rewrite(good, tmp_path / "bad.parquet", metadata=dict(changes))
    with pytest.raises(TraceFormatError) as caught:
        load(bad)
    message = str(caught.value)
    assert message.startswith(f"{bad}: metadata key {key} is not ")
    assert message.endswith(f"; {RECREATE}")
    assert "\n" not in message


def test_broken_metadata_on_the_command_line(tmp_path: Path) -> None:
    good = tmp_path / "good.parquet"
    _small_trace().write_parquet(good)
    bad = _rewrite(good, tmp_path / "bad.parquet", metadata={"files": "not json"})
    result = run_timeline("analyze", bad)
    assert result.returncode == 2
    line = _single_error_line(result.stderr)
    assert line.startswith(f"error: {bad}: metadata key timeline.files is not a file table (")


# --- the digest (#19 defect 9) ---------------------------------------------------------------------------


def test_every_flipped_block_is_refused_or_reads_the_same(param_parquet: Path, tmp_path: Path) -> None:
    """Four bytes flipped every 4 KiB, one offset at a time: an error, or exactly the same numbers."""
    intact = load(param_parquet)
    expected = compute_overlap(intact.events)
    data = param_parquet.read_bytes()
    damaged_path = tmp_path / "damaged.parquet"
    outcomes: dict[str, int] = {}
    for offset in [*range(0, len(data), 4096), len(data) - 12]:
        damaged_path.write_bytes(_flip(data, offset))
        try:
            trace = load(damaged_path)
        except TimelineError as exc:
            message = str(exc)
            assert "\n" not in message, (offset, message)
            assert message.startswith(str(damaged_path)), (offset, message)
            kind = "digest" if "content does not match its digest" in message else "refused"
            outcomes[kind] = outcomes.get(kind, 0) + 1
            continue
        assert_frame_equal(trace.events, intact.events)
        assert_frame_equal(compute_overlap(trace.events).ranks, expected.ranks)
        outcomes["same"] = outcomes.get("same", 0) + 1
    # the digest is what catches the damage polars reads without complaint
    assert outcomes.get("digest", 0) >= 5, outcomes
    assert sum(outcomes.values()) >= 50, outcomes


def test_a_mismatch_is_exit_code_2_with_the_fix(param_parquet: Path, tmp_path: Path) -> None:
    data = param_parquet.read_bytes()
    damaged_path = tmp_path / "damaged.parquet"
    for offset in range(4096, len(data), 4096):
        damaged_path.write_bytes(_flip(data, offset))
        try:
            load(damaged_path)
        except TraceFormatError as exc:
            if "does not match its digest" in str(exc):
                break
    else:
        pytest.fail("no flipped block reads as a digest mismatch")
    result = run_timeline("analyze", damaged_path)
    assert result.returncode == 2
    assert result.stdout == ""
    assert _single_error_line(result.stderr) == (
        f"error: {damaged_path}: content does not match its digest: the file was changed or damaged "
        f"after timeline wrote it; {RECREATE}"
    )


def test_a_dataset_part_is_checked_too(tmp_path: Path) -> None:
    target = tmp_path / "run"
    result = run_timeline("convert", PARAM, "-o", target)
    assert result.returncode == 0, result.stderr
    part = target / "rank=3" / "part-0.parquet"
    data = part.read_bytes()
    intact = load(target).events
    messages: list[str] = []
    for offset in range(0, len(data), 512):
        part.write_bytes(_flip(data, offset))
        try:
            events = load(target).events
        except TraceFormatError as exc:
            messages.append(str(exc))
            continue
        assert_frame_equal(events, intact)
    assert all(m.startswith(str(part)) for m in messages), messages
    assert any("does not match its digest" in m for m in messages)


def test_a_changed_value_is_refused(tmp_path: Path) -> None:
    """A value rewritten with polars (a valid file, the old digest kept) is refused."""
    good = tmp_path / "good.parquet"
    _small_trace().write_parquet(good)
    frame = pl.read_parquet(good).with_columns(
        end_ns=pl.when(pl.col("name") == "ncclKernel_AllReduce").then(2_580_000).otherwise("end_ns")
    )
    changed = _rewrite(good, tmp_path / "changed.parquet", frame=frame)
    with pytest.raises(TraceFormatError, match="content does not match its digest"):
        load(changed)
    changed_files = _rewrite(
        good, tmp_path / "files.parquet", metadata={"files": json.dumps([{"path": "x", "format": "kineto"}])}
    )
    with pytest.raises(TraceFormatError, match="content does not match its digest"):
        load(changed_files)


def test_a_file_without_a_digest_is_read_with_one_warning(tmp_path: Path) -> None:
    good = tmp_path / "good.parquet"
    trace = _small_trace()
    trace.write_parquet(good)
    old = _rewrite(good, tmp_path / "old.parquet", metadata={"digest": None})
    again = load(old)
    assert_frame_equal(again.events, load(good).events)
    assert again.warnings == (
        f"{old}: no content digest (written by an older timeline): its content cannot be verified; "
        f"{RECREATE} to have it checked",
    )
    assert load(good).warnings == ()


def test_an_unknown_digest_is_refused(tmp_path: Path) -> None:
    good = tmp_path / "good.parquet"
    _small_trace().write_parquet(good)
    odd = _rewrite(good, tmp_path / "odd.parquet", metadata={"digest": "md5:1234"})
    with pytest.raises(
        TraceFormatError, match=r"metadata key timeline\.digest is not a digest this timeline knows"
    ):
        load(odd)


def test_digest_ignores_chunks() -> None:
    """The same content held in other chunks has the same digest (categorical codes: the CLI tests)."""
    from timeline.importers.parquet import content_digest  # new in #19: the other tests run on older code

    events = _small_trace().events
    digest = content_digest(events, files_json="[]", warnings_json="[]")
    chunked = pl.concat([events.slice(0, 2), events.slice(2, 1), events.slice(3)], rechunk=False)
    assert chunked.n_chunks() == 3
    assert_frame_equal(chunked, events)
    assert content_digest(chunked, files_json="[]", warnings_json="[]") == digest
    assert content_digest(events, files_json="[]", warnings_json='["a warning"]') != digest
    assert content_digest(events, files_json='[{"path": "a"}]', warnings_json="[]") != digest


@pytest.mark.parametrize("column", ["rank", "kind", "name", "start_ns", "end_ns", "stream", "pg_ranks"])
def test_digest_sees_one_changed_value(column: str) -> None:
    from timeline.importers.parquet import content_digest  # new in #19: the other tests run on older code

    events = _small_trace().events
    digest = content_digest(events, files_json="[]", warnings_json="[]")
    dtype = events.schema[column]
    row = events.get_column(column).to_list()
    replacement = {"kind": "memcpy", "name": "other", "pg_ranks": "[0, 1]"}.get(column, 12345)
    row[2] = replacement
    changed = events.with_columns(pl.Series(column, row, dtype=dtype))
    assert content_digest(changed, files_json="[]", warnings_json="[]") != digest
    # a null where there was a value, and the row order, count too
    row[2] = None
    nulled = events.with_columns(pl.Series(column, row, dtype=dtype))
    assert content_digest(nulled, files_json="[]", warnings_json="[]") != digest
    assert content_digest(events.reverse(), files_json="[]", warnings_json="[]") != digest


# --- structure, columns, times (#19 defects 9 and 10) --------------------------------------------------


@pytest.mark.parametrize("keep", [0.5, 0.99])
def test_a_truncated_file_is_one_clean_error(param_parquet: Path, tmp_path: Path, keep: float) -> None:
    data = param_parquet.read_bytes()
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(data[: int(len(data) * keep)])
    result = run_timeline("analyze", cut)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    line = _single_error_line(result.stderr)
    assert line.startswith(f"error: {cut}: ")


WRONG_COLUMNS = {
    "times as text": (pl.col("start_ns").cast(pl.String) + "x", "start_ns", "holds String, expected Int64"),
    "times as floats": (pl.col("end_ns").cast(pl.Float64), "end_ns", "holds Float64, expected Int64"),
    "kinds as numbers": (pl.lit(3, dtype=pl.Int64).alias("kind"), "kind", "holds Int64, expected Enum"),
    "an unknown kind": (pl.lit("bogus").alias("kind"), "kind", "holds values that are not Enum"),
    "rank past Int32": (pl.lit(2**40, dtype=pl.Int64).alias("rank"), "rank", "holds values that are not"),
}  # fmt: skip


@pytest.mark.parametrize("case", WRONG_COLUMNS)
def test_a_column_of_another_type_is_named(tmp_path: Path, case: str) -> None:
    expression, column, what = WRONG_COLUMNS[case]
    good = tmp_path / "good.parquet"
    _small_trace().write_parquet(good)
    bad = _rewrite(good, tmp_path / "bad.parquet", frame=pl.read_parquet(good).with_columns(expression))
    with pytest.raises(TraceFormatError) as caught:
        load(bad)
    message = str(caught.value)
    assert message.startswith(f"{bad}: column {column} {what}")
    assert message.endswith(RECREATE)
    result = run_timeline("analyze", bad)
    assert result.returncode == 2
    assert _single_error_line(result.stderr) == f"error: {message}"


def test_a_missing_column_is_named(tmp_path: Path) -> None:
    good = tmp_path / "good.parquet"
    _small_trace().write_parquet(good)
    bad = _rewrite(good, tmp_path / "bad.parquet", frame=pl.read_parquet(good).drop("end_ns"))
    with pytest.raises(TraceFormatError, match=r"lacks columns \['end_ns'\]"):
        load(bad)


def test_end_before_start_is_dropped_and_counted(tmp_path: Path) -> None:
    """As the JSON importers do: the events are dropped, one warning counts them."""
    good = tmp_path / "good.parquet"
    trace = _small_trace()
    trace.write_parquet(good)
    backwards = pl.col("name") == "gemm"
    frame = pl.read_parquet(good).with_columns(
        end_ns=pl.when(backwards).then(pl.col("start_ns") - 50).otherwise("end_ns"),
        start_ns=pl.when(pl.col("name") == "ncclKernel_AllReduce").then(None).otherwise("start_ns"),
    )
    bad = _rewrite(good, tmp_path / "bad.parquet", frame=frame, metadata={"digest": None})
    again = load(bad)
    assert again.events.height == trace.events.height - 3
    assert again.events.filter(pl.col("end_ns") < pl.col("start_ns")).height == 0
    assert again.warnings[1:] == (
        f"{bad}: dropped 1 events without start_ns or end_ns",
        f"{bad}: dropped 2 events with end < start",
    )
    # what is left (two annotations) has nothing to measure: an error after the counted warnings (#41)
    result = run_timeline("analyze", "--json", bad)
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert f"warning: {bad}: dropped 2 events with end < start" in lines
    assert lines[-1].startswith("error: rank0.json: no rank has compute, communication or memory copies")


def test_flipped_blocks_on_the_command_line(param_parquet: Path, tmp_path: Path) -> None:
    """``analyze --json`` of damaged copies: exit code 2 with one error line, or the intact numbers."""
    intact = run_timeline("analyze", "--json", param_parquet)
    assert intact.returncode == 0, intact.stderr
    expected = json.loads(intact.stdout)
    data = param_parquet.read_bytes()
    codes: list[int] = []
    for offset in range(2048, len(data), 32768):
        damaged_path = tmp_path / f"damaged-{offset}.parquet"
        damaged_path.write_bytes(_flip(data, offset, width=32))
        result = run_timeline("analyze", "--json", damaged_path)
        codes.append(result.returncode)
        if result.returncode == 2:
            assert _single_error_line(result.stderr).startswith(f"error: {damaged_path}")
            continue
        assert result.returncode == 0, result.stderr
        summary = json.loads(result.stdout)
        assert summary["ranks"] == expected["ranks"]
        assert summary["iterations"] == expected["iterations"]
    assert 2 in codes
