"""The Horovod timeline importer: real timelines, the project's samples, B/E nesting, repair and errors."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import msgspec
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from timeline.errors import TraceFormatError
from timeline.importers.horovod import parse_horovod
from timeline.importers.result import FileResult, ImportOptions
from timeline.schema import EVENTS_SCHEMA

REPO = Path(__file__).resolve().parents[2]
HOROVOD = (REPO / "../shared/traces/horovod").resolve()
DEXHUNTER = sorted((HOROVOD / "dexhunter_allreduce-experiments").glob("*.json"))
SAMPLES = REPO / "sample_traces" / "horovod"
EXPECTED = "expected a Horovod timeline (a JSON array of Chrome-trace records)"


def parse(data: bytes, source: str = "t.json") -> FileResult:
    return parse_horovod(data, source=source, options=ImportOptions())


def parse_file(path: Path) -> FileResult:
    return parse(path.read_bytes(), path.name)


def kinds(result: FileResult) -> dict[str, int]:
    return dict(
        result.events.group_by("kind").len().select(pl.col("kind").cast(pl.String), "len").iter_rows()
    )


def collectives(result: FileResult) -> set[str]:
    return set(result.events["collective"].drop_nulls().cast(pl.String).unique())


def rows(result: FileResult, **where: object) -> pl.DataFrame:
    frame = result.events
    for column, value in where.items():
        frame = frame.filter(
            pl.col(column).cast(pl.String) == value if isinstance(value, str) else pl.col(column) == value
        )
    return frame


def timeline(*records: str, layout: str = "v015") -> bytes:
    """Lay ``records`` out as the v0.9-v0.20.0 writer (one a line, ``},``) or the v0.20.1+ writer does."""
    if layout == "v021":
        return ("[\n" + ",".join(records) + "]").encode()
    return ("[\n" + "".join(f"{record},\n" for record in records)).encode()


def tensor(pid: int, name: str) -> str:
    return f'{{"name": "process_name", "ph": "M", "pid": {pid}, "args": {{"name": "{name}"}}}}'


def begin(pid: int, name: str, ts: int) -> str:
    return f'{{"ph": "B", "name": "{name}", "ts": {ts}, "pid": {pid}}}'


def end(pid: int, ts: int, dtype: str | None = None, shape: str | None = None) -> str:
    args = f', "args": {{"dtype": "{dtype}", "shape": "{shape}"}}' if dtype else ""
    return f'{{"ph": "E", "ts": {ts}, "pid": {pid}{args}}}'


def tick(pid: int, rank: int, ts: int) -> str:
    return f'{{"ph": "X", "name": "{rank}", "ts": {ts}, "pid": {pid}, "dur": 0}}'


def float32_bytes(shape_text: bytes) -> int:
    return math.prod(int(dim) for dim in re.findall(rb"\d+", shape_text)) * 4


# --- real timelines ---------------------------------------------------------------------------------


def test_the_shared_traces_are_present() -> None:
    assert len(DEXHUNTER) == 32, f"expected the 32 dexhunter timelines under {HOROVOD}"


@pytest.mark.parametrize("path", DEXHUNTER, ids=lambda path: path.name.removeprefix("horovod-results__"))
def test_dexhunter_timeline(path: Path) -> None:
    raw = path.read_bytes()
    result = parse_file(path)
    events = result.events
    assert events.schema == EVENTS_SCHEMA
    assert (result.format, result.rank, result.claims_rank, result.clock) == ("horovod", None, False, "epoch")
    # Every B of these files is closed: no warnings (the README's "span left open" is not in this set).
    assert result.warnings == []
    world = 15 if "__15gpu__" in path.name else 32
    assert result.world_size == world
    tensors = raw.count(b'"process_name"') - 1  # less the pid 0 header
    assert events["tensor"].drop_nulls().n_unique() == tensors
    assert events["rank"].drop_nulls().unique().sort().to_list() == list(range(world))

    counts = kinds(result)
    assert counts["instant"] == len(re.findall(rb'"ph": "X", "name": "\d+"', raw)) == tensors * world
    assert counts["negotiation"] == counts["annotation"] == tensors  # one all-reduce per tensor
    wires = re.findall(rb'"ph": "B", "name": "(?:NCCL|MPI)_[A-Z]+"', raw)
    assert counts["communication"] == len(wires)
    assert collectives(result) == {"all_reduce"}

    # Bytes: prod(shape) x 4 (float32) from each top-level E, on the op and on every wire span of it.
    expected_bytes = sorted(float32_bytes(shape) for shape in re.findall(rb'"shape": "(\[[\d, ]*\])"', raw))
    ops = rows(result, kind="annotation")
    assert sorted(ops["in_bytes"].to_list()) == expected_bytes
    assert ops["out_bytes"].to_list() == ops["in_bytes"].to_list()
    assert set(ops["dtype"].cast(pl.String)) == {"float32"}
    wire = rows(result, kind="communication").join(ops.select("pid", op_bytes="in_bytes"), on="pid")
    assert wire.height == counts["communication"]
    assert (wire["in_bytes"] == wire["op_bytes"]).all()

    # Integer wall clock: (header + ts) x 1000, no float rounding.
    header = int(re.search(rb'"start_time_since_epoch_in_micros":(\d+)', raw).group(1))  # type: ignore[union-attr]
    first = re.search(rb'"name": "NEGOTIATE_ALLREDUCE", "ts": (\d+), "pid": 1\}', raw)
    assert first is not None
    negotiation = rows(result, kind="negotiation", pid=1)
    assert negotiation["start_ns"].to_list() == [(header + int(first.group(1))) * 1000]


def test_dexhunter_15gpu_mpi_by_hand() -> None:
    # The first lines of horovod-results__15gpu__15gpu-mpi.json: header 1623130672192816, pid 1
    # (allreduce.noname.1) negotiates from ts 2505741 to 7507313 with 15 ticks, then ALLREDUCE from 7507549.
    result = parse_file(HOROVOD / "dexhunter_allreduce-experiments/horovod-results__15gpu__15gpu-mpi.json")
    negotiation = rows(result, kind="negotiation", pid=1).row(0, named=True)
    assert negotiation["tensor"] == "allreduce.noname.1"
    assert negotiation["start_ns"] == (1623130672192816 + 2505741) * 1000
    assert negotiation["dur_ns"] == (7507313 - 2505741) * 1000
    assert negotiation["collective"] == "all_reduce"
    ticks = rows(result, kind="instant", pid=1)
    assert ticks.height == 15
    assert ticks["collective"].cast(pl.String).to_list() == ["all_reduce"] * 15
    assert ticks.sort("start_ns")["rank"].to_list()[:3] == [1, 0, 2]  # the order the ticks arrived
    # Hierarchical all-reduce: NCCL_REDUCESCATTER, MEMCPY_IN_HOST_BUFFER, MPI_ALLREDUCE,
    # MEMCPY_OUT_HOST_BUFFER, NCCL_ALLGATHER; the last tensor (pid 29) is [268435456] float32 = 1 GiB.
    op = rows(result, kind="annotation", pid=29).row(0, named=True)
    assert (op["name"], op["in_bytes"], op["dtype"]) == ("ALLREDUCE", 268435456 * 4, "float32")
    inner = rows(result, pid=29).filter(pl.col("start_ns") > op["start_ns"]).sort("start_ns")
    assert inner.filter(pl.col("kind") == "communication")["name"].cast(pl.String).to_list() == [
        "NCCL_REDUCESCATTER",
        "MPI_ALLREDUCE",
        "NCCL_ALLGATHER",
    ]
    assert set(inner.filter(pl.col("kind") == "communication")["in_bytes"]) == {268435456 * 4}
    memcpy = inner.filter(pl.col("kind") == "memcpy")
    assert memcpy["name"].cast(pl.String).to_list() == ["MEMCPY_IN_HOST_BUFFER", "MEMCPY_OUT_HOST_BUFFER"]
    assert memcpy["in_bytes"].null_count() == 2
    assert set(inner["collective"].cast(pl.String)) == {"all_reduce"}


def test_andrewor14_v016_boot_relative_timeline() -> None:
    result = parse_file(HOROVOD / "andrewor14_tf-logs__horovod_timeline__e2205b98.json")
    assert result.clock == "boot"
    assert result.warnings == []  # an unterminated array ending "},\n" is the layout, not damage
    assert result.world_size == 4
    assert result.events["rank"].drop_nulls().unique().sort().to_list() == [0, 1, 2, 3]
    assert rows(result, name="CYCLE_START").height == 13999
    assert kinds(result) == {
        "instant": 13999 + 2692,
        "negotiation": 673,
        "annotation": 673,
        "communication": 673,  # 660 MPI_ALLREDUCE + 13 MPI_BCAST
        "memcpy": 428,
        "other": 2,  # INIT_FUSION_BUFFER
    }
    assert collectives(result) == {"all_reduce", "broadcast"}
    assert result.events["tensor"].drop_nulls().n_unique() == 19
    # Lines 872-891: pids 15 and 16 fused into one MPI_ALLREDUCE; the top-level E's carry [172, 4096]
    # and [4096] float32.
    op = rows(result, kind="annotation", pid=15, start_ns=1410496690142000).row(0, named=True)
    assert (op["end_ns"], op["in_bytes"], op["out_bytes"]) == (
        1410496698983000,
        172 * 4096 * 4,
        172 * 4096 * 4,
    )
    wire = rows(result, name="MPI_ALLREDUCE", start_ns=1410496691611000).row(0, named=True)
    assert (wire["pid"], wire["end_ns"], wire["in_bytes"], wire["dtype"]) == (
        15,
        1410496698383000,
        2818048,
        "float32",
    )
    partner = rows(result, name="MPI_ALLREDUCE", start_ns=1410496691612000).row(0, named=True)
    assert (partner["pid"], partner["in_bytes"]) == (16, 4096 * 4)
    memcpy = rows(result, name="MEMCPY_IN_FUSION_BUFFER", pid=15, start_ns=1410496690168000).row(
        0, named=True
    )
    assert (memcpy["kind"], memcpy["collective"], memcpy["in_bytes"]) == ("memcpy", "all_reduce", None)


@pytest.mark.parametrize(
    ("name", "header", "first_ts", "cycle_starts", "expected_kinds"),
    [
        (
            "alcf_workshop__timeline_cpu_n1.json",
            1633399518104473,
            3585422,
            0,
            {"negotiation": 25, "annotation": 25, "communication": 25, "instant": 25},
        ),
        (
            "alcf_workshop__timeline_gpu_n1.json",
            1633449303945695,
            6931705,
            22784,
            {
                "negotiation": 25,
                "annotation": 25,
                "communication": 25,
                "wait": 50,
                "queue": 25,
                "other": 1,  # INIT_NCCL
                "instant": 22784 + 25,
            },
        ),
    ],
)
def test_alcf_broadcast_only_timelines(
    name: str, header: int, first_ts: int, cycle_starts: int, expected_kinds: dict[str, int]
) -> None:
    result = parse_file(HOROVOD / name)
    assert result.clock == "epoch"
    assert result.warnings == []
    assert result.world_size == 1
    assert kinds(result) == expected_kinds
    assert collectives(result) == {"broadcast"}
    assert set(rows(result, kind="communication")["name"].cast(pl.String)) <= {"MPI_BCAST", "NCCL_BCAST"}
    assert result.events["tensor"].drop_nulls().n_unique() == 25
    assert rows(result, name="CYCLE_START").height == cycle_starts
    # These timelines' E records carry no args: no bytes rather than guessed ones.
    assert result.events["in_bytes"].null_count() == result.events.height
    negotiation = rows(result, kind="negotiation", pid=1)
    assert negotiation["start_ns"].to_list() == [(header + first_ts) * 1000]
    assert negotiation["tensor"].cast(pl.String).to_list()[0].startswith("HorovodBroadcast_")


def test_smdebug_excerpt_with_ticks_but_no_begin_loads() -> None:
    # Hand-truncated: ticks on pids 3-11 without their NEGOTIATE B; pids 12 and 13 open at the end.
    result = parse_file(HOROVOD / "smdebug__horovod_timeline_small.json")
    assert result.clock == "boot"  # no header; CYCLE_START markers and ts ~77567 s since boot
    assert result.warnings == [
        "smdebug__horovod_timeline_small.json: 2 spans left open at the end of the timeline were dropped "
        "(the job was killed while they ran)"
    ]
    assert kinds(result) == {"negotiation": 2, "instant": 19 + 2}
    assert rows(result, name="CYCLE_START").height == 2
    assert set(result.events["rank"].drop_nulls()) == {4, 5, 7}
    assert result.world_size == 8  # a tick of rank 7 means at least 8 workers
    # 15 process_name records, but pid 15 has no event left, and pid 26 ticks without its metadata.
    assert result.events["tensor"].drop_nulls().n_unique() == 14
    assert rows(result, pid=26).select("rank", "tensor").rows() == [(7, None)]
    orphan = rows(result, kind="instant", pid=3).row(0, named=True)
    assert (orphan["rank"], orphan["collective"]) == (4, None)  # no open NEGOTIATE to name it


# --- the project's samples ---------------------------------------------------------------------------


def sample(name: str) -> FileResult:
    return parse_file(SAMPLES / name)


def test_samples_match_their_generator(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(REPO / "sample_traces/make_horovod.py"), str(tmp_path)], check=True)
    written = sorted(path.name for path in tmp_path.iterdir())
    assert written == sorted(path.name for path in SAMPLES.glob("*.json"))
    for name in written:
        assert (tmp_path / name).read_bytes() == (SAMPLES / name).read_bytes(), name
        assert (tmp_path / name).stat().st_size < 32_000


@pytest.mark.parametrize(
    ("name", "clock", "cycle_starts", "wire", "expected_collectives"),
    [
        ("horovod_v015.json", "relative", 0, "MPI_ALLREDUCE", {"all_reduce"}),
        ("horovod_v016.json", "boot", 10, "NCCL_ALLREDUCE", {"all_reduce"}),
        ("horovod_v021.json", "epoch", 51, "NCCL_ALLREDUCE", {"all_reduce", "broadcast"}),
    ],
)
def test_sample_layouts(
    name: str, clock: str, cycle_starts: int, wire: str, expected_collectives: set[str]
) -> None:
    result = sample(name)
    assert result.events.schema == EVENTS_SCHEMA
    assert (result.clock, result.world_size, result.warnings) == (clock, 4, [])
    assert rows(result, name="CYCLE_START").height == cycle_starts
    assert collectives(result) == expected_collectives
    steps = 3
    allreduce = rows(result, kind="annotation", name="ALLREDUCE")
    assert allreduce.height == 6 * steps
    assert rows(result, kind="communication", name=wire).height == 6 * steps
    assert rows(result, kind="instant").filter(
        pl.col("rank").is_not_null()
    ).height == allreduce.height * 4 + (
        6 * 4 if clock == "epoch" else 0  # the v0.21 job broadcasts its 6 parameters first
    )
    # conv1.weight is [32, 3, 3, 3] float32 in every step.
    conv1 = allreduce.filter(pl.col("tensor").cast(pl.String) == "allreduce.conv1.weight")
    assert conv1["in_bytes"].to_list() == [32 * 3 * 3 * 3 * 4] * steps


def test_sample_byte_layouts() -> None:
    for name in ("horovod_v015.json", "horovod_v016.json"):
        lines = (SAMPLES / name).read_bytes().split(b"\n")
        assert lines[0] == b"["
        assert lines[-1] == b""
        assert all(line.endswith(b"},") for line in lines[1:-1]), name  # the array is never closed
    data = (SAMPLES / "horovod_v021.json").read_bytes()
    assert data.startswith(
        b'[\n{"name": "process_name", "ph": "M", "pid": 0, "args": {"start_time_since_epoch_in_micros":'
    )
    assert b"},{" in data  # records share lines
    assert isinstance(msgspec.json.decode(data), list)  # valid JSON after every record


def test_epoch_clock_is_integer_exact() -> None:
    data = (SAMPLES / "horovod_v021.json").read_bytes()
    first = re.search(rb'\{"ph": "B", "name": "NEGOTIATE_BROADCAST", "ts": (\d+), "pid": 1\}', data)
    assert first is not None
    start = rows(sample("horovod_v021.json"), kind="negotiation", pid=1)["start_ns"].min()
    assert start == (1_718_064_000_123_456 + int(first.group(1))) * 1000


def test_boot_clock_keeps_the_written_origin() -> None:
    starts = sample("horovod_v016.json").events["start_ns"]
    assert starts.min() == 77_568_472_441_000  # line 2: the first CYCLE_START, 77568.47 s after boot


def test_fused_tensors_repeat_identical_wire_spans() -> None:
    result = sample("horovod_v016.json")
    sizes = {name: math.prod(shape) * 4 for name, shape in [
        ("allreduce.conv1.weight", (32, 3, 3, 3)),
        ("allreduce.conv1.bias", (32,)),
        ("allreduce.conv2.weight", (64, 32, 3, 3)),
        ("allreduce.fc1.weight", (128, 1024)),
        ("allreduce.fc2.weight", (10, 128)),
        ("allreduce.fc2.bias", (10,)),
    ]}  # fmt: skip
    groups = (
        rows(result, kind="communication")
        .group_by("start_ns", "end_ns", "name")
        .agg(
            pl.col("tensor").cast(pl.String), pl.col("in_bytes").sum(), pl.col("pid").n_unique().alias("pids")
        )
        .sort("start_ns")
    )
    assert groups["tensor"].list.len().to_list() == [2, 4, 4, 2, 6]
    assert (groups["pids"] == groups["tensor"].list.len()).all()  # one span per tensor, never twice
    for tensors, total in groups.select("tensor", "in_bytes").iter_rows():
        assert total == sum(sizes[name] for name in tensors)
    # The fusion-buffer copies repeat on every fused tensor too.
    memcpy = rows(result, kind="memcpy").group_by("start_ns", "end_ns", "name").len()
    assert set(memcpy["len"]) == {2, 4, 6}


def test_cut_off_sample_keeps_every_complete_record() -> None:
    full, cut = sample("horovod_v016.json"), sample("horovod_v016_cut.json")
    assert cut.warnings == [
        "horovod_v016_cut.json: file cut off mid-record: dropped the incomplete last record"
    ]
    assert cut.events.equals(full.events)
    assert cut.clock == "boot"


def test_open_spans_at_the_end_are_dropped_with_one_warning() -> None:
    full, killed = sample("horovod_v021.json"), sample("horovod_v021_open.json")
    assert killed.warnings == [
        "horovod_v021_open.json: 4 spans left open at the end of the timeline were dropped "
        "(the job was killed while they ran)"
    ]
    # The last fused response (2 tensors) was on the wire: its ALLREDUCE and NCCL_ALLREDUCE spans are gone.
    for name in ("ALLREDUCE", "NCCL_ALLREDUCE"):
        assert rows(killed, name=name).height == rows(full, name=name).height - 2
    assert (
        rows(killed, name="MEMCPY_IN_FUSION_BUFFER").height
        == rows(full, name="MEMCPY_IN_FUSION_BUFFER").height
    )


def test_lone_bracket_is_an_empty_timeline() -> None:
    result = sample("horovod_empty.json")
    assert result.events.height == 0
    assert result.events.schema == EVENTS_SCHEMA
    assert result.warnings == ["horovod_empty.json: the timeline holds no records"]
    assert (result.world_size, result.claims_rank) == (None, False)
    for data in (b"[", b"[ \n\t", b"[]", b"\xef\xbb\xbf[\n"):
        assert parse(data).events.height == 0


# --- B/E nesting and classification ----------------------------------------------------------------


def test_end_closes_the_innermost_open_begin_of_its_pid() -> None:
    data = timeline(
        tensor(1, "grad.a"),
        tensor(2, "grad.b"),
        begin(1, "ALLREDUCE", 100),
        begin(2, "ALLREDUCE", 101),
        begin(1, "MEMCPY_IN_FUSION_BUFFER", 102),
        begin(2, "MEMCPY_IN_FUSION_BUFFER", 102),
        end(2, 110),  # closes pid 2's memcpy, not pid 1's
        end(1, 111),
        begin(1, "NCCL_ALLREDUCE", 112),
        begin(2, "NCCL_ALLREDUCE", 112),
        end(1, 150),
        end(2, 150),
        end(1, 160, "float16", "[3, 5]"),
        end(2, 161, "int64", "[7]"),
    )
    events = parse(data).events.sort("pid", "start_ns")
    strings = [pl.col(column).cast(pl.String) for column in ("dtype", "collective", "tensor")]
    got = events.select(
        "pid", pl.col("name").cast(pl.String), "kind", "start_ns", "end_ns", "in_bytes", "out_bytes", *strings
    ).rows()
    assert got == [
        (1, "ALLREDUCE", "annotation", 100_000, 160_000, 30, 30, "float16", "all_reduce", "grad.a"),
        (1, "MEMCPY_IN_FUSION_BUFFER", "memcpy", 102_000, 111_000, None, None, None, "all_reduce", "grad.a"),
        (1, "NCCL_ALLREDUCE", "communication", 112_000, 150_000, 30, 30, "float16", "all_reduce", "grad.a"),
        (2, "ALLREDUCE", "annotation", 101_000, 161_000, 56, 56, "int64", "all_reduce", "grad.b"),
        (2, "MEMCPY_IN_FUSION_BUFFER", "memcpy", 102_000, 110_000, None, None, None, "all_reduce", "grad.b"),
        (2, "NCCL_ALLREDUCE", "communication", 112_000, 150_000, 56, 56, "int64", "all_reduce", "grad.b"),
    ]
    assert events["rank"].null_count() == events.height  # the loader fills in the writer's rank
    assert set(events["source"].cast(pl.String)) == {"horovod"}
    empty = ("cat", "tid", "device", "stream", "correlation", "external_id", "group_size", "pg_name", "seq")
    assert all(events[column].null_count() == events.height for column in empty)


def test_records_sharing_a_line_pair_the_same() -> None:
    records = (tensor(1, "t"), begin(1, "NEGOTIATE_ALLREDUCE", 5), tick(1, 0, 6), end(1, 9))
    v015, v021 = parse(timeline(*records)), parse(timeline(*records, layout="v021"))
    assert v015.events.equals(v021.events)
    assert kinds(v015) == {"negotiation": 1, "instant": 1}


@pytest.mark.parametrize(
    ("activity", "kind"),
    [
        ("WAIT_FOR_DATA", "wait"),
        ("WAIT_FOR_OTHER_TENSOR_DATA", "wait"),
        ("QUEUE", "queue"),
        ("MEMCPY_IN_FUSION_BUFFER", "memcpy"),
        ("MEMCPY_OUT_FUSION_BUFFER", "memcpy"),
        ("MEMCPY_IN_HOST_BUFFER", "memcpy"),
        ("MEMCPY_IN_SHARED_BUFFER", "memcpy"),
        ("COPY_ALLGATHER_OUTPUT", "memcpy"),
        ("NCCL_ALLGATHER", "communication"),
        ("MPI_ALLGATHER", "communication"),
        ("GLOO_ALLGATHER", "communication"),
        ("CCL_ALLGATHER", "communication"),
        ("NCCL_REDUCESCATTER", "communication"),
        ("NCCL_BCAST", "communication"),
        ("MPI_ADASUM_ALLREDUCE", "communication"),
        ("DDL_ALLREDUCE", "communication"),
        ("INIT_FUSION_BUFFER", "other"),
        ("INIT_NCCL", "other"),
        ("ALLOCATE_OUTPUT", "other"),
        ("SOMETHING_NEW", "other"),
    ],
)
def test_depth_one_activities(activity: str, kind: str) -> None:
    data = timeline(
        begin(1, "ALLGATHER", 10), begin(1, activity, 11), end(1, 12), end(1, 20, "float32", "[2, 8]")
    )
    inner = rows(parse(data), name=activity).row(0, named=True)
    assert inner["kind"] == kind
    assert inner["collective"] == "all_gather"  # from the enclosing op, whatever the wire is named
    assert inner["in_bytes"] == (64 if kind == "communication" else None)


@pytest.mark.parametrize(
    ("op", "collective"),
    [
        ("ALLREDUCE", "all_reduce"),
        ("ALLGATHER", "all_gather"),
        ("BROADCAST", "broadcast"),
        ("ALLTOALL", "all_to_all"),
        ("REDUCESCATTER", "reduce_scatter"),
        ("ADASUM", "adasum"),
    ],
)
def test_top_level_ops(op: str, collective: str) -> None:
    data = timeline(begin(1, f"NEGOTIATE_{op}", 1), tick(1, 2, 2), end(1, 3), begin(1, op, 4), end(1, 9))
    events = parse(data).events.sort("start_ns")
    assert events["kind"].cast(pl.String).to_list() == ["negotiation", "instant", "annotation"]
    assert events["collective"].cast(pl.String).to_list() == [collective] * 3
    assert events["rank"].to_list() == [None, 2, None]


def test_clock_heuristics_without_header() -> None:
    span = (begin(1, "ALLREDUCE", 0), end(1, 5))
    assert parse(timeline(*span)).clock == "relative"
    late = (begin(1, "ALLREDUCE", 600_000_000), end(1, 600_000_005))
    assert parse(timeline(*late)).clock == "boot"  # 10 minutes: µs since boot, not since the timeline began
    marker = '{"ph": "i", "name": "CYCLE_START", "ts": 7, "s": "g"}'
    result = parse(timeline(marker, *span))
    assert result.clock == "boot"  # CYCLE_START markers: v0.16+
    assert rows(result, name="CYCLE_START").select("kind", "pid", "tensor", "rank").rows() == [
        ("instant", None, None, None)
    ]


@pytest.mark.parametrize(
    ("dtype", "shape", "nbytes"),
    [
        ("float32", "[]", 4),  # a scalar
        ("bfloat16", "[3, 0]", 0),
        ("float32", "[-1, 4]", None),  # an unknown dimension
        ("float32", "[99999999999, 99999999999]", None),  # beyond Int64
        ("mystery", "[2]", None),  # an unknown dtype keeps its name but has no size
    ],
)
def test_bytes_from_dtype_and_shape(dtype: str, shape: str, nbytes: int | None) -> None:
    data = timeline(begin(1, "ALLREDUCE", 1), end(1, 2, dtype, shape))
    assert parse(data).events.select("in_bytes", pl.col("dtype").cast(pl.String)).row(0) == (nbytes, dtype)


def test_float_timestamps_are_rounded_to_nanoseconds() -> None:
    data = b'[{"ph": "B", "name": "QUEUE", "ts": 1.5, "pid": 1}, {"ph": "E", "ts": 2.2504, "pid": 1}]'
    assert parse(data).events.select("start_ns", "end_ns", "dur_ns").row(0) == (1500, 2250, 750)


# --- repair and warnings ---------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["v015", "v021"])
def test_cut_inside_args_drops_the_record_and_its_span(layout: str) -> None:
    records = timeline(
        begin(1, "ALLREDUCE", 1),
        begin(1, "MPI_ALLREDUCE", 2),
        end(1, 3),
        end(1, 4, "float32", "[8]"),
        layout=layout,
    )
    cut = records[: records.rindex(b"}")]  # inside the last record, after its args closed
    result = parse(cut, "cut.json")
    assert result.warnings == [
        "cut.json: file cut off mid-record: dropped the incomplete last record",
        "cut.json: 1 span left open at the end of the timeline was dropped (the job was killed while it ran)",
    ]
    assert rows(result).select(pl.col("name").cast(pl.String), "in_bytes").rows() == [("MPI_ALLREDUCE", None)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_any_cut_of_a_timeline_parses_to_a_subset(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(["horovod_v015.json", "horovod_v016.json", "horovod_v021.json"]))
    raw = (SAMPLES / name).read_bytes()
    cut = data.draw(st.integers(min_value=1, max_value=len(raw)))
    result = parse(raw[:cut], name)
    key = ("kind", "name", "start_ns", "end_ns", "pid", "rank")
    full = parse(raw, name).events.select(key)
    if result.clock != parse(raw, name).clock:  # the cut fell before the v0.21 header ended
        assert result.events.height == 0
        return
    assert result.events.select(key).join(full, on=key, how="anti", nulls_equal=True).height == 0


def test_unmatched_end_negative_span_and_foreign_records_are_counted() -> None:
    data = timeline(
        end(1, 5),
        end(1, 6),
        begin(2, "QUEUE", 10),
        end(2, 9),
        '{"ph": "C", "name": "counter", "ts": 1, "pid": 1}',
        '{"ph": "B", "name": "QUEUE", "pid": 1}',
        begin(3, "QUEUE", 1),
        end(3, 2),
    )
    result = parse(data, "odd.json")
    assert result.warnings == [
        "odd.json: dropped 2 `E` records with no open `B` of the same pid to close",
        "odd.json: dropped 1 span that end before they start",
        "odd.json: dropped 1 record without `ts` or `pid`",
        "odd.json: ignored records of phases Horovod does not write: 'C' (1)",
    ]
    assert result.events.height == 1


# --- errors ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["v015", "v021"])
def test_damage_before_the_end_is_located(layout: str) -> None:
    broken = '{"ph": "E", "ts": 2 "pid": 1}'  # a missing comma on line 3
    data = timeline(begin(1, "QUEUE", 1), broken, begin(1, "QUEUE", 3), end(1, 4), layout=layout)
    with pytest.raises(TraceFormatError) as info:
        parse(data, "bad.json")
    position = "bad.json:3:21:" if layout == "v015" else "bad.json:2:"
    assert str(info.value).startswith(position)
    assert "malformed JSON (expected ',' or '}')" in str(info.value)
    assert str(info.value).endswith(EXPECTED)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", f"bad.json: the file is empty; {EXPECTED}"),
        (b" \n", f"bad.json: the file is empty; {EXPECTED}"),
        (b'{"traceEvents": []}', f"bad.json: a JSON object, not an array; {EXPECTED}"),
        (b'{"traceEvents": [{"ph": "X"', f"bad.json: a JSON object, not an array; {EXPECTED}"),
        (b"42", f"bad.json: a JSON int, not an array; {EXPECTED}"),
        (b"hello", f"bad.json:1:1: malformed JSON (invalid character); {EXPECTED}"),
        (b'[{"name": "a"}, {"cat": "b"}]', f"bad.json: the records have no `ph` (phase) field; {EXPECTED}"),
        (
            b"[1, 2, 3]",
            f"bad.json: not a Horovod record layout: expected `object`, got `int` at `$[0]`; {EXPECTED}",
        ),
        (
            b'[\n{"ph": "B", "name": "QUEUE", "ts": "soon", "pid": 1},\n',
            "bad.json: not a Horovod record layout: expected `int | float | null`, got `str` at `$[0].ts`; "
            + EXPECTED,
        ),
        (
            b'[{"ph": "B", "name": "QUEUE", "ts": 1, "pid": 1}]\nlog line',
            f"bad.json:2:1: unexpected data after the end of the array; {EXPECTED}",
        ),
        (
            b'[\n{"ph": "B", "name": "QUEUE", "ts": 1, "pid": 1},\n@@@',
            f"bad.json:3:1: malformed JSON (invalid character) in the last record; {EXPECTED}",
        ),
        (
            b'[{"ph": "B", "name": "QUEUE", "ts": 1, "pid": 99999999999999999999}]',
            "bad.json: not a Horovod record layout: expected `int` <= 9223372036854775807 at `$[0].pid`; "
            + EXPECTED,
        ),
        (
            b'[{"ph": "i", "name": "CYCLE_START", "ts": 99999999999999999, "s": "g"}]',
            f"bad.json: a timestamp does not fit in 64-bit nanoseconds; {EXPECTED}",
        ),
    ],
)
def test_malformed_input_raises(data: bytes, message: str) -> None:
    with pytest.raises(TraceFormatError) as info:
        parse(data, "bad.json")
    assert str(info.value) == message
