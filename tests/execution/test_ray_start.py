"""While the Ray executor starts a local instance, the calling process takes the first items itself.

Nothing here sleeps: the fake ``ray.init`` returns (or fails) on events the items set, and the test
with a real Ray instance starts Ray once an item is taken here and holds that item until the
executor hands the others to Ray.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from typing import Any

import pytest

from timeline.errors import UsageError
from timeline.execution import RayExecutor

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed")

BOUND_S = 120  # how long a wait below lasts before failing the test; only a broken executor waits


class _FakeRay:
    """``ray.init`` that returns once the items taken here have stopped (or fails at once), and tasks
    that are only recorded."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, fail: bool = False) -> None:
        import ray

        self.fail = fail
        self.submitted: list[Any] = []
        self.started = threading.Event()  # set by the first item taken here
        self.taker: threading.Thread | None = None  # the thread that takes items here
        monkeypatch.setattr(ray, "is_initialized", lambda: False)
        monkeypatch.setattr(ray, "init", self.init)
        monkeypatch.setattr(ray, "remote", self.remote)
        monkeypatch.setattr(ray, "cancel", lambda ref: None)

    def took(self) -> None:
        """Called by an item taken here: records the thread taking them."""
        self.taker = threading.current_thread()
        self.started.set()

    def init(self, **kwargs: Any) -> None:
        assert self.started.wait(BOUND_S), "no item was taken while Ray started"
        if self.fail:
            raise ConnectionError("the raylet did not start")
        # Up once the thread taking items here has stopped on its own: it must stop at a failure.
        assert self.taker is not None
        self.taker.join(BOUND_S)
        assert not self.taker.is_alive(), "the thread taking items here did not stop"

    def remote(self, **options: Any) -> Any:
        fake = self

        class Remote:
            def __init__(self, fn: Any) -> None:
                self.fn = fn

            def remote(self, item: Any) -> Any:
                fake.submitted.append(item)
                return ("ref", item)

        return Remote


def test_an_item_that_fails_here_raises_its_own_error_and_nothing_goes_to_ray(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = _FakeRay(monkeypatch)
    ran: list[int] = []

    def task(item: int) -> int:
        fake.took()
        ran.append(item)
        if item == 1:
            raise ValueError(f"item {item} is bad")
        return item

    results = RayExecutor(num_cpus=2).map(task, list(range(6)))
    assert next(results) == 0
    with pytest.raises(ValueError, match="item 1 is bad"):
        next(results)
    assert ran == [0, 1]  # no item taken here after the failing one
    assert fake.submitted == []


def test_a_start_that_fails_is_a_usage_error_after_the_item_running_here(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = _FakeRay(monkeypatch, fail=True)
    release = threading.Event()
    finished: list[int] = []

    def task(item: int) -> int:
        fake.took()
        release.wait(BOUND_S)
        finished.append(item)
        return item

    # The item taken here runs until the executor waits for the thread running it: only an executor
    # that waits for that thread before raising sees it finish.
    real_join = threading.Thread.join

    def join(self: threading.Thread, timeout: float | None = None) -> None:
        if self is fake.taker:
            release.set()
        real_join(self, timeout)

    monkeypatch.setattr(threading.Thread, "join", join)
    before = threading.active_count()
    try:
        with pytest.raises(UsageError, match="a local Ray instance: cannot start or join Ray"):
            list(RayExecutor(num_cpus=2).map(task, list(range(50))))
        # the thread taking items here has stopped (after its item) before the error is raised
        assert threading.active_count() == before
        assert finished == [0]
    finally:
        release.set()  # a thread an executor left running finishes its item
    assert fake.submitted == []


_TAKEN_HERE = threading.Event()  # set by the first item the calling process takes
_HANDED_TO_RAY = threading.Event()  # set once the executor submits its first Ray task


def _wait_for_ray(item: int) -> tuple[int, int]:
    """On the calling process, an item lasts until Ray gets the others; in a Ray worker, none."""
    import ray

    if not ray.is_initialized():  # the calling process, while the executor starts Ray
        _TAKEN_HERE.set()
        assert _HANDED_TO_RAY.wait(BOUND_S), "the executor gave Ray no item"
    return os.getpid(), item


def test_this_process_takes_the_first_items_while_a_local_instance_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import ray

    assert not ray.is_initialized(), "another test left a Ray instance running"
    real_init, real_remote = ray.init, ray.remote

    def init(**kwargs: Any) -> Any:
        """Ray starts once this process has taken an item (a thread not run for seconds: no race)."""
        assert _TAKEN_HERE.wait(BOUND_S), "this process took no item while Ray started"
        return real_init(**kwargs)

    class Submitting:
        """The executor's remote function: its first submission releases the item run here."""

        def __init__(self, remote: Any) -> None:
            self.wrapped = remote

        def remote(self, item: Any) -> Any:
            _HANDED_TO_RAY.set()
            return self.wrapped.remote(item)

    def remote(**options: Any) -> Any:
        return lambda fn: Submitting(real_remote(**options)(fn))

    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray, "remote", remote)
    _TAKEN_HERE.clear()
    _HANDED_TO_RAY.clear()
    done: list[int] = []
    try:
        executor = RayExecutor(num_cpus=2)
        got = list(executor.map(_wait_for_ray, list(range(8)), progress=lambda d, t: done.append(d)))
    finally:
        _HANDED_TO_RAY.set()
        ray.shutdown()
    assert [item for _, item in got] == list(range(8))
    taken_here = [i for i, (pid, _) in enumerate(got) if pid == os.getpid()]
    # the first item, held here until Ray was up and given the others; Ray took them in its workers
    assert taken_here == [0]
    assert done == list(range(1, 9))
