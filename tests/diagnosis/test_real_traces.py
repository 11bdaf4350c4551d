"""The diagnosis on every real trace (``../shared/traces``) and sample: it runs, agrees with the tables.

For each input: every finding's cause is known, its ratios are in [0, 1], its predicted step lies
between 0 and the measured step, which is the median over the diagnosed iterations of the median over
ranks of the overlap's ``step_ns``; the evidence figures named after the overlap's columns
(``idle_ns``, ``exposed_comm_ns``…) and the waits equal the overlap's and the matched collectives'
rows, recomputed here from those frames. Then both roads: read rank by rank, the diagnosis is the
in-memory one, number for number.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.builders import CASES, KINETO, SAMPLES, TRACES, intersection_ns, merged_intervals
from timeline.analysis.dimensions import exposure_by
from timeline.analysis.horovod_phases import compute_negotiation_wait
from timeline.results.diagnosis import build_diagnosis
from timeline.results.findings import CAUSES, Finding
from timeline.run import Inputs, Needs, Run

HOROVOD = TRACES / "horovod"


def _inputs() -> list[Any]:
    paths: list[Any] = []
    for folder in sorted(KINETO.iterdir()):
        if folder.name == "hta_trace_diff":
            paths += [pytest.param([f], id=f"kineto.{f.name}") for f in sorted(folder.iterdir())]
        elif folder.name == "hta_amd_mi250":
            continue  # its files have no rank: read one at a time, below
        else:
            paths.append(pytest.param([folder], id=f"kineto.{folder.name}"))
    amd = sorted((KINETO / "hta_amd_mi250").iterdir())
    paths += [pytest.param([f], id=f"kineto.hta_amd_mi250.{f.name}") for f in amd[:1]]
    for entry in sorted(HOROVOD.rglob("*.json")):
        if entry.stem == "smdebug__horovod_timeline_small":  # nothing to measure: an error (tests/cli)
            continue
        paths.append(pytest.param([entry], id=f"horovod.{entry.stem}"))
    for entry in sorted(SAMPLES.iterdir()):
        if entry.is_dir() and entry.name != "horovod":
            paths.append(pytest.param([entry], id=f"sample.{entry.name}"))
    for entry in sorted((SAMPLES / "horovod").glob("*.json")):
        if entry.stem == "horovod_empty":  # an error of its own (tests/importers), nothing to diagnose
            continue
        paths.append(pytest.param([entry], id=f"sample.horovod.{entry.stem}"))
    return paths


def _median_mean(rows: pl.DataFrame, column: str, ranks: list[int] | None = None) -> int:
    chosen = rows if ranks is None else rows.filter(pl.col("rank").is_in(ranks))
    medians: list[float] = (
        chosen.group_by("iteration").agg(pl.col(column).median()).get_column(column).to_list()
    )
    return round(sum(medians) / len(medians))


def _rank_mean(rows: pl.DataFrame, rank: int, column: str) -> int:
    values: list[int] = rows.filter(pl.col("rank") == rank).get_column(column).to_list()
    return round(sum(values) / len(values))


def _caused(analysed: Any, iterations: list[int | None]) -> dict[int, int]:
    """Return per rank the others' wait at the synchronising collectives it started last (matched frames).

    From the run's one matching (:attr:`timeline.run.Run.matched`), as ``timeline collectives`` shows it.
    """
    match = analysed.matched
    last = match.collectives.filter(pl.col("synchronising") & (pl.col("ranks") > 1)).select(
        "collective_id", "last_rank"
    )
    rows = match.ranks.join(last, on="collective_id").filter(pl.col("rank") != pl.col("last_rank"))
    if iterations != [None]:
        rows = rows.filter(pl.col("iteration").is_in([i for i in iterations if i is not None]))
    out: dict[int, int] = defaultdict(int)
    for rank, wait in rows.select("last_rank", "wait_ns").iter_rows():
        out[rank] += wait
    return out


@pytest.mark.parametrize("paths", _inputs())
def test_the_diagnosis_runs_and_agrees_with_the_tables(paths: list[Path]) -> None:
    analysed = Run(Inputs(paths=[str(p) for p in paths]))
    diagnosis = build_diagnosis(analysed.diagnosis)
    verdict, findings = diagnosis.verdict, diagnosis.findings
    assert verdict.summary
    assert set(verdict.examined) <= set(CAUSES)
    # the verdict rests on the largest gain measured from the trace; an assumed one never decides it
    measured = [f for f in findings if f.predicted_gain_ratio is not None and f.basis != "assumption"]
    top = measured[0] if measured else None
    assert verdict.communication_bound == (
        top is not None
        and top.cause
        in ("no_overlap", "bucketing", "slow_link", "link_underused", "compression", "exposed_dimension")
    )
    gains = [f.predicted_gain_ratio for f in measured if f.predicted_gain_ratio is not None]
    assert gains == sorted(gains, reverse=True)
    assumed = [f for f in findings if f.basis == "assumption"]
    assert findings[len(findings) - len(assumed) :] == assumed  # after every measured gain
    assert all(f.predicted_gain_ratio >= 0.01 for f in findings if f.predicted_gain_ratio is not None)
    step = verdict.step_ns
    known = analysed.overlap.iterations.filter(pl.col("mode") != "horovod")
    iterations: list[int | None] = [*verdict.iterations] if verdict.iterations else [None]
    rows = known.filter(
        pl.col("iteration").is_in([i for i in iterations if i is not None])
        if verdict.iterations
        else pl.col("window") == "whole_trace"
    )
    if known.height and step is not None:
        per_iteration = rows.group_by("iteration").agg(pl.col("step_ns").median()).get_column("step_ns")
        assert step == round(statistics.median(per_iteration.to_list()))
    for finding in findings:
        assert finding.cause in CAUSES
        assert finding.basis in ("replay", "bound", "assumption")
        assert finding.predicted_gain_ratio is not None
        assert finding.predicted_step_ns is not None
        assert step is not None
        assert 0.0 <= finding.predicted_gain_ratio <= 1.0
        assert 0 <= finding.predicted_step_ns <= step
        assert finding.predicted_gain_ratio == pytest.approx(1 - finding.predicted_step_ns / step)
        for key, value in finding.evidence.items():
            if key.endswith("_ratio") and isinstance(value, float):
                assert 0.0 <= value <= 1.0, key
        if known.height:
            _agrees_with_the_tables(finding, rows, analysed, iterations)
        elif finding.cause == "straggler":  # a Horovod timeline alone: its negotiation ticks
            negotiation = compute_negotiation_wait(analysed.trace.events)
            row = negotiation.filter(pl.col("rank") == finding.evidence["rank"]).row(0, named=True)
            assert finding.evidence["caused_wait_ns"] == row["caused_wait_ns"]
            assert finding.evidence["times_last"] == row["times_last"]


def _agrees_with_the_tables(
    finding: Finding, rows: pl.DataFrame, analysed: Any, iterations: list[Any]
) -> None:
    evidence: Any = finding.evidence  # named numbers: compared and summed below
    ranks = sorted(set(rows.get_column("rank").to_list()))
    if finding.cause == "straggler" and "idle_ns" in evidence and "others_idle_ns" in evidence:
        slow = evidence["rank"]
        assert slow in (finding.ranks or ())  # named with the ranks late with it, when any
        others = [r for r in ranks if r not in (finding.ranks or ())]
        assert evidence["idle_ns"] == _rank_mean(rows, slow, "idle_ns")
        assert evidence["compute_ns"] == _rank_mean(rows, slow, "compute_ns")
        assert evidence["others_idle_ns"] == _median_mean(rows, "idle_ns", others)
        assert evidence["others_exposed_comm_ns"] == _median_mean(rows, "exposed_comm_ns", others)
        caused = _caused(analysed, iterations)
        assert evidence["caused_wait_ns"] == round(caused[slow] / len(iterations))
        assert evidence["caused_wait_share_ratio"] == pytest.approx(caused[slow] / sum(caused.values()))
    if finding.cause == "input_stall":
        assert evidence["idle_ns"] == _median_mean(rows, "idle_ns")
        assert evidence["common_idle_ns"] <= evidence["idle_ns"]
    if "exposed_gradient_comm_ns" in evidence:
        sums = _exposed_gradient_union(analysed.overlap)
        expected = round(
            sum(statistics.median(sums.get((i, r), 0) for r in ranks) for i in iterations) / len(iterations)
        )
        assert evidence["exposed_gradient_comm_ns"] == expected
        assert evidence["exposed_gradient_comm_ns"] <= max(rows.get_column("step_ns"))
        # the same figure as the exposure per dimension gives for a "dimension" of the gradient collectives
        labels = analysed.overlap.collectives.filter(
            pl.col("collective").is_in(["all_reduce", "reduce_scatter"])
        ).select("rank", "start_ns", "end_ns", dimension=pl.lit("g"), pg_desc=pl.lit("g"))
        by_key = {
            (i, r): v
            for i, r, v in exposure_by(analysed.overlap, labels)
            .select("iteration", "rank", "exposed_ns")
            .iter_rows()
        }
        assert expected == round(
            sum(statistics.median(by_key.get((i, r), 0) for r in ranks) for i in iterations) / len(iterations)
        )


def _exposed_gradient_union(overlap: Any) -> dict[tuple[Any, int], int]:
    """Per (iteration, rank): |union of the gradient collectives ∩ exposed communication| in each window."""
    gradients: dict[int, list[tuple[int, int]]] = defaultdict(list)
    rows = overlap.collectives.filter(pl.col("collective").is_in(["all_reduce", "reduce_scatter"]))
    for rank, start, end in rows.select("rank", "start_ns", "end_ns").iter_rows():
        gradients[rank].append((start, end))
    exposed: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for rank, state, start, end in overlap.comm.select("rank", "state", "start_ns", "end_ns").iter_rows():
        if str(state) == "exposed":
            exposed[rank].append((start, end))
    sums: dict[tuple[Any, int], int] = defaultdict(int)
    for rank, iteration, w_start, w_end in overlap.windows.select(
        "rank", "iteration", "start_ns", "end_ns"
    ).iter_rows():
        union = merged_intervals(
            [(max(s, w_start), min(e, w_end)) for s, e in gradients[rank] if min(e, w_end) > max(s, w_start)]
        )
        inside = [(s, e) for s, e in exposed[rank] if e > w_start and s < w_end]
        sums[(iteration, rank)] += intersection_ns(union, sorted(inside))
    return sums


@pytest.mark.parametrize("name", sorted(CASES))
def test_read_rank_by_rank_the_diagnosis_is_the_in_memory_one(name: str) -> None:
    paths = [str(p) for p in CASES[name]]
    in_memory = build_diagnosis(Run(Inputs(paths=paths), needs=Needs(graph=True)).diagnosis)
    by_rank = Run(Inputs(paths=paths, executor="local"), needs=Needs(graph=True))
    assert by_rank.rank_by_rank
    assert build_diagnosis(by_rank.diagnosis) == in_memory
