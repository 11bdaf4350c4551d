"""SIGTERM and SIGHUP end a command as Ctrl-C does (#42, item 6): nothing is left behind.

A scheduler, ``timeout`` and CI end a job with SIGTERM; a closed terminal sends SIGHUP. Python's
default is to die at once, which left the worker processes (109 MB each) and the resource tracker
running with parent 1, named semaphores (``sem.mp-*``) in ``/dev/shm`` and ``.partial-*`` folders
beside a dataset being written. Now the command stops its workers, removes what it was writing and
exits with 143 (SIGTERM) or 129 (SIGHUP), printing ``terminated (SIGTERM)``.

Each case runs the installed command on a real 8-rank run (8 copies of the 54 MB trace, written by
``benchmarks/generate.py``) with its stderr on a pseudo-terminal, so that its progress bar shows
when the first rank's task has ended: the worker processes are then running. The signal goes to
the command alone (not its process group: the workers must be stopped by the command). The test
then waits, on each process's pidfd, for every process of the command's tree to end, and checks
that ``/dev/shm`` holds nothing the command made.
"""

from __future__ import annotations

import importlib
import os
import pty
import re
import select
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

import cli.main
from benchmarks.generate import DEFAULT_SOURCE, make_rank_set
from tests.builders import REPO, SAMPLES, timeline_command
from timeline.errors import Terminated

SHM = Path("/dev/shm")
GLOO = SAMPLES / "ddp_gloo"
PASS_BUDGET = REPO / "tests" / "cli" / "golden" / "budget-pass.toml"
BOUND_S = 120.0
"""The longest wait for anything here: only a broken behaviour reaches it."""

_CAN_RUN = hasattr(os, "pidfd_open") and SHM.is_dir() and (os.cpu_count() or 1) >= 2
REAL_RUN = pytest.mark.skipif(
    not _CAN_RUN or not DEFAULT_SOURCE.is_file(),
    reason="a real run needs pidfd_open (Linux 5.3), /dev/shm, 2 cores (worker processes), the 54 MB trace",
)


@pytest.fixture(scope="module")
def eight_ranks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """8 rank files, each the 54 MB trace with its rank rewritten (3 MB of gzip each)."""
    folder = tmp_path_factory.mktemp("r8")
    make_rank_set(DEFAULT_SOURCE, folder, ranks=8)
    return folder


@dataclass
class Ended:
    """What a command stopped by a signal left: its exit code, stderr, and what it had made in /dev/shm."""

    code: int
    stderr: str
    processes: list[int]
    shared: set[str]


def _tree(pid: int) -> list[int]:
    """Return the processes below ``pid`` (children, theirs, …) from /proc."""
    found: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
            found += children
            todo += children
    return found


def _shared_files(pids: list[int]) -> set[str]:
    """Return the /dev/shm files these processes have mapped or open."""
    held: set[str] = set()
    for pid in pids:
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
        except OSError:
            continue
        held |= {line.split(maxsplit=5)[5] for line in maps.splitlines() if " /dev/shm/" in line}
        for fd in Path(f"/proc/{pid}/fd").glob("*"):
            try:
                target = str(fd.readlink())
            except OSError:
                continue
            if target.startswith("/dev/shm/"):
                held.add(target)
    return {name.removesuffix(" (deleted)") for name in held}


_DONE = re.compile(rb"(?<![0-9])[1-7]/8(?![0-9])")
"""A progress bar that counts one rank's task done, not all."""
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _read_until_a_rank_is_done(master: int) -> bytes:
    """Block until the command's progress bar counts a rank done: its worker processes run."""
    drawn = b""
    while _DONE.search(drawn) is None:
        ready, _, _ = select.select([master], [], [], BOUND_S)
        assert ready, f"the command drew no progress: {drawn!r}"
        chunk = os.read(master, 65536)
        assert chunk, f"the command closed its terminal: {drawn!r}"
        drawn += chunk
    return drawn


def _rest_of(master: int) -> bytes:
    """Read what the command still writes to its terminal, until it closes it."""
    out = b""
    while select.select([master], [], [], BOUND_S)[0]:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: every writer closed the terminal
            break
        if not chunk:
            break
        out += chunk
    return out


def _signalled(args: list[str], sig: signal.Signals, cwd: Path) -> Ended:
    """Run ``timeline ARGS``, send ``sig`` once its workers run, and wait for its whole tree to end."""
    master, terminal = pty.openpty()
    env = {**os.environ, "COLUMNS": "120", "TERM": "xterm"}
    command = subprocess.Popen(
        [*timeline_command(), *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=terminal,
        cwd=cwd,
        env=env,
        start_new_session=True,  # a process group of its own: the signal reaches the command alone
    )
    os.close(terminal)
    try:
        _read_until_a_rank_is_done(master)
        processes = _tree(command.pid)
        pidfds = [os.pidfd_open(pid) for pid in processes if Path(f"/proc/{pid}").exists()]
        shared = _shared_files([command.pid, *processes])
        command.send_signal(sig)
        code = command.wait(BOUND_S)
        stderr = _rest_of(master).decode(errors="replace")
        for pidfd in pidfds:
            # readable once the process has ended (a zombie of an init that does not reap counts)
            ended, _, _ = select.select([pidfd], [], [], BOUND_S)
            assert ended, "a process of the command is still running"
            os.close(pidfd)
    finally:
        if command.poll() is None:
            command.kill()
            command.wait()
        os.close(master)
        assert command.stdout is not None
        command.stdout.close()
    return Ended(code=code, stderr=stderr, processes=processes, shared=shared)


def _last_words(stderr: str) -> str:
    """What the command printed last, its progress bar's drawing taken out."""
    return _ANSI.sub("", stderr).rstrip()


def _unheld(before: set[str]) -> set[str]:
    """Entries of /dev/shm made since ``before`` that no running process holds (left behind)."""
    new = {str(entry) for entry in SHM.iterdir()} - before
    if not new:
        return set()
    pids = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]
    return new - _shared_files(pids)


@pytest.fixture
def shm_before() -> set[str]:
    return {str(entry) for entry in SHM.iterdir()}


@REAL_RUN
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_signal_stops_analyze_of_8_ranks_and_its_workers(
    eight_ranks: Path, tmp_path: Path, shm_before: set[str], sig: signal.Signals, code: int
) -> None:
    ended = _signalled(["analyze", "--executor", "local", str(eight_ranks)], sig, tmp_path)
    assert ended.processes, "no worker process was running when the signal was sent"
    assert ended.code == code, ended.stderr
    assert _last_words(ended.stderr).endswith(f"terminated ({sig.name})")
    assert "Traceback" not in ended.stderr
    assert ended.shared, "the command held nothing in /dev/shm: its pool was not running"
    assert {path for path in ended.shared if Path(path).exists()} == set()
    assert _unheld(shm_before) == set()


@REAL_RUN
def test_sigterm_stops_convert_to_a_dataset_and_removes_its_partial_folder(
    eight_ranks: Path, tmp_path: Path, shm_before: set[str]
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    ended = _signalled(
        ["convert", str(eight_ranks), "-o", str(out / "run.d"), "--partition-by-rank"], signal.SIGTERM, out
    )
    assert ended.processes
    assert ended.code == 143, ended.stderr
    assert _last_words(ended.stderr).endswith("terminated (SIGTERM)")
    assert sorted(p.name for p in out.iterdir()) == []  # neither the dataset nor a .partial folder
    assert {path for path in ended.shared if Path(path).exists()} == set()
    assert _unheld(shm_before) == set()


# --- in-process: the boundary's exit code and message ------------------------------------------


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
@pytest.mark.parametrize(
    ("command", "target"),
    [
        (["analyze"], ("timeline.execution.session", "analyze_inputs")),
        (["check", "--budget", str(PASS_BUDGET)], ("timeline.budgets.runs", "read_run")),
        (["diff", str(GLOO)], ("timeline.execution.session", "analyze_inputs")),
    ],
)
def test_a_terminating_signal_is_its_exit_code_and_one_line(
    command: list[str],
    target: tuple[str, str],
    sig: signal.Signals,
    code: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def terminated(*args: object, **kwargs: object) -> None:
        raise Terminated(sig)

    monkeypatch.setattr(importlib.import_module(target[0]), target[1], terminated)
    result = CliRunner().invoke(cli.main.app, [command[0], str(GLOO), *command[1:]], prog_name="timeline")
    assert result.exit_code == code
    assert result.stderr == f"terminated ({sig.name})\n"


def test_the_handlers_are_put_back_after_the_command() -> None:
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    result = CliRunner().invoke(cli.main.app, ["analyze", "--json", str(GLOO)], prog_name="timeline")
    assert result.exit_code == 0, result.stderr
    assert {sig: signal.getsignal(sig) for sig in before} == before


def test_a_signal_ignored_at_the_start_stays_ignored() -> None:
    # nohup starts a command with SIGHUP ignored: it must not end it
    script = (
        "import os, signal, sys\n"
        "from cli.main import _terminations\n"
        "with _terminations():\n"
        "    os.kill(os.getpid(), signal.SIGHUP)\n"
        "    print('still running')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=False,
        timeout=BOUND_S,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "still running\n"
