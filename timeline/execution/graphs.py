"""The what-if dependency graph of traces, built rank by rank.

Takes trace files (one per rank, or a Parquet dataset partitioned by rank) and gives the
:class:`~timeline.whatif.graph.TraceGraph` that :func:`~timeline.whatif.graph.trace_graph` builds
from ``load(paths)``, while no process holds more than one unit's events: each task loads one unit
and reduces it at once to its :class:`~timeline.whatif.graph.GraphParts` (windows, compute
intervals, collectives with their ready times, gradient signals: a few percent of the events), and
the driver combines the parts (:func:`~timeline.whatif.graph.graph_from_parts`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import polars as pl

from timeline.analysis.selection import restrict_events
from timeline.execution.reduce import UnitReduction, default_executor, load_unit, local_unit, run_units
from timeline.executors import Executor
from timeline.importers.result import ImportOptions
from timeline.inputs import PathsLike, Unit, plan_inputs, unit_claims
from timeline.selection import Selection
from timeline.whatif.graph import (
    DEFAULT_RESUME_TOLERANCE_NS,
    GraphParts,
    TraceGraph,
    graph_from_parts,
    graph_parts,
)

__all__ = ["GraphAnalysis", "GraphReduction", "graph_files", "graph_unit"]


@dataclass(frozen=True, kw_only=True)
class GraphReduction(UnitReduction):
    """What a what-if task returns for one unit: its graph parts, never its events.

    Attributes
    ----------
    parts
        :func:`~timeline.whatif.graph.graph_parts` of its events.
    """

    parts: GraphParts


@dataclass(frozen=True)
class GraphAnalysis:
    """The graph parts of every rank of a run, with its file table and load warnings.

    Attributes
    ----------
    parts
        One :class:`~timeline.whatif.graph.GraphParts` per unit, in the order of the inputs.
    files
        Equal to ``load(paths).files``.
    warnings
        Equal to ``load(paths).warnings``.
    """

    parts: tuple[GraphParts, ...]
    files: pl.DataFrame
    warnings: tuple[str, ...]
    clock_note: str | None = None
    """Equal to ``load(paths).clock_note``: when set, no process group is told by timing across ranks."""

    def graph(
        self,
        *,
        link_gbps: float | None = None,
        resume_tolerance_ns: int = DEFAULT_RESUME_TOLERANCE_NS,
        overrides: Mapping[str, str] | None = None,
    ) -> TraceGraph:
        """Return the run's graph: equal to ``trace_graph(load(paths), ...)``.

        ``overrides``: description → dimension label (``--dimension``).

        Raises
        ------
        TraceContentError
            No rank with compute events (a Horovod timeline alone).
        """
        return graph_from_parts(
            self.parts,
            files=self.files,
            link_gbps=link_gbps,
            resume_tolerance_ns=resume_tolerance_ns,
            comparable=self.clock_note is None,
            overrides=overrides,
        )


def graph_unit(unit: Unit) -> GraphReduction:
    """Load one unit (every event, as ``load`` keeps them) and reduce it to its graph parts (a task).

    Raises
    ------
    TimelineError
        Bad input, as :func:`timeline.trace.load` raises it.
    """
    trace = load_unit(unit)
    claims, horovod = unit_claims(unit.paths, trace.files)
    events = trace.events
    event_ranks = tuple(events.get_column("rank").unique().drop_nulls().sort().to_list())
    # --ranks, --iterations: the events of the selected windows, as the in-memory run's graph reads
    events, windows = restrict_events(events, unit.selection)
    return GraphReduction(
        paths=unit.paths,
        files=trace.files,
        warnings=trace.warnings,
        claims=claims,
        horovod=horovod,
        event_ranks=event_ranks,
        clocks=trace.clocks,
        groups=trace.groups,
        parts=graph_parts(events, windows=windows, groups=trace.groups),
    )


class _Parts:
    """The graph parts of every unit, in unit order (a merged unit's in place of its first)."""

    def __init__(self) -> None:
        self.parts: list[GraphParts | None] = []

    def add(self, result: GraphReduction) -> None:
        self.parts.append(result.parts)

    def regroup(self, group: Sequence[int], ranks: frozenset[int], result: GraphReduction) -> None:
        first, *rest = group
        self.parts[first] = result.parts
        for i in rest:
            self.parts[i] = None


def graph_files(
    paths: PathsLike,
    *,
    executor: Executor | None = None,
    options: ImportOptions | None = None,
    rank: int | None = None,
    rank_regex: str | None = None,
    selection: Selection | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> GraphAnalysis:
    """Reduce traces rank by rank to the parts of their what-if graph, on an executor.

    Parameters
    ----------
    paths
        Files, directories, glob patterns, or Parquet datasets written by ``timeline convert``.
    executor
        Where the per-unit tasks run; default: a :class:`~timeline.execution.LocalExecutor` over
        all cores (in-process for less than 24 MiB of input).
    options
        Classification rules and whether to keep ``python_function`` events.
    rank, rank_regex
        As for :func:`timeline.trace.load`.
    selection
        Keep only these ranks and iterations (:mod:`timeline.selection`), in each task.
    progress
        Called as ``progress(label, done, total)`` after each task.

    Returns
    -------
    GraphAnalysis
        ``.graph(...)`` equals ``trace_graph(load(paths), ...)``; ``files`` and ``warnings`` equal
        the loaded trace's.

    Raises
    ------
    TimelineError
        Bad input, as :func:`timeline.trace.load` raises it.

    Examples
    --------
    >>> from timeline.execution import graph_files  # doctest: +SKIP
    >>> graph = graph_files("run.d").graph(link_gbps=100)  # doctest: +SKIP
    """
    units = plan_inputs(paths, options=options, rank=rank, rank_regex=rank_regex)
    executor = executor if executor is not None else default_executor(units)
    chosen = selection if selection is not None else Selection()
    units = [replace(u, communication=False, selection=chosen) for u in local_unit(units, executor)]
    parts = _Parts()
    collected = run_units(units, graph_unit, parts, executor, progress)
    return GraphAnalysis(
        parts=tuple(p for p in parts.parts if p is not None),
        files=collected.files_frame(),
        warnings=collected.all_warnings(),
        clock_note=collected.clock_note,
    )
