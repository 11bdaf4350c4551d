"""The generator copies real records: its fields against a real NCCL trace and a torch 2.13 capture.

The reference is ``hta_nccl_parser_config`` (torch 2.4 era, NCCL 2.17: the newest real NCCL trace
with collective args in ``../shared/traces``): every key its collective kernels and
``record_param_comms`` carry must be in the generated records, the kernel's in the same order;
the keys a newer torch adds (``Seq``, ``Comms Id``, ``Dst Rank``/``Src Rank``) come after them, as
Kineto's ``appendCollectiveArgs`` writes them.
"""

from __future__ import annotations

import gzip
import json
from typing import Any

from tests.builders import TRACES
from tests.generators.nccl import device_mesh_job, mesh_groups

REAL = TRACES / "kineto" / "hta_nccl_parser_config" / "nccl_data.json.gz"


def real_document() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(gzip.decompress(REAL.read_bytes()))
    return document


def first(events: list[dict[str, Any]], cat: str, name_start: str) -> dict[str, Any]:
    return next(e for e in events if e.get("cat") == cat and e["name"].startswith(name_start) and "args" in e)


def test_kernel_args_are_the_real_ones_in_the_real_order() -> None:
    real = first(real_document()["traceEvents"], "kernel", "ncclKernel_AllReduce")["args"]
    made = first(device_mesh_job([("dp", 2)], steps=1).traces[0]["traceEvents"], "kernel", "ncclDevKernel_")[
        "args"
    ]
    made_keys = list(made)
    assert [k for k in made_keys if k in real] == list(real)
    assert made_keys[len(real) :] == ["Seq", "Comms Id"]


def test_record_param_comms_carries_every_real_key() -> None:
    real = first(real_document()["traceEvents"], "cpu_op", "record_param_comms")["args"]
    made = first(
        device_mesh_job([("dp", 2)], steps=1).traces[0]["traceEvents"], "cpu_op", "record_param_comms"
    )
    assert set(real) - {"Ev Idx"} <= set(made["args"])  # Ev Idx: an index of the profiler's own
    assert {"Seq", "Comms Id", "Rank", "Is asynchronized op"} <= set(made["args"])


def test_distributed_info_is_the_real_layout() -> None:
    real = real_document()["distributedInfo"]
    made = device_mesh_job([("dp", 2), ("tp", 2)], steps=1).traces[1]["distributedInfo"]
    assert list(made) == list(real)
    assert list(made["pg_config"][0]) == list(real["pg_config"][0])
    # rank 1 of a 2x2 mesh lists its own groups only, as the torch 2.13 capture does
    assert [(g["pg_name"], g["pg_desc"], g["ranks"]) for g in made["pg_config"]] == [
        ("0", "default_pg", [0, 1, 2, 3]),
        ("2", "mesh_dp", [1, 3]),
        ("3", "mesh_tp", [0, 1]),
    ]


def test_mesh_groups_follow_init_device_mesh() -> None:
    # ("pp", 2), ("dp", 2), ("tp", 2): ranks arange(8).reshape(2, 2, 2)
    groups: dict[str, list[tuple[int, ...]]] = {}
    for g in mesh_groups([("pp", 2), ("dp", 2), ("tp", 2)]):
        groups.setdefault(g.desc, []).append(g.ranks)
    assert groups == {
        "default_pg": [(0, 1, 2, 3, 4, 5, 6, 7)],
        "mesh_pp": [(0, 4), (1, 5), (2, 6), (3, 7)],
        "mesh_dp": [(0, 2), (1, 3), (4, 6), (5, 7)],
        "mesh_tp": [(0, 1), (2, 3), (4, 5), (6, 7)],
    }
