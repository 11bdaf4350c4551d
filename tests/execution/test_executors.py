"""Rank by rank on an executor: exactly the in-memory analysis, errors included."""

from __future__ import annotations

import gzip
import importlib.util
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from tests.builders import CASES, KINETO, PARAM, SAMPLES, assert_overlap_equal, run_timeline
from timeline.analysis.alignment import apply_clock_offsets, estimate_clock_offsets
from timeline.analysis.collectives import match_collectives
from timeline.analysis.iterations import rank_modes
from timeline.analysis.overlap import compute_overlap, overlap_with_modes
from timeline.errors import RankError, TraceFormatError, UsageError
from timeline.execution import (
    LocalExecutor,
    RayExecutor,
    analyze_files,
    communication_events,
    graph_files,
    make_executor,
    plan_units,
    shift_overlap,
)
from timeline.execution.reduce import overlap_events
from timeline.trace import load


@pytest.mark.parametrize("case", sorted(CASES))
def test_local_executor_equals_the_in_memory_analysis(case: str) -> None:
    paths = CASES[case]
    trace = load(paths)
    expected = compute_overlap(trace.events)
    for executor in (LocalExecutor(1), LocalExecutor(2)):
        analysis = analyze_files(paths, executor=executor)
        assert_overlap_equal(expected, analysis.overlap)
        assert_frame_equal(trace.files, analysis.files)
        assert analysis.warnings == trace.warnings


def test_the_biggest_real_trace_equals_too() -> None:
    path = KINETO / "hta_df_index_resolver" / "df_index_resolver.json.gz"
    expected = compute_overlap(load(path).events)
    assert_overlap_equal(expected, analyze_files(path, executor=LocalExecutor(1)).overlap)


def test_one_large_trace_is_reduced_here_with_a_finishing_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """``timeline analyze BIG.json.gz``: one unit, run in this process with every core (finishing thread)."""
    import timeline.importers.stream as stream_module
    from timeline import policy

    path = KINETO / "hta_df_index_resolver" / "df_index_resolver.json.gz"
    expected = compute_overlap(load(path).events)
    assert not policy.reads_rank_by_rank([str(path)], executor=None, ray_address=None)
    # one threshold, in one place: rank by rank from 1 MiB
    monkeypatch.setattr(policy, "STREAM_MIN_BYTES", 1 << 20)
    assert policy.reads_rank_by_rank([str(path)], executor=None, ray_address=None)
    seen: list[bool] = []
    original = stream_module.parse_kineto_stream

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs["spare_core"])
        return original(*args, **kwargs)

    monkeypatch.setattr(stream_module, "parse_kineto_stream", spy)
    assert_overlap_equal(expected, analyze_files(path, executor=LocalExecutor(2)).overlap)
    assert seen == [True]


@pytest.mark.parametrize("case", ["param_dlrm_8rank", "ddp_gloo_4rank", "horovod_beside_kineto"])
def test_overlap_events_are_enough_for_the_overlap(case: str) -> None:
    events = load(CASES[case]).events
    reduced = overlap_events(events)
    assert reduced.height <= events.height
    assert_overlap_equal(compute_overlap(events), compute_overlap(reduced))
    # a rank task computes the modes once, on all the events, and measures the reduced events with them
    assert_frame_equal(rank_modes(events), rank_modes(reduced))
    assert_overlap_equal(compute_overlap(events), overlap_with_modes(reduced, rank_modes(events)))


def test_overlap_events_leave_out_runtime_calls_that_launch_nothing() -> None:
    events = load(CASES["param_dlrm_8rank"]).events
    reduced = overlap_events(events)
    runtime = pl.col("kind") == "runtime"
    launched = events.filter(pl.col("device").is_not_null()).get_column("correlation").drop_nulls()
    idle = events.filter(runtime & ~pl.col("correlation").is_in(launched.implode()))
    assert idle.height > 1000  # cudaStreamWaitEvent, cudaEventQuery, ... on this trace
    kept = reduced.filter(runtime)
    assert kept.height == events.filter(runtime).height - idle.height
    assert kept.get_column("correlation").is_in(launched.implode()).all()


@pytest.mark.parametrize("case", ["param_dlrm_8rank", "ddp_gloo_4rank", "horovod_beside_kineto"])
def test_communication_events_match_collectives_as_all_events_do(case: str) -> None:
    events = load(CASES[case]).events
    windows = compute_overlap(events).windows
    reduced = communication_events(events)
    full = match_collectives(events, windows=windows, link_gbps=100)
    small = match_collectives(reduced, windows=windows, link_gbps=100)
    assert_frame_equal(full.collectives, small.collectives)
    assert_frame_equal(full.ranks, small.ranks)
    assert_frame_equal(full.mismatches, small.mismatches)
    assert full.warnings == small.warnings


def test_shifted_overlap_equals_the_overlap_of_aligned_events() -> None:
    events = load(PARAM).events
    offsets = estimate_clock_offsets(events).with_columns(
        offset_ns=pl.col("rank").cast(pl.Int64) * 1_234_567 - 3_000_000  # make every rank move
    )
    aligned = compute_overlap(apply_clock_offsets(events, offsets))
    assert_overlap_equal(aligned, shift_overlap(compute_overlap(events), offsets))
    assert_frame_equal(estimate_clock_offsets(events), estimate_clock_offsets(communication_events(events)))


def _summary(*args: str | Path) -> dict[str, Any]:
    result = run_timeline("analyze", "--json", *args)
    assert result.returncode == 0, result.stderr
    summary: dict[str, Any] = json.loads(result.stdout)
    # Ties in the top list come in no particular order (polars group_by), with or without --executor.
    summary["top_collectives"] = sorted(summary["top_collectives"], key=json.dumps)
    return summary


@pytest.mark.parametrize("options", [[], ["--align", "--link-gbps", "ib-hdr"]], ids=["plain", "align-link"])
def test_analyze_with_the_local_executor_prints_the_same_summary(options: list[str]) -> None:
    assert _summary(PARAM, "--executor", "local", *options) == _summary(PARAM, *options)


def test_analyze_with_the_local_executor_prints_the_same_tables() -> None:
    plain = run_timeline("analyze", SAMPLES / "ddp_gloo_4rank")
    by_rank = run_timeline("analyze", SAMPLES / "ddp_gloo_4rank", "--executor", "local")
    assert plain.returncode == by_rank.returncode == 0
    assert by_rank.stdout == plain.stdout


_BOUND_S = 120  # how long a gate below waits before failing the test; only a broken map waits


class _Gated(NamedTuple):
    """An item of the test below: a number, the caller's pid and two events shared by the processes."""

    x: int
    caller: int
    one_done: threading.Event  # an item has finished (a helper's: the caller's own wait for it)
    first_given: threading.Event  # the caller has received its first result


_RUN_IN_THIS_HELPER: list[int] = []  # in a helper process: the items it ran


def _square_in_turn(item: _Gated) -> int:
    """``x * x``, the items finishing in an order that needs no sleep to make the test deterministic.

    In the caller's process an item ends only once an item has finished elsewhere, so that a result
    from a helper is in when the caller next looks. A helper runs its first item at once and every
    later one only after the caller has received a result: a map that gave nothing back before the
    end would leave those waiting, and the test fails.
    """
    if os.getpid() == item.caller:
        assert item.one_done.wait(_BOUND_S), "no helper finished an item"
        return item.x * item.x
    _RUN_IN_THIS_HELPER.append(item.x)
    if len(_RUN_IN_THIS_HELPER) > 1:
        assert item.first_given.wait(_BOUND_S), "the caller got no result while the helpers ran"
    return item.x * item.x


def test_the_local_executor_hands_results_over_as_they_come() -> None:
    """Not all at the end: the caller combines (and frees) each result while the others run."""
    finished = 0
    finished_at_first: int | None = None
    results = []
    with multiprocessing.get_context("spawn").Manager() as manager:
        one_done, first_given = manager.Event(), manager.Event()

        def progress(done: int, total: int) -> None:
            nonlocal finished
            finished = done
            one_done.set()

        items = [_Gated(x, os.getpid(), one_done, first_given) for x in range(60)]
        for result in LocalExecutor(2).map(_square_in_turn, items, progress=progress):
            if finished_at_first is None:
                finished_at_first = finished
                first_given.set()
            results.append(result)
    assert results == [x * x for x in range(60)]
    # the helper's first item and the caller's: every other item waited for the first result
    assert finished_at_first == 2


def test_plan_groups_the_capture_windows_of_a_rank() -> None:
    folder = SAMPLES / "ddp_gloo_markers"
    units = plan_units(sorted(p.resolve() for p in folder.glob("*.json.gz")))
    assert all(len(u.paths) >= 1 for u in units)
    assert sum(len(u.paths) for u in units) == len(list(folder.glob("*.json.gz")))


def test_a_bad_file_raises_its_own_error_from_a_worker(tmp_path: Path) -> None:
    shutil.copy(next(PARAM.glob("worker0*")), tmp_path / "rank0.json.gz")
    (tmp_path / "rank1.json.gz").write_bytes(gzip.compress(b"not json"))
    shutil.copy(next(PARAM.glob("worker2*")), tmp_path / "rank2.json.gz")
    with pytest.raises(TraceFormatError) as expected:
        load(tmp_path)
    with pytest.raises(TraceFormatError) as got:
        analyze_files(tmp_path, executor=LocalExecutor(2))
    assert str(got.value) == str(expected.value)


def test_two_files_of_one_rank_are_refused_as_load_refuses_them(tmp_path: Path) -> None:
    source = next(PARAM.glob("worker3*"))
    shutil.copy(source, tmp_path / "a.json.gz")
    shutil.copy(source, tmp_path / "b.json.gz")
    with pytest.raises(RankError) as expected:
        load(tmp_path)
    with pytest.raises(RankError) as got:
        analyze_files(tmp_path, executor=LocalExecutor(2))
    assert str(got.value) == str(expected.value)
    with pytest.raises(RankError, match="--rank applies to a single file"):
        analyze_files(tmp_path, rank=3)


def test_unknown_executor_and_misplaced_address_are_usage_errors() -> None:
    with pytest.raises(UsageError, match="--ray-address applies to --executor ray"):
        make_executor("local", ray_address="auto")
    result = run_timeline("analyze", PARAM, "--executor", "threads")
    assert result.returncode == 2
    assert result.stderr == "error: --executor 'threads': unknown executor; use local or ray\n"


def test_missing_ray_is_one_error_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from cli.main import app

    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        return None if name == "ray" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(UsageError, match="pip install 'timeline-comm\\[ray\\]'"):
        RayExecutor()
    result = CliRunner().invoke(app, ["analyze", str(PARAM), "--executor", "ray"])
    assert result.exit_code == 2
    assert (
        result.output.strip().splitlines()[-1]
        == "error: --executor ray needs ray: pip install 'timeline-comm[ray]'"
    )


needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed")


@needs_ray
@pytest.mark.parametrize("command", ["analyze", "check", "collectives", "whatif"])
def test_an_address_nobody_listens_on_fails_fast(command: str, tmp_path: Path) -> None:
    (tmp_path / "timeline.toml").write_text('[[budgets]]\nmetric = "step_ns"\nmax = 1e12\n')
    result = run_timeline(command, PARAM, "--ray-address", "127.0.0.1:9", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("error: --ray-address 127.0.0.1:9: cannot connect")


BEFORE_RAY: dict[str, str | None] = {}


@pytest.fixture(scope="module")
def ray_executor() -> Iterator[RayExecutor]:
    """A Ray instance started here for the module (about 10 s on 2 cores)."""
    import ray

    from timeline.workers import WORKER_MALLOC_ENV

    BEFORE_RAY.update({k: os.environ.get(k) for k in ("POLARS_MAX_THREADS", *WORKER_MALLOC_ENV)})
    executor = RayExecutor(num_cpus=2)
    executor._ray()  # started now, with the environment recorded just above
    yield executor
    ray.shutdown()


@needs_ray
def test_a_ray_instance_started_here_gives_its_workers_the_worker_settings(
    ray_executor: RayExecutor,
) -> None:
    """Set while the instance starts (no runtime_env per task: Ray would start other workers)."""
    from timeline.workers import WORKER_MALLOC_ENV

    def settings(_: int) -> tuple[str | None, ...]:
        import os

        return (os.environ.get("POLARS_MAX_THREADS"), *(os.environ.get(k) for k in WORKER_MALLOC_ENV))

    got = set(ray_executor.map(settings, [0, 1, 2, 3]))
    wanted = {k: os.environ.get(k, v) for k, v in {"POLARS_MAX_THREADS": "1", **WORKER_MALLOC_ENV}.items()}
    assert got == {tuple(wanted.values())}
    # the calling process's environment is left as it was
    assert {k: os.environ.get(k) for k in wanted} == BEFORE_RAY


@needs_ray
def test_ray_executor_equals_the_local_executor(ray_executor: RayExecutor, tmp_path: Path) -> None:
    for case in ("param_dlrm_8rank", "ddp_gloo_4rank", "horovod_beside_kineto"):
        local = analyze_files(CASES[case], executor=LocalExecutor(1))
        on_ray = analyze_files(CASES[case], executor=ray_executor)
        assert_overlap_equal(local.overlap, on_ray.overlap)
        assert_frame_equal(local.files, on_ray.files)
        assert_frame_equal(local.communication, on_ray.communication)
        assert local.warnings == on_ray.warnings
        # the what-if graph's parts, reduced by Ray tasks
        graph_local = graph_files(CASES[case], executor=LocalExecutor(1)).graph()
        graph_ray = graph_files(CASES[case], executor=ray_executor).graph()
        assert (graph_local.ops, graph_local.instances) == (graph_ray.ops, graph_ray.instances)
        assert (graph_local.waits, graph_local.warnings) == (graph_ray.waits, graph_ray.warnings)
    # a task's own error, not Ray's wrapper around it
    (tmp_path / "rank0.json").write_text('{"traceEvents": [}')
    with pytest.raises(TraceFormatError) as expected:
        load(tmp_path)
    with pytest.raises(TraceFormatError) as got:
        analyze_files(tmp_path, executor=ray_executor)
    assert str(got.value) == str(expected.value)


def test_overlap_only_loading_counts_what_it_skips(tmp_path: Path) -> None:
    events = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#1",
            "pid": 1,
            "tid": 1,
            "ts": 0,
            "dur": 100,
        },
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1, "dur": 5},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 7, "dur": -2},
        {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "pid": 1, "tid": 1, "dur": 3},
        # out of range and negative at once: dropped once, counted under both reasons
        {"ph": "X", "cat": "cpu_op", "name": "aten::gelu", "pid": 1, "tid": 1, "ts": 1e20, "dur": -1},
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "record_param_comms",
            "pid": 1,
            "tid": 1,
            "ts": 10,
            "dur": 9,
            "args": {
                "External id": 5,
                "Collective name": "all_reduce",
                "In msg nelems": 4,
                "Out msg nelems": 4,
                "dtype": "Float",
                "Group size": 2,
            },
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 12,
            "dur": 2,
            "args": {"correlation": 9},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "ncclKernel_AllReduce",
            "pid": 0,
            "tid": 7,
            "ts": 20,
            "dur": 30,
            "args": {"device": 0, "stream": 7, "correlation": 9, "External id": 5},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "gemm",
            "pid": 0,
            "tid": 8,
            "ts": 15,
            "dur": 40,
            "args": {"device": 0, "stream": 8, "correlation": 8},
        },
    ]
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"distributedInfo": {"rank": 0, "world_size": 2}, "traceEvents": events}))
    full = load(path)
    small = load(path, overlap_only=True)
    assert small.events.height == full.events.height - 1  # aten::mm; the invalid ones are dropped in both
    assert_frame_equal(full.files, small.files)
    assert full.warnings == small.warnings
    assert any("end < start" in w for w in full.warnings)
    assert_overlap_equal(compute_overlap(full.events), compute_overlap(small.events))
    comm = small.events.filter(pl.col("kind") == "communication")
    assert comm.get_column("in_bytes").to_list() == [16]


_SCRIPT = """
import sys
from pathlib import Path
from timeline.execution import LocalExecutor

if __name__ == "__mp_main__":  # this script run again in a spawned worker
    Path(sys.argv[1]).touch()


def here(item):
    return item


if __name__ == "__main__":
    task = str if sys.argv[2] == "importable" else here
    assert list(LocalExecutor(2).map(task, [1, 2, 3])) == [task(1), task(2), task(3)]
"""


@pytest.mark.parametrize("task", ["importable", "in the script"])
def test_workers_run_the_main_script_again_only_for_its_own_functions(tmp_path: Path, task: str) -> None:
    """The timeline command's workers skip the command line (typer, rich) before their first task."""
    script = tmp_path / "main.py"
    script.write_text(_SCRIPT)
    marker = tmp_path / "rerun"
    subprocess.run([sys.executable, str(script), str(marker), task], check=True, timeout=120)
    assert marker.exists() == (task == "in the script")
