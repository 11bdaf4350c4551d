"""The cache on the command line: ``--no-cache``, ``--cache-dir``, ``timeline cache``; what it never changes.

Each test has a cache folder of its own, ``$TIMELINE_CACHE_DIR`` (``tests/conftest.py``), which the
commands run as subprocesses inherit.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from tests.builders import PARAM, SAMPLES, file_digests, run_timeline, timeline_command

SAMPLE = SAMPLES / "ddp_gloo"
RANKS = sorted(SAMPLE.glob("rank*.json.gz"))


def _entries(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.parquet"))


def _ok(*args: str | Path) -> subprocess.CompletedProcess[str]:
    done = run_timeline(*args)
    assert done.returncode == 0, done.stderr
    return done


def test_a_second_command_reads_the_frames_and_answers_the_same(cache_folder: Path) -> None:
    cold = _ok("analyze", SAMPLE, "--json")
    entries = _entries(cache_folder)
    assert len(entries) == len(RANKS)
    inodes = {e: e.stat().st_ino for e in entries}
    for entry in entries:
        os.utime(entry, (1000, 1000))
    warm = _ok("analyze", SAMPLE, "--json")
    collectives = _ok("collectives", SAMPLE, "--json")
    for entry in entries:  # read (marked used), not written again
        assert (entry.stat().st_ino, entry.stat().st_mtime > 1000) == (inodes[entry], True)
    assert warm.stdout == cold.stdout
    assert warm.stderr == cold.stderr
    assert cold.stdout == _ok("analyze", SAMPLE, "--json", "--no-cache").stdout
    assert collectives.stdout == _ok("collectives", SAMPLE, "--json", "--no-cache").stdout


def test_no_cache_writes_nothing(cache_folder: Path, tmp_path: Path) -> None:
    for command in (["analyze"], ["collectives"], ["whatif", "--bandwidth", "10"]):
        _ok(*command, SAMPLE, "--no-cache")
    _ok("convert", SAMPLE, "-o", tmp_path / "run.parquet", "--no-cache")
    assert not cache_folder.exists()


def test_cache_dir_names_the_folder(cache_folder: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    _ok("analyze", SAMPLE, "--cache-dir", other)
    assert len(_entries(other)) == len(RANKS)
    assert not cache_folder.exists()


def test_two_commands_started_together_on_a_cold_cache_give_one_answer_and_one_entry_per_file(
    cache_folder: Path,
) -> None:
    """Both decode and write; each entry is renamed into place whole: one per file, no temporary left."""
    command = [*timeline_command(), "analyze", str(PARAM), "--json"]
    with tempfile.TemporaryFile() as out_a, tempfile.TemporaryFile() as out_b:
        started = [subprocess.Popen(command, stdout=out, stderr=subprocess.DEVNULL) for out in (out_a, out_b)]
        codes = [process.wait(timeout=300) for process in started]
        outputs = []
        for out in (out_a, out_b):
            out.seek(0)
            outputs.append(out.read().decode())
    assert codes == [0, 0]
    assert outputs[0] == outputs[1]
    assert outputs[0] == _ok("analyze", PARAM, "--json", "--no-cache").stdout
    assert len(_entries(cache_folder)) == len(list(PARAM.glob("*.json.gz")))
    assert sorted(p.name for p in cache_folder.iterdir() if p.suffix != ".parquet") == []
    assert _ok("analyze", PARAM, "--json").stdout == outputs[0]  # and they read back whole


def test_a_folder_that_cannot_be_made_still_gives_the_answer_with_one_warning() -> None:
    """/proc refuses new folders to everyone (root too): the cache costs speed only."""
    if not Path("/proc/self").is_dir():
        pytest.skip("no /proc on this system: no folder that refuses root")
    folder = Path("/proc/timeline-cache")
    done = _ok("analyze", SAMPLE, "--json", "--cache-dir", folder)
    expected = _ok("analyze", SAMPLE, "--json", "--no-cache")
    assert done.stdout == expected.stdout
    extra = [line for line in done.stderr.splitlines() if line not in expected.stderr.splitlines()]
    assert extra == [
        f"warning: cache folder {folder}: cannot write there (No such file or directory); traces are decoded "
        "again each time (--cache-dir DIR or TIMELINE_CACHE_DIR to use another folder, --no-cache to "
        "silence this)"
    ]


def test_a_read_only_cache_folder_still_gives_the_answer_from_its_entries(
    cache_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder nothing can be written to (simulated: tests may run as root): entries read, none written."""
    runner = CliRunner()
    cold = runner.invoke(app, ["analyze", str(SAMPLE), "--json"], catch_exceptions=False)
    assert cold.exit_code == 0
    entries = _entries(cache_folder)
    other = SAMPLES / "ddp_gloo_4rank"
    real_mkstemp, real_open = tempfile.mkstemp, Path.open

    def refuse_mkstemp(*args: object, dir: object = None, **kwargs: object) -> tuple[int, str]:
        if dir is not None and Path(str(dir)) == cache_folder:
            raise PermissionError(13, "Permission denied", str(dir))
        return real_mkstemp(*args, dir=dir, **kwargs)  # type: ignore[call-overload,no-any-return]

    def refuse_open(self: Path, mode: str = "r", *args: object, **kwargs: object) -> object:
        if self.parent == cache_folder and "x" in mode:
            raise PermissionError(13, "Permission denied", str(self))
        return real_open(self, mode, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(tempfile, "mkstemp", refuse_mkstemp)
    monkeypatch.setattr(Path, "open", refuse_open)
    warm = runner.invoke(app, ["analyze", str(SAMPLE), "--json"], catch_exceptions=False)
    fresh = runner.invoke(app, ["analyze", str(other), "--json"], catch_exceptions=False)
    assert (warm.exit_code, fresh.exit_code) == (0, 0)
    assert warm.stdout == cold.stdout
    warning = f"warning: cache folder {cache_folder}: cannot write there (Permission denied); "
    assert next(line for line in warm.stderr.splitlines() if "cache folder" in line).startswith(warning)
    assert len([line for line in fresh.stderr.splitlines() if "cache folder" in line]) == 1
    assert _entries(cache_folder) == entries
    monkeypatch.undo()
    expected = runner.invoke(app, ["analyze", str(other), "--json", "--no-cache"], catch_exceptions=False)
    assert fresh.stdout == expected.stdout


def test_nothing_is_written_beside_the_traces(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(SAMPLE, run)
    before = file_digests(run)
    _ok("analyze", run)
    _ok("analyze", run)
    assert file_digests(run) == before


def test_timeline_cache_shows_and_clears_only_its_entries(cache_folder: Path) -> None:
    empty = _ok("cache")
    assert empty.stdout.splitlines()[:2] == [
        f"cache folder: {cache_folder}",
        "0 entries, 0 B of at most 4.0 GiB (least recently used go first)",
    ]
    _ok("analyze", SAMPLE)
    (cache_folder / "notes.txt").write_text("mine")
    shown = _ok("cache").stdout.splitlines()
    assert shown[1].startswith(f"{len(RANKS)} entries, ")
    traces = sorted(line.split("  ")[-1] for line in shown[4:])
    assert traces == [str(p.resolve()) for p in RANKS]
    size = sum(e.stat().st_size for e in _entries(cache_folder))
    cleared = _ok("cache", "clear")
    assert cleared.stdout.startswith(f"removed {len(RANKS)} entries (")
    assert cleared.stdout.rstrip().endswith(f"from {cache_folder}")
    assert _entries(cache_folder) == []
    assert (cache_folder / "notes.txt").read_text() == "mine"
    assert size > 0


def test_timeline_cache_refuses_an_unknown_action() -> None:
    done = run_timeline("cache", "purge")
    assert done.returncode == 2
    assert done.stderr == "error: 'purge': not an action of timeline cache; use show or clear\n"


def test_a_cache_limit_that_is_not_a_size_is_one_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIMELINE_CACHE_LIMIT", "lots")
    done = run_timeline("analyze", SAMPLE)
    assert done.returncode == 2
    assert done.stderr == (
        "error: TIMELINE_CACHE_LIMIT='lots': not a size; give bytes, or a number with K, M, G or T (8G)\n"
    )
