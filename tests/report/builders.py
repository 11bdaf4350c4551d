"""Synthetic traces for the report tests and the render benchmark (many GPU events in few steps); Chromium."""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np
import polars as pl
import pytest

from tests.builders import timeline_command
from timeline.schema import EVENTS_SCHEMA, validate

__all__ = [
    "CHROMIUM",
    "GANTT_DRAWN",
    "LAUNCH_ARGS",
    "Served",
    "ensure_chromium",
    "served",
    "synthetic_events",
]

_COMPUTE, _COMM, _COPY = 7, 20, 22


def synthetic_events(events: int, *, ranks: int = 8, steps: int = 1, seed: int = 0) -> pl.DataFrame:
    """Return a canonical events frame with about ``events`` GPU events per step over all ranks.

    Each rank runs back-to-back compute kernels on stream 7, NCCL all-reduce kernels on stream 20
    (partly under compute, partly after it: exposed) and memcpys on stream 22, inside one
    ``ProfilerStep#N`` per step.
    """
    rng = np.random.default_rng(seed)
    per_rank = max(events // ranks, 10)
    n_comm = max(per_rank // 20, 1)
    n_copy = max(per_rank // 20, 1)
    n_compute = per_rank - n_comm - n_copy
    frames = []
    t0 = 1_700_000_000_000_000_000
    for step in range(steps):
        for rank in range(ranks):
            durations = rng.integers(2_000, 30_000, n_compute)
            gaps = rng.integers(0, 3_000, n_compute)
            starts = t0 + np.cumsum(durations + gaps) - durations
            compute_end = int(starts[-1] + durations[-1])
            span = compute_end - t0
            # Communication: spread over the last 60% of compute and a tail after it (exposed).
            comm_dur = rng.integers(20_000, 200_000, n_comm)
            comm_start = np.sort(rng.integers(t0 + int(0.4 * span), compute_end + span // 5, n_comm))
            copy_dur = rng.integers(1_000, 10_000, n_copy)
            copy_start = np.sort(rng.integers(t0, compute_end, n_copy))
            end = int(max(compute_end, int((comm_start + comm_dur).max()))) + 10_000
            kinds = ["compute"] * n_compute + ["communication"] * n_comm + ["memcpy"] * n_copy
            stream = [_COMPUTE] * n_compute + [_COMM] * n_comm + [_COPY] * n_copy
            start = np.concatenate([starts, comm_start, copy_start])
            dur = np.concatenate([durations, comm_dur, copy_dur])
            names = (
                [f"gemm_{i % 37}" for i in range(n_compute)]
                + ["ncclKernel_AllReduce_RING_LL_Sum_float"] * n_comm
                + ["Memcpy DtoD"] * n_copy
            )
            gpu = pl.DataFrame(
                {
                    "rank": rank,
                    "source": "kineto",
                    "kind": kinds,
                    "name": names,
                    "cat": "kernel",
                    "start_ns": start,
                    "end_ns": start + dur,
                    "dur_ns": dur,
                    "pid": rank,
                    "tid": stream,
                    "device": rank,
                    "stream": stream,
                    "collective": [None] * n_compute + ["all_reduce"] * n_comm + [None] * n_copy,
                    "in_bytes": [None] * n_compute + [4 << 20] * n_comm + [None] * n_copy,
                },
                schema_overrides={"collective": pl.String, "in_bytes": pl.Int64},
            )
            marker = pl.DataFrame(
                {
                    "rank": [rank],
                    "source": ["kineto"],
                    "kind": ["annotation"],
                    "name": [f"ProfilerStep#{step}"],
                    "cat": ["user_annotation"],
                    "start_ns": [t0 - 5_000],
                    "end_ns": [end],
                    "dur_ns": [end - t0 + 5_000],
                    "pid": [1000 + rank],
                    "tid": [1],
                }
            )
            frames.extend([gpu, marker])
        t0 = (
            int(pl.concat([f.select("end_ns") for f in frames]).select(pl.col("end_ns").max()).item())
            + 50_000
        )
    frame = pl.concat(frames, how="diagonal_relaxed")
    for name in EVENTS_SCHEMA.names():
        if name not in frame.columns:
            frame = frame.with_columns(pl.lit(None).alias(name))
    return validate(frame.sort("rank", "start_ns"), EVENTS_SCHEMA, what="synthetic events")


CHROMIUM = Path("/usr/bin/chromium")
"""Debian's chromium, which Playwright drives (it never downloads a browser of its own)."""

LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
"""Chromium's options in the browser tests."""

# True once the Gantt has bars and the browser has painted them (two animation frames later).
GANTT_DRAWN = """() => {
  const doc = window.Bokeh && Bokeh.documents[0];
  const bars = doc && doc.get_model_by_name("gantt_bars");
  return bars != null && bars.data.left.length > 0;
}"""


def ensure_chromium() -> Path:
    """Return Debian's chromium, installing it with apt-get when missing and root; else skip the test."""
    if CHROMIUM.exists():
        return CHROMIUM
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip(f"needs Debian's chromium at {CHROMIUM}: run `apt-get install -y chromium` as root")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (
        ["apt-get", "update"],
        ["apt-get", "install", "-y", "--no-install-recommends", "chromium"],
    ):
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False, timeout=1800)
        if done.returncode != 0:
            pytest.fail(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
    return CHROMIUM


@dataclass(frozen=True)
class Served:
    """A running ``timeline serve``: its process, and the lines of its stdout and stderr as they come."""

    process: subprocess.Popen[str]
    lines: queue.Queue[str]
    errors: queue.Queue[str]


def _read_lines(stream: IO[str] | None, into: queue.Queue[str]) -> None:
    for line in stream or ():
        into.put(line)


@contextmanager
def served(*args: str, stop_timeout_s: float = 60.0) -> Iterator[Served]:
    """Run ``timeline serve ARGS``; yield it; then Ctrl-C it and require exit status 0.

    If the body fails, or the server does not stop within ``stop_timeout_s``, it is killed. Its
    output stays readable in :attr:`Served.lines` and :attr:`Served.errors` afterwards.
    """
    process = subprocess.Popen(
        [*timeline_command(), "serve", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    server = Served(process, queue.Queue(), queue.Queue())
    readers = [
        threading.Thread(target=_read_lines, args=(process.stdout, server.lines), daemon=True),
        threading.Thread(target=_read_lines, args=(process.stderr, server.errors), daemon=True),
    ]
    for reader in readers:
        reader.start()
    try:
        yield server
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=stop_timeout_s) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=stop_timeout_s)
        for reader in readers:
            reader.join(timeout=10)
        for pipe in (process.stdout, process.stderr):
            if pipe is not None:
                pipe.close()
