"""How timeline starts worker processes: spawned, with malloc settings suited to large transient data.

Shared by the per-rank executors (:mod:`timeline.executors`) and the parallel decoding of
one large trace (:mod:`timeline.importers.stream`): :func:`process_pool` is the one way a pool starts.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from importlib.machinery import ModuleSpec
from multiprocessing.context import SpawnContext
from pathlib import Path

__all__ = [
    "GC_THRESHOLDS",
    "WORKER_MALLOC_ENV",
    "can_spawn",
    "polars_threads",
    "pools_started",
    "preload_module",
    "process_pool",
    "release_at_exit",
    "spawn_context",
    "stop_workers",
    "worker_environment",
    "worker_settings",
    "worker_started",
]

# glibc malloc settings of worker processes. A task allocates and frees a few hundred MB (decompressed
# JSON, decoded events); by default glibc maps large blocks afresh and returns freed memory to the
# system, so every task pays the page faults again (about a fifth of a task's CPU time). Keeping the
# heap instead bounds a worker's memory by its largest task. Settings already in the environment win.
WORKER_MALLOC_ENV = {
    "MALLOC_MMAP_THRESHOLD_": str(1 << 30),
    "MALLOC_TRIM_THRESHOLD_": str(1 << 32),
    "MALLOC_TOP_PAD_": str(64 << 20),
}


GC_THRESHOLDS = (500_000, 20, 20)
"""The garbage collector's thresholds of a command and of its workers (``gc.set_threshold``).

A command allocates many long-lived objects (modules, decoded traces) and few cycles. At 50,000 a
command still ran one or two first-generation collections of 16-33 ms each (its imports and a
trace's decoding), at 500,000 none, with the same peak memory (``timeline analyze`` on the sample,
PARAM, the 54 MB trace and 8 ranks of it: 104, 116, 161 and 176 MB either way)."""


def polars_threads(processes: int) -> int:
    """Return the polars threads each of ``processes`` busy processes gets: the cores, shared.

    polars sizes its thread pool to all cores by default; processes that each do so on the same
    cores spend CPU time handing work between more threads than cores (5 to 10 % more here).
    """
    return max(1, (os.cpu_count() or 1) // max(1, processes))


def can_spawn() -> bool:
    """Whether worker processes can be spawned: not when ``__main__`` is a file that does not exist.

    A script piped to ``python -`` has ``__main__.__file__ == "<stdin>"``, which spawned workers
    would try to re-import.
    """
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    return main_file is None or Path(main_file).exists()


def spawn_context() -> SpawnContext:
    """Return the spawn context: forking a process whose polars thread pool is running can deadlock."""
    return multiprocessing.get_context("spawn")


_pools_started = 0


def process_pool(processes: int) -> ProcessPoolExecutor:
    """Return a pool of ``processes`` spawned worker processes: the one way timeline starts workers.

    Start them inside :func:`worker_environment` (they copy the environment when they start, on the
    first submissions). Each worker first sets the garbage collector as the command line does
    (:func:`worker_started`).
    """
    global _pools_started
    _pools_started += 1
    return ProcessPoolExecutor(max_workers=processes, mp_context=spawn_context(), initializer=worker_started)


def worker_started() -> None:
    """Set up a worker process before its first task: the collector's thresholds of the command line.

    Importing polars and decoding traces allocate many long-lived objects and few cycles; the
    default first-generation threshold (700) runs dozens of collections for nothing while a worker
    imports polars.
    """
    gc.set_threshold(*GC_THRESHOLDS)


def pools_started() -> int:
    """How many process pools this process has started (their clean-up at exit matters)."""
    return _pools_started


def stop_workers(timeout_s: float = 10.0) -> None:
    """Terminate the worker processes this process started, and wait for them (at most ``timeout_s`` each).

    For a command that is done (its workers idle, or tearing down) or interrupted (their tasks no
    longer wanted): it goes on, or exits, without waiting for them to finish.
    """
    children = multiprocessing.active_children()
    for child in children:
        child.terminate()
    for child in children:
        child.join(timeout_s)
    _exits_recorded(children, timeout_s)


def _exits_recorded(children: list[multiprocessing.process.BaseProcess], timeout_s: float) -> None:
    """Wait until each ended child's exit code is recorded (at most ``timeout_s`` in all).

    A pool's manager thread joins its workers too: when its ``waitpid`` took a child's exit status,
    this thread's got none, and the child counts as running (``active_children``) until that thread
    has stored the code, a few GIL switches later.
    """
    from multiprocessing.connection import wait

    deadline = time.monotonic() + timeout_s
    for child in children:
        while child.exitcode is None and wait([child.sentinel], 0) and time.monotonic() < deadline:
            time.sleep(0.001)  # the GIL to the thread that reaped it


def release_at_exit(timeout_s: float = 10.0) -> bool:
    """Stop the workers and release what their pools hold, for a process about to end with ``os._exit``.

    A pool's queues hold named semaphores, which multiprocessing unlinks at a normal exit (its
    exit finalizers); ended without them, its resource tracker warns about each one on stderr. Does
    the first steps of a normal exit, in its order, once the workers are stopped: waits for the
    threads it waits for (the non-daemon ones, among them each pool's manager thread, whose
    teardown unlinks semaphores), then runs the finalizers (``threading._shutdown`` and
    ``multiprocessing.util._run_finalizers``). Returns False, the workers stopped, where this Python
    has no such functions or a thread is still running after ``timeout_s`` (the caller exits
    normally).

    Two races of this order are closed. A thread's teardown goes on after it has left
    :func:`threading.enumerate`: a process that ended while a semaphore's finalizer ran there,
    between the unlink and its word to the tracker, left the tracker a name it could no longer
    unlink ("leaked semaphore", "No such file or directory"); ``threading._shutdown`` waits for it.
    And a manager thread closes its wake-up pipe as it ends, unguarded against the exit hook that
    writes to it (Python 3.11: "Bad file descriptor"): the threads still listed are joined first.
    """
    from multiprocessing import util

    run_finalizers = getattr(util, "_run_finalizers", None)
    threads_done = getattr(threading, "_shutdown", None)
    stop_workers()
    if run_finalizers is None or threads_done is None or not _threads_joined(timeout_s):
        return False
    threads_done()  # what a normal exit does first: the threads' exit hooks, then it waits for them
    run_finalizers(0)  # what it does next, before it joins the workers: the semaphores
    return True


def _threads_joined(timeout_s: float) -> bool:
    """Join the running non-daemon threads but this one (at most ``timeout_s`` in all); whether all ended."""
    deadline = time.monotonic() + timeout_s
    this = threading.current_thread()
    waited = [thread for thread in threading.enumerate() if thread is not this and not thread.daemon]
    for thread in waited:
        thread.join(max(0.0, deadline - time.monotonic()))
    return not any(thread.is_alive() for thread in waited)


def preload_module(name: str) -> None:
    """Import a module: the first task of a worker started ahead (``LocalExecutor.start``)."""
    import importlib

    importlib.import_module(name)


@contextmanager
def worker_environment(
    polars_threads: int | None = None, *, task: Callable[..., object] | None = None
) -> Iterator[None]:
    """Set :data:`WORKER_MALLOC_ENV` while worker processes start (they copy the environment).

    ``polars_threads``: the size of the workers' polars thread pools (``POLARS_MAX_THREADS``), see
    :func:`polars_threads`. Settings already in the environment win.

    ``task``: the function the workers run. A spawned process runs the caller's main script again
    before its first task (for functions defined there); for the ``timeline`` command that is the
    whole command line (typer, rich: about 0.15 s more before a worker starts working). When
    ``task`` lives in an importable module, the workers skip it.

    Workers started here ignore Ctrl-C (SIGINT): a terminal sends it to every process of the job,
    and only this one handles it (the command line stops the workers and exits with code 130),
    instead of each worker printing a ``KeyboardInterrupt`` traceback.
    """
    with _main_script_skipped(task), _environment(polars_threads), _interrupts_ignored():
        yield


@contextmanager
def _interrupts_ignored() -> Iterator[None]:
    """Block SIGINT while worker processes start: they inherit the mask and never see a Ctrl-C.

    Blocked, not ignored: a Ctrl-C meanwhile waits and reaches this process when it is unblocked.
    """
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        yield  # workers started from another thread (or on Windows) see Ctrl-C as before
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


@contextmanager
def _main_script_skipped(task: Callable[..., object] | None) -> Iterator[None]:
    main = sys.modules.get("__main__")
    if task is None or getattr(task, "__module__", "__main__") == "__main__" or main is None:
        yield
        return
    if getattr(main, "__spec__", None) is not None or getattr(main, "__file__", None) is None:
        yield  # run with -m (its workers import nothing of it) or interactively: nothing to skip
        return
    # multiprocessing.spawn: a main module named "__main__" is not imported again in the worker
    main.__spec__ = ModuleSpec("__main__", None)
    try:
        yield
    finally:
        main.__spec__ = None


def worker_settings(polars_threads: int | None = None) -> dict[str, str]:
    """Return the environment a worker gets on top of this one's (what this one sets already wins).

    :data:`WORKER_MALLOC_ENV`, and ``POLARS_MAX_THREADS`` when ``polars_threads`` is given.
    """
    wanted = dict(WORKER_MALLOC_ENV)
    if polars_threads is not None:
        wanted["POLARS_MAX_THREADS"] = str(polars_threads)
    return {k: v for k, v in wanted.items() if k not in os.environ}


@contextmanager
def _environment(polars_threads: int | None) -> Iterator[None]:
    added = worker_settings(polars_threads)
    os.environ.update(added)
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)
