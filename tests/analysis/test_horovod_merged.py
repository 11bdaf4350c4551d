"""A Horovod timeline and the writer rank's profiler trace of one run, merged by wall clock (issue #22).

The profiler trace is a real one (``sample_traces/ddp_gloo``, rank 0 of a gloo job); the timeline is
written beside it in Horovod's exact v0.20.1+ layout (the ``pid 0`` epoch header, records ending
``}]`` and overwritten) by the project's own writer (``sample_traces/make_horovod.py``), its wire
phases placed in the profiler trace's steps: under compute, in gaps, across a step boundary, fused
tensors repeating the same spans. Every figure is checked against intervals computed here in plain
Python: per iteration, |wire ∪ profiler comm| minus |that ∩ (compute − waits)|.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

import cli.main
from tests.builders import REPO, SAMPLES, frames_of, merged_intervals, run_of
from timeline import load
from timeline.analysis.overlap import comm_intervals, compute_overlap
from timeline.budgets import evaluate_budgets, parse_budgets
from timeline.execution.reduce import analyze_files
from timeline.report.data import prepare_report_data

PROFILE = SAMPLES / "ddp_gloo" / "rank0.2-4.pt.trace.json.gz"
Interval = tuple[int, int]


def _writer() -> ModuleType:
    """The project's Horovod timeline writer (``sample_traces/make_horovod.py``)."""
    spec = importlib.util.spec_from_file_location("make_horovod", REPO / "sample_traces" / "make_horovod.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["make_horovod"] = module  # dataclasses resolve the module's annotations through it
    spec.loader.exec_module(module)
    return module


MAKE_HOROVOD = _writer()


@pytest.fixture(scope="module")
def profile() -> pl.DataFrame:
    return load(PROFILE, workers=1).events


def _step_starts_us(profile: pl.DataFrame) -> list[int]:
    steps = profile.filter(pl.col("name").cast(pl.String).str.starts_with("ProfilerStep#"))
    return sorted(int(ns) // 1000 for ns in steps.get_column("start_ns"))


def _job(step_starts_us: list[int]) -> tuple[list[Any], list[Interval]]:
    """Horovod's records for 3 steps (µs on the wall clock), and the wire spans they hold (ns).

    Per step from its start S (µs): ``grad.a`` and ``grad.b`` negotiate [S+2000, S+9000) and are
    fused: both write QUEUE, MEMCPY_IN, GLOO_ALLREDUCE [S+9500, S+20500) and MEMCPY_OUT; ``grad.c``
    alone: GLOO_ALLREDUCE [S+25100, S+38000), which crosses into the next step after the first.
    """
    event = MAKE_HOROVOD.Event
    records: list[Any] = []
    wire: list[Interval] = []

    def add(ts: int, ph: str, tensor: str, name: str = "", args: str = "") -> None:
        records.append(event(ts, len(records), ph, tensor, name, args))

    def operation(tensor: str, negotiate: Interval, op: Interval, wire_span: Interval, size: int) -> None:
        add(negotiate[0], "B", tensor, "NEGOTIATE_ALLREDUCE")
        add(negotiate[0], "X", tensor, "0")
        add(negotiate[1], "X", tensor, "1")
        add(negotiate[1], "E", tensor)
        add(op[0], "B", tensor, "ALLREDUCE")
        add(op[0], "B", tensor, "QUEUE")
        add(op[0] + 100, "E", tensor)
        add(op[0] + 100, "B", tensor, "MEMCPY_IN_FUSION_BUFFER")
        add(wire_span[0], "E", tensor)
        add(wire_span[0], "B", tensor, "GLOO_ALLREDUCE")
        add(wire_span[1], "E", tensor)
        add(wire_span[1], "B", tensor, "MEMCPY_OUT_FUSION_BUFFER")
        add(op[1], "E", tensor)
        add(op[1], "E", tensor, args=f'"dtype": "float32", "shape": "[{size}]"')
        wire.append((wire_span[0] * 1000, wire_span[1] * 1000))

    for s in step_starts_us:
        for tensor in ("grad.a", "grad.b"):  # one fused response: identical spans on both pids
            operation(tensor, (s + 2000, s + 9000), (s + 9100, s + 21000), (s + 9500, s + 20500), 4096)
        operation("grad.c", (s + 20000, s + 25000), (s + 25000, s + 38400), (s + 25100, s + 38000), 128)
    records.sort()
    return records, wire


def _write_timeline(
    path: Path, step_starts_us: list[int], *, shift_us: int = 0, epoch: bool = True
) -> list[Interval]:
    """Write the timeline (v0.20.1+ layout, or v0.15's without a wall clock); return its wire spans (ns)."""
    records, wire = _job(step_starts_us)
    if epoch:
        # v0.20.1+: ts counts from the header (start_time_since_epoch_in_micros)
        origin = -MAKE_HOROVOD.EPOCH_START_US + shift_us
        text = MAKE_HOROVOD.render(records, "v021", origin_us=origin)
    else:
        # v0.15: µs since the timeline started (the first record at 0)
        first = records[0].ts
        text = MAKE_HOROVOD.render(records, "v015", origin_us=-first)
    path.write_text(text, encoding="utf-8")
    return [(a + shift_us * 1000, b + shift_us * 1000) for a, b in wire]


# --- plain-Python interval arithmetic ----------------------------------------------------------------


def _intersect(xs: list[Interval], ys: list[Interval]) -> list[Interval]:
    return merged_intervals([(max(a, c), min(b, d)) for a, b in xs for c, d in ys if max(a, c) < min(b, d)])


def _subtract(xs: list[Interval], ys: list[Interval]) -> list[Interval]:
    out: list[Interval] = []
    for a, b in merged_intervals(xs):
        pieces = [(a, b)]
        for c, d in merged_intervals(ys):
            pieces = [p for x, y in pieces for p in ((x, min(y, c)), (max(x, d), y)) if p[1] > p[0]]
        out.extend(pieces)
    return merged_intervals(out)


def _length(xs: list[Interval]) -> int:
    return sum(b - a for a, b in merged_intervals(xs))


def _expected(
    profile: pl.DataFrame, wire: list[Interval], windows: pl.DataFrame
) -> list[tuple[int, int, int]]:
    """Per profiler step window: (comm, hidden, exposed), from the rows of the profiler trace."""
    rows = profile.select("kind", "source", "tid", "name", "start_ns", "end_ns").with_columns(
        pl.col("kind").cast(pl.String), pl.col("source").cast(pl.String), pl.col("name").cast(pl.String)
    )
    comm_rows = rows.filter(pl.col("kind") == "communication").to_dicts()
    # gloo's worker threads compute nothing; the training thread (ProfilerStep#N) always computes,
    # except inside calls into c10d (docs/metrics.md, the sets measured on each rank; #20)
    training = {r["tid"] for r in rows.to_dicts() if r["name"].startswith("ProfilerStep#")}
    comm_threads = {r["tid"] for r in comm_rows} - training
    calls = ("c10d::", "_c10d_functional::", "c10d_functional::")
    compute = [
        (r["start_ns"], r["end_ns"])
        for r in rows.filter(pl.col("kind") == "cpu_op").to_dicts()
        if r["tid"] not in comm_threads and not r["name"].startswith(calls)
    ]
    waits = [
        (r["start_ns"], r["end_ns"])
        for r in rows.filter(pl.col("kind").is_in(["sync", "cpu_op"])).to_dicts()
        if r["tid"] not in comm_threads and (r["kind"] == "sync" or r["name"].startswith(calls))
    ]
    working = _subtract(compute, waits)
    comm = merged_intervals([*wire, *((r["start_ns"], r["end_ns"]) for r in comm_rows)])
    out = []
    for lo, hi in windows.filter(pl.col("rank") == 0).select("start_ns", "end_ns").iter_rows():
        in_step = _intersect(comm, [(lo, hi)])
        hidden = _length(_intersect(in_step, working))
        out.append((_length(in_step), hidden, _length(in_step) - hidden))
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, profile: pl.DataFrame) -> tuple[Path, list[Interval]]:
    folder = tmp_path_factory.mktemp("horovod_run")
    wire = _write_timeline(folder / "horovod_timeline.json", _step_starts_us(profile))
    return folder, wire


def _figures(iterations: pl.DataFrame) -> list[tuple[int, int, int]]:
    rows = iterations.filter(pl.col("rank") == 0).sort("start_ns")
    return [tuple(r) for r in rows.select("comm_ns", "hidden_comm_ns", "exposed_comm_ns").iter_rows()]


def test_wire_phases_measured_against_the_writers_compute(
    run: tuple[Path, list[Interval]], profile: pl.DataFrame
) -> None:
    folder, wire = run
    trace = load([folder / "horovod_timeline.json", PROFILE], workers=1)
    assert trace.files.filter(pl.col("format") == "horovod").get_column("clock").to_list() == ["epoch"]
    overlap = compute_overlap(trace.events)
    alone = compute_overlap(profile)
    # the iterations are the profiler's ProfilerStep windows, unchanged by the timeline
    assert overlap.windows.equals(alone.windows)
    assert overlap.windows.get_column("window").to_list() == ["profiler_step"] * 3
    expected = _expected(profile, wire, overlap.windows)
    assert _figures(overlap.iterations) == expected
    assert overlap.warnings == ()
    # Horovod's transfers add exposed communication the profiler trace alone does not hold
    for merged, profiler_only in zip(expected, _figures(alone.iterations), strict=True):
        assert merged[0] > profiler_only[0]
    assert sum(e[2] for e in expected) > sum(p[2] for p in _figures(alone.iterations))
    # the whole-trace row and the disjoint exposed/hidden intervals agree with the same sets
    intervals = comm_intervals(trace.events).filter(pl.col("rank") == 0)
    length = (pl.col("end_ns") - pl.col("start_ns")).sum()
    by_state = dict(intervals.group_by("state").agg(length).iter_rows())
    rank = overlap.ranks.row(0, named=True)
    assert (by_state["exposed"], by_state["hidden"]) == (rank["exposed_comm_ns"], rank["hidden_comm_ns"])


def test_analyze_json_and_rank_by_rank(run: tuple[Path, list[Interval]], profile: pl.DataFrame) -> None:
    folder, wire = run
    paths = [str(folder / "horovod_timeline.json"), str(PROFILE)]
    result = CliRunner().invoke(cli.main.app, ["analyze", "--json", *paths], prog_name="timeline")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["warnings"] == []
    windows = pl.DataFrame(summary["iterations"]).select(pl.col("rank").cast(pl.Int32), "start_ns", "end_ns")
    expected = _expected(profile, wire, windows)
    got = [(r["comm_ns"], r["hidden_comm_ns"], r["exposed_comm_ns"]) for r in summary["iterations"]]
    assert got == expected
    assert summary["worst"]["exposed_comm_ns"] == max(e[2] for e in expected)
    # the rank-by-rank reduction (large runs) gives the same figures
    by_rank = analyze_files(paths)
    assert _figures(by_rank.overlap.iterations) == expected


def test_budgets_and_report_read_the_merged_figures(
    run: tuple[Path, list[Interval]], profile: pl.DataFrame
) -> None:
    folder, wire = run
    trace = load([folder / "horovod_timeline.json", PROFILE], workers=1)
    overlap = compute_overlap(trace.events)
    expected = _expected(profile, wire, overlap.windows)
    budgets = parse_budgets({"budgets": [{"metric": "exposed_comm_ns", "max": 1}]}, source="t.toml")
    (verdict,) = evaluate_budgets(budgets, frames_of(trace, label="run")).verdicts
    assert (verdict.status, verdict.value, verdict.samples) == ("fail", max(e[2] for e in expected), 3)
    breakdown = (
        prepare_report_data(run_of(trace))
        .breakdown.filter((pl.col("rank") == 0) & pl.col("iteration").is_not_null())
        .sort("iteration")
    )
    assert breakdown.get_column("exposed_comm_ns").to_list() == [e[2] for e in expected]
    assert breakdown.get_column("hidden_comm_ns").to_list() == [e[1] for e in expected]


@pytest.mark.parametrize(
    ("options", "why"),
    [
        ({"epoch": False}, "its times count from the timeline's start (Horovod < 0.20.1)"),
        ({"shift_us": -3_600_000_000}, "an hour apart: another run"),
    ],
)
def test_timeline_off_the_profilers_clock_is_left_out_with_a_warning(
    tmp_path: Path, profile: pl.DataFrame, options: dict[str, Any], why: str
) -> None:
    path = tmp_path / "horovod_timeline.json"
    _write_timeline(path, _step_starts_us(profile), **options)
    trace = load([path, PROFILE], workers=1)
    overlap = compute_overlap(trace.events)
    assert overlap.warnings == (
        "the Horovod timeline and rank 0's profiler trace do not overlap in wall-clock time, so its wire "
        "phases were left out of rank 0's exposed and hidden communication: load the timeline and the "
        "profiler trace of one run, recorded with Horovod ≥ 0.20.1 (wall-clock times)",
    ), why
    assert _figures(overlap.iterations) == _figures(compute_overlap(profile).iterations)
    result = CliRunner().invoke(cli.main.app, ["analyze", str(path), str(PROFILE)], prog_name="timeline")
    assert result.exit_code == 0
    assert "warning: the Horovod timeline and rank 0's profiler trace do not overlap" in result.stderr
