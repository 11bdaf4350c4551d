"""Is communication the bottleneck of your distributed training job? timeline answers.

Load PyTorch profiler (Kineto) traces and Horovod timelines into one polars frame, and measure the
communication hidden under compute and the communication exposed (stretching the iteration), per
rank, per iteration and per collective.

>>> import timeline  # doctest: +SKIP
>>> trace = timeline.load("sample_traces/ddp_gloo")  # doctest: +SKIP
>>> overlap = timeline.compute_overlap(trace.events)  # doctest: +SKIP
"""

from __future__ import annotations

from timeline.analysis.overlap import Overlap, compute_overlap
from timeline.errors import TimelineError
from timeline.importers.rules import ClassificationRules
from timeline.trace import Trace, load

__all__ = ["ClassificationRules", "Overlap", "TimelineError", "Trace", "compute_overlap", "load"]
__version__ = "0.1.0"
