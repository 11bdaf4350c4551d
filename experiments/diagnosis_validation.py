"""Validation of the diagnosis from reality: real CPU DDP jobs with one injected cause each.

Takes case names; gives, for each case, the measured step with the cause and with it removed, the
measured gain, the top finding of ``timeline analyze --json`` on the run with the cause, and whether
that finding names the injected cause (and rank) with a predicted gain within
:data:`GAIN_TOLERANCE` of the measured one. Run it from the repository root::

    python -m experiments.diagnosis_validation --cases straggler,input_stall --out runs --json results.json

What one case does:

1. trains one 2-rank DDP job (gloo, one intra-op thread per rank, fixed seeds): ranks on 127.0.0.1,
   or, for the link cases, one rank in each of two network namespaces joined by a ``tc``-limited
   veth pair (:mod:`experiments.netns`; needs root). It is captured with
   :func:`timeline.capture.capture` (gradient-ready markers on) in ``2 × pairs`` profiler windows
   (1 wait, 1 warm-up and ``active`` recorded steps each) that alternate between the job *with the
   cause* and the same job *with the cause removed* (the phases of :class:`Case`). Alternating
   inside one job keeps both under the same background load: this machine is shared, and CPU
   contention moves step times between runs minutes apart. As root each rank runs in a session of
   its own at nice -19 (:func:`default_nice`): with the kernel's autogroup scheduling, that is what
   keeps other users' programs from taking the ranks' cores;
2. moves the windows of each phase into their own run folder (``with/``, ``removed/``, each with
   its manifest), so each is a capture run of its own;
3. measures each folder's step (:func:`measured_step_ns`, read from the trace JSON in plain
   Python, the definition of ``step_ns`` of ``timeline analyze``) and the gain
   ``1 − step(removed) / step(with)`` (:func:`measured_gain`);
4. runs ``timeline analyze <with>/ --json`` (with ``--link-gbps`` when the case knows its link) in a
   subprocess and checks its ``findings`` (:func:`check_findings`);
5. records how long the ranks' training threads waited for a CPU while runnable: above
   :data:`BUSY_RATIO` of the time the run is marked busy (its timings measure the machine's load).

The cases, how each injects and removes its cause, and the numbers measured on the project's
machine are in ``docs/diagnosis.md`` (Validation); ``tests/experiments/test_diagnosis_validation.py``
runs the quick ones (those without namespaces).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import gzip
import itertools
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import msgspec

from experiments.netns import DelayLink, Link, experiment_unavailable, rate_bps, terminate_cleanly
from experiments.ranks import drive, join_gloo, wait_for_parent

__all__ = [
    "BUSY_RATIO",
    "CASES",
    "GAIN_TOLERANCE",
    "NOT_CHECKED",
    "ROOT_NICE",
    "BucketSweep",
    "Case",
    "CaseRun",
    "Check",
    "Model",
    "Phase",
    "analyze_command",
    "analyze_json",
    "check_findings",
    "check_run",
    "default_nice",
    "main",
    "measured_gain",
    "measured_step_ns",
    "render_table",
    "run_case",
    "step_windows_ns",
    "sweep_buckets",
    "trace_spans",
    "unavailable",
    "window_steps_ns",
]

_REPO = Path(__file__).resolve().parents[1]
"""The repository root: the ranks run ``python -m experiments.diagnosis_validation`` from it."""
GAIN_TOLERANCE = 0.10
"""The largest ``|predicted gain − measured gain|`` a case passes with (issue 21's acceptance)."""
ROOT_NICE = -19
"""The ranks' nice value when run as root (:func:`default_nice`)."""
BUSY_RATIO = 0.25
"""Above this share of their time spent waiting for a CPU, the ranks' step times are not evidence:
they measure the machine's load, not the job (:attr:`CaseRun.busy`, ``docs/diagnosis.md`` (Validation))."""
NOT_CHECKED = "not checked: run without the analysis (--capture-only); check it with --check"
"""The problem a run made with ``analyze=False`` carries until :func:`check_run` checks it."""
_WINDOW_FILE = re.compile(r"rank(\d+)\.(\d+)-(\d+)\.pt\.trace\.json\.gz")
_WAIT, _WARMUP = 1, 1
"""Steps of each profiler window before the ``active`` recorded ones."""
_ACTIVE, _PAIRS = 5, 8
"""Recorded steps per window, and windows per phase, by default."""
_UNRECORDED_WARMUP = 3
"""Steps of each phase the job runs before the profiler starts."""
_TRUTH_PAIRS, _TRUTH_STEPS, _TRUTH_WARMUP = 5, 20, 2
"""The ground truth: pairs of unprofiled blocks (with the cause, then removed), the steps timed in
each, and the steps run before them (the phase's wrapper warm again after the other's)."""
_LATE_MATMUL = 512
"""Size of the square matmuls a straggler runs (one 512 × 512 @ 512 × 512 product: about 4 ms)."""
_COMM = re.compile(r"^(?:gloo:|mpi:|ucc:)")
"""Names of CPU collectives (gloo's worker-thread annotations): ``DEFAULT_CPU_COMM_OPS``."""
_SYNC = re.compile(
    r"^(?:c10d::wait|aten::wait|torch\.distributed\..*\bwait|ProcessGroup.*::wait"
    r"|torch\.distributed\.ddp\.reducer::copy_bucket_to_grad$|(?:cuda|hip)(?:Stream|Event|Device)Synchronize$)"
)
"""Names of CPU ops that wait on a collective: ``DEFAULT_CPU_SYNC_OPS`` (not compute)."""
_STEP = re.compile(r"^ProfilerStep#(\d+)$")


@dataclass(frozen=True)
class Model:
    """The MLP every rank trains: ``inputs → layers × hidden → 10``, SGD on one fixed batch."""

    inputs: int = 256
    hidden: int = 512
    layers: int = 4
    """Hidden layers (the first is ``inputs × hidden``, the others ``hidden × hidden``)."""
    batch: int = 64
    """Samples per rank and step."""
    widths: tuple[int, ...] = ()
    """The hidden layers' widths, when they differ (then ``hidden`` and ``layers`` are not used): layers
    of different sizes give DDP buckets of different sizes, which the fixed-cost fit needs."""
    wrapper: str = "ddp"
    """``ddp``: DistributedDataParallel; ``fsdp2``: each linear layer and the root sharded with
    FSDP2's ``fully_shard`` on a 1-D CPU mesh (all-gathers in forward and backward, reduce-scatters
    of the gradients; no bucket cap, no ``no_sync``)."""


@dataclass(frozen=True)
class Phase:
    """How the job trains in one phase (with the cause, or with it removed)."""

    label: str
    """The phase's run folder name (``with``, ``removed``, ``cap-1``)."""
    bucket_mb: float | None = 1.0
    """DDP ``bucket_cap_mb``; None: DDP's defaults (a first bucket of 1 MiB, then 25 MiB)."""
    overlap: bool = True
    """False: DDP's all-reduces are off (``no_sync``); after ``loss.backward()`` returns, the
    gradients of each of DDP's buckets (the same parameters, as DDP grouped them) are flattened,
    all-reduced and copied back, one bucket after the other, synchronously: same collectives, same
    bytes, no overlap."""
    per_parameter: bool = False
    """With ``overlap`` False: each parameter's gradient all-reduced alone, one after the other in the
    order backward made them (the last layer's first), instead of DDP's buckets."""
    big_batch_rank: int | None = None
    """The rank that trains on a larger batch (``batch_scale`` times the model's)."""
    batch_scale: int = 1
    late_rank: int | None = None
    """The rank that does extra work before each step's forward."""
    late_matmuls: int = 0
    """Square matmuls (:data:`_LATE_MATMUL`) the late rank runs before its forward."""
    late_sleep_ms: float = 0.0
    """How long the late rank waits for its data before its forward."""
    stall_ms: float = 0.0
    """How long every rank waits for its data before each step."""
    rate: str | None = None
    """The link's ``tc`` rate: the ranks run in two network namespaces (root needed)."""
    delay_ms: float = 0.0
    """The one-way delay the link adds in each direction (:class:`~experiments.netns.DelayLink`; needs
    ``rate``, which that link then keeps too)."""

    def __post_init__(self) -> None:
        if self.delay_ms > 0 and self.rate is None:
            raise ValueError(f"phase {self.label!r}: a link delay needs a link rate (rate=...)")


@dataclass(frozen=True)
class Case:
    """One injected cause: the job with it, the same job with it removed, and what to expect."""

    name: str
    cause: str
    """The cause the top finding must name (``timeline.results.findings.CAUSES``)."""
    ranks: tuple[int, ...] | None
    """The ranks the cause is on (the top finding must name exactly them), None for all."""
    with_cause: Phase
    removed: Phase
    injection: str
    removal: str
    model: Model = field(default_factory=Model)
    communication_bound: bool = False
    """What ``verdict.communication_bound`` must say of the run with the cause."""

    @property
    def quick(self) -> bool:
        """Whether it runs without namespaces (and so without root, in the test suite)."""
        return all(phase.rate is None for phase in self.phases)

    @property
    def link_gbps(self) -> float | None:
        """The link of the run with the cause, Gbit/s (passed to ``analyze --link-gbps``), if known."""
        return None if self.with_cause.rate is None else rate_bps(self.with_cause.rate) / 1e9

    @property
    def delayed(self) -> bool:
        """Whether its link adds a delay (:class:`~experiments.netns.DelayLink`: ``/dev/net/tun`` needed)."""
        return any(phase.delay_ms > 0 for phase in self.phases)

    @property
    def phases(self) -> tuple[Phase, Phase]:
        """The two phases, in the order the windows alternate."""
        return (self.with_cause, self.removed)


_SLOW_RATE, _FAST_RATE = "500mbit", "5gbit"
_LINK_DELAY_MS, _DELAYED_RATE = 0.5, "1gbit"
"""``bucketing_link``: the one-way delay of its link (a round trip of 1 ms, as between racks under
load) and its rate (one the forwarder of :class:`~experiments.netns.DelayLink` keeps up with)."""
_DEEP = Model(inputs=128, hidden=128, layers=47)
"""48 linear layers of 128 (0.8 M parameters, 3.2 MB of gradients): 96 parameters, so 96 all-reduces a
step when each gradient travels alone, 65.5 KB (a weight) or 512 bytes (a bias): sizes the fixed-cost
fit tells apart."""
CASES: dict[str, Case] = {
    case.name: case
    for case in (
        Case(
            name="straggler",
            cause="straggler",
            ranks=(1,),
            with_cause=Phase("with", late_rank=1, late_matmuls=4),
            removed=Phase("removed"),
            injection="rank 1 multiplies four 512 × 512 matrices before each step's forward "
            "(about 16 ms on an idle core)",
            removal="no extra work",
        ),
        Case(
            name="straggler_input",
            cause="straggler",
            ranks=(1,),
            with_cause=Phase("with", late_rank=1, late_sleep_ms=30.0),
            removed=Phase("removed"),
            injection="rank 1 waits 30 ms for its data (a sleep) before each step's forward",
            removal="its data is ready",
        ),
        Case(
            name="large_batch",
            cause="straggler",
            ranks=(1,),
            with_cause=Phase("with", big_batch_rank=1, batch_scale=4),
            removed=Phase("removed"),
            injection="rank 1 trains on a batch 4 times the others' (256 samples against 64)",
            removal="equal batches (64 samples each)",
        ),
        Case(
            name="fsdp_straggler",
            cause="straggler",
            ranks=(1,),
            with_cause=Phase("with", late_rank=1, late_matmuls=4),
            removed=Phase("removed"),
            injection="an FSDP2 job (every linear layer and the root sharded): rank 1 multiplies four "
            "512 × 512 matrices before each step's forward",
            removal="no extra work",
            model=Model(wrapper="fsdp2"),
        ),
        Case(
            name="input_stall",
            cause="input_stall",
            ranks=None,
            with_cause=Phase("with", stall_ms=30.0),
            removed=Phase("removed"),
            injection="every rank waits 30 ms for its data (a sleep) before each step",
            removal="the data is ready",
        ),
        Case(
            name="no_overlap",
            cause="no_overlap",
            ranks=None,
            with_cause=Phase("with", overlap=False),
            removed=Phase("removed", bucket_mb=1.0),
            injection="DDP (bucket_cap_mb=1) under no_sync; after loss.backward() returns, each of "
            "DDP's buckets is flattened and all-reduced, one after the other (synchronous)",
            removal="DDP's own all-reduce of each bucket as soon as it is ready (same buckets, same bytes)",
            communication_bound=True,
        ),
        Case(
            name="per_parameter",
            cause="no_overlap",
            ranks=None,
            with_cause=Phase("with", overlap=False, per_parameter=True, bucket_mb=None),
            removed=Phase("removed", bucket_mb=None),
            injection="after loss.backward() returns (DDP under no_sync), each of the 96 parameters' "
            "gradients is all-reduced alone, one after the other (synchronous)",
            removal="DDP with its default buckets (1 MiB, then 25 MiB), each all-reduced when ready",
            model=_DEEP,
            communication_bound=True,
        ),
        Case(
            name="tiny_buckets",
            cause="bucketing",
            ranks=None,
            with_cause=Phase("with", bucket_mb=0.0001),
            removed=Phase("removed", bucket_mb=None),
            injection="DDP bucket_cap_mb=0.0001: one all-reduce per parameter, 96 a step (65.5 KB or 512 B)",
            removal="DDP's default buckets (1 MiB, then 25 MiB)",
            model=_DEEP,
            communication_bound=True,
        ),
        Case(
            name="bucketing_link",
            cause="bucketing",
            ranks=None,
            with_cause=Phase("with", bucket_mb=0.01, rate=_DELAYED_RATE, delay_ms=_LINK_DELAY_MS),
            removed=Phase("removed", bucket_mb=25.0, rate=_DELAYED_RATE, delay_ms=_LINK_DELAY_MS),
            injection=f"DDP bucket_cap_mb=0.01 over a {_DELAYED_RATE} link that delays each packet "
            f"{_LINK_DELAY_MS:g} ms each way (a forwarder between tap devices): one all-reduce per "
            "layer, 25 of 33-132 KB a step (latency-bound)",
            removal="bucket_cap_mb=25 (DDP's default) on the same link",
            model=Model(inputs=128, widths=(64, 128, 256) * 8),
            communication_bound=True,
        ),
        Case(
            name="slow_link",
            cause="slow_link",
            ranks=None,
            with_cause=Phase("with", rate=_SLOW_RATE),
            removed=Phase("removed", rate=_FAST_RATE),
            injection=f"the veth link between the two ranks' namespaces limited to {_SLOW_RATE} (tc tbf)",
            removal=f"the same link at {_FAST_RATE}",
            communication_bound=True,
        ),
    )
}
"""The cases, by name (``docs/diagnosis.md`` (Validation) describes each)."""


def unavailable(case: Case) -> str | None:
    """Return why ``case`` cannot run here (torch missing; root and ``ip``/``tc`` for link cases), or None."""
    if not case.quick:
        return experiment_unavailable(delay=case.delayed)
    try:
        import torch  # noqa: F401
    except ImportError:
        return "needs torch: pip install 'timeline[torch]'"
    return None


# -- measuring ------------------------------------------------------------------------------------


class _Event(msgspec.Struct):
    """The fields of a trace event the measurement reads; ``ts`` and ``dur`` as exact decimals."""

    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str | None = None
    tid: int | str | None = None
    ts: Decimal | None = None
    dur: Decimal | None = None


class _Trace(msgspec.Struct):
    traceEvents: list[_Event]  # the trace's own key


_TRACE = msgspec.json.Decoder(_Trace)


def trace_spans(trace: str | os.PathLike[str]) -> list[_Event]:
    """Return the complete events (``ph`` ``X``, with ``ts`` and ``dur``) of a Kineto JSON trace file.

    Read in plain Python (``.json`` or ``.json.gz``), ``ts`` and ``dur`` as exact decimals (µs).
    """
    path = Path(trace)
    raw = path.read_bytes()
    if path.suffix == ".gz":
        raw = gzip.decompress(raw)
    return [
        e for e in _TRACE.decode(raw).traceEvents if e.ph == "X" and e.ts is not None and e.dur is not None
    ]


def step_windows_ns(trace: str | os.PathLike[str]) -> dict[int, int]:
    """Return the length of every iteration window of one rank's trace file, by step number (ns).

    Read from the trace JSON in plain Python, by the definition of ``step_ns`` in
    ``docs/metrics.md`` for CPU-only ranks: the window of step *k* is its ``ProfilerStep#k`` span
    on the CPU, its start moved to the end of the previous window when that is later, its end
    extended to the last end of the collectives (``gloo:*`` on any thread) and compute ops
    (``cpu_op`` events, waits excluded, on threads that run no collective) that started inside the
    span. Times are the trace's decimal microseconds taken exactly, in integer nanoseconds.

    Parameters
    ----------
    trace
        A Kineto JSON trace (``.json`` or ``.json.gz``) of a CPU-only rank.

    Returns
    -------
    dict[int, int]
        ``{step number: end − start}``, in ns.
    """
    events = trace_spans(trace)

    def span(e: _Event) -> tuple[int, int]:
        start = int(e.ts * 1000)  # type: ignore[operator]  # checked above
        return start, start + int(e.dur * 1000)  # type: ignore[operator]

    steps = sorted(
        (*span(e), int(match[1]))
        for e in events
        if e.cat == "user_annotation" and (match := _STEP.match(e.name))
    )
    comm_threads = {(e.pid, e.tid) for e in events if _COMM.match(e.name)}
    activities = [
        span(e)
        for e in events
        if _COMM.match(e.name)
        or (e.cat == "cpu_op" and (e.pid, e.tid) not in comm_threads and not _SYNC.match(e.name))
    ]
    windows: dict[int, int] = {}
    previous_end: int | None = None
    for k, (cpu_start, cpu_end, number) in enumerate(steps):
        next_start = steps[k + 1][0] if k + 1 < len(steps) else None
        # an activity belongs to the latest step that started at or before it, if it started by its end
        owned = [
            end
            for start, end in activities
            if cpu_start <= start <= cpu_end and (next_start is None or start < next_start)
        ]
        end = max([cpu_end, *owned])
        start = cpu_start if previous_end is None else max(cpu_start, previous_end)
        windows[number] = max(start, end) - start
        previous_end = end
    return windows


def measured_step_ns(folder: str | os.PathLike[str]) -> float:
    """Return a run's measured step: the median of every rank's every iteration window (ns).

    The median over all ``(rank, iteration)`` pairs of :func:`step_windows_ns` of every trace
    file in ``folder``: the median of the ``step_ns`` column of ``timeline analyze --json``'s
    ``iterations``. With an even count it is the mean of the two middle values.

    Raises
    ------
    ValueError
        ``folder`` has no trace file with a ``ProfilerStep#`` span.
    """
    return _steps(_window_lengths(folder), folder)[0]


def window_steps_ns(folder: str | os.PathLike[str]) -> list[float]:
    """Return the median iteration window of each profiler window of a run, in window order (ns).

    The spread of these is the noise inside one run (each window is a few consecutive steps).
    """
    return _steps(_window_lengths(folder), folder)[1]


def _window_lengths(folder: str | os.PathLike[str]) -> dict[int, list[int]]:
    """Return every iteration window's length of a capture run folder, by profiler window (first step)."""
    by_window: dict[int, list[int]] = {}
    for trace in sorted(Path(folder).glob("rank*.pt.trace.json*")):
        by_window.setdefault(_first_step(trace.name), []).extend(step_windows_ns(trace).values())
    return by_window


def _steps(by_window: Mapping[int, list[int]], folder: str | os.PathLike[str]) -> tuple[float, list[float]]:
    """Return the measured step (the median of every window) and each profiler window's median."""
    lengths = [length for k in sorted(by_window) for length in by_window[k]]
    if not lengths:
        raise ValueError(f"{folder}: no trace with a ProfilerStep# span; pass a capture run folder")
    windows = [float(statistics.median(by_window[k])) for k in sorted(by_window) if by_window[k]]
    return float(statistics.median(lengths)), windows


def measured_gain(with_cause_ns: float, removed_ns: float) -> float:
    """Return the measured gain of removing the cause: ``1 − step(removed) / step(with)``.

    Examples
    --------
    >>> measured_gain(100.0, 75.0)
    0.25
    """
    if with_cause_ns <= 0:
        raise ValueError(f"step with the cause {with_cause_ns} ns: must be positive")
    return 1.0 - removed_ns / with_cause_ns


# -- checking -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    """The verdict on one run: the top finding against the injected cause and the measured gain."""

    passed: bool
    problems: tuple[str, ...]
    """What failed, one sentence each (empty when passed)."""
    top: dict[str, Any] | None
    """The top finding as ``analyze --json`` printed it, if any."""
    predicted_gain: float | None
    gain_error: float | None
    """``|predicted − measured|``, when both are known."""


def check_findings(
    analysis: Mapping[str, Any],
    *,
    cause: str,
    ranks: Sequence[int] | None,
    gain: float,
    tolerance: float = GAIN_TOLERANCE,
    communication_bound: bool | None = None,
) -> Check:
    """Check ``analyze --json``'s top finding against the injected cause and the measured gain.

    Passes when the first finding's ``cause`` is ``cause``, its ``ranks`` are ``ranks`` (when the
    cause is on some ranks only; not checked for a cause on every rank),
    ``|predicted_gain_ratio − gain| <= tolerance``, and (when given) the verdict's
    ``communication_bound`` is ``communication_bound``.

    Parameters
    ----------
    analysis
        The JSON object ``timeline analyze --json`` printed.
    cause
        The injected cause.
    ranks
        The ranks it is on, or None for all.
    gain
        The measured gain (:func:`measured_gain`).
    tolerance
        The largest gain error that passes.
    communication_bound
        What ``verdict.communication_bound`` must be; None: not checked.
    """
    if "findings" not in analysis:
        problem = (
            "timeline analyze --json has no 'findings' key: this timeline has no diagnosis engine "
            "(issue 21); nothing to check"
        )
        return Check(False, (problem,), None, None, None)
    findings = analysis["findings"]
    if not findings:
        return Check(False, (f"no findings; expected {cause}",), None, None, None)
    top = dict(findings[0])
    problems = []
    if top.get("cause") != cause:
        causes = [f.get("cause") for f in findings]
        problems.append(f"top finding is {top.get('cause')!r}, not {cause!r} (findings in order: {causes})")
    if ranks is not None and top.get("ranks") != list(ranks):
        problems.append(f"top finding names ranks {top.get('ranks')}, not {list(ranks)}")
    predicted = top.get("predicted_gain_ratio")
    error = None if predicted is None else abs(float(predicted) - gain)
    if error is None:
        problems.append("top finding has no predicted gain")
    elif error > tolerance:
        problems.append(
            f"predicted gain {predicted:.3f} is {error:.3f} from the measured {gain:.3f} "
            f"(more than {tolerance:.2f})"
        )
    said = (analysis.get("verdict") or {}).get("communication_bound")
    if communication_bound is not None and said != communication_bound:
        problems.append(f"verdict.communication_bound is {said}, not {communication_bound}")
    return Check(not problems, tuple(problems), top, None if predicted is None else float(predicted), error)


# -- running a job --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _JobSpec:
    """What every rank of one job runs (sent to the ranks as JSON)."""

    phases: tuple[Phase, ...]
    model: Model
    active: int
    cycles: int
    """Rounds of windows: each round is one window per phase, in order."""
    out: str
    timeout_s: float
    nice: int = 0
    """The ranks' nice value (and their autogroup's): negative gives them a larger share of a
    shared machine (root only)."""
    truth_pairs: int = 0
    """Pairs of unprofiled blocks (one per phase, alternating) timed before the profiled windows."""
    truth_steps: int = _TRUTH_STEPS

    @property
    def windows(self) -> int:
        return self.cycles * len(self.phases)

    @property
    def truth_blocks(self) -> int:
        return self.truth_pairs * len(self.phases)

    @property
    def link(self) -> bool:
        return any(p.rate is not None for p in self.phases)

    @property
    def delayed(self) -> bool:
        return any(p.delay_ms > 0 for p in self.phases)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _run_job(spec: _JobSpec, link: Link | None) -> None:
    """Start both ranks, switch the link's rate between windows, wait for them; raise on failure."""
    out = Path(spec.out)
    out.mkdir(parents=True, exist_ok=False)
    if link is not None:
        first = spec.phases[0]
        link.shape(first.rate or _FAST_RATE, delay_ms=first.delay_ms)
    port = _free_port() if link is None else 29500 + os.getpid() % 1000
    master = "127.0.0.1" if link is None else link.addresses[0]
    path = os.pathsep.join(p for p in (str(_REPO), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "KINETO_LOG_LEVEL": "6", "PYTHONPATH": path}
    encoded = msgspec.json.encode(spec).decode()
    processes = []
    for rank in range(2):
        iface = "lo" if link is None else link.devices[rank]
        command = [
            sys.executable, "-m", "experiments.diagnosis_validation", "--worker", "--rank", str(rank),
            "--master", master, "--port", str(port), "--iface", iface, "--spec", encoded,
        ]  # fmt: skip
        if link is not None:
            command = ["ip", "netns", "exec", link.namespaces[rank], *command]
        # a session of its own: with autogroup scheduling, the rank's nice value then counts
        processes.append(subprocess.Popen(command, env=env, cwd=_REPO, start_new_session=True))
    switches = []
    if link is not None:  # the next window's rate, at the end of each window
        # the unprofiled blocks first, then the profiled windows: the phase of each next one
        following = [spec.phases[j % len(spec.phases)] for j in range(1, spec.truth_blocks)]
        following += [spec.phases[0]] if spec.truth_blocks else []
        following += [spec.phases[(k + 1) % len(spec.phases)] for k in range(spec.windows - 1)]
        switches = [
            functools.partial(link.shape, p.rate or _FAST_RATE, delay_ms=p.delay_ms) for p in following
        ]
    drive(processes, out, switches=switches, timeout_s=spec.timeout_s, what="validation")


def _split_windows(spec: _JobSpec) -> dict[str, Path]:
    """Move each phase's windows into its own run folder with its own manifest; return the folders."""
    from timeline.capture import MANIFEST_NAME, read_manifest

    out = Path(spec.out)
    manifest = read_manifest(out / MANIFEST_NAME)
    if manifest is None:
        raise RuntimeError(f"validation: {out}: the job wrote no manifest")
    firsts = sorted({int(m[2]) for p in out.iterdir() if (m := _WINDOW_FILE.fullmatch(p.name))})
    if len(firsts) != spec.windows:
        raise RuntimeError(
            f"validation: {out}: expected {spec.windows} profiler windows, found {len(firsts)}"
        )
    phase_of = {first: spec.phases[k % len(spec.phases)].label for k, first in enumerate(firsts)}
    folders: dict[str, Path] = {}
    for phase in spec.phases:
        folder = out / phase.label
        folder.mkdir()
        folders[phase.label] = folder
        ranks = [
            msgspec.structs.replace(
                entry,
                files=[name for name in entry.files if phase_of[_first_step(name)] == phase.label],
            )
            for entry in manifest.ranks
        ]
        for entry in ranks:
            for name in entry.files:
                (out / name).rename(folder / name)
        own = msgspec.structs.replace(manifest, ranks=ranks, files=[n for e in ranks for n in e.files])
        (folder / MANIFEST_NAME).write_bytes(msgspec.json.format(msgspec.json.encode(own), indent=2) + b"\n")
    return folders


def _first_step(name: str) -> int:
    match = _WINDOW_FILE.fullmatch(name)
    if match is None:
        raise RuntimeError(f"validation: {name}: not a capture trace file name")
    return int(match[2])


@dataclass(frozen=True)
class _JobResult:
    folders: dict[str, Path]
    cpu_step_ns: dict[str, float]
    """Per phase: the median CPU time (both ranks' processes, every thread) of a recorded step."""
    wall_s: float
    load_average: tuple[float, float]
    background_cpu_ratio: float
    run_queue_ratio: float
    truth_ns: dict[str, list[float]] = field(default_factory=dict)
    """Per phase: the step of each unprofiled block, in order (:func:`truth_steps_ns`)."""


def truth_steps_ns(blocks_by_rank: Sequence[Sequence[Mapping[str, Any]]]) -> dict[str, list[float]]:
    """Return, per phase, the step of each unprofiled block: the mean over ranks of each rank's median step.

    ``blocks_by_rank``: each rank's block records (``pair``, ``phase``, ``step_ns``: the wall time of
    every timed step), in the order they ran. The ranks of a job meet at every collective, so their
    medians agree but for the noise; their mean is the block's step.

    Examples
    --------
    >>> def blocks(w, r):
    ...     return [{"pair": 0, "phase": "with", "step_ns": w}, {"pair": 0, "phase": "removed", "step_ns": r}]
    >>> truth_steps_ns([blocks([10, 30, 12], [5, 6, 7]), blocks([14, 11, 16], [6, 6, 9])])
    {'with': [13.0], 'removed': [6.0]}
    """
    out: dict[str, list[float]] = {}
    for blocks in zip(*blocks_by_rank, strict=True):
        phase = blocks[0]["phase"]
        medians = [float(statistics.median(b["step_ns"])) for b in blocks]
        out.setdefault(phase, []).append(sum(medians) / len(medians))
    return out


def truth_gain(with_ns: Sequence[float], removed_ns: Sequence[float]) -> tuple[float, list[float]]:
    """Return the measured gain from unprofiled blocks: the median of the pairs' gains, and the gains.

    Pair ``k``: :func:`measured_gain` of the ``k``-th block with the cause and the ``k``-th without.

    Examples
    --------
    >>> truth_gain([100.0, 110.0, 90.0], [60.0, 70.0, 50.0])
    (0.4, [0.4, 0.36363636363636365, 0.4444444444444444])
    """
    gains = [measured_gain(w, r) for w, r in zip(with_ns, removed_ns, strict=True)]
    return float(statistics.median(gains)), gains


def _busy_cpu_s() -> float:
    """Return the CPU seconds every process of this machine has used since boot (``/proc/stat``).

    User, nice, system, irq, softirq and steal time (steal: the hypervisor gave the CPU to
    another machine); not idle nor iowait.
    """
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _own_cpu_s() -> float:
    """Return the CPU seconds of this process and of its children that have been waited for."""
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _job(spec: _JobSpec) -> _JobResult:
    """Run one job (in namespaces when a phase has a rate) and split its windows by phase."""
    started, load_before = time.monotonic(), os.getloadavg()[0]
    busy_before, own_before = _busy_cpu_s(), _own_cpu_s()
    with contextlib.ExitStack() as stack:
        link = None
        if spec.link:
            stack.enter_context(terminate_cleanly())
            link = stack.enter_context((DelayLink if spec.delayed else Link)("tldv"))
        _run_job(spec, link)
    elapsed = time.monotonic() - started
    others = (_busy_cpu_s() - busy_before) - (_own_cpu_s() - own_before)
    background = max(0.0, others) / (elapsed * (os.cpu_count() or 1))
    folders = _split_windows(spec)
    cpu: dict[str, list[int]] = {p.label: [] for p in spec.phases}
    queued = wall = 0
    for rank_file in sorted(Path(spec.out).glob("steps.rank*.json")):
        for record in msgspec.json.decode(rank_file.read_bytes()):
            if record["active"]:
                cpu[record["phase"]].append(record["cpu_ns"])
                queued += record["run_queue_ns"]
                wall += record["wall_ns"]
    truth = [
        msgspec.json.decode(path.read_bytes()) for path in sorted(Path(spec.out).glob("truth.rank*.json"))
    ]
    return _JobResult(
        truth_ns=truth_steps_ns(truth) if truth and truth[0] else {},
        folders=folders,
        cpu_step_ns={label: float(statistics.median(v)) if v else float("nan") for label, v in cpu.items()},
        wall_s=time.monotonic() - started,
        load_average=(load_before, os.getloadavg()[0]),
        background_cpu_ratio=background,
        run_queue_ratio=queued / wall if wall else 0.0,
    )


# -- one rank -------------------------------------------------------------------------------------


def _worker(args: argparse.Namespace) -> None:
    """One rank of a validation job: train, switching phase between profiler windows."""
    spec = msgspec.json.decode(args.spec, type=_JobSpec)
    if spec.nice:
        _raise_priority(spec.nice)
    torch = join_gloo(
        rank=args.rank, master=args.master, port=args.port, iface=args.iface, timeout_s=spec.timeout_s
    )
    dist = torch.distributed
    try:
        train = _Trainer(torch, spec, args.rank)
        for phase in spec.phases:  # one-time costs (allocations, DDP's bucket rebuild) before recording
            for _ in range(_UNRECORDED_WARMUP):
                train.step(phase)
        dist.barrier()
        truth = _unprofiled_blocks(spec, args.rank, train, dist)
        records = _recorded_windows(spec, args.rank, train, dist)
        dist.barrier()
        (Path(spec.out) / f"steps.rank{args.rank}.json").write_bytes(msgspec.json.encode(records))
        (Path(spec.out) / f"truth.rank{args.rank}.json").write_bytes(msgspec.json.encode(truth))
    finally:
        dist.destroy_process_group()


def default_nice() -> int:
    """Return the ranks' nice value by default: -19 as root (:data:`ROOT_NICE`), else 0.

    On a shared machine the ranks otherwise wait for a CPU most of the time, and their step times
    measure the machine's load rather than the job (``docs/diagnosis.md`` (Validation)).
    """
    return ROOT_NICE if hasattr(os, "geteuid") and os.geteuid() == 0 else 0


def _raise_priority(nice: int) -> None:
    """Give this rank a larger share of a shared machine (root only).

    With autogroup scheduling (``/proc/sys/kernel/sched_autogroup_enabled``), a nice value only
    ranks a process against those of its session, and each session gets an equal share of the
    CPU: the rank runs in a session of its own (the parent started it with ``start_new_session``)
    whose autogroup gets the nice value too.
    """
    autogroup = Path("/proc/self/autogroup")
    if autogroup.exists():
        autogroup.write_text(str(nice))
    os.nice(nice)


def _run_queue_wait_ns() -> int:
    """Return how long this thread has waited for a CPU while runnable (``schedstat``), 0 if unknown."""
    try:
        return int(Path(f"/proc/self/task/{threading.get_native_id()}/schedstat").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _recorded_windows(spec: _JobSpec, rank: int, train: _Trainer, dist: Any) -> list[dict[str, Any]]:
    """Train the profiled windows, the phases in turn; return one record per step.

    A record: the window, its phase, whether the step was recorded, and the step's wall time,
    the CPU time of the rank's process (every thread) and the time the training thread waited
    for a CPU while runnable.
    """
    from timeline.capture import capture

    records: list[dict[str, Any]] = []
    with capture(
        spec.out,
        wait=_WAIT,
        warmup=_WARMUP,
        active=spec.active,
        repeat=spec.windows,
        grad_ready_markers=True,
        model=train.net,
    ) as cap:
        for k in range(spec.windows):
            phase = spec.phases[k % len(spec.phases)]
            for i in range(_WAIT + _WARMUP + spec.active):
                wall, cpu, queued = time.perf_counter_ns(), time.process_time_ns(), _run_queue_wait_ns()
                train.step(phase)
                cap.step()
                records.append(
                    {
                        "window": k,
                        "phase": phase.label,
                        "active": i >= _WAIT + _WARMUP,
                        "wall_ns": time.perf_counter_ns() - wall,
                        "cpu_ns": time.process_time_ns() - cpu,
                        "run_queue_ns": _run_queue_wait_ns() - queued,
                    }
                )
            if k < spec.windows - 1:
                _between_windows(spec, rank, spec.truth_blocks + k, dist)
    return records


def _unprofiled_blocks(spec: _JobSpec, rank: int, train: _Trainer, dist: Any) -> list[dict[str, Any]]:
    """Time the ground truth: blocks of unprofiled steps, the phases in turn; one record per block.

    Each block (before the profiled windows: no profiler has run yet) runs :data:`_TRUTH_WARMUP`
    steps, meets at a barrier, then times ``truth_steps`` steps one by one (wall clock of this rank).
    After the profiled windows, the ranks at times aborted in the next steps ("terminate called
    without an active exception", both ranks, on a loaded machine), so the blocks come first.
    """
    blocks = []
    for j in range(spec.truth_blocks):
        phase = spec.phases[j % len(spec.phases)]
        if j > 0:
            _between_windows(spec, rank, j - 1, dist)
        for _ in range(_TRUTH_WARMUP):
            train.step(phase)
        dist.barrier()
        times = []
        for _ in range(spec.truth_steps):
            started = time.perf_counter_ns()
            train.step(phase)
            times.append(time.perf_counter_ns() - started)
        blocks.append({"pair": j // len(spec.phases), "phase": phase.label, "step_ns": times})
    if spec.truth_blocks:  # the first profiled window's phase
        _between_windows(spec, rank, spec.truth_blocks - 1, dist)
    return blocks


def _between_windows(spec: _JobSpec, rank: int, k: int, dist: Any) -> None:
    """Wait, on a link job, while the parent sets the next window's rate; then meet at a barrier."""
    if spec.link and rank == 0:
        wait_for_parent(Path(spec.out), k)
    dist.barrier()


class _Trainer:
    """The model, its DDP wrappers (one per bucket cap) and one training step of a phase."""

    def __init__(self, torch: Any, spec: _JobSpec, rank: int) -> None:
        self.torch, self.rank = torch, rank
        nn = torch.nn
        torch.manual_seed(0)
        m = spec.model
        widths = [m.inputs, *(m.widths or (m.hidden,) * m.layers)]
        layers: list[Any] = []
        for width_in, width_out in itertools.pairwise(widths):
            layers += [nn.Linear(width_in, width_out), nn.ReLU()]
        layers.append(nn.Linear(widths[-1], 10))
        self.net = nn.Sequential(*layers)
        if m.wrapper == "fsdp2":
            if any(not p.overlap or p.bucket_mb != Phase("").bucket_mb for p in spec.phases):
                raise ValueError("an FSDP2 job has no bucket cap and no no_sync phase")
            self.ddp = {spec.phases[0].bucket_mb: self._fully_sharded(torch)}
        else:
            # One wrapper per cap, all on the same module: only the one whose forward runs
            # all-reduces (a DDP reducer ignores the autograd hooks of a backward it did not prepare).
            # No cap: DDP's defaults (torch 2.13: a first bucket of 1 MiB only then; a given cap is
            # every bucket's, the first's too).
            self.ddp = {
                cap: nn.parallel.DistributedDataParallel(self.net)
                if cap is None
                else nn.parallel.DistributedDataParallel(self.net, bucket_cap_mb=cap)
                for cap in {p.bucket_mb for p in spec.phases}
            }
        self.buckets: dict[float | None, list[list[Any]]] = {}
        self.optimizer = torch.optim.SGD(self.net.parameters(), lr=0.001)
        self.loss = nn.CrossEntropyLoss()
        generator = torch.Generator().manual_seed(1 + rank)
        self.inputs = torch.randn(m.batch, m.inputs, generator=generator)
        self.targets = torch.randint(0, 10, (m.batch,), generator=generator)
        scale = max(p.batch_scale for p in spec.phases)
        self.big_inputs = torch.randn(m.batch * scale, m.inputs, generator=generator)
        self.big_targets = torch.randint(0, 10, (m.batch * scale,), generator=generator)
        self.matrix = torch.randn(_LATE_MATMUL, _LATE_MATMUL, generator=generator)
        for cap in {p.bucket_mb for p in spec.phases if not p.overlap and not p.per_parameter}:
            self.buckets[cap] = self._ddp_buckets(cap)
        # backward makes the last layer's gradients first: the per-parameter all-reduces follow it
        self.parameters_ready_order = list(reversed(list(self.net.parameters())))

    def _fully_sharded(self, torch: Any) -> Any:
        """Shard every linear layer, then the root, with FSDP2 on a 1-D CPU mesh; return the root."""
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (torch.distributed.get_world_size(),))
        for layer in self.net:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer, mesh=mesh)
        return fully_shard(self.net, mesh=mesh)

    def _ddp_buckets(self, cap: float | None) -> list[list[Any]]:
        """Return the parameters of each of DDP's buckets at ``cap``, in the order DDP reduces them.

        DDP rebuilds its buckets in the order gradients became ready in the first step; after a
        few synchronised steps, its logging data lists each bucket's parameter indices.
        """
        model = self.ddp[cap]
        indices = None
        for _ in range(5):
            self.optimizer.zero_grad(set_to_none=True)
            self.loss(model(self.inputs), self.targets).backward()
            self.optimizer.step()
            indices = model._get_ddp_logging_data().get("rebuilt_per_bucket_param_indices")
            if indices is not None:
                break
        if indices is None:
            raise RuntimeError("DDP's logging data names no rebuilt buckets after 5 steps")
        params = list(self.net.parameters())
        return [[params[int(i)] for i in bucket.split()] for bucket in str(indices).split(",")]

    def step(self, phase: Phase) -> None:
        """One step of ``phase``: wait for data, extra work, forward, backward, all-reduce, update."""
        torch = self.torch
        if phase.stall_ms > 0:
            time.sleep(phase.stall_ms / 1000)
        if self.rank == phase.late_rank:
            if phase.late_sleep_ms > 0:
                time.sleep(phase.late_sleep_ms / 1000)
            for _ in range(phase.late_matmuls):
                torch.mm(self.matrix, self.matrix)
        model = self.ddp[phase.bucket_mb]
        self.optimizer.zero_grad(set_to_none=True)
        big = self.rank == phase.big_batch_rank and phase.batch_scale > 1
        rows = phase.batch_scale * len(self.inputs) if big else len(self.inputs)
        inputs, targets = (
            (self.big_inputs[:rows], self.big_targets[:rows]) if big else (self.inputs, self.targets)
        )
        if phase.overlap:
            self.loss(model(inputs), targets).backward()
        else:
            with model.no_sync():
                self.loss(model(inputs), targets).backward()
            world = torch.distributed.get_world_size()
            if phase.per_parameter:
                for p in self.parameters_ready_order:
                    torch.distributed.all_reduce(p.grad)
                    p.grad /= world
                self.optimizer.step()
                return
            for bucket in self.buckets[phase.bucket_mb]:
                flat = torch.cat([p.grad.reshape(-1) for p in bucket])
                torch.distributed.all_reduce(flat)
                flat /= world
                offset = 0
                for p in bucket:
                    p.grad.copy_(flat[offset : offset + p.numel()].view_as(p.grad))
                    offset += p.numel()
        self.optimizer.step()


# -- a case ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CaseRun:
    """One run of one case: what was measured, what the diagnosis said, the verdict."""

    case: str
    cause: str
    ranks: list[int] | None
    injection: str
    removal: str
    repetition: int
    with_step_ns: float
    removed_step_ns: float
    measured_gain: float
    with_windows_ns: list[float]
    """The median step of each profiler window with the cause (:func:`window_steps_ns`)."""
    removed_windows_ns: list[float]
    pair_gains: list[float]
    """The gain of each pair of consecutive windows (with, then removed): the noise inside the run."""
    with_cpu_step_ns: float
    """Median CPU time of a recorded step with the cause (both ranks, every thread)."""
    removed_cpu_step_ns: float
    link_gbps: float | None
    passed: bool
    problems: list[str]
    top_finding: dict[str, Any] | None
    predicted_gain: float | None
    gain_error: float | None
    with_dir: str
    removed_dir: str
    analyze_command: list[str]
    wall_s: float
    """How long the job ran (both phases, start-up included)."""
    total_s: float
    """How long the whole case took: the job, the measurements and (unless run with
    ``--capture-only``) ``timeline analyze``."""
    load_average: tuple[float, float]
    """The 1-minute load average before and after the job (the machine's other work)."""
    background_cpu_ratio: float
    """The share of the machine's CPU time other programs used while the job ran."""
    run_queue_ratio: float
    """The share of the recorded steps' time the ranks' training threads waited for a CPU while
    runnable (``/proc/…/schedstat``), both ranks together (:attr:`busy`)."""
    uptime: str
    """``uptime``'s line when the job started."""
    nice: int
    """The ranks' nice value."""
    truth_with_ns: list[float] = field(default_factory=list)
    """The ground truth: the step of each unprofiled block with the cause (:func:`truth_steps_ns`)."""
    truth_removed_ns: list[float] = field(default_factory=list)
    truth_pair_gains: list[float] = field(default_factory=list)
    """The gain of each pair of unprofiled blocks; ``measured_gain`` is their median."""
    profiled_gain: float | None = None
    """The gain of the profiled windows (``with_step_ns``, ``removed_step_ns``), beside the truth."""
    expected_communication_bound: bool | None = None
    """What the case expects ``verdict.communication_bound`` to be."""
    communication_bound: bool | None = None
    """What the diagnosis said (``analyze --json``'s ``verdict.communication_bound``)."""
    replay_error_ratio: float | None = None
    """The self-replay's distance from the measured step of the diagnosed iterations (the verdict's)."""

    @property
    def busy(self) -> bool:
        """Whether the training threads waited for a CPU more than :data:`BUSY_RATIO` of the time."""
        return self.run_queue_ratio > BUSY_RATIO


def analyze_command(folder: str | os.PathLike[str], *, link_gbps: float | None) -> list[str]:
    """Return the ``timeline analyze … --json`` command the harness runs on a run folder."""
    command = ["timeline", "analyze", str(folder), "--json"]
    return command if link_gbps is None else [*command, "--link-gbps", f"{link_gbps:g}"]


def analyze_json(folder: str | os.PathLike[str], *, link_gbps: float | None) -> dict[str, Any]:
    """Run :func:`analyze_command` in a subprocess (this checkout's ``cli``) and return its JSON.

    Raises
    ------
    RuntimeError
        The command failed; the message has its ``error:`` line.
    """
    args = analyze_command(folder, link_gbps=link_gbps)[1:]
    path = os.pathsep.join(p for p in (str(_REPO), os.environ.get("PYTHONPATH")) if p)
    done = subprocess.run(
        [sys.executable, "-c", "from cli.main import run; run()", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=_REPO,
        env={**os.environ, "PYTHONPATH": path},
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"validation: timeline {' '.join(args)} exited {done.returncode}: {done.stderr.strip()}"
        )
    analysis: dict[str, Any] = msgspec.json.decode(done.stdout)
    return analysis


def run_case(
    case: Case,
    out: str | os.PathLike[str],
    *,
    active: int = _ACTIVE,
    pairs: int = _PAIRS,
    repetition: int = 0,
    nice: int | None = None,
    timeout_s: float = 300.0,
    analyze: bool = True,
    truth_pairs: int = _TRUTH_PAIRS,
) -> CaseRun:
    """Run ``case`` (its job with the cause and without, alternating), measure and check it.

    Parameters
    ----------
    case
        The case.
    out
        The job's folder (must not exist yet): ``with/`` and ``removed/`` run folders are made in it.
    active
        Recorded steps per profiler window.
    pairs
        Windows with the cause, and as many without (alternating, the cause first).
    repetition
        A number recorded with the result.
    nice
        The ranks' nice value (:func:`default_nice` when None).
    timeout_s
        Give up on the job after this long.
    analyze
        False: run and measure the job only; the run is not checked (:data:`NOT_CHECKED`) until
        :func:`check_run` analyses it, on any machine with the project installed (the jobs need only
        torch and msgspec: a machine with quiet cores may lack the analysis' packages).
    truth_pairs
        Pairs of unprofiled blocks of :data:`_TRUTH_STEPS` steps timed before the profiled windows:
        the measured gain is the median of their gains (0: the profiled windows' gain).

    Raises
    ------
    RuntimeError
        The case cannot run here (:func:`unavailable`), the job failed, or ``analyze`` failed.
    """
    why = unavailable(case)
    if why is not None:
        raise RuntimeError(f"validation: case {case.name} {why}")
    started, uptime = time.monotonic(), _uptime()
    spec = _JobSpec(
        phases=case.phases,
        model=case.model,
        active=active,
        cycles=pairs,
        out=str(out),
        timeout_s=timeout_s,
        nice=default_nice() if nice is None else nice,
        truth_pairs=truth_pairs,
    )
    job = _job(spec)
    run = _measured_run(case, job, repetition=repetition, nice=spec.nice, uptime=uptime, started=started)
    if not analyze:
        return run
    checked = check_run(run)
    return dataclasses.replace(checked, total_s=time.monotonic() - started)


def _measured_run(
    case: Case, job: _JobResult, *, repetition: int, nice: int, uptime: str, started: float
) -> CaseRun:
    """Return a case's run as measured (not checked yet): profiled windows, and the unprofiled truth."""
    with_dir, removed_dir = job.folders[case.with_cause.label], job.folders[case.removed.label]
    (with_step, with_windows), (removed_step, removed_windows) = (
        _steps(_window_lengths(folder), folder) for folder in (with_dir, removed_dir)
    )
    profiled = measured_gain(with_step, removed_step)
    truth_with = job.truth_ns.get(case.with_cause.label, [])
    truth_removed = job.truth_ns.get(case.removed.label, [])
    gain, truth_gains = truth_gain(truth_with, truth_removed) if truth_with else (profiled, [])
    return CaseRun(
        case=case.name,
        cause=case.cause,
        ranks=None if case.ranks is None else list(case.ranks),
        injection=case.injection,
        removal=case.removal,
        repetition=repetition,
        with_step_ns=with_step,
        removed_step_ns=removed_step,
        measured_gain=gain,
        with_windows_ns=with_windows,
        removed_windows_ns=removed_windows,
        pair_gains=[measured_gain(w, r) for w, r in zip(with_windows, removed_windows, strict=True)],
        with_cpu_step_ns=job.cpu_step_ns[case.with_cause.label],
        removed_cpu_step_ns=job.cpu_step_ns[case.removed.label],
        link_gbps=case.link_gbps,
        passed=False,
        problems=[NOT_CHECKED],
        top_finding=None,
        predicted_gain=None,
        gain_error=None,
        with_dir=str(with_dir),
        removed_dir=str(removed_dir),
        analyze_command=analyze_command(with_dir, link_gbps=case.link_gbps),
        wall_s=job.wall_s,
        total_s=time.monotonic() - started,
        load_average=job.load_average,
        background_cpu_ratio=job.background_cpu_ratio,
        run_queue_ratio=job.run_queue_ratio,
        uptime=uptime,
        nice=nice,
        truth_with_ns=truth_with,
        truth_removed_ns=truth_removed,
        truth_pair_gains=truth_gains,
        profiled_gain=profiled,
        expected_communication_bound=case.communication_bound,
    )


def check_run(run: CaseRun, *, folder: str | os.PathLike[str] | None = None) -> CaseRun:
    """Return ``run`` analysed and checked: ``timeline analyze --json`` on its run with the cause.

    Parameters
    ----------
    run
        A run of a case (checked or not: :func:`run_case` with ``analyze=False``).
    folder
        Where the case's ``with/`` and ``removed/`` run folders are now, when they were moved (a run
        made on another machine); else where the run says.

    Raises
    ------
    RuntimeError
        ``analyze`` failed.
    """
    case = CASES[run.case]
    with_dir, removed_dir = (
        (Path(run.with_dir), Path(run.removed_dir))
        if folder is None
        else (Path(folder) / case.with_cause.label, Path(folder) / case.removed.label)
    )
    analysis = analyze_json(with_dir, link_gbps=run.link_gbps)
    check = check_findings(
        analysis,
        cause=case.cause,
        ranks=case.ranks,
        gain=run.measured_gain,
        communication_bound=case.communication_bound,
    )
    verdict = analysis.get("verdict") or {}
    return dataclasses.replace(
        run,
        expected_communication_bound=case.communication_bound,
        communication_bound=verdict.get("communication_bound"),
        replay_error_ratio=verdict.get("replay_error_ratio"),
        passed=check.passed,
        problems=list(check.problems),
        top_finding=check.top,
        predicted_gain=check.predicted_gain,
        gain_error=check.gain_error,
        with_dir=str(with_dir),
        removed_dir=str(removed_dir),
        analyze_command=analyze_command(with_dir, link_gbps=run.link_gbps),
    )


@dataclass(frozen=True)
class BucketSweep:
    """The measured step of one job at each bucket cap."""

    caps_mb: list[float]
    step_ns: dict[float, float]
    """``{cap MB: measured step ns}`` (:func:`measured_step_ns` of the cap's windows)."""
    background_cpu_ratio: float
    """The share of the machine's CPU other programs used during the job."""
    run_queue_ratio: float
    """The share of the recorded steps' time the training threads waited for a CPU."""
    folder: str


def sweep_buckets(
    caps_mb: Sequence[float],
    out: str | os.PathLike[str],
    *,
    model: Model,
    active: int = _ACTIVE,
    cycles: int = _PAIRS,
    nice: int | None = None,
    timeout_s: float = 300.0,
) -> BucketSweep:
    """Measure the step of one DDP job at each bucket cap: its windows cycle through the caps.

    How the bucketing case's removed cap was chosen (the best of such a sweep, recorded in
    ``docs/diagnosis.md`` (Validation)).
    """
    phases = tuple(Phase(f"cap-{cap:g}", bucket_mb=cap) for cap in caps_mb)
    spec = _JobSpec(
        phases=phases,
        model=model,
        active=active,
        cycles=cycles,
        out=str(out),
        timeout_s=timeout_s,
        nice=default_nice() if nice is None else nice,
    )
    job = _job(spec)
    steps = {cap: measured_step_ns(job.folders[p.label]) for cap, p in zip(caps_mb, phases, strict=True)}
    return BucketSweep(list(caps_mb), steps, job.background_cpu_ratio, job.run_queue_ratio, str(out))


# -- reporting ------------------------------------------------------------------------------------


def render_table(runs: Sequence[CaseRun]) -> str:
    """Return the runs as a plain-text table, one line per run, then one line per problem.

    Steps in ms (one decimal: the median unprofiled block, else the profiled windows'), gains and
    errors as ratios (three decimals), whether the verdict says communication-bound, the self-replay's
    error, the share of the time the training threads waited for a CPU in percent; a busy run
    (:attr:`CaseRun.busy`) is marked.
    """
    header = (
        "case", "rep", "step with", "step removed", "gain", "top finding", "ranks", "predicted", "error",
        "comm-bound", "replay error", "CPU wait", "result",
    )  # fmt: skip
    rows = [header]
    for run in runs:
        top = run.top_finding or {}
        with_ns = statistics.median(run.truth_with_ns) if run.truth_with_ns else run.with_step_ns
        removed_ns = statistics.median(run.truth_removed_ns) if run.truth_removed_ns else run.removed_step_ns
        rows.append(
            (
                run.case,
                str(run.repetition),
                f"{with_ns / 1e6:.1f} ms",
                f"{removed_ns / 1e6:.1f} ms",
                f"{run.measured_gain:.3f}",
                str(top.get("cause", "-")),
                "-" if top.get("ranks") is None else ",".join(str(r) for r in top["ranks"]),
                "-" if run.predicted_gain is None else f"{run.predicted_gain:.3f}",
                "-" if run.gain_error is None else f"{run.gain_error:.3f}",
                "-" if run.communication_bound is None else str(run.communication_bound).lower(),
                "-" if run.replay_error_ratio is None else f"{run.replay_error_ratio:.1%}",
                f"{run.run_queue_ratio:.0%}" + (" busy" if run.busy else ""),
                "pass" if run.passed else "FAIL",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    for run in runs:
        lines += [f"{run.case} #{run.repetition}: {problem}" for problem in run.problems]
    return "\n".join(lines)


def _summary(runs: Sequence[CaseRun]) -> str:
    """Return one line per case: its measured gain's mean and spread over the runs on a quiet machine."""
    lines = []
    for name in dict.fromkeys(run.case for run in runs):
        gains = [run.measured_gain for run in runs if run.case == name and not run.busy]
        busy = sum(1 for run in runs if run.case == name and run.busy)
        left_out = f"; {busy} busy run(s) left out" if busy else ""
        if not gains:
            lines.append(f"{name}: no run on a quiet machine{left_out}")
            continue
        spread = ""
        if len(gains) > 1:
            spread = f" (min {min(gains):.3f}, max {max(gains):.3f}, sd {statistics.stdev(gains):.3f})"
        lines.append(
            f"{name}: measured gain {statistics.mean(gains):.3f} over {len(gains)} run(s){spread}{left_out}"
        )
    return "\n".join(lines)


def _uptime() -> str:
    """Return ``uptime``'s line (the machine's load when a run starts)."""
    done = subprocess.run(["uptime"], capture_output=True, text=True, check=False)
    return done.stdout.strip()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m experiments.diagnosis_validation",
        description="Real 2-rank CPU DDP jobs (gloo) with one injected cause each, run again with the "
        "cause removed: does timeline analyze's top finding name the cause, with the measured gain? "
        "Exit 0: every run passed (--capture-only: every job ran); 1: a run failed; 2: a case could not run.",
    )
    names = ", ".join(CASES)
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated (default: all): {names}")
    parser.add_argument("--out", default=None, help="folder for the runs (default: a new temporary folder)")
    parser.add_argument("--json", default=None, help="also write the results to this JSON file")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each case, interleaved (default 1)")
    parser.add_argument(
        "--pairs", type=int, default=_PAIRS, help=f"windows with the cause (default {_PAIRS})"
    )
    parser.add_argument("--active", type=int, default=_ACTIVE, help=f"recorded steps per window ({_ACTIVE})")
    parser.add_argument(
        "--truth-pairs",
        type=int,
        default=_TRUTH_PAIRS,
        help=f"pairs of unprofiled blocks of {_TRUTH_STEPS} steps, the ground truth (default {_TRUTH_PAIRS})",
    )
    parser.add_argument(
        "--nice", type=int, default=None, help="the ranks' nice value (default: -19 as root, else 0)"
    )
    parser.add_argument(
        "--bucket-sweep",
        default=None,
        metavar="CAPS",
        help="instead: measure these DDP bucket caps (MB, comma-separated) on the bucketing case's model",
    )
    parser.add_argument(
        "--capture-only",
        action="store_true",
        help="run and measure the jobs without analysing them (a machine with the jobs' needs only: "
        "torch and msgspec); check the runs later with --check",
    )
    parser.add_argument(
        "--check",
        default=None,
        metavar="RUNS_JSON",
        help="instead: analyse and check the runs a --capture-only run wrote to this JSON file; their "
        "case folders are in --out (default: the JSON file's folder)",
    )
    for hidden in ("--rank", "--port"):
        parser.add_argument(hidden, type=int, help=argparse.SUPPRESS)
    for hidden in ("--master", "--iface", "--spec"):
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return parser


def _usage_problem(args: argparse.Namespace, names: Sequence[str]) -> str | None:
    """Return what is wrong with the command line (checked before anything runs), or None."""
    unknown = [n for n in names if n not in CASES]
    if unknown:
        return f"unknown case {', '.join(unknown)}; known: {', '.join(CASES)}"
    if min(args.repeat, args.pairs, args.active) < 1 or args.truth_pairs < 0:
        return "--repeat, --pairs and --active must be at least 1, --truth-pairs at least 0"
    if args.nice is not None and args.nice < 0 and os.geteuid() != 0:
        return f"--nice {args.nice}: a negative nice value needs root"
    for name in [] if args.bucket_sweep else names:
        why = unavailable(CASES[name])
        if why is not None:
            return f"case {name} {why}; leave it out of --cases"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: run the cases, print the table, write the JSON; exit 1 when a run fails."""
    args = _parser().parse_args(argv)
    if args.worker:
        _worker(args)
        return 0
    if args.check:
        return _main_check(args)
    names = [n.strip() for n in args.cases.split(",") if n.strip()]
    problem = _usage_problem(args, names)
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="timeline-diagnosis-"))
    if args.bucket_sweep:
        return _main_sweep(args, out)
    runs: list[CaseRun] = []
    for repetition in range(args.repeat):  # interleaved: each case once, then each again
        for name in names:
            try:
                run = run_case(
                    CASES[name],
                    out / f"{name}.{repetition}",
                    active=args.active,
                    pairs=args.pairs,
                    truth_pairs=args.truth_pairs,
                    repetition=repetition,
                    nice=args.nice,
                    analyze=not args.capture_only,
                )
            except RuntimeError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 2
            runs.append(run)
            print(render_table([run]).splitlines()[1], flush=True)
            if args.json:  # after every run: a long series interrupted keeps what it measured
                _write_runs(runs, Path(args.json))
    if args.capture_only:
        print(_summary(runs))
        return 0
    return _finish(runs)


def _write_runs(runs: Sequence[CaseRun], path: Path) -> None:
    records = [{**asdict(r), "busy": r.busy} for r in runs]
    path.write_bytes(msgspec.json.format(msgspec.json.encode(records), indent=2) + b"\n")


def _finish(runs: Sequence[CaseRun]) -> int:
    print(render_table(runs))
    print(_summary(runs))
    return 0 if all(run.passed for run in runs) else 1


def _main_check(args: argparse.Namespace) -> int:
    source = Path(args.check)
    try:
        records = msgspec.json.decode(source.read_bytes(), type=list[dict[str, Any]])
        runs = [msgspec.convert(record, CaseRun) for record in records]
    except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
        print(f"error: {source}: {exc}: give the JSON file a --capture-only run wrote", file=sys.stderr)
        return 2
    unknown = sorted({run.case for run in runs if run.case not in CASES})
    if unknown:
        known = ", ".join(CASES)
        print(f"error: {source}: unknown case {', '.join(unknown)}; known: {known}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else source.parent
    checked = []
    for run in runs:
        try:
            checked.append(check_run(run, folder=out / f"{run.case}.{run.repetition}"))
        except RuntimeError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    if args.json:
        _write_runs(checked, Path(args.json))
    return _finish(checked)


def _main_sweep(args: argparse.Namespace, out: Path) -> int:
    try:
        caps = [float(c) for c in args.bucket_sweep.split(",")]
    except ValueError:
        print(
            f"error: --bucket-sweep {args.bucket_sweep!r}: write caps in MB, such as 0.25,1,4",
            file=sys.stderr,
        )
        return 2
    uptime = _uptime()
    sweep = sweep_buckets(
        caps, out / "bucket-sweep", model=CASES["tiny_buckets"].model, active=args.active, cycles=args.pairs,
        nice=args.nice,
    )  # fmt: skip
    best = min(sweep.step_ns, key=lambda cap: sweep.step_ns[cap])
    for cap, step in sweep.step_ns.items():
        print(f"bucket_cap_mb={cap:g}: step {step / 1e6:.1f} ms{'  (best)' if cap == best else ''}")
    print(
        f"training threads waited for a CPU {sweep.run_queue_ratio:.0%} of the time; "
        f"others used {sweep.background_cpu_ratio:.0%} of the CPU; {uptime}"
    )
    if args.json:
        record = {**asdict(sweep), "step_ns": list(sweep.step_ns.values()), "best_mb": best, "uptime": uptime}
        Path(args.json).write_bytes(msgspec.json.format(msgspec.json.encode(record), indent=2) + b"\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
