"""Sweeps and the searches for the bandwidth or compression that reaches a scaling factor."""

from __future__ import annotations

import pytest

from tests.whatif.synthetic import gpu_rank, gpu_run
from timeline.errors import UsageError
from timeline.whatif import (
    MEASURED,
    SWEEP_SCHEMA,
    Scenario,
    parse_bucket_policy,
    replay,
    solve_bandwidth,
    solve_compression,
    sweep,
)
from timeline.whatif.engine import single_replay
from timeline.whatif.graph import TraceGraph, build_graph
from timeline.whatif.settings import Settings


def graph() -> TraceGraph:
    # compute [0, 200) µs, 0.8 Mbit all-reduce on [110, 250) at 8 Gbit/s, update [255, 300).
    return build_graph(gpu_run(gpu_rank()), link_gbps=8.0)


def test_sweep_rows() -> None:
    settings = Settings(
        bandwidths=[None, 16.0],
        world_sizes=[None, 4],
        compressions=[1.0, 2.0],
        buckets=[parse_bucket_policy("measured"), parse_bucket_policy("ddp:25")],
    )
    table = sweep(graph(), settings)
    assert table.schema == SWEEP_SCHEMA
    assert table.height == 16
    first = table.row(0, named=True)
    assert first["bandwidth_gbps"] == 8.0  # the measured link, filled in
    assert first["world_size"] == 2
    assert first["iteration_ns"] == first["measured_ns"] == 300_000
    assert first["single_ns"] == 245_000
    assert first["scaling_factor"] == pytest.approx(245 / 300)
    assert first["no_overlap_ns"] == 300_000
    assert first["perfect_overlap_scaling_factor"] == pytest.approx(1.0)
    assert set(table.get_column("buckets")) == {"measured", "ddp:25"}
    fast = table.filter(
        (table["bandwidth_gbps"] == 16.0) & (table["world_size"] == 2) & (table["compression"] == 1.0)
    )
    # twice the link: the all-reduce ends at 180, before compute reaches the update at 200, which then
    # starts at once (its 5 µs resume delay is a wake-up after an end it no longer waits for)
    assert fast.get_column("iteration_ns").to_list() == [245_000, 245_000]
    no_bounds = sweep(graph(), Settings(), bounds=False)
    assert no_bounds.get_column("no_overlap_ns").to_list() == [None]


def test_solve_bandwidth_and_compression() -> None:
    g = graph()
    # SF = 245 / (max(200, 110 + 1120 / B + 5) + 45) (the update resumes 5 µs after the all-reduce ends,
    # or when compute gets there) reaches 0.9 at B = 1120 / 112.2 ≈ 9.98 Gbit/s.
    bandwidth = solve_bandwidth(g, 0.9)
    assert bandwidth is not None
    assert bandwidth == pytest.approx(1120 / (245 / 0.9 - 45 - 115), rel=0.01)
    single = single_replay(g)
    assert replay(g, scenario=Scenario(bandwidth_gbps=bandwidth), single=single).scaling_factor >= 0.9
    assert replay(g, scenario=Scenario(bandwidth_gbps=bandwidth * 0.98), single=single).scaling_factor < 0.9
    # 0.99: 115 + 1120 / B ≤ 245 / 0.99 - 45 = 202.5, B ≥ 12.8 Gbit/s; 1.0 would need an infinite link
    assert solve_bandwidth(g, 0.99) == pytest.approx(1120 / (245 / 0.99 - 45 - 115), rel=0.01)
    assert solve_bandwidth(g, 0.5) == pytest.approx(1120 / (490 - 160), rel=0.01)
    assert solve_bandwidth(g, 0.5, low_gbps=5.0) == 5.0  # already enough at the low end
    # At the measured 8 Gbit/s, a ratio of 140 / 112.2 ≈ 1.25 does it; none is needed for 0.8.
    assert solve_compression(g, 0.9) == pytest.approx(140 / 112.2, rel=0.01)
    assert solve_compression(g, 0.8) == 1.0
    assert solve_compression(g, 0.99) == pytest.approx(140 / (245 / 0.99 - 45 - 115), rel=0.01)
    # 1.0: the all-reduce must end 5 µs before compute reaches the update: 110 + 140 / c ≤ 195
    assert solve_compression(g, 1.0) == pytest.approx(140 / 85, rel=0.01)


def test_the_settings_travel_whole_into_each_scenario() -> None:
    """Every row replays one combination with the settings they share, in the order of the lists."""
    settings = Settings(
        bandwidths=[None, 16.0],
        dimension_bandwidths=[(), (("tp", 40.0),)],
        world_sizes=[4],
        compressions=[1.0, 2.0],
        efficiency=0.5,
        latency_s=1e-6,
        dimension_latencies=(("tp", 2e-6),),
        algorithm="tree",
        codec_gbps=8.0,
    )
    scenarios = settings.scenarios()
    assert [(s.bandwidth_gbps, s.dimension_bandwidths, s.compression.ratio) for s in scenarios] == [
        (None, (), 1.0),
        (None, (), 2.0),
        (16.0, (("tp", 40.0),), 1.0),
        (16.0, (("tp", 40.0),), 2.0),
    ]
    for s in scenarios:
        assert (s.world_size, s.efficiency, s.latency_s, s.algorithm) == (4, 0.5, 1e-6, "tree")
        assert s.dimension_latencies == (("tp", 2e-6),)
        assert s.compression.codec_bytes_per_s == 8e9 / 8  # Gbit/s of gradient → bytes per second
        assert s.buckets == MEASURED
    table = sweep(graph(), settings)
    assert table.get_column("efficiency").to_list() == ["0.5"] * 4
    assert table.get_column("latency_s").to_list() == [1e-6] * 4
    with pytest.raises(UsageError, match="one entry per bandwidth"):
        Settings(bandwidths=[None, 16.0], dimension_bandwidths=[()])
