"""Write the project's own small synthetic Horovod timelines.

Usage: ``python sample_traces/make_horovod.py [OUTDIR]`` (default: ``sample_traces/horovod/`` beside this
script). The output is deterministic (seeded) and each file stays under 30 KB.

The job simulated: 4 data-parallel ranks train a small convnet with 6 gradient tensors for 3 steps.
Each tensor negotiates (``NEGOTIATE_ALLREDUCE`` with one readiness tick per rank, quantised to the
coordinator cycle), tensors whose negotiations end in the same cycle are fused into one response, and
every tensor of a fused response repeats the same activity spans (``MEMCPY_IN_FUSION_BUFFER``, the wire,
``MEMCPY_OUT_FUSION_BUFFER``); the top-level ``E`` of each tensor carries its own dtype and shape.

Records are written with plain string formatting to reproduce each writer's bytes
(``horovod/common/timeline.cc``):

- ``horovod_v015.json``: v0.9-v0.15, one record a line ending ``},``, the array never closed, ``ts`` in µs
  since the timeline started; CPU job (MPI_ALLREDUCE through the fusion buffer), no CYCLE_START.
- ``horovod_v016.json``: v0.16-v0.20.0, the same layout but ``ts`` in µs since machine boot, a
  ``CYCLE_START`` marker every 5 ms cycle; GPU job (WAIT_FOR_DATA, QUEUE, NCCL_ALLREDUCE).
- ``horovod_v021.json``: v0.20.1+, valid JSON after every record (each ends ``}]``, the next overwrites
  the ``]``), records concatenated, the ``pid 0`` header with ``start_time_since_epoch_in_micros``, 1 ms
  cycles, an initial parameter broadcast and INIT_NCCL / INIT_FUSION_BUFFER on first use.
- ``horovod_v016_cut.json``: the v0.16 job killed while writing a record: cut off mid-record.
- ``horovod_v021_open.json``: the v0.21 job killed during its last wire phase: spans left open.
- ``horovod_empty.json``: a job killed before its first tensor: a lone ``[``.
"""

from __future__ import annotations

import math
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

Layout = Literal["v015", "v016", "v021"]

WORLD_SIZE = 4
STEPS = 3
SEED = 20240611
EPOCH_START_US = 1_718_064_000_123_456  # 2024-06-11 00:00:00.123456 UTC
BOOT_UPTIME_US = 77_567_277_433  # the machine booted ~21.5 hours before the timeline started
# (parameter name, shape) in the order of the forward pass; gradients become ready in reverse order.
TENSORS: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("conv1.weight", (32, 3, 3, 3)),
    ("conv1.bias", (32,)),
    ("conv2.weight", (64, 32, 3, 3)),
    ("fc1.weight", (128, 1024)),
    ("fc2.weight", (10, 128)),
    ("fc2.bias", (10,)),
)
DTYPE = "float32"
DTYPE_BYTES = 4


@dataclass(order=True)
class Event:
    """One record to write, ordered by time and then by the order it was produced."""

    ts: int
    order: int
    ph: str = field(compare=False)
    tensor: str | None = field(compare=False)  # None for CYCLE_START
    name: str = field(compare=False, default="")
    args: str = field(compare=False, default="")


@dataclass
class Job:
    """Produce the events of the simulated job in time order (µs since the timeline started)."""

    layout: Layout
    rng: random.Random
    events: list[Event] = field(default_factory=list)
    busy_until: int = 0  # the background thread runs one response at a time
    initialised: set[str] = field(default_factory=set)

    def add(self, ts: int, ph: str, tensor: str | None, name: str = "", args: str = "") -> None:
        self.events.append(Event(ts, len(self.events), ph, tensor, name, args))

    @property
    def cycle_us(self) -> int:
        # HOROVOD_CYCLE_TIME: 5 ms before v0.21, 1 ms after.
        return 1000 if self.layout == "v021" else 5000

    def next_cycle(self, ts: int) -> int:
        return (ts // self.cycle_us + 1) * self.cycle_us

    def negotiate(self, tensor: str, op: str, ready: list[int]) -> int:
        """Write one negotiation; return the cycle in which the last rank was ready."""
        first = self.next_cycle(min(ready))
        last = self.next_cycle(max(ready))
        self.add(first + self.rng.randint(1, 9), "B", tensor, f"NEGOTIATE_{op}")
        for rank in sorted(range(WORLD_SIZE), key=lambda r: ready[r]):
            self.add(self.next_cycle(ready[rank]) + self.rng.randint(10, 30), "X", tensor, str(rank))
        self.add(last + 40, "E", tensor)
        return last

    def respond(self, cycle: int, op: str, entries: list[tuple[str, tuple[int, ...]]]) -> None:
        """Write one (possibly fused) response: identical activity spans on every tensor."""
        t = max(cycle + 100, self.busy_until + 20)
        names = [name for name, _ in entries]
        nbytes = sum(math.prod(shape) * DTYPE_BYTES for _, shape in entries)
        gpu = self.layout != "v015"
        backend = "NCCL" if gpu else "MPI"
        wire = {"ALLREDUCE": f"{backend}_ALLREDUCE", "BROADCAST": f"{backend}_BCAST"}[op]
        phases: list[tuple[str, int]] = []
        if gpu:
            phases += [("WAIT_FOR_DATA", 15 + self.rng.randint(0, 20)), ("WAIT_FOR_OTHER_TENSOR_DATA", 40)]
            if "INIT_NCCL" not in self.initialised and self.layout == "v021":
                self.initialised.add("INIT_NCCL")
                phases.append(("INIT_NCCL", 6_000))
            phases.append(("QUEUE", 10 + self.rng.randint(0, 10)))
        fused = len(entries) > 1
        if fused and "INIT_FUSION_BUFFER" not in self.initialised:
            self.initialised.add("INIT_FUSION_BUFFER")
            phases.append(("INIT_FUSION_BUFFER", 16))
        if fused:
            phases.append(("MEMCPY_IN_FUSION_BUFFER", 5 + nbytes // 2000))
        # Ring all-reduce over 10 Gb/s: 2(N-1)/N of the bytes, at 1.25 bytes per ns, plus latency.
        transfer = 2 * (WORLD_SIZE - 1) * nbytes // (WORLD_SIZE * 1250)
        phases.append((wire, 60 + transfer + self.rng.randint(0, 30)))
        if fused:
            phases.append(("MEMCPY_OUT_FUSION_BUFFER", 5 + nbytes // 2000))
        for name in names:
            self.add(t, "B", name, op)
        for phase, duration in phases:
            t += 2
            for name in names:
                self.add(t, "B", name, phase)
            t += duration
            for name in names:
                self.add(t, "E", name)
        t += 5
        for name, shape in entries:
            dims = ", ".join(str(dim) for dim in shape)
            self.add(t, "E", name, args=f'"dtype": "{DTYPE}", "shape": "[{dims}]"')
            t += 1
        self.busy_until = t

    def run(self) -> None:
        t = 1_200_000  # the first tensor comes 1.2 s after hvd.init()
        if self.layout == "v021":
            # hvd.broadcast_parameters(model.state_dict(), root_rank=0): one broadcast per parameter.
            for name, shape in TENSORS:
                ready = [t + rank * 400 + self.rng.randint(0, 300) for rank in range(WORLD_SIZE)]
                cycle = self.negotiate(name, "BROADCAST", ready)
                self.respond(cycle, "BROADCAST", [(name, shape)])
                t = self.busy_until + 200
        for _ in range(STEPS):
            backward_start = t + 4000  # forward pass
            # Each rank runs the backward pass a little late or early; a layer's bias gradient comes
            # right before its weight gradient, so the two are ready in the same cycle and fuse.
            skew = [self.rng.randint(0, 600) for _ in range(WORLD_SIZE)]
            ready_by_tensor: dict[str, list[int]] = {}
            for position, (name, _) in enumerate(reversed(TENSORS)):
                base = backward_start + 2000 * (position // 2) + 60 * (position % 2)
                ready_by_tensor[name] = [
                    base + skew[rank] + self.rng.randint(0, 40) for rank in range(WORLD_SIZE)
                ]
            by_cycle: dict[int, list[tuple[str, tuple[int, ...]]]] = {}
            for name, shape in reversed(TENSORS):
                cycle = self.negotiate(f"allreduce.{name}", "ALLREDUCE", ready_by_tensor[name])
                by_cycle.setdefault(cycle, []).append((f"allreduce.{name}", shape))
            for cycle in sorted(by_cycle):
                self.respond(cycle, "ALLREDUCE", by_cycle[cycle])
            t = self.busy_until + 1000  # optimizer step
        if self.layout != "v015":
            # CYCLE_START: one marker per background-loop cycle (HOROVOD_TIMELINE_MARK_CYCLES); the
            # idle cycles before the first tensor are left out to keep the file small.
            begin = self.next_cycle(min(event.ts for event in self.events)) - 3 * self.cycle_us
            end = max(event.ts for event in self.events)
            for cycle in range(begin, end + self.cycle_us, self.cycle_us):
                self.add(cycle + self.rng.randint(0, 8), "i", None, "CYCLE_START")
        self.events.sort()


def render(events: list[Event], layout: Layout, *, origin_us: int) -> str:
    """Write the events as the writer of ``layout`` would, times offset by ``origin_us``."""
    pids: dict[str, int] = {}
    out: list[str] = ["[\n"]
    v021 = layout == "v021"
    if v021:
        # WriteAtFileStart: the pid 0 header, written before the first event.
        out.append(
            '{"name": "process_name", "ph": "M", "pid": 0, "args": '
            f'{{"start_time_since_epoch_in_micros":{EPOCH_START_US}}}}},\n'
        )
        out.append('{"name": "process_sort_index", "ph": "M", "pid": 0, "args": {"sort_index": 0}},\n')
    first_event = True
    for event in events:
        if v021 and not first_event:
            out[-1] = out[-1][:-1] + ","  # seek back over "]" and continue the array
        first_event = False
        ts = event.ts + origin_us
        if event.ph == "i":
            record = f'{{"ph": "i", "name": "{event.name}", "ts": {ts}, "s": "g"}}'
        else:
            if event.tensor is None:
                msg = "an event other than CYCLE_START needs a tensor"
                raise ValueError(msg)
            pid = pids.get(event.tensor)
            if pid is None:
                pid = pids[event.tensor] = len(pids) + 1
                # A new tensor: its "process" metadata precedes its first event.
                out.append(f'{{"name": "process_name", "ph": "M", "pid": {pid}, ')
                out.append(f'"args": {{"name": "{event.tensor}"}}}},\n')
                out.append(f'{{"name": "process_sort_index", "ph": "M", "pid": {pid}, ')
                out.append(f'"args": {{"sort_index": {pid}}}}},\n')
            record = f'{{"ph": "{event.ph}"'
            if event.ph != "E":
                record += f', "name": "{event.name}"'
            record += f', "ts": {ts}, "pid": {pid}'
            if event.ph == "X":
                record += ', "dur": 0'
            if event.args:
                record += f', "args": {{{event.args}}}'
            record += "}"
        out.append(record + ("]" if v021 else ",\n"))
    return "".join(out)


def simulate(layout: Layout) -> list[Event]:
    job = Job(layout, random.Random(f"{SEED}-{layout}"))
    job.run()
    return job.events


def write_all(outdir: Path) -> list[Path]:
    outdir.mkdir(parents=True, exist_ok=True)
    written: dict[str, str] = {}
    v015 = simulate("v015")
    v016 = simulate("v016")
    v021 = simulate("v021")
    written["horovod_v015.json"] = render(v015, "v015", origin_us=0)
    written["horovod_v016.json"] = render(v016, "v016", origin_us=BOOT_UPTIME_US)
    written["horovod_v021.json"] = render(v021, "v021", origin_us=0)
    # Killed while writing the first record of a 4th step: every span was closed, the record is cut.
    written["horovod_v016_cut.json"] = written["horovod_v016.json"] + '{"ph": "B", "name": "NEGOTIATE_ALLRED'
    # Killed during the wire phase of the last response: its spans (top level and wire) stay open.
    last_wire = max(e.ts for e in v021 if e.ph == "B" and e.name.startswith("NCCL_ALLREDUCE"))
    written["horovod_v021_open.json"] = render(
        [e for e in v021 if e.ts <= last_wire + 10], "v021", origin_us=0
    )
    written["horovod_empty.json"] = "[\n"
    paths = []
    for name, text in written.items():
        path = outdir / name
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    return paths


def main(argv: list[str]) -> int:
    outdir = Path(argv[1]) if len(argv) > 1 else Path(__file__).parent / "horovod"
    for path in write_all(outdir):
        print(f"{path}: {path.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
