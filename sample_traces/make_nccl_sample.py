"""Make the NCCL sample: one rank of DDP on one CUDA GPU, captured with :mod:`timeline.capture`.

Usage (on a machine with a CUDA GPU, torch and msgspec; the analysis is not needed there)::

    python sample_traces/make_nccl_sample.py --out sample_traces/ddp_nccl_1rank

One process joins a one-rank NCCL process group (``init_process_group("nccl")`` on 127.0.0.1) and
trains an MLP (256 → 4 × 1024 → 10, batch 256) under ``DistributedDataParallel(bucket_cap_mb=1)``
on ``cuda:0``, so the gradients travel in buckets whose ``ncclDevKernel_AllReduce`` kernels run on
NCCL's own stream beside the backward pass's kernels. A run of one rank has no other rank to wait
for: its collectives measure the device's own overlap of communication and compute, with real
CUDA kernels, runtime launches and a current profiler's trace format. The run folder is what
``timeline capture`` writes (steps 2-4 recorded, gradient-ready markers, a ``manifest.json``);
``--backend gloo --device cpu`` runs the same job without a GPU, to check the script.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import socket
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if importlib.util.find_spec("timeline") is None:  # run from a checkout without installing it
    sys.path.insert(0, str(HERE.parent))

from timeline.capture import capture  # noqa: E402

_INPUT, _HIDDEN, _LAYERS, _CLASSES, _BATCH = 256, 1024, 4, 10, 256
_STEPS = 6  # wait 1, warmup 1, active 3: steps 2-4 recorded, one more to flush


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def main(argv: list[str] | None = None) -> int:
    """Train one rank, capture its steps into ``--out``; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--backend", default="nccl", choices=("nccl", "gloo"))
    parser.add_argument("--device", default="cuda:0")
    args = parser.parse_args(argv)
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), RANK="0", WORLD_SIZE="1")
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(args.backend, rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        nn = torch.nn
        layers: list[torch.nn.Module] = [nn.Linear(_INPUT, _HIDDEN), nn.ReLU()]
        for _ in range(_LAYERS - 1):
            layers += [nn.Linear(_HIDDEN, _HIDDEN), nn.ReLU()]
        layers.append(nn.Linear(_HIDDEN, _CLASSES))
        ids = [device.index] if device.type == "cuda" else None
        model = nn.parallel.DistributedDataParallel(
            nn.Sequential(*layers).to(device), device_ids=ids, bucket_cap_mb=1
        )
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        inputs = torch.randn(_BATCH, _INPUT, device=device)
        targets = torch.randint(0, _CLASSES, (_BATCH,), device=device)
        with capture(args.out, model=model, grad_ready_markers=True) as cap:
            for _ in range(_STEPS):
                optimizer.zero_grad(set_to_none=True)
                nn.functional.cross_entropy(model(inputs), targets).backward()  # type: ignore[no-untyped-call]
                optimizer.step()
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                cap.step()
    finally:
        dist.destroy_process_group()
    written = sorted(p.name for p in args.out.iterdir())
    print(f"wrote {', '.join(written)} into {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
