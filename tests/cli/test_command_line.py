"""The command line as people use it (#41): files written as named, the basics, the words of errors.

Each test quotes what the command says; figures are checked against the command's own ``--json``
or computed here.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from importlib.metadata import version
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

import timeline
from cli.main import app
from tests.builders import REPO, TRACES, timeline_command

SAMPLES = REPO / "sample_traces"
GLOO = str(SAMPLES / "ddp_gloo")
FOUR = str(SAMPLES / "ddp_gloo_4rank")
HOROVOD = TRACES / "horovod"
TENSORFLOW = str(HOROVOD / "andrewor14_tf-logs__horovod_timeline__e2205b98.json")
SMDEBUG = str(HOROVOD / "smdebug__horovod_timeline_small.json")
PYTORCH_HOROVOD = str(HOROVOD / "dexhunter_allreduce-experiments" / "horovod-results__32gpu__100g-32-h.json")
BUDGET = str(REPO / "tests" / "cli" / "golden" / "budget.toml")
ESCAPE = "\x1b["


def invoke(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "120", **(env or {})})
    return result.exit_code, result.stdout, result.stderr


# --- files as named ---------------------------------------------------------------------------


def test_convert_to_a_directory_name_writes_a_dataset_that_analyze_reads_rank_by_rank(tmp_path: Path) -> None:
    target = tmp_path / "run.d"
    code, _, err = invoke("convert", FOUR, "-o", f"{target}/")
    assert code == 0, err
    assert sorted(p.name for p in target.iterdir()) == [f"rank={r}" for r in range(4)]
    assert timeline.Inputs(paths=[f"{target}/"]).rank_by_rank
    run = timeline.analyze(f"{target}/")
    assert run.rank_by_rank
    code, out, err = invoke("analyze", f"{target}/", "--json", "--no-findings")
    assert code == 0, err
    _, source, _ = invoke("analyze", FOUR, "--json", "--no-findings")
    assert json.loads(out)["ranks"] == json.loads(source)["ranks"]


def test_convert_writes_a_parquet_file_for_a_parquet_name(tmp_path: Path) -> None:
    target = tmp_path / "x.parquet"
    code, _, err = invoke("convert", GLOO, "-o", str(target), "--quiet")
    assert code == 0, err
    assert err == ""
    assert target.is_file()
    assert pl.read_parquet(target).height == timeline.load(GLOO).events.height


@pytest.mark.parametrize("name", ["x.csv", "x.json", "run.txt"])
def test_convert_refuses_other_names_listing_what_it_writes(tmp_path: Path, name: str) -> None:
    code, _, err = invoke("convert", GLOO, "-o", str(tmp_path / name))
    assert code == 2
    suffix = Path(name).suffix
    assert err == (
        f"error: {tmp_path / name}: convert does not write {suffix} files; it writes -o NAME.parquet (one "
        "Parquet file), -o DIR/ or --dataset (a Parquet dataset by rank: DIR/rank=N/), --to perfetto -o "
        "NAME.json (Trace Event Format for Perfetto UI and chrome://tracing)\n"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["analyze", "collectives", "diff"])
def test_csv_writes_the_tables_with_their_json_values(tmp_path: Path, command: str) -> None:
    target = tmp_path / "tables.csv"
    inputs = [GLOO, FOUR] if command == "diff" else [GLOO]
    code, _, err = invoke(command, *inputs, "--csv", str(target))
    assert code == 0, err
    _, out, _ = invoke(command, *inputs, "--json")
    result = json.loads(out)
    tables = pl.read_csv(target, infer_schema_length=None)
    assert tables.columns[0] == "table"
    name = {"analyze": "iterations", "collectives": "collectives", "diff": "iterations"}[command]
    rows = tables.filter(pl.col("table") == name)
    assert rows.height == len(result[name])
    if command == "analyze":
        expected = [(r["rank"], r["iteration"], r["exposed_comm_ns"]) for r in result["iterations"]]
        assert list(rows.select("rank", "iteration", "exposed_comm_ns").iter_rows()) == expected


# --- the basics -------------------------------------------------------------------------------


def test_version() -> None:
    result = subprocess.run([*timeline_command(), "--version"], capture_output=True, text=True, check=False)
    assert result.returncode == 0
    assert result.stdout == (
        f"timeline-comm {version('timeline-comm')}, polars {version('polars')}, "
        f"Python {platform.python_version()}\n"
    )


def test_completion_installs_with_typers_command(tmp_path: Path) -> None:
    env = {**os.environ, "HOME": str(tmp_path), "SHELL": "/bin/bash"}
    result = subprocess.run(
        [*timeline_command(), "--install-completion", "bash"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    script = tmp_path / ".bash_completions" / "timeline.sh"
    assert "_TIMELINE_COMPLETE=complete_bash" in script.read_text()
    assert str(script) in (tmp_path / ".bashrc").read_text()
    completed = subprocess.run(
        timeline_command(),
        capture_output=True,
        text=True,
        env={
            **env,
            "_TIMELINE_COMPLETE": "complete_bash",
            "COMP_WORDS": "timeline collectives --to",
            "COMP_CWORD": "2",
        },
        check=False,
    )
    assert completed.stdout.split() == ["--top"]  # --limit, its old name, is hidden


@pytest.mark.parametrize("command", [["analyze", GLOO], ["collectives", GLOO], ["whatif", GLOO]])
def test_no_color_writes_no_escape_codes(command: list[str]) -> None:
    forced = {"FORCE_COLOR": "1"}
    _, styled, _ = invoke(*command, env=forced)
    assert ESCAPE in styled  # the test can fail: a terminal gets styles
    _, plain, _ = invoke(*command, env={**forced, "NO_COLOR": "1"})
    assert ESCAPE not in plain
    _, flag, _ = invoke(*command, "--no-color", env=forced)
    assert ESCAPE not in flag
    assert plain == flag


def test_a_clean_dir_and_short_reprs() -> None:
    names = [name for name in dir(timeline) if not name.startswith("__")]
    assert names == sorted(timeline.__all__)
    run = timeline.analyze(GLOO)
    report = run.collectives_data()
    text = repr(report)
    assert text.startswith("CollectivesReport(kind='collectives', version=4, ")
    assert len(text) <= 400
    assert f"collectives=[{len(report.collectives)} items]" in text


def test_check_quiet_prints_only_why_a_budget_failed() -> None:
    code, out, err = invoke("check", GLOO, "--budget", BUDGET, "--quiet")
    assert code == 1
    assert out == ""
    lines = err.splitlines()
    assert lines
    assert all(line.startswith("FAIL ") for line in lines)


def test_top_and_its_old_name() -> None:
    _, top, _ = invoke("collectives", GLOO, "--top", "3")
    _, limit, _ = invoke("collectives", GLOO, "--limit", "3")
    assert top == limit
    assert "(the 3 with the most wait of 12; --top N or --json for all)" in top
    code, _, err = invoke("collectives", GLOO, "--top", "3", "--limit", "3")
    assert code == 2
    assert "--limit is the old name of --top; give --top alone" in err


def test_the_capacity_in_use_is_echoed() -> None:
    code, out, err = invoke("analyze", GLOO, "--link-gbps", "100GB", "--no-findings")
    assert code == 0, err
    assert "note: link 800 Gbit/s one direction (--link-gbps 100GB: bytes, 8 bits each)" in err.splitlines()
    assert "Link utilisation against 800 Gbit/s" in out
    _, out, err = invoke("collectives", GLOO, "--link-gbps", "ib-hdr")
    assert "note: link 200 Gbit/s one direction (--link-gbps ib-hdr: a preset)" in err.splitlines()
    assert "against the 200 Gbit/s link" in out


# --- what-if words ----------------------------------------------------------------------------


def test_whatif_target_without_a_link_names_the_options_that_give_one() -> None:
    code, _, err = invoke("whatif", GLOO, "--target-sf", "0.9")
    assert code == 2
    assert err.splitlines()[-1] == (
        "error: --efficiency full predicts on a link of known bandwidth, and the measured link is unknown: "
        "name the bandwidths to predict with -b/--bandwidth (e.g. -b 25), or the link the trace ran on "
        "with --link-gbps GBPS"
    )
    code, out, err = invoke("whatif", GLOO, "--target-sf", "0.9", "-b", "25")
    assert code == 0, err
    assert "scaling factor 0.9 at world size 2" in out


def test_whatif_observed_efficiency_names_efficiency_full() -> None:
    code, _, err = invoke("whatif", GLOO, "-b", "25", "--efficiency", "observed")
    assert code == 2
    assert err == (
        "error: the measured link is unknown, so the observed efficiency cannot move to another bandwidth: "
        "pass the link the trace ran on (--link-gbps GBPS, e.g. --link-gbps 25, or link_gbps= when "
        "capturing), or predict on the full link: --efficiency full\n"
    )
    code, _, err = invoke("whatif", GLOO, "-b", "25", "--efficiency", "full")
    assert code == 0, err


def test_whatif_columns_are_labelled() -> None:
    _, out, _ = invoke("whatif", GLOO, "-b", "1,10", env={"COLUMNS": "300"})
    header = " ".join(line for line in out.splitlines() if line.startswith("┃"))
    words = " ".join(header.replace("┃", " ").split())
    for label in ("no-overlap iteration", "no-overlap scaling factor", "perfect-overlap scaling factor"):
        assert label in words
    assert " SF " not in f" {words} "


def test_whatif_a_perfect_overlap_the_same_in_every_scenario_is_said_once() -> None:
    code, out, _ = invoke("whatif", GLOO, "-b", "10,100", "--json")
    assert code == 0
    scenarios = json.loads(out)["scenarios"]
    assert len({s["perfect_overlap_ns"] for s in scenarios}) == 1
    _, text, _ = invoke("whatif", GLOO, "-b", "10,100", env={"COLUMNS": "300"})
    assert "perfect-overlap" not in text
    value = scenarios[0]["perfect_overlap_ns"] / 1e6
    assert f"perfect overlap (every collective hidden under compute): {value:.2f} ms" in text


def test_whatif_iteration_is_now_iterations() -> None:
    _, new, _ = invoke("whatif", GLOO, "--iterations", "3-4", "--json")
    _, old, _ = invoke("whatif", GLOO, "--iteration", "3", "--iteration", "4", "--json")
    assert json.loads(new)["self_replay"] == json.loads(old)["self_replay"]
    assert [r["iteration"] for r in json.loads(new)["self_replay"]["iterations"]] == [3, 4]


# --- Horovod ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["analyze", SMDEBUG],
        ["collectives", SMDEBUG],
        ["whatif", SMDEBUG],
        ["check", SMDEBUG, "--budget", BUDGET],
        ["diff", GLOO, SMDEBUG],
    ],
    ids=["analyze", "collectives", "whatif", "check", "diff"],
)
def test_an_input_with_no_rank_to_measure_is_an_error(args: list[str]) -> None:
    code, out, err = invoke(*args)
    assert code == 2
    assert out == ""
    assert err.splitlines()[-1] == (
        f"error: {Path(SMDEBUG).resolve()}: no rank has compute, communication or memory copies to "
        "measure (its 23 events are of kinds instant, negotiation); give the profiler traces of the "
        "ranks, or a Horovod timeline that holds its operations' phases"
    )


def test_horovod_notes_fold_into_one_counted_line() -> None:
    code, out, _ = invoke("analyze", TENSORFLOW)
    assert code == 0
    _, everything, _ = invoke("analyze", TENSORFLOW, "--json")
    notes = json.loads(everything)["verdict"]["notes"]
    assert len(notes) > 1
    assert (
        f"notes: {len(notes)} on what was not examined and how the figures were made (--verbose shows them)"
        in out.splitlines()
    )
    assert "note: " not in out
    _, verbose, _ = invoke("analyze", TENSORFLOW, "--verbose")
    assert sum(line.startswith("note: ") for line in verbose.splitlines()) == len(notes)


def test_horovod_advice_fits_the_framework() -> None:
    _, tensorflow, _ = invoke("analyze", TENSORFLOW, "--verbose", env={"COLUMNS": "1000"})
    assert "torch.profiler" not in tensorflow
    assert "the timeline comes from TensorFlow, whose profiler traces timeline does not read" in tensorflow
    assert "load the PyTorch profiler trace of rank 0" not in tensorflow
    _, pytorch, _ = invoke("analyze", PYTORCH_HOROVOD, "--verbose", env={"COLUMNS": "1000"})
    assert (
        "load the PyTorch profiler trace of rank 0 (the writer) of the same run together with the timeline"
        in (pytorch)
    )
    _, collectives, _ = invoke("collectives", TENSORFLOW, env={"COLUMNS": "1000"})
    assert "the timeline comes from TensorFlow" in collectives


def test_horovod_says_its_one_rank_stands_for_all() -> None:
    _, out, _ = invoke("analyze", PYTORCH_HOROVOD, "--verbose", env={"COLUMNS": "1000"})
    assert "rank(s)" not in out
    assert "timeline: 1 file, rank 0 (the Horovod timeline's writer, standing for all the job's ranks)" in out
    assert "rank 0 (the writer) stands for all 32 ranks (world size from the readiness ticks)" in out
    _, whatif, _ = invoke("whatif", PYTORCH_HOROVOD, env={"COLUMNS": "1000"})
    assert "what-if: rank 0 (horovod: the timeline's writer, standing for all 32 ranks)" in whatif


@pytest.mark.parametrize("command", ["analyze", "collectives", "whatif"])
def test_markdown_prints_the_tables_of_the_json(command: str, tmp_path: Path) -> None:
    code, out, err = invoke(command, GLOO, "--markdown", "-")
    assert code == 0, err
    _, text, _ = invoke(command, GLOO, "--json")
    result = json.loads(text)
    assert out.startswith(f"## timeline {command}\n")
    table = {"analyze": "iterations", "collectives": "collectives", "whatif": "scenarios"}[command]
    block = out.split(f"### {table}", 1)[1].split("\n\n", 2)[1]
    rows = [line for line in block.splitlines() if line.startswith("| ") and not line.startswith("| ---")]
    assert len(rows) - 1 == min(len(result[table]), 20)  # a header, then the first --top rows
    if command == "analyze":
        assert f"**verdict**: {result['verdict']['summary']}" in out
        first = result["iterations"][0]
        assert rows[1].startswith(f"| {first['rank']} | {first['iteration']} | ")
    target = tmp_path / "out.md"
    code, _, _ = invoke(command, GLOO, "--markdown", str(target))
    assert code == 0
    assert target.read_text() == out


def test_two_outputs_on_stdout_are_refused() -> None:
    code, out, err = invoke("analyze", GLOO, "--json", "--markdown", "-")
    assert (code, out) == (2, "")
    assert err.splitlines()[-1] == "error: --json, --markdown - and --csv - each print on stdout: choose one"
