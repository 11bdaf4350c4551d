"""``timeline whatif``: tables, JSON, targets, and one-line errors with exit code 2."""

from __future__ import annotations

import json

import msgspec
import pytest

from tests.builders import REPO, TRACES, run_timeline
from timeline import __version__
from timeline.errors import UsageError
from timeline.results.whatif import WhatIfReport
from timeline.whatif.settings import parse_bandwidths

MARKERS = REPO / "sample_traces" / "ddp_gloo_markers"


def test_json_sweep() -> None:
    result = run_timeline(
        "whatif",
        MARKERS,
        "--bandwidth",
        "10,25Gbps",
        "--world-size",
        "8,64",
        "--compression",
        "1,2",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    assert "note: the measured link is unknown" in result.stderr
    keys = list(json.loads(result.stdout))
    assert keys[:3] == ["kind", "version", "timeline"]  # first, so that a reader knows what follows
    assert keys == [
        "kind",
        "version",
        "timeline",
        "ranks",
        "modes",
        "iterations",
        "world_size",
        "link_gbps",
        "link_source",
        "gradient_source",
        "collectives",
        "efficiency",
        "latency_s",
        "algorithm",
        "codec_gbps",
        "dimensions",
        "dimension_latencies",
        "costs",
        "self_replay",
        "scenarios",
        "targets",
        "notes",
        "warnings",
    ]
    report = msgspec.json.decode(result.stdout, type=WhatIfReport)
    assert (report.version, report.timeline) == (4, __version__)
    assert report.ranks == [0, 1]
    assert report.iterations == [2, 3, 4]
    assert report.gradient_source == "markers"
    assert report.efficiency == "full"
    assert report.self_replay.error_ratio == 0
    assert len(report.self_replay.iterations) == 3
    # the trace's own scaling factor: T_single over the measured iteration (the report's tab draws it)
    check = report.self_replay
    assert check.measured_scaling_factor == pytest.approx(check.single_ns / check.measured_ns, rel=1e-6)
    scenarios = report.scenarios
    assert [(s.bandwidth_gbps, s.world_size, s.compression) for s in scenarios] == [
        (10.0, 8, 1.0),
        (10.0, 8, 2.0),
        (10.0, 64, 1.0),
        (10.0, 64, 2.0),
        (25.0, 8, 1.0),
        (25.0, 8, 2.0),
        (25.0, 64, 1.0),
        (25.0, 64, 2.0),
    ]
    for s in scenarios:
        assert 0 < s.scaling_factor <= 1
        assert s.no_overlap_ns is not None
        assert s.single_ns <= s.iteration_ns
        assert s.single_ns <= s.no_overlap_ns
        if s.compression == 1.0:
            assert s.iteration_ns <= s.no_overlap_ns
    # with 2x compression at 25 Gbit/s the transfers are short: the no-overlap schedule (every bucket
    # after backward) drops the waits the backward pass had on them (compute resumed within 50 µs of
    # a gloo thread's end on 2 shared cores), and comes out 0.3 ms under the overlapped step
    shorter = [s for s in scenarios if s.no_overlap_ns is not None and s.no_overlap_ns < s.iteration_ns]
    assert {(s.bandwidth_gbps, s.compression) for s in shorter} <= {(25.0, 2.0)}


def test_tables_and_targets() -> None:
    result = run_timeline(
        "whatif",
        MARKERS,
        "--link-gbps",
        "1",
        "--bandwidth",
        "0.5,1,10",
        "--buckets",
        "measured,ddp:1",
        "--target-sf",
        "0.7",
        "--latency",
        "5us",
        "--algorithm",
        "tree",
        "--codec-gbps",
        "40",
        "--compression",
        "1,4",
        "--iteration",
        "3",
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "self-replay" in out
    assert "error 0.0%" in out
    assert "measured link 1 Gbit/s (--link-gbps)" in out
    for text in ("ddp:1", "0.5 Gbit/s", "4×"):
        assert text in out
    # 0.7: the sample's compute (the time inside calls into c10d left out, #20) puts 0.8 out of reach
    assert "scaling factor 0.7 at world size 2: bandwidth" in out
    assert "efficiency observed, tree, latency 5 µs/step, codec 40 Gbit/s" in out


def test_defaults_are_the_measured_conditions() -> None:
    result = run_timeline("whatif", TRACES / "kineto" / "param_dlrm_8rank", "--json")
    assert result.returncode == 0, result.stderr
    report = msgspec.json.decode(result.stdout, type=WhatIfReport)
    (row,) = report.scenarios
    assert row.iteration_ns == row.measured_ns == report.self_replay.measured_ns
    assert row.world_size == 8
    assert report.efficiency == "observed"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--bandwidth", "fast"], "--bandwidth 'fast': not a bandwidth"),
        (["--bandwidth", "10", "--efficiency", "observed"], "the measured link is unknown"),
        (["--efficiency", "2"], "--efficiency '2': a fraction must be in (0, 1]"),
        (["--buckets", "ddp"], "'ddp': not a bucketing policy"),
        (["--compression", "0.5"], "compression ratio 0.5: must be at least 1"),
        (["--compression", "two"], "--compression 'two': 'two' is not a number"),
        (["--world-size", "0"], "--world-size 0: must be at least 1"),
        (["--latency", "5"], "a duration needs a unit"),
        (["--algorithm", "star"], "--algorithm 'star': use ring or tree"),
    ],
)
def test_bad_options(args: list[str], message: str) -> None:
    result = run_timeline("whatif", MARKERS, *args)
    assert result.returncode == 2
    assert result.stderr.startswith("error: ")
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_horovod_timeline_alone_is_replayed_with_notes() -> None:
    """Refused before #22; now replayed with a derived compute (tests/whatif/test_horovod_whatif.py)."""
    path = TRACES / "horovod" / "alcf_workshop__timeline_gpu_n1.json"
    result = run_timeline("whatif", path, "--verbose")  # without it, the notes are one counted line
    assert result.returncode == 0, result.stderr
    assert "note: no all-reduce in the timeline" in result.stdout


def test_parse_bandwidths() -> None:
    assert parse_bandwidths("10,25,40,100Gbps") == [10.0, 25.0, 40.0, 100.0]
    assert parse_bandwidths("100,400GbE") == [100.0, 400.0]
    assert parse_bandwidths("measured,12.5GB/s") == [None, 100.0]
    with pytest.raises(UsageError, match="give one or more"):
        parse_bandwidths(" , ")
