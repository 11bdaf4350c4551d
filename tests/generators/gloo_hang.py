"""A real 3-rank gloo job whose rank 1 does not enter a collective the others wait in, dumped by torch.

torch 2.13's CPU build records gloo collectives in the Flight Recorder (``ProcessGroupGloo::enqueue``;
dump version 2.10), though its NCCL-only settings do not apply: the buffer is
``TORCH_FR_BUFFER_SIZE`` and the dump is taken here with ``torch._C._distributed_c10d._dump_fr_trace``
(pickle) and ``_dump_fr_trace_json`` (JSON), not on a watchdog timeout (gloo has no watchdog).

Run as ``python -m tests.generators.gloo_hang OUT`` from the project root: ranks 0 and 2 enqueue an
all_reduce of the default group (asynchronously) and dump; rank 1, once both dumps are written
(it waits on the job's store, no clock involved), dumps without having enqueued it, then joins it so
that the job ends cleanly. ``OUT/pickle/_dump_<rank>`` and ``OUT/json/_dump_<rank>`` hold the dumps.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

WORLD = 3
LATE_RANK = 1
"""The rank that has not entered the all_reduce the others wait in when the dumps are taken."""
ROUNDS = 3
"""All-reduces of the default group and of the pair (0, 1) before the one rank 1 is late for."""


def _rank(rank: int, out: str, store: str) -> None:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)
        import torch
        import torch.distributed as dist
        from torch._C import _distributed_c10d as c10d

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD)
    pair = dist.new_group([0, 1], group_desc="mesh_tp")
    tensor = torch.ones(256)
    for _ in range(ROUNDS):
        dist.all_reduce(tensor)
        if rank in (0, 1):
            dist.all_reduce(tensor, group=pair)
    dist.barrier()
    _settle(c10d)
    kv = dist.distributed_c10d._get_default_store()
    work = None
    if rank != LATE_RANK:
        work = dist.all_reduce(tensor, async_op=True)
    else:
        kv.wait([f"dumped{r}" for r in range(WORLD) if r != LATE_RANK])
    writers = (("pickle", c10d._dump_fr_trace), ("json", c10d._dump_fr_trace_json))  # type: ignore[attr-defined]
    for encoding, dump in writers:
        folder = Path(out) / encoding
        folder.mkdir(parents=True, exist_ok=True)
        data = dump()
        (folder / f"_dump_{rank}").write_bytes(data if isinstance(data, bytes) else data.encode())
    if work is not None:
        kv.set(f"dumped{rank}", "1")
        work.wait()
    else:
        dist.all_reduce(tensor)
    dist.barrier()
    dist.destroy_process_group()


def _settle(c10d: object) -> None:
    """Return once this rank's Flight Recorder has retired every entry of the collectives it waited on.

    gloo's worker threads retire an entry (and update ``pg_status``) after they wake the thread
    waiting on the work, so a dump taken right after a collective may not count it done yet: a lag a
    dump taken on a timeout, minutes later, never shows. Wait on the recorder itself, not the clock.
    """
    import json

    for _ in range(1_000_000):
        entries = json.loads(c10d._dump_fr_trace_json()).get("entries", [])  # type: ignore[attr-defined]
        if all(entry["retired"] for entry in entries):
            return
    raise SystemExit("the Flight Recorder never retired this rank's last collectives")


def run(out: Path) -> None:
    """Run the job; its dumps land in ``out/pickle`` and ``out/json``."""
    import multiprocessing

    os.environ["TORCH_FR_BUFFER_SIZE"] = "200"
    store = out / "store"
    context = multiprocessing.get_context("spawn")
    ranks = [context.Process(target=_rank, args=(r, str(out), str(store))) for r in range(WORLD)]
    for process in ranks:
        process.start()
    for process in ranks:
        process.join(240)
    codes = [p.exitcode for p in ranks]
    if codes != [0] * WORLD:
        raise SystemExit(f"gloo job failed: exit codes {codes}")


if __name__ == "__main__":
    run(Path(sys.argv[1]))
