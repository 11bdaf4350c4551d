"""The Flight Recorder importer: real dumps read field by field, JSON and pickle alike, hostile ones refused.

Every value is checked against a plain reading of the raw dicts (:func:`read_dump_plainly`: an
unpickler of its own, no polars), never against the importer itself.
"""

from __future__ import annotations

import ast
import io
import json
import pickle
import pickletools
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from tests.builders import (
    TRACES,
    Faults,
    clean_job,
    hostile_dump,
    read_dump_plainly,
    simulate,
    tiny_kineto,
    to_json_dump,
    write_dumps,
)
from timeline.dumps import load_dumps, read_dump
from timeline.errors import RankError, TraceFormatError, UsageError
from timeline.importers import flight_recorder
from timeline.importers.files import is_dump_head, sniff_path
from timeline.importers.flight_recorder import RefusedClassError, parse_flight_recorder, parse_group_ranks
from timeline.inputs import expand_inputs, rank_from_dump_name

FLIGHT = TRACES / "flight_recorder"
SETS = ("nvrx_megatron16_gpu_error_1st", "nvrx_megatron16_lock_gil_1st")


def _real(name: str) -> list[Path]:
    return sorted((FLIGHT / name).glob("_dump_*"), key=lambda p: int(p.name.rsplit("_", 1)[1]))


@pytest.mark.parametrize("name", SETS)
def test_entries_are_the_dumps_entries(name: str) -> None:
    for path in _real(name):
        raw = read_dump_plainly(path)
        got = read_dump(path).entries
        assert got.height == len(raw["entries"])
        for row, entry in zip(got.iter_rows(named=True), raw["entries"], strict=True):
            assert row["record_id"] == entry["record_id"]
            assert row["pg_id"] == entry["pg_id"]
            assert (row["pg_name"], row["pg_desc"]) == tuple(entry["process_group"])
            assert row["collective_seq_id"] == entry["collective_seq_id"]
            assert row["p2p_seq_id"] == entry["p2p_seq_id"]
            assert row["seq"] == (entry["p2p_seq_id"] if entry["is_p2p"] else entry["collective_seq_id"])
            assert row["profiling_name"] == entry["profiling_name"]
            assert row["input_sizes"] == entry["input_sizes"]
            assert row["output_sizes"] == entry["output_sizes"]
            assert row["input_dtypes"] == entry["input_dtypes"]
            assert row["state"] == entry["state"]
            assert row["time_created_ns"] == entry["time_created_ns"]
            assert row["time_discovered_started_ns"] is None  # timing was off in these runs
            assert row["timeout_ns"] == entry["timeout_ms"] * 1_000_000
            elements = sum(_product(shape) for shape in entry["input_sizes"])
            assert row["in_elements"] == elements
            assert (
                row["in_bytes"]
                == elements * {"BFloat16": 2, "Float": 4, "Long": 8, "Byte": 1}[entry["input_dtypes"][0]]
            )


def _product(shape: list[int]) -> int:
    out = 1
    for d in shape:
        out *= d
    return out


@pytest.mark.parametrize("name", SETS)
def test_status_and_groups_are_the_dumps(name: str) -> None:
    for path in _real(name):
        raw = read_dump_plainly(path)
        result = read_dump(path)
        assert result.warnings == []
        assert (result.version, result.comm_lib_version, result.encoding) == ("2.9", "2.27.3", "pickle")
        status = {row["pg_id"]: row for row in result.status.iter_rows(named=True)}
        assert sorted(status) == sorted(int(k) for k in raw["pg_status"])
        for key, values in raw["pg_status"].items():
            row = status[int(key)]
            for column, field in (("last_enqueued", "enqueued"), ("last_completed", "completed")):
                expected = values[f"last_{field}_collective"]
                assert row[column] == (None if expected < 0 else expected)
            assert row["last_started"] is None  # -1 in every dump: timing off
        groups = {row["pg_name"]: row for row in result.groups.iter_rows(named=True)}
        assert sorted(groups) == sorted(raw["pg_config"])
        for name_, info in raw["pg_config"].items():
            assert groups[name_]["pg_desc"] == info["desc"]
            assert groups[name_]["group_ranks"] == ast.literal_eval(info["ranks"])


def test_groups_no_entry_names_are_named_by_creation_order() -> None:
    """lock_gil's ranks 9 and 14 hold no entry: every pg_status id is named by the order of creation.

    Independent check: rank 8 (same group layout) names its ids from its entries, and each name the
    order gives ranks 9 and 14 is a group they belong to with the description rank 8's entries give.
    """
    folder = FLIGHT / "nvrx_megatron16_lock_gil_1st"
    rank8 = read_dump_plainly(folder / "_dump_8")
    by_id8 = {e["pg_id"]: tuple(e["process_group"]) for e in rank8["entries"]}
    for rank in (9, 14):
        raw = read_dump_plainly(folder / f"_dump_{rank}")
        assert raw["entries"] == []
        status = read_dump(folder / f"_dump_{rank}").status
        assert set(status.get_column("named_by")) == {"creation_order"}
        names = dict(zip(status.get_column("pg_id"), status.get_column("pg_name"), strict=True))
        for pg_id, (name8, desc8) in by_id8.items():
            config = raw["pg_config"][names[pg_id]]
            assert config["desc"] == desc8
            assert rank in ast.literal_eval(config["ranks"])
            if desc8 == "EXPERT_MODEL_PARALLEL_GROUP":  # the group the others wait in
                assert names[pg_id] == name8 == "72"


def test_json_and_pickle_dumps_give_the_same_frames(tmp_path: Path) -> None:
    groups, program = clean_job()
    dumps = simulate(groups, program, faults=Faults(host_stop={1: 7}), timing=True)
    pickles = write_dumps(tmp_path / "pickle", dumps)
    jsons = write_dumps(tmp_path / "json", dumps, encoding="json")
    for p, j in zip(pickles, jsons, strict=True):
        a, b = read_dump(p), read_dump(j)
        assert (a.encoding, b.encoding) == ("pickle", "json")
        assert a.warnings == b.warnings == []
        for frame in ("entries", "status", "groups"):
            assert_frame_equal(getattr(a, frame), getattr(b, frame))
    # the JSON writer's conventions: values of pg_status as text, 0 for an undiscovered time
    text = json.loads(jsons[1].read_text())
    assert isinstance(next(iter(text["pg_status"].values()))["last_enqueued_collective"], str)
    assert any(e["time_discovered_completed_ns"] == 0 for e in json.loads(jsons[0].read_text())["entries"])


def test_a_json_dump_without_entries_has_none(tmp_path: Path) -> None:
    groups, program = clean_job()
    dump = simulate(groups, program, only_active=True)[0]
    assert dump["entries"] == []
    assert "entries" not in json.loads(to_json_dump(dump))  # torch leaves the key out
    path = tmp_path / "_dump_0"
    path.write_text(to_json_dump(dump))
    result = read_dump(path)
    assert result.entries.is_empty()
    assert result.warnings == []


def _generated(tmp_path: Path) -> dict[str, Any]:
    groups, program = clean_job()
    return simulate(groups, program)[0]


def _parse(dump: Any, tmp_path: Path) -> flight_recorder.DumpResult:
    path = tmp_path / "_dump_0"
    path.write_bytes(pickle.dumps(dump, protocol=2))
    return read_dump(path)


def test_missing_unknown_and_wrong_fields_are_counted_warnings(tmp_path: Path) -> None:
    dump = _generated(tmp_path)
    dump["written_by"] = "someone"
    entries = dump["entries"]
    for entry in entries[:3]:
        del entry["state"]
    for entry in entries[3:5]:
        entry["mystery"] = 1
    entries[5]["input_sizes"] = "4096"
    entries[6]["collective_seq_id"] = True  # a bool is not a sequence number
    entries[7] = "not an entry"
    result = _parse(dump, tmp_path)
    source = str(tmp_path / "_dump_0")
    assert sorted(result.warnings) == sorted(
        [
            f"{source}: ignored the unknown top-level field 'written_by' (1)",
            f"{source}: entries without state (read as null) (3)",
            f"{source}: ignored the unknown entry field 'mystery' (2)",
            f"{source}: entries whose input_sizes is not a list of shapes (read as null) (1)",
            f"{source}: entries whose collective_seq_id is not an integer (read as null) (1)",
            f"{source}: dropped entries that are not dicts (1)",
        ]
    )
    frame = result.entries
    assert frame.height == len(entries) - 1
    assert frame.get_column("state").head(3).is_null().all()
    assert frame.item(5, "input_sizes") is None
    assert frame.item(5, "in_elements") is None
    assert frame.item(6, "collective_seq_id") is None


def test_group_ranks_as_text_or_list() -> None:
    assert parse_group_ranks("[0, 2, 4]") == [0, 2, 4]
    assert parse_group_ranks([1, 3]) == [1, 3]
    assert parse_group_ranks("[12]") == [12]
    for bad in ("[0, 1, ...", "[]", "[-1, 2]", "0, 1", ["0", "x"], None, 7, [True]):
        assert parse_group_ranks(bad) is None


def test_unparsable_ranks_are_a_counted_warning(tmp_path: Path) -> None:
    dump = _generated(tmp_path)
    dump["pg_config"]["1"]["ranks"] = "[0, 1, ..."
    result = _parse(dump, tmp_path)
    what = "pg_config groups whose ranks are not a list of ranks (members read as unknown)"
    assert result.warnings == [f"{tmp_path / '_dump_0'}: {what} (1)"]
    assert result.groups.filter(pl.col("pg_name") == "1").item(0, "group_ranks") is None


@pytest.mark.parametrize(
    ("version", "message"),
    [
        ("3.0", "Flight Recorder dump version 3.0; timeline reads versions 2.x"),
        ("1.5", "Flight Recorder dump version 1.5; timeline reads versions 2.x"),
        ("two", "Flight Recorder dump version 'two' is not MAJOR.MINOR"),
    ],
)
def test_other_versions_are_refused(tmp_path: Path, version: str, message: str) -> None:
    dump = _generated(tmp_path)
    dump["version"] = version
    with pytest.raises(TraceFormatError, match=f"^{tmp_path / '_dump_0'}: {message}"):
        _parse(dump, tmp_path)


def test_a_dump_without_version_is_read_as_2x(tmp_path: Path) -> None:
    dump = _generated(tmp_path)
    del dump["version"]
    result = _parse(dump, tmp_path)
    assert result.version is None
    assert result.warnings == [f"{tmp_path / '_dump_0'}: no 'version' in the dump (read as a 2.x dump) (1)"]


def test_a_dump_that_is_not_a_dict_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="its top level is a list, not a dict"):
        parse_flight_recorder(pickle.dumps([1, 2], protocol=2), source="x")
    with pytest.raises(TraceFormatError, match="the pickle is damaged"):
        parse_flight_recorder(pickle.dumps({"version": "2.9"}, protocol=2)[:-3], source="x")


def test_a_dump_larger_than_the_limit_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "_dump_0"
    path.write_bytes(pickle.dumps(_generated(tmp_path), protocol=2))
    monkeypatch.setattr("timeline.dumps.MAX_DUMP_BYTES", 1024)
    with pytest.raises(UsageError, match="more than a Flight Recorder dump holds"):
        read_dump(path)


def test_a_pickle_asking_for_a_class_is_refused_and_nothing_runs(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    data = hostile_dump({"version": "2.9", "entries": []}, marker)
    assert is_dump_head(data)  # it looks like a dump: only the unpickler stands between it and a shell
    assert b"system" in data
    with pytest.raises(
        RefusedClassError,
        match=r"^x: the pickle asks for the class (posix|os)\.system; .*nothing in it was run",
    ):
        parse_flight_recorder(data, source="x")
    assert not marker.exists()


def _persistent() -> bytes:
    class Pickler(pickle.Pickler):
        def persistent_id(self, obj: Any) -> Any:
            return "tensor0" if obj == "stored elsewhere" else None

    out = io.BytesIO()
    Pickler(out, protocol=2).dump({"version": "2.9", "entries": ["stored elsewhere"]})
    return out.getvalue()


@pytest.mark.parametrize(
    ("payload", "opcode"),
    [
        (pickle.dumps({"version": "2.9", "x": eval}, protocol=2), "GLOBAL"),
        (pickle.dumps({"version": "2.9", "x": exec}, protocol=4), "STACK_GLOBAL"),
        (_persistent(), "BINPERSID"),
    ],
    ids=["global", "stack_global", "persistent_id"],
)
def test_every_class_and_persistent_object_is_refused(payload: bytes, opcode: str) -> None:
    assert opcode in {op.name for op, _, _ in pickletools.genops(payload)}
    assert is_dump_head(payload)
    with pytest.raises(RefusedClassError, match="the pickle asks for"):
        parse_flight_recorder(payload, source="x")


def test_dumps_are_recognised_by_content(tmp_path: Path) -> None:
    groups, program = clean_job()
    dumps = simulate(groups, program)
    (pickled,) = write_dumps(tmp_path / "p", {0: dumps[0]})
    (as_json,) = write_dumps(tmp_path / "j", {0: dumps[0]}, encoding="json")
    kineto = tmp_path / "rank0.json"
    kineto.write_bytes(tiny_kineto())
    assert sniff_path(pickled) == sniff_path(as_json) == "flight_recorder"
    assert sniff_path(kineto) == "kineto"
    assert not is_dump_head(b'{"schemaVersion": 1, "traceEvents": []}')
    assert is_dump_head(b'{"version": "2.9", "pg_config": {}}')


def test_a_directory_gives_its_dumps_and_not_its_logs() -> None:
    folder = FLIGHT / "nvrx_megatron16_gpu_error_1st"
    found = expand_inputs([folder])
    assert sorted(p.name for p in found) == sorted(f"_dump_{r}" for r in range(16))


def test_rank_from_a_dump_name() -> None:
    assert rank_from_dump_name(Path("_dump_12")) == 12
    assert rank_from_dump_name(Path("nccl_trace_rank_3")) == 3  # torch's default prefix
    assert rank_from_dump_name(Path("/tmp/nccl_trace_rank_7.json")) == 7
    assert rank_from_dump_name(Path("dump")) is None
    assert rank_from_dump_name(Path("host-a_dump_5"), rank_regex=r"host-a_dump_(\d+)") == 5


def test_a_dump_naming_no_rank_is_an_error(tmp_path: Path) -> None:
    groups, program = clean_job()
    dumps = simulate(groups, program)
    write_dumps(tmp_path, dumps, prefix="dump_")
    (tmp_path / "dump_0").rename(tmp_path / "dump")
    with pytest.raises(RankError, match=r"dump: no rank: a Flight Recorder dump states none"):
        load_dumps(tmp_path)


def test_two_dumps_of_one_rank_are_an_error(tmp_path: Path) -> None:
    groups, program = clean_job()
    dumps = simulate(groups, program)
    write_dumps(tmp_path / "a", dumps)
    write_dumps(tmp_path / "b", {1: dumps[1]})
    with pytest.raises(RankError, match="rank 1 is also claimed by"):
        load_dumps([tmp_path / "a", tmp_path / "b"])


def test_loading_dumps_puts_each_ranks_rows_under_its_rank() -> None:
    folder = FLIGHT / "nvrx_megatron16_gpu_error_1st"
    dumps = load_dumps(folder)
    assert dumps.ranks == list(range(16))
    assert dumps.warnings == ()
    for rank in dumps.ranks:
        raw = read_dump_plainly(folder / f"_dump_{rank}")
        assert dumps.entries.filter(pl.col("rank") == rank).height == len(raw["entries"])
        assert dumps.status.filter(pl.col("rank") == rank).height == len(raw["pg_status"])
        assert dumps.groups.filter(pl.col("rank") == rank).height == len(raw["pg_config"])
    assert dumps.files.get_column("rank_from").unique().to_list() == ["file name"]
