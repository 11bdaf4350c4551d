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

from __future__ import annotations

from timeline.execution.dataset import (
    Written,
    dataset_parts,
    expand_datasets,
    is_dataset,
    scan_dataset,
    write_dataset,
)
from timeline.execution.executors import Executor, ExecutorName, LocalExecutor, RayExecutor, make_executor
from timeline.execution.graphs import GraphAnalysis, GraphReduction, graph_files, graph_unit
from timeline.execution.reduce import (
    Analysis,
    RankReduction,
    Unit,
    UnitReduction,
    analyze_files,
    communication_events,
    plan_units,
    reduce_unit,
    shift_overlap,
)

__all__ = [
    "Analysis",
    "Executor",
    "ExecutorName",
    "GraphAnalysis",
    "GraphReduction",
    "LocalExecutor",
    "RankReduction",
    "RayExecutor",
    "Unit",
    "UnitReduction",
    "Written",
    "analyze_files",
    "communication_events",
    "dataset_parts",
    "expand_datasets",
    "graph_files",
    "graph_unit",
    "is_dataset",
    "make_executor",
    "plan_units",
    "reduce_unit",
    "scan_dataset",
    "shift_overlap",
    "write_dataset",
]
