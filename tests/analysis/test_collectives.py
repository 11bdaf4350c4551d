"""Collectives across ranks: matching, skew, wait vs transfer, bandwidth, utilisation, links."""

from __future__ import annotations

import functools
from typing import Any

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import REPO, TRACES, gpu, make_events, step
from timeline import load
from timeline.analysis.collectives import (
    ALL_COMMUNICATION_GROUP,
    bus_factor,
    collective_instances,
    compute_iteration_utilisation,
    match_collectives,
)
from timeline.analysis.links import LINK_PRESETS, parse_link_gbps
from timeline.analysis.overlap import compute_overlap
from timeline.analysis.schemas import (
    COLLECTIVE_MISMATCHES_SCHEMA,
    COLLECTIVE_RANKS_SCHEMA,
    COLLECTIVES_SCHEMA,
    ITERATION_UTILISATION_SCHEMA,
)
from timeline.errors import UsageError

PARAM = TRACES / "kineto" / "param_dlrm_8rank"


@functools.cache
def param_events() -> pl.DataFrame:
    return load(PARAM, workers=1).events


def comm(rank: int, start: int, end: int, collective: str = "all_reduce", **extra: Any) -> dict[str, Any]:
    return gpu("communication", start, end, rank=rank, stream=9, collective=collective, **extra)


# --- the PARAM 8-rank DLRM step ---------------------------------------------------------------------------


def test_param_all_eight_collectives_matched_on_all_eight_ranks() -> None:
    match = match_collectives(param_events())
    frame = match.collectives
    assert frame.schema == COLLECTIVES_SCHEMA
    assert match.ranks.schema == COLLECTIVE_RANKS_SCHEMA
    assert frame.height == 8
    assert frame["ranks"].to_list() == [8] * 8
    assert frame["complete"].all()
    assert frame["consistent"].all()
    assert frame["group"].to_list() == [ALL_COMMUNICATION_GROUP] * 8
    assert frame["matched_by"].to_list() == ["order"] * 8
    assert frame["collective"].to_list() == ["all_to_all"] * 4 + [
        "all_reduce",
        "all_to_all",
        "all_reduce",
        "all_reduce",
    ]
    assert frame["iteration"].to_list() == [10] * 8
    assert match.mismatches.height == 0
    assert match.warnings == ()


def test_param_skews_and_last_arrivals() -> None:
    frame = match_collectives(param_events()).collectives
    # The first all-to-all: rank 1 starts 7.624 ms before rank 7; every rank ends within 2 µs.
    first = frame.row(0, named=True)
    assert first["start_skew_ns"] == 7_624_000
    assert first["first_rank"] == 1
    assert first["last_rank"] == 7
    assert first["end_skew_ns"] == 2_000
    # End skews are a few µs everywhere (one host, one clock); start skews up to 7.6 ms.
    assert frame["end_skew_ns"].max() <= 10_000  # type: ignore[operator]
    assert frame["start_skew_ns"].to_list() == [
        7_624_000,
        1_101_000,
        168_000,
        125_000,
        223_000,
        534_000,
        584_000,
        885_000,
    ]
    assert frame["last_rank"].to_list() == [7, 7, 7, 7, 7, 5, 5, 4]
    assert frame["transfer_ns"].to_list() == [10_000, 8_000, 7_000, 7_000, 86_000, 10_000, 20_000, 69_000]


def test_param_wait_plus_transfer_is_each_ranks_duration() -> None:
    match = match_collectives(param_events())
    ranks = match.ranks
    assert ranks.height == 64
    assert (ranks["wait_ns"] + ranks["transfer_ns"] == ranks["dur_ns"]).all()
    assert (ranks["wait_ns"] >= 0).all()
    # The rank with the shortest duration waited 0: it is the transfer itself.
    assert ranks.group_by("collective_id").agg(pl.col("wait_ns").min())["wait_ns"].to_list() == [0] * 8
    totals = ranks.group_by("collective_id").agg(pl.col("wait_ns").sum()).sort("collective_id")
    assert totals["wait_ns"].to_list() == match.collectives["total_wait_ns"].to_list()
    first = ranks.filter(pl.col("collective_id") == 0).sort("rank")
    assert first["wait_ns"].to_list() == [
        2_136_000,
        7_625_000,
        508_000,
        6_122_000,
        4_872_000,
        4_669_000,
        504_000,
        0,
    ]
    assert first["last"].to_list() == [False] * 7 + [True]


def test_param_bandwidth_by_nccl_tests_convention() -> None:
    frame = match_collectives(param_events(), link_gbps=100.0).collectives
    reduce = frame.row(4, named=True)  # all_reduce of 1,576,964 bytes, 86 µs, 8 ranks
    assert reduce["bytes"] == 1_576_964
    assert reduce["bus_factor"] == pytest.approx(2 * 7 / 8)
    assert reduce["algbw_bytes_per_s"] == pytest.approx(1_576_964 / 86e-6)
    assert reduce["busbw_bytes_per_s"] == pytest.approx(1_576_964 / 86e-6 * 1.75)
    assert reduce["algbw_gbps"] == pytest.approx(1_576_964 * 8 / 86_000)
    assert reduce["busbw_gbps"] == pytest.approx(1_576_964 * 8 / 86_000 * 1.75)
    assert reduce["link_utilisation_ratio"] == pytest.approx(reduce["busbw_gbps"] / 100)
    a2a = frame.row(0, named=True)
    assert a2a["bus_factor"] == pytest.approx(7 / 8)
    assert a2a["busbw_gbps"] == pytest.approx(24_576 * 8 / 10_000 * 7 / 8)


# --- hand-computed cases ----------------------------------------------------------------------------------


def test_hand_computed_bandwidth_and_utilisation() -> None:
    # 4 ranks, one all-reduce of 1 MB: rank 3 arrives 400 ns late; all end at 1,000,500.
    rows = [
        comm(r, 500 - 100 * (r != 3) * (3 - r), 1_000_500, in_bytes=1_000_000, out_bytes=1_000_000)
        for r in range(4)
    ]
    rows[3]["start_ns"] = 500
    match = match_collectives(make_events(rows), link_gbps=100.0)
    row = match.collectives.row(0, named=True)
    assert row["transfer_ns"] == 1_000_000  # rank 3's duration
    assert row["last_rank"] == 3
    assert row["start_skew_ns"] == 300
    assert row["algbw_gbps"] == pytest.approx(8.0)
    assert row["busbw_gbps"] == pytest.approx(12.0)  # 8 × 2·3/4
    assert row["link_utilisation_ratio"] == pytest.approx(0.12)
    assert row["total_wait_ns"] == 300 + 200 + 100


def test_group_size_from_the_trace_beats_the_ranks_matched() -> None:
    rows = [comm(r, 0, 1_000, in_bytes=1_000, group_size=8) for r in range(2)]
    row = match_collectives(make_events(rows)).collectives.row(0, named=True)
    assert row["group_size"] == 8
    assert row["bus_factor"] == pytest.approx(1.75)


def test_all_gather_bytes_are_the_total_output_else_input_times_n() -> None:
    with_out = [comm(r, 0, 1_000, "all_gather", in_bytes=100, out_bytes=400) for r in range(4)]
    without = [comm(r, 2_000, 3_000, "all_gather", in_bytes=100) for r in range(4)]
    frame = match_collectives(make_events(with_out + without)).collectives
    assert frame["bytes"].to_list() == [400, 400]
    assert frame["bus_factor"].to_list() == pytest.approx([0.75, 0.75])


def test_barrier_synchronises_but_moves_no_data() -> None:
    rows = [comm(r, 10 * r, 100, "barrier") for r in range(3)]
    row = match_collectives(make_events(rows)).collectives.row(0, named=True)
    assert row["synchronising"] is True
    assert row["bytes"] is None
    assert row["algbw_gbps"] is None
    assert row["last_rank"] == 2


def test_broadcast_is_not_synchronising_and_has_factor_one() -> None:
    rows = [comm(r, 0, 100 + r, "broadcast", in_bytes=1_000) for r in range(2)]
    row = match_collectives(make_events(rows)).collectives.row(0, named=True)
    assert row["synchronising"] is False
    assert row["bus_factor"] == 1.0


def test_count_mismatch_is_reported_not_raised() -> None:
    rows = [comm(0, 0, 100), comm(1, 0, 100), comm(0, 200, 300), comm(1, 200, 300), comm(0, 400, 500)]
    match = match_collectives(make_events(rows))
    assert match.collectives["ranks"].to_list() == [2, 2, 1]
    assert match.collectives["complete"].to_list() == [True, True, False]
    assert match.mismatches.schema == COLLECTIVE_MISMATCHES_SCHEMA
    assert match.mismatches.rows() == [(ALL_COMMUNICATION_GROUP, 1, 2, 3, 1)]
    assert any("rank 1 has 2 collectives" in w for w in match.warnings)


def test_rank_without_communication_is_a_mismatch() -> None:
    rows = [comm(0, 0, 100), comm(1, 0, 100), gpu("compute", 0, 100, rank=2)]
    match = match_collectives(make_events(rows))
    assert match.collectives["expected_ranks"].to_list() == [3]
    assert match.collectives["complete"].to_list() == [False]
    assert match.mismatches.rows() == [(ALL_COMMUNICATION_GROUP, 2, 0, 1, 1)]


def test_inconsistent_kinds_are_flagged() -> None:
    rows = [comm(0, 0, 100, "all_reduce", in_bytes=8), comm(1, 0, 100, "all_gather", in_bytes=8)]
    match = match_collectives(make_events(rows))
    assert match.collectives["consistent"].to_list() == [False]
    assert any("differ in kind or size" in w for w in match.warnings)


def test_process_groups_are_matched_separately() -> None:
    rows = [
        comm(0, 0, 100, pg_name="0"),
        comm(1, 0, 100, pg_name="0"),
        comm(0, 50, 80, pg_name="1"),  # rank 0's only collective of group 1 starts between
        comm(1, 150, 170, pg_name="1"),
        comm(0, 200, 300, pg_name="0"),
        comm(1, 200, 300, pg_name="0"),
    ]
    frame = match_collectives(make_events(rows)).collectives
    assert sorted(zip(frame["group"], frame["index"], frame["ranks"], strict=True)) == [
        ("0", 0, 2),
        ("0", 1, 2),
        ("1", 0, 2),
    ]
    group1 = frame.filter(pl.col("group") == "1").row(0, named=True)
    assert group1["start_skew_ns"] == 100
    assert group1["last_rank"] == 1


def test_seq_matches_when_profiler_windows_differ() -> None:
    # Rank 1's profile caught one more collective (seq 4) than rank 0's: order would mismatch them.
    rows = [
        comm(0, 100, 200, seq=5, pg_name="0"),
        comm(0, 300, 400, seq=6, pg_name="0"),
        comm(1, 0, 50, seq=4, pg_name="0"),
        comm(1, 110, 200, seq=5, pg_name="0"),
        comm(1, 320, 400, seq=6, pg_name="0"),
    ]
    frame = match_collectives(make_events(rows)).collectives
    assert frame["index"].to_list() == [4, 5, 6]
    assert frame["matched_by"].to_list() == ["seq"] * 3
    assert frame["ranks"].to_list() == [1, 2, 2]
    assert frame["start_skew_ns"].to_list()[1:] == [10, 20]


def test_coalesced_kernels_sharing_a_seq_are_one_instance() -> None:
    rows = [
        comm(0, 0, 100, seq=1, pg_name="0", in_bytes=10),
        comm(0, 100, 150, seq=1, pg_name="0", in_bytes=20),
        comm(1, 0, 150, seq=1, pg_name="0", in_bytes=30),
    ]
    instances = collective_instances(make_events(rows))
    assert instances.filter(pl.col("rank") == 0).select("events", "start_ns", "end_ns", "in_bytes").row(
        0
    ) == (2, 0, 150, 30)


def test_cpu_gloo_ranks_are_matched_on_cpu_collectives() -> None:
    trace = load(REPO / "sample_traces" / "ddp_gloo_4rank", workers=1)
    match = match_collectives(trace.events)
    assert match.collectives.height == 12
    assert match.collectives["ranks"].to_list() == [4] * 12
    assert match.collectives["consistent"].all()
    assert match.collectives["iteration"].to_list() == [2] * 4 + [3] * 4 + [4] * 4


def test_horovod_spans_are_not_matched() -> None:
    events = make_events([comm(0, 0, 100), comm(1, 0, 100)])
    horovod = events.head(1).with_columns(
        pl.lit("horovod").cast(events.schema["source"]).alias("source"),
        pl.lit(None, dtype=pl.Int32).alias("device"),
    )
    assert match_collectives(pl.concat([events, horovod])).collectives["ranks"].to_list() == [2]


def test_iteration_utilisation_hand_computed() -> None:
    rows = [
        step(1, 0, 10_000_000, rank=0),
        step(1, 0, 10_000_000, rank=1),
        comm(0, 1_000_000, 2_000_000, in_bytes=1_000_000),
        comm(1, 1_000_000, 2_000_000, in_bytes=1_000_000),
        comm(0, 3_000_000, 4_000_000, in_bytes=3_000_000),
        comm(1, 3_500_000, 4_000_000, in_bytes=3_000_000),
        gpu("compute", 0, 1_000_000, rank=0),
        gpu("compute", 0, 1_000_000, rank=1),
    ]
    events = make_events(rows)
    overlap = compute_overlap(events)
    # 3 MB in 0.5 ms is 48 Gbit/s of bus bandwidth: a 100 Gbit/s link carries it (a 10 Gbit/s one could not).
    match = match_collectives(events, windows=overlap.windows, link_gbps=100.0)
    utilisation = compute_iteration_utilisation(
        match.collectives, link_gbps=100.0, windows=overlap.windows, iteration_overlap=overlap.iterations
    )
    assert utilisation.schema == ITERATION_UTILISATION_SCHEMA
    row = utilisation.row(0, named=True)
    assert row["iteration"] == 1
    assert (row["collectives"], row["bytes"], row["transfer_ns"]) == (2, 4_000_000, 1_500_000)
    assert row["bus_bytes"] == pytest.approx(4_000_000 * 1.0)  # 2(n-1)/n = 1 for n = 2
    assert row["busbw_gbps"] == pytest.approx(4_000_000 * 8 / 1_500_000)
    assert row["link_utilisation_ratio"] == pytest.approx(4_000_000 * 8 / 1_500_000 / 100)
    assert row["step_ns"] == 10_000_000
    assert row["step_link_utilisation_ratio"] == pytest.approx(4_000_000 * 8 / (10_000_000 * 100))
    # Exposed: rank 0 has 2 ms of communication, rank 1 1.5 ms, none under compute: median 1.75 ms.
    assert row["exposed_comm_ns"] == 1_750_000
    assert row["exposed_link_bytes"] == pytest.approx(1_750_000 * 100 / 8)
    assert row["total_wait_ns"] == 500_000


def test_without_link_the_link_columns_are_null() -> None:
    frame = match_collectives(param_events()).collectives
    assert frame["link_gbps"].null_count() == frame.height
    assert frame["link_utilisation_ratio"].null_count() == frame.height


# --- properties -------------------------------------------------------------------------------------------


@st.composite
def synchronised(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Random ranks running the same sequence of collectives, each ending within 10 ns of the others."""
    ranks = draw(st.integers(2, 5))
    count = draw(st.integers(1, 5))
    rows: list[dict[str, Any]] = []
    t = 0
    for _ in range(count):
        end = t + draw(st.integers(100, 10_000))
        for r in range(ranks):
            start = t + draw(st.integers(0, 90))
            rows.append(comm(r, start, end + draw(st.integers(0, 10)), in_bytes=draw(st.integers(1, 10**6))))
        t = end + 1_000
    return rows


@settings(max_examples=40, deadline=None)
@given(rows=synchronised(), shift=st.integers(-(10**12), 10**12), seed=st.randoms())
def test_invariant_under_shift_and_row_order(rows: list[dict[str, Any]], shift: int, seed: Any) -> None:
    base = match_collectives(make_events(rows)).collectives
    moved = [dict(r, start_ns=r["start_ns"] + shift, end_ns=r["end_ns"] + shift) for r in rows]
    seed.shuffle(moved)
    other = match_collectives(make_events(moved)).collectives
    columns = ["start_skew_ns", "end_skew_ns", "transfer_ns", "total_wait_ns", "last_rank", "algbw_gbps"]
    assert base.select(columns).equals(other.select(columns))


@settings(max_examples=40, deadline=None)
@given(rows=synchronised())
def test_wait_and_transfer_split_every_duration(rows: list[dict[str, Any]]) -> None:
    match = match_collectives(make_events(rows))
    ranks = match.ranks
    assert (ranks["wait_ns"] >= 0).all()
    assert (ranks["wait_ns"] + ranks["transfer_ns"] == ranks["dur_ns"]).all()
    assert (match.collectives["start_skew_ns"] >= 0).all()
    # The last rank started no earlier than anyone.
    last = ranks.filter(pl.col("last"))
    latest = ranks.group_by("collective_id").agg(pl.col("start_ns").max())
    assert (
        last.join(latest, on="collective_id", suffix="_max")
        .filter(pl.col("start_ns") != pl.col("start_ns_max"))
        .is_empty()
    )


# --- bus factors and links --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("collective", "n", "factor"),
    [
        ("all_reduce", 8, 1.75),
        ("all_reduce", 2, 1.0),
        ("all_reduce", 1, 0.0),
        ("all_gather", 4, 0.75),
        ("reduce_scatter", 4, 0.75),
        ("all_to_all", 8, 0.875),
        ("broadcast", 8, 1.0),
        ("reduce", 8, 1.0),
        ("send", 2, 1.0),
        ("recv", 2, 1.0),
        ("barrier", 8, None),
        ("all_reduce", 0, None),
        (None, 8, None),
    ],
)
def test_bus_factor(collective: str | None, n: int, factor: float | None) -> None:
    assert bus_factor(collective, n) == factor


@pytest.mark.parametrize(
    ("text", "gbps"),
    [
        ("100", 100.0),
        ("25G", 25.0),
        ("10g", 10.0),
        ("100Gbps", 100.0),
        ("100 Gbit/s", 100.0),
        ("400GbE", 400.0),
        ("800Mbps", 0.8),
        ("1.6Tbps", 1600.0),
        ("12.5GB/s", 100.0),
        ("100GBps", 800.0),
        ("25gbe", 25.0),
        ("ib-hdr", 200.0),
        ("HDR", 200.0),
        ("ib_ndr", 400.0),
        ("InfiniBand-EDR", 100.0),
        ("nvlink4", 3600.0),
        ("NVLink-3", 2400.0),
        ("pcie4", 252.0),
    ],
)
def test_parse_link_gbps(text: str, gbps: float) -> None:
    assert parse_link_gbps(text) == pytest.approx(gbps)


@pytest.mark.parametrize("text", ["", "fast", "0", "-5", "10 parsecs", "1e9bps"])
def test_parse_link_gbps_rejects(text: str) -> None:
    with pytest.raises(UsageError, match="--link-gbps"):
        parse_link_gbps(text)


def test_presets_and_bytes_per_s() -> None:
    assert {
        "10gbe",
        "25gbe",
        "100gbe",
        "400gbe",
        "ib-edr",
        "ib-hdr",
        "ib-ndr",
        "nvlink2",
        "nvlink3",
        "nvlink4",
    } <= set(LINK_PRESETS)


def test_every_output_column_is_defined_in_the_docs() -> None:
    from timeline.analysis import schemas

    text = (REPO / "docs" / "collectives.md").read_text()
    missing = {
        f"{name}.{column}"
        for name in schemas.__all__
        if name.endswith("_SCHEMA")
        for column in getattr(schemas, name).names()
        # A column is defined by name, or with its siblings as `algbw_*`.
        if f"`{column}`" not in text and f"`{column.split('_')[0]}_*`" not in text
    }
    assert not missing, f"docs/collectives.md does not define {sorted(missing)}"
