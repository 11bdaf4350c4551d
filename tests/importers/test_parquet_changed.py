"""A Parquet input changed while it is read, or one a dataset mislabels (#42, items 12 and 13).

12. polars mapped a Parquet file it was given by path: rewritten in place while read, the file
    killed the command with SIGBUS (1 run in 20), and a panic of polars printed a Rust backtrace
    before the error line. The file is now read once into memory (one version of it), a change
    during that read is refused, and the command line turns Rust's backtraces off.
13. A dataset part without a digest whose ``rank`` column (3) contradicts its ``rank=1`` folder
    was read as rank 3: rank 1 vanished and rank 3's figures changed, with only "cannot be
    verified". Now the contradiction is an error.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import polars as pl
import pytest

from tests.builders import SAMPLES, timeline_command
from timeline.errors import TimelineError, TraceFormatError
from timeline.importers.parquet import read_parquet, write_parquet
from timeline.trace import load

GLOO = SAMPLES / "ddp_gloo"
BOUND_S = 300


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """The bytes of the two-rank sample written by ``timeline convert``."""
    path = tmp_path_factory.mktemp("parquet") / "run.parquet"
    trace = load(GLOO)
    write_parquet(path, events=trace.events, files=trace.files, warnings=trace.warnings, groups=trace.groups)
    return path.read_bytes()


# --- 12. changed while read ---------------------------------------------------------------------


def test_a_file_that_grows_while_it_is_read_is_refused(
    converted: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "run.parquet"
    path.write_bytes(converted)
    real_fstat = os.fstat
    calls: list[int] = []

    def fstat_then_a_writer_appends(fd: int) -> os.stat_result:
        found = real_fstat(fd)
        if not calls:
            with path.open("ab") as writer:  # another process writing the file, just after the size was read
                writer.write(b"more")
        calls.append(fd)
        return found

    monkeypatch.setattr(os, "fstat", fstat_then_a_writer_appends)
    with pytest.raises(TraceFormatError) as raised:
        read_parquet(path)
    assert str(raised.value) == (
        f"{path}: changed while it was read (something is writing it); read it again once it is complete"
    )


def test_the_file_is_read_once_so_a_change_after_that_cannot_reach_the_read(
    converted: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The metadata are read; then the file is truncated, as a writer rewriting it in place does.
    # Read by path (mapped), the columns came from the truncated file (an error, or SIGBUS).
    path = tmp_path / "run.parquet"
    path.write_bytes(converted)
    real_metadata = pl.read_parquet_metadata

    def metadata_then_truncated(source: object) -> dict[str, str]:
        found = real_metadata(source)  # type: ignore[arg-type]
        path.write_bytes(b"")
        return found

    monkeypatch.setattr(pl, "read_parquet_metadata", metadata_then_truncated)
    result = read_parquet(path)
    assert path.stat().st_size == 0
    assert result.events.height == load(GLOO).events.height


REWRITTEN = textwrap.dedent(
    """
    import random, sys, threading
    from pathlib import Path
    from timeline.errors import TimelineError
    from timeline.importers.parquet import read_parquet

    target, versions = Path(sys.argv[1]), [Path(v).read_bytes() for v in sys.argv[2:]]
    done = threading.Event()

    def rewrite():  # in place, as cp does: truncated, then written in pieces
        rng, i = random.Random(0), 0
        while not done.is_set():
            data, i = versions[i % len(versions)], i + 1
            with target.open("r+b") as handle:
                handle.truncate(0)
                for k in range(0, len(data), 1 << 14):
                    handle.write(data[k : k + (1 << 14)])
                    handle.flush()
            done.wait(rng.uniform(0, 0.01))

    writer = threading.Thread(target=rewrite)
    writer.start()
    outcomes = {"read": 0, "refused": 0}
    try:
        for _ in range(150):
            try:
                read_parquet(target)
                outcomes["read"] += 1
            except TimelineError:
                outcomes["refused"] += 1
    finally:
        done.set()
        writer.join()
    print(outcomes)
    """
)


def test_a_file_rewritten_in_place_while_read_is_read_or_refused_never_a_crash(
    converted: bytes, tmp_path: Path
) -> None:
    # a race, bounded: whatever the interleaving, each read gives the events or a TimelineError,
    # and the process lives (SIGBUS would end it with -7)
    target, one, other = tmp_path / "run.parquet", tmp_path / "a.parquet", tmp_path / "b.parquet"
    one.write_bytes(converted)
    trace = load(GLOO / "rank0.2-4.pt.trace.json.gz")
    write_parquet(other, events=trace.events, files=trace.files, warnings=trace.warnings, groups=trace.groups)
    target.write_bytes(converted)
    result = subprocess.run(
        [sys.executable, "-c", REWRITTEN, str(target), str(one), str(other)],
        capture_output=True,
        text=True,
        check=False,
        timeout=BOUND_S,
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr


def _panicking(converted: bytes) -> bytes | None:
    """Return a damaged copy of the file that makes polars panic, if one of a few thousand does."""
    rng = random.Random(42)
    for _ in range(3000):
        damaged = bytearray(converted)
        for _ in range(rng.randint(1, 20)):
            damaged[rng.randrange(len(damaged))] = rng.randrange(256)
        try:
            pl.read_parquet(bytes(damaged))
        except pl.exceptions.PanicException:
            return bytes(damaged)
        except (pl.exceptions.PolarsError, OSError, ValueError):
            continue
    return None


def test_a_panic_of_polars_prints_no_rust_backtrace(converted: bytes, tmp_path: Path) -> None:
    damaged = _panicking(converted)
    if damaged is None:
        pytest.skip("polars panicked on none of the 3,000 damaged copies tried: nothing to check")
    path = tmp_path / "damaged.parquet"
    path.write_bytes(damaged)
    result = subprocess.run(
        [*timeline_command(), "analyze", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=BOUND_S,
        env={**os.environ, "RUST_BACKTRACE": "full", "POLARS_BACKTRACE": "1"},
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr  # no panic notice of Rust's hook, no backtrace
    assert lines[0].startswith(f"error: {path}: damaged Parquet file, it cannot be read (")


NOTICE = b"""
thread 'async-executor-0' (23861) panicked at crates/polars-arrow/src/bitmap/immutable.rs:329:9:
assertion failed: offset + length <= self.length
stack backtrace:
   0: __rustc::rust_begin_unwind
   1: core::panicking::panic_fmt
  16: <polars_async::executor::Executor>::runner
note: Some details are omitted, run with `RUST_BACKTRACE=full` for a verbose backtrace.

thread 'async-executor-1' (23862) panicked at crates/polars-stream/src/nodes/io_sources/parquet/mod.rs:432:30:
called `Result::unwrap()` on an `Err` value: JoinError::Panic(Id(39), "assertion failed", ...)
"""


def test_panic_notices_are_left_out_and_the_rest_kept_in_order() -> None:
    from timeline.importers.panics import without_panic_notices

    drawn = b"\x1b[2Kloading 1/2\r\n"
    assert without_panic_notices(drawn + NOTICE + b"warning: kept\n") == drawn + b"warning: kept\n"
    assert without_panic_notices(b"no notice\n\nat all\n") == b"no notice\n\nat all\n"


# --- 13. a dataset part whose rank column contradicts its folder --------------------------------


def _dataset_with_a_mislabelled_part(tmp_path: Path, *, digest: bool) -> Path:
    """A dataset of ranks 0 and 1 whose rank=1 part holds rows of rank 3."""
    dataset = tmp_path / "run.d"
    trace = load(GLOO)
    for rank in (0, 1):
        folder = dataset / f"rank={rank}"
        folder.mkdir(parents=True)
        events = trace.events.filter(pl.col("rank") == rank)
        files = trace.files.filter(pl.col("rank") == rank)
        if rank == 1:
            events = events.with_columns(pl.lit(3, dtype=pl.Int32).alias("rank"))
            files = files.with_columns(pl.lit(1, dtype=pl.Int32).alias("rank"))  # the table says 1
        write_parquet(folder / "part-0.parquet", events=events, files=files, warnings=(), groups=None)
        if not digest:
            _strip_digest(folder / "part-0.parquet")
    return dataset


def _strip_digest(path: Path) -> None:
    """Rewrite a part without its digest, as an older timeline wrote it."""
    metadata = pl.read_parquet_metadata(path)
    metadata.pop("timeline.digest", None)
    frame = pl.read_parquet(path)
    frame.write_parquet(path, compression="zstd", metadata=metadata)


@pytest.mark.parametrize("digest", [True, False])
def test_a_part_whose_ranks_contradict_its_folder_is_an_error(tmp_path: Path, digest: bool) -> None:
    dataset = _dataset_with_a_mislabelled_part(tmp_path, digest=digest)
    part = dataset / "rank=1" / "part-0.parquet"
    with pytest.raises(TimelineError) as raised:
        load(dataset)
    assert str(raised.value) == (
        f"{part}: holds events of rank 3 but its folder rank=1 says rank 1; the dataset was changed "
        "after timeline convert wrote it: convert the original traces again"
    )
    result = subprocess.run(
        [*timeline_command(), "analyze", str(dataset)],
        capture_output=True,
        text=True,
        check=False,
        timeout=BOUND_S,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == f"error: {raised.value}"
