"""Profiler overhead of timeline.capture on the demo DDP job, and the cost of a grad-ready marker.

Usage::

    python benchmarks/capture_overhead.py [--runs 3] [--cycles 4] [--ranks 2] [--json FILE]

Part 1 runs the demo job of ``timeline capture --demo`` (CPU ranks, gloo, one thread each) ``--runs``
times per configuration: default capture settings, with grad-ready markers, without
``record_shapes``, with ``with_stack``. Each run repeats a schedule of wait 10, warmup 2, active 10
steps ``--cycles`` times, so recorded and unrecorded steps alternate within the same processes: the
overhead of a cycle is the median recorded step over the median waiting step (step 0-1 of a run
and the last recorded step of a cycle, which also exports the trace, are left out; the export is
reported apart). Pairing inside a run cancels most of the noise of a shared machine, which an
on/off comparison across runs does not. A run without the profiler gives the unprofiled step time.

Part 2 times backward passes of a model with 512 one-weight layers with and without markers,
alternately, idle and while recording; the difference of the fastest passes, per parameter, is the
cost of one marker (the hook call included).

Numbers go to stdout as Markdown and, with ``--json``, to a file. Recorded in docs/capturing.md.
"""

from __future__ import annotations

import argparse
import gzip
import os
import platform
import statistics
import sys
import tempfile
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path

import msgspec

from timeline.capture import DemoSettings, import_torch, run_demo
from timeline.capture.markers import install_grad_ready_markers

WAIT, WARMUP, ACTIVE = 10, 2, 10
CYCLE = WAIT + WARMUP + ACTIVE


@dataclass(frozen=True)
class Config:
    name: str
    profile: bool = True
    grad_ready_markers: bool = False
    record_shapes: bool = True
    with_stack: bool = False


CONFIGS = (
    Config("no profiler", profile=False),
    Config("capture (defaults)"),
    Config("capture + grad-ready markers", grad_ready_markers=True),
    Config("capture, record_shapes=False", record_shapes=False),
    Config("capture + with_stack=True", with_stack=True),
)


@dataclass
class Series:
    """Per cycle: median waiting step, median recorded step, their ratio, the export step's excess."""

    waiting_ms: list[float] = field(default_factory=list)
    recorded_ms: list[float] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)
    export_ms: list[float] = field(default_factory=list)

    def add(self, ms: list[float], cycles: int) -> None:
        for cycle in range(cycles):
            base = cycle * CYCLE
            waiting = statistics.median(ms[max(base, 2) : base + WAIT])
            recorded = statistics.median(ms[base + WAIT + WARMUP : base + CYCLE - 1])
            self.waiting_ms.append(waiting)
            self.recorded_ms.append(recorded)
            self.ratios.append(recorded / waiting)
            self.export_ms.append(ms[base + CYCLE - 1] - recorded)


@dataclass
class Outcome:
    config: str
    wall: Series = field(default_factory=Series)  # rank 0's wall time per step
    cpu: Series = field(default_factory=Series)  # rank 0's main-thread CPU time per step
    gz_bytes: list[int] = field(default_factory=list)  # per run: rank 0's first file, gzipped
    raw_bytes: list[int] = field(default_factory=list)  # per run: the same, decompressed
    events: list[int] = field(default_factory=list)  # per run: its events


def run_once(config: Config, *, ranks: int, cycles: int, out: Path, outcome: Outcome) -> None:
    settings = DemoSettings(
        ranks=ranks,
        steps=CYCLE * cycles + 1,
        wait=WAIT,
        warmup=WARMUP,
        active=ACTIVE,
        repeat=cycles,
        grad_ready_markers=config.grad_ready_markers,
        record_shapes=config.record_shapes,
        with_stack=config.with_stack,
        profile=config.profile,
    )
    result = run_demo(out, settings=settings)
    outcome.wall.add([t * 1e3 for t in result.step_times_s], cycles)
    outcome.cpu.add([t * 1e3 for t in result.step_cpu_s], cycles)
    if result.files:
        first = result.files[0]
        raw = gzip.decompress(first.read_bytes())
        outcome.gz_bytes.append(first.stat().st_size)
        outcome.raw_bytes.append(len(raw))
        outcome.events.append(len(msgspec.json.decode(raw)["traceEvents"]))


def marker_cost_us(params: int = 512, rounds: int = 15, repeats: int = 5) -> dict[str, float]:
    """Return the cost of one marker in µs, idle (profiler off) and while recording."""
    torch = import_torch()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(1, 1, bias=False) for _ in range(params)])
    inputs = torch.randn(1, 1)

    def backward_ms() -> list[float]:
        samples = []
        for _ in range(repeats):
            model.zero_grad(set_to_none=True)
            start = time.perf_counter()
            model(inputs).sum().backward()
            samples.append((time.perf_counter() - start) * 1e3)
        return samples

    results: dict[str, float] = {"params": params}
    for state in ("idle", "recording"):
        profiler = torch.profiler.profile(record_shapes=True) if state == "recording" else nullcontext()
        with profiler:
            backward_ms()  # warm up
            plain: list[float] = []
            marked: list[float] = []
            for _ in range(rounds):
                plain += backward_ms()
                handles = install_grad_ready_markers(model, torch=torch)
                marked += backward_ms()
                handles.remove()
        results[f"{state}_backward_ms"] = min(plain)
        results[f"{state}_backward_ms_with_markers"] = min(marked)
        results[f"{state}_marker_us"] = (min(marked) - min(plain)) * 1e3 / params
    return results


def _overhead(series: Series) -> str:
    ratio = statistics.median(series.ratios)
    q = statistics.quantiles(series.ratios, n=4)
    return f"{(ratio - 1) * 100:+.0f}% ({(q[0] - 1) * 100:+.0f} to {(q[2] - 1) * 100:+.0f})"


def _steps(series: Series) -> str:
    return f"{statistics.median(series.waiting_ms):.1f} → {statistics.median(series.recorded_ms):.1f}"


def _row(o: Outcome) -> str:
    gz_kb = statistics.median(o.gz_bytes) / ACTIVE / 1e3
    raw_kb = statistics.median(o.raw_bytes) / ACTIVE / 1e3
    events = statistics.median(o.events) / ACTIVE
    cells = [
        o.config,
        _steps(o.cpu),
        _overhead(o.cpu),
        _steps(o.wall),
        _overhead(o.wall),
        f"{statistics.median(o.cpu.export_ms):.0f} / {statistics.median(o.wall.export_ms):.0f}",
        f"{gz_kb:.1f} kB / {raw_kb:.0f} kB",
        f"{events:.0f}",
    ]
    return "| " + " | ".join(cells) + " |"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cycles", type=int, default=4)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    outcomes = {c.name: Outcome(c.name) for c in CONFIGS}
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(args.runs):
            for config in CONFIGS:
                out = Path(tmp) / f"{index}-{config.name.replace(' ', '_')}"
                o = outcomes[config.name]
                run_once(config, ranks=args.ranks, cycles=args.cycles, out=out, outcome=o)
                cpu_ratios = [round(r, 3) for r in o.cpu.ratios[-args.cycles :]]
                wall_ratios = [round(r, 3) for r in o.wall.ratios[-args.cycles :]]
                print(
                    f"run {index + 1}/{args.runs} {config.name}: cpu {cpu_ratios} wall {wall_ratios}",
                    file=sys.stderr,
                )
    unprofiled = outcomes[CONFIGS[0].name]
    markers = marker_cost_us()

    cpu = platform.processor() or platform.machine()
    print(f"machine: {cpu}, {os.cpu_count()} cores, {platform.system()}")
    print(f"python {platform.python_version()}, torch {import_torch().__version__}")
    print(
        f"job: demo DDP MLP, {args.ranks} ranks (gloo, 1 thread each); {args.runs} runs × {args.cycles} "
        f"cycles per configuration; without the profiler, steps 12-21 vs 2-9 of a cycle: "
        f"CPU {_overhead(unprofiled.cpu)}, wall {_overhead(unprofiled.wall)}"
    )
    print()
    print(
        "| configuration | main-thread CPU ms per step, waiting → recorded "
        "| CPU overhead, median (quartiles) "
        "| wall ms per step, waiting → recorded | wall overhead, median (quartiles) "
        "| export ms, CPU / wall | rank-0 file per step, gz / raw | events per step |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for o in outcomes.values():
        if o.config != CONFIGS[0].name:
            print(_row(o))
    print()
    print(
        f"grad-ready marker, per parameter: {markers['idle_marker_us']:.1f} µs when not recording, "
        f"{markers['recording_marker_us']:.1f} µs while recording "
        f"(fastest backward of {markers['params']:.0f} one-weight layers, idle: "
        f"{markers['idle_backward_ms']:.1f} → {markers['idle_backward_ms_with_markers']:.1f} ms; recording: "
        f"{markers['recording_backward_ms']:.1f} → {markers['recording_backward_ms_with_markers']:.1f} ms)"
    )
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "machine": {"cpu": cpu, "cores": os.cpu_count(), "system": platform.system()},
            "ranks": args.ranks,
            "runs": args.runs,
            "cycles": args.cycles,
            "outcomes": [asdict(o) for o in outcomes.values()],
            "markers": markers,
        }
        args.json.write_bytes(msgspec.json.format(msgspec.json.encode(payload), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
