"""``--bandwidth DIM=LINK`` and ``--latency DIM=VALUE``: reading, checking, the report and its errors."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from tests.builders import SAMPLES, run_timeline
from timeline.errors import UsageError
from timeline.results.whatif import DimensionLatency, DimensionLink, WhatIfReport
from timeline.whatif.settings import (
    check_dimensions,
    parse_dimension_bandwidth,
    parse_latencies,
    parse_measured_links,
    parse_settings,
)

FSDP_TP = SAMPLES / "fsdp2_tp_gloo"


def _settings(bandwidth: str | list[str] | None, latency: str = "0") -> Any:
    return parse_settings(
        bandwidth=bandwidth,
        world_size=None,
        compression="1",
        buckets="measured",
        algorithm="ring",
        latency=latency,
    )


def test_a_per_dimension_setting_is_one_setting() -> None:
    assert parse_dimension_bandwidth("tp=400,dp=25Gbps") == (None, (("tp", 400.0), ("dp", 25.0)))
    assert parse_dimension_bandwidth("10, tp=12.5GB/s") == (10.0, (("tp", 100.0),))
    settings = _settings(["10,25Gbps", "tp=400", "dp=100,50"])
    assert settings.links == [(10.0, ()), (25.0, ()), (None, (("tp", 400.0),)), (50.0, (("dp", 100.0),))]
    assert settings.dimensions == [("--bandwidth", "tp"), ("--bandwidth", "dp")]


def test_a_bare_bandwidth_keeps_today_s_settings() -> None:
    settings = _settings("10,25,100Gbps")
    assert settings.bandwidths == [10.0, 25.0, 100.0]
    assert settings.dimension_bandwidths is None
    assert settings.links == [(10.0, ()), (25.0, ()), (100.0, ())]
    assert _settings(None).links == [(None, ())]


def test_latency_per_dimension() -> None:
    assert parse_latencies("5us") == (5e-6, ())
    assert parse_latencies("tp=1us,dp=0.02ms") == (None, (("tp", 1e-6), ("dp", 2e-5)))  # others measured
    settings = _settings(None, latency="2us,dp=20us")
    assert (settings.latency_s, settings.dimension_latencies) == (2e-6, (("dp", 2e-5),))
    assert settings.dimensions == [("--latency", "dp")]


@pytest.mark.parametrize(
    ("bandwidth", "latency", "message"),
    [
        ("tp=fast", "0", "--bandwidth 'tp=fast': 'fast' is not a bandwidth"),
        ("tp=10,tp=20", "0", "dimension 'tp' is given twice"),
        ("10,20,tp=30", "0", "give one value for every other dimension"),
        ("t p=10", "0", "is not DIMENSION=VALUE"),
        ("tp=", "0", "is not DIMENSION=VALUE"),
        (None, "tp=5", "a duration needs a unit"),
        (None, "tp=2h", "not a duration"),
    ],
)
def test_bad_per_dimension_values_are_refused(bandwidth: str | None, latency: str, message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("(", r"\(")):
        _settings(bandwidth, latency=latency)


def test_an_unknown_dimension_names_the_trace_s() -> None:
    with pytest.raises(UsageError, match=r"no dimension 'pp'; its dimensions: dp, tp"):
        check_dimensions(_settings("tp=10,pp=20"), ["dp", "tp"])
    with pytest.raises(
        UsageError, match=r"--latency ep=…: the trace has no dimension 'ep'; its dimensions: none"
    ):
        check_dimensions(_settings(None, latency="ep=1us"), [])
    check_dimensions(_settings("tp=10", latency="dp=1us"), ["dp", "tp"])


def test_cli_unknown_dimension_is_one_error_line() -> None:
    result = run_timeline("whatif", FSDP_TP, "--link-gbps", "10", "--bandwidth", "pp=100")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(
        "error: --bandwidth pp=…: the trace has no dimension 'pp'; its dimensions: dp, tp"
    )
    assert result.stdout == ""


def test_cli_json_says_which_dimension_changed_and_the_step_of_each() -> None:
    result = run_timeline(
        "whatif",
        FSDP_TP,
        "--link-gbps",
        "10",
        "-b",
        "tp=100",
        "-b",
        "dp=100",
        "-b",
        "100",
        "--latency",
        "tp=1us",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    report = msgspec.json.decode(result.stdout, type=WhatIfReport)
    assert report.version == 4
    assert [(d.dimension, d.group_sizes, len(d.groups)) for d in report.dimensions] == [
        ("dp", [2], 2),
        ("tp", [2], 2),
    ]
    tp_latency = DimensionLatency(dimension="tp", latency_s=1e-6)
    assert report.dimension_latencies == [tp_latency]
    rows = report.scenarios
    assert [(r.bandwidth_gbps, r.dimension_bandwidths) for r in rows] == [
        (10.0, [DimensionLink(dimension="tp", bandwidth_gbps=100.0)]),
        (10.0, [DimensionLink(dimension="dp", bandwidth_gbps=100.0)]),
        (100.0, []),
    ]
    tp, dp, every = (r.iteration_ns for r in rows)
    assert tp != dp
    assert every <= min(tp, dp)
    assert all(r.dimension_latencies == [tp_latency] for r in rows)
    table = run_timeline("whatif", FSDP_TP, "--link-gbps", "10", "-b", "tp=100", "-b", "dp=100")
    assert table.returncode == 0, table.stderr
    assert "dimensions: dp (2 group(s) of 2 ranks" in table.stdout
    assert "tp=100," in table.stdout
    assert "dp=100," in table.stdout


def test_cli_per_dimension_settings_do_not_apply_to_a_seed_profile(tmp_path: Any) -> None:
    profile = tmp_path / "model.bk.log"
    profile.write_text("0.001 4096\n")
    result = run_timeline("seed", profile, "--single-step-ms", "10", "-b", "tp=100")
    assert result.returncode == 2
    assert "per-dimension settings apply to traces" in result.stderr


def test_measured_links_per_dimension() -> None:
    assert parse_measured_links(None) == (None, ())
    assert parse_measured_links("100gbe") == (100.0, ())
    assert parse_measured_links("tp=400,25") == (25.0, (("tp", 400.0),))
    with pytest.raises(UsageError, match="--link-gbps 'tp=x': 'x' is not a bandwidth"):
        parse_measured_links("tp=x")


def test_cli_a_dimension_at_its_measured_link_predicts_the_measured_step() -> None:
    result = run_timeline(
        "whatif", FSDP_TP, "--link-gbps", "10,tp=40", "-b", "tp=40", "-b", "tp=80", "--json"
    )
    assert result.returncode == 0, result.stderr
    report = msgspec.json.decode(result.stdout, type=WhatIfReport)
    assert [(d.dimension, d.link_gbps) for d in report.dimensions] == [("dp", 10.0), ("tp", 40.0)]
    same, faster = report.scenarios
    assert same.iteration_ns == report.self_replay.predicted_ns
    assert faster.iteration_ns < same.iteration_ns
    unknown = run_timeline("whatif", FSDP_TP, "--link-gbps", "pp=40")
    assert unknown.returncode == 2
    assert unknown.stderr.strip().splitlines() == [
        "error: --link-gbps pp=…: the trace has no dimension 'pp'; its dimensions: dp, tp "
        "(give a bare value for every collective)"
    ]


def test_cli_dimension_renames_the_dimension_the_settings_name() -> None:
    renamed = run_timeline(
        "whatif", FSDP_TP, "--dimension", "mesh_dp=fsdp", "--link-gbps", "10", "-b", "fsdp=100", "--json"
    )
    assert renamed.returncode == 0, renamed.stderr
    report = msgspec.json.decode(renamed.stdout, type=WhatIfReport)
    assert [d.dimension for d in report.dimensions] == ["fsdp", "tp"]
    plain_run = run_timeline("whatif", FSDP_TP, "--link-gbps", "10", "-b", "dp=100", "--json")
    plain = msgspec.json.decode(plain_run.stdout, type=WhatIfReport)
    assert report.scenarios[0].iteration_ns == plain.scenarios[0].iteration_ns
    old_name = run_timeline(
        "whatif", FSDP_TP, "--dimension", "mesh_dp=fsdp", "--link-gbps", "10", "-b", "dp=1"
    )
    assert old_name.returncode == 2
    assert "its dimensions: fsdp, tp" in old_name.stderr
