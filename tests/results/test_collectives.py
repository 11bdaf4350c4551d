"""The collectives report as typed data: each figure it adds for the renderers, computed here another way.

The expected values are computed from the run's frames (``Run.matched``, the overlap's windows, the
Horovod analysis) with plain Python loops, never by the code under test; the report must also
survive its own ``--json`` (decoded back into its type).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import msgspec
import polars as pl
import pytest

import timeline
from tests.builders import PARAM, SAMPLES, TRACES
from timeline.analysis.horovod_phases import analyze_horovod
from timeline.errors import UsageError
from timeline.render.html import Result, render_html
from timeline.results.base import TIMELINE_VERSION
from timeline.results.collectives import (
    REPORT_VERSION,
    CollectivesReport,
    Utilisation,
    build_collectives_report,
    utilisation_summary,
)
from timeline.run import Run

PARTIAL = TRACES / "kineto" / "hta_trace_filter_2rank"  # 2 traced ranks of a 128-rank job
HOROVOD = SAMPLES / "horovod" / "horovod_v021.json"


def _report(path: Path, **options: Any) -> tuple[Run, CollectivesReport]:
    run = timeline.analyze(path, **options)
    return run, build_collectives_report(run)


@pytest.fixture(scope="module")
def param() -> tuple[Run, CollectivesReport]:
    return _report(PARAM)


@pytest.fixture(scope="module")
def pipeline() -> tuple[Run, CollectivesReport]:
    return _report(SAMPLES / "pipeline_gloo")


@pytest.fixture(scope="module")
def expert() -> tuple[Run, CollectivesReport]:
    return _report(SAMPLES / "expert_gloo")


def _rows(frame: pl.DataFrame) -> list[dict[str, Any]]:
    return frame.with_columns(pl.col(pl.Enum).cast(pl.String)).to_dicts()


def test_kind_version_and_timeline_come_first(param: tuple[Run, CollectivesReport]) -> None:
    _, report = param
    data = msgspec.json.decode(msgspec.json.encode(report))
    assert list(data)[:4] == ["kind", "version", "timeline", "files"]
    assert (data["kind"], data["version"], data["timeline"]) == ("collectives", 4, TIMELINE_VERSION)
    assert REPORT_VERSION == 4
    assert msgspec.json.decode(msgspec.json.encode(report), type=CollectivesReport) == report


def test_rows_are_the_matchings_rows_with_the_unknown_group_null(
    param: tuple[Run, CollectivesReport],
) -> None:
    run, report = param
    match = run.matched
    expected = _rows(match.collectives)
    assert {row["group"] for row in expected} == {"*"}  # PARAM names no process group
    for row in expected:
        row["group"] = None
    assert msgspec.to_builtins(report.collectives) == expected
    ranks = _rows(match.ranks)
    for row in ranks:
        row["group"] = None
    assert msgspec.to_builtins(report.collective_ranks) == ranks
    assert [row.group for row in report.groups] == [None] * match.groups.height
    assert report.collective_groups == 1


@pytest.mark.parametrize(
    ("path", "columns"), [(PARAM, [10]), (SAMPLES / "ddp_gloo_4rank", [2, 3, 4])], ids=["param", "gloo"]
)
def test_waits_per_rank_and_per_rank_and_iteration(path: Path, columns: list[int | None]) -> None:
    run, report = _report(path)
    per_rank: dict[int, list[int]] = defaultdict(lambda: [0, 0, 0])
    per_cell: dict[tuple[int, int | None], list[int]] = defaultdict(lambda: [0, 0, 0])
    for row in _rows(run.matched.ranks):
        for sums in (per_rank[row["rank"]], per_cell[row["rank"], row["iteration"]]):
            sums[0] += 1
            sums[1] += row["transfer_ns"] or 0
            sums[2] += row["wait_ns"] or 0
    assert [(r.rank, r.collectives, r.transfer_ns, r.wait_ns) for r in report.wait_by_rank] == [
        (rank, *per_rank[rank]) for rank in sorted(per_rank)
    ]
    windows = run.overlap.windows.to_dicts()
    steps = {w["iteration"] for w in windows if w["window"] == "profiler_step"}
    iterations: list[int | None] = sorted({it for _, it in per_cell if it is not None} | steps)
    if any(it is None for _, it in per_cell) or any(w["iteration"] is None for w in windows):
        iterations.append(None)
    cells = [
        (rank, it, *per_cell.get((rank, it), [0, 0, 0])) for it in iterations for rank in sorted(per_rank)
    ]
    got = [
        (c.rank, c.iteration, c.collectives, c.transfer_ns, c.wait_ns) for c in report.wait_by_rank_iteration
    ]
    assert got == cells
    assert iterations == columns
    assert sum(c.wait_ns for c in report.wait_by_rank_iteration) == sum(
        row.total_wait_ns or 0 for row in report.collectives
    )


def test_the_order_by_wait_is_the_most_total_wait_first(param: tuple[Run, CollectivesReport]) -> None:
    _, report = param
    waits = [row.total_wait_ns or 0 for row in report.collectives]
    assert report.collectives_by_wait == sorted(range(len(waits)), key=lambda i: -waits[i])
    assert sorted(report.collectives_by_wait) == list(range(len(report.collectives)))


def test_pairs_by_wait_and_the_pairs_group(pipeline: tuple[Run, CollectivesReport]) -> None:
    run, report = pipeline
    pairs = _rows(run.matched.point_to_point)
    assert len(pairs) == len(report.point_to_point) == 48
    waits = [(p["send_wait_ns"] or 0) + (p["recv_wait_ns"] or 0) for p in pairs]
    assert report.pairs_by_wait == sorted(range(len(pairs)), key=lambda i: -waits[i])
    assert [p.group for p in report.point_to_point] == [p["group"] for p in pairs]  # named groups stay


def test_complete_and_incomplete_counts() -> None:
    run, report = _report(PARTIAL)
    rows = _rows(run.matched.collectives)
    complete = sum(1 for row in rows if row["complete"])
    counts = Counter((row["ranks"], row["expected_ranks"]) for row in rows if not row["complete"])
    assert report.complete_collectives == complete == 0
    assert [(i.ranks, i.expected_ranks, i.collectives, i.untraced) for i in report.incomplete] == [
        (ranks, expected, n, expected > len(report.ranks))
        for (ranks, expected), n in sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    ]
    assert [(i.ranks, i.expected_ranks, i.collectives, i.untraced) for i in report.incomplete] == [
        (2, 128, 10, True)
    ]


def test_ambiguous_events_sum_the_ambiguity_rows(expert: tuple[Run, CollectivesReport]) -> None:
    run, report = expert
    assert report.ambiguous_events == run.matched.ambiguous.height == 20
    assert sum(row.events for row in report.ambiguity) == 20
    assert len(report.ambiguous) == 20


def test_the_tables_report_leaves_the_per_rank_rows_out(expert: tuple[Run, CollectivesReport]) -> None:
    run, report = expert
    tables = build_collectives_report(run, rank_rows=False)
    assert (tables.collective_ranks, tables.ambiguous) == ([], [])
    assert msgspec.structs.replace(
        tables, collective_ranks=report.collective_ranks, ambiguous=report.ambiguous
    ) == (report)


def test_horovod_orders_and_implausible_batches() -> None:
    run, report = _report(HOROVOD)
    horovod = report.horovod
    assert horovod is not None
    analysis = analyze_horovod(run.trace.events, clock="epoch")
    batches, tensors = _rows(analysis.batches), _rows(analysis.tensors)
    negotiation = _rows(analysis.negotiation)
    assert horovod.implausible_batches == sum(1 for b in batches if b["implausible"])
    by_bytes = [b["bytes"] or 0 for b in batches]
    assert horovod.batches_by_bytes == sorted(range(len(batches)), key=lambda i: -by_bytes[i])
    by_time = [t["wire_ns"] + t["negotiation_ns"] for t in tensors]
    assert horovod.tensors_by_time == sorted(range(len(tensors)), key=lambda i: -by_time[i])
    caused = [n["caused_wait_ns"] for n in negotiation]
    assert horovod.negotiation_by_caused_wait == sorted(range(len(negotiation)), key=lambda i: -caused[i])
    assert msgspec.to_builtins(horovod.totals) == _rows(analysis.totals)[0]
    assert report.collectives == []
    assert report.wait_by_rank == []


def test_utilisation_is_typed_and_needs_a_link(param: tuple[Run, CollectivesReport]) -> None:
    run = timeline.analyze(PARAM, link_gbps=100.0)
    utilisation = utilisation_summary(run)
    assert isinstance(utilisation, Utilisation)
    assert utilisation.link_gbps == 100.0
    assert msgspec.to_builtins(utilisation.iterations) == _rows(run.utilisation)
    assert utilisation.implausible == int(run.matched.collectives.get_column("implausible").sum()) == 2
    assert utilisation.horovod is None
    with pytest.raises(UsageError, match="--link-gbps"):
        utilisation_summary(param[0])


def test_a_plain_collectives_json_is_read_back_as_the_typed_report(
    param: tuple[Run, CollectivesReport],
) -> None:
    _, report = param
    plain = msgspec.json.decode(msgspec.json.encode(report))
    wrapped = Result(plain)
    assert wrapped.kind == "collectives"
    assert wrapped.data == report
    assert render_html(plain) == render_html(report)
    plain["collectives"] = "not rows"
    with pytest.raises(UsageError, match="not a timeline collectives result"):
        Result(plain)
