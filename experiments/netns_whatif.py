"""A real what-if check: DDP over a rate-limited link between two network namespaces.

Takes two link rates (fast and slow) and a model size; gives measured and predicted iteration
times. Run it as root from the repository root (it needs ``ip netns`` and ``tc`` from Debian's
``iproute2`` package, and torch; it never installs anything: without them it stops and says what to
install):

    python -m experiments.netns_whatif --fast 1gbit --slow 200mbit --json out.json

What it does:

1. creates two network namespaces joined by a veth pair (``10.213.<k>.1/24`` and ``.2/24``, only
   inside the namespaces) and shapes each end's egress with ``tc qdisc … tbf rate R`` (burst: 2 ms
   at the rate, at least 32 KiB; queue: 50 ms);
2. trains one 2-rank DDP job (gloo, one intra-op thread per rank) — rank 0 in the first namespace,
   rank 1 in the second, ``MASTER_ADDR`` = rank 0's veth address, ``GLOO_SOCKET_IFNAME`` = each
   rank's veth — captured with :func:`timeline.capture.capture` (gradient-ready markers on) in
   ``2 × pairs`` profiler windows (1 wait, 1 warm-up and ``active`` recorded steps each) that
   alternate between the fast and the slow rate: between windows, rank 0 stops at a barrier while
   the parent changes the rate. Alternating inside one job keeps the two rates under the same
   background load (this machine is shared; CPU contention moves compute times between runs);
3. predicts the slow windows' iteration time from the fast windows' traces, replayed with the slow
   rate (:func:`~timeline.whatif.engine.replay`, observed efficiency, link = the fast rate), and
   compares the median predicted iteration with the slow windows' measured median; also reports
   both self-replay errors and the reverse prediction (fast from slow);
4. always deletes the namespaces (and with them the veth pair), even on failure.

The namespaces, the veth pair and the rate limits are :mod:`experiments.netns`'s, shared with
:mod:`experiments.diagnosis_validation`.

The results are recorded in ``docs/whatif.md``; ``tests/experiments/test_netns_whatif.py`` runs
it (marked slow, skipped without root or ``ip netns``).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from experiments.netns import (
    Link,
    MissingToolError,
    experiment_unavailable,
    missing_tools,
    rate_bps,
    require_tools,
    terminate_cleanly,
)
from experiments.ranks import drive, join_gloo, wait_for_parent

__all__ = [
    "ExperimentConfig",
    "ExperimentResult",
    "MissingToolError",
    "experiment_unavailable",
    "main",
    "missing_tools",
    "rate_bps",
    "require_tools",
    "run_experiment",
]

_REPO = Path(__file__).resolve().parents[1]
"""The repository root: the workers run ``python -m experiments.netns_whatif`` from a path that has it."""


@dataclass(frozen=True)
class ExperimentConfig:
    """What to run: the two rates, the model and the schedule."""

    fast: str = "1gbit"
    """tc rate of the fast run."""
    slow: str = "200mbit"
    """tc rate of the slow run."""
    hidden: int = 1024
    """Width of the MLP's hidden layers."""
    layers: int = 4
    """Hidden layers (each ``hidden × hidden``)."""
    batch: int = 64
    """Batch per rank."""
    bucket_mb: float = 4.0
    """DDP ``bucket_cap_mb``."""
    active: int = 3
    """Recorded steps per profiler window (each window also has 1 wait and 1 warm-up step)."""
    pairs: int = 4
    """Fast-then-slow window pairs."""
    timeout_s: float = 300.0
    """Give up on the job after this long."""


@dataclass(frozen=True)
class ExperimentResult:
    """Measured and predicted iteration times of the two runs (milliseconds)."""

    fast: str
    slow: str
    fast_gbps: float
    slow_gbps: float
    fast_measured_ms: float
    slow_measured_ms: float
    slow_predicted_ms: float
    error_ratio: float
    """``|predicted − measured| / measured`` for the slow run predicted from the fast one."""
    fast_predicted_from_slow_ms: float
    reverse_error_ratio: float
    fast_self_replay_error_ratio: float
    slow_self_replay_error_ratio: float
    fast_exposed_comm_ms: float
    slow_exposed_comm_ms: float
    slow_predicted_exposed_comm_ms: float
    fast_single_ms: float
    gradient_bytes: int
    config: dict[str, Any]
    wall_s: float
    load_average: tuple[float, float]
    """The 1-minute load average before and after the run (the machine's other work)."""
    out: str


def _train(link: Link, config: ExperimentConfig, out: Path) -> None:
    """Run the 2-rank job, switching the rate between profiler windows, captured into ``out``."""
    rates = [config.fast, config.slow] * config.pairs
    link.shape(rates[0])
    out.mkdir(parents=True, exist_ok=False)
    port = 29500 + os.getpid() % 1000
    processes = []
    for rank, (ns, dev) in enumerate(zip(link.namespaces, link.devices, strict=True)):
        command = [
            "ip", "netns", "exec", ns, sys.executable, "-m", "experiments.netns_whatif", "--worker",
            "--rank", str(rank), "--master", link.addresses[0], "--port", str(port), "--iface", dev,
            "--out", str(out), "--config", json.dumps(asdict(config)),
        ]  # fmt: skip
        path = os.pathsep.join(p for p in (str(_REPO), os.environ.get("PYTHONPATH")) if p)
        env = {**os.environ, "KINETO_LOG_LEVEL": "6", "PYTHONPATH": path}
        processes.append(subprocess.Popen(command, env=env))
    switches = [functools.partial(link.shape, rate) for rate in rates[1:]]
    drive(processes, out, switches=switches, timeout_s=config.timeout_s, what="experiment")


def _worker(args: argparse.Namespace) -> None:
    """One rank of the experiment's training job (runs inside a namespace)."""
    config = ExperimentConfig(**json.loads(args.config))
    torch = join_gloo(
        rank=args.rank, master=args.master, port=args.port, iface=args.iface, timeout_s=config.timeout_s
    )
    from timeline.capture import capture

    dist = torch.distributed
    try:
        torch.manual_seed(0)
        nn = torch.nn
        layers: list[Any] = []
        for _ in range(config.layers):
            layers += [nn.Linear(config.hidden, config.hidden), nn.ReLU()]
        layers.append(nn.Linear(config.hidden, 10))
        model = nn.parallel.DistributedDataParallel(nn.Sequential(*layers), bucket_cap_mb=config.bucket_mb)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
        loss_fn = nn.CrossEntropyLoss()
        generator = torch.Generator().manual_seed(1 + args.rank)
        inputs = torch.randn(config.batch, config.hidden, generator=generator)
        targets = torch.randint(0, 10, (config.batch,), generator=generator)
        windows = 2 * config.pairs
        out = Path(args.out)
        dist.barrier()
        with capture(
            out, wait=1, warmup=1, active=config.active, repeat=windows, grad_ready_markers=True, model=model
        ) as cap:
            for k in range(windows):
                for _ in range(2 + config.active):
                    optimizer.zero_grad(set_to_none=True)
                    loss_fn(model(inputs), targets).backward()
                    optimizer.step()
                    cap.step()
                if k == windows - 1:
                    break
                if args.rank == 0:  # the parent changes the rate while both ranks wait here
                    wait_for_parent(out, k)
                dist.barrier()
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _median_iteration_ms(prediction_iterations: Any, column: str) -> float:
    values = [v for v in prediction_iterations.get_column(column).to_list() if v is not None]
    return float(statistics.median(values)) / 1e6


def run_experiment(config: ExperimentConfig, out: str | os.PathLike[str]) -> ExperimentResult:
    """Run both rates and predict the slow run from the fast one.

    Parameters
    ----------
    config
        The rates, model and schedule.
    out
        A folder for the two runs (``fast/`` and ``slow/`` are created in it; must not exist yet).

    Raises
    ------
    MissingToolError
        ``ip`` or ``tc`` is not installed (the message names the Debian package).
    RuntimeError
        The machine cannot run it (see :func:`experiment_unavailable`) or a run failed.
    """
    require_tools()
    why = experiment_unavailable()
    if why is not None:
        raise RuntimeError(f"experiment: {why}")
    from timeline.trace import load
    from timeline.whatif.engine import Scenario, replay, self_replay
    from timeline.whatif.graph import trace_graph

    started = time.monotonic()
    load_before = os.getloadavg()[0]
    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)
    run_dir = root / "run"
    with terminate_cleanly(), Link("tlwi") as link:
        _train(link, config, run_dir)
    fast_gbps, slow_gbps = rate_bps(config.fast) / 1e9, rate_bps(config.slow) / 1e9
    windows = _windows_by_phase(run_dir)
    fast = trace_graph(load(windows[0]), link_gbps=fast_gbps)
    slow = trace_graph(load(windows[1]), link_gbps=slow_gbps)
    predicted = replay(fast, scenario=Scenario(bandwidth_gbps=slow_gbps))
    reverse = replay(slow, scenario=Scenario(bandwidth_gbps=fast_gbps))
    fast_self = self_replay(fast)
    slow_self = self_replay(slow)
    slow_measured = _median_iteration_ms(slow_self.iterations, "measured_ns")
    slow_predicted = _median_iteration_ms(predicted.iterations, "predicted_ns")
    fast_measured = _median_iteration_ms(fast_self.iterations, "measured_ns")
    fast_predicted = _median_iteration_ms(reverse.iterations, "predicted_ns")
    first = fast.gradients[0].window_id if fast.gradients else None
    gradient_bytes = sum(g.nbytes for g in fast.gradients if g.rank == 0 and g.window_id == first)
    return ExperimentResult(
        fast=config.fast,
        slow=config.slow,
        fast_gbps=fast_gbps,
        slow_gbps=slow_gbps,
        fast_measured_ms=fast_measured,
        slow_measured_ms=slow_measured,
        slow_predicted_ms=slow_predicted,
        error_ratio=abs(slow_predicted - slow_measured) / slow_measured,
        fast_predicted_from_slow_ms=fast_predicted,
        reverse_error_ratio=abs(fast_predicted - fast_measured) / fast_measured,
        fast_self_replay_error_ratio=fast_self.error_ratio,
        slow_self_replay_error_ratio=slow_self.error_ratio,
        fast_exposed_comm_ms=_median_iteration_ms(fast_self.iterations, "exposed_comm_ns"),
        slow_exposed_comm_ms=_median_iteration_ms(slow_self.iterations, "exposed_comm_ns"),
        slow_predicted_exposed_comm_ms=_median_iteration_ms(predicted.iterations, "exposed_comm_ns"),
        fast_single_ms=_median_iteration_ms(fast_self.iterations, "single_ns"),
        gradient_bytes=gradient_bytes,
        config=asdict(config),
        wall_s=time.monotonic() - started,
        load_average=(load_before, os.getloadavg()[0]),
        out=str(run_dir),
    )


def _windows_by_phase(run_dir: Path) -> tuple[list[Path], list[Path]]:
    """Return the trace files of the fast windows and of the slow ones (they alternate, fast first)."""
    pattern = re.compile(r"rank(\d+)\.(\d+)-(\d+)\.pt\.trace\.json\.gz")
    by_window: dict[int, list[Path]] = {}
    for path in run_dir.iterdir():
        match = pattern.fullmatch(path.name)
        if match is not None:
            by_window.setdefault(int(match[2]), []).append(path)
    ordered = [by_window[k] for k in sorted(by_window)]
    if len(ordered) < 2:
        raise RuntimeError(
            f"experiment: {run_dir}: expected alternating profiler windows, found {len(ordered)}"
        )
    fast = [p for k, files in enumerate(ordered) if k % 2 == 0 for p in files]
    slow = [p for k, files in enumerate(ordered) if k % 2 == 1 for p in files]
    return fast, slow


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: run the experiment and print (and optionally save) its numbers."""
    parser = argparse.ArgumentParser(
        prog="python -m experiments.netns_whatif",
        description="DDP (gloo) between two network namespaces over a tc-limited veth: predict the slow "
        "run's iteration time from the fast run's trace. Needs root, iproute2 and torch.",
    )
    defaults = ExperimentConfig()
    parser.add_argument("--fast", default=defaults.fast, help="tc rate of the fast run (default %(default)s)")
    parser.add_argument("--slow", default=defaults.slow, help="tc rate of the slow run (default %(default)s)")
    parser.add_argument("--hidden", type=int, default=defaults.hidden, help="MLP width (default %(default)s)")
    parser.add_argument(
        "--layers", type=int, default=defaults.layers, help="hidden layers (default %(default)s)"
    )
    parser.add_argument(
        "--batch", type=int, default=defaults.batch, help="batch per rank (default %(default)s)"
    )
    parser.add_argument("--bucket-mb", type=float, default=defaults.bucket_mb, help="DDP bucket_cap_mb")
    parser.add_argument("--active", type=int, default=defaults.active, help="recorded steps per window")
    parser.add_argument("--pairs", type=int, default=defaults.pairs, help="fast-then-slow window pairs")
    parser.add_argument("--out", default=None, help="folder for the runs (default: a new temporary folder)")
    parser.add_argument("--json", default=None, help="also write the results to this JSON file")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--master", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--iface", help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker(args)
        return 0
    config = ExperimentConfig(
        fast=args.fast,
        slow=args.slow,
        hidden=args.hidden,
        layers=args.layers,
        batch=args.batch,
        bucket_mb=args.bucket_mb,
        active=args.active,
        pairs=args.pairs,
    )
    out = args.out
    if out is None:
        import tempfile

        out = tempfile.mkdtemp(prefix="timeline-whatif-")
    try:
        result = run_experiment(config, out)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(
        f"fast {result.fast}: measured {result.fast_measured_ms:.1f} ms/iteration "
        f"(self-replay error {result.fast_self_replay_error_ratio:.2%})\n"
        f"slow {result.slow}: measured {result.slow_measured_ms:.1f} ms/iteration "
        f"(self-replay error {result.slow_self_replay_error_ratio:.2%})\n"
        f"slow predicted from the fast trace: {result.slow_predicted_ms:.1f} ms "
        f"(error {result.error_ratio:.1%})\n"
        f"fast predicted from the slow trace: {result.fast_predicted_from_slow_ms:.1f} ms "
        f"(error {result.reverse_error_ratio:.1%})\n"
        f"gradients {result.gradient_bytes / 2**20:.1f} MiB per step; traces in {result.out}; "
        f"{result.wall_s:.0f} s; load average {result.load_average[0]:.1f} → {result.load_average[1]:.1f} "
        f"on {os.cpu_count()} cores"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(asdict(result), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
