"""Many ranks, large traces: per-rank tasks on local processes or a Ray cluster, Parquet datasets.

- :func:`analyze_files`: the overlap analysis of traces computed rank by rank on an
  :class:`Executor` (:class:`LocalExecutor`, :class:`RayExecutor`), combined from small per-rank
  results; the same figures as :func:`timeline.load` + :func:`timeline.compute_overlap`.
- :func:`graph_files`: the what-if dependency graph of traces, built rank by rank from small
  per-rank parts; the same graph as :func:`timeline.whatif.graph.trace_graph` of the loaded trace.
- :func:`write_dataset`, :func:`scan_dataset`: Parquet datasets partitioned by rank
  (``timeline convert --partition-by-rank``), written and read rank by rank.

See ``docs/scaling.md``.
"""

from timeline.lazy import attach_stub

__getattr__, __dir__, __all__ = attach_stub(__name__, __file__)
