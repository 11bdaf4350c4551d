"""Regenerate the committed sample traces with :mod:`timeline.capture` (needs ``timeline[torch]``).

Usage::

    python sample_traces/make_samples.py            # every sample
    python sample_traces/make_samples.py ddp_gloo   # only the named ones

Each sample is a run folder written by the demo job of ``timeline capture --demo`` (an MLP under
``DistributedDataParallel(bucket_cap_mb=1)`` on CPU processes, gloo): gzipped Kineto traces named
``rank<N>.2-4.pt.trace.json.gz`` (steps 2-4 recorded: wait 1, warmup 1, active 3) and a
``manifest.json``. Timings differ from run to run, so regenerating changes the files; the event
structure does not. The script refuses to leave more than 2 MB of samples in total.

- ``ddp_gloo/``: 2 ranks, default capture settings;
- ``ddp_gloo_markers/``: 2 ranks with gradient-ready markers (``timeline.grad_ready:<param>:<bytes>``);
- ``ddp_gloo_4rank/``: 4 ranks on the same cores (oversubscribed on small machines: slower, noisier
  steps, more exposed communication).
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
if importlib.util.find_spec("timeline") is None:  # run from a checkout without installing it
    sys.path.insert(0, str(HERE.parent))

from timeline.capture import MANIFEST_NAME, run_demo  # noqa: E402

BUDGET_BYTES = 2_000_000


@dataclass(frozen=True)
class Sample:
    """One sample run folder and how to make it."""

    name: str
    ranks: int
    grad_ready_markers: bool


SAMPLES = (
    Sample("ddp_gloo", ranks=2, grad_ready_markers=False),
    Sample("ddp_gloo_markers", ranks=2, grad_ready_markers=True),
    Sample("ddp_gloo_4rank", ranks=4, grad_ready_markers=False),
)


def make(sample: Sample) -> list[Path]:
    """Replace the sample's run folder with a fresh capture; return its files."""
    out = HERE / sample.name
    out.mkdir(exist_ok=True)
    for old in [*out.glob("rank*.pt.trace.json.gz"), out / MANIFEST_NAME]:
        old.unlink(missing_ok=True)
    result = run_demo(out, ranks=sample.ranks, steps=6, grad_ready_markers=sample.grad_ready_markers, seed=0)
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
