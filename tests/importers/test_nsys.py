"""Nsight Systems SQLite exports: real exports of 2026.2 and 2024.6, generated ones, and bad input.

Every figure is checked against an independent reading of the database with the standard library's
``sqlite3`` and interval arithmetic written here.
"""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import struct
from pathlib import Path

import polars as pl
import pytest

from benchmarks.generate_nsys import COMM_ID, Layout, write_export
from tests.builders import TRACES, nsys_kernel_exposure, run_timeline
from timeline.analysis.collectives import match_collectives
from timeline.analysis.overlap import compute_overlap
from timeline.errors import RankError, TraceContentError, TraceFormatError, UsageError
from timeline.importers.files import sniff_path
from timeline.importers.nsys_db import open_nsys
from timeline.importers.nsys_nccl import decode_payload, payload_schemas
from timeline.trace import load

NSYS = TRACES / "nsys"
TWO_RANKS = NSYS / "nsysai_2xh100_nccl_before.sqlite"
OLD = NSYS / "nvfuser_h100_nsys2024_6.sqlite"


def _listing(folder: Path) -> dict[str, tuple[int, str]]:
    return {p.name: (p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest()) for p in folder.iterdir()}


# --- the real 2-rank export ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_ranks() -> object:
    return load(TWO_RANKS)


def test_two_ranks_one_per_process_and_device(two_ranks: object) -> None:
    trace = two_ranks
    assert trace.ranks == [0, 1]  # type: ignore[attr-defined]
    files = trace.files  # type: ignore[attr-defined]
    assert files.get_column("format").to_list() == ["nsys", "nsys"]
    assert files.get_column("rank_from").to_list() == ["(host, device) order"] * 2
    assert files.get_column("host").to_list() == ["modal", "modal"]
    assert files.get_column("clock").to_list() == ["epoch", "epoch"]
    notes = [w for w in trace.warnings if "numbered in (host, device) order" in w]  # type: ignore[attr-defined]
    assert len(notes) == 1
    assert "pid 144 device 0 on modal → rank 0, pid 145 device 1 on modal → rank 1" in notes[0]
    # every kernel of each process is in its rank (the plain count of the kernel table)
    conn = sqlite3.connect(f"file:{TWO_RANKS}?mode=ro&immutable=1", uri=True)
    counts = dict(
        conn.execute("SELECT deviceId, count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY 1").fetchall()
    )
    conn.close()
    events = trace.events  # type: ignore[attr-defined]
    kernels = events.filter(pl.col("cat") == "kernel").group_by("rank").len().sort("rank")
    assert kernels.get_column("len").to_list() == [counts[0], counts[1]]


def test_communication_hidden_and_exposed_match_the_kernel_table(two_ranks: object) -> None:
    expected = nsys_kernel_exposure(TWO_RANKS)
    overlap = compute_overlap(two_ranks.events)  # type: ignore[attr-defined]
    got = {
        row["rank"]: (row["comm_ns"], row["hidden_comm_ns"], row["exposed_comm_ns"])
        for row in overlap.ranks.iter_rows(named=True)
    }
    assert got == {0: expected[(144, 0)], 1: expected[(145, 1)]}
    assert got[0][0] == 17_172_652  # the 33 SendRecv kernels of device 0, summed in SQL by hand


def test_sendrecv_kernels_are_matched_as_all_to_all_across_the_ranks(two_ranks: object) -> None:
    events = two_ranks.events  # type: ignore[attr-defined]
    match = match_collectives(events)
    collectives = match.collectives
    assert collectives.height == 33
    assert set(collectives.get_column("ranks").to_list()) == {2}
    assert match.mismatches.height == 0
    named = collectives.get_column("collective").to_list()
    # the first kernel of each rank was launched before the trimmed window (no launch to link to the
    # nccl:all_to_all range): it keeps the kernel's own name, SendRecv
    assert named[0] == "send_recv"
    assert named[1:] == ["all_to_all"] * 32
    comm = events.filter(pl.col("kind") == "communication")
    linked = comm.filter(pl.col("collective") == "all_to_all")
    assert linked.get_column("external_id").null_count() == 0  # the op_id of nccl:all_to_all


def test_nvtx_operators_and_runtime_calls(two_ranks: object) -> None:
    events = two_ranks.events  # type: ignore[attr-defined]
    ops = events.filter(pl.col("kind") == "cpu_op")
    assert "aten::copy_" in ops.get_column("name").cast(pl.String).to_list()
    assert ops.get_column("external_id").drop_nulls().len() > 0
    runtime = events.filter(pl.col("kind") == "runtime").get_column("name").cast(pl.String).unique().to_list()
    assert "cudaLaunchKernel" in runtime
    assert not any(name.endswith("_v7000") for name in runtime)


def test_the_older_schema_loads_and_says_it_holds_no_communication() -> None:
    trace = load(OLD)
    assert trace.ranks == [0]
    row = trace.files.row(0, named=True)
    assert row["format"] == "nsys"
    assert row["rank_from"] == "environment RANK"  # RANK="0" in the captured environment
    assert row["clock"] == "relative"  # schema 3.16 records no system clock at the session start
    assert any("no communication: none of its 19 kernels is a collective" in w for w in trace.warnings)
    overlap = compute_overlap(trace.events)
    assert overlap.ranks.get_column("comm_ns").to_list() == [0]


def test_loading_changes_nothing_in_the_input_folder(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    shutil.copy(TWO_RANKS, folder / "run.sqlite")
    before = _listing(folder)
    load(folder)
    load(folder / "run.sqlite", overlap_only=True)
    assert _listing(folder) == before  # no -journal, -wal or -shm file, the database untouched


# --- generated exports: NCCL payloads, iterations ---------------------------------------------------


def test_payloads_give_ranks_groups_bytes_and_hidden_parts(tmp_path: Path) -> None:
    layout = Layout()
    path = write_export(tmp_path / "g.sqlite", processes=3, kernels=9 * 5, layout=layout)
    trace = load(path)
    assert trace.files.get_column("rank_from").to_list() == ["NCCL communicator (NVTX)"] * 3
    assert trace.files.get_column("world_size").to_list() == [3, 3, 3]
    comm = trace.events.filter(pl.col("kind") == "communication")
    assert set(comm.get_column("collective").cast(pl.String)) == {"all_reduce"}
    assert set(comm.get_column("pg_name").cast(pl.String)) == {f"0x{COMM_ID:016x}"}
    assert set(comm.get_column("in_bytes")) == {64 * 1024 * 1024}
    assert set(comm.get_column("group_size")) == {3}
    groups = trace.groups
    assert groups.get_column("rank").to_list() == [0, 1, 2]
    assert groups.get_column("ranks").to_list() == [[0, 1, 2]] * 3
    overlap = compute_overlap(trace.events)
    iterations = overlap.iterations
    assert iterations.height == 3 * 5
    assert set(iterations.get_column("hidden_comm_ns")) == {layout.overlap_ns}
    assert set(iterations.get_column("exposed_comm_ns")) == {layout.comm_ns - layout.overlap_ns}
    match = match_collectives(trace.events)
    assert match.collectives.height == 5
    assert set(match.collectives.get_column("group").to_list()) == {f"0x{COMM_ID:016x}"}


def test_payload_blobs_decode_by_entry_names(tmp_path: Path) -> None:
    path = write_export(tmp_path / "g.sqlite", processes=1, kernels=9)
    with open_nsys(path) as db:
        schemas = payload_schemas(db)
    blob = struct.pack("<4Q", 1, (1 << 24) + 2, 24, 32) + struct.pack("<Qiii4x", 7, 8, 3, 2)
    assert decode_payload(blob, schemas) == {"comm": 7, "nranks": 8, "comm_rank": 3, "cuda_device": 2}
    assert decode_payload(blob[:40], schemas) is None  # cut short
    assert decode_payload(struct.pack("<4Q", 1, 99, 24, 32) + bytes(24), schemas) is None  # unknown schema


@pytest.mark.parametrize(
    ("steps", "pattern", "note"),
    [
        ("profiler", None, None),
        ("train_step", None, "iterations from the NVTX ranges matching the default pattern"),
        (
            "none",
            r"^nccl:all_reduce",
            "iterations from the NVTX ranges matching --iteration-range",
        ),
        ("none", None, "no iteration ranges"),
    ],
)
def test_iterations_from_nvtx_ranges(
    tmp_path: Path, steps: str, pattern: str | None, note: str | None
) -> None:
    path = write_export(tmp_path / "g.sqlite", processes=2, kernels=9 * 5, steps=steps)
    trace = load(path, iteration_range=pattern)
    windows = compute_overlap(trace.events).iterations
    if note is not None:
        assert any(note in w for w in trace.warnings), trace.warnings
    if steps == "none" and pattern is None:
        assert windows.get_column("window").unique().to_list() == ["whole_trace"]
        return
    assert windows.get_column("iteration").to_list() == [0, 1, 2, 3, 4] * 2


def test_rank_from_environment_and_newer_schema_warning(tmp_path: Path) -> None:
    path = write_export(
        tmp_path / "g.sqlite", processes=1, kernels=9, payloads=False, schema_version="3.31.0",
        environment={"RANK": "5", "WORLD_SIZE": "8"},
    )  # fmt: skip
    trace = load(path)
    assert trace.files.select("rank", "rank_from", "world_size").row(0) == (5, "environment RANK", 8)
    assert any("export schema 3.31.0 is newer than the newest tested (3.25" in w for w in trace.warnings)


def test_several_exports_without_ranks_are_an_error(tmp_path: Path) -> None:
    for name in ("a", "b"):
        write_export(tmp_path / f"{name}.sqlite", processes=2, kernels=9, payloads=False)
    with pytest.raises(RankError, match="no rank stated for 2 of its processes"):
        load(tmp_path)


def test_exports_with_ranks_merge(tmp_path: Path) -> None:
    for rank in (0, 1):
        write_export(
            tmp_path / f"node{rank}.sqlite", processes=1, kernels=9, payloads=False,
            environment={"RANK": str(rank), "WORLD_SIZE": "2"},
        )  # fmt: skip
    trace = load(tmp_path)
    assert trace.ranks == [0, 1]
    assert trace.files.get_column("path").to_list() == [
        str(tmp_path / "node0.sqlite"),
        str(tmp_path / "node1.sqlite"),
    ]


# --- bad input ------------------------------------------------------------------------------------


def _bad_inputs(folder: Path) -> dict[str, tuple[Path, type[Exception], str]]:
    """Each bad export, the error it must raise and the start of the message (after the path)."""
    real = folder / "truncated.sqlite"
    data = TWO_RANKS.read_bytes()
    real.write_bytes(data[: len(data) // 3])
    corrupt = folder / "corrupt.sqlite"
    damaged = bytearray(data)
    damaged[4096 : 4096 * 40] = b"\xff" * (4096 * 39)
    corrupt.write_bytes(bytes(damaged))
    other = folder / "other.sqlite"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE users (id INTEGER, name TEXT)")
    conn.commit()
    conn.close()
    empty = write_export(folder / "nokernels.sqlite", processes=1, kernels=9)
    conn = sqlite3.connect(empty)
    conn.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL")
    conn.commit()
    conn.close()
    return {
        "truncated": (real, TraceFormatError, "damaged or truncated SQLite file"),
        "corrupt": (corrupt, TraceFormatError, "damaged or truncated SQLite file"),
        "other": (other, TraceFormatError, "a SQLite database, not an Nsight Systems export"),
        "no kernels": (empty, TraceContentError, "an Nsight Systems export without CUDA kernels"),
    }


def test_bad_exports_raise_one_error_and_leave_their_folder_alone(tmp_path: Path) -> None:
    cases = _bad_inputs(tmp_path)
    before = _listing(tmp_path)
    for name, (path, error, message) in cases.items():
        with pytest.raises(error) as raised:
            load(path)
        assert str(raised.value).startswith(f"{path}: {message}"), name
    assert _listing(tmp_path) == before


def test_absurd_times_are_dropped_and_counted(tmp_path: Path) -> None:
    path = write_export(tmp_path / "g.sqlite", processes=1, kernels=9 * 3)
    conn = sqlite3.connect(path)
    first = conn.execute("SELECT min(start) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    conn.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = start - 5 WHERE correlationId IN (1, 2)")
    conn.execute(
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = ?, end = ? WHERE correlationId = 3",
        (first + 10**15, first + 10**15 + 10),
    )
    conn.commit()
    conn.close()
    before = _listing(tmp_path)
    trace = load(path)
    assert f"{path}: dropped 2 events with end < start" in trace.warnings
    assert any(w.startswith(f"{path}: dropped 1 events more than") and "outside the capture window" in w
               for w in trace.warnings)  # fmt: skip
    assert trace.events.filter(pl.col("cat") == "kernel").height == 27 - 3
    assert _listing(tmp_path) == before


def test_gzipped_database_is_refused(tmp_path: Path) -> None:
    import gzip

    path = tmp_path / "run.sqlite.gz"
    path.write_bytes(gzip.compress(TWO_RANKS.read_bytes()[:200_000]))
    with pytest.raises(TraceFormatError, match="a gzipped SQLite database; decompress it"):
        sniff_path(path)


def test_iteration_range_must_be_a_regex_polars_runs() -> None:
    from timeline.importers.nsys_ranges import check_iteration_range

    with pytest.raises(UsageError, match="--iteration-range"):
        check_iteration_range("(?<=step)")


def test_overlap_only_keeps_the_same_figures_counts_and_warnings(two_ranks: object) -> None:
    lean = load(TWO_RANKS, overlap_only=True)
    full = two_ranks
    assert lean.files.equals(full.files)  # type: ignore[attr-defined]  # every event counted
    assert lean.warnings == full.warnings  # type: ignore[attr-defined]
    assert compute_overlap(lean.events).ranks.equals(compute_overlap(full.events).ranks)  # type: ignore[attr-defined]
    kept = set(lean.events.filter(pl.col("kind") == "cpu_op").get_column("name").cast(pl.String))
    assert kept == {"nccl:all_to_all", "record_param_comms", "c10d::alltoall_base_"}


def test_rank_by_rank_reads_one_rank_per_task_with_the_same_answers(tmp_path: Path) -> None:
    from timeline.inputs import plan_inputs
    from timeline.run import analyze

    path = write_export(tmp_path / "g.sqlite", processes=3, kernels=9 * 4)
    conn = sqlite3.connect(path)  # something to drop and count, on two ranks
    conn.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = start - 5 WHERE correlationId = 2")
    conn.commit()
    conn.close()
    units = plan_inputs([path])
    assert [u.options.held_keys for u in units] == [(0,), (1,), (2,)]
    memory = analyze([path])
    by_rank = analyze([path], executor="local")
    assert by_rank.rank_by_rank
    assert not memory.rank_by_rank
    assert by_rank.trace.files.equals(memory.trace.files)
    assert by_rank.warnings == memory.warnings
    assert f"{path}: dropped 3 events with end < start" in memory.warnings
    assert by_rank.overlap.iterations.equals(memory.overlap.iterations)
    assert by_rank.trace.groups.equals(memory.trace.groups)
    for command in ("collectives", "analyze"):  # the commands' answers, each way
        ways = [run_timeline(command, path, "--json", *extra) for extra in ((), ("--executor", "local"))]
        assert all(w.returncode == 0 for w in ways), ways[0].stderr + ways[1].stderr
        assert ways[0].stdout == ways[1].stdout, command
