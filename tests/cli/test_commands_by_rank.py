"""Every analysing command rank by rank (``--executor``, Parquet datasets): the in-memory output, exactly."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from polars.testing import assert_frame_equal

from tests.builders import CASES, PARAM, SAMPLES, assert_overlap_equal, run_timeline
from tests.builders import SAMPLE_HOROVOD as HOROVOD
from timeline.analysis.overlap import compute_overlap
from timeline.execution import LocalExecutor, analyze_files, communication_events, graph_files, write_dataset
from timeline.trace import load
from timeline.whatif.graph import trace_graph

MATCHING_BUDGETS = """\
[[budgets]]
metric = "exposed_comm_ratio"
aggregate = "p90"
max = 0.9

[[budgets]]
metric = "collective_wait_ns"
aggregate = "max"
max = 10_000_000_000

[[budgets]]
metric = "iteration_busbw_gbps"
aggregate = "min"
min = 0.000001

[[budgets]]
metric = "collective_link_utilisation_ratio"
aggregate = "p50"
min = 0.0

[regression]
exposed_comm_ns = { relative = 0.10 }
collective_exposed_ns = { relative = 0.10 }
"""

INPUTS = {
    "param_dlrm_8rank": [PARAM],
    "ddp_gloo_4rank": [SAMPLES / "ddp_gloo_4rank"],
    "ddp_gloo_markers": [SAMPLES / "ddp_gloo_markers"],
    "horovod_beside_kineto": [HOROVOD, SAMPLES / "ddp_gloo"],
}


def _output(*args: str | Path, cwd: Path | None = None) -> tuple[int, Any, str]:
    result = run_timeline(*args, cwd=cwd)
    assert result.returncode in (0, 1), result.stderr
    data = json.loads(result.stdout)
    if isinstance(data, dict) and "top_collectives" in data:
        # ties in the top list come in no particular order (polars group_by), in either path
        data["top_collectives"] = sorted(data["top_collectives"], key=json.dumps)
    return result.returncode, data, result.stderr


COMMANDS = {
    "collectives": ["collectives", "--json"],
    "collectives-align-link": ["collectives", "--json", "--align", "--link-gbps", "100"],
    "whatif": ["whatif", "--json", "--bandwidth", "1,10,100Gbps"],
    "analyze-link": ["analyze", "--json", "--link-gbps", "ib-hdr"],
}
PAIRS = [
    (case, command)
    for case in sorted(INPUTS)
    for command in sorted(COMMANDS)
    # --align needs the profiler traces of several ranks; the Horovod case has one
    if not (case == "horovod_beside_kineto" and "align" in command)
]


@pytest.mark.parametrize(("case", "command"), PAIRS)
def test_a_command_with_the_local_executor_prints_what_it_prints_in_memory(case: str, command: str) -> None:
    paths = INPUTS[case]
    args = COMMANDS[command]
    assert _output(*args, *paths, "--executor", "local") == _output(*args, *paths)


def test_collectives_by_rank_set_the_horovod_phases_against_the_writer_rank() -> None:
    """The writer rank's events are loaded once more, alone: the attribution of the in-memory run."""
    _, by_rank, _ = _output("collectives", "--json", HOROVOD, SAMPLES / "ddp_gloo", "--executor", "local")
    attribution = by_rank["horovod"]["attribution"]
    assert attribution is not None
    assert attribution["writer_rank"] == 0
    assert len(attribution["iterations"]) == 3


@pytest.mark.parametrize("budgets", ["lenient", "matching"])
def test_check_with_the_local_executor_gives_the_same_verdicts(tmp_path: Path, budgets: str) -> None:
    text = MATCHING_BUDGETS if budgets == "matching" else MATCHING_BUDGETS.split("\n\n")[0] + "\n"
    (tmp_path / "timeline.toml").write_text(textwrap.dedent(text))
    args: list[str | Path] = ["check", "--json", PARAM, "--link-gbps", "100", "--baseline", PARAM]
    plain = _output(*args, cwd=tmp_path)
    by_rank = _output(*args, "--executor", "local", cwd=tmp_path)
    assert by_rank == plain
    assert plain[0] == 0
    verdicts = plain[1]["verdicts"]
    assert len(verdicts) == (6 if budgets == "matching" else 1)
    assert all(v["value"] is not None for v in verdicts)


@pytest.fixture(scope="module")
def param_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dataset") / "param.d"
    write_dataset(PARAM, out, executor=LocalExecutor(1))
    return out


@pytest.mark.parametrize(
    "command",
    [
        ["analyze", "--json"],
        ["analyze", "--json", "--align", "--link-gbps", "25gbe"],
        ["collectives", "--json", "--link-gbps", "100"],
        ["whatif", "--json", "--world-size", "16,64"],
    ],
    ids=["analyze", "analyze-align-link", "collectives", "whatif"],
)
def test_every_command_reads_a_dataset_rank_by_rank_with_the_results_of_its_traces(
    param_dataset: Path, command: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dataset is read rank by rank by default; the output is that of the original traces."""
    assert _output(*command, param_dataset) == _output(*command, PARAM)


def test_check_reads_a_dataset_rank_by_rank(param_dataset: Path, tmp_path: Path) -> None:
    (tmp_path / "timeline.toml").write_text(MATCHING_BUDGETS)
    on_traces = _output("check", "--json", PARAM, "--link-gbps", "100", cwd=tmp_path)
    on_dataset = _output("check", "--json", param_dataset, "--link-gbps", "100", cwd=tmp_path)
    assert on_dataset[1].pop("inputs") == str(param_dataset)  # the run's label: the input as given
    on_traces[1].pop("inputs")
    assert on_dataset == on_traces
    assert len(on_traces[1]["verdicts"]) == 6


@pytest.mark.parametrize(
    "case", ["param_dlrm_8rank", "ddp_gloo_windows", "horovod_beside_kineto", "trace_diff"]
)
def test_graph_files_equals_the_graph_of_the_loaded_trace(case: str) -> None:
    paths = CASES[case]
    trace = load(paths)
    expected = trace_graph(trace, link_gbps=25.0)
    for executor in (LocalExecutor(1), LocalExecutor(2)):
        parts = graph_files(paths, executor=executor)
        assert_frame_equal(parts.files, trace.files)
        assert parts.warnings == trace.warnings
        got = parts.graph(link_gbps=25.0)
        assert got.ops == expected.ops
        assert got.instances == expected.instances
        assert got.waits == expected.waits
        assert got.gradients == expected.gradients
        assert got.warnings == expected.warnings
        assert (got.world_size, got.ranks, got.modes) == (expected.world_size, expected.ranks, expected.modes)
        assert_frame_equal(got.windows, expected.windows)
        assert_frame_equal(got.compute, expected.compute)


def test_analysis_without_communication_keeps_the_overlap() -> None:
    full = analyze_files(PARAM, executor=LocalExecutor(2))
    lean = analyze_files(PARAM, executor=LocalExecutor(2), communication=False)
    for view in ("ranks", "iterations", "collectives", "windows"):
        assert_frame_equal(getattr(full.overlap, view), getattr(lean.overlap, view))
    assert lean.communication.height == 0
    assert full.communication.height > 0
    assert lean.communication.schema == full.communication.schema


@pytest.mark.parametrize("case", ["param_dlrm_8rank", "horovod_beside_kineto"])
def test_load_ranks_gives_every_event_of_those_ranks(case: str) -> None:
    import polars as pl

    paths = CASES[case]
    trace = load(paths)
    analysis = analyze_files(paths, executor=LocalExecutor(2))
    for ranks in ([0], [1, 3] if case == "param_dlrm_8rank" else [1]):
        got = analysis.load_ranks(ranks)
        assert_frame_equal(got.events, trace.events.filter(pl.col("rank").is_in(ranks)))
    assert analysis.load_ranks([99]).events.height == 0


@pytest.mark.parametrize("command", ["analyze", "check", "collectives", "whatif"])
def test_a_dataset_is_read_rank_by_rank_by_every_command(
    param_dataset: Path, tmp_path: Path, command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No command loads every rank of a dataset at once: each goes through the per-rank tasks."""
    from typer.testing import CliRunner

    import timeline.execution
    import timeline.trace
    from cli.main import app

    calls: list[str] = []
    real_analyze, real_graph = timeline.execution.analyze_files, timeline.execution.graph_files
    real_load = timeline.trace.load

    def analyze(*args: Any, **kwargs: Any) -> Any:
        calls.append("analyze_files")
        return real_analyze(*args, **kwargs)

    def graph(*args: Any, **kwargs: Any) -> Any:
        calls.append("graph_files")
        return real_graph(*args, **kwargs)

    def load_all(paths: Any, **kwargs: Any) -> Any:
        listed = paths if isinstance(paths, list) else [paths]
        if any(Path(p) == param_dataset for p in listed):
            calls.append("load of the whole dataset")
        return real_load(paths, **kwargs)

    # the library's one road (timeline.run) imports these when it runs
    monkeypatch.setattr("timeline.execution.reduce.analyze_files", analyze)
    monkeypatch.setattr("timeline.execution.graphs.graph_files", graph)
    monkeypatch.setattr("timeline.trace.load", lambda paths, **kw: load_all(paths, **kw))
    (tmp_path / "timeline.toml").write_text(MATCHING_BUDGETS)
    args = [command, str(param_dataset), "--json"]
    if command == "check":
        args += ["--budget", str(tmp_path / "timeline.toml"), "--link-gbps", "100"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert calls == ["graph_files" if command == "whatif" else "analyze_files"]


def test_ranks_listed_out_of_order_come_out_in_rank_order(tmp_path: Path) -> None:
    """rank10.json sorts before rank2.json: the combined rows are those of the in-memory analysis."""
    from benchmarks.generate import make_rank_set

    make_rank_set(sorted(PARAM.iterdir())[0], tmp_path, ranks=12, gzip=False)
    assert [p.name for p in sorted(tmp_path.iterdir())][:3] == ["rank0.json", "rank1.json", "rank10.json"]
    trace = load(tmp_path)
    expected = compute_overlap(trace.events)
    for executor in (LocalExecutor(1), LocalExecutor(2)):
        for communication in (True, False):
            analysis = analyze_files(tmp_path, executor=executor, communication=communication)
            assert_overlap_equal(expected, analysis.overlap)
            assert_frame_equal(trace.files, analysis.files)
            if communication:
                assert_frame_equal(communication_events(trace.events), analysis.communication)
