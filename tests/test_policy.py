"""The one loading policy (timeline.policy), and the road every command takes (timeline.analyze)."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from polars.testing import assert_frame_equal

import timeline
from tests.builders import PARAM, SAMPLES, assert_overlap_equal
from timeline import policy


def test_text_size_of_gzip_is_its_trailer(tmp_path: Path) -> None:
    text = b'{"traceEvents": []}' * 1000
    plain, packed = tmp_path / "a.json", tmp_path / "a.json.gz"
    plain.write_bytes(text)
    packed.write_bytes(gzip.compress(text))
    assert policy.text_size(plain) == len(text)
    assert policy.text_size(packed) == len(text)
    assert packed.stat().st_size < len(text)


def test_parallel_parsing_needs_several_large_files(monkeypatch: pytest.MonkeyPatch) -> None:
    files = sorted(PARAM.iterdir())
    assert not policy.parses_in_parallel(files[:1], workers=8)
    assert not policy.parses_in_parallel(files, workers=1)
    assert not policy.parses_in_parallel(files, workers=8)  # 8 small files: one process is faster
    monkeypatch.setattr(policy, "PARALLEL_MIN_BYTES", 1)
    assert policy.parses_in_parallel(files, workers=8)


def test_rank_by_rank_when_asked_for_a_dataset_or_large_inputs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    small = [str(PARAM)]
    assert not policy.reads_rank_by_rank(small, executor=None, ray_address=None)
    assert policy.reads_rank_by_rank(small, executor="local", ray_address=None)
    assert policy.reads_rank_by_rank(small, executor=None, ray_address="auto")
    # missing input: the in-memory path reports it
    assert not policy.reads_rank_by_rank([str(tmp_path / "nothing")], executor=None, ray_address=None)
    monkeypatch.setattr(policy, "PARALLEL_MIN_BYTES", 1)
    assert policy.reads_rank_by_rank(small, executor=None, ray_address=None)
    dataset = tmp_path / "run.d"
    (dataset / "rank=0").mkdir(parents=True)
    (dataset / "rank=0" / "part-0.parquet").write_bytes(b"PAR1")
    monkeypatch.setattr(policy, "PARALLEL_MIN_BYTES", 1 << 40)
    assert policy.reads_rank_by_rank([str(dataset)], executor=None, ray_address=None)


def test_one_large_trace_goes_rank_by_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    trace = SAMPLES / "ddp_gloo"
    one = sorted(trace.glob("*.json.gz"))[0]
    assert not policy.reads_rank_by_rank([str(one)], executor=None, ray_address=None)
    monkeypatch.setattr(policy, "STREAM_MIN_BYTES", 1)
    assert policy.reads_rank_by_rank([str(one)], executor=None, ray_address=None)


@pytest.mark.parametrize("executor", [None, "local"])
def test_analyze_gives_the_figures_of_load_and_compute_overlap(executor: str | None) -> None:
    """A library user gets the commands' policy, and the same figures in memory or rank by rank."""
    loaded = timeline.load(PARAM)
    analysed = timeline.analyze(PARAM, executor=executor)
    assert analysed.rank_by_rank is (executor is not None)
    assert_overlap_equal(timeline.compute_overlap(loaded.events), analysed.overlap)
    assert_frame_equal(loaded.files, analysed.trace.files)
    assert analysed.warnings == loaded.warnings


def test_the_summary_is_the_json_of_analyze() -> None:
    """``timeline.build_summary`` (with the diagnosis) is what ``timeline analyze --json`` prints."""
    import msgspec
    from typer.testing import CliRunner

    from cli.main import app

    analysed = timeline.analyze(PARAM, executor=None)
    expected = timeline.build_summary(analysed)
    result = CliRunner().invoke(app, ["analyze", str(PARAM), "--json"])
    assert result.exit_code == 0
    assert msgspec.json.decode(result.stdout) == msgspec.json.decode(msgspec.json.encode(expected))


def test_a_gzip_cut_short_is_not_taken_for_gigabytes(tmp_path: Path) -> None:
    """A cut gzip ends in compressed data, not its size trailer: 68 bytes are not 3 GB of text."""
    import gzip

    from timeline.policy import text_size

    data = b'{"traceEvents": [' + b",".join(
        b'{"ph": "X", "name": "k%d", "ts": %d, "dur": %d}' % (i, i * 7919 % 1000003, i) for i in range(40)
    )
    packed = gzip.compress(data + b"]}", mtime=0)
    cut = tmp_path / "r.json.gz"
    cut.write_bytes(packed[:68])
    assert int.from_bytes(packed[64:68], "little") > 1032 * 68  # the bytes read as a trailer
    assert text_size(cut) == 68
    whole = tmp_path / "w.json.gz"
    whole.write_bytes(packed)
    assert text_size(whole) == len(data) + 2
