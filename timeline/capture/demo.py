"""The demo jobs' runner: spawn the ranks on CPU (gloo), train under :func:`~timeline.capture.capture`.

Takes a run folder, a job name (:mod:`timeline.capture.jobs`) and a few sizes; gives a run folder
that ``timeline analyze`` reads, and rank 0's step times. Used by ``timeline capture --demo``,
``sample_traces/make_samples.py``, the tests and ``benchmarks/capture_overhead.py``.

``ranks`` processes are started with the ``spawn`` method on 127.0.0.1 (gloo, a free port), each
with one intra-op thread; each initialises the default process group, builds its part of the job
(the job's ``setup``: the default ``ddp`` job is an MLP under ``DistributedDataParallel``; the
others build a device mesh and its groups), waits at a barrier, then trains ``steps`` steps under
the profiler. Seeds are fixed: every run computes the same numbers (timings differ, of course).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import socket
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from multiprocessing.queues import SimpleQueue
from pathlib import Path

from timeline.capture._torch import import_torch, require_torch
from timeline.capture.jobs import DEMO_BUCKET_CAP_MB, DemoJob, Training, demo_job
from timeline.capture.manifest import MANIFEST_NAME, read_manifest
from timeline.capture.session import capture
from timeline.errors import UsageError

__all__ = ["DEMO_BUCKET_CAP_MB", "DemoResult", "DemoSettings", "run_demo"]


@dataclass(frozen=True)
class DemoResult:
    """What a demo run left behind."""

    run_dir: Path
    """The run folder."""
    files: tuple[Path, ...]
    """The trace files of every rank, as listed in the manifest (empty when not profiled)."""
    step_times_s: tuple[float, ...]
    """Rank 0's wall time of every step, in seconds (``cap.step()`` included)."""
    step_cpu_s: tuple[float, ...]
    """CPU time of rank 0's main thread in every step, in seconds: unlike wall time, barely moved
    by other programs competing for the cores (the gloo threads are not counted)."""


@dataclass(frozen=True, kw_only=True)
class DemoSettings:
    """What a demo run does: the job, its size, the profiler's schedule and options (:func:`run_demo`)."""

    job: str = "ddp"
    """The job's name, a key of :data:`timeline.capture.jobs.DEMO_JOBS`: ``ddp`` (the default),
    ``fsdp2_tp``, ``pipeline`` or ``expert``."""
    ranks: int | None = None
    """Number of processes (world size); None gives the job's default (2 for ``ddp``, 4 for the
    others, which need an even number, at least 4)."""
    steps: int = 8
    """Training steps per rank; at least ``wait + warmup + active`` when profiling."""
    wait: int = 1
    """The profiler schedule (with ``warmup``, ``active`` and ``repeat``)."""
    warmup: int = 1
    active: int = 3
    repeat: int = 1
    grad_ready_markers: bool = False
    """Passed to :func:`~timeline.capture.capture`, as ``record_shapes`` and ``with_stack``
    (grad-ready markers: ``ddp`` only)."""
    record_shapes: bool = True
    with_stack: bool = False
    profile: bool = True
    """Capture traces; False runs the same job without the profiler (to measure its overhead)."""
    seed: int = 0
    """Seed of the model weights and the batches."""
    threads: int = 1
    """Intra-op threads per rank."""
    timeout_s: float = 300.0
    """Give up (and stop the ranks) after this many seconds."""


@dataclass(frozen=True)
class _Spec:
    """What every rank's process is given: the settings, and the job, run folder, size and port."""

    settings: DemoSettings
    job: str
    out: str
    ranks: int
    port: int


def run_demo(out: str | os.PathLike[str], *, settings: DemoSettings = DemoSettings()) -> DemoResult:
    """Run a demo job on local CPU processes and capture it into ``out``.

    Parameters
    ----------
    out
        The run folder; created if missing. Existing files of the same names are replaced.
    settings
        The job, its number of ranks and steps, the profiler's schedule and options, the seed,
        threads and time-out (:class:`DemoSettings`; by default the ``ddp`` job on 2 ranks).

    Returns
    -------
    DemoResult
        The run folder, the trace files and rank 0's step times.

    Raises
    ------
    TorchMissingError
        torch is not installed.
    UsageError
        An unknown job, a count out of range, or an option the job does not take.
    RuntimeError
        A rank failed (its traceback is on stderr) or the job timed out.
    """
    demo = demo_job(settings.job)
    world_size = demo.default_ranks if settings.ranks is None else settings.ranks
    demo.check(ranks=world_size, grad_ready_markers=settings.grad_ready_markers)
    _check_counts(settings)
    require_torch()
    run_dir = Path(out)
    run_dir.mkdir(parents=True, exist_ok=True)
    spec = _Spec(settings=settings, job=demo.name, out=str(run_dir), ranks=world_size, port=_free_port())
    times, cpu_times = _run_ranks(spec)
    files: tuple[Path, ...] = ()
    if settings.profile:
        manifest = read_manifest(run_dir / MANIFEST_NAME)
        if manifest is not None:
            files = tuple(run_dir / name for name in manifest.files)
    return DemoResult(run_dir=run_dir, files=files, step_times_s=tuple(times), step_cpu_s=tuple(cpu_times))


def _check_counts(settings: DemoSettings) -> None:
    """Refuse counts no demo job can run with (see :class:`DemoSettings`).

    Raises
    ------
    UsageError
        Fewer than one thread, or too few steps to record one profiler window.
    """
    s = settings
    if s.threads < 1:
        raise UsageError(f"threads={s.threads}: need at least 1 thread per rank")
    window = s.wait + s.warmup + s.active
    if s.steps < 1 or (s.profile and s.steps < window):
        need = window if s.profile else 1
        raise UsageError(
            f"steps={s.steps}: need at least {need} steps to record one window "
            f"(wait {s.wait} + warmup {s.warmup} + active {s.active})"
        )


def _run_ranks(spec: _Spec) -> tuple[list[float], list[float]]:
    """Start one spawned process per rank, wait for them all, and return rank 0's step times.

    Wall and CPU step times, in seconds (empty when rank 0 sent none). The processes still alive
    when waiting stops (failure, timeout) are terminated.
    """
    context = multiprocessing.get_context("spawn")
    results: SimpleQueue[tuple[list[float], list[float]]] = context.SimpleQueue()
    processes = [
        context.Process(target=_worker, args=(rank, spec, results), name=f"timeline-demo-rank{rank}")
        for rank in range(spec.ranks)
    ]
    for process in processes:
        process.start()
    try:
        _wait_for(processes, spec.settings.timeout_s)
    finally:
        for process in processes:
            if process.is_alive():
                process.terminate()
            process.join()
    return results.get() if not results.empty() else ([], [])


def _wait_for(processes: Sequence[multiprocessing.process.BaseProcess], timeout_s: float) -> None:
    """Wait until every process exits; raise as soon as one fails or time runs out."""
    deadline = time.monotonic() + timeout_s
    pending = list(processes)
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            raise RuntimeError(f"demo job: still running after {timeout_s:g} s; stopped it")
        multiprocessing.connection.wait([p.sentinel for p in pending], timeout=left)
        for process in list(pending):
            if process.exitcode is None:
                continue
            pending.remove(process)
            if process.exitcode != 0:
                raise RuntimeError(
                    f"demo job: {process.name} exited with code {process.exitcode} (its error is above)"
                )


def _free_port() -> int:
    """Return a TCP port on 127.0.0.1 that is free now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _worker(rank: int, spec: _Spec, results: SimpleQueue[tuple[list[float], list[float]]]) -> None:
    """Run one rank of the demo job (in a spawned process); rank 0 puts its step times on ``results``."""
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(spec.port),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(spec.ranks),
    )
    # Kineto prints profiler_start/stop lines on stderr at its default level; 6 is above all levels.
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    if sys.platform == "linux":
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # the demo never leaves this host
    torch = import_torch()
    torch.set_num_threads(spec.settings.threads)
    dist = torch.distributed
    dist.init_process_group(
        "gloo", rank=rank, world_size=spec.ranks, timeout=timedelta(seconds=spec.settings.timeout_s)
    )
    try:
        job: DemoJob = demo_job(spec.job)
        training = job.setup(torch, rank=rank, world_size=spec.ranks, seed=spec.settings.seed)
        dist.barrier()
        times, cpu_times = _train(spec, training)
        dist.barrier()
        if rank == 0:
            results.put((times, cpu_times))
    finally:
        dist.destroy_process_group()


def _train(spec: _Spec, training: Training) -> tuple[list[float], list[float]]:
    """Run the settings' training steps, under the profiler when they profile; return step times.

    Wall and main-thread CPU time of every step, in seconds (``cap.step()`` included).
    """
    times: list[float] = []
    cpu_times: list[float] = []
    s = spec.settings

    def run(after_step: Callable[[], None]) -> None:
        for i in range(s.steps):
            start, start_cpu = time.perf_counter(), time.thread_time()
            training.step(i)
            after_step()
            times.append(time.perf_counter() - start)
            cpu_times.append(time.thread_time() - start_cpu)

    if not s.profile:
        run(lambda: None)
        return times, cpu_times
    with capture(
        spec.out,
        wait=s.wait,
        warmup=s.warmup,
        active=s.active,
        repeat=s.repeat,
        grad_ready_markers=s.grad_ready_markers,
        model=training.model,
        record_shapes=s.record_shapes,
        with_stack=s.with_stack,
    ) as cap:
        run(cap.step)
    return times, cpu_times
