"""The α-β fit of a collective's cost (``timeline.analysis.collective_costs``).

Generated NCCL traces whose transfers cost exactly ``α + β · S · bus factor`` (the generator's
``costs``): the fit must give back ``α`` and ``β`` through ``timeline collectives --json``, with
several sizes on a group, with one size on a group whose link another group's sizes fit, and with
the link given; and say it cannot separate them where one size is all there is. The uncertainty
and the robustness are checked against computations made here.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.builders import run_timeline
from tests.generators.nccl import Collective, device_mesh_job, write_job
from timeline.analysis.collective_costs import (
    COST_POINTS_SCHEMA,
    cell_costs,
    exclusive_work,
    fit_collective_costs,
)
from timeline.whatif.costs import latency_steps

BF16 = 2


def _costs(directory: Path, *extra: str) -> list[dict[str, Any]]:
    done = run_timeline("collectives", directory, "--json", *extra)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["version"] == 4
    rows: list[dict[str, Any]] = report["costs"]
    return rows


def _row(rows: list[dict[str, Any]], collective: str, group: str) -> dict[str, Any]:
    (row,) = [r for r in rows if r["collective"] == collective and r["group"] == group]
    return row


def test_several_sizes_give_alpha_and_beta_back_exactly(tmp_path: Path) -> None:
    alpha, beta = 15_000, 0.04  # 25 GB/s of bus bandwidth
    elements = (250_000, 500_000, 1_000_000, 2_000_000)
    schedule = [Collective("dp", "all_reduce", n) for n in elements]
    schedule += [Collective("dp", "all_gather", n) for n in elements[:3]]
    job = device_mesh_job([("dp", 2)], steps=2, schedule=schedule, costs={"dp": (alpha, beta)})
    write_job(job, tmp_path)
    rows = _costs(tmp_path)
    for kind in ("all_reduce", "all_gather"):
        row = _row(rows, kind, "1")  # mesh_dp [0, 1]
        assert row["basis"] == "fit"
        assert row["dimension"] == "dp"
        assert row["calls"] == 2 * (4 if kind == "all_reduce" else 3)
        assert row["alpha_ns"] == pytest.approx(alpha, abs=1e-6)
        assert row["beta_ns_per_byte"] == pytest.approx(beta, rel=1e-12)
        assert row["busbw_gbps"] == pytest.approx(8 / beta, rel=1e-12)
        assert row["alpha_se_ns"] == pytest.approx(0, abs=1e-6)
        assert row["beta_se_ns_per_byte"] == pytest.approx(0, abs=1e-12)
    # the generator's transfers, by hand: an all-gather of n elements per rank moves 2n · 2 bytes, half
    truth = [c for c in job.collectives if c.kind == "all_gather"]
    for c in truth:
        transfer = min(c.end_ns.values()) - max(c.start_ns.values())
        assert transfer == alpha + round(beta * c.out_bytes * 0.5)


def test_one_size_takes_beta_from_a_second_group_on_the_same_link(tmp_path: Path) -> None:
    alpha, beta = 8_000, 0.02
    schedule = [Collective("tp", "all_reduce", n, only=0) for n in (250_000, 500_000, 1_000_000)]
    schedule.append(Collective("tp", "all_reduce", 500_000, only=1))
    job = device_mesh_job([("dp", 2), ("tp", 2)], steps=3, schedule=schedule, costs={"tp": (alpha, beta)})
    write_job(job, tmp_path)
    rows = _costs(tmp_path)
    groups = {g.ranks: g.name for g in job.groups if g.desc == "mesh_tp"}
    spread, single = _row(rows, "all_reduce", groups[(0, 1)]), _row(rows, "all_reduce", groups[(2, 3)])
    assert (spread["basis"], spread["sizes"]) == ("fit", 3)
    assert (single["basis"], single["sizes"]) == ("pooled", 1)
    for row in (spread, single):
        assert row["alpha_ns"] == pytest.approx(alpha, abs=1e-6)
        assert row["beta_ns_per_byte"] == pytest.approx(beta, rel=1e-12)


def test_one_size_alone_cannot_be_separated_even_with_the_link(tmp_path: Path) -> None:
    alpha, beta = 15_000, 0.04
    schedule = [Collective("dp", "all_reduce", 500_000)] * 3
    job = device_mesh_job([("dp", 2)], steps=2, schedule=schedule, costs={"dp": (alpha, beta)})
    write_job(job, tmp_path)
    for extra in ((), ("--link-gbps", "200")):  # the link bounds β from below; it does not give it
        row = _row(_costs(tmp_path, *extra), "all_reduce", "1")
        assert row["basis"] == "cannot_separate"
        assert (row["alpha_ns"], row["beta_ns_per_byte"], row["busbw_gbps"]) == (None, None, None)
        assert row["median_ns"] == alpha + beta * 500_000 * BF16


def test_the_link_is_a_floor_of_the_slope() -> None:
    # sizes whose times do not grow: a fixed cost; with a 1 Gbit/s link, 8 ns per byte at least
    rows = [("all_reduce", "0", 2, s, 100_000.0) for s in (1000, 2000, 4000)]
    free = fit_collective_costs(_points(rows)).row(0, named=True)
    assert (free["alpha_ns"], free["beta_ns_per_byte"]) == (100_000.0, 0.0)
    floored = fit_collective_costs(_points(rows), link_gbps=1.0).row(0, named=True)
    assert floored["beta_ns_per_byte"] == 8.0
    assert floored["alpha_ns"] == 100_000.0 - 8.0 * 2000  # the median intercept


def _points(rows: list[tuple[str, str, int, int, float]]) -> pl.DataFrame:
    return pl.DataFrame(
        [(kind, group, None, n, nbytes, t) for kind, group, n, nbytes, t in rows],
        schema=COST_POINTS_SCHEMA,
        orient="row",
    )


def test_an_outlier_does_not_move_the_fit() -> None:
    exact = [("all_reduce", "0", 2, s, 1000.0 + 0.5 * s) for s in (1000, 2000, 4000, 8000) for _ in range(3)]
    slowed = [*exact, ("all_reduce", "0", 2, 4000, 50_000.0)]  # one call held up by something else
    row = fit_collective_costs(_points(slowed)).row(0, named=True)
    assert (row["alpha_ns"], row["beta_ns_per_byte"], row["basis"]) == (1000.0, 0.5, "fit")


def test_the_uncertainty_is_the_least_squares_error_with_the_robust_noise() -> None:
    sizes = [1000, 2000, 4000, 8000, 16000]
    noise = [30.0, -20.0, 10.0, -40.0, 25.0]
    rows = [("all_reduce", "0", 2, s, 500.0 + 0.25 * s + e) for s, e in zip(sizes, noise, strict=True)]
    row = fit_collective_costs(_points(rows)).row(0, named=True)
    # Theil-Sen by hand: the median of the pairwise slopes, then the median intercept
    ys = [500.0 + 0.25 * s + e for s, e in zip(sizes, noise, strict=True)]
    slopes = [
        (ys[j] - ys[i]) / (sizes[j] - sizes[i]) for i in range(len(sizes)) for j in range(i + 1, len(sizes))
    ]
    beta = statistics.median(slopes)
    alpha = statistics.median(y - beta * x for x, y in zip(sizes, ys, strict=True))
    sd = 1.4826 * statistics.median(abs(y - alpha - beta * x) for x, y in zip(sizes, ys, strict=True))
    mean = statistics.fmean(sizes)
    sxx = sum((x - mean) ** 2 for x in sizes)
    assert row["beta_ns_per_byte"] == pytest.approx(beta)
    assert row["alpha_ns"] == pytest.approx(alpha)
    assert row["beta_se_ns_per_byte"] == pytest.approx(sd / math.sqrt(sxx))
    assert row["alpha_se_ns"] == pytest.approx(sd * math.sqrt(1 / len(sizes) + mean**2 / sxx))


def test_noise_as_large_as_the_calls_leaves_them_unseparated() -> None:
    # three sizes, each as fast and as slow as the others: per call or per byte, nothing tells
    times = [(1000, 900.0), (2000, 100.0), (4000, 900.0), (1000, 100.0), (2000, 900.0), (4000, 100.0)]
    rows = [("all_reduce", "0", 2, s, t) for s, t in times]
    assert fit_collective_costs(_points(rows)).row(0, named=True)["basis"] == "cannot_separate"
    assert cell_costs(fit_collective_costs(_points(rows))) == {}


def test_a_given_latency_gives_alpha_where_nothing_else_does() -> None:
    rows = [("all_reduce", "0", 4, 4000, 2000.0)] * 3
    row = fit_collective_costs(_points(rows), latency_s=100e-9).row(0, named=True)
    steps = latency_steps("all_reduce", 4)  # the ring's 2(n - 1)
    assert row["basis"] == "latency"
    assert row["alpha_ns"] == pytest.approx(100 * steps)
    assert row["beta_ns_per_byte"] == pytest.approx((2000 - 100 * steps) / (4000 * 1.5))


def test_exclusive_work_moved_here_is_the_graphs() -> None:
    from timeline.whatif import graph

    assert graph.exclusive_work is exclusive_work
    assert exclusive_work([(0, 0, 10, [0]), (1, 5, 10, [0])]) == {0: 7.5, 1: 2.5}
