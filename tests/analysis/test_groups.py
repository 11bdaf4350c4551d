"""The group model: dimensions, group instances, the group of each collective, nodes.

Hand-made events (``tests.builders``) and declared groups, the expected values written out by
hand from the rules of docs/collectives.md (Process groups and dimensions).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl
import pytest

from tests.builders import gpu, make_events
from timeline.analysis.groups import (
    ALL_COMMUNICATION_GROUP,
    attribute_groups,
    dimension_of,
    group_instances,
    nodes_of,
    parse_dimension_overrides,
)
from timeline.errors import UsageError
from timeline.schema import FILES_SCHEMA, PROCESS_GROUPS_SCHEMA


def declared(
    rows: Sequence[tuple[int, str, str | None, list[int]]], *, truncated: bool = False
) -> pl.DataFrame:
    """A ``Trace.groups`` frame: (declaring rank, pg_name, pg_desc, ranks) rows."""
    return pl.DataFrame(
        [
            {
                "rank": rank,
                "pg_name": name,
                "pg_desc": desc,
                "ranks": ranks,
                "ranks_text": None,
                "ranks_truncated": truncated,
                "pg_size": None if truncated else len(ranks),
                "backend": "cuda:nccl",
            }
            for rank, name, desc, ranks in rows
        ],
        schema=PROCESS_GROUPS_SCHEMA,
    )


def comm(rank: int, start: int, collective: str = "all_reduce", **extra: Any) -> dict[str, Any]:
    return gpu("communication", start, start + 10, rank=rank, stream=20, collective=collective, **extra)


MESH_2X2 = [  # what each rank of a 2x2 ("dp", "tp") mesh declares (torch's names, as captured)
    (r, name, desc, ranks)
    for r in range(4)
    for name, desc, ranks in (
        ("0", "default_pg", [0, 1, 2, 3]),
        ("1", "mesh_dp", [0, 2]),
        ("2", "mesh_dp", [1, 3]),
        ("3", "mesh_tp", [0, 1]),
        ("4", "mesh_tp", [2, 3]),
    )
    if r in ranks
]


@pytest.mark.parametrize(
    ("desc", "label"),
    [
        ("mesh_tp", "tp"),
        ("mesh_dp_shard", "dp_shard"),
        ("mesh_dp_replicate", "dp_replicate"),
        ("default_pg", "world"),
        ("TENSOR_MODEL_PARALLEL_GROUP,0", "tensor_model_parallel"),
        ("EXPERT_MODEL_PARALLEL_GROUP:3", "expert_model_parallel"),
        ("mesh_cp#1", "cp"),
        ("undefined", None),
        ("", None),
        (None, None),
        ("my custom / group", "my_custom_group"),  # the suffix goes before other characters become _
    ],
)
def test_dimension_of_one_rule(desc: str | None, label: str | None) -> None:
    assert dimension_of(desc) == label


def test_dimension_overrides_win_by_exact_description() -> None:
    overrides = parse_dimension_overrides(["mesh_dp_replicate=ddp", " mesh_tp = tp_intra "])
    assert overrides == {"mesh_dp_replicate": "ddp", "mesh_tp": "tp_intra"}
    assert dimension_of("mesh_dp_replicate", overrides=overrides) == "ddp"
    assert dimension_of("mesh_dp_shard", overrides=overrides) == "dp_shard"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["mesh_dp"], "expected DESCRIPTION=LABEL"),
        (["=ddp"], "expected DESCRIPTION=LABEL"),
        (["mesh_dp="], "expected DESCRIPTION=LABEL"),
        (["mesh_dp=d p"], "a label is letters"),
        (["mesh_dp=a", "mesh_dp=b"], "is given two labels"),
    ],
)
def test_dimension_overrides_refuse_bad_values(values: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_dimension_overrides(values)


def test_instances_from_pg_config_with_dimension_size_and_declarers() -> None:
    frame = group_instances(make_events([comm(0, 0)]), declared(MESH_2X2))
    rows = frame.select("group", "pg_desc", "dimension", "ranks", "size", "declared_by").rows()
    assert rows == [
        ("0", "default_pg", "world", [0, 1, 2, 3], 4, 4),
        ("1", "mesh_dp", "dp", [0, 2], 2, 2),
        ("2", "mesh_dp", "dp", [1, 3], 2, 2),
        ("3", "mesh_tp", "tp", [0, 1], 2, 2),
        ("4", "mesh_tp", "tp", [2, 3], 2, 2),
    ]


def test_a_name_with_two_rank_sets_is_two_instances() -> None:
    # groups each rank makes on its own may reuse a name: "1" is [0, 2] on ranks 0, 2 and [1, 3] on 1, 3
    rows = [(r, "1", "mesh_dp", [0, 2] if r in (0, 2) else [1, 3]) for r in range(4)]
    frame = group_instances(make_events([comm(0, 0)]), declared(rows))
    assert frame.select("group", "ranks").rows() == [("1[0,2]", [0, 2]), ("1[1,3]", [1, 3])]
    events = make_events(
        [comm(r, 0, pg_name="1", pg_ranks=str([0, 2] if r in (0, 2) else [1, 3])) for r in range(4)]
    )
    attributed = attribute_groups(events, declared(rows)).sort("rank")
    assert attributed["group"].to_list() == ["1[0,2]", "1[1,3]", "1[0,2]", "1[1,3]"]
    assert attributed["attributed_by"].to_list() == ["named"] * 4


def test_a_list_cut_short_is_the_instance_it_begins() -> None:
    full = declared([(0, "5", "mesh_ep", list(range(16)))])
    events = make_events([comm(0, 0, pg_name="5", pg_ranks="[0, 1, 2, 3, ...]")])
    frame = group_instances(events, full)
    assert frame.select("group", "size", "ranks_truncated").rows() == [("5", 16, False)]
    alone = group_instances(events, declared([]))
    assert alone.select("group", "ranks", "ranks_truncated", "size").rows() == [
        ("5", [0, 1, 2, 3], True, None)
    ]


def test_nothing_declared_nothing_named_is_the_one_sequence_of_before() -> None:
    attributed = attribute_groups(make_events([comm(0, 0), comm(1, 0)]), declared([]))
    assert attributed["group"].to_list() == [ALL_COMMUNICATION_GROUP] * 2
    assert attributed["attributed_by"].to_list() == ["none"] * 2


def test_the_only_group_of_a_rank() -> None:
    groups = declared([(0, "0", "default_pg", [0, 1]), (1, "0", "default_pg", [0, 1])])
    attributed = attribute_groups(make_events([comm(0, 0), comm(1, 0)]), groups)
    assert attributed.select("group", "attributed_by").rows() == [("0", "only_group")] * 2


def test_size_tells_groups_apart_when_sizes_differ() -> None:
    # rank 0 of a (dp 2, tp 4) mesh: world of 8, dp [0, 4], tp [0..3]
    groups = declared(
        [
            (0, "0", "default_pg", list(range(8))),
            (0, "1", "mesh_dp", [0, 4]),
            (0, "3", "mesh_tp", [0, 1, 2, 3]),
        ]
    )
    events = make_events(
        [
            comm(0, 0, "all_gather", in_bytes=100, out_bytes=200),  # gathers 2 shards: dp
            comm(0, 20, "all_reduce", group_size=4),  # Group size 4: tp
            comm(0, 40, "all_reduce"),  # says nothing: world, dp or tp
            comm(0, 60, "reduce_scatter", in_bytes=800, out_bytes=100),  # 8 shards: world
        ]
    )
    rows = (
        attribute_groups(events, groups)
        .sort("start_ns")
        .select("group", "attributed_by", "candidates")
        .rows()
    )
    assert rows == [
        ("1", "size", ["1"]),
        ("3", "size", ["3"]),
        (None, "ambiguous", ["0", "1", "3"]),
        ("0", "size", ["0"]),
    ]


def test_same_size_groups_stay_ambiguous() -> None:
    events = make_events([comm(r, 0, "all_gather", in_bytes=10, out_bytes=20) for r in range(4)])
    rows = (
        attribute_groups(events, declared(MESH_2X2)).sort("rank").select("rank", "group", "candidates").rows()
    )
    assert rows == [
        (0, None, ["1", "3"]),
        (1, None, ["2", "3"]),
        (2, None, ["1", "4"]),
        (3, None, ["2", "4"]),
    ]


def test_a_rank_without_its_own_pg_config_is_never_attributed_by_elimination() -> None:
    # rank 1's trace declares nothing: the one group known to hold it is not all it may belong to
    groups = declared([(0, "0", "default_pg", [0, 1])])
    attributed = attribute_groups(make_events([comm(0, 0), comm(1, 0)]), groups).sort("rank")
    assert attributed.select("group", "attributed_by").rows() == [("0", "only_group"), (None, "ambiguous")]


def test_the_peer_tells_the_group_of_a_send() -> None:
    # rank 1 of a 4-stage pipeline ([0..3], name "1") inside a world of 4 ("0") and a dp group [1, 3]
    groups = declared(
        [(1, "0", "default_pg", [0, 1, 2, 3]), (1, "1", "mesh_pp", [0, 1, 2, 3]), (1, "2", "mesh_dp", [1, 3])]
    )
    events = make_events([comm(1, 0, "send", peer=2), comm(1, 20, "send", group_peer=3)])
    rows = attribute_groups(events, groups).sort("start_ns").select("group", "attributed_by", "peer").rows()
    # peer 2: world or pp (not dp [1, 3]): ambiguous; group-local 3 → world[3]=3, pp[3]=3, dp has no 3rd
    assert rows == [(None, "ambiguous", 2), (None, "ambiguous", None)]
    only_pp = declared([(1, "1", "mesh_pp", [0, 1, 2, 3]), (1, "2", "mesh_dp", [1, 3])])
    rows = attribute_groups(events, only_pp).sort("start_ns").select("group", "attributed_by", "peer").rows()
    assert rows == [("1", "peer", 2), ("1", "peer", 3)]


def test_a_named_send_gets_its_global_peer_from_the_group_rank() -> None:
    groups = declared([(1, "7", "mesh_pp", [1, 5])])
    events = make_events([comm(1, 0, "send", pg_name="7", group_peer=1)])
    assert attribute_groups(events, groups).select("group", "peer").row(0) == ("7", 5)


def test_nodes_from_gpus_per_node_else_hosts() -> None:
    files = pl.DataFrame(
        [
            {"rank": r, "path": f"r{r}", "format": "kineto", "host": h}
            for r, h in ((0, "a"), (1, "a"), (2, "b"), (3, None))
        ],
        schema=FILES_SCHEMA,
    )
    assert nodes_of(files, gpus_per_node=2).rows() == [(0, "0"), (1, "0"), (2, "1"), (3, "1")]
    assert nodes_of(files).rows() == [(0, "a"), (1, "a"), (2, "b")]
    frame = group_instances(
        make_events([comm(0, 0)]), declared(MESH_2X2), nodes=nodes_of(files, gpus_per_node=2)
    )
    assert frame.select("group", "hosts", "spans_nodes").rows() == [
        ("0", 2, True),
        ("1", 2, True),  # dp [0, 2]: nodes 0 and 1
        ("2", 2, True),
        ("3", 1, False),  # tp [0, 1]: node 0
        ("4", 1, False),
    ]
    by_host = group_instances(make_events([comm(0, 0)]), declared(MESH_2X2), nodes=nodes_of(files))
    assert by_host.select("group", "spans_nodes").rows() == [
        ("0", True),  # ranks 0 and 2 are on two hosts, whatever rank 3's
        ("1", True),
        ("2", None),  # [1, 3]: rank 3's host unknown
        ("3", False),
        ("4", None),
    ]


def test_the_other_rank_of_a_pair_is_the_peer() -> None:
    groups = declared([(3, "4", "mesh_pp", [3, 7])])
    events = make_events([comm(3, 0, "send", pg_name="4"), comm(3, 20, "recv", pg_name="4")])
    assert attribute_groups(events, groups).sort("start_ns")["peer"].to_list() == [7, 7]
