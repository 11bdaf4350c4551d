"""Is communication the bottleneck of your distributed training job? timeline answers.

Load PyTorch profiler (Kineto) traces and Horovod timelines into one polars frame, and measure the
communication hidden under compute and the communication exposed (stretching the iteration), per
rank, per iteration and per collective.

The documented surface (``docs/architecture.md``):

- reading: :func:`load` (every event in memory, a :class:`Trace`), :func:`analyze` (in memory or
  rank by rank, as :mod:`timeline.policy` decides: a :class:`Run`, every fact of the run computed
  once), :class:`Inputs`, :class:`RunOptions`;
- analyses: :func:`compute_overlap` (:class:`Overlap`), :func:`match_collectives`;
- results, versioned data: :func:`build_summary` (a typed ``Summary``: attributes, its JSON the
  ``--json`` layout), :func:`build_collectives_report`, :func:`build_whatif_report`;
- PyTorch Flight Recorder dumps: :func:`load_dumps` (a :class:`Dumps`), :func:`build_flight_report`
  (why the job stopped: verdict, findings, each group's progress per rank; a typed
  :class:`~timeline.results.flight_recorder.FlightReport`);
- classification: :class:`ClassificationRules`;
- errors: :class:`TimelineError` and its subclasses.

Names are imported when first used, so ``import timeline`` costs nothing until then.

>>> import timeline  # doctest: +SKIP
>>> trace = timeline.load("sample_traces/ddp_gloo")  # doctest: +SKIP
>>> overlap = timeline.compute_overlap(trace.events)  # doctest: +SKIP
>>> run = timeline.analyze(["sample_traces/ddp_gloo"])  # doctest: +SKIP
>>> summary = timeline.build_summary(run)  # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from timeline.errors import (
    BudgetError,
    ManifestError,
    RankError,
    TimelineError,
    TraceContentError,
    TraceFormatError,
    UsageError,
)
from timeline.lazy import lazy_names

if TYPE_CHECKING:
    from timeline.analysis.collectives import match_collectives
    from timeline.analysis.overlap import Overlap, compute_overlap
    from timeline.dumps import Dumps, load_dumps
    from timeline.importers.rules import ClassificationRules
    from timeline.results.collectives import build_collectives_report
    from timeline.results.flight_recorder import build_flight_report
    from timeline.results.summary import build_summary
    from timeline.results.whatif import build_whatif_report
    from timeline.run import Inputs, Run, RunOptions, analyze
    from timeline.trace import Trace, load

__all__ = [
    "BudgetError",
    "ClassificationRules",
    "Dumps",
    "Inputs",
    "ManifestError",
    "Overlap",
    "RankError",
    "Run",
    "RunOptions",
    "TimelineError",
    "Trace",
    "TraceContentError",
    "TraceFormatError",
    "UsageError",
    "analyze",
    "build_collectives_report",
    "build_flight_report",
    "build_summary",
    "build_whatif_report",
    "compute_overlap",
    "load",
    "load_dumps",
    "match_collectives",
]
__version__ = "0.1.0"

_LAZY = {
    "ClassificationRules": "timeline.importers.rules",
    "Dumps": "timeline.dumps",
    "Inputs": "timeline.run",
    "Overlap": "timeline.analysis.overlap",
    "Run": "timeline.run",
    "RunOptions": "timeline.run",
    "Trace": "timeline.trace",
    "analyze": "timeline.run",
    "build_collectives_report": "timeline.results.collectives",
    "build_flight_report": "timeline.results.flight_recorder",
    "build_summary": "timeline.results.summary",
    "build_whatif_report": "timeline.results.whatif",
    "compute_overlap": "timeline.analysis.overlap",
    "load": "timeline.trace",
    "load_dumps": "timeline.dumps",
    "match_collectives": "timeline.analysis.collectives",
}


__getattr__, __dir__ = lazy_names("timeline", _LAZY, globals())
