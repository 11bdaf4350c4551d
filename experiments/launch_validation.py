"""Validation of the diagnosis on one GPU: ``launch_bound`` (eager, then CUDA graphs) and ``input_stall``.

Takes a run folder; gives the measured gain of removing the cause and whether
``timeline analyze``'s top finding names it with a predicted gain within
:data:`~experiments.diagnosis_validation.GAIN_TOLERANCE` of it. Two steps, so that the GPU machine
needs only torch and msgspec (``timeline.capture``), not the analysis::

    python -m experiments.launch_validation run --out runs/launch      # on a machine with a GPU
    python -m experiments.launch_validation check runs/launch          # anywhere timeline runs

``run`` trains one process (no process group) on ``cuda:0``: an MLP (``--layers`` linear layers of
``--width``, batch ``--batch``). Two phases, each captured with :func:`timeline.capture.capture` into
its own run folder, ``with/`` and ``removed/``; the cause goes to ``case.json``:

- ``--cause launch_bound`` (a narrow, deep MLP, whose kernels last a few µs each, so that the device
  waits for the host to launch the next one): ``with/`` runs forward and backward eagerly, one
  launch per kernel; ``removed/`` runs the same forward and backward as CUDA graphs
  (``torch.cuda.make_graphed_callables``), the fix ``launch_bound`` names;
- ``--cause input_stall``: ``with/`` waits ``--stall-ms`` for its data (a sleep) before each step,
  ``removed/`` does not; both eager.

Both phases run the same SGD step (``foreach``) eagerly and synchronise the device at the end of
every step (as a loop that logs its loss does), so that each step's ``ProfilerStep`` span on the CPU
covers its device work.

``check`` measures each folder's step in plain Python (the median ``ProfilerStep#`` span of the CPU
thread, the ``user_annotation``, not the GPU's ``gpu_user_annotation`` copy; the step being
synchronised, it is ``timeline``'s ``step_ns``), the gain ``1 − step(removed) / step(with)``, and runs
``timeline analyze <with> --json``. Exit status 0 when the check passed, 1 when it did not, 2 when
the folder is not such a run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

import msgspec

from experiments.diagnosis_validation import analyze_json, check_findings, measured_gain, trace_spans

__all__ = ["CAUSES", "check", "main", "measured_step_ns", "run"]

_PHASES = ("with", "removed")
CAUSES = ("launch_bound", "input_stall")
"""The causes ``run`` injects (``--cause``)."""


def _mlp(torch: Any, layers: int, width: int) -> Any:
    nn = torch.nn
    blocks: list[Any] = []
    for _ in range(layers):
        blocks += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*blocks).cuda()


def run(
    out: Path, *, layers: int, width: int, batch: int, active: int, repeat: int, cause: str = "launch_bound",
    stall_ms: float = 5.0,
) -> None:  # fmt: skip
    """Train both phases of ``cause`` on ``cuda:0`` and capture each into ``out/<phase>``.

    ``launch_bound``: eager, then CUDA graphs. ``input_stall``: each step waits ``stall_ms`` for its
    data (a sleep, before its forward), then it does not; both eager.
    """
    import time

    import torch

    from timeline.capture import capture

    if not torch.cuda.is_available():
        raise SystemExit("error: no CUDA device: run this on a machine with a GPU")
    if cause not in CAUSES:
        raise SystemExit(f"error: --cause {cause}: one of {', '.join(CAUSES)}")
    out.mkdir(parents=True, exist_ok=True)
    (out / "case.json").write_bytes(msgspec.json.encode({"cause": cause, "stall_ms": stall_ms}))
    torch.manual_seed(0)
    x = torch.randn(batch, width, device="cuda")
    target = torch.randn(batch, width, device="cuda")
    for phase in _PHASES:
        model = _mlp(torch, layers, width)
        graphed = cause == "launch_bound" and phase == "removed"
        forward = torch.cuda.make_graphed_callables(model, (x,)) if graphed else model
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, foreach=True)
        wait_s = stall_ms / 1000 if cause == "input_stall" and phase == "with" else 0.0
        for _ in range(5):  # allocations, cuBLAS handles, the graphs' first replays
            _step(torch, forward, optimizer, x, target)
        with capture(out / phase, wait=1, warmup=1, active=active, repeat=repeat) as cap:
            for _ in range(repeat * (active + 2)):
                if wait_s:
                    time.sleep(wait_s)  # waiting for the data
                _step(torch, forward, optimizer, x, target)
                cap.step()


def _step(torch: Any, forward: Any, optimizer: Any, x: Any, target: Any) -> None:
    """One training step, the device synchronised at its end (as a loop that logs its loss is)."""
    optimizer.zero_grad(set_to_none=False)  # CUDA graphs keep the gradients' memory
    loss = torch.nn.functional.mse_loss(forward(x), target)
    loss.backward()
    optimizer.step()
    torch.cuda.synchronize()


def measured_step_ns(folder: Path) -> float:
    """Return the median CPU ``ProfilerStep#`` span (``user_annotation``) of the folder's traces, ns."""
    spans = [  # the CPU's spans: the GPU's copies (gpu_user_annotation) cover its work alone
        int(e.dur * 1000)  # type: ignore[operator]  # trace_spans keeps events with a dur
        for trace in sorted(folder.glob("rank*.pt.trace.json*"))
        for e in trace_spans(trace)
        if e.cat == "user_annotation" and e.name.startswith("ProfilerStep#")
    ]
    if not spans:
        raise ValueError(f"{folder}: no ProfilerStep# span in a trace file")
    return statistics.median(spans)


def check(out: Path) -> tuple[bool, dict[str, Any]]:
    """Return whether the top finding is the run's cause within the tolerance, and the record.

    The cause is the one ``run`` wrote in ``case.json`` (``launch_bound`` without it); the check is
    :func:`~experiments.diagnosis_validation.check_findings` on ``timeline analyze <with> --json``.
    """
    case = out / "case.json"
    cause = str(msgspec.json.decode(case.read_bytes())["cause"]) if case.is_file() else "launch_bound"
    with_ns, removed_ns = (measured_step_ns(out / phase) for phase in _PHASES)
    gain = measured_gain(with_ns, removed_ns)
    analysis = analyze_json(out / "with", link_gbps=None)
    verdict = check_findings(analysis, cause=cause, ranks=None, gain=gain)
    top = verdict.top
    record = {
        "cause": cause,
        "with_step_ns": with_ns,
        "removed_step_ns": removed_ns,
        "measured_gain": gain,
        "top_finding": None if top is None else top["cause"],
        "predicted_gain": verdict.predicted_gain,
        "gain_error": verdict.gain_error,
        "findings": [(f["cause"], f["predicted_gain_ratio"]) for f in analysis["findings"]],
        "launch_gap_ns": None if top is None else top["evidence"].get("launch_gap_ns"),
        "common_idle_ns": None if top is None else top["evidence"].get("common_idle_ns"),
        "passed": verdict.passed,
        "problems": list(verdict.problems),
    }
    return verdict.passed, record


def main(argv: list[str] | None = None) -> int:
    """Run ``run`` or ``check`` (module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m experiments.launch_validation", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run_parser = sub.add_parser("run", help="train both phases on cuda:0 and capture them")
    run_parser.add_argument("--out", type=Path, required=True)
    run_parser.add_argument("--layers", type=int, default=48)
    run_parser.add_argument("--width", type=int, default=128)
    run_parser.add_argument("--batch", type=int, default=16)
    run_parser.add_argument("--active", type=int, default=5, help="recorded steps per window")
    run_parser.add_argument("--repeat", type=int, default=4, help="profiler windows per phase")
    run_parser.add_argument("--cause", default="launch_bound", choices=CAUSES)
    run_parser.add_argument("--stall-ms", type=float, default=5.0, help="input_stall: the wait per step")
    check_parser = sub.add_parser("check", help="measure the gain and check the diagnosis")
    check_parser.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    if args.command == "run":
        run(args.out, layers=args.layers, width=args.width, batch=args.batch, active=args.active,
            repeat=args.repeat, cause=args.cause, stall_ms=args.stall_ms)  # fmt: skip
        return 0
    try:
        passed, record = check(args.out)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(msgspec.json.format(msgspec.json.encode(record), indent=2).decode())
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
