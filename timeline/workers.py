"""How timeline starts worker processes: spawned, with malloc settings suited to large transient data.

Shared by the per-rank executors (:mod:`timeline.execution.executors`) and the parallel decoding of
one large trace (:mod:`timeline.importers.stream`).
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.context import SpawnContext
from pathlib import Path

__all__ = ["WORKER_MALLOC_ENV", "can_spawn", "spawn_context", "worker_environment"]

# glibc malloc settings of worker processes. A task allocates and frees a few hundred MB (decompressed
# JSON, decoded events); by default glibc maps large blocks afresh and returns freed memory to the
# system, so every task pays the page faults again (about a fifth of a task's CPU time). Keeping the
# heap instead bounds a worker's memory by its largest task. Settings already in the environment win.
WORKER_MALLOC_ENV = {
    "MALLOC_MMAP_THRESHOLD_": str(1 << 30),
    "MALLOC_TRIM_THRESHOLD_": str(1 << 32),
    "MALLOC_TOP_PAD_": str(64 << 20),
}


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


@contextmanager
def worker_environment() -> Iterator[None]:
    """Set :data:`WORKER_MALLOC_ENV` while worker processes start (they copy the environment)."""
    added = {k: v for k, v in WORKER_MALLOC_ENV.items() if k not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)
