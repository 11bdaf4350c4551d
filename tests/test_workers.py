"""How worker processes start and end: the collector's settings, stopping them, releasing their queues."""

from __future__ import annotations

import gc
import multiprocessing

from timeline.executors import LocalExecutor
from timeline.workers import GC_THRESHOLDS, process_pool, stop_workers, worker_environment


def test_a_worker_sets_the_collector_as_the_command_line_does() -> None:
    assert GC_THRESHOLDS != (700, 10, 10)  # not the default, which a spawned process starts with
    with process_pool(1) as pool, worker_environment(task=gc.get_threshold):
        thresholds = pool.submit(gc.get_threshold).result(timeout=300)
    assert thresholds == GC_THRESHOLDS


def test_stop_workers_ends_every_worker_process_now() -> None:
    pool = process_pool(2)
    with worker_environment(task=abs):
        assert [pool.submit(abs, -n).result(timeout=300) for n in range(4)] == [0, 1, 2, 3]
    assert multiprocessing.active_children()
    stop_workers()
    assert multiprocessing.active_children() == []
    pool.shutdown()


def test_a_helper_started_for_nothing_is_stopped() -> None:
    executor = LocalExecutor(2)
    executor.start(preload="timeline.importers.result")
    assert executor.started
    executor.stop()
    assert not executor.started
    assert list(executor.map(abs, [-1, -2])) == [1, 2]  # a later map starts its own helper
