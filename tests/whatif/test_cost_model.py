"""The replay charges merged and split collectives their fitted cost: α per call, β per byte (#37).

A hand-made 2-rank gloo run whose four all-reduces (1,000 to 8,000 bytes, one after the other on
gloo's thread) each take exactly ``10 µs + 0.8 ns per byte``: the fit gives both back, a rebuilt
bucket costs the line, a faster link shortens the bytes' part only, a lower latency the calls'. Every
expected step is worked out here by hand, in µs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.builders import kineto_document, latency_bound_gloo_rank, make_events, run_timeline, write_json
from timeline.whatif.bucketing import MEASURED, BucketPolicy, DDPBuckets
from timeline.whatif.engine import Scenario, cost_fit, replay
from timeline.whatif.graph import TraceGraph, build_graph
from timeline.whatif.settings import Settings
from timeline.whatif.sweeps import predict_buckets, sweep

US = 1_000
ALPHA_NS, BETA_NS_PER_BYTE = 10 * US, 0.8  # latency_bound_gloo_rank's (2 ranks: bus factor 1)


def _graph(link_gbps: float | None = None) -> TraceGraph:
    return build_graph(
        make_events(latency_bound_gloo_rank(0) + latency_bound_gloo_rank(1)), link_gbps=link_gbps
    )


def _step_us(graph: TraceGraph, scenario: Scenario) -> float:
    return replay(graph, scenario=scenario).iteration_ns / US


def test_the_graph_fit_gives_alpha_and_beta_back() -> None:
    row = cost_fit(_graph()).row(0, named=True)
    assert (row["collective"], row["basis"], row["calls"], row["sizes"]) == ("all_reduce", "fit", 4, 4)
    assert row["alpha_ns"] == pytest.approx(ALPHA_NS)
    assert row["beta_ns_per_byte"] == pytest.approx(BETA_NS_PER_BYTE)


def test_a_merged_bucket_costs_one_call_and_its_bytes() -> None:
    # one bucket of 15,000 bytes, ready with the last gradient (its marker ends at 55.99 µs): 10 µs +
    # 12 µs, [55.99, 77.99); the update [77.99, 87.99). The four calls cost 52 µs as measured.
    merged = Scenario(buckets=DDPBuckets(cap_bytes=1 << 20, first_cap_bytes=1 << 20))
    assert _step_us(_graph(), merged) == pytest.approx(87.99)
    # split per gradient (a cap below each): the measured calls again, each ready at its gradient
    split = Scenario(buckets=DDPBuckets(cap_bytes=1, first_cap_bytes=1))
    assert _step_us(_graph(), split) == pytest.approx(112 - 0.01, abs=0.02)


def test_a_faster_link_shortens_the_bytes_and_not_the_calls() -> None:
    # at twice the 10 Gbit/s link each call keeps its 10 µs and halves its bytes: 10 + 0.4, 10 + 0.8,
    # 10 + 1.6, 10 + 3.2 µs from 50: the last ends at 50 + 40 + 6 = 96, the update at 106
    graph = _graph(link_gbps=10)
    assert _step_us(graph, Scenario(bandwidth_gbps=20)) == pytest.approx(106)


def test_a_lower_latency_shortens_the_calls_and_not_the_bytes() -> None:
    # latency 0: no fixed cost, the bytes alone, each call from its c10d call or the previous end:
    # [50, 50.8), [52, 53.6), [54, 57.2), [57.2, 63.6); the update [63.6, 73.6)
    assert _step_us(_graph(), Scenario(latency_s=0.0)) == pytest.approx(73.6)
    # 1 µs per step, 2 steps of a 2-rank ring all-reduce: 2 µs per call in place of 10:
    # [50, 52.8), [52.8, 56.4), [56.4, 61.6), [61.6, 70); the update [70, 80)
    assert _step_us(_graph(), Scenario(latency_s=1e-6)) == pytest.approx(80)


def test_compression_divides_the_bytes_and_keeps_the_calls() -> None:
    from timeline.whatif.compression import Compression

    # 4x, a free codec: 10 µs + a quarter of the bytes each: 40 + 3 µs from 50, update at 93
    assert _step_us(_graph(), Scenario(compression=Compression(ratio=4))) == pytest.approx(103)


def test_sweep_rows_are_the_bucket_predictions() -> None:
    graph = _graph()
    policies: list[BucketPolicy] = [MEASURED, DDPBuckets(cap_bytes=1 << 20, first_cap_bytes=1 << 20)]
    table = sweep(graph, Settings(buckets=policies), bounds=False)
    predicted = [round(p.iteration_ns) for p in predict_buckets(graph, policies)]
    assert table.get_column("iteration_ns").to_list() == predicted == [112 * US, 87_990]


def test_whatif_json_has_the_costs_and_a_measured_latency(tmp_path: Path) -> None:
    rows = latency_bound_gloo_rank(0) + latency_bound_gloo_rank(1)
    for rank in (0, 1):
        write_json(tmp_path / f"rank{rank}.json", kineto_document(rows, rank))
    done = run_timeline("whatif", tmp_path, "--buckets", "measured,ddp:1:1", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["version"] == 4
    assert report["latency_s"] is None
    [cost] = report["costs"]
    assert (cost["collective"], cost["basis"]) == ("all_reduce", "fit")
    assert cost["alpha_ns"] == pytest.approx(ALPHA_NS, abs=1)
    assert cost["beta_ns_per_byte"] == pytest.approx(BETA_NS_PER_BYTE, abs=1e-3)
