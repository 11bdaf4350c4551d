"""Hostile option values and inputs (#19): one ``error:`` line and exit code 2, never a traceback or a hang.

Regexes polars cannot run, numbers out of range, paths with control characters, a budget file nested
beyond what tomllib can read, what-if settings that overflowed or hung the replay, and the report
commands without the ``report`` extra.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import cli.main
from tests.builders import PARAM, REPO, SAMPLES, run_timeline, tiny_kineto
from timeline.errors import UsageError

GLOO = SAMPLES / "ddp_gloo"
PASS_BUDGET = REPO / "tests" / "cli" / "golden" / "budget-pass.toml"

replay_module = importlib.import_module("timeline.whatif.engine")


def _invoke(*args: str | Path) -> Any:
    return CliRunner().invoke(cli.main.app, [str(a) for a in args], prog_name="timeline")


def _one_error_line(result: Any) -> str:
    code = result.exit_code if hasattr(result, "exit_code") else result.returncode
    assert code == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    line: str = lines[0]
    return line


# --- regexes -----------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["analyze", "collectives", "whatif", "check", "convert"])
@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        ("((", "unclosed group"),
        ("(?i)gemm", "global flags not at the start of the expression"),
        ("(?<=gemm)", "look-around, including look-ahead and look-behind, is not supported"),
        ("(?=all_reduce)", "look-around, including look-ahead and look-behind, is not supported"),
        (r"(a)\1", "backreferences are not supported"),
    ],
)
def test_a_comm_kernel_regex_polars_cannot_run_is_an_error(
    command: str, pattern: str, reason: str, tmp_path: Path
) -> None:
    extra = {"convert": ["-o", str(tmp_path / "out.parquet")], "check": ["--budget", str(PASS_BUDGET)]}
    result = _invoke(command, GLOO, "--comm-kernel", pattern, *extra.get(command, []))
    line = _one_error_line(result)
    assert line == (
        f"error: --comm-kernel {pattern!r}: not a regex timeline can match with ({reason}); write it in "
        "the syntax of Rust's regex crate, which polars uses: no look-around, no backreferences, flags "
        "scoped as (?i:...)"
    )


def test_a_comm_kernel_regex_polars_runs_still_works() -> None:
    result = _invoke(
        "analyze", "--json", GLOO, "--comm-kernel", r"^allreduce_\w+$", "--comm-kernel", "(?i:x)"
    )
    assert result.exit_code == 0, result.stderr


# --- numbers out of range -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["analyze", GLOO, "--top", "99999999999999999999"],
            "error: invalid value for '--top': 99999999999999999999 is not in the range 1<=x<=1000000; "
            "see 'timeline analyze --help'",
        ),
        (
            ["analyze", GLOO, "--top", "-5"],
            "error: invalid value for '--top': -5 is not in the range 1<=x<=1000000; "
            "see 'timeline analyze --help'",
        ),
        (
            ["collectives", GLOO, "--limit", "99999999999999999999"],
            "error: invalid value for '--limit': 99999999999999999999 is not in the range 1<=x<=1000000; "
            "see 'timeline collectives --help'",
        ),
        (
            ["analyze", GLOO, "--rank", "-1"],
            "error: invalid value for '--rank': -1 is not in the range 0<=x<=2147483647; "
            "see 'timeline analyze --help'",
        ),
        (
            ["serve", GLOO, "--port", "70000"],
            "error: invalid value for '--port': 70000 is not in the range 0<=x<=65535; "
            "see 'timeline serve --help'",
        ),
        (
            ["analyze", GLOO, "--top", "ten"],
            "error: invalid value for '--top': 'ten' is not a valid int range; see 'timeline analyze --help'",
        ),
    ],
)
def test_a_number_out_of_range_is_one_error_line(args: list[str | Path], expected: str) -> None:
    assert _one_error_line(_invoke(*args)) == expected


def test_the_installed_command_gives_the_same_line() -> None:
    result = run_timeline("serve", GLOO, "--port", "70000")
    assert _one_error_line(result) == (
        "error: invalid value for '--port': 70000 is not in the range 0<=x<=65535; "
        "see 'timeline serve --help'"
    )


# --- control characters ---------------------------------------------------------------------------


def test_shown_escapes_only_what_does_not_print() -> None:
    from timeline.errors import shown

    assert shown("runs/rank 0.json") == "runs/rank 0.json"
    assert shown(Path("ründe/ränk0.json")) == "ründe/ränk0.json"
    assert shown("a\nb.json") == "'a\\nb.json'"
    assert shown("a\tb\x1b[31m.json") == "'a\\tb\\x1b[31m.json'"
    assert shown("bad\udcff.json") == "'bad\\xff.json'"  # a byte that is not UTF-8: the byte (#42)


def test_one_line_escapes_control_characters() -> None:
    from timeline.errors import one_line

    assert one_line("plain: message") == "plain: message"
    assert one_line("x\ny\r\x00") == "x\\ny\\r\\x00"


def test_a_path_with_a_newline_stays_on_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "a\nb.json"
    line = _one_error_line(run_timeline("analyze", missing))
    assert "\\n" in line
    assert line.endswith(": no such file or directory")


def test_an_output_path_with_a_newline_is_shown_escaped(tmp_path: Path) -> None:
    from timeline.errors import shown

    trace = tmp_path / "rank0\n.json"
    trace.write_bytes(tiny_kineto())
    line = _one_error_line(_invoke("report", trace, "-o", trace))
    assert (
        line == f"error: {shown(trace)}: is one of the inputs; choose another output file (inputs are never "
        "modified)"
    )
    assert "'" in line  # repr-quoted


def test_a_warning_with_a_control_character_stays_on_one_line(tmp_path: Path) -> None:
    path = tmp_path / "rank0\x1b.json"
    path.write_bytes(tiny_kineto() + b"\nINFO: trailing log line\n")
    result = _invoke("analyze", "--json", path)
    assert result.exit_code == 0, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("warning: ")
    assert "\x1b" not in lines[0]


# --- a budget file nested too deeply ------------------------------------------------------------


@pytest.mark.parametrize("opening", ["[", "{a = "])
def test_a_deeply_nested_budget_file_is_one_error_line(opening: str, tmp_path: Path) -> None:
    budget = tmp_path / "timeline.toml"
    budget.write_text("a = " + opening * 100_000, encoding="utf-8")
    line = _one_error_line(_invoke("check", GLOO, "--budget", budget))
    assert line == (
        f"error: {budget}: arrays or inline tables nested too deeply to read; a budget file needs no more "
        "than a few levels (see docs/ci.md)"
    )


def test_the_library_raises_a_budget_error_naming_the_file(tmp_path: Path) -> None:
    from timeline.budgets import read_budget_file
    from timeline.errors import BudgetError

    budget = tmp_path / "deep.toml"
    budget.write_text("a = " + "[" * 100_000, encoding="utf-8")
    with pytest.raises(BudgetError, match=r"deep\.toml: arrays or inline tables nested too deeply"):
        read_budget_file(budget)


# --- what-if settings -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--latency", "1e7s"], "--latency '1e7s': must be at most 1 hour (3600 s) per step; typical is 5us"),
        (
            ["--latency", "1e400s"],
            "--latency '1e400s': must be at most 1 hour (3600 s) per step; typical is 5us",
        ),
        (["--latency", "5"], "--latency '5': a duration needs a unit: 5us, 5ms or 5s"),
        (["--world-size", "1000000000000"], "--world-size 1000000000000: must be at most 1,048,576"),
        (["--world-size", "0"], "--world-size 0: must be at least 1"),
        (["--iteration", "999"], "iteration 999: not in the trace; its iterations are 2-4"),
        (["--iteration", "3", "--iteration", "-1"], "iteration -1: not in the trace; its iterations are 2-4"),
        (
            ["--codec-gbps", "0", "--compression", "2"],
            "--codec-gbps 0: must be a positive number of Gbit/s; leave it out for a free codec (an upper "
            "bound on what compression gives)",
        ),
        (
            ["--codec-gbps", "nan"],
            "--codec-gbps nan: must be a positive number of Gbit/s; leave it out for a free codec (an upper "
            "bound on what compression gives)",
        ),
        (["--target-sf", "nan"], "--target-sf nan: a scaling factor must be in (0, 1], e.g. 0.9"),
        (["--target-sf", "0"], "--target-sf 0: a scaling factor must be in (0, 1], e.g. 0.9"),
        (["--compression", "inf"], "--compression inf: must be a finite ratio of at least 1 (1 = none)"),
    ],
)
def test_whatif_settings_out_of_range_are_one_error_line(args: list[str], expected: str) -> None:
    markers = SAMPLES / "ddp_gloo_markers"
    assert _one_error_line(_invoke("whatif", markers, *args)) == f"error: {expected}"


@pytest.fixture(scope="module")
def param_graph() -> Any:
    from timeline.trace import load
    from timeline.whatif.graph import trace_graph

    return trace_graph(load(PARAM))


def test_a_long_replay_ends(param_graph: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # 1 hour per step, 13,900 ranks: each collective lasts 1e17 ns, where a float's step is 16 ns. The
    # transfers' last few ns of work used to stay above the "done" threshold without moving the clock:
    # the replay looped for ever (timeline whatif --latency 1e7s hung the same way).
    rates = replay_module._Simulation._rates
    calls = [0]

    def counted(self: Any) -> Any:
        calls[0] += 1
        if calls[0] > 100_000:
            raise AssertionError("the replay does not advance")
        return rates(self)

    monkeypatch.setattr(replay_module._Simulation, "_rates", counted)
    scenario = replay_module.Scenario(latency_s=3600.0, world_size=13_900)
    prediction = replay_module.replay(param_graph, scenario=scenario)
    assert calls[0] < 1_000
    steps = 2 * (13_900 - 1)  # a ring all-reduce
    assert prediction.iteration_ns > steps * 3600e9  # at least one collective's latency


def test_a_replay_beyond_the_nanosecond_range_is_an_error(param_graph: Any) -> None:
    scenario = replay_module.Scenario(latency_s=3600.0, world_size=100_000)
    with pytest.raises(
        UsageError, match=r"^what-if: this scenario's predicted run lasts more than \d+ years"
    ):
        replay_module.replay(param_graph, scenario=scenario)
    one_collective_too_long = replay_module.Scenario(latency_s=3600.0, world_size=1_048_576)
    with pytest.raises(UsageError, match="longer than timeline's nanosecond times can hold"):
        replay_module.replay(param_graph, scenario=one_collective_too_long)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"latency_s": float("inf")},
        {"latency_s": float("nan")},
        {"latency_s": 3601.0},
        {"world_size": 1_048_577},
        {"bandwidth_gbps": float("inf")},
        {"bandwidth_gbps": float("nan")},
    ],
)
def test_a_scenario_out_of_range_is_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(UsageError):
        replay_module.Scenario(**kwargs)


def test_an_iteration_not_in_the_trace_is_an_error_of_the_library(param_graph: Any) -> None:
    with pytest.raises(UsageError, match=r"^iteration 3, 999: not in the trace; its iterations are 10$"):
        replay_module.replay(param_graph, iterations=[10, 999, 3])


# --- the report without its extra -------------------------------------------------------------------


@pytest.mark.parametrize(("command", "extra"), [("serve", ["--port", "0"]), ("report", ["-o", "r.html"])])
def test_the_report_without_bokeh_says_how_to_install_it(
    command: str, extra: list[str], tmp_path: Path
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    # bokeh made unimportable, as in an install without the extra (pip install timeline)
    (site / "sitecustomize.py").write_text("import sys\nsys.modules['bokeh'] = None\n", encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-c", "from cli.main import main; main()", command, str(GLOO), *extra],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=tmp_path,
        env={"PYTHONPATH": f"{site}:{REPO}", "PATH": "/usr/bin:/bin"},
    )
    line = _one_error_line(result)
    assert line == (
        f"error: timeline {command} needs the 'report' extra (bokeh is not installed): pip install "
        "'timeline-comm[report]' (in a source checkout: pip install -e '.[report]')"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site"]


@pytest.mark.parametrize("pattern", ["((", "(?<=gemm)", r"(a)\1"])
def test_the_library_refuses_a_pattern_it_cannot_match_with(pattern: str) -> None:
    from timeline.errors import UsageError
    from timeline.importers.rules import ClassificationRules

    with pytest.raises(UsageError, match="not a regex timeline can match with"):
        ClassificationRules(extra_comm_kernels=(pattern,))
    with pytest.raises(UsageError, match="cpu sync pattern"):
        ClassificationRules(extra_cpu_sync_ops=(pattern,))


def test_timeline_analyze_refuses_a_bad_pattern_before_reading() -> None:
    import timeline
    from timeline.errors import UsageError

    with pytest.raises(UsageError, match="comm kernel pattern"):
        timeline.analyze(["no-such-file.json"], comm_kernels=["(?<=gemm)"])
