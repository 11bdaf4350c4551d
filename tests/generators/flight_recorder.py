"""Flight Recorder dumps written by the project's own generator: a small job simulated, its faults known.

The layout is copied field by field from torch's writer (``FlightRecorderDetail.hpp``:
``getCollectiveTrace``, ``getPgConfig``, ``getPgStatus``, ``dump_dict`` pickled with protocol 2;
``dump_json``) and checked against the real dumps in ``../shared/traces/flight_recorder`` (2.9) and
a gloo job's dump made with torch 2.13 (2.10):

- pickle: a dict ``version``, ``pg_config`` (name → ``{name, desc, ranks}``, ranks as the text
  ``"[0, 1]"``), ``comm_lib_version`` (``nccl_version`` up to 2.9), ``pg_status`` (the rank-local
  ``pg_id`` as text → ``last_enqueued_collective``, ``last_started_collective``,
  ``last_completed_collective``, -1 for none), ``entries`` (a list of dicts; ``process_group`` a
  tuple);
- JSON: the same with keys sorted, ``process_group`` a list, ``pg_status`` values as text,
  ``time_discovered_*`` 0 when not discovered, no ``entries`` key when there are none.

:func:`simulate` runs a program of collectives over process groups on every rank, with faults:
``host_stop`` (a rank never issues a step and anything after it: its host stopped),
``device_stop`` (a rank's device never starts a step nor anything after it: with timing on, its
``last_started`` stays behind), ``blind`` (a rank's watchdog sees no completion from a step on while
its peers complete them, as in the GPU-error dumps of the shared set), ``desync`` (a rank issues
another collective at a step). Each rank's device runs its steps in program order, one at a time;
a collective completes when every member started it and all issued the same one.
"""

from __future__ import annotations

import ast
import io
import json
import math
import pickle
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "EPOCH_NS",
    "Faults",
    "Group",
    "Step",
    "clean_job",
    "plain_progress",
    "plain_states",
    "profiler_kernel",
    "read_dump_plainly",
    "read_folder_plainly",
    "simulate",
    "to_json_dump",
    "write_dumps",
]

EPOCH_NS = 1_758_610_505_000_000_000
"""When the simulated job starts (2025-09-23, like the shared dumps)."""
_STEP_NS = 1_000_000  # each step of the program is issued 1 ms after the previous one
_DURATION_MS = 0.25

_ELEMENT_SIZE = {"Float": 4, "BFloat16": 2, "Half": 2, "Long": 8, "Byte": 1}


@dataclass(frozen=True)
class Group:
    """A process group: its torch name, description (``pg_desc``) and global member ranks."""

    name: str
    desc: str
    ranks: tuple[int, ...]


@dataclass(frozen=True)
class Step:
    """One collective of the program, in one group: its op (a torch op name), shape and dtype."""

    group: str
    op: str
    shape: tuple[int, ...] = (1024,)
    dtype: str = "Float"


@dataclass(frozen=True)
class Faults:
    """What goes wrong: rank → index of the program step from which it happens (see the module)."""

    host_stop: Mapping[int, int] = field(default_factory=dict)
    device_stop: Mapping[int, int] = field(default_factory=dict)
    blind: Mapping[int, int] = field(default_factory=dict)
    desync: Mapping[tuple[int, int], Step] = field(default_factory=dict)


def _sizes(step: Step, size: int) -> tuple[list[list[int]], list[list[int]]]:
    """Input and output sizes as torch records them for the op (all_gather: output ``size`` times)."""
    shape = list(step.shape)
    if step.op in ("_all_gather_base", "all_gather"):
        return [shape], [[shape[0] * size, *shape[1:]]]
    if step.op in ("_reduce_scatter_base", "reduce_scatter"):
        return [shape], [[shape[0] // size, *shape[1:]]]
    return [shape], [shape]


def _entry(
    *, record_id: int, pg_id: int, group: Group, seq: int, op_id: int, step: Step, created: int,
    started: int | None, completed: int | None, timing: bool,
) -> dict[str, Any]:  # fmt: skip
    """One entry, its keys in the order ``getCollectiveTrace`` inserts them."""
    inputs, outputs = _sizes(step, len(group.ranks))
    entry: dict[str, Any] = {
        "record_id": record_id,
        "pg_id": pg_id,
        "process_group": (group.name, group.desc),
        "thread_name": "pt_main_thread",
        "thread_id": "140000000000000",
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "op_id": op_id,
        "profiling_name": f"nccl:{step.op}",
        "time_created_ns": created,
    }
    if timing and completed is not None:
        entry["duration_ms"] = _DURATION_MS
    entry.update(
        {
            "input_sizes": inputs,
            "input_dtypes": [step.dtype],
            "output_sizes": outputs,
            "output_dtypes": [step.dtype],
            "state": "completed"
            if completed is not None
            else "started"
            if started is not None
            else "scheduled",
            "time_discovered_started_ns": started,
            "time_discovered_completed_ns": completed,
            "retired": completed is not None,
            "timeout_ms": 600000,
            "is_p2p": False,
        }
    )
    return entry


def _run(groups: Sequence[Group], program: Sequence[Step], faults: Faults) -> dict[str, Any]:
    """Play the program: which rank issued, started and completed (as it sees it) each step."""
    by_name = {g.name: g for g in groups}
    world = sorted({r for g in groups for r in g.ranks})
    issued: dict[int, list[int]] = {r: [] for r in world}
    started: dict[int, set[int]] = {r: set() for r in world}
    seen_done: dict[int, set[int]] = {r: set() for r in world}
    blocked: set[int] = set()  # ranks whose device waits on a step that never completes
    for i, step in enumerate(program):
        members = by_name[step.group].ranks
        for r in members:
            if i < faults.host_stop.get(r, math.inf):
                issued[r].append(i)
        can_start = [
            r
            for r in members
            if i in issued[r] and r not in blocked and i < faults.device_stop.get(r, math.inf)
        ]
        for r in can_start:
            started[r].add(i)
        ops = {faults.desync.get((r, i), step) for r in members}
        if len(can_start) == len(members) and len(ops) == 1:
            for r in members:
                if i < faults.blind.get(r, math.inf):
                    seen_done[r].add(i)
        else:
            blocked.update(members)
    return {"issued": issued, "started": started, "done": seen_done}


def simulate(
    groups: Sequence[Group],
    program: Sequence[Step],
    *,
    faults: Faults | None = None,
    timing: bool = False,
    only_active: bool = False,
    buffer: int = 2000,
    version: str = "2.10",
) -> dict[int, dict[str, Any]]:
    """Return each rank's dump (a dict as torch pickles it) after the program ran with the faults.

    ``timing``: ``TORCH_NCCL_ENABLE_TIMING`` (start times, ``last_started``, durations);
    ``only_active``: keep only entries not completed (as torch's dump on timeout may);
    ``buffer``: ``TORCH_NCCL_TRACE_BUFFER_SIZE``, the last entries kept.
    """
    faults = faults or Faults()
    ran = _run(groups, program, faults)
    dumps = {}
    for rank in sorted({r for g in groups for r in g.ranks}):
        mine = [g for g in groups if rank in g.ranks]
        pg_ids = {g.name: uid for uid, g in enumerate(mine)}
        seqs = {g.name: 0 for g in mine}
        status = {g.name: {"last_enqueued_collective": -1, "last_started_collective": -1,
                           "last_completed_collective": -1} for g in mine}  # fmt: skip
        entries: list[dict[str, Any]] = []
        for i in ran["issued"][rank]:
            step = faults.desync.get((rank, i), program[i])
            group = next(g for g in mine if g.name == program[i].group)
            seqs[group.name] += 1
            seq = seqs[group.name]
            created = EPOCH_NS + i * _STEP_NS + rank * 1000
            begun = created + 10_000 if timing and i in ran["started"][rank] else None
            done = created + 300_000 if i in ran["done"][rank] else None
            record = {"last_enqueued_collective": seq}
            if begun is not None:
                record["last_started_collective"] = seq
            if done is not None:
                record["last_completed_collective"] = seq
            status[group.name].update(record)
            entries.append(
                _entry(
                    record_id=len(entries),
                    pg_id=pg_ids[group.name],
                    group=group,
                    seq=seq,
                    op_id=seq,
                    step=step,
                    created=created,
                    started=begun,
                    completed=done,
                    timing=timing,
                )
            )
        if only_active:
            entries = [e for e in entries if e["time_discovered_completed_ns"] is None]
        dumps[rank] = _dump(mine, pg_ids, status, entries[-buffer:], version)
    return dumps


def _dump(
    mine: Sequence[Group],
    pg_ids: Mapping[str, int],
    status: Mapping[str, Mapping[str, int]],
    entries: list[dict[str, Any]],
    version: str,
) -> dict[str, Any]:
    """A rank's dump dict, keys in ``dump_dict``'s order."""
    lib_key = "nccl_version" if tuple(map(int, version.split("."))) < (2, 10) else "comm_lib_version"
    return {
        "version": version,
        "pg_config": {g.name: {"name": g.name, "desc": g.desc, "ranks": str(list(g.ranks))} for g in mine},
        lib_key: "2.27.3",
        "pg_status": {str(pg_ids[g.name]): dict(status[g.name]) for g in mine},
        "entries": entries,
    }


def to_json_dump(dump: Mapping[str, Any]) -> str:
    """The dump as torch's JSON writer writes it (``dump_json``)."""
    out: dict[str, Any] = {k: v for k, v in dump.items() if k != "entries"}
    out["pg_status"] = {
        pg: {key: str(value) for key, value in status.items()} for pg, status in dump["pg_status"].items()
    }
    entries = []
    for entry in dump["entries"]:
        converted = dict(entry)
        converted["process_group"] = list(entry["process_group"])
        for key in ("time_discovered_started_ns", "time_discovered_completed_ns"):
            converted[key] = entry[key] or 0
        entries.append(converted)
    if entries:
        out["entries"] = entries
    return json.dumps(out, sort_keys=True, separators=(",", ":"))


def write_dumps(
    folder: Path, dumps: Mapping[int, Mapping[str, Any]], *, encoding: str = "pickle", prefix: str = "_dump_"
) -> list[Path]:
    """Write each rank's dump to ``folder/<prefix><rank>`` (pickle protocol 2, as torch does, or JSON)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"{prefix}{rank}" for rank in sorted(dumps)]
    for path, rank in zip(paths, sorted(dumps), strict=True):
        if encoding == "pickle":
            path.write_bytes(pickle.dumps(dict(dumps[rank]), protocol=2))
        else:
            path.write_text(to_json_dump(dumps[rank]))
    return paths


def clean_job(world: int = 4, steps: int = 6) -> tuple[list[Group], list[Step]]:
    """A data-parallel job: the world group and two halves, all-reduces and all-gathers in turn."""
    half = world // 2
    groups = [
        Group("0", "default_pg", tuple(range(world))),
        Group("1", "mesh_tp", tuple(range(half))),
        Group("2", "mesh_tp", tuple(range(half, world))),
    ]
    program: list[Step] = []
    for i in range(steps):
        program.append(Step("0", "all_reduce", (4096,), "Float"))
        program.extend(Step(name, "_all_gather_base", (256, 8), "BFloat16") for name in ("1", "2"))
        if i % 2:
            program.append(Step("0", "broadcast", (16,), "Long"))
    return groups, program


# --- an independent reading, for tests: plain Python over the raw dicts, no polars, no timeline ---


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused {module}.{name}")


def read_dump_plainly(path: Path) -> dict[str, Any]:
    """Return a dump's raw dict: pickle (classes refused) or JSON."""
    data = path.read_bytes()
    if data[:1] == b"\x80":
        loaded: dict[str, Any] = _PlainUnpickler(io.BytesIO(data)).load()
        return loaded
    loaded = json.loads(data)
    return loaded


def read_folder_plainly(folder: Path, prefix: str = "_dump_") -> dict[int, dict[str, Any]]:
    """Return every ``<prefix><rank>`` dump of a folder by rank."""
    return {
        int(p.name[len(prefix) :]): read_dump_plainly(p)
        for p in folder.iterdir()
        if p.name.startswith(prefix) and p.name[len(prefix) :].isdigit()
    }


def plain_progress(
    dumps: Mapping[int, Mapping[str, Any]],
) -> dict[tuple[str, tuple[int, ...]], dict[int, tuple[int, int, bool]]]:
    """Per group (name, member ranks), per rank: ``(last_enqueued, last_completed, any_p2p_entry)``.

    A ``pg_status`` id is named by the rank's entries, else by creation order (both numbered in the
    order groups are created); -1 reads as 0.
    """
    out: dict[tuple[str, tuple[int, ...]], dict[int, tuple[int, int, bool]]] = {}
    for rank, dump in dumps.items():
        entries = dump.get("entries", [])
        named = {str(e["pg_id"]): e["process_group"][0] for e in entries}
        p2p = {e["process_group"][0] for e in entries if e["is_p2p"]}
        ids = sorted(dump["pg_status"], key=int)
        names = sorted(dump["pg_config"], key=int)
        for i, pg_id in enumerate(ids):
            name = named.get(pg_id, names[i])
            ranks = tuple(ast.literal_eval(dump["pg_config"][name]["ranks"]))
            status = dump["pg_status"][pg_id]
            enqueued = max(int(status["last_enqueued_collective"]), 0)
            completed = max(int(status["last_completed_collective"]), 0)
            out.setdefault((name, ranks), {})[rank] = (enqueued, completed, name in p2p)
    return out


def plain_states(progress: Mapping[int, tuple[int, int, bool]]) -> dict[int, str]:
    """The state of each rank of one collective group, by the rules of docs/flight-recorder.md."""
    top = max(c for _, c, _ in progress.values())
    ahead = max(e for e, _, _ in progress.values())
    states = {}
    for rank, (enqueued, completed, _) in progress.items():
        if completed < top:
            states[rank] = "not_completed" if enqueued > completed else "not_entered"
        elif enqueued == completed:
            states[rank] = "not_entered" if ahead > top else "idle"
        else:
            states[rank] = "open"
    stopped = any(s.startswith("not_") for s in states.values())
    return {r: ("waiting" if stopped else "stalled") if s == "open" else s for r, s in states.items()}


def profiler_kernel(
    op: str, seq: int, ts_us: float, nelems: int, dtype: str, correlation: int
) -> dict[str, Any]:
    """A 2026-style Kineto NCCL kernel record of group ``"0"``: collective, group and ``Seq`` in its args."""
    kernel = {"allreduce": "AllReduce", "broadcast": "Broadcast"}[op]
    return {
        "ph": "X", "cat": "kernel", "name": f"ncclDevKernel_{kernel}_RING_LL(ncclDevKernelArgsStorage)",
        "pid": 0, "tid": 7, "ts": ts_us, "dur": 50,
        "args": {"device": 0, "stream": 7, "correlation": correlation, "Collective name": op,
                 "Process Group Name": "0", "Seq": seq, "In msg nelems": nelems, "Out msg nelems": nelems,
                 "dtype": dtype, "Group size": 4},
    }  # fmt: skip
