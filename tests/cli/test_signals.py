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
that ``/dev/shm`` holds nothing the command made: run as root, the command gets a ``/dev/shm`` of
its own (a mount namespace), listed once it has ended; otherwise, what its processes held when
signalled must be gone.
"""

from __future__ import annotations

import functools
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
    left: list[str] | None


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


# The command runs in a mount namespace of its own whose /dev/shm is a tmpfs of its own, held by a
# shell that lists it once the test says every process of the command has ended: what is listed is
# exactly what the command left (the machine's other processes make and drop their own semaphores
# in the shared /dev/shm meanwhile). The shell prints the command's pid first.
_HOLDER = """mount -t tmpfs -o size=512m tmpfs /dev/shm || exit 97
"$@" >/dev/null &
echo "$!"
wait "$!"
code=$?
read -r _
ls -A /dev/shm
exit "$code"
"""


@functools.cache
def _private_shm() -> bool:
    """Whether a command can be given a /dev/shm of its own (root, ``unshare``, mounts allowed)."""
    try:
        probe = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", "mount -t tmpfs tmpfs /dev/shm"],
            capture_output=True,
            check=False,
            timeout=BOUND_S,
        )
    except OSError:
        return False
    return probe.returncode == 0


def _signalled(args: list[str], sig: signal.Signals, cwd: Path) -> Ended:
    """Run ``timeline ARGS``, send ``sig`` once its workers run, and wait for its whole tree to end.

    With a /dev/shm of its own (:func:`_private_shm`), ``Ended.left`` lists what the command left
    there; else None, and ``Ended.shared`` (what its processes held when signalled) is what to check.
    """
    master, terminal = pty.openpty()
    env = {**os.environ, "COLUMNS": "120", "TERM": "xterm"}
    private = _private_shm()
    argv = [*timeline_command(), *args]
    if private:
        argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", _HOLDER, "sh", *argv]
    holder = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE if private else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=terminal,
        cwd=cwd,
        env=env,
        start_new_session=True,  # a process group of its own: the signal reaches the command alone
    )
    os.close(terminal)
    assert holder.stdout is not None
    try:
        pid = int(holder.stdout.readline()) if private else holder.pid
        command = os.pidfd_open(pid)
        _read_until_a_rank_is_done(master)
        processes = _tree(pid)
        pidfds = [os.pidfd_open(child) for child in processes if Path(f"/proc/{child}").exists()]
        shared = _shared_files([pid, *processes])
        os.kill(pid, sig)
        for pidfd in [command, *pidfds]:
            # readable once the process has ended (a zombie of an init that does not reap counts)
            ended, _, _ = select.select([pidfd], [], [], BOUND_S)
            assert ended, "a process of the command is still running"
            os.close(pidfd)
        left = None
        if private:
            assert holder.stdin is not None
            holder.stdin.write(b"\n")  # every process has ended: list what is left
            holder.stdin.close()
            left = holder.stdout.read().decode(errors="replace").split()
        code = holder.wait(BOUND_S)
        stderr = _rest_of(master).decode(errors="replace")  # the terminal's last writer is gone
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        os.close(master)
        holder.stdout.close()
    return Ended(code=code, stderr=stderr, processes=processes, shared=shared, left=left)


def _left_behind(ended: Ended) -> list[str]:
    """What the command left in /dev/shm: listed in its own, else what it held that still exists."""
    if ended.left is not None:
        return ended.left
    return sorted(path for path in ended.shared if Path(path).exists())


def _last_words(stderr: str) -> str:
    """What the command printed last, its progress bar's drawing taken out."""
    return _ANSI.sub("", stderr).rstrip()


@REAL_RUN
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_signal_stops_analyze_of_8_ranks_and_its_workers(
    eight_ranks: Path, tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    ended = _signalled(["analyze", "--executor", "local", str(eight_ranks)], sig, tmp_path)
    assert ended.processes, "no worker process was running when the signal was sent"
    assert ended.code == code, ended.stderr
    assert _last_words(ended.stderr).endswith(f"terminated ({sig.name})")
    assert "Traceback" not in ended.stderr
    assert ended.shared, "the command held nothing in /dev/shm: its pool was not running"
    assert _left_behind(ended) == []


@REAL_RUN
def test_sigterm_stops_convert_to_a_dataset_and_removes_its_partial_folder(
    eight_ranks: Path, tmp_path: Path
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
    assert _left_behind(ended) == []


# --- in-process: the boundary's exit code and message ------------------------------------------


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
@pytest.mark.parametrize(
    ("command", "target"),
    [
        (["analyze"], ("timeline.trace", "load")),
        (["check", "--budget", str(PASS_BUDGET)], ("timeline.budgets.runs", "read_run")),
        (["diff", str(GLOO)], ("timeline.trace", "load")),
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
