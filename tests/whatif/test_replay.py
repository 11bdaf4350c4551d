"""The replay on hand-made runs: every number below is computed by hand in the comments."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import make_events
from tests.whatif.synthetic import US, gloo_rank, gpu_rank, gpu_run
from timeline.errors import UsageError
from timeline.whatif.bucketing import DDPBuckets, FusionBuckets
from timeline.whatif.compression import Compression
from timeline.whatif.engine import Scenario, replay, self_replay, single_replay
from timeline.whatif.graph import TraceGraph, build_graph

# gpu_rank(): compute [0, 200) µs, all-reduce of 100 kB on [110, 250) (ready at 100, 10 µs launch
# delay), the update [255, 300) waits for it (resume delay 5 µs). Link 8 Gbit/s: 0.8 Mbit in 140 µs.


def gpu_graph() -> TraceGraph:
    return build_graph(gpu_run(gpu_rank()), link_gbps=8.0)


def predicted_us(graph: TraceGraph, scenario: Scenario) -> float:
    return replay(graph, scenario=scenario).iteration_ns / US


def test_self_replay_reproduces_the_trace() -> None:
    prediction = self_replay(gpu_graph())
    assert prediction.iteration_ns == prediction.measured_ns == 300 * US
    assert prediction.error_ratio == 0
    assert prediction.exposed_comm_ns == 50 * US  # [200, 250): nothing computes
    assert prediction.single_ns == 245 * US  # the update follows backward at once
    assert prediction.scaling_factor == pytest.approx(245 / 300)
    assert prediction.perfect_overlap_ns == 245 * US  # max(T_single, 140 µs on the link)
    row = prediction.iterations.row(0, named=True)
    assert (row["iteration"], row["ranks"], row["error_ratio"]) == (1, 1, 0.0)


@pytest.mark.parametrize(
    ("scenario", "expected_us"),
    [
        # observed efficiency, twice the link: 70 µs, hidden by backward (ends at 180); the update
        # starts when compute gets there, at 200 (its 5 µs resume delay is a wake-up after the end, which
        # an all-reduce already ended does not cost).
        (Scenario(bandwidth_gbps=16), 245),
        # an eighth of the link: 1120 µs → ends at 1230, update at 1235, 45 µs long.
        (Scenario(bandwidth_gbps=1), 1280),
        # the full link at 16 Gbit/s: 0.8 Mbit in 50 µs, ended at 160: the update at 200.
        (Scenario(bandwidth_gbps=16, efficiency="full"), 245),
        # 4 ranks: 2(n−1)/n goes from 1 to 1.5: 210 µs → [110, 320), update at 325.
        (Scenario(world_size=4), 370),
        # the tree moves 2·8S whatever n: at the measured n it is the measured time.
        (Scenario(algorithm="tree"), 300),
        # 2x compression, free codec: 70 µs, ended at 180: the update at 200.
        (Scenario(compression=Compression(ratio=2)), 245),
        # 2x with a 1 GB/s codec: encode 100 µs delays compute and the all-reduce (ready 200,
        # start 210), which takes 70 + 100 (decode) → 380; compute reaches the wait at 300; 385 + 45.
        (Scenario(compression=Compression(ratio=2, codec_bytes_per_s=1e9)), 430),
        # latency 1 µs per step: 2 steps + 50 µs at the full 16 Gbit/s, still hidden: the update at 200.
        (Scenario(bandwidth_gbps=16, efficiency="full", latency_s=1e-6), 245),
        # no overlap with one bucket changes nothing: it already leaves at the end of backward.
        (Scenario(overlap="none"), 300),
    ],
)
def test_gpu_what_ifs(scenario: Scenario, expected_us: float) -> None:
    assert predicted_us(gpu_graph(), scenario) == pytest.approx(expected_us, abs=0.01)


def test_observed_efficiency_needs_the_measured_link_to_move_bandwidth() -> None:
    graph = build_graph(gpu_run(gpu_rank()))
    with pytest.raises(UsageError, match="measured link is unknown"):
        replay(graph, scenario=Scenario(bandwidth_gbps=16))
    with pytest.raises(UsageError, match="predicts on a link of known bandwidth"):
        replay(graph, scenario=Scenario(efficiency="full"))
    assert predicted_us(graph, Scenario(bandwidth_gbps=16, efficiency="full")) == pytest.approx(245)
    assert predicted_us(graph, Scenario(world_size=4)) == pytest.approx(370)  # relative: no link needed


def test_a_late_rank_holds_the_collective() -> None:
    # Rank 1 starts the all-reduce at 150: the transfer is [150, 250) (lag 1 µs on rank 1).
    graph = build_graph(gpu_run(gpu_rank(0, comm=(110, 250)), gpu_rank(1, comm=(150, 251))), link_gbps=8.0)
    assert self_replay(graph).iteration_ns == 300 * US
    # Twice the link: the transfer takes 50 µs from 150, both ranks resume at 205 (delays 5 and 4).
    windows = replay(graph, scenario=Scenario(bandwidth_gbps=16)).windows
    assert windows.get_column("predicted_ns").to_list() == [250 * US, 250 * US]


def test_concurrent_collectives_share_the_link() -> None:
    rows = gpu_rank()
    extra = {**rows[6], "stream": 21, "tid": 21, "correlation": 5, "start_ns": 180 * US, "end_ns": 250 * US}
    rows += [extra, {**rows[2], "correlation": 5, "start_ns": 1500, "end_ns": 1501}]
    graph = build_graph(make_events(rows), link_gbps=8.0)
    # Measured link time alone: A = 70 + 70/2 = 105 µs, B = 70/2 = 35 µs.
    assert sorted(i.work_ns for i in graph.instances) == [35 * US, 105 * US]
    assert self_replay(graph).iteration_ns == 300 * US
    # Half the link: A alone 70 µs of 210 until B starts at 180; together B's 70 takes 140 (to 320);
    # A's last 70 alone → 390; the update resumes at 395 and ends 45 µs later.
    assert predicted_us(graph, Scenario(bandwidth_gbps=4)) == pytest.approx(440, abs=0.01)


def gloo_graph() -> TraceGraph:
    # gloo_rank(): grads of 1000 B at 45 and 3000 B at 48 µs, c10d call at 50, all-reduce [60, 160)
    # of 4000 B, the main thread waits in [100, 170) (resume delay 10), optimizer [170, 195).
    return build_graph(make_events(gloo_rank()), link_gbps=1.0)


def test_gloo_self_replay_and_single() -> None:
    prediction = self_replay(gloo_graph())
    assert prediction.iteration_ns == 200 * US
    assert prediction.single_ns == 130 * US  # the 70 µs wait vanishes
    assert prediction.exposed_comm_ns == 60 * US  # [100, 160)


@pytest.mark.parametrize(
    ("scenario", "expected_us"),
    [
        # twice the link: [60, 110), resume at 120.
        (Scenario(bandwidth_gbps=2), 150),
        # DDP caps 500 B then 2000 B: buckets of 1000 B (ready 45) and 3000 B (ready 48); 10 µs launch
        # delay, 25 µs per 1000 B: [55, 80), then the one gloo thread frees at 80: [90, 165); resume 175.
        (Scenario(buckets=DDPBuckets(cap_bytes=2000, first_cap_bytes=500)), 205),
        # fusion with a 2 µs cycle: both gradients in one bucket at 48: [58, 158); resume 168.
        (Scenario(buckets=FusionBuckets(fusion_bytes=1 << 20, cycle_ns=2 * US)), 198),
        # no overlap: one bucket when backward ends (the launch at 50), as measured.
        (Scenario(overlap="none"), 200),
    ],
)
def test_gloo_what_ifs(scenario: Scenario, expected_us: float) -> None:
    assert predicted_us(gloo_graph(), scenario) == pytest.approx(expected_us, abs=0.01)


def test_uniform_efficiency_and_single_replay_frame() -> None:
    graph = gloo_graph()
    assert replay(graph, scenario=Scenario(efficiency="uniform")).iteration_ns == 200 * US
    single = single_replay(graph)
    assert single.columns == ["window_id", "single_ns"]
    assert single.get_column("single_ns").to_list() == [130 * US]


@pytest.mark.parametrize(
    "kwargs",
    [{"bandwidth_gbps": 0}, {"world_size": 0}, {"efficiency": 1.5}, {"latency_s": -1.0}],
)
def test_bad_scenarios(kwargs: dict[str, Any]) -> None:
    with pytest.raises(UsageError):
        Scenario(**kwargs)
