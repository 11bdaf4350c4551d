"""timeline.outputs: an output is never an input, is written whole, and leaves nothing when it fails (#42).

The library half of items 1, 9 and 10: :func:`check_output` on every way a path can name what is read
(the file itself, a symbolic or hard link, a glob, a directory's traces, a dataset's inside), and
:func:`write_output` / :func:`written_beside` when the write fails or a signal arrives while the
partial file is created.
"""

from __future__ import annotations

import errno
import os
import signal
from pathlib import Path

import polars as pl
import pytest

from timeline import outputs
from timeline.errors import UsageError
from timeline.outputs import check_output, is_output_error, signals_deferred, write_output, written_beside


def _trace(folder: Path, name: str = "rank0.json") -> Path:
    path = folder / name
    path.write_text('{"traceEvents": []}')
    return path


def _left(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# --- check_output -------------------------------------------------------------------------------


def test_a_file_read_is_refused(tmp_path: Path) -> None:
    trace = _trace(tmp_path)
    with pytest.raises(UsageError, match=r": is one of the inputs; choose another output file"):
        check_output(trace, reads=[str(trace)], option="--junit")


def test_the_same_file_by_another_name_is_refused(tmp_path: Path) -> None:
    trace = _trace(tmp_path)
    (tmp_path / "soft.xml").symlink_to(trace)
    os.link(trace, tmp_path / "hard.xml")
    (tmp_path / "folder").symlink_to(tmp_path, target_is_directory=True)
    for name in ("soft.xml", "hard.xml", "folder/rank0.json"):
        with pytest.raises(UsageError, match="is one of the inputs"):
            check_output(tmp_path / name, reads=[str(trace)], option="--markdown")


def test_what_a_pattern_or_a_directory_reads_is_refused(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    trace = _trace(run, "rank1.json.gz")
    with pytest.raises(UsageError, match="is one of the inputs"):
        check_output(trace, reads=[f"{run}/*.json.gz"], option="-o")
    with pytest.raises(UsageError, match="is one of the inputs"):
        check_output(trace, reads=[str(run)], option="-o")
    # a report beside the traces of a directory is not read: it may be written there
    assert check_output(run / "report.md", reads=[str(run)], option="--markdown") == run / "report.md"


def test_anything_inside_a_dataset_read_is_refused(tmp_path: Path) -> None:
    dataset = tmp_path / "run.d"
    (dataset / "rank=0").mkdir(parents=True)
    (dataset / "rank=0" / "part-0.parquet").write_bytes(b"PAR1")
    for inside in (dataset / "notes.md", dataset / "rank=0" / "new.parquet", dataset / "rank=0"):
        with pytest.raises(UsageError, match=r"inside .*run\.d, which is read"):
            check_output(inside, reads=[str(dataset)], option="-o", any_kind=True)


def test_an_output_that_is_not_a_regular_file_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "to-null").symlink_to("/dev/null")
    cases = {fifo: "a FIFO", tmp_path: "a directory", Path("/dev/null"): "a device"}
    cases[tmp_path / "to-null"] = "a device"
    for path, kind in cases.items():
        with pytest.raises(UsageError, match=rf": is {kind}; --junit writes a file"):
            check_output(path, reads=[], option="--junit")


def test_a_new_or_regular_output_apart_from_the_inputs_is_accepted(tmp_path: Path) -> None:
    trace = _trace(tmp_path)
    existing = tmp_path / "old.xml"
    existing.write_text("old")
    for path in (tmp_path / "new.xml", existing):
        assert check_output(path, reads=[str(trace), "missing/*.json"], option="--junit") == path


def test_an_output_path_too_long_is_one_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"has 300 bytes; a file name has at most 255 \(NAME_MAX\)"):
        check_output(tmp_path / ("a" * 300), reads=[], option="-o")


# --- write_output -------------------------------------------------------------------------------


def test_write_output_replaces_the_file_whole(tmp_path: Path) -> None:
    target = tmp_path / "report.md"
    target.write_text("old")
    old_inode = target.stat().st_ino
    write_output(target, "new ü")
    assert target.read_bytes() == "new ü".encode()
    assert target.stat().st_ino != old_inode  # renamed into place, never written in place
    assert _left(tmp_path) == ["report.md"]


def test_a_failed_write_leaves_the_target_as_it_was_and_no_partial(tmp_path: Path) -> None:
    target = tmp_path / "report.md"
    target.write_text("old")

    def fail_half_way() -> None:
        with written_beside(target) as (_, handle):
            handle.write(b"half")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(UsageError, match=r"report\.md: cannot write \(No space left on device"):
        fail_half_way()
    assert target.read_text() == "old"
    assert _left(tmp_path) == ["report.md"]


def test_a_missing_folder_is_one_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"junit\.xml: cannot write \(No such file or directory\)$"):
        write_output(tmp_path / "no" / "junit.xml", "x")


def test_polars_errors_of_the_system_are_read_back() -> None:
    found = is_output_error(
        pl.exceptions.ComputeError("parquet: underlying IO error: No space left on device (os error 28)")
    )
    assert found is not None
    assert found.errno == errno.ENOSPC
    assert is_output_error(pl.exceptions.ComputeError("a query bug")) is None
    assert is_output_error(ValueError("x")) is None


# --- signals while the partial file is made (item 10) -------------------------------------------


def test_a_ctrl_c_while_the_partial_is_created_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The window that left .o.parquet.partial-XXXX behind (3 of 3 tries): the file is created, the
    # signal arrives before its name is recorded for removal.
    created = outputs._new_file

    def created_then_interrupted(path: Path) -> int:
        descriptor = created(path)
        signal.raise_signal(signal.SIGINT)
        return descriptor

    def write() -> None:
        with written_beside(tmp_path / "o.parquet") as (_, handle):
            handle.write(b"never reached")

    monkeypatch.setattr(outputs, "_new_file", created_then_interrupted)
    with pytest.raises(KeyboardInterrupt):
        write()
    assert _left(tmp_path) == []


def test_signals_deferred_delivers_each_signal_once_after_the_block() -> None:
    seen: list[int] = []
    previous = signal.signal(signal.SIGHUP, lambda signum, frame: seen.append(signum))
    try:
        with signals_deferred():
            signal.raise_signal(signal.SIGHUP)
            signal.raise_signal(signal.SIGHUP)
            assert seen == []  # held
        assert seen == [signal.SIGHUP]
    finally:
        signal.signal(signal.SIGHUP, previous)
