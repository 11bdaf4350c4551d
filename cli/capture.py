"""``timeline capture --demo``: run a small CPU job (gloo) under the profiler and leave a run folder.

Registered by the main app as ``app.command("capture")(capture_command)``. Capturing your own
training job is done from Python with :func:`timeline.capture.capture`; this command only runs
the built-in demo jobs (``--demo-job``: ``ddp``, ``fsdp2_tp``, ``pipeline``, ``expert``;
``docs/capturing.md``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cli.common import fail, user_errors
from timeline.errors import shown

if TYPE_CHECKING:
    from timeline.capture import DemoResult

__all__ = ["capture_command"]

_TRACE_GLOB = "rank*.pt.trace.json.gz"

DemoOption = Annotated[
    bool,
    typer.Option("--demo", help="Run a built-in demo job on CPU processes (gloo); see --demo-job."),
]
DemoJobOption = Annotated[
    str,
    typer.Option(
        "--demo-job",
        help="Which demo job: ddp (an MLP under DDP), fsdp2_tp (FSDP2 + tensor parallel on a "
        "(ranks/2, 2) dp x tp mesh), pipeline (2 pipeline stages with send/recv, DDP on dp) or "
        "expert (mixture of experts, all_to_all with uneven splits on ep).",
    ),
]
OutOption = Annotated[
    Path,
    typer.Option("--out", help="Run folder to write the traces and manifest.json to."),
]
WorldSizeOption = Annotated[
    int | None,
    typer.Option(
        "--world-size",
        "-n",
        min=1,
        max=64,
        help="Number of processes (world size). Default: 2 for ddp, 4 for the other jobs (which need "
        "an even number, at least 4).",
        show_default=False,
    ),
]
StepsOption = Annotated[
    int,
    typer.Option("--steps", min=5, help="Training steps per rank; steps 2-4 are recorded."),
]
GradReadyMarkersOption = Annotated[
    bool,
    typer.Option(
        "--grad-ready-markers",
        help="Also record when each gradient is ready (timeline.grad_ready:<param>:<bytes> events).",
    ),
]
ForceOption = Annotated[
    bool, typer.Option("--force", help="Replace the traces and manifest of an earlier run in --out.")
]
RanksAlias = Annotated[int | None, typer.Option("--ranks", hidden=True, help="Renamed --world-size.")]


def capture_command(
    demo: DemoOption = False,
    demo_job_name: DemoJobOption = "ddp",
    out: OutOption = Path("runs/demo"),
    ranks: WorldSizeOption = None,
    steps: StepsOption = 8,
    grad_ready_markers: GradReadyMarkersOption = False,
    force: ForceOption = False,
    old_ranks: RanksAlias = None,
) -> None:
    """Capture PyTorch-profiler traces of a demo job on CPU processes, ready for `timeline analyze`.

    It runs a job and writes its traces, not a result to print: no --ranks, --iterations, --json
    or --markdown ('timeline analyze' reads the traces). The number of processes is --world-size
    (-n), as in 'timeline whatif'; --ranks selects ranks in the commands that read traces.
    Exit codes: 0 traces written; 2 bad arguments, --out already holds a run, or torch missing; 3 a bug
    in timeline; 130 interrupted.
    """
    from timeline.capture import DemoSettings, run_demo

    if old_ranks is not None:
        fail(
            f"--ranks {old_ranks}: the number of processes is now --world-size {old_ranks} (-n); --ranks "
            "selects ranks in the commands that read traces"
        )
    job = _runnable_job(
        demo, demo_job_name, ranks=ranks, grad_ready_markers=grad_ready_markers, out=out, force=force
    )
    settings = DemoSettings(job=job, ranks=ranks, steps=steps, grad_ready_markers=grad_ready_markers)
    with user_errors():
        result = run_demo(out, settings=settings)
    _echo_written(result, out)


def _runnable_job(
    demo: bool, name: str, *, ranks: int | None, grad_ready_markers: bool, out: Path, force: bool
) -> str:
    """Return the demo job's name once the options, torch and ``out`` allow the run (else exit 2).

    An earlier run's traces and manifest in ``out`` are deleted when ``force``.
    """
    from timeline.capture import MANIFEST_NAME, TorchMissingError, demo_job, require_torch

    if not demo:
        fail(
            "timeline capture runs only the built-in demo job: pass --demo; to capture your own "
            "training loop use timeline.capture.capture (see docs/capturing.md)"
        )
    with user_errors():
        job = demo_job(name)
        job.check(ranks=job.default_ranks if ranks is None else ranks, grad_ready_markers=grad_ready_markers)
    try:
        require_torch()
    except TorchMissingError as exc:
        fail(str(exc))
    if out.exists() and not out.is_dir():
        fail(f"{shown(out)}: exists and is not a directory; choose another --out")
    earlier = sorted(out.glob(_TRACE_GLOB)) + [p for p in [out / MANIFEST_NAME] if p.exists()]
    if earlier and not force:
        fail(
            f"{shown(out)}: already holds a captured run ({shown(earlier[0].name)}); pass --force to "
            "replace it"
        )
    for path in earlier:
        path.unlink()
    return job.name


def _echo_written(result: DemoResult, out: Path) -> None:
    """Print the traces written, their sizes, rank 0's median step time and what to run next."""
    from timeline.capture import MANIFEST_NAME

    total = sum(p.stat().st_size for p in result.files)
    typer.echo(f"wrote {len(result.files)} traces ({total / 1e3:.0f} kB) and {MANIFEST_NAME} to {shown(out)}")
    for path in result.files:
        typer.echo(f"  {shown(path.name)}  {path.stat().st_size / 1e3:.0f} kB")
    if result.step_times_s:
        times = sorted(result.step_times_s)
        typer.echo(f"median step time on rank 0: {times[len(times) // 2] * 1e3:.1f} ms")
    typer.echo(f"next: timeline analyze {shown(out)}")
