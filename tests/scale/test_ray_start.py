"""While the Ray executor starts a local instance, the calling process takes the first items itself."""

from __future__ import annotations

import importlib.util
import os
import threading
import time
from typing import Any

import pytest

from timeline.errors import UsageError
from timeline.execution import RayExecutor

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed")


class _FakeRay:
    """``ray.init`` that takes ``seconds`` (or fails), and tasks that are only recorded."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, seconds: float, fail: bool = False) -> None:
        import ray

        self.seconds = seconds
        self.fail = fail
        self.submitted: list[Any] = []
        self.started = threading.Event()  # set by the items taken here
        monkeypatch.setattr(ray, "is_initialized", lambda: False)
        monkeypatch.setattr(ray, "init", self.init)
        monkeypatch.setattr(ray, "remote", self.remote)
        monkeypatch.setattr(ray, "cancel", lambda ref: None)

    def init(self, **kwargs: Any) -> None:
        assert self.started.wait(10), "no item was taken while Ray started"
        time.sleep(self.seconds)
        if self.fail:
            raise ConnectionError("the raylet did not start")

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
    fake = _FakeRay(monkeypatch, seconds=0.3)

    def task(item: int) -> int:
        fake.started.set()
        if item == 1:
            raise ValueError(f"item {item} is bad")
        return item

    results = RayExecutor(num_cpus=2).map(task, list(range(6)))
    assert next(results) == 0
    with pytest.raises(ValueError, match="item 1 is bad"):
        next(results)
    assert fake.submitted == []


def test_a_start_that_fails_is_a_usage_error_after_the_item_running_here(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = _FakeRay(monkeypatch, seconds=0.0, fail=True)
    running = threading.Event()
    finished: list[int] = []

    def task(item: int) -> int:
        running.set()
        fake.started.set()
        time.sleep(0.2)
        finished.append(item)
        return item

    before = threading.active_count()
    with pytest.raises(UsageError, match="a local Ray instance: cannot start or join Ray"):
        list(RayExecutor(num_cpus=2).map(task, list(range(50))))
    # the thread taking items here has stopped (after its item) before the error is raised
    assert threading.active_count() == before
    assert 1 <= len(finished) < 50
    assert fake.submitted == []


def _wait_for_ray(item: int) -> tuple[int, int]:
    """On the calling process, an item lasts until Ray is up: Ray then takes the others."""
    import os

    import ray

    deadline = time.monotonic() + 120
    while not ray.is_initialized() and time.monotonic() < deadline:
        time.sleep(0.01)
    return os.getpid(), item


def test_this_process_takes_the_first_items_while_a_local_instance_starts() -> None:
    import ray

    assert not ray.is_initialized(), "another test left a Ray instance running"
    done: list[int] = []
    try:
        executor = RayExecutor(num_cpus=2)
        got = list(executor.map(_wait_for_ray, list(range(8)), progress=lambda d, t: done.append(d)))
    finally:
        ray.shutdown()
    assert [item for _, item in got] == list(range(8))
    taken_here = [i for i, (pid, _) in enumerate(got) if pid == os.getpid()]
    # a prefix, from the first item; Ray took the rest in its workers
    assert taken_here == list(range(len(taken_here)))
    assert 1 <= len(taken_here) <= 2
    assert done == list(range(1, 9))
