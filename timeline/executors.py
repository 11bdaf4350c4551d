"""Where the per-rank tasks run: local worker processes, or Ray tasks on a Ray cluster.

An :class:`Executor` maps a picklable, module-level function over items and yields the results in
the order of the items (the first failing item, in that order, raises its own exception).
:class:`LocalExecutor` uses a pool of spawned processes on this machine (in-process for one item or
one worker); :class:`RayExecutor` submits one Ray task per item to an existing Ray cluster
(``address``) or to a Ray instance it starts on this machine (taking the first items itself while
that instance starts). ``ray`` is an optional dependency
(``pip install 'timeline-comm[ray]'``), imported only when a :class:`RayExecutor` is created.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import nullcontext
from typing import Any, Generic, Literal, Protocol, TypeVar

from timeline.errors import UsageError
from timeline.workers import (
    can_spawn,
    polars_threads,
    preload_module,
    process_pool,
    worker_environment,
    worker_settings,
)

__all__ = ["Executor", "ExecutorName", "LocalExecutor", "RayExecutor", "make_executor", "named_progress"]

T = TypeVar("T")
R = TypeVar("R")

ExecutorName = Literal["local", "ray"]
TaskProgress = Callable[[int, int], None]
"""Called as ``progress(done, total)`` each time a task finishes."""


def named_progress(
    progress: Callable[[str, int, int], None] | None, names: Sequence[str]
) -> TaskProgress | None:
    """Return a task progress that calls ``progress(name, done, total)``, the name of the last item done."""
    if progress is None:
        return None

    def report(done: int, total: int) -> None:
        progress(names[min(done, total) - 1], done, total)

    return report


RAY_MISSING = "--executor ray needs ray: pip install 'timeline-comm[ray]'"


class Executor(Protocol):
    """Runs a function over items, yielding results in the order of the items."""

    name: str

    def map(
        self, fn: Callable[[T], R], items: Sequence[T], *, progress: TaskProgress | None = None
    ) -> Iterator[R]:
        """Yield ``fn(item)`` for every item, in order."""
        ...


class LocalExecutor:
    """Runs tasks in worker processes on this machine, the calling process being one of the workers.

    Parameters
    ----------
    workers
        How many processes work, this one included; default: all cores. With one worker, or one
        item, the tasks run in this process. Otherwise ``workers - 1`` processes are spawned and this
        process takes tasks too while they start (a spawned worker needs about half a second to
        import polars before its first task).
    """

    name = "local"

    def __init__(self, workers: int | None = None) -> None:
        self.workers = max(1, workers or os.cpu_count() or 1)
        self._started: ProcessPoolExecutor | None = None

    def start(self, *, preload: str) -> None:
        """Start the helper processes now, each importing the module ``preload``, for the next :meth:`map`.

        A spawned helper spends about 0.2 s importing polars and timeline before its first task;
        started first thing, it does so while this process imports the same. Nothing happens with
        one worker or where processes cannot be spawned; :meth:`map` stops the helpers when it ends.
        """
        if self.workers == 1 or self._started is not None or not can_spawn():
            return
        helpers = self.workers - 1
        self._started = process_pool(helpers)
        with worker_environment(polars_threads(self.workers), task=preload_module):
            for _ in range(helpers):
                self._started.submit(preload_module, preload)

    @property
    def started(self) -> bool:
        """Whether helper processes were started (:meth:`start`) and wait for the next :meth:`map`."""
        return self._started is not None

    def stop(self) -> None:
        """Stop the helper processes started (:meth:`start`), once their tasks are done (nothing if none).

        Tasks already handed to them (:meth:`submit`) still run; this process does not wait for them.
        """
        if self._started is not None:
            self._started.shutdown(wait=False, cancel_futures=True)
            self._started = None

    def submit(self, fn: Callable[[T], R], item: T) -> Future[R]:
        """Hand ``fn(item)`` to the helpers started (:meth:`start`): a helper runs it once it is ready.

        For work shared with this process outside :meth:`map` (one trace decoded in two halves);
        :meth:`stop` ends the helpers when it is done.

        Raises
        ------
        RuntimeError
            No helper was started.
        BrokenProcessPool
            The helpers died.
        """
        if self._started is None:
            raise RuntimeError("LocalExecutor.submit: no helper started (LocalExecutor.start)")
        with worker_environment(polars_threads(self.workers), task=fn):
            return self._started.submit(fn, item)

    def map(
        self, fn: Callable[[T], R], items: Sequence[T], *, progress: TaskProgress | None = None
    ) -> Iterator[R]:
        """Yield ``fn(item)`` for every item, in order; the first failing item, in order, raises."""
        total = len(items)
        if self.workers == 1 or total <= 1 or not can_spawn():
            self.stop()  # helpers started for nothing: one item runs here
            for done, item in enumerate(items, 1):
                result = fn(item)
                if progress:
                    progress(done, total)
                yield result
            return
        helpers = min(self.workers - 1, total - 1)
        pool, self._started = self._started or process_pool(helpers), None
        shared = _SharedItems(fn, items, progress)
        try:
            # the helpers start on these first submissions
            with worker_environment(polars_threads(self.workers), task=fn):
                for _ in range(helpers):
                    shared.hand_over(pool)
            yield from shared.results()
        finally:
            shared.close()
            # The results are in: the helpers exit in the background (a Python process takes tens
            # of milliseconds to tear down its heap) rather than before the caller goes on.
            pool.shutdown(wait=False, cancel_futures=True)


class _SharedItems(Generic[T, R]):
    """Items taken in order, one at a time, by whichever process is free: this one, or a helper.

    A helper whose task just finished gets its next item from the pool's thread
    (:meth:`hand_over`); nothing waits in a helper's queue while this process could take it. Every
    item before a failing one is taken, so the failure raises in order.
    """

    def __init__(self, fn: Callable[[T], R], items: Sequence[T], progress: TaskProgress | None) -> None:
        self.fn, self.items, self.progress = fn, items, progress
        self.lock = threading.Lock()
        self.outcomes: dict[int, Future[R]] = {}
        self.taken = self.finished = 0
        self.stop = False  # an item failed, or the map is closing: take no more

    def take(self) -> int | None:
        """Return the next item's index, or None when none is left to take (under the lock)."""
        if self.stop or self.taken == len(self.items):
            return None
        self.taken += 1
        return self.taken - 1

    def report(self, ok: bool) -> None:
        """Count an item finished (anywhere); a failure stops the taking."""
        with self.lock:
            self.finished += 1
            self.stop = self.stop or not ok
            if self.progress:
                self.progress(self.finished, len(self.items))

    def hand_over(self, pool: ProcessPoolExecutor) -> None:
        """Submit the next item to the pool, if any is left; its end hands over the one after."""
        with self.lock:
            index = self.take()
            if index is None:
                return
            try:
                future = pool.submit(self.fn, self.items[index])
            except Exception as exc:  # a broken pool: raised in order, as the task's own error
                future = Future()
                future.set_exception(exc)
            self.outcomes[index] = future
        future.add_done_callback(lambda done: self._finished_remotely(pool, done))

    def _finished_remotely(self, pool: ProcessPoolExecutor, future: Future[R]) -> None:
        if future.cancelled():
            return
        self.report(future.exception() is None)
        self.hand_over(pool)

    def results(self) -> Iterator[R]:
        """Run items here while any is left, and yield every result in order as soon as it is in."""
        given = 0  # results handed to the caller, in order: released here as they go
        while True:
            with self.lock:
                index = self.take()
            if index is None:
                break
            outcome = self.outcomes[index] = _run_here(self.fn, self.items[index])
            self.report(outcome.exception() is None)
            # the caller gets each result once those before it are in, not after the last task
            while True:
                with self.lock:
                    ready = given in self.outcomes and self.outcomes[given].done()
                    future = self.outcomes.pop(given) if ready else None
                if future is None:
                    break
                given += 1
                yield future.result()
        for index in range(given, len(self.items)):
            with self.lock:
                future = self.outcomes.pop(index)
            yield future.result()

    def close(self) -> None:
        """Take no more items and cancel those not started."""
        with self.lock:
            self.stop = True
        for future in list(self.outcomes.values()):
            future.cancel()


def _run_here(fn: Callable[[T], R], item: T, future: Future[R] | None = None) -> Future[R]:
    """Run ``fn(item)`` in this process; return its result or exception as a finished future.

    ``future``: the (pending) future to finish, else a new one.
    """
    future = future if future is not None else Future()
    try:
        future.set_result(fn(item))
    except Exception as exc:  # raised in order by the caller, as a worker's would be
        future.set_exception(exc)
    return future


def _check_reachable(address: str, timeout_s: float = 10.0) -> None:
    """Fail fast on a ``host:port`` (or ``ray://host:port``) nobody listens on: Ray would retry forever."""
    text = address.removeprefix("ray://")
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not host:
        return  # "auto", "local", or a form Ray resolves itself
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        msg = (
            f"--ray-address {address}: cannot connect ({exc.strerror or exc}); "
            "is the Ray head running there (ray start --head)?"
        )
        raise UsageError(msg) from exc


class RayExecutor:
    """Runs tasks as Ray tasks, one per item, on a Ray cluster or a local Ray instance.

    While a local instance starts, the first items run in this process (see :meth:`map`).

    Parameters
    ----------
    address
        The cluster to connect to (``ray://head:10001``, ``head:6379``, or ``auto`` for the cluster
        this machine belongs to). Default: the ``RAY_ADDRESS`` environment variable, else a Ray
        instance started on this machine for the duration of the process.
    num_cpus
        CPUs of a local instance started here (default: all cores); ignored with ``address``.

    Raises
    ------
    UsageError
        If ``ray`` is not installed.

    Notes
    -----
    The workers import timeline and read the trace files by their path: on a cluster, install
    timeline on every node and keep the traces on storage every node mounts (see docs/scaling.md).
    """

    name = "ray"

    def __init__(self, address: str | None = None, *, num_cpus: int | None = None) -> None:
        if importlib.util.find_spec("ray") is None:
            raise UsageError(RAY_MISSING)
        self.address = address
        self.num_cpus = num_cpus
        self._local_instance = False
        """Whether this executor started the Ray instance it uses (its workers have our settings)."""

    def _starts_local_instance(self) -> bool:
        """Whether the first map starts a Ray instance on this machine (no cluster to join)."""
        import ray

        return not ray.is_initialized() and self.address is None and os.environ.get("RAY_ADDRESS") is None

    def _ray(self) -> Any:
        import ray

        if not ray.is_initialized():
            kwargs: dict[str, Any] = {
                "ignore_reinit_error": True,
                "include_dashboard": False,
                "log_to_driver": False,
                "logging_level": logging.ERROR,
            }
            if self.address is not None:
                _check_reachable(self.address)
                kwargs["address"] = self.address
            elif os.environ.get("RAY_ADDRESS") is None:
                kwargs["num_cpus"] = self.num_cpus or os.cpu_count() or 1
            # A local instance started here inherits this environment, and its workers with it: the
            # worker settings are set while it starts, so that tasks need no runtime_env of their
            # own (which would make Ray start other workers than the ones it starts with itself).
            local = "num_cpus" in kwargs
            try:
                with worker_environment(polars_threads=1) if local else nullcontext():
                    ray.init(**kwargs)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                where = self.address or os.environ.get("RAY_ADDRESS") or "a local Ray instance"
                msg = f"--ray-address {where}: cannot start or join Ray ({exc})"
                raise UsageError(msg) from exc
            self._local_instance = local
        return ray

    def map(
        self, fn: Callable[[T], R], items: Sequence[T], *, progress: TaskProgress | None = None
    ) -> Iterator[R]:
        """Yield ``fn(item)`` for every item, in order (as Ray tasks of one CPU each).

        While a local Ray instance starts (2-3 s on two cores, mostly waiting for its processes),
        this process takes items itself, in order from the first, on a thread; Ray gets the items
        after the last one taken here. Joining a running cluster, every item is a Ray task.
        """
        here = _ItemsHere(fn, items, progress)
        taker: threading.Thread | None = None
        if len(items) > 1 and self._starts_local_instance():
            taker = threading.Thread(target=here.take, name="timeline-items-while-ray-starts", daemon=True)
            taker.start()
        pending: list[Any] = []  # the Ray tasks not finished, filled by _remote_results
        try:
            try:
                ray = self._ray()
            finally:
                first_remote = here.stop_taking()
            yield from self._remote_results(ray, here, first_remote, pending)
        finally:
            here.stop_taking()
            if pending:
                import ray as ray_module

                for ref in pending:
                    ray_module.cancel(ref)
            if taker is not None:
                taker.join()  # the item it runs, at most

    def _remote_results(
        self, ray: Any, here: _ItemsHere[T, R], first_remote: int, pending: list[Any]
    ) -> Iterator[R]:
        """Yield every item's result in order: those taken here, then the Ray tasks of the rest."""
        from ray.exceptions import RayTaskError

        # the settings of local worker processes (timeline.workers); one polars thread per task
        # of one CPU. A Ray instance started by this executor has them already (see _ray).
        options: dict[str, Any] = {"num_cpus": 1, "max_retries": 0}
        if not self._local_instance:
            options["runtime_env"] = {"env_vars": worker_settings(polars_threads=1)}
        remote = ray.remote(**options)(here.fn)
        refs: list[Any] = [remote.remote(item) for item in here.items[first_remote:]]
        pending.extend(refs)
        for index in range(len(here.items)):
            if index < len(here.futures):
                yield here.futures[index].result()  # waits for the item this process still runs
                continue
            ref = refs[index - first_remote]
            refs[index - first_remote] = None  # the result leaves the object store once taken
            while ref in pending:
                ready, pending[:] = ray.wait(pending, num_returns=1)
                for _ in ready:
                    here.report()
            try:
                yield ray.get(ref)
            except RayTaskError as exc:
                # the task's own exception (a TimelineError for bad input), not Ray's wrapper
                cause = getattr(exc, "cause", None)
                if isinstance(cause, BaseException):
                    raise cause from None
                raise


class _ItemsHere(Generic[T, R]):
    """The items this process takes itself, in order from the first, while Ray starts."""

    def __init__(self, fn: Callable[[T], R], items: Sequence[T], progress: TaskProgress | None) -> None:
        self.fn, self.items, self.progress = fn, items, progress
        self.lock = threading.Lock()
        self.done = 0
        self.stop = self.failed = False  # stop: Ray is up, an item failed, or the map is closing
        self.futures: list[Future[R]] = []  # the outcomes of the items taken here: items 0, 1, ...

    def report(self) -> None:
        """Count an item finished (here or on Ray)."""
        with self.lock:
            self.done += 1
            if self.progress:
                self.progress(self.done, len(self.items))

    def take(self) -> None:
        """Run items here, in order, until Ray is up, an item fails or none is left."""
        while True:
            with self.lock:
                if self.stop or len(self.futures) == len(self.items):
                    return
                future: Future[R] = Future()
                self.futures.append(future)
                item = self.items[len(self.futures) - 1]
            _run_here(self.fn, item, future)
            self.report()
            if future.exception() is not None:
                with self.lock:
                    self.stop = self.failed = True

    def stop_taking(self) -> int:
        """Take no more items here; return the first item Ray runs (all taken here after a failure)."""
        with self.lock:
            self.stop = True
            return len(self.items) if self.failed else len(self.futures)


def make_executor(
    name: ExecutorName = "local", *, workers: int | None = None, ray_address: str | None = None
) -> Executor:
    """Return the executor called ``name``.

    Raises
    ------
    UsageError
        An unknown name, ``ray_address`` with the local executor, or ``ray`` missing.
    """
    if name == "local":
        if ray_address is not None:
            raise UsageError("--ray-address applies to --executor ray; drop it or pass --executor ray")
        return LocalExecutor(workers)
    if name == "ray":
        return RayExecutor(ray_address, num_cpus=workers)
    raise UsageError(f"--executor {name!r}: unknown executor; use local or ray")
