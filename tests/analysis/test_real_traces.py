"""Whole-trace numbers on real traces agree with an independent naive interval computation.

The reference reads the raw JSON with the standard library (timestamps as exact decimals), takes
kernels whose names start with ``nccl`` as communication and the other kernels as compute (HTA's
definition), and merges intervals with a plain sorted sweep: nothing is shared with the importer or
the analyzer.
"""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path

import polars as pl
import pytest

from tests.builders import TRACES, intersection_ns, merged_intervals
from timeline import compute_overlap, load
from timeline.analysis.overlap import compute_rank_overlap

KINETO = TRACES / "kineto"
CASES = [
    *sorted((KINETO / "param_dlrm_8rank").glob("*.json.gz")),
    *sorted(KINETO.glob("hta_*/*.json.gz")),
]


def naive(path: Path) -> dict[str, int]:
    with gzip.open(path, "rt") as fh:
        doc = json.load(fh, parse_float=Decimal)
    base = int(doc.get("baseTimeNanoseconds") or 0)
    comm: list[tuple[int, int]] = []
    compute: list[tuple[int, int]] = []
    for event in doc["traceEvents"]:
        if event.get("ph") != "X" or event.get("cat") not in ("kernel", "Kernel"):
            continue
        start = int(Decimal(event["ts"]) * 1000)
        if start < 10**17:  # relative to baseTimeNanoseconds (torch >= 2.4)
            start += base
        end = start + int(Decimal(event["dur"]) * 1000)
        (comm if event["name"].startswith("nccl") else compute).append((start, end))
    c, p = merged_intervals(comm), merged_intervals(compute)
    comm_ns = sum(b - a for a, b in c)
    hidden = intersection_ns(c, p)
    return {
        "comm_ns": comm_ns,
        "compute_ns": sum(b - a for a, b in p),
        "hidden_comm_ns": hidden,
        "exposed_comm_ns": comm_ns - hidden,
    }


@pytest.mark.parametrize("path", CASES, ids=lambda p: f"{p.parent.name}/{p.name[:24]}")
def test_whole_trace_numbers_match_naive_reference(path: Path) -> None:
    # The ROCm sample has no distributedInfo and no rank in its name: say which rank it is.
    trace = load(path, rank=0 if "amd" in path.parent.name else None)
    row = compute_rank_overlap(trace.events).row(0, named=True)
    expected = naive(path)
    assert {k: row[k] for k in expected} == expected


def test_param_set_loads_as_eight_ranks_with_one_step_each() -> None:
    trace = load(KINETO / "param_dlrm_8rank")
    assert trace.ranks == list(range(8))
    overlap = compute_overlap(trace.events)
    assert overlap.iterations["iteration"].to_list() == [10] * 8
    # every rank ran the same 8 collectives: 3 all-reduce and 5 all-to-all
    per_rank = overlap.collectives.group_by("rank").agg(n=pl.len()).sort("rank")["n"].to_list()
    assert per_rank == [8] * 8
