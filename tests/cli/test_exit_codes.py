"""Exit codes, the same for every command (docs/cli.md, "Exit codes"; ``cli.main.EXIT_CODES``).

0 done, 1 ``check`` found a budget exceeded (only that), 2 bad input or usage (one ``error:`` line),
3 an internal error (the traceback, then a line asking for a bug report), 130 interrupted, 141
stdout closed by its reader. Most cases run in-process (typer's ``CliRunner`` on ``cli.main.app``,
which goes through the same boundary as the installed command) with a library function
monkeypatched to fail; the installed command is run for the exit itself.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

import cli.common
import cli.main
from tests.builders import PARAM, REPO, SAMPLES, TRACES, run_timeline
from timeline import __version__

GLOO = SAMPLES / "ddp_gloo"
PROFILE = TRACES / "seed" / "bk_time_logs" / "resnet50.bk.log"  # a seed paper's backward profile
BUG_LINE = (
    f"error: internal error in timeline {__version__}: this is a bug, please report it to the timeline "
    "maintainers"
)
PASS_BUDGET = REPO / "tests" / "cli" / "golden" / "budget-pass.toml"

# Every command, with arguments that would run it on a small run; {out} is a folder to write into.
COMMANDS: dict[str, list[str]] = {
    "analyze": [str(GLOO)],
    "collectives": [str(GLOO)],
    "diff": [str(GLOO), str(GLOO)],
    "whatif": [str(GLOO)],
    "check": [str(GLOO), "--budget", str(PASS_BUDGET)],
    "init": [str(GLOO), "-o", "{out}/timeline.toml"],
    "convert": [str(GLOO / "rank0.2-4.pt.trace.json.gz"), "-o", "{out}/out.parquet"],
    "report": [str(GLOO), "-o", "{out}/report.html"],
    "serve": [str(GLOO), "--port", "0"],
    "capture": ["--demo", "--out", "{out}/run"],
    "seed": [str(PROFILE), "--single-step-ms", "128.1", "--world-size", "16", "--bandwidth", "10"],
    "cache": ["show", "--cache-dir", "{out}/cache"],
}

# The library call each command makes first once its options are read: patched to fail.
FIRST_CALL: dict[str, tuple[str, str]] = {
    "analyze": ("timeline.run.Run", "read"),
    "collectives": ("timeline.run.Run", "read"),
    "diff": ("timeline.budgets.runs", "read_run"),
    "whatif": ("timeline.run.Inputs", "load"),
    "check": ("timeline.budgets.runs", "read_run"),
    "init": ("timeline.budgets.runs", "read_run"),
    "convert": ("timeline.run.Inputs", "load"),
    "report": ("timeline.run.Inputs", "load"),
    "serve": ("timeline.run.Inputs", "load"),
    "capture": ("timeline.capture", "run_demo"),
    "seed": ("timeline.whatif.seed", "read_backward_profile"),
    "cache": ("timeline.importers.cache", "cache_folder"),
}


def _args(command: str, tmp_path: Path) -> list[str]:
    return [arg.replace("{out}", str(tmp_path)) for arg in COMMANDS[command]]


def _patch(monkeypatch: pytest.MonkeyPatch, command: str, raising: BaseException) -> None:
    import importlib

    module, name = FIRST_CALL[command]
    owner = module.rsplit(".", 1)[-1]
    if owner[:1].isupper():  # a class of the module: timeline.run.Run
        target: Any = getattr(importlib.import_module(module.removesuffix("." + owner)), owner)
    else:
        target = importlib.import_module(module)

    def fails(*args: object, **kwargs: object) -> None:
        raise raising

    monkeypatch.setattr(target, name, fails)
    if command == "capture":  # the demo needs torch: let it look present
        monkeypatch.setattr(importlib.import_module("timeline.capture"), "require_torch", lambda: None)


def _invoke(args: list[str]) -> Any:
    return CliRunner().invoke(cli.main.app, args, prog_name="timeline")


def test_every_command_is_covered() -> None:
    assert set(COMMANDS) == set(cli.main.COMMANDS) == set(FIRST_CALL)
    assert set(cli.main.EXIT_CODES) == {0, 1, 2, 3, 129, 130, 141, 143}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_unexpected_exception_is_a_bug_with_exit_code_3(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _patch(monkeypatch, command, RuntimeError("a library bug"))
    result = _invoke([command, *_args(command, tmp_path)])
    assert result.exit_code == 3, result.stderr
    lines = result.stderr.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert lines[-2] == "RuntimeError: a library bug"
    assert lines[-1] == BUG_LINE


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_ctrl_c_is_exit_code_130(command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _patch(monkeypatch, command, KeyboardInterrupt())
    result = _invoke([command, *_args(command, tmp_path)])
    assert result.exit_code == 130
    assert result.stderr == "interrupted\n"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_abort_is_exit_code_130(command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _patch(monkeypatch, command, typer.Abort())
    result = _invoke([command, *_args(command, tmp_path)])
    assert result.exit_code == 130
    assert result.stderr == "interrupted\n"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_usage_error_is_one_error_line_and_exit_code_2(command: str, tmp_path: Path) -> None:
    result = _invoke([command, *_args(command, tmp_path), "--no-such-option"])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith("error: no such option: --no-such-option")
    assert result.stderr.endswith(f"; see 'timeline {command} --help'\n")
    assert len(result.stderr.splitlines()) == 1


@pytest.mark.parametrize("command", sorted(set(COMMANDS) - {"capture", "cache"}))  # they take no path
def test_a_missing_path_argument_is_exit_code_2(command: str) -> None:
    result = _invoke([command])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: missing ")
    assert len(result.stderr.splitlines()) == 1


def test_an_unknown_command_is_exit_code_2() -> None:
    result = _invoke(["analyse", str(GLOO)])
    assert result.exit_code == 2
    assert result.stderr == "error: no such command 'analyse'; did you mean 'analyze'?\n"
    result = _invoke(["nothing-like-it", str(GLOO)])
    assert result.stderr == "error: no such command 'nothing-like-it'; see 'timeline --help'\n"


def test_no_command_prints_the_help_with_exit_code_2() -> None:
    result = _invoke([])
    assert result.exit_code == 2
    assert "Commands:" in result.stderr + result.stdout


@pytest.mark.parametrize("command", ["analyze", "collectives", "whatif", "check", "seed"])
def test_done_is_exit_code_0(command: str, tmp_path: Path) -> None:
    result = _invoke([command, *_args(command, tmp_path)])
    assert result.exit_code == 0, result.stderr


def test_only_an_exceeded_budget_is_exit_code_1(tmp_path: Path) -> None:
    budget = tmp_path / "timeline.toml"
    budget.write_text('[[budgets]]\nmetric = "exposed_comm_ratio"\nmax = 0.0\n', encoding="utf-8")
    result = _invoke(["check", str(PARAM), "--budget", str(budget)])
    assert result.exit_code == 1, result.stderr
    bad = budget.with_name("bad.toml")
    bad.write_text("[[budgets]]\nmetric = 'no_such_metric'\nmax = 1\n", encoding="utf-8")
    assert _invoke(["check", str(PARAM), "--budget", str(bad)]).exit_code == 2


def test_the_installed_command_exits_3_with_the_traceback(tmp_path: Path) -> None:
    """``cli.main:run``, the console script's entry point, in a process of its own."""
    script = (
        "import sys\n"
        "import timeline.run as run\n"
        "def fails(*args, **kwargs):\n"
        "    raise RuntimeError('a library bug')\n"
        "run.Run.read = fails\n"
        "sys.argv = ['timeline', *sys.argv[1:]]\n"
        "from cli.main import run\n"
        "run()\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, "analyze", str(GLOO)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=REPO,
    )
    assert result.returncode == 3
    assert result.stdout == ""
    assert "Traceback (most recent call last):" in result.stderr
    assert result.stderr.endswith(f"RuntimeError: a library bug\n{BUG_LINE}\n")


def test_usage_errors_of_the_installed_command_are_one_line() -> None:
    result = run_timeline("analyze", GLOO, "--top", "-5")
    assert result.returncode == 2
    assert result.stderr == (
        "error: invalid value for '--top': -5 is not in the range 1<=x<=1000000; "
        "see 'timeline analyze --help'\n"
    )


@pytest.mark.parametrize("args", [["analyze", str(GLOO)], ["analyze", "--json", str(GLOO)]])
def test_a_closed_stdout_is_exit_code_141_without_a_traceback(args: list[str]) -> None:
    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written: as `| head` once it has its lines
    try:
        result = subprocess.run(
            [*_installed(), *args], stdout=write, stderr=subprocess.PIPE, text=True, timeout=300, check=False
        )
    finally:
        os.close(write)
    assert result.returncode == 141
    assert result.stderr == ""


def _installed() -> list[str]:
    from tests.builders import timeline_command

    return timeline_command()


@contextmanager
def _interrupting_progress() -> Iterator[Callable[[str, int, int], None]]:
    def report(label: str, done: int, total: int) -> None:
        # Ctrl-C reaches the main thread only (the pool's thread reports the helpers' tasks)
        if threading.current_thread() is threading.main_thread():
            raise KeyboardInterrupt

    yield report


def test_ctrl_c_while_worker_processes_run_is_exit_code_130(monkeypatch: pytest.MonkeyPatch) -> None:
    # The progress callback runs in this process as each rank's task ends, this process being one
    # of the workers of the pool: a Ctrl-C there stops the command while the pool is running.
    monkeypatch.setattr(cli.common, "progress_bar", _interrupting_progress)
    monkeypatch.setattr(os, "cpu_count", lambda: 3)  # two worker processes, even on one core
    result = _invoke(["analyze", "--executor", "local", str(PARAM)])
    assert result.exit_code == 130
    assert result.stderr == "interrupted\n"
    assert sys.modules["timeline.workers"].pools_started() > 0  # a pool was running
    assert multiprocessing.active_children() == []  # the workers were stopped, not left to finish


@pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="POSIX signal masks")
def test_worker_processes_leave_ctrl_c_to_the_command() -> None:
    # A terminal sends Ctrl-C to every process of the job: the workers, which block it, print no
    # KeyboardInterrupt tracebacks; the command stops them (above) and exits with 130.
    from timeline.workers import process_pool, worker_environment

    with process_pool(1) as pool:
        with worker_environment(task=signal.pthread_sigmask):
            future = pool.submit(signal.pthread_sigmask, signal.SIG_BLOCK, [])
        blocked = future.result(timeout=300)
    assert signal.SIGINT in blocked
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])  # this process still gets it
