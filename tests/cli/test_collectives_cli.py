"""``timeline collectives`` and the ``--link-gbps``/``--align`` options of ``timeline analyze``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tests.builders import PARAM, TRACES, run_timeline, write_horovod_run_kineto, write_horovod_run_timeline
from timeline.results.base import TIMELINE_VERSION
from timeline.results.collectives import CollectivesReport

HOROVOD_10G = (
    TRACES / "horovod" / "dexhunter_allreduce-experiments" / "horovod-results__32gpu__10g-32-nccl.json"
)


def run_json(*args: object) -> dict[str, Any]:
    result = run_timeline(*map(str, args), "--json")
    assert result.returncode == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def test_param_json_matches_every_collective() -> None:
    data = run_json("collectives", PARAM, "--link-gbps", "nvlink3")
    assert {
        "kind",
        "version",
        "timeline",
        "files",
        "warnings",
        "link_gbps",
        "clock_offsets",
        "ranks",
        "collectives",
        "collective_ranks",
        "mismatches",
        "gpus_per_node",
        "groups",
        "point_to_point",
        "ambiguity",
        "ambiguous",
        "utilisation",
        "stragglers",
        "costs",
        "horovod",
        "collective_groups",
        "complete_collectives",
        "incomplete",
        "ambiguous_events",
        "collectives_by_wait",
        "pairs_by_wait",
        "wait_by_rank",
        "wait_by_rank_iteration",
    } == set(data)
    assert list(data)[:4] == ["kind", "version", "timeline", "files"]
    assert (data["kind"], data["version"]) == ("collectives", 4)
    # #37 added costs: the fixed cost per call and time per byte of each kind (fitted on the transfers,
    # tests/analysis/test_collective_costs.py): no transfer is modelled longer than it took
    costs = {row["collective"]: row for row in data["costs"]}
    assert set(costs) == {"all_reduce", "all_to_all"}
    reduce = costs["all_reduce"]
    assert (reduce["basis"], reduce["calls"], reduce["sizes"], reduce["bus_factor"]) == ("fit", 3, 3, 1.75)
    for row in data["collectives"]:
        if row["collective"] == "all_reduce":
            modelled = reduce["alpha_ns"] + reduce["beta_ns_per_byte"] * row["bytes"] * 1.75
            assert modelled <= row["transfer_ns"] + 1
    assert data["link_gbps"] == 2400.0
    collectives = data["collectives"]
    assert len(collectives) == 8
    assert [c["ranks"] for c in collectives] == [8] * 8
    assert collectives[0]["collective"] == "all_to_all"
    assert collectives[0]["start_skew_ns"] == 7_624_000
    assert max(c["end_skew_ns"] for c in collectives) <= 10_000
    assert [c["last_rank"] for c in collectives] == [7, 7, 7, 7, 7, 5, 5, 4]
    assert len(data["collective_ranks"]) == 64
    assert data["ranks"] == list(range(8))
    assert data["mismatches"] == []
    assert data["stragglers"]["iterations"][0]["straggler_rank"] == 7
    assert data["stragglers"]["iterations"][0]["verdict"] == "slow_rank"
    assert data["utilisation"][0]["iteration"] == 10
    assert data["horovod"] is None
    assert data["clock_offsets"] is None


def test_param_tables() -> None:
    result = run_timeline("collectives", PARAM)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "8 logical collectives in 1 group across 8 ranks; 8 matched on every rank" in out
    assert "7.62 ms" in out
    assert "Who everyone waits for" in out
    assert "slow rank" in out


def test_align_reports_offsets() -> None:
    data = run_json("collectives", PARAM, "--align")
    offsets = data["clock_offsets"]
    assert [o["rank"] for o in offsets] == list(range(8))
    assert max(abs(o["offset_ns"]) for o in offsets) <= 5_000  # one host: clocks already agree


def test_horovod_timeline_alone() -> None:
    data = run_json("collectives", HOROVOD_10G, "--link-gbps", "10gbe")
    assert data["collectives"] == []
    horovod = data["horovod"]
    assert horovod["totals"]["batches"] == 28
    assert horovod["totals"]["world_size"] == 32
    assert horovod["totals"]["link_gbps"] == 10.0
    assert len(horovod["tensors"]) == 28
    assert len(horovod["negotiation"]) == 32
    assert horovod["attribution"] is None
    assert any("no compute events" in line for line in horovod["limitations"])

    result = run_timeline("collectives", HOROVOD_10G, "--limit", "3")
    assert result.returncode == 0, result.stderr
    assert "union over fused tensors" in result.stdout
    assert "Fused batches (the 3 largest of 28)" in result.stdout
    assert "needs more than the timeline" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["collectives", str(PARAM), "--link-gbps", "fast"], "error: --link-gbps 'fast': not a bandwidth"),
        (["collectives", str(HOROVOD_10G), "--align"], "error: --align needs the PyTorch profiler traces"),
        (
            ["analyze", str(PARAM), "--link-gbps", "0"],
            "error: --link-gbps '0': the bandwidth must be positive",
        ),
    ],
)
def test_bad_options_exit_2(args: list[str], message: str) -> None:
    result = run_timeline(*args)
    assert result.returncode == 2
    assert result.stderr.startswith(message), result.stderr
    assert "Traceback" not in result.stderr


def test_analyze_keeps_its_keys_and_adds_utilisation_and_offsets() -> None:
    plain = run_json("analyze", PARAM)
    extended = run_json("analyze", PARAM, "--link-gbps", "100G", "--align")
    # summary layout 4: every key always present, null without --link-gbps and --align
    assert list(extended) == list(plain)
    assert plain["utilisation"] is None
    assert plain["clock_offsets"] is None
    changed: tuple[str, ...] = ("utilisation", "clock_offsets")
    changed += (
        "ranks",
        "iterations",
        "worst",
        "top_collectives",
        "warnings",
    )  # times move by ≤ µs
    changed += ("verdict", "findings")  # #21: the link's bandwidth lets the link's causes be examined
    for key in plain:
        if key not in changed:
            assert extended[key] == plain[key], key
    link_note = "slow_link and link_underused need the link's bandwidth (--link-gbps): not examined"
    assert link_note in plain["verdict"]["notes"]
    assert link_note not in extended["verdict"]["notes"]
    assert extended["verdict"]["link_gbps"] == 100.0
    utilisation = extended["utilisation"]
    # 2 of the 8 collectives (on one host: NVLink) run faster than a 100 Gbit/s link: counted (#19)
    assert utilisation["implausible"] == 2
    assert extended["warnings"] == [*plain["warnings"], extended["warnings"][-1]]
    assert extended["warnings"][-1].startswith("2 transfer(s) faster than the 100 Gbit/s link")
    assert utilisation["link_gbps"] == 100.0
    assert utilisation["iterations"][0]["iteration"] == 10
    assert utilisation["iterations"][0]["busbw_gbps"] > 0
    assert utilisation["horovod"] is None
    assert len(extended["clock_offsets"]) == 8


def test_analyze_tables_with_link() -> None:
    result = run_timeline("analyze", PARAM, "--link-gbps", "100")
    assert result.returncode == 0, result.stderr
    assert "Link utilisation against 100 Gbit/s" in result.stdout


def test_horovod_timeline_with_rank_0_profile(tmp_path: Path) -> None:
    write_horovod_run_kineto(tmp_path / "rank0.json")
    write_horovod_run_timeline(tmp_path / "timeline.json")
    data = run_json("collectives", tmp_path / "rank0.json", tmp_path / "timeline.json")
    attribution = data["horovod"]["attribution"]
    assert attribution["writer_rank"] == 0
    row = attribution["iterations"][0]
    assert (row["iteration"], row["wire_ns"], row["exposed_wire_ns"]) == (1, 200_000, 100_000)
    assert not any("no compute events" in line for line in data["horovod"]["limitations"])
    assert len(data["collectives"]) == 1  # rank 0's NCCL kernel, matched on the one rank loaded

    result = run_timeline("collectives", tmp_path / "rank0.json", tmp_path / "timeline.json")
    assert result.returncode == 0, result.stderr
    assert "Horovod against rank 0's compute" in result.stdout


@pytest.mark.parametrize("path", [PARAM, HOROVOD_10G], ids=["param", "horovod"])
def test_json_decodes_into_the_report_type(path: Path) -> None:
    result = run_timeline("collectives", str(path), "--json", "--link-gbps", "100")
    assert result.returncode == 0, result.stderr
    report = msgspec.json.decode(result.stdout, type=CollectivesReport)
    assert (report.version, report.timeline) == (4, TIMELINE_VERSION)
    assert result.stdout.startswith('{"kind":"collectives","version":4,"timeline":')
    assert msgspec.json.encode(report).decode() == result.stdout.rstrip("\n")
