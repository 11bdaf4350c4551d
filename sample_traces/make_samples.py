"""Regenerate the committed sample traces with :mod:`timeline.capture` (needs ``timeline[torch]``).

Usage::

    python sample_traces/make_samples.py            # every sample
    python sample_traces/make_samples.py ddp_gloo   # only the named ones

Each sample is a run folder written by a demo job of ``timeline capture --demo`` (CPU processes on
127.0.0.1, gloo, one intra-op thread each; :mod:`timeline.capture.jobs`): gzipped Kineto traces
named ``rank<N>.2-4.pt.trace.json.gz`` (steps 2-4 recorded: wait 1, warmup 1, active 3,
``record_shapes=True``) and a ``manifest.json``. Timings differ from run to run, so regenerating
changes the files; the event structure does not. Each sample is the same as
``timeline capture --demo --demo-job JOB --world-size N --steps 6 --out sample_traces/NAME``.

- ``ddp_gloo/``: job ``ddp`` (an MLP under ``DistributedDataParallel(bucket_cap_mb=1)``), 2 ranks;
- ``ddp_gloo_markers/``: the same with gradient-ready markers (``timeline.grad_ready:<param>:<bytes>``);
- ``ddp_gloo_4rank/``: job ``ddp``, 4 ranks on the same cores (oversubscribed on small machines:
  slower, noisier steps, more exposed communication);
- ``fsdp2_tp_gloo/``: job ``fsdp2_tp``, 4 ranks on a 2 x 2 mesh ``("dp", "tp")``: FSDP2 all-gathers
  and reduce-scatters on the ``mesh_dp`` groups {0, 2} and {1, 3}, tensor-parallel all-reduces on
  the ``mesh_tp`` groups {0, 1} and {2, 3};
- ``pipeline_gloo/``: job ``pipeline``, 4 ranks on a 2 x 2 mesh ``("pp", "dp")``: two pipeline
  stages (``Schedule1F1B``, 4 micro-batches) exchanging activations and gradients by send/recv on
  the ``mesh_pp`` groups {0, 2} and {1, 3}, one DDP all-reduce per step on the ``mesh_dp`` groups
  {0, 1} and {2, 3};
- ``expert_gloo/``: job ``expert``, 4 ranks on a 2 x 2 mesh ``("dp", "ep")``: tokens routed to
  experts by ``all_to_all_single`` with uneven splits on the ``mesh_ep`` groups {0, 1} and {2, 3},
  expert gradients all-reduced on the ``mesh_dp`` groups {0, 2} and {1, 3} and router gradients on
  the default group.

The samples of the parallel jobs (issue #20) show communication on several process groups: their
traces carry ``distributedInfo.pg_config``, which lists the groups each rank belongs to (see
docs/capturing.md for what a gloo trace does and does not say about groups).

``ddp_nccl_1rank/`` is made by ``sample_traces/make_nccl_sample.py`` on a CUDA GPU (one rank of DDP
on NCCL, torch 2.11 on an H200): a real GPU trace of a current profiler; NCCL launches no kernel for
a collective of one rank, so it shows DDP's annotations without communication on the device.

The script refuses to leave more than 2 MB of samples in total (the six folders take about
1.1 MB: 30-75 kB per rank and trace; the budget was not raised for the parallel samples).
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
if importlib.util.find_spec("timeline") is None:  # run from a checkout without installing it
    sys.path.insert(0, str(HERE.parent))

from timeline.capture import MANIFEST_NAME, DemoSettings, run_demo  # noqa: E402

BUDGET_BYTES = 2_000_000


@dataclass(frozen=True)
class Sample:
    """One sample run folder and how to make it."""

    name: str
    job: str
    ranks: int
    grad_ready_markers: bool = False


SAMPLES = (
    Sample("ddp_gloo", "ddp", ranks=2),
    Sample("ddp_gloo_markers", "ddp", ranks=2, grad_ready_markers=True),
    Sample("ddp_gloo_4rank", "ddp", ranks=4),
    Sample("fsdp2_tp_gloo", "fsdp2_tp", ranks=4),
    Sample("pipeline_gloo", "pipeline", ranks=4),
    Sample("expert_gloo", "expert", ranks=4),
)


def make(sample: Sample) -> list[Path]:
    """Replace the sample's run folder with a fresh capture; return its files."""
    out = HERE / sample.name
    out.mkdir(exist_ok=True)
    for old in [*out.glob("rank*.pt.trace.json.gz"), out / MANIFEST_NAME]:
        old.unlink(missing_ok=True)
    settings = DemoSettings(
        job=sample.job, ranks=sample.ranks, steps=6, grad_ready_markers=sample.grad_ready_markers, seed=0
    )
    result = run_demo(out, settings=settings)
    return [*result.files, out / MANIFEST_NAME]


def main(argv: list[str]) -> int:
    """Make the samples named in ``argv`` (all when empty); return the exit code."""
    known = {s.name: s for s in SAMPLES}
    unknown = [name for name in argv if name not in known]
    if unknown:
        print(f"error: unknown sample {unknown[0]!r}; known: {', '.join(known)}", file=sys.stderr)
        return 2
    for sample in [known[name] for name in argv] if argv else SAMPLES:
        for path in make(sample):
            print(f"{path.relative_to(HERE)!s:45} {path.stat().st_size:>9,} bytes")
    total = sum(p.stat().st_size for s in SAMPLES for p in (HERE / s.name).glob("*") if p.is_file())
    print(f"all samples: {total:,} bytes")
    if total > BUDGET_BYTES:
        print(f"error: samples total {total:,} bytes, over the {BUDGET_BYTES:,} byte budget", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
