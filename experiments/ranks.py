"""The 2-rank gloo jobs of the experiments: joining the group, and switching conditions between windows.

Takes the ranks' processes (started by an experiment, on 127.0.0.1 or in network namespaces) and what
to change between profiler windows; gives a job that stops after each window while the parent
changes a condition (a link's rate), then goes on. The handshake is two files per window in the run
folder: rank 0 writes ``.phase<k>.done`` when window *k* has ended and waits for ``.phase<k>.go``,
which the parent writes once it has made the change; the other rank waits at a barrier meanwhile.
Used by :mod:`experiments.netns_whatif` and :mod:`experiments.diagnosis_validation`.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

__all__ = ["drive", "join_gloo", "wait_for_parent", "window_files"]


def window_files(out: Path, k: int) -> tuple[Path, Path]:
    """Return the handshake files of window ``k``: rank 0's ``done`` and the parent's ``go``."""
    return out / f".phase{k}.done", out / f".phase{k}.go"


def join_gloo(*, rank: int, master: str, port: int, iface: str, timeout_s: float) -> Any:
    """Join the 2-rank gloo group (one intra-op thread) through ``iface``; return the torch module."""
    os.environ.update(
        MASTER_ADDR=master,
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE="2",
        GLOO_SOCKET_IFNAME=iface,
    )
    from timeline.capture import import_torch

    torch = import_torch()
    torch.set_num_threads(1)
    torch.distributed.init_process_group(
        "gloo", rank=rank, world_size=2, timeout=timedelta(seconds=timeout_s)
    )
    return torch


def wait_for_parent(out: Path, k: int) -> None:
    """Rank 0, after window ``k``: say it has ended and wait until the parent has made its change."""
    done, go = window_files(out, k)
    done.touch()
    while not go.exists():
        time.sleep(0.01)


def drive(
    processes: Sequence[subprocess.Popen[bytes]],
    out: Path,
    *,
    switches: Sequence[Callable[[], None]],
    timeout_s: float,
    what: str,
) -> None:
    """Run ``switches[k]`` when rank 0 has ended window ``k``, then release it; wait for every rank.

    Parameters
    ----------
    processes
        The ranks' processes; those still running when this returns or raises are killed.
    out
        The run folder of the handshake files.
    switches
        One change per window boundary (none for a job that changes nothing between windows).
    timeout_s
        Give up after this long, from now.
    what
        How messages name the job (``experiment``, ``validation``).

    Raises
    ------
    RuntimeError
        A rank stopped before a window's end, the job ran out of time, or a rank exited non-zero
        (its traceback is on stderr, above).
    """
    deadline = time.monotonic() + timeout_s
    try:
        for k, switch in enumerate(switches):
            done, go = window_files(out, k)
            while not done.exists():
                if any(p.poll() not in (None, 0) for p in processes) or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{what}: the job stopped or timed out in window {k} (its error is above)"
                    )
                time.sleep(0.05)
            switch()
            go.touch()
        for process in processes:
            code = process.wait(timeout=max(1.0, deadline - time.monotonic()))
            if code != 0:
                raise RuntimeError(f"{what}: a rank exited with code {code} (its error is above)")
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
