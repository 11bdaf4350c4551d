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

from timeline.lazy import attach_stub

__version__ = "0.1.0"

__getattr__, __dir__, __all__ = attach_stub(__name__, __file__)
