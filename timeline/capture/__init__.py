"""Capture PyTorch-profiler traces that timeline can analyse, from inside a training loop.

The one part of timeline that uses torch, and it imports torch only when capturing starts:
importing this package works without torch (install it with ``pip install 'timeline-comm[torch]'``).

- :func:`capture` / :class:`Capture`: a scheduled profiler that writes
  ``rank<N>.<first>-<last>.pt.trace.json.gz`` per rank and a ``manifest.json``;
- gradient-ready markers (``grad_ready_markers=True``): ``timeline.grad_ready:<param>:<bytes>``
  ranges, parsed by :func:`parse_grad_ready_name`;
- :func:`horovod_timeline_env`: the Horovod timeline settings for the same run folder;
- :func:`run_demo` (:class:`DemoSettings`): the small CPU jobs behind ``timeline capture --demo``
  (:data:`DEMO_JOBS`: ``ddp``, and on a device mesh ``fsdp2_tp``, ``pipeline``, ``expert``;
  :func:`demo_job`).

See ``docs/capturing.md``.
"""

from __future__ import annotations

from timeline.capture._torch import TORCH_MISSING_MESSAGE, TorchMissingError, import_torch, require_torch
from timeline.capture.demo import DemoResult, DemoSettings, run_demo
from timeline.capture.horovod import HOROVOD_TIMELINE_NAME, horovod_timeline_env
from timeline.capture.jobs import DEMO_JOBS, DemoJob, demo_job
from timeline.capture.manifest import MANIFEST_NAME, Manifest, RankEntry, read_manifest, trace_file_name
from timeline.capture.markers import GRAD_READY_PREFIX, format_grad_ready_name, parse_grad_ready_name
from timeline.capture.session import Capture, capture

__all__ = [
    "DEMO_JOBS",
    "GRAD_READY_PREFIX",
    "HOROVOD_TIMELINE_NAME",
    "MANIFEST_NAME",
    "TORCH_MISSING_MESSAGE",
    "Capture",
    "DemoJob",
    "DemoResult",
    "DemoSettings",
    "Manifest",
    "RankEntry",
    "TorchMissingError",
    "capture",
    "demo_job",
    "format_grad_ready_name",
    "horovod_timeline_env",
    "import_torch",
    "parse_grad_ready_name",
    "read_manifest",
    "require_torch",
    "run_demo",
    "trace_file_name",
]
