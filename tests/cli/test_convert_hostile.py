"""``timeline convert --force`` replaces only what timeline wrote (#19): never a user's file, FIFO or link.

Each case puts something at the output path, runs ``convert --force`` on it, and checks the refusal
(one ``error:`` line, exit code 2) and that the thing is untouched: same bytes, same inode, same link.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import polars as pl
import pytest

from tests.builders import SAMPLES, run_timeline

TRACES = SAMPLES / "ddp_gloo"  # two small ranks: a conversion takes a fraction of a second


def _state(path: Path) -> tuple[int, int, str, str]:
    """What must not change: the inode, the file type, the content (or link target)."""
    info = path.lstat()
    if stat.S_ISLNK(info.st_mode):
        content = "-> " + str(path.readlink())
    elif stat.S_ISREG(info.st_mode):
        content = hashlib.sha256(path.read_bytes()).hexdigest()
    elif stat.S_ISDIR(info.st_mode):
        content = repr(sorted((str(p.relative_to(path)), p.stat().st_size) for p in path.rglob("*")))
    else:
        content = ""
    return info.st_ino, stat.S_IFMT(info.st_mode), content, str(info.st_size)


def _no_partial_left(directory: Path) -> None:
    assert not [p.name for p in directory.iterdir() if ".partial" in p.name]


def _regular_file(root: Path, name: str) -> Path:
    path = root / name
    path.write_text("my notes: not to be lost\n")
    return path


def _fifo(root: Path, name: str) -> Path:
    path = root / name
    os.mkfifo(path)
    return path


def _directory(root: Path, name: str) -> Path:
    path = root / name
    path.mkdir()
    (path / "keep.txt").write_text("mine")
    return path


def _link(root: Path, name: str) -> Path:
    target = root / "elsewhere.txt"
    target.write_text("the link's target\n")
    path = root / name
    path.symlink_to(target)
    return path


def _dangling_link(root: Path, name: str) -> Path:
    path = root / name
    path.symlink_to(root / "nothing-here")
    return path


def _foreign_parquet(root: Path, name: str) -> Path:
    path = root / name
    pl.DataFrame({"a": [1, 2, 3]}).write_parquet(path)
    return path


def _lookalike_dataset(root: Path, name: str) -> Path:
    """A ``rank=0/part-0.parquet`` layout another tool wrote."""
    path = root / name
    (path / "rank=0").mkdir(parents=True)
    pl.DataFrame({"a": [1]}).write_parquet(path / "rank=0" / "part-0.parquet")
    return path


OCCUPANTS = {
    "regular file": _regular_file,
    "FIFO": _fifo,
    "directory": _directory,
    "symlink": _link,
    "dangling symlink": _dangling_link,
    "foreign Parquet": _foreign_parquet,
    "lookalike dataset": _lookalike_dataset,
}

EXPECTED = {
    "regular file": "a file that timeline did not write",
    "FIFO": "a FIFO",
    "directory": "a directory that is not a timeline dataset",
    "symlink": "a symbolic link",
    "dangling symlink": "a symbolic link",
    "foreign Parquet": "a file that timeline did not write",
    "lookalike dataset": "a directory that is not a timeline dataset",
}


def _what(occupant: str, *, dataset: bool) -> str:
    """What the error says the occupant is, for a dataset or a file output."""
    if dataset and occupant in ("regular file", "foreign Parquet"):
        return "a file, not a directory"
    return EXPECTED[occupant]


@pytest.mark.parametrize("force", [True, False], ids=["force", "no-force"])
@pytest.mark.parametrize("name", ["NOTES", "notes.parquet"], ids=["dataset-output", "file-output"])
@pytest.mark.parametrize("occupant", OCCUPANTS)
def test_force_never_replaces_what_timeline_did_not_write(
    tmp_path: Path, occupant: str, name: str, force: bool
) -> None:
    path = OCCUPANTS[occupant](tmp_path, name)
    before = _state(path)
    others = {p.name: _state(p) for p in tmp_path.iterdir() if p != path}
    result = run_timeline("convert", TRACES, "-o", path, *(["--force"] if force else []))
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    # a directory is a dataset output whatever its name, so is a link to one
    dataset = name == "NOTES" or path.is_dir()
    kind, place = ("a dataset", "directory") if dataset else ("a Parquet file", "file")
    assert result.stderr.splitlines() == [
        f"error: {path}: exists and is {_what(occupant, dataset=dataset)}; --force replaces only {kind} "
        f"written by timeline convert; choose another output {place}"
    ]
    assert _state(path) == before
    assert {p.name: _state(p) for p in tmp_path.iterdir() if p != path} == others
    _no_partial_left(tmp_path)


def test_a_device_is_never_replaced(tmp_path: Path) -> None:
    """A character device like /dev/null (made here: only root may, elsewhere the library is checked)."""
    from timeline.errors import UsageError
    from timeline.execution.dataset import check_output

    for dataset in (True, False):
        with pytest.raises(UsageError, match=r"^/dev/null: exists and is a device; --force replaces only"):
            check_output(Path("/dev/null"), dataset=dataset, force=True)
    device = tmp_path / "null"
    try:
        os.mknod(device, stat.S_IFCHR | 0o600, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("making a device node needs root")
    before = _state(device)
    result = run_timeline("convert", TRACES, "-o", device, "--force")
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: {device}: exists and is a device; ")
    assert _state(device) == before


def test_a_planted_partial_link_is_not_followed(tmp_path: Path) -> None:
    """The scratch file is created new: a link at the old fixed name is neither followed nor removed."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    planted = tmp_path / ".out.parquet.partial"
    planted.symlink_to(victim)
    result = run_timeline("convert", TRACES, "-o", tmp_path / "out.parquet")
    assert result.returncode == 0, result.stderr
    assert victim.read_text() == "precious\n"
    assert planted.readlink() == victim
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.parquet.partial", "out.parquet", "victim.txt"]


def test_force_replaces_what_timeline_wrote(tmp_path: Path) -> None:
    parquet, dataset, empty = tmp_path / "run.parquet", tmp_path / "run", tmp_path / "empty"
    for output in (parquet, dataset):
        first = run_timeline("convert", TRACES, "-o", output)
        assert first.returncode == 0, first.stderr
    empty.mkdir()
    for output in (parquet, dataset, empty):
        inode = output.stat().st_ino
        again = run_timeline("convert", TRACES, "-o", output, "--force")
        assert again.returncode == 0, again.stderr
        assert output.stat().st_ino != inode  # written anew and renamed into place
    assert sorted(p.name for p in dataset.iterdir()) == ["rank=0", "rank=1"]
    assert sorted(p.name for p in empty.iterdir()) == ["rank=0", "rank=1"]
    _no_partial_left(tmp_path)


def test_a_dataset_with_a_file_of_the_user_is_kept(tmp_path: Path) -> None:
    """A dataset timeline wrote, then a file added to it by hand: no longer only what timeline wrote."""
    dataset = tmp_path / "run"
    assert run_timeline("convert", TRACES, "-o", dataset).returncode == 0
    (dataset / "README.txt").write_text("how I made this run\n")
    before = _state(dataset)
    result = run_timeline("convert", TRACES, "-o", dataset, "--force")
    assert result.returncode == 2
    assert result.stderr.startswith(
        f"error: {dataset}: exists and is a directory that is not a timeline dataset;"
    )
    assert _state(dataset) == before


def test_the_library_refuses_too(tmp_path: Path) -> None:
    from timeline.errors import UsageError
    from timeline.execution import write_dataset

    notes = _regular_file(tmp_path, "NOTES")
    before = _state(notes)
    with pytest.raises(UsageError, match="exists and is a file, not a directory"):
        write_dataset(TRACES, notes, force=True)
    assert _state(notes) == before
    _no_partial_left(tmp_path)
