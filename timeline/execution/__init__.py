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

from typing import TYPE_CHECKING

from timeline.lazy import lazy_names

if TYPE_CHECKING:
    from timeline.execution.dataset import Written, scan_dataset, write_dataset
    from timeline.execution.graphs import GraphAnalysis, GraphReduction, graph_files, graph_unit
    from timeline.execution.reduce import (
        Analysis,
        RankReduction,
        UnitReduction,
        analyze_files,
        communication_events,
        reduce_unit,
        shift_overlap,
    )
    from timeline.executors import Executor, ExecutorName, LocalExecutor, RayExecutor, make_executor
    from timeline.inputs import Unit, dataset_parts, expand_datasets, is_dataset, plan_units

_LAZY = {
    "Analysis": "timeline.execution.reduce",
    "Executor": "timeline.executors",
    "ExecutorName": "timeline.executors",
    "GraphAnalysis": "timeline.execution.graphs",
    "GraphReduction": "timeline.execution.graphs",
    "LocalExecutor": "timeline.executors",
    "RankReduction": "timeline.execution.reduce",
    "RayExecutor": "timeline.executors",
    "Unit": "timeline.inputs",
    "UnitReduction": "timeline.execution.reduce",
    "Written": "timeline.execution.dataset",
    "analyze_files": "timeline.execution.reduce",
    "communication_events": "timeline.execution.reduce",
    "dataset_parts": "timeline.inputs",
    "expand_datasets": "timeline.inputs",
    "graph_files": "timeline.execution.graphs",
    "graph_unit": "timeline.execution.graphs",
    "is_dataset": "timeline.inputs",
    "make_executor": "timeline.executors",
    "plan_units": "timeline.inputs",
    "reduce_unit": "timeline.execution.reduce",
    "scan_dataset": "timeline.execution.dataset",
    "shift_overlap": "timeline.execution.reduce",
    "write_dataset": "timeline.execution.dataset",
}
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


__getattr__, __dir__ = lazy_names("timeline.execution", _LAZY, globals())
