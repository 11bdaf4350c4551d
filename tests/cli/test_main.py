"""The entry point: ``timeline NAME ...`` builds only that command and behaves as the full app."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import cli.main
from tests.builders import PARAM


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["analyze", str(PARAM), "--json"], 0),
        (["analyze", "--top", "0", str(PARAM)], 2),
        (["whatif", "--no-such-option"], 2),
    ],
)
def test_main_builds_only_the_command_it_runs(
    args: list[str], code: int, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[list[str] | None] = []
    real = cli.main.make_app

    def spy(names: list[str] | None = None) -> object:
        built.append(names)
        return real(names)

    monkeypatch.setattr(cli.main, "make_app", spy)
    monkeypatch.setattr(sys, "argv", ["timeline", *args])
    with pytest.raises(SystemExit) as exited:
        cli.main.main()
    assert exited.value.code == code
    assert built == [[args[0]]]
    expected = CliRunner().invoke(cli.main.app, args, prog_name="timeline")
    assert expected.exit_code == code
    out = capsys.readouterr()
    assert out.out == expected.stdout
    # click names the program after ``python -m pytest`` here; the real entry point is ``timeline``
    assert out.err.replace("python -m pytest.timeline", "timeline") == expected.stderr


def test_help_and_mistakes_get_every_command(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "argv", ["timeline", "--help"])
    with pytest.raises(SystemExit) as exited:
        cli.main.main()
    assert exited.value.code == 0
    listed = capsys.readouterr().out
    for name in cli.main.COMMANDS:
        assert f"  {name} " in listed


_RUN = (
    "import atexit, sys\n"
    "atexit.register(lambda: print('teardown ran', file=sys.stderr))\n"
    "sys.argv = ['timeline', *sys.argv[1:]]\n"
    "{patch}"
    "from cli.main import run\n"
    "run()\n"
)
"""The installed command's entry point (``cli.main:run``), run as a script; ``{patch}``: code before it."""


def _run(*args: str, patch: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _RUN.format(patch=patch), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_installed_command_exits_at_once_with_the_exit_code(tmp_path: Path) -> None:
    """``timeline`` (``cli.main:run``) skips the interpreter's teardown and keeps the exit code."""
    ok = _run("analyze", str(PARAM), "--json")
    assert ok.returncode == 0
    assert ok.stdout.startswith("{")
    assert "teardown ran" not in ok.stderr
    bad = _run("analyze", str(tmp_path / "missing"))
    assert bad.returncode == 2
    assert bad.stderr.startswith("error: ")
    assert "teardown ran" not in bad.stderr


def test_the_command_takes_the_workers_collector_thresholds_and_collects_nothing_on_a_sample() -> None:
    """The installed command sets :data:`timeline.workers.GC_THRESHOLDS`: no collection on PARAM.

    A collection there cost 16-33 ms (its first generation of 50,000 objects, at the former
    threshold). Counted by the collector's callbacks once the command has set its thresholds
    (importing typer, before, collects at the interpreter's), reported after the output.
    """
    patch = (
        "import gc, atexit\n"
        "seen = []\n"
        "ours = lambda: gc.get_threshold() != (700, 10, 10)\n"
        "gc.callbacks.append(lambda phase, _: seen.append(1) if phase == 'start' and ours() else None)\n"
        "atexit.register(lambda: print('collections', len(seen), gc.get_threshold(), file=sys.stderr))\n"
        "import cli.main\n"
        "cli.main.exit_now = lambda code: None\n"  # the normal exit: its atexit hooks run
    )
    from timeline.workers import GC_THRESHOLDS

    done = _run("analyze", str(PARAM), "--json", patch=patch)
    assert done.returncode == 0, done.stderr
    line = next(ln for ln in done.stderr.splitlines() if ln.startswith("collections"))
    assert line == f"collections 0 {GC_THRESHOLDS}"


def test_after_worker_processes_the_command_exits_at_once_and_releases_them() -> None:
    """Worker processes were started: stopped, their queues released, and the teardown skipped all the same.

    Released means no warning of multiprocessing's resource tracker about semaphores left behind
    (it prints one for each pool whose queues were not released, once the command has ended:
    :func:`test_a_pool_not_released_leaves_semaphores_behind` shows it does).
    """
    ok = _run("analyze", "--executor", "local", str(PARAM), "--json")
    assert ok.returncode == 0
    assert ok.stdout.startswith("{")
    assert "teardown ran" not in ok.stderr
    assert ok.stderr == ""


_POOL = """
import os, sys
import timeline.workers as w
if __name__ == "__main__":
    pool = w.process_pool(1)
    assert pool.submit(abs, -3).result() == 3
    if sys.argv[1] == "release":
        assert w.release_at_exit()
    else:
        w.stop_workers()  # the workers stopped, their queues not released
    os._exit(0)
"""


@pytest.mark.parametrize("ending", ["release", "stop"])
def test_a_pool_not_released_leaves_semaphores_behind(tmp_path: Path, ending: str) -> None:
    """The control of the test above: ended with ``os._exit`` after a pool ran, only
    :func:`timeline.workers.release_at_exit` leaves no semaphore for the resource tracker to warn of."""
    script = tmp_path / "pool.py"  # a file: spawned workers re-import the main module
    script.write_text(_POOL, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script), ending], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    assert ("leaked semaphore" in done.stderr) == (ending == "stop"), done.stderr


_POOL_TORN_DOWN_BY_ITS_THREAD = """
import os, threading, time
from multiprocessing import resource_tracker, synchronize
import timeline.workers as w


def cleanup(name):
    # a semaphore's finalizer (unlink, then tell the tracker), slowed down outside the main thread
    synchronize.sem_unlink(name)
    if threading.current_thread() is not threading.main_thread():
        time.sleep(0.2)
    resource_tracker.unregister(name, "semaphore")


if __name__ == "__main__":
    synchronize.SemLock._cleanup = staticmethod(cleanup)
    pool = w.process_pool(1)
    assert pool.submit(abs, -3).result() == 3
    pool.shutdown(wait=False, cancel_futures=True)  # as LocalExecutor does: its thread tears it down
    assert w.release_at_exit()
    os._exit(0)
"""


def test_a_pool_torn_down_by_its_thread_is_waited_for(tmp_path: Path) -> None:
    """A pool shut down without waiting is torn down by its manager thread, whose semaphores' finalizers
    may run after it has left ``threading.enumerate()``: the exit waits for them, as a normal exit does.

    Their window is widened here (each waits 0.2 s between the unlink and its word to the tracker):
    a process ended inside it leaves the tracker a name it warns of ("leaked semaphore").
    """
    script = tmp_path / "pool.py"
    script.write_text(_POOL_TORN_DOWN_BY_ITS_THREAD, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def test_teardown_is_kept_where_the_workers_cannot_be_released(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Python without multiprocessing's exit finalizers: the normal exit, which releases the queues."""
    import multiprocessing.util

    import timeline.workers

    monkeypatch.delattr(multiprocessing.util, "_run_finalizers")
    monkeypatch.setattr(timeline.workers, "_pools_started", 0)
    pool = timeline.workers.process_pool(1)
    pool.shutdown()
    assert timeline.workers.pools_started() == 1
    cli.main.exit_now(0)  # returns: the caller exits normally
