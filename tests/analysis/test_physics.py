"""Results that cannot be physical or are unknown (issue #19): transfers faster than the link or than any
link, and collectives matched on fewer ranks than their group has.

The expected aggregates are computed here from the sizes and times the tests wrote, in plain Python,
never with the library's own formulas.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tests.builders import EPOCH_US, PARAM, frames_of, gpu, make_events, run_timeline, step
from timeline import load
from timeline.analysis.collectives import compute_iteration_utilisation, match_collectives
from timeline.analysis.horovod_phases import analyze_horovod
from timeline.analysis.links import LINK_PRESETS
from timeline.analysis.overlap import compute_overlap

MIB = 2**20

# (bytes, transfer in ns) of four 2-rank all-reduces (bus factor 2(n-1)/n = 1): 8, 1.43 million, 80
# and 160 Gbit/s of bus bandwidth. The second is 512 MiB "moved" in 3 µs.
TRANSFERS = [(1_000_000, 1_000_000), (512 * MIB, 3_000), (10_000_000, 1_000_000), (20_000_000, 1_000_000)]


def busbw_gbps(nbytes: int, ns: int) -> float:
    """A 2-rank all-reduce's bus bandwidth: factor 2(2-1)/2 = 1."""
    return nbytes * 8 / ns


def plausible(link: float | None) -> list[tuple[int, int]]:
    """The transfers not faster than the link (without one, than 900 GB/s)."""
    ceiling = 7_200.0 if link is None else link
    return [(b, t) for b, t in TRANSFERS if busbw_gbps(b, t) <= ceiling]


def comm_rows() -> list[dict[str, Any]]:
    """Both ranks run each transfer at the same time, inside iteration 1 [0, 10 ms)."""
    rows: list[dict[str, Any]] = []
    for rank in (0, 1):
        rows.append(step(1, 0, 10_000_000, rank=rank))
        for k, (nbytes, ns) in enumerate(TRANSFERS):
            start = 1_000_000 + 2_000_000 * k
            rows.append(
                gpu(
                    "communication",
                    start,
                    start + ns,
                    rank=rank,
                    stream=9,
                    collective="all_reduce",
                    in_bytes=nbytes,
                    out_bytes=nbytes,
                    pg_name="0",
                    group_size=2,
                )
            )
    return rows


def test_the_ceiling_is_nvlink_5_in_one_place() -> None:
    from timeline.analysis.links import PHYSICAL_CEILING_GBPS, bandwidth_ceiling  # new in #19

    assert PHYSICAL_CEILING_GBPS == LINK_PRESETS["nvlink5"] == 7_200.0  # 900 GB/s each way
    assert bandwidth_ceiling(None) == (7_200.0, "7,200 Gbit/s (900 GB/s, NVLink 5, the fastest per-GPU link)")
    assert bandwidth_ceiling(25.0) == (25.0, "the 25 Gbit/s link")


@pytest.mark.parametrize("link", [None, 10.0, 100.0])
def test_transfers_faster_than_physics_are_flagged_and_left_out(link: float | None) -> None:
    events = make_events(comm_rows())
    overlap = compute_overlap(events)
    match = match_collectives(events, windows=overlap.windows, link_gbps=link)
    frame = match.collectives.sort("first_start_ns")
    # The flag, per collective: bus bandwidth above the ceiling.
    ceiling = 7_200.0 if link is None else link
    assert frame["implausible"].to_list() == [busbw_gbps(b, t) > ceiling for b, t in TRANSFERS]
    # Each keeps its own figures: 512 MiB in 3 µs is 1.43 million Gbit/s.
    assert frame["busbw_gbps"][1] == pytest.approx(512 * MIB * 8 / 3_000)
    # The utilisation aggregates leave them out.
    kept = plausible(link)
    row = compute_iteration_utilisation(
        match.collectives, link_gbps=link, windows=overlap.windows, iteration_overlap=overlap.iterations
    ).row(0, named=True)
    assert row["collectives"] == len(TRANSFERS)
    assert row["bytes"] == sum(b for b, _ in kept)
    assert row["transfer_ns"] == sum(t for _, t in kept)
    assert row["busbw_gbps"] == pytest.approx(sum(b for b, _ in kept) * 8 / sum(t for _, t in kept))
    if link is not None:
        assert row["link_utilisation_ratio"] == pytest.approx(row["busbw_gbps"] / link)
        assert row["link_utilisation_ratio"] <= 1.0
    # One warning counts them.
    flagged = len(TRANSFERS) - len(kept)
    named = "7,200 Gbit/s (900 GB/s" if link is None else f"the {link:g} Gbit/s link"
    lines = [w for w in match.warnings if "faster than" in w]
    assert lines == [lines[0]]
    assert lines[0].startswith(f"{flagged} transfer(s) faster than {named}")
    assert "left out of link utilisation" in lines[0]


def test_a_transfer_at_exactly_the_link_is_plausible() -> None:
    # 12.5 MB in 1 ms on 2 ranks: 100 Gbit/s of bus bandwidth, the whole of a 100 Gbit/s link.
    rows = [
        gpu("communication", 0, 1_000_000, rank=r, collective="all_reduce", in_bytes=12_500_000, group_size=2)
        for r in (0, 1)
    ]
    match = match_collectives(make_events(rows), link_gbps=100.0)
    assert match.collectives["busbw_gbps"].to_list() == [pytest.approx(100.0)]
    assert match.collectives["implausible"].to_list() == [False]
    assert not [w for w in match.warnings if "faster than" in w]


# --- Horovod fused batches ------------------------------------------------------------------------------


def horovod_timeline(path: Path) -> Path:
    """A v0.21 timeline of 2 ranks: tensors of 1 MB (1 ms of wire), 512 MiB (3 µs) and 10 MB (1 ms)."""
    records: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": 0, "args": {"start_time_since_epoch_in_micros": EPOCH_US}}
    ]
    tensors = [(1, "[250000]", 1_000), (2, "[134217728]", 3), (3, "[2500000]", 1_000)]
    t = 0
    for pid, shape, wire_us in tensors:
        records += [
            {"name": "process_name", "ph": "M", "pid": pid, "args": {"name": f"allreduce.t{pid}"}},
            {"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": t, "pid": pid},
            {"ph": "X", "name": "0", "ts": t, "pid": pid, "dur": 0},
            {"ph": "X", "name": "1", "ts": t + 5, "pid": pid, "dur": 0},
            {"ph": "E", "ts": t + 10, "pid": pid},
            {"ph": "B", "name": "ALLREDUCE", "ts": t + 20, "pid": pid},
            {"ph": "B", "name": "NCCL_ALLREDUCE", "ts": t + 30, "pid": pid},
            {"ph": "E", "ts": t + 30 + wire_us, "pid": pid},
            {"ph": "E", "ts": t + 40 + wire_us, "pid": pid, "args": {"dtype": "float32", "shape": shape}},
        ]
        t += 10_000
    path.write_text(json.dumps(records))
    return path


HOROVOD_BATCHES = [(1_000_000, 1_000_000), (512 * MIB, 3_000), (10_000_000, 1_000_000)]


@pytest.mark.parametrize("link", [10.0, 100.0])
def test_horovod_batches_faster_than_the_link_leave_the_totals(tmp_path: Path, link: float) -> None:
    events = load(horovod_timeline(tmp_path / "timeline.json"), workers=1).events
    analysis = analyze_horovod(events, link_gbps=link)
    batches = analysis.batches.sort("start_ns")
    assert batches.select("bytes", "wire_ns").rows() == HOROVOD_BATCHES
    assert batches["implausible"].to_list() == [busbw_gbps(b, t) > link for b, t in HOROVOD_BATCHES]
    kept = [(b, t) for b, t in HOROVOD_BATCHES if busbw_gbps(b, t) <= link]
    totals = analysis.totals.row(0, named=True)
    assert totals["bytes"] == sum(b for b, _ in kept)
    assert totals["busbw_gbps"] == pytest.approx(sum(b for b, _ in kept) * 8 / sum(t for _, t in kept))
    assert totals["link_utilisation_ratio"] == pytest.approx(totals["busbw_gbps"] / link)
    assert totals["link_utilisation_ratio"] <= 1.0


def test_analyze_json_counts_and_warns(tmp_path: Path) -> None:
    path = horovod_timeline(tmp_path / "timeline.json")
    result = run_timeline("analyze", path, "--link-gbps", "100", "--json")
    assert result.returncode == 0, result.stderr
    summary = msgspec.json.decode(result.stdout)
    assert summary["utilisation"]["implausible"] == 1
    assert summary["utilisation"]["horovod"]["bytes"] == 11_000_000  # 1 MB + 10 MB; not 512 MiB
    line = (
        "1 transfer(s) faster than the 100 Gbit/s link (bus bandwidth above it): left out of link "
        "utilisation (their traffic did not all cross that link, or their time or bytes are wrong; "
        "implausible = true)"
    )
    assert summary["warnings"] == [line]
    table = run_timeline("analyze", path, "--link-gbps", "100")
    assert table.returncode == 0
    assert f"warning: {line}" in table.stderr.splitlines()
    assert "= 44.0% of 100 Gbit/s" in table.stdout  # 11 MB over 2 ms: 44 Gbit/s


def test_collectives_report_marks_the_batch(tmp_path: Path) -> None:
    path = horovod_timeline(tmp_path / "timeline.json")
    result = run_timeline("collectives", path, "--link-gbps", "100", "--json")
    assert result.returncode == 0, result.stderr
    report = msgspec.json.decode(result.stdout)
    assert [b["implausible"] for b in report["horovod"]["batches"]] == [False, True, False]
    assert any(w.startswith("horovod fused batches: 1 transfer(s) faster than") for w in report["warnings"])
    table = run_timeline("collectives", path, "--link-gbps", "100")
    assert table.returncode == 0, table.stderr
    assert "1431655.77 !" in table.stdout  # 512 MiB in 3 µs, marked
    assert "!: faster than the link" in table.stdout


# --- collectives seen on fewer ranks than their group ---------------------------------------------------


def test_one_rank_of_a_group_of_eight_is_not_complete() -> None:
    rows = [gpu("communication", 0, 1_000, rank=0, collective="all_reduce", in_bytes=1_000, group_size=8,
                pg_name="0")]  # fmt: skip
    match = match_collectives(make_events(rows))
    row = match.collectives.row(0, named=True)
    assert (row["ranks"], row["expected_ranks"], row["complete"]) == (1, 8, False)
    assert row["bus_factor"] == pytest.approx(2 * 7 / 8)
    assert any("the other ranks' traces were not given" in w for w in match.warnings)


def test_the_world_size_sets_the_ranks_expected_without_a_group_name() -> None:
    rows = [gpu("communication", 0, 1_000, rank=0, collective="all_reduce", in_bytes=1_000)]
    alone = match_collectives(make_events(rows)).collectives.row(0, named=True)
    assert (alone["expected_ranks"], alone["complete"]) == (1, True)  # nothing says there are more
    row = match_collectives(make_events(rows), world_size=8).collectives.row(0, named=True)
    assert (row["ranks"], row["expected_ranks"], row["complete"]) == (1, 8, False)


def test_collectives_on_one_traced_rank_of_eight_says_so() -> None:
    one = sorted(PARAM.glob("worker0_*"))[0]
    result = run_timeline("collectives", one)
    assert result.returncode == 0, result.stderr
    assert "matched on every rank" not in result.stdout
    assert (
        "8 logical collectives in 1 group across 1 rank; 8 matched on 1 of 8 ranks of their group: "
        "the other ranks' traces were not given" in " ".join(result.stdout.split())
    )
    assert "│   1/8 │" in result.stdout
    data = msgspec.json.decode(run_timeline("collectives", one, "--json").stdout)
    assert {(c["ranks"], c["expected_ranks"], c["complete"]) for c in data["collectives"]} == {(1, 8, False)}
    every = run_timeline("collectives", PARAM)
    assert "8 matched on every rank of their group" in every.stdout.splitlines()[0]


@pytest.mark.parametrize(
    ("metric", "link"),
    [
        ("collective_busbw_gbps", None),
        ("collective_algbw_gbps", None),
        ("collective_link_utilisation_ratio", 100.0),
    ],
)
def test_budgets_never_read_a_transfer_faster_than_physics(metric: str, link: float | None) -> None:
    from timeline.budgets import evaluate_budgets, parse_budgets

    events = make_events(comm_rows())
    frames = frames_of(events, label="physics", matched=True)
    document = {"budgets": [{"metric": metric, "aggregate": "max", "max": 1 if link else 10**9}]}
    report = evaluate_budgets(parse_budgets(document, source="t.toml"), frames, link_gbps=link)
    (verdict,) = report.verdicts
    # Independently: the largest value among the transfers at or below the ceiling (the link, else 900 GB/s).
    ceiling = 7_200.0 if link is None else link
    kept = [(b, t) for b, t in TRANSFERS if busbw_gbps(b, t) <= min(ceiling, 7_200.0)]
    largest = max(busbw_gbps(b, t) for b, t in kept)  # a 2-rank all-reduce: algbw = busbw
    expected = largest / link if link is not None else largest
    assert verdict.value == pytest.approx(expected)
