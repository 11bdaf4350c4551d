"""Wait for a quiet machine before a measured run (this 2-core machine is shared); the versions measured."""

from __future__ import annotations

import os
import time
from importlib import metadata
from pathlib import Path

__all__ = ["TIMELINE_DISTRIBUTION", "busy_cpu_s", "package_version", "versions", "wait_quiet"]

TIMELINE_DISTRIBUTION = "timeline-comm"
"""timeline's distribution name (pyproject.toml's ``name``; ``import timeline`` is the package)."""


def busy_cpu_s() -> float:
    """CPU seconds the whole machine has spent busy (user, nice, system, irq, softirq)."""
    fields = [float(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (fields[0] + fields[1] + fields[2] + fields[5] + fields[6]) / os.sysconf("SC_CLK_TCK")


def wait_quiet(cores: float, max_wait_s: float, interval_s: float = 0.5) -> None:
    """Wait until other work used less than ``cores`` over two intervals in a row (at most ``max_wait_s``).

    The previous child (HTA's forked parse workers in particular) may still be exiting; a run that
    starts beside other work measures that work too. ``cores <= 0``: do not wait.
    """
    if cores <= 0:
        return
    deadline = time.perf_counter() + max_wait_s
    calm = 0
    while calm < 2 and time.perf_counter() < deadline:
        busy = busy_cpu_s()
        time.sleep(interval_s)
        calm = calm + 1 if (busy_cpu_s() - busy) / interval_s < cores else 0


def package_version(name: str) -> str:
    """The installed version of distribution ``name`` ("timeline": timeline's own), or "not installed"."""
    try:
        return metadata.version(TIMELINE_DISTRIBUTION if name == "timeline" else name)
    except metadata.PackageNotFoundError:
        return "not installed"


def versions(*names: str) -> str:
    """``"timeline 0.1.0, polars 2.1.0"``: each distribution's installed version, as reports list them."""
    return ", ".join(f"{name} {package_version(name)}" for name in names)
