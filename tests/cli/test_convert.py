"""``timeline convert``: Parquet that analyses exactly like its sources, and no overwriting by accident."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.builders import PARAM, TRACES, run_timeline


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _analyze_json(*args: str | Path) -> dict[str, Any]:
    result = run_timeline("analyze", "--json", *args)
    assert result.returncode == 0, result.stderr
    summary: dict[str, Any] = json.loads(result.stdout)
    return summary


@pytest.fixture(scope="module")
def param_parquet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The PARAM traces converted once for the module."""
    target = tmp_path_factory.mktemp("convert") / "param.parquet"
    result = run_timeline("convert", PARAM, "-o", target)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    events = pl.scan_parquet(target).select(pl.len()).collect().item()
    assert result.stderr.splitlines() == [f"wrote {events:,} events of 8 rank(s) to {target}"]
    return target


def test_parquet_analyses_like_its_sources(param_parquet: Path) -> None:
    from_json = _analyze_json(PARAM)
    from_parquet = _analyze_json(param_parquet)
    for key in ("ranks", "iterations", "worst", "top_collectives", "windows", "warnings", "files"):
        assert from_parquet[key] == from_json[key], key
    assert from_parquet == from_json
    assert [row["rank"] for row in from_parquet["ranks"]] == list(range(8))


def test_parquet_analyses_like_its_sources_as_tables(param_parquet: Path) -> None:
    from_json = run_timeline("analyze", PARAM)
    from_parquet = run_timeline("analyze", param_parquet)
    assert from_json.returncode == from_parquet.returncode == 0
    assert from_parquet.stdout == from_json.stdout


def test_parquet_holds_the_canonical_frame(param_parquet: Path) -> None:
    from timeline.schema import EVENTS_SCHEMA
    from timeline.trace import load

    frame = pl.read_parquet(param_parquet)
    assert frame.schema == EVENTS_SCHEMA
    assert sorted(frame.get_column("rank").unique().to_list()) == list(range(8))
    assert frame.filter(pl.col("kind") == "communication").height == 64
    metadata = pl.read_parquet_metadata(param_parquet)
    files = json.loads(metadata["timeline.files"])
    assert [row["rank"] for row in files] == list(range(8))
    assert [row["path"] for row in files] == [str(p) for p in sorted(PARAM.glob("*.json.gz"))]
    assert load(param_parquet).events.equals(load(PARAM).events)


def test_converting_a_parquet_again_changes_nothing(param_parquet: Path, tmp_path: Path) -> None:
    again = tmp_path / "again.parquet"
    result = run_timeline("convert", param_parquet, "-o", again)
    assert result.returncode == 0, result.stderr
    assert pl.read_parquet(again).equals(pl.read_parquet(param_parquet))
    assert _analyze_json(again) == _analyze_json(param_parquet)


def test_convert_passes_loading_options(tmp_path: Path) -> None:
    source = TRACES / "kineto" / "hta_amd_mi250" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    target = tmp_path / "amd.parquet"
    # the only input file, naming no rank: rank 0, said in a warning (#19)
    alone = run_timeline("convert", source, "-o", tmp_path / "alone.parquet")
    assert alone.returncode == 0, alone.stderr
    assert f"warning: {source}: no rank in the file or its name; read as rank 0" in alone.stderr
    assert set(pl.read_parquet(tmp_path / "alone.parquet").get_column("rank")) == {0}
    result = run_timeline("convert", source, "-o", target, "--rank", "4")
    assert result.returncode == 0, result.stderr
    assert set(pl.read_parquet(target).get_column("rank")) == {4}


@pytest.mark.parametrize("force", [False, True])
def test_refuses_to_overwrite_an_input(tmp_path: Path, force: bool) -> None:
    source = tmp_path / "rank0.json.gz"
    shutil.copy(next(iter(sorted(PARAM.glob("*.json.gz")))), source)
    digest = _sha(source)
    result = run_timeline("convert", source, "-o", source, *(["--force"] if force else []), cwd=tmp_path)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [
        f"error: {source}: is one of the inputs; choose another output file (inputs are never modified)"
    ]
    assert _sha(source) == digest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank0.json.gz"]


def test_refuses_to_overwrite_an_input_inside_a_directory(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    shutil.copytree(PARAM, folder)
    target = folder / sorted(p.name for p in folder.iterdir())[3]
    digest = _sha(target)
    # A relative output naming an input file, from inside the folder.
    result = run_timeline("convert", ".", "-o", target.name, "--force", cwd=folder)
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: {target.name}: is one of the inputs")
    assert _sha(target) == digest


def test_refuses_to_overwrite_an_existing_output(tmp_path: Path, param_parquet: Path) -> None:
    target = tmp_path / "out.parquet"
    shutil.copy(param_parquet, target)  # a Parquet file timeline wrote: what --force may replace (#19)
    digest, inode = _sha(target), target.stat().st_ino
    result = run_timeline("convert", PARAM, "-o", target)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"error: {target}: exists; pass --force to overwrite it"]
    assert (_sha(target), target.stat().st_ino) == (digest, inode)

    forced = run_timeline("convert", PARAM, "-o", target, "--force")
    assert forced.returncode == 0, forced.stderr
    assert target.stat().st_ino != inode  # a new file renamed over the old one
    assert pl.read_parquet(target).equals(pl.read_parquet(param_parquet))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.parquet"]  # no partial file left


def test_output_directory_must_exist(tmp_path: Path) -> None:
    target = tmp_path / "missing" / "out.parquet"
    result = run_timeline("convert", PARAM, "-o", target)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"error: {target.parent}: no such directory"]
    assert not target.parent.exists()


def test_output_is_required(tmp_path: Path) -> None:
    result = run_timeline("convert", PARAM, cwd=tmp_path)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "--output" in result.stderr
    assert list(tmp_path.iterdir()) == []
