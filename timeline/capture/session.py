"""A profiling session for a training loop: :class:`Capture`, also called :func:`capture`.

Takes a run folder and a profiler schedule; gives, per rank and per recorded window, a gzipped
Kineto trace ``rank<N>.<first>-<last>.pt.trace.json.gz`` (``ProfilerStep#`` numbers of the
window) and a shared ``manifest.json`` (see :mod:`timeline.capture.manifest`). Every trace
carries ``distributedInfo`` with the rank: torch writes it when ``torch.distributed`` is
initialised when recording starts; otherwise the session writes the same key itself from
``RANK`` / ``WORLD_SIZE`` (or rank 0 of 1).

torch is imported when the session starts, never when this module is imported.
"""

from __future__ import annotations

import gzip
import os
import platform
import socket
import sys
import time
import warnings
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Protocol, Self

import msgspec

from timeline.capture._torch import import_torch
from timeline.capture.manifest import (
    MANIFEST_FORMAT,
    Manifest,
    RankEntry,
    Schedule,
    Versions,
    trace_file_name,
    write_rank_entry,
)
from timeline.capture.markers import MarkerHandles, install_grad_ready_markers
from timeline.errors import UsageError

__all__ = ["Capture", "capture"]

# zlib level 6 (gzip's default): on these traces about 4x faster than level 9 (torch's choice for
# .gz paths) for files 10% larger; isal's fastest levels are 2x faster again but 50% larger.
_GZIP_LEVEL = 6
_CHUNK = 1 << 20


class _Profiler(Protocol):
    """The part of ``torch.profiler.profile`` a capture uses."""

    step_num: int

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def step(self) -> None: ...
    def export_chrome_trace(self, path: str) -> object: ...
    def preset_metadata_json(self, key: str, value: str) -> None: ...


class Capture:
    """Profile a training loop into ``run_dir`` in the layout ``timeline analyze`` reads.

    Wraps ``torch.profiler.profile`` with a ``schedule``: CPU activities, plus CUDA when a GPU is
    visible, ``record_shapes=True``. Each recorded window of each rank becomes
    ``run_dir/rank<N>.<first>-<last>.pt.trace.json.gz`` and is listed in ``run_dir/manifest.json``.
    Use the same ``run_dir`` on every rank and a fresh one per run.

    A new capture is not yet started: enter it (``with``), or call :meth:`start` and :meth:`stop`
    yourself (for framework callbacks). Call :meth:`step` once at the end of every training step.
    :func:`capture` is this class, under the name the docs and examples use.

    Parameters
    ----------
    run_dir
        The run folder; created if missing.
    wait, warmup, active, repeat, skip_first
        The profiler schedule: skip ``skip_first`` steps, then ``repeat`` cycles (0 = until
        stopped) of ``wait`` idle, ``warmup`` warming and ``active`` recorded steps.
    link_gbps
        The network bandwidth per rank in Gbit/s if you know it; stored in the manifest for the
        what-if engine. None means unknown.
    grad_ready_markers
        Record a ``timeline.grad_ready:<param name>:<bytes>`` range when each gradient is ready
        (see :mod:`timeline.capture.markers`); needs ``model``.
    model
        The model being trained (the DDP/FSDP wrapper or the plain module); only used for the
        grad-ready markers.
    record_shapes
        Record input shapes: gives message sizes for collectives on torch < 2.4.
    with_stack
        Record Python stacks. Makes traces many times larger and slows the job; rarely useful here.

    Attributes
    ----------
    run_dir
        The folder the traces and the manifest go to.

    Raises
    ------
    UsageError
        A negative schedule count, ``active < 1``, ``grad_ready_markers`` without ``model``, a
        non-positive ``link_gbps``, or ``run_dir`` is a file.

    Examples
    --------
    >>> with capture("runs/exp1", model=ddp_model) as cap:  # doctest: +SKIP
    ...     for batch in loader:
    ...         train_step(batch)
    ...         cap.step()
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        *,
        wait: int = 1,
        warmup: int = 1,
        active: int = 3,
        repeat: int = 1,
        skip_first: int = 0,
        link_gbps: float | None = None,
        grad_ready_markers: bool = False,
        model: object | None = None,
        record_shapes: bool = True,
        with_stack: bool = False,
    ) -> None:
        for option, value, least in (
            ("wait", wait, 0),
            ("warmup", warmup, 0),
            ("active", active, 1),
            ("repeat", repeat, 0),
            ("skip_first", skip_first, 0),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise UsageError(f"{option}={value!r}: must be an integer >= {least}")
        if link_gbps is not None and not link_gbps > 0:
            raise UsageError(f"link_gbps={link_gbps!r}: must be a positive number of Gbit/s, or None")
        if grad_ready_markers and model is None:
            raise UsageError("grad_ready_markers=True: pass the model too (model=ddp_model)")
        self.run_dir = Path(run_dir)
        if self.run_dir.exists() and not self.run_dir.is_dir():
            raise UsageError(f"{self.run_dir}: exists and is not a directory; pass a folder for the run")
        self._schedule_args = Schedule(
            wait=wait, warmup=warmup, active=active, repeat=repeat, skip_first=skip_first
        )
        self._link_gbps = None if link_gbps is None else float(link_gbps)
        self._grad_ready_markers = grad_ready_markers
        self._model = model
        self._record_shapes = record_shapes
        self._with_stack = with_stack
        self._torch: ModuleType | None = None
        self._profiler: _Profiler | None = None
        self._schedule: Callable[[int], object] | None = None
        self._markers: MarkerHandles | None = None
        self._files: list[Path] = []
        self._stopping = False
        self._started_unix_ns = 0
        self._rank = 0
        self._world_size = 1
        self._backend: str | None = None

    # -- public API ---------------------------------------------------------------------------

    @property
    def rank(self) -> int:
        """Global rank of this process (known once started)."""
        return self._rank

    @property
    def world_size(self) -> int:
        """Number of ranks in the job (known once started)."""
        return self._world_size

    @property
    def files(self) -> tuple[Path, ...]:
        """The trace files this rank has written so far, in order."""
        return tuple(self._files)

    @property
    def profiler(self) -> object:
        """The underlying ``torch.profiler.profile`` object (None before :meth:`start`)."""
        return self._profiler

    def start(self) -> Self:
        """Start profiling; the first call of :meth:`step` ends step 0.

        Returns
        -------
        Capture
            This object.

        Raises
        ------
        TorchMissingError
            torch is not installed.
        UsageError
            Already started, or the grad-ready markers cannot be installed.
        """
        if self._profiler is not None:
            raise UsageError("capture already started; call stop() before starting it again")
        torch = import_torch()
        self._torch = torch
        self._rank, self._world_size, self._backend = _identity(torch)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        s = self._schedule_args
        schedule = torch.profiler.schedule(
            wait=s.wait, warmup=s.warmup, active=s.active, repeat=s.repeat, skip_first=s.skip_first
        )
        profiler: _Profiler = torch.profiler.profile(
            activities=activities,
            schedule=schedule,
            on_trace_ready=self._on_trace_ready,
            record_shapes=self._record_shapes,
            with_stack=self._with_stack,
        )
        self._schedule = schedule
        if not _dist_initialized(torch):
            # torch writes distributedInfo only from an initialised process group; write the same
            # shape from the environment so every trace names its rank.
            info = {"backend": self._backend, "rank": self._rank, "world_size": self._world_size}
            profiler.preset_metadata_json("distributedInfo", msgspec.json.encode(info).decode())
        if self._grad_ready_markers:
            self._markers = install_grad_ready_markers(self._model, torch=torch)
        self._started_unix_ns = time.time_ns()
        self._stopping = False
        try:
            self._write_manifest()
            profiler.start()
        except BaseException:
            if self._markers is not None:
                self._markers.remove()
                self._markers = None
            raise
        self._profiler = profiler
        return self

    def step(self) -> None:
        """Mark the end of a training step (``profiler.step()``); may write a trace file.

        Raises
        ------
        UsageError
            The capture is not running.
        """
        if self._profiler is None:
            raise UsageError("capture not started; use it as a context manager or call start()")
        with warnings.catch_warnings():
            # Each cycle of a repeating schedule is exported on its own, which torch warns about
            # when the next cycle starts; that is what this session wants.
            warnings.filterwarnings("ignore", message=".*Profiler clears events at the end of each cycle")
            self._profiler.step()

    def stop(self) -> None:
        """Stop profiling, write the window being recorded (if any), remove the markers.

        Calling it on a stopped capture does nothing.
        """
        profiler = self._profiler
        if profiler is None:
            return
        self._stopping = True
        try:
            profiler.stop()
        finally:
            self._profiler = None
            self._stopping = False
            if self._markers is not None:
                self._markers.remove()
                self._markers = None
            self._write_manifest()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- internals ----------------------------------------------------------------------------

    def _on_trace_ready(self, prof: _Profiler) -> None:
        """Export the window just recorded to ``rank<N>.<first>-<last>.pt.trace.json.gz``."""
        torch = self._torch
        schedule = self._schedule
        assert torch is not None  # set by start(), before the profiler can call back
        assert schedule is not None
        rank, world_size, backend = _identity(torch)
        self._rank, self._world_size, self._backend = rank, world_size, backend
        # From step() the counter has already moved past the window; from stop() it is still on
        # the last (possibly partial) recorded step.
        step_num = prof.step_num
        last = step_num if self._stopping else step_num - 1
        first = _window_start(schedule, last, self._schedule_args.active)
        name = trace_file_name(rank, first, last)
        final = self.run_dir / name
        raw = self.run_dir / f".{name.removesuffix('.gz')}.partial"
        packed = self.run_dir / f".{name}.partial"
        try:
            prof.export_chrome_trace(str(raw))
            with (
                raw.open("rb") as src,
                packed.open("wb") as sink,
                # The name stored in the gzip header is the final one, not the temporary file's.
                gzip.GzipFile(name.removesuffix(".gz"), "wb", _GZIP_LEVEL, sink) as dst,
            ):
                while chunk := src.read(_CHUNK):
                    dst.write(chunk)
            packed.replace(final)
        finally:
            raw.unlink(missing_ok=True)
            packed.unlink(missing_ok=True)
        if final not in self._files:
            self._files.append(final)
        self._write_manifest()

    def _write_manifest(self) -> None:
        torch = self._torch
        assert torch is not None
        run = Manifest(
            format=MANIFEST_FORMAT,
            world_size=self._world_size,
            backend=self._backend,
            link_gbps=self._link_gbps,
            schedule=self._schedule_args,
            record_shapes=self._record_shapes,
            with_stack=self._with_stack,
            grad_ready_markers=self._grad_ready_markers,
            versions=_versions(torch),
            horovod_timeline=_horovod_timeline(self.run_dir),
        )
        entry = RankEntry(
            rank=self._rank,
            host=socket.gethostname(),
            pid=os.getpid(),
            device=_device(torch),
            started_unix_ns=self._started_unix_ns,
            files=[f.name for f in self._files],
        )
        write_rank_entry(self.run_dir, run, entry)


capture = Capture
"""Profile a training loop into ``run_dir``: a :class:`Capture`, not yet started (the name the docs use)."""


def _dist_initialized(torch: ModuleType) -> bool:
    dist = torch.distributed
    return bool(dist.is_available() and dist.is_initialized())


def _identity(torch: ModuleType) -> tuple[int, int, str | None]:
    """Return ``(rank, world size, backend)``: from torch.distributed, else the env, else 0 of 1."""
    if _dist_initialized(torch):
        dist = torch.distributed
        return int(dist.get_rank()), int(dist.get_world_size()), str(dist.get_backend())
    rank = _env_int("RANK", 0)
    world_size = _env_int("WORLD_SIZE", 1)
    if not 0 <= rank < world_size:
        raise UsageError(f"RANK={rank}, WORLD_SIZE={world_size}: the rank must be in [0, WORLD_SIZE)")
    return rank, world_size, None


def _env_int(name: str, default: int) -> int:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"{name}={text!r}: not an integer; unset it or set the rank number") from None


def _window_start(schedule: Callable[[int], object], last: int, active: int) -> int:
    """Return the first step of the recorded window that ends at step ``last``."""
    record = {"RECORD", "RECORD_AND_SAVE"}
    first = last
    while first > 0 and last - first + 1 < active:
        action = schedule(first - 1)
        if getattr(action, "name", "") not in record:
            break
        first -= 1
    return first


def _device(torch: ModuleType) -> str:
    if torch.cuda.is_available():
        return f"cuda:{torch.cuda.current_device()}"
    return "cpu"


def _versions(torch: ModuleType) -> Versions:
    nccl: str | None = None
    try:
        if torch.cuda.is_available() and torch.distributed.is_nccl_available():
            version = torch.cuda.nccl.version()
            nccl = ".".join(str(v) for v in version) if isinstance(version, tuple) else str(version)
    except (RuntimeError, AttributeError):
        nccl = None
    return Versions(
        timeline=_timeline_version(),
        torch=str(torch.__version__),
        nccl=nccl,
        python=platform.python_version(),
    )


def _timeline_version() -> str:
    package = sys.modules.get("timeline")
    version = getattr(package, "__version__", None)
    if isinstance(version, str):
        return version
    try:
        return metadata.version("timeline-comm")  # the distribution of the timeline package
    except metadata.PackageNotFoundError:
        return "unknown"


def _horovod_timeline(run_dir: Path) -> str | None:
    """Return the Horovod timeline path from ``HOROVOD_TIMELINE``, relative to ``run_dir`` if inside."""
    value = os.environ.get("HOROVOD_TIMELINE", "").strip()
    if not value or value.upper() == "DYNAMIC":
        return None
    path = Path(value)
    try:
        return path.resolve().relative_to(run_dir.resolve()).as_posix()
    except ValueError:
        return value
