"""The dependency graph of a traced run: compute, gradients, collectives and who waits for whom.

Takes the canonical events frame (every rank, every iteration) and gives a :class:`TraceGraph`,
the input of the replay (:mod:`timeline.whatif.engine`). Per rank, as measured:

- **compute**: the rank's compute timeline, the union of its compute intervals as the overlap
  analysis defines them (``docs/metrics.md``: kernels other than communication on GPU ranks; CPU
  operators on the threads that run no collective, minus explicit waits, on CPU-only ranks).
- **collectives** (:class:`CommOp`): every communication event, with its bytes (nccl-tests'
  convention), its *channel* (the CUDA stream, or the CPU thread, it runs on: one at a time, in
  order), and its *ready* time: when the rank asked for it. On CPU-only ranks that is the start
  of the ``c10d::`` call that launched it (the k-th launch of the rank is its k-th collective); on
  GPU ranks, the moment the compute stream reached the launch: the last end of the compute kernels
  launched before the collective's own ``cudaLaunchKernel`` (by correlation id). A collective never
  counts as ready after it started. Its *launch delay* is what separates its start from
  ``max(ready, end of the previous collective on its channel)``.
- **logical collectives** (:class:`Instance`): the k-th collective of a process group on every rank
  (as :func:`~timeline.analysis.collectives.collective_instances` numbers them). When it is
  synchronising (all-reduce, all-gather, reduce-scatter, all-to-all, barrier), seen on several ranks,
  and ended on every rank after the last one started, its *transfer* is
  ``min end − max start`` and each rank's *lag* is ``end − min end``: no rank finishes before the
  last one arrives plus the transfer. Otherwise each rank's collective stands alone
  (transfer = its duration), which is all one rank's trace can say.
- **gradients** (:class:`Gradient`): when each gradient became ready and its bytes, from the
  ``timeline.grad_ready:<param>:<bytes>`` markers (:mod:`timeline.importers.markers`, written by
  :mod:`timeline.capture.markers`), else from ``torch::autograd::AccumulateGrad`` ops (the bytes
  of the collective that carried them shared equally), else the gradient collectives themselves.
  Each gradient is carried by the first gradient collective (all-reduce or reduce-scatter launched
  after backward began) ready after it.
- **waits** (:class:`WaitPoint`): where compute resumed because a collective finished. A gap in the
  compute timeline ``[g0, g1)`` waits for the collectives launched before ``g0`` that ended inside
  the gap when compute resumed within ``resume_tolerance_ns`` of the end, or (CPU-only ranks) when the
  gap holds an explicit wait on a collective, or began at most :data:`CPU_SYNC_TOLERANCE_NS` before
  the collective's launch and ended at most that long after its end (a synchronous collective).
  And the **update** (the compute after the last gradient collective of an iteration: DDP's
  finalisation, the optimizer step) waits for *every* gradient collective of the iteration, even
  those that were hidden.

Every collective and gap keeps its measured numbers, so replaying the graph under the measured
conditions reproduces the trace (``docs/whatif.md``).

The graph can be built **rank by rank**, so that a run of a thousand ranks never has every rank's
events in memory: :func:`graph_parts` reduces the events of one rank (or a few) to small frames
(:class:`GraphParts`: windows, compute, waits, collectives with their ready times, gradient
signals), which depend on those ranks only; :func:`combine_graph_parts` (or
:func:`graph_from_parts`, given the file table) takes the parts of every rank and does the steps
across ranks: window ids, world size, gradient source, matching, gradients and waits. The result
equals :func:`build_graph` (:func:`trace_graph`) of all the events, which is just that with one part.
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import msgspec
import polars as pl

from timeline.analysis.collective_costs import exclusive_work
from timeline.analysis.collectives import ALL_COMMUNICATION_GROUP, SYNCHRONISING_COLLECTIVES
from timeline.analysis.group_inference import UNEVEN_COLLECTIVES
from timeline.analysis.groups import attribute_groups, group_instances, shared_clocks
from timeline.analysis.intervals import formula_intervals, union_intervals
from timeline.analysis.iterations import _assign_iterations, activity_sets, rank_modes
from timeline.errors import RankError, TraceContentError
from timeline.importers.manifest import MANIFEST_NAME, read_manifest
from timeline.importers.markers import GRAD_READY_PREFIX, parse_grad_ready_name
from timeline.schema import ITERATIONS_SCHEMA, PROCESS_GROUPS_SCHEMA
from timeline.trace import Trace

__all__ = [
    "CPU_SYNC_TOLERANCE_NS",
    "DEFAULT_RESUME_TOLERANCE_NS",
    "GRADIENT_COLLECTIVES",
    "CommOp",
    "Gradient",
    "GradientSource",
    "GraphParts",
    "Instance",
    "TraceGraph",
    "WaitPoint",
    "assemble_graph",
    "build_graph",
    "combine_graph_parts",
    "exclusive_work",
    "graph_from_parts",
    "graph_parts",
    "trace_graph",
]

DEFAULT_RESUME_TOLERANCE_NS = 50_000
"""Compute that resumes within 50 µs of a collective's end, after a gap, waited for it."""

CPU_SYNC_TOLERANCE_NS = 1_000_000
"""CPU-only ranks: a gap that began at most 1 ms before the rank launched a collective, held its end,
and ended at most 1 ms after it, waited for it: a synchronous collective whose wait the trace does
not show as an op (FSDP2's all-gathers on gloo). On a CPU rank the Python between the calls takes
that long (hundreds of µs on a loaded machine); a collective launched during the backward pass never
ends in the short gap after its launch."""

GRADIENT_COLLECTIVES = frozenset({"all_reduce", "reduce_scatter"})
"""The collectives that synchronise gradients (DDP, Horovod: all-reduce; FSDP, ZeRO: reduce-scatter)."""

GradientSource = Literal["markers", "accumulate_grad", "collectives", "horovod", "none"]
"""Where the gradient-ready times came from (``horovod``: the readiness ticks of a Horovod timeline)."""

_SETS = ("comm", "compute", "wait", "other")
_ACCUMULATE_GRAD = "torch::autograd::AccumulateGrad"
_GATHERING = ("all_gather", "gather")


class CommOp(msgspec.Struct, frozen=True):
    """One collective on one rank, as measured."""

    op_id: int
    """Its index in :attr:`TraceGraph.ops`."""
    rank: int
    window_id: int | None
    """The row of :attr:`TraceGraph.windows` (the iteration) that holds its start."""
    channel: str
    """``stream <n>`` or ``thread <tid>``: the stream or thread it ran on."""
    pool: str
    """The queue it waits in: its stream on GPU ranks (one at a time, in order); on CPU-only ranks
    its process group, served by the group's worker threads (gloo runs two by default) in order."""
    collective: str | None
    nbytes: int | None
    """Bytes by nccl-tests' convention (``docs/collectives.md``); None when the trace has none."""
    group_size: int
    """Ranks of its process group (the trace's ``Group size``, else the run's world size)."""
    start_ns: int
    end_ns: int
    ready_ns: int
    """When the rank asked for it (never after ``start_ns``)."""
    launch_delay_ns: int
    """``start − max(ready, free)``, ``free`` the first time a server of its pool was free (≥ 0)."""
    instance: int
    """Its :class:`Instance`."""
    gradient: bool
    """It synchronises gradients (all-reduce or reduce-scatter, launched once backward began)."""
    group: str | None = ALL_COMMUNICATION_GROUP
    """Its process group instance (``pg_name``, with its ranks when the name has several rank sets;
    :func:`~timeline.analysis.groups.attribute_groups`); ``*`` when the trace names and declares no
    group; None when it stays ambiguous (then matched across no rank)."""
    dimension: str | None = None
    """The parallelism dimension of its group (``tp``, ``dp``, ``world`` …); None when unknown."""


class Instance(msgspec.Struct, frozen=True):
    """One logical collective: the same collective on every rank that ran it."""

    instance_id: int
    ops: tuple[int, ...]
    synchronising: bool
    """No rank can finish before the last arrives: ends = last start + transfer + lag."""
    transfer_ns: int
    """``min end − max start`` when synchronising, else the one op's duration."""
    lags_ns: tuple[int, ...]
    """Per op (same order as ``ops``): ``end − min end`` (0 for a lone op)."""
    work_ns: float = 0.0
    """The transfer's length had it had its ranks' links to itself: ``∫ min over its ranks of
    1 / (transfers in progress on the rank) dt`` over the transfer (concurrent collectives of a rank
    share its link equally)."""


class WaitPoint(msgspec.Struct, frozen=True):
    """Compute on a rank that cannot resume before some collectives end."""

    rank: int
    gap_start_ns: int
    """``g0``: the end of the compute before the gap."""
    resume_ns: int
    """``g1``: when compute resumed."""
    deps: tuple[int, ...]
    """The collectives (op ids) it waits for."""
    resume_delay_ns: int | None
    """``g1 − e`` for the last of ``deps`` to end inside the gap (the wait was binding); None if none did."""
    update: bool
    """The update after an iteration's last gradient collective (it waits for all of them)."""


class Gradient(msgspec.Struct, frozen=True):
    """One gradient of one rank's backward pass."""

    rank: int
    window_id: int | None
    ready_ns: int
    """On the compute timeline of the rank."""
    nbytes: int
    op_id: int
    """The measured gradient collective that carried it."""
    name: str
    signal: bool = True
    """Whether a signal (a marker, an ``AccumulateGrad`` op) gave it; False when none was carried by
    its collective, which then stands in for its gradients (``name`` ``collective <op_id>``)."""


@dataclass(frozen=True)
class TraceGraph:
    """The dependency graph of a run: the input of :func:`~timeline.whatif.engine.replay`.

    Attributes
    ----------
    ranks
        The ranks with compute events (Horovod-only ranks are left out).
    modes
        ``gpu`` or ``cpu`` per rank (``docs/metrics.md``).
    windows
        The iteration windows (:data:`timeline.schema.ITERATIONS_SCHEMA` + ``window_id``, the row index).
    compute
        The compute timeline: disjoint sorted busy intervals, columns ``rank``, ``start_ns``, ``end_ns``.
    ops, instances, waits, gradients
        See :class:`CommOp`, :class:`Instance`, :class:`WaitPoint`, :class:`Gradient`.
    gradient_source
        Where gradient-ready times came from.
    world_size
        The run's world size (the largest ``Group size``, else ``distributedInfo.world_size``, else
        the number of ranks).
    link_gbps
        The link the run had, when known (``--link-gbps``, or the capture manifest's ``link_gbps``).
    dimension_links
        ``(dimension, Gbit/s)``: the link the collectives of a dimension ran on, in place of
        ``link_gbps`` (``--link-gbps tp=nvlink4,dp=25``).
    warnings
        Recoverable oddities, one line each.
    notes
        What the graph derived rather than measured, one line each (a Horovod timeline alone:
        :mod:`timeline.whatif.horovod_graph`); empty for profiler traces.
    """

    ranks: tuple[int, ...]
    modes: Mapping[int, str]
    windows: pl.DataFrame
    compute: pl.DataFrame
    ops: tuple[CommOp, ...]
    instances: tuple[Instance, ...]
    waits: tuple[WaitPoint, ...]
    gradients: tuple[Gradient, ...]
    gradient_source: GradientSource
    world_size: int
    link_gbps: float | None = None
    warnings: tuple[str, ...] = field(default=())
    notes: tuple[str, ...] = field(default=())
    dimension_links: tuple[tuple[str, float], ...] = field(default=())

    def link_of(self, dimension: str | None) -> float | None:
        """Return the measured link (Gbit/s) of a collective of this dimension, when known."""
        return dict(self.dimension_links).get(dimension or "", self.link_gbps)

    @property
    def dimensions(self) -> list[str]:
        """The parallelism dimensions of the collectives' process groups (``tp``, ``dp`` …), sorted."""
        return sorted({o.dimension for o in self.ops if o.dimension is not None})

    @property
    def has_iterations(self) -> bool:
        """Whether the windows are ``ProfilerStep`` iterations (not whole traces)."""
        return bool((self.windows.get_column("window") == "profiler_step").any())


class GraphParts(msgspec.Struct, frozen=True, eq=False):
    """What :func:`build_graph` computes within ranks: the input of :func:`combine_graph_parts`.

    Made by :func:`graph_parts` from the events of some ranks (one rank, or a unit of a few), it
    depends on nothing outside them, and is much smaller than the events: a driver can keep the
    parts of a thousand ranks. Every frame is sorted by ``rank`` first; rows of one rank are in the
    order :func:`build_graph` gives them.

    Attributes
    ----------
    modes
        ``rank``, ``mode`` (:func:`~timeline.analysis.iterations.rank_modes`, Horovod ranks included).
    windows
        The iteration windows (:data:`timeline.schema.ITERATIONS_SCHEMA`), without ``window_id``.
    compute
        The compute timeline (``compute & ~wait``): ``rank``, ``start_ns``, ``end_ns``.
    waits
        The union of the explicit waits (CPU-only ranks): ``rank``, ``start_ns``, ``end_ns``.
    comm
        The collectives with their channel, bytes and ready time, before the world size fills
        ``group_size`` and before windows and gradient flags: ``rank``, ``channel``,
        ``collective``, ``group``, ``nbytes``, ``group_size``, ``start_ns``, ``end_ns``,
        ``ready_ns``.
    markers
        The gradient signals of the ``timeline.grad_ready`` markers: ``rank``, ``param``,
        ``nbytes``, ``ready_ns``.
    accumulate_grad
        The gradient signals of the ``AccumulateGrad`` ops (same columns; ``param`` and ``nbytes``
        null). Which of the two the graph uses is decided over all ranks.
    unmatched_calls
        The CPU-only ranks whose ``c10d::`` calls do not match their collectives one to one.
    groups
        The process groups the traces of its ranks declare (:attr:`timeline.trace.Trace.groups`,
        the rows of its ranks): with the collectives' own group fields, what tells the process group
        instance each collective ran on (:func:`combine_graph_parts`).
    """

    modes: pl.DataFrame
    windows: pl.DataFrame
    compute: pl.DataFrame
    waits: pl.DataFrame
    comm: pl.DataFrame
    markers: pl.DataFrame
    accumulate_grad: pl.DataFrame
    unmatched_calls: tuple[int, ...] = ()
    groups: pl.DataFrame = msgspec.field(default_factory=PROCESS_GROUPS_SCHEMA.to_frame)

    @property
    def ranks(self) -> tuple[int, ...]:
        """The ranks the parts were made from (those with events other than instants), sorted."""
        return tuple(int(r) for r in self.modes.get_column("rank").to_list())


_MODES_SCHEMA = pl.Schema({"rank": pl.Int32(), "mode": pl.String()})
_INTERVALS_SCHEMA = pl.Schema({"rank": pl.Int32(), "start_ns": pl.Int64(), "end_ns": pl.Int64()})
_COMM_SCHEMA = pl.Schema(
    {
        "rank": pl.Int32(),
        "channel": pl.String(),
        "collective": pl.String(),
        "group": pl.String(),
        "nbytes": pl.Int64(),
        "group_size": pl.Int32(),
        "start_ns": pl.Int64(),
        "end_ns": pl.Int64(),
        "ready_ns": pl.Int64(),
        # what the process group attribution reads (timeline.analysis.groups.attribute_groups)
        "name": pl.String(),
        "pid": pl.Int64(),
        "tid": pl.Int64(),
        "device": pl.Int32(),
        "pg_name": pl.String(),
        "pg_desc": pl.String(),
        "pg_ranks": pl.String(),
        "in_bytes": pl.Int64(),
        "out_bytes": pl.Int64(),
        "peer": pl.Int32(),
        "group_peer": pl.Int32(),
    }
)
_ATTRIBUTION_COLUMNS = (
    "name",
    "pid",
    "tid",
    "device",
    "pg_name",
    "pg_desc",
    "pg_ranks",
    "in_bytes",
    "out_bytes",
    "peer",
    "group_peer",
)
_SIGNALS_SCHEMA = pl.Schema(
    {"rank": pl.Int32(), "param": pl.String(), "nbytes": pl.Int64(), "ready_ns": pl.Int64()}
)


def trace_graph(
    trace: Trace,
    *,
    link_gbps: float | None = None,
    resume_tolerance_ns: int = DEFAULT_RESUME_TOLERANCE_NS,
    windows: pl.DataFrame | None = None,
    overrides: Mapping[str, str] | None = None,
) -> TraceGraph:
    """Build the graph of a loaded trace, with its world size and, when recorded, its link.

    The world size comes from ``distributedInfo`` (largest over files) when the collectives carry
    no ``Group size``; the link from ``link_gbps`` or the ``manifest.json`` that ``timeline.capture``
    wrote beside the traces (when every manifest found agrees).

    A Horovod timeline alone (no other trace) gives the graph of
    :func:`timeline.whatif.horovod_graph.horovod_frames`: compute there is an opaque span derived
    from the timeline, and :attr:`TraceGraph.notes` says how.

    ``windows``: the iteration windows of the trace's events when already computed (the overlap
    analysis' ``Overlap.windows``), to save computing them again. ``overrides``: description →
    dimension label (``--dimension mesh_dp_replicate=ddp``).

    Raises
    ------
    TraceContentError
        No rank with compute events, and no Horovod timeline alone either; or a Horovod timeline
        without a single operation.
    """
    if trace.events.height and trace.events.filter(pl.col("source") != "horovod").height == 0:
        from timeline.whatif.horovod_graph import horovod_frames

        frames = horovod_frames(trace)
        return assemble_graph(
            frames.modes,
            windows=frames.windows,
            compute=frames.compute,
            waits_union=_INTERVALS_SCHEMA.to_frame(),
            comm=frames.comm,
            signals=frames.signals,
            source="horovod",
            world_size=frames.world_size,
            link_gbps=link_gbps,
            resume_tolerance_ns=resume_tolerance_ns,
            warnings=[],
            notes=frames.notes,
        )
    return graph_from_parts(
        [graph_parts(trace.events, windows=windows, groups=trace.groups)],
        files=trace.files,
        link_gbps=link_gbps,
        resume_tolerance_ns=resume_tolerance_ns,
        comparable=trace.clock_note is None,
        overrides=overrides,
    )


def graph_from_parts(
    parts: Sequence[GraphParts],
    *,
    files: pl.DataFrame,
    link_gbps: float | None = None,
    resume_tolerance_ns: int = DEFAULT_RESUME_TOLERANCE_NS,
    comparable: bool = True,
    overrides: Mapping[str, str] | None = None,
) -> TraceGraph:
    """Build the graph of a loaded run from its per-rank parts and its file table.

    :func:`trace_graph` without the events: the parts come from :func:`graph_parts` (one per rank,
    or per unit of a few ranks), the world size from ``distributedInfo`` (largest over files) when
    the collectives carry no ``Group size``, the link from ``link_gbps`` or the ``manifest.json``
    that ``timeline.capture`` wrote beside the files (when every manifest found agrees).

    Parameters
    ----------
    parts
        The :func:`graph_parts` of the run's ranks, each rank in one part.
    files
        The run's file table (:data:`timeline.schema.FILES_SCHEMA`, ``Trace.files``).
    link_gbps
        The measured link's one-direction bandwidth; default: the capture manifests'.
    resume_tolerance_ns
        As for :func:`build_graph`.
    comparable
        False when the traces' clocks cannot be compared (:attr:`timeline.trace.Trace.clock_note`):
        no process group is then told by timing across ranks. Otherwise the ranks of one node
        compare (:func:`~timeline.analysis.groups.shared_clocks` of ``files``).
    overrides
        Description → dimension label (:func:`~timeline.analysis.groups.parse_dimension_overrides`).

    Returns
    -------
    TraceGraph
        Equal to ``trace_graph`` of the trace the parts and files were taken from.

    Raises
    ------
    TraceContentError
        No rank with compute events (a Horovod timeline alone).
    RankError
        A rank is in several parts.
    """
    sizes = [size for size in files.get_column("world_size").to_list() if size is not None]
    world = int(max(sizes)) if sizes else None
    link = link_gbps if link_gbps is not None else _manifest_link(files)
    clocks = shared_clocks(files, comparable=comparable)
    return combine_graph_parts(
        parts,
        world_size=world,
        link_gbps=link,
        resume_tolerance_ns=resume_tolerance_ns,
        clocks=clocks,
        overrides=overrides,
    )


def _manifest_link(files: pl.DataFrame) -> float | None:
    """Return the ``link_gbps`` of the capture manifests beside the trace files, when they agree."""
    links: set[float | None] = set()
    folders = {Path(p).parent for p in files.get_column("path").to_list() if p is not None}
    for folder in folders:
        path = folder / MANIFEST_NAME
        if not path.is_file():
            continue
        try:
            manifest = read_manifest(path)
        except Exception:  # a broken manifest only loses the hint
            continue
        if manifest is not None:
            links.add(manifest.link_gbps)
    return links.pop() if len(links) == 1 else None


def build_graph(
    events: pl.DataFrame,
    *,
    world_size: int | None = None,
    link_gbps: float | None = None,
    resume_tolerance_ns: int = DEFAULT_RESUME_TOLERANCE_NS,
) -> TraceGraph:
    """Build the dependency graph of a run from its events frame.

    The same as ``combine_graph_parts([graph_parts(events)], ...)``: to build it rank by rank, call
    :func:`graph_parts` on each rank's events and :func:`combine_graph_parts` on the parts.

    Parameters
    ----------
    events
        The canonical events frame (``Trace.events``).
    world_size
        The run's world size when the collectives carry no ``Group size``; default: the number of
        ranks traced.
    link_gbps
        The measured link's one-direction bandwidth, when known.
    resume_tolerance_ns
        How soon after a collective's end compute must resume, after a gap, to count as waiting for
        it (CPU-only ranks also count gaps that hold an explicit wait).

    Returns
    -------
    TraceGraph

    Raises
    ------
    TraceContentError
        No rank with compute events.
    """
    return combine_graph_parts(
        [graph_parts(events)],
        world_size=world_size,
        link_gbps=link_gbps,
        resume_tolerance_ns=resume_tolerance_ns,
    )


def graph_parts(
    events: pl.DataFrame, *, windows: pl.DataFrame | None = None, groups: pl.DataFrame | None = None
) -> GraphParts:
    """Reduce the events of some ranks to what the graph needs of them, rank by rank.

    Every rank's share of the result depends on that rank's events only (in their order), so the
    parts of disjoint sets of ranks combine (:func:`combine_graph_parts`) into the graph of all
    their events: ``combine_graph_parts([graph_parts(e1), graph_parts(e2)])`` equals
    ``build_graph(pl.concat([e1, e2]))``. A run of a thousand ranks thus never needs every rank's
    events in memory at once.

    Parameters
    ----------
    events
        The canonical events frame of one rank or more (``Trace.events``, or its rows of some ranks).
    windows
        Their iteration windows (:func:`~timeline.analysis.iterations.assign_iterations`, or the
        overlap analysis' ``windows``) when already computed; default: computed here.
    groups
        The process groups the traces declare (:attr:`timeline.trace.Trace.groups`; the rows of
        these ranks are kept). Without them only the groups the collectives name are known.

    Returns
    -------
    GraphParts
        A row per window, compute interval, wait, collective and gradient signal of each rank:
        a few percent of the events' size.
    """
    modes_frame = _conform(rank_modes(events), _MODES_SCHEMA)
    modes = _modes_with_compute(modes_frame)
    if not modes:  # Horovod timelines only (or nothing): no compute to build from
        return _empty_parts(modes_frame)
    kept = list(modes)
    kept_modes = (
        modes_frame
        if len(kept) == modes_frame.height
        else pl.DataFrame({"rank": kept, "mode": list(modes.values())}, schema=_MODES_SCHEMA)
    )
    events = _of_ranks(events, kept)
    declared = (
        PROCESS_GROUPS_SCHEMA.to_frame() if groups is None else groups.filter(pl.col("rank").is_in(kept))
    )
    sets = activity_sets(events, kept_modes)
    windows = _part_windows(events, kept_modes, kept=kept, sets=sets, windows=windows)
    compute, waits_union = _compute_and_waits(sets, modes)
    launches = _launches(events)
    progress = _progress_table(events, sets, launches)
    comm, unmatched = _comm_frame(events, sets, kept_modes, progress, launches)
    markers, accumulate_grad = _gradient_signals(events, modes, progress)
    return GraphParts(
        modes=modes_frame,
        windows=_conform(windows, ITERATIONS_SCHEMA),
        compute=_conform(compute, _INTERVALS_SCHEMA),
        waits=_conform(waits_union, _INTERVALS_SCHEMA),
        comm=_conform(comm, _COMM_SCHEMA),
        markers=_conform(markers, _SIGNALS_SCHEMA),
        accumulate_grad=_conform(accumulate_grad, _SIGNALS_SCHEMA),
        unmatched_calls=unmatched,
        groups=_conform(declared, PROCESS_GROUPS_SCHEMA),
    )


def _modes_with_compute(modes_frame: pl.DataFrame) -> dict[int, str]:
    """Return the mode of each rank of ``modes_frame`` that has compute events (not a Horovod timeline's)."""
    return {
        rank: mode
        for rank, mode in zip(
            modes_frame.get_column("rank").to_list(), modes_frame.get_column("mode").to_list(), strict=True
        )
        if mode != "horovod"
    }


def _empty_parts(modes_frame: pl.DataFrame) -> GraphParts:
    """Return the parts of ranks without compute events: their modes, nothing else."""
    return GraphParts(
        modes=modes_frame,
        windows=ITERATIONS_SCHEMA.to_frame(),
        compute=_INTERVALS_SCHEMA.to_frame(),
        waits=_INTERVALS_SCHEMA.to_frame(),
        comm=_COMM_SCHEMA.to_frame(),
        markers=_SIGNALS_SCHEMA.to_frame(),
        accumulate_grad=_SIGNALS_SCHEMA.to_frame(),
    )


def _part_windows(
    events: pl.DataFrame,
    kept_modes: pl.DataFrame,
    *,
    kept: list[int],
    sets: pl.DataFrame,
    windows: pl.DataFrame | None,
) -> pl.DataFrame:
    """Return the iteration windows of the ``kept`` ranks, by rank and start (computed when not given)."""
    # By default assign_iterations(events), with the modes (those of the kept ranks) and sets above.
    # It sorts by rank and start only: a total order makes tied windows rank-local.
    return _collect(
        (
            _assign_iterations(events, kept_modes, sets).lazy()
            if windows is None
            else windows.lazy().filter(pl.col("rank").is_in(kept))
        ).sort("rank", "start_ns", "end_ns", "iteration", maintain_order=True)
    )


def _of_ranks(events: pl.DataFrame, ranks: list[int]) -> pl.DataFrame:
    """Return the events of ``ranks``: ``events`` itself when they hold no other rank (and no null)."""
    column = events.get_column("rank")
    if column.null_count() == 0:
        low, high = column.min(), column.max()
        if low is None or (
            isinstance(low, int)
            and isinstance(high, int)
            and high - low < len(ranks)
            and set(range(low, high + 1)) <= set(ranks)
        ):
            return events
    return events.filter(pl.col("rank").is_in(ranks))


def _compute_and_waits(sets: pl.DataFrame, modes: Mapping[int, str]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Return the compute timeline (``compute & ~wait``) and the union of the waits, by rank and start.

    ``sets``: the :func:`~timeline.analysis.iterations.activity_sets` of the ranks of ``modes``.
    """
    # waits are CPU-only ranks' (activity_sets): without them, compute & ~wait is the union of compute
    waits = sets.filter(pl.col("set") == "wait") if "cpu" in modes.values() else None
    if waits is None or waits.height == 0:
        compute = union_intervals(sets.filter(pl.col("set") == "compute"), by=["rank"])
        return _by_rank_and_start(compute), _INTERVALS_SCHEMA.to_frame()
    compute = formula_intervals(sets, by=["rank"], sets=_SETS, formula=lambda s: s["compute"] & ~s["wait"])
    return _by_rank_and_start(compute), _by_rank_and_start(union_intervals(waits, by=["rank"]))


def _collect(query: pl.LazyFrame) -> pl.DataFrame:
    """Return the result of ``query``, run as polars runs its eager operations (the in-memory engine).

    One query for a chain of operations: on small frames polars' fixed cost per query outweighs the work.
    """
    return query.collect(engine="in-memory")


def _by_rank_and_start(intervals: pl.DataFrame) -> pl.DataFrame:
    """Return per-rank sorted disjoint intervals sorted by ``rank`` and ``start_ns`` (as is if they are)."""
    if intervals.get_column("rank").is_sorted():  # each rank's own are sorted already
        return intervals
    return intervals.sort("rank", "start_ns")


def _conform(frame: pl.DataFrame, schema: pl.Schema) -> pl.DataFrame:
    """Select the columns of ``schema``, in its order and with its dtypes (no-op when they match)."""
    if frame.schema == schema:
        return frame
    return frame.select(pl.col(name).cast(dtype) for name, dtype in schema.items())


def combine_graph_parts(
    parts: Sequence[GraphParts],
    *,
    world_size: int | None = None,
    link_gbps: float | None = None,
    resume_tolerance_ns: int = DEFAULT_RESUME_TOLERANCE_NS,
    clocks: pl.DataFrame | None = None,
    overrides: Mapping[str, str] | None = None,
) -> TraceGraph:
    """Build the dependency graph of a run from the :func:`graph_parts` of its ranks.

    The steps across ranks: the windows' global ids, the world size, the iteration of each
    collective and gradient signal, the gradient source (markers when any rank has them, else
    ``AccumulateGrad`` ops when any rank has them), the matching of collectives across ranks, the
    gradients and the waits. The parts may come in any order and hold any split of the ranks.

    Parameters
    ----------
    parts
        One :class:`GraphParts` per rank or unit of ranks; each rank in one part only.
    world_size, link_gbps, resume_tolerance_ns
        As for :func:`build_graph`.
    clocks
        Which ranks' times compare (:func:`~timeline.analysis.groups.shared_clocks`): the process
        group of a collective the traces leave ambiguous is then also told by its timing (without
        it, only by what each rank's trace says).
    overrides
        Description → dimension label (:func:`~timeline.analysis.groups.parse_dimension_overrides`).

    Returns
    -------
    TraceGraph
        Equal to ``build_graph`` of the concatenated events of the parts.

    Raises
    ------
    TraceContentError
        No rank with compute events.
    RankError
        A rank is in several parts.
    """
    warnings: list[str] = []
    modes = _replayable_modes(parts, warnings)
    windows = _global_windows(parts)
    comm = _attributed_comm(parts, clocks=clocks, windows=windows, overrides=overrides, warnings=warnings)
    signals, source = _choose_gradient_signals(parts)
    return assemble_graph(
        modes,
        windows=windows,
        compute=_concat_by_rank([p.compute for p in parts], _INTERVALS_SCHEMA),
        waits_union=_concat_by_rank([p.waits for p in parts], _INTERVALS_SCHEMA),
        comm=comm,
        signals=signals,
        source=source,
        world_size=world_size,
        link_gbps=link_gbps,
        resume_tolerance_ns=resume_tolerance_ns,
        warnings=warnings,
    )


def _global_windows(parts: Sequence[GraphParts]) -> pl.DataFrame:
    """Return the windows of every part, by rank, with their global ``window_id`` (the row index)."""
    windows = _concat_by_rank([p.windows for p in parts], ITERATIONS_SCHEMA)
    return pl.Series("window_id", range(windows.height), dtype=pl.Int64).to_frame().hstack(windows)


def _attributed_comm(
    parts: Sequence[GraphParts],
    *,
    clocks: pl.DataFrame | None,
    windows: pl.DataFrame,
    overrides: Mapping[str, str] | None,
    warnings: list[str],
) -> pl.DataFrame:
    """Return the collectives of every part with their process groups (:func:`_attribute_collectives`)."""
    comm = _concat_by_rank([p.comm for p in parts], _COMM_SCHEMA)
    unmatched = sorted({r for p in parts for r in p.unmatched_calls})
    if unmatched:
        warnings.append(
            f"rank(s) {unmatched}: as many c10d:: calls as collectives "
            "expected on CPU-only ranks, found otherwise; their collectives count as ready when they started"
        )
    declared = _concat_by_rank([p.groups for p in parts], PROCESS_GROUPS_SCHEMA)
    return _attribute_collectives(
        comm, declared, clocks=clocks, windows=windows, overrides=overrides, warnings=warnings
    )


def assemble_graph(
    modes: Mapping[int, str],
    *,
    windows: pl.DataFrame,
    compute: pl.DataFrame,
    waits_union: pl.DataFrame,
    comm: pl.DataFrame,
    signals: pl.DataFrame,
    source: GradientSource,
    world_size: int | None,
    link_gbps: float | None,
    resume_tolerance_ns: int,
    warnings: list[str],
    notes: Sequence[str] = (),
) -> TraceGraph:
    """Do the steps across ranks on frames of every rank: what every road to a :class:`TraceGraph` ends in.

    Parameters
    ----------
    modes
        The mode of each rank the replay uses.
    windows
        The iteration windows (:data:`timeline.schema.ITERATIONS_SCHEMA` + ``window_id``).
    compute, waits_union
        The compute timeline and the union of explicit waits: ``rank``, ``start_ns``, ``end_ns``.
    comm
        The collectives (the columns of :attr:`GraphParts.comm`).
    signals
        The gradient signals: ``rank``, ``param``, ``nbytes``, ``ready_ns``.
    source
        Where the signals came from.
    world_size, link_gbps, resume_tolerance_ns
        As for :func:`build_graph`.
    warnings
        The warnings so far (this adds to them).
    notes
        What the graph derived rather than measured (:attr:`TraceGraph.notes`).

    Returns
    -------
    TraceGraph
    """
    world = _infer_world_size(comm, world_size, len(modes))
    ops, instances, gradients = _ops_and_gradients(comm, signals, windows, world, source, warnings)
    return TraceGraph(
        ranks=tuple(sorted(modes)),
        modes=modes,
        windows=windows,
        compute=compute,
        ops=ops,
        instances=instances,
        waits=_wait_points(ops, gradients, compute, waits_union, windows, modes, resume_tolerance_ns),
        gradients=gradients,
        gradient_source=source if gradients else "none",
        world_size=world,
        link_gbps=link_gbps,
        warnings=tuple(warnings),
        notes=tuple(notes),
    )


def _ops_and_gradients(
    comm: pl.DataFrame,
    signals: pl.DataFrame,
    windows: pl.DataFrame,
    world: int,
    source: GradientSource,
    warnings: list[str],
) -> tuple[tuple[CommOp, ...], tuple[Instance, ...], tuple[Gradient, ...]]:
    """Return the collectives, the logical collectives and the gradients, each located in its window."""
    signals = _collect(_locate(signals.lazy(), windows, at="ready_ns"))
    located = _located_comm(comm, windows, world=world)
    ops, instances = _ops_and_instances(_flag_gradients(located, signals), warnings)
    return ops, instances, _gradients(ops, signals, source, warnings)


def _located_comm(comm: pl.DataFrame, windows: pl.DataFrame, *, world: int) -> pl.LazyFrame:
    """Return the collectives with their window, group size (default: the world) and group columns."""
    # the columns a graph without process groups lacks (a Horovod timeline's), as _numbered reads them
    defaults = {"dimension": pl.lit(None, dtype=pl.String), "_lone": pl.lit(False), "_sub": pl.lit("")}
    return _locate(
        comm.lazy().with_columns(
            pl.col("group_size").fill_null(world),
            *(default.alias(name) for name, default in defaults.items() if name not in comm.columns),
        ),
        windows,
        at="start_ns",
    )


def _replayable_modes(parts: Sequence[GraphParts], warnings: list[str]) -> dict[int, str]:
    """Check each rank is in one part only, and give the mode of every rank the replay can use.

    Horovod timelines have no compute events: their ranks are left out, with a warning.

    Raises
    ------
    RankError
        A rank is in several parts.
    TraceContentError
        No rank with compute events.
    """
    rows = [
        row
        for p in parts
        for row in zip(
            p.modes.get_column("rank").to_list(), p.modes.get_column("mode").to_list(), strict=True
        )
    ]
    if len(parts) > 1:  # as _concat_by_rank orders them
        rows.sort(key=lambda row: _rank_order(row[0]))
    counts = Counter(rank for rank, _mode in rows)
    repeated = sorted((rank for rank, count in counts.items() if count > 1), key=_rank_order)
    if repeated:
        msg = f"rank(s) {repeated}: in several graph parts; build each rank's part once (graph_parts)"
        raise RankError(msg)
    horovod = [rank for rank, mode in rows if mode == "horovod"]
    if horovod:
        warnings.append(
            f"rank(s) {horovod}: a Horovod timeline has no compute events; left out of the what-if replay"
        )
    modes = {rank: mode for rank, mode in rows if mode != "horovod"}
    if not modes:
        msg = (
            "no PyTorch profiler trace: the what-if replay needs compute events, and a Horovod timeline "
            "has none; they are derived from a Horovod timeline loaded alone in memory (trace_graph), "
            "not from rank-by-rank parts (--executor, --ray-address, or a timeline of 128 MiB or more): "
            "run without --executor and --ray-address, or capture the framework's trace too "
            "(timeline.capture)"
        )
        raise TraceContentError(msg)
    return modes


def _rank_order(rank: int | None) -> tuple[bool, int]:
    """Return the sort key of a rank: polars' order (null first)."""
    return (rank is not None, rank if rank is not None else 0)


def _infer_world_size(comm: pl.DataFrame, world_size: int | None, n_ranks: int) -> int:
    """Take the world size from the largest process group, at least ``world_size`` when given.

    Without group sizes, ``world_size`` when given, else the number of ranks.
    """
    sizes = comm.get_column("group_size")
    known = sizes.len() > sizes.null_count()
    world = int(sizes.max()) if known else (world_size or n_ranks)  # type: ignore[arg-type]
    if world_size is not None:
        world = max(world, world_size) if known else world_size
    return world


def _choose_gradient_signals(parts: Sequence[GraphParts]) -> tuple[pl.DataFrame, GradientSource]:
    """Pick the gradient signals: the markers when any rank has some, else the AccumulateGrad ops.

    With neither, no signals and the source ``"collectives"`` (the gradient collectives stand in).
    """
    signals = _concat_by_rank([p.markers for p in parts], _SIGNALS_SCHEMA)
    source: GradientSource = "markers"
    if signals.height == 0:
        signals = _concat_by_rank([p.accumulate_grad for p in parts], _SIGNALS_SCHEMA)
        source = "accumulate_grad" if signals.height else "collectives"
    return signals, source


def _concat_by_rank(frames: Sequence[pl.DataFrame], schema: pl.Schema) -> pl.DataFrame:
    """Concatenate per-part frames into one sorted by rank, each rank's rows in its part's order.

    The parts' frames are sorted by rank, so one part alone comes back as it is: what
    :func:`build_graph` computes on all ranks at once.
    """
    if len(frames) == 1:
        return frames[0]
    if not frames:
        return schema.to_frame()
    return pl.concat(frames, how="vertical").sort("rank", maintain_order=True)


def _attribute_collectives(
    comm: pl.DataFrame,
    declared: pl.DataFrame,
    *,
    clocks: pl.DataFrame | None,
    windows: pl.DataFrame,
    overrides: Mapping[str, str] | None,
    warnings: list[str],
) -> pl.DataFrame:
    """Give each collective its process group instance, dimension and group size; flag the unmatched.

    The group is :func:`~timeline.analysis.groups.attribute_groups`' (the instance: ``pg_name``
    and rank set), ``*`` when nothing names or declares a group (every collective of a rank is one
    sequence, as before groups were known). ``group_size`` is the event's, else its group's size.
    ``_lone``: matched across no rank, because its group is ambiguous (``group`` null), or because
    on its rank a collective of the same kind and size whose group is ambiguous, and may be this
    one's, started before it (its place in its group is then uncertain). ``_sub``: what the order
    within a group counts (``""``: every collective of the group; in a group an ambiguous collective
    may be on, only those of the same kind and size, whose order doubt leaves certain).
    """
    view = _collect(
        comm.lazy()
        .drop("group")
        .with_row_index("_op")
        .with_columns(
            kind=pl.lit("communication"), source=pl.lit("kineto"), pg_name=pl.col("pg_name").cast(pl.String)
        )
    )
    attributed = attribute_groups(
        view, declared, overrides=overrides, clocks=clocks, windows=windows, warnings=warnings
    )
    sizes = (
        group_instances(view, declared, overrides=overrides)
        .lazy()
        .select("group", _group_size="size")
        .unique("group", keep="first")
    )
    ambiguous = attributed.get_column("group").null_count() > 0
    joined = attributed.lazy().sort("_op").join(sizes, on="group", how="left", maintain_order="left")
    group_size = pl.coalesce(pl.col("group_size"), pl.col("_group_size"))
    if not ambiguous:  # no ambiguous group: no order in doubt
        return _collect(
            joined.with_columns(group_size=group_size, _lone=pl.lit(False), _sub=pl.lit("")).drop(
                "_op", "_group_size", "kind", "source"
            )
        )
    return _with_order_doubt(joined, group_size=group_size)


def _with_order_doubt(joined: pl.LazyFrame, *, group_size: pl.Expr) -> pl.DataFrame:
    """Return the attributed collectives with ``group_size``, ``_lone`` and ``_sub``, some groups ambiguous.

    ``joined``: the collectives by ``_op`` with their attributed group and the group's ``_group_size``.
    """
    uneven = pl.col("collective").is_in(UNEVEN_COLLECTIVES).fill_null(True)
    sub = (
        pl.when(uneven)
        .then(pl.col("collective").fill_null("?"))
        .otherwise(
            pl.format("{}:{}", pl.col("collective"), pl.col("in_bytes").cast(pl.String).fill_null("?"))
        )
    )
    attributed = _collect(joined.with_columns(_sub=sub))
    doubt = _collect(
        attributed.lazy()
        .filter(pl.col("group").is_null())
        .select("rank", "_sub", _doubt_ns="start_ns", group=pl.col("candidates"))
        .explode("group")
        .filter(pl.col("group").is_not_null())
    )
    unordered = _collect(
        attributed.lazy()
        .filter(pl.col("group").is_not_null())
        .select("_op", "rank", "group", "_sub", "start_ns")
        .join(doubt.lazy(), on=["rank", "group", "_sub"], how="inner")
        .filter(pl.col("_doubt_ns") <= pl.col("start_ns"))
        .select("_op")
    )
    doubted = set(doubt.get_column("group").to_list())
    return _collect(
        attributed.lazy()
        .with_columns(
            group_size=group_size,
            _lone=pl.col("group").is_null() | pl.col("_op").is_in(unordered.get_column("_op").to_list()),
            _sub=pl.when(pl.col("group").is_in(sorted(doubted))).then(pl.col("_sub")).otherwise(pl.lit("")),
        )
        .drop("_op", "_group_size", "kind", "source")
    )


def _launches(events: pl.DataFrame) -> pl.DataFrame:
    """Return each rank's CPU-side launch of each correlation id: ``rank``, ``correlation``, ``launch_ns``."""
    return _collect(
        events.lazy()
        .filter((pl.col("kind") == "runtime") & pl.col("correlation").is_not_null())
        .select("rank", "correlation", launch_ns="start_ns")
        .unique(["rank", "correlation"], keep="first")
    )


def _progress_table(events: pl.DataFrame, sets: pl.DataFrame, launches: pl.DataFrame) -> pl.DataFrame:
    """How far each GPU rank's compute got by each launch: ``rank``, ``issued_ns``, ``progress_ns``.

    ``progress_ns`` is the last end of the compute kernels issued (launched on the CPU) up to
    ``issued_ns``: a CPU-side moment maps to the compute timeline through it. ``launches``: the
    events' :func:`_launches`.
    """
    details = events.lazy().with_row_index("event").select("event", "correlation", "device")
    kernels = (
        sets.lazy()
        .filter(pl.col("set") == "compute")
        .join(details, on="event", how="left", maintain_order="left")
        .filter(pl.col("device").is_not_null())
    )
    # Stable sorts: of kernels issued at one time, the last (the one join_asof finds) has seen them all.
    return _collect(
        kernels.join(launches.lazy(), on=["rank", "correlation"], how="left", maintain_order="left")
        .with_columns(issued_ns=pl.coalesce("launch_ns", "start_ns"))
        .sort("rank", "issued_ns", maintain_order=True)
        .with_columns(progress_ns=pl.col("end_ns").cum_max().over("rank"))
        .select("rank", "issued_ns", "progress_ns")
        .sort("issued_ns", maintain_order=True)
    )


def _at_progress(points: pl.LazyFrame, progress: pl.DataFrame, *, at: str) -> pl.LazyFrame:
    """Add ``progress_ns`` to the query: the compute progress (GPU ranks) at the CPU time in column ``at``."""
    order = "_order_progress"
    return (
        points.with_row_index(order)
        .sort(at)
        .join_asof(
            progress.lazy(),
            left_on=at,
            right_on="issued_ns",
            by="rank",
            strategy="backward",
            allow_exact_matches=False,
            check_sortedness=False,
        )
        .sort(order)
        .drop(order, "issued_ns")
    )


def _comm_frame(
    events: pl.DataFrame,
    sets: pl.DataFrame,
    modes: pl.DataFrame,
    progress: pl.DataFrame,
    launches: pl.DataFrame,
) -> tuple[pl.DataFrame, tuple[int, ...]]:
    """Return the communication events with their channel, bytes and ready time.

    And the CPU-only ranks whose ``c10d::`` calls and collectives do not match one to one.
    ``launches``: the events' :func:`_launches`.
    """
    details = _comm_details(events)
    gpu = pl.col("mode") == "gpu"
    comm = (
        sets.lazy()
        .filter(pl.col("set") == "comm")
        .join(details, on="event", how="left", maintain_order="left")
        .join(modes.lazy(), on="rank", how="left", maintain_order="left")
        .filter(pl.col("collective").is_null() | (pl.col("collective") != "wait"))
        .sort("rank", "start_ns", "end_ns", maintain_order=True)  # ties in the rank's event order
        .with_columns(
            channel=pl.when(gpu)
            .then(pl.format("stream {}", pl.col("stream")))
            .otherwise(pl.format("thread {}", pl.col("tid"))),
        )
    )
    rank_mode = dict(zip(modes.get_column("rank").to_list(), modes.get_column("mode").to_list(), strict=True))
    comm = _gpu_ready(comm, rank_mode, progress, launches)
    comm, unmatched = _cpu_ready(comm, events, rank_mode)
    ready = pl.min_horizontal(pl.coalesce("gpu_ready", "cpu_ready", "start_ns"), pl.col("start_ns"))
    n = pl.col("group_size").cast(pl.Int64)
    nbytes = (
        pl.when(pl.col("collective").is_in(_GATHERING))
        .then(pl.coalesce(pl.col("out_bytes"), pl.col("in_bytes") * n))
        .otherwise(pl.col("in_bytes"))
    )
    frame = comm.with_columns(ready_ns=ready, nbytes=nbytes).select(
        "rank",
        "channel",
        "collective",
        "group",
        "nbytes",
        "group_size",
        "start_ns",
        "end_ns",
        "ready_ns",
        *_ATTRIBUTION_COLUMNS,
    )
    return _collect(frame), unmatched


def _comm_details(events: pl.DataFrame) -> pl.LazyFrame:
    """Return what the graph reads of each event (``event``: its row), names and groups as strings."""
    return (
        events.lazy()
        .with_row_index("event")
        .select(
            "event",
            "correlation",
            "stream",
            "tid",
            "pid",
            "device",
            "in_bytes",
            "out_bytes",
            "group_size",
            "pg_ranks",
            "peer",
            "group_peer",
            collective=pl.col("collective").cast(pl.String),
            group=pl.coalesce(pl.col("pg_name").cast(pl.String), pl.lit(ALL_COMMUNICATION_GROUP)),
            name=pl.col("name").cast(pl.String),
            pg_name=pl.col("pg_name").cast(pl.String),
            pg_desc=pl.col("pg_desc").cast(pl.String),
        )
    )


def _gpu_ready(
    comm: pl.LazyFrame, modes: Mapping[int, str], progress: pl.DataFrame, launches: pl.DataFrame
) -> pl.LazyFrame:
    """Add ``gpu_ready``: on GPU ranks, when the compute stream reached the collective's launch."""
    gpu = pl.col("mode") == "gpu"
    if "gpu" not in modes.values():
        return comm.with_columns(gpu_ready=pl.lit(None, dtype=pl.Int64))
    comm = comm.join(launches.lazy(), on=["rank", "correlation"], how="left", maintain_order="left")
    comm = _at_progress(
        comm.with_columns(pl.col("launch_ns").fill_null(pl.col("start_ns"))), progress, at="launch_ns"
    )
    return comm.with_columns(gpu_ready=pl.when(gpu).then(pl.col("progress_ns")))


def _cpu_ready(
    comm: pl.LazyFrame, events: pl.DataFrame, modes: Mapping[int, str]
) -> tuple[pl.LazyFrame, tuple[int, ...]]:
    """Add ``cpu_ready``: on CPU-only ranks, the ``c10d::`` call that launched the collective.

    The k-th call of the rank for its k-th collective; none on the ranks whose calls and collectives
    do not match one to one, returned too.
    """
    gpu = pl.col("mode") == "gpu"
    cpu_ranks = [rank for rank, mode in modes.items() if mode == "cpu"]
    if not cpu_ranks:
        return comm.with_columns(cpu_ready=pl.lit(None, dtype=pl.Int64)), ()
    collected = _collect(comm)  # read twice below
    calls = _collect(
        events.lazy()
        .filter(
            pl.col("rank").is_in(cpu_ranks)
            & (pl.col("kind") == "cpu_op")
            & pl.col("name").cast(pl.String).str.starts_with("c10d::")
        )
        .sort("rank", "start_ns")
        .select("rank", call_ns="start_ns")
        .with_columns(_k=pl.int_range(pl.len()).over("rank"))
    )
    counts = _collect(
        collected.lazy()
        .filter(~gpu)
        .group_by("rank")
        .agg(_ops=pl.len())
        .join(calls.lazy().group_by("rank").agg(_calls=pl.len()), on="rank", how="left")
    )
    unmatched = sorted(
        int(rank)
        for rank, ops, n_calls in zip(
            *(counts.get_column(c).to_list() for c in ("rank", "_ops", "_calls")), strict=True
        )
        if n_calls is None or n_calls != ops
    )
    matched = calls.lazy().filter(~pl.col("rank").is_in(unmatched))
    comm = (
        collected.lazy()
        .with_columns(_k=pl.int_range(pl.len()).over("rank"))
        .join(matched, on=["rank", "_k"], how="left", maintain_order="left")
        .with_columns(cpu_ready=pl.when(~gpu).then(pl.col("call_ns")))
    )
    return comm, tuple(unmatched)


def _locate(frame: pl.LazyFrame, windows: pl.DataFrame, *, at: str) -> pl.LazyFrame:
    """Add ``window_id`` to the query: the window of the rank that holds the time in ``at`` (null: none)."""
    order = "_order_locate"
    bounds = windows.lazy().select("rank", "window_id", _w_start="start_ns", _w_end="end_ns").sort("_w_start")
    located = (
        frame.with_row_index(order)
        .sort(at)
        .join_asof(
            bounds, left_on=at, right_on="_w_start", by="rank", strategy="backward", check_sortedness=False
        )
        .with_columns(window_id=pl.when(pl.col(at) < pl.col("_w_end")).then(pl.col("window_id")))
        .sort(order)
    )
    return located.drop(order, "_w_start", "_w_end")


def _gradient_signals(
    events: pl.DataFrame, modes: Mapping[int, str], progress: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Gradient-ready signals of the markers, and of the ``AccumulateGrad`` ops.

    Each: ``rank``, ``param``, ``nbytes`` (both null without markers), ``ready_ns``, sorted by rank
    and ready time (ties in the rank's event order). The graph uses the markers when any rank has
    some, else the ops (:func:`combine_graph_parts`).
    """
    names = pl.col("name").cast(pl.String)
    marker = pl.col("name").str.starts_with(GRAD_READY_PREFIX)
    accumulate = (pl.col("kind") == "cpu_op") & (pl.col("name") == _ACCUMULATE_GRAD)
    # one pass over the events for both (the names are read as text once)
    found = _collect(
        events.lazy()
        .select("rank", "kind", "start_ns", "end_ns", name=names)
        .filter(marker | accumulate)
        .select("rank", "start_ns", "end_ns", "name", _marker=marker)
    )
    is_marker = found.get_column("_marker")
    param: pl.Expr | pl.Series = pl.lit(None, dtype=pl.String)
    nbytes: pl.Expr | pl.Series = pl.lit(None, dtype=pl.Int64)
    n_markers = 0
    if is_marker.any():
        parsed = [
            parse_grad_ready_name(name) if of_marker else None
            for name, of_marker in zip(found.get_column("name").to_list(), is_marker.to_list(), strict=True)
        ]
        n_markers = sum(p is not None for p in parsed)
        param = pl.Series([p[0] if p else None for p in parsed], dtype=pl.String)
        nbytes = pl.Series([p[1] if p else None for p in parsed], dtype=pl.Int64)
    points = (
        found.lazy()
        .with_columns(param=param, nbytes=nbytes)
        .filter(~pl.col("_marker") | pl.col("param").is_not_null())  # markers that parse, and ops
        .select(
            "rank",
            "param",
            "nbytes",
            "_marker",
            cpu_ns=pl.when(pl.col("_marker")).then(pl.col("start_ns")).otherwise(pl.col("end_ns")),
        )
    )
    gpu_ranks = [r for r, m in modes.items() if m == "gpu"]
    ready = (
        pl.when(pl.col("rank").is_in(gpu_ranks))
        .then(pl.coalesce("progress_ns", "cpu_ns"))
        .otherwise("cpu_ns")
    )
    # the markers first, then the ops: each by rank and ready time, ties in the rank's event order
    mapped = _collect(
        _at_progress(points, progress, at="cpu_ns")
        .select("rank", "param", "nbytes", "_marker", ready_ns=ready)
        .sort("_marker", "rank", "ready_ns", descending=[True, False, False], maintain_order=True)
    )[["rank", "param", "nbytes", "ready_ns"]]
    return mapped.slice(0, n_markers), mapped.slice(n_markers)


def _flag_gradients(comm: pl.LazyFrame, signals: pl.DataFrame) -> pl.LazyFrame:
    """Add ``gradient`` to the query: all-reduce/reduce-scatter launched once its window's backward began."""
    first = signals.lazy().group_by("rank", "window_id").agg(_first_signal=pl.col("ready_ns").min())
    with_signals = sorted({int(r) for r in signals.get_column("rank").to_list()})
    kind = pl.col("collective").is_in(sorted(GRADIENT_COLLECTIVES)).fill_null(False)
    return (
        comm.join(first, on=["rank", "window_id"], how="left", nulls_equal=True, maintain_order="left")
        .with_columns(
            gradient=kind
            & (
                ~pl.col("rank").is_in(with_signals)
                | (
                    pl.col("_first_signal").is_not_null() & (pl.col("ready_ns") >= pl.col("_first_signal"))
                ).fill_null(False)
            )
        )
        .drop("_first_signal")
    )


def _numbered(comm: pl.LazyFrame) -> pl.LazyFrame:
    """Add to the query each collective's place in its group (``_index``; null: it stands alone) and pool."""
    matched = comm.filter(~pl.col("_lone")).with_columns(
        _index=pl.int_range(pl.len(), dtype=pl.Int64).over("rank", "group", "_sub", order_by="start_ns")
    )
    comm = comm.join(matched.select("op_id", "_index"), on="op_id", how="left", maintain_order="left")
    comm = comm.with_columns(
        pool=pl.when(pl.col("channel").str.starts_with("stream"))
        .then(pl.format("{}/{}", pl.col("rank"), pl.col("channel")))
        .when(pl.col("group").is_null())
        .then(pl.format("{}/ambiguous {}", pl.col("rank"), pl.col("channel")))
        .otherwise(pl.format("{}/group {}", pl.col("rank"), pl.col("group"))),
    )
    return comm


def _ops_and_instances(
    comm: pl.LazyFrame, warnings: list[str]
) -> tuple[tuple[CommOp, ...], tuple[Instance, ...]]:
    """Return the collectives (pooled, matched across ranks, with their link time) and instances."""
    ordered = (
        comm.sort("rank", "start_ns", "end_ns", maintain_order=True)
        .with_row_index("op_id")
        .with_columns(pl.col("op_id").cast(pl.Int64))
    )
    numbered = _collect(_numbered(ordered))  # row i is op i
    col = {name: numbered.get_column(name).to_list() for name in _OP_COLUMNS}
    ranks, starts, ends = col["rank"], col["start_ns"], col["end_ns"]
    found, instance_of = _matched(col, warnings)
    transfers = []
    for k, (ops, _synchronising, transfer, _lags) in enumerate(found):
        begin = max(starts[i] for i in ops)
        transfers.append((k, begin, begin + transfer, sorted({ranks[i] for i in ops})))
    works = exclusive_work(transfers)
    instances = tuple(
        Instance(k, ops, synchronising, transfer, lags, works[k])
        for k, (ops, synchronising, transfer, lags) in enumerate(found)
    )
    # the fields by position, in CommOp's order (thousands of collectives: keywords cost more)
    comm_ops = tuple(
        map(
            CommOp,
            range(numbered.height),
            ranks,
            col["window_id"],
            col["channel"],
            col["pool"],
            col["collective"],
            col["nbytes"],
            map(int, col["group_size"]),
            starts,
            ends,
            col["ready_ns"],
            _pool_delays(col["pool"], col["channel"], starts, ends, col["ready_ns"]),
            instance_of,
            map(bool, col["gradient"]),
            col["group"],
            col["dimension"],
        )
    )
    return comm_ops, instances


_OP_COLUMNS = (
    "rank",
    "window_id",
    "channel",
    "pool",
    "collective",
    "nbytes",
    "group_size",
    "start_ns",
    "end_ns",
    "ready_ns",
    "gradient",
    "group",
    "dimension",
    "_lone",
    "_sub",
    "_index",
)
"""The columns of the numbered collectives that :func:`_ops_and_instances` reads."""


_Match = tuple[tuple[int, ...], bool, int, tuple[int, ...]]
"""A logical collective as :func:`_matched` finds it: its ops, synchronising, transfer, lags."""


def _matched(col: Mapping[str, list[Any]], warnings: list[str]) -> tuple[list[_Match], list[int]]:
    """Match the numbered collectives (the columns of :data:`_OP_COLUMNS`) across ranks.

    Returns the logical collectives (each collective of a group that does not synchronise stands
    alone) and, per collective, the index of its own.
    """
    starts, ends, collectives = col["start_ns"], col["end_ns"], col["collective"]
    by_key: dict[tuple[object, ...], list[int]] = defaultdict(list)
    for i, (lone, group, sub, index) in enumerate(
        zip(col["_lone"], col["group"], col["_sub"], col["_index"], strict=True)
    ):
        by_key[("lone", i) if lone else (group, sub, index)].append(i)
    instance_of: list[int] = [0] * len(starts)
    found: list[_Match] = []
    inconsistent = 0
    for members in by_key.values():
        kinds = {collectives[i] for i in members}
        latest_start = max(starts[i] for i in members)
        first_end = min(ends[i] for i in members)
        if len(members) > 1 and len(kinds) > 1:
            inconsistent += 1
        if (
            len(members) > 1
            and len(kinds) == 1
            and next(iter(kinds)) in SYNCHRONISING_COLLECTIVES
            and first_end >= latest_start
        ):
            for i in members:
                instance_of[i] = len(found)
            found.append(
                (tuple(members), True, first_end - latest_start, tuple(ends[i] - first_end for i in members))
            )
            continue
        for i in members:
            instance_of[i] = len(found)
            found.append(((i,), False, ends[i] - starts[i], (0,)))
    if inconsistent:
        warnings.append(
            f"{inconsistent} collective(s) differ in kind across ranks when matched by order; "
            "replayed on each rank alone"
        )
    return found, instance_of


def _pool_delays(
    pools: Sequence[object],
    channels: Sequence[object],
    starts: Sequence[int],
    ends: Sequence[int],
    ready: Sequence[int],
) -> list[int]:
    """Each collective's launch delay: ``start − max(ready, first time a server of its pool was free)``.

    The collectives by index (op id), with their pool, channel, start, end and ready time. A pool's
    servers are the distinct channels its collectives ran on; they serve the collectives in order
    of start, each taking the first server free.
    """
    members_of: dict[object, list[int]] = defaultdict(list)
    for i, pool in enumerate(pools):
        members_of[pool].append(i)
    delays = [0] * len(starts)
    for members in members_of.values():
        members.sort(key=starts.__getitem__)  # stable: ties by op id
        servers = len({channels[i] for i in members})
        if servers == 1:  # one server (a stream, a thread): free when the previous one ended
            free: int | None = None
            for i in members:
                start, at = starts[i], ready[i]
                delays[i] = start - (at if free is None else max(at, min(free, start)))
                free = ends[i]
            continue
        busy: list[int] = []
        for i in members:
            start, at = starts[i], ready[i]
            free = min(busy) if len(busy) >= servers else None
            delays[i] = start - (at if free is None else max(at, min(free, start)))
            if len(busy) >= servers:
                busy.remove(min(busy))
            busy.append(ends[i])
    return delays


def _gradients(
    ops: tuple[CommOp, ...], signals: pl.DataFrame, source: GradientSource, warnings: list[str]
) -> tuple[Gradient, ...]:
    """Assign each gradient signal to a gradient collective of its rank and window ready after it.

    The first one ready at or after the signal that its bytes have not filled yet
    (:func:`_carrier_index`), else the first ready after it: a job that all-reduces each gradient
    alone after backward (every signal before the first collective) gives each collective its own
    gradient, not every gradient to the first and a gradient of its own bytes to each other.
    """
    carriers = _gradient_carriers(ops)
    readies = {key: [o.ready_ns for o in group] for key, group in carriers.items()}
    room = _carrier_room(carriers, signals)
    assigned: dict[int, list[tuple[int, object, object]]] = defaultdict(list)
    dropped = 0
    for rank, window_id, ready, nbytes, param in zip(
        *(
            signals.get_column(name).to_list()
            for name in ("rank", "window_id", "ready_ns", "nbytes", "param")
        ),
        strict=True,
    ):
        group = carriers.get((rank, window_id), [])
        # the first ready at or after the signal (the group is sorted by ready time first)
        k = bisect.bisect_left(readies[(rank, window_id)], ready) if group else 0
        if k == len(group):
            dropped += 1
            continue
        k = _carrier_index(room.get((rank, window_id)), k, nbytes)
        assigned[group[k].op_id].append((ready, nbytes, param))
    if dropped and source == "markers":
        warnings.append(
            f"{dropped} gradient-ready marker(s) after the last gradient collective of their "
            "iteration; ignored"
        )
    gradients = _carried_gradients(carriers, assigned)
    gradients.sort(key=lambda g: (g.rank, g.ready_ns))
    return tuple(gradients)


def _gradient_carriers(ops: tuple[CommOp, ...]) -> dict[tuple[int, int | None], list[CommOp]]:
    """Return the gradient collectives of each rank and window, by ready time then start."""
    carriers: dict[tuple[int, int | None], list[CommOp]] = defaultdict(list)
    for op in ops:
        if op.gradient:
            carriers[(op.rank, op.window_id)].append(op)
    for group in carriers.values():
        group.sort(key=lambda o: (o.ready_ns, o.start_ns))
    return carriers


def _carried_gradients(
    carriers: Mapping[tuple[int, int | None], list[CommOp]],
    assigned: Mapping[int, list[tuple[int, object, object]]],
) -> list[Gradient]:
    """Return the gradients of each carrier: its assigned signals, else one gradient of its own bytes."""
    gradients: list[Gradient] = []
    for group in carriers.values():
        for op in group:
            signals_of = assigned.get(op.op_id, [])
            if not signals_of:
                gradients.append(
                    Gradient(
                        op.rank,
                        op.window_id,
                        op.ready_ns,
                        op.nbytes or 0,
                        op.op_id,
                        f"collective {op.op_id}",
                        signal=False,
                    )
                )
                continue
            shares = _shares(op.nbytes or 0, len(signals_of))
            for k, (ready, nbytes, param) in enumerate(signals_of):
                gradients.append(
                    Gradient(
                        rank=op.rank,
                        window_id=op.window_id,
                        ready_ns=int(ready),
                        nbytes=int(nbytes) if isinstance(nbytes, int) else shares[k],
                        op_id=op.op_id,
                        name=str(param) if param is not None else f"gradient {k} of {op.op_id}",
                    )
                )
    return gradients


def _carrier_room(
    carriers: Mapping[tuple[int, int | None], list[CommOp]], signals: pl.DataFrame
) -> dict[tuple[int, int | None], list[float]]:
    """Per rank and window whose signals all give their bytes: the bytes each collective can carry.

    Its own bytes, scaled up where the signals' bytes exceed the collectives' (a compressing hook
    sends fewer bytes than the gradients hold). Signals without bytes (``AccumulateGrad`` ops): none.
    """
    totals = (
        signals.group_by("rank", "window_id")
        .agg(nbytes=pl.col("nbytes").sum(), known=pl.col("nbytes").is_not_null().all())
        .filter(pl.col("known"))
    )
    room: dict[tuple[int, int | None], list[float]] = {}
    for rank, window_id, signalled in totals.select("rank", "window_id", "nbytes").iter_rows():
        group = carriers.get((rank, window_id), [])
        carried = sum(op.nbytes or 0 for op in group)
        if not group or carried <= 0:
            continue
        scale = max(1.0, signalled / carried)
        room[(rank, window_id)] = [(op.nbytes or 0) * scale for op in group]
    return room


def _carrier_index(room: list[float] | None, first: int, nbytes: object) -> int:
    """Return the carrier of a signal whose first possible carrier is ``first``; take its bytes from it.

    The first from ``first`` on with bytes left; ``first`` when every one is full, or without
    ``room`` (signals without bytes).
    """
    if room is None or not isinstance(nbytes, int):
        return first
    k = next((j for j in range(first, len(room)) if room[j] > 0), first)
    room[k] -= nbytes
    return k


def _shares(total: int, parts: int) -> list[int]:
    """Split ``total`` bytes into ``parts`` integers that sum to it."""
    base, extra = divmod(total, parts)
    return [base + (1 if k < extra else 0) for k in range(parts)]


def _wait_points(
    ops: tuple[CommOp, ...],
    gradients: tuple[Gradient, ...],
    compute: pl.DataFrame,
    waits_union: pl.DataFrame,
    windows: pl.DataFrame,
    modes: Mapping[int, str],
    tolerance_ns: int,
) -> tuple[WaitPoint, ...]:
    """Find where compute waited for collectives (gaps), and the update of every iteration."""
    blocks = _compute_blocks(compute)
    deps: dict[tuple[int, int], set[int]] = defaultdict(set)
    gap_of: dict[tuple[int, int], int] = {}
    update: set[tuple[int, int]] = set()
    if not ops or blocks.height == 0:
        return ()
    # After the backward pass (the last gradient and gradient collective ready), compute only waits
    # for gradients: a gap there that a gradient collective ends in waits for it, however late it resumed.
    last_gradient: dict[tuple[int, int | None], int] = defaultdict(int)
    for g in gradients:
        last_gradient[(g.rank, g.window_id)] = max(last_gradient[(g.rank, g.window_id)], g.ready_ns)
    by_window: dict[tuple[int, int], list[CommOp]] = defaultdict(list)
    for op in ops:
        if op.gradient and op.window_id is not None:
            by_window[(op.rank, op.window_id)].append(op)
    window_of = {o.op_id: key for key, group in by_window.items() for o in group}
    in_gap = _collectives_ending_in_gaps(
        ops, blocks, waits_union, resumed=_resumed(modes, tolerance_ns), gradient_ops=list(window_of)
    )
    _record_resumed_waits(in_gap, deps, gap_of)
    _record_post_backward_waits(in_gap, window_of, by_window, last_gradient, deps, gap_of)
    if by_window:
        _record_update_waits(blocks, windows, by_window, last_gradient, deps, gap_of, update)
    return _assemble_wait_points(ops, deps, gap_of, update)


def _compute_blocks(compute: pl.DataFrame) -> pl.DataFrame:
    """List each compute block by its start, with the end of the rank's previous block (the gap start)."""
    return _collect(
        compute.lazy()
        .with_columns(gap_start=pl.col("end_ns").shift(1).over("rank", order_by="start_ns"))
        .select("rank", block_start="start_ns", gap_start="gap_start")
        .sort("block_start")
    )


def _collectives_ending_in_gaps(
    ops: tuple[CommOp, ...],
    blocks: pl.DataFrame,
    waits_union: pl.DataFrame,
    *,
    resumed: pl.Expr,
    gradient_ops: list[int],
) -> pl.DataFrame:
    """Pair every collective with the compute block after its end, keeping those that ended in its gap.

    Of the collectives ready before the gap began (``_before``), or at most
    :data:`CPU_SYNC_TOLERANCE_NS` after, and ended inside it (``_waited`` telling whether the gap
    holds an explicit wait on a collective, what CPU-only ranks show), a row per collective that
    compute resumed for (``_resumed``: the expression ``resumed`` of those columns) or that is one
    of ``gradient_ops`` ready before the gap (``_gradient``): ``rank``, ``op_id``, ``block_start``,
    ``gap_start``, ``_resumed``, ``_gradient``.
    """
    ends = pl.DataFrame(
        {
            "op_id": [o.op_id for o in ops],
            "rank": [o.rank for o in ops],
            "end_ns": [o.end_ns for o in ops],
            "ready_ns": [o.ready_ns for o in ops],
        },
        schema={"op_id": pl.Int64, "rank": pl.Int32, "end_ns": pl.Int64, "ready_ns": pl.Int64},
    )
    following = _next_block(ends.lazy(), "end_ns", blocks)
    in_gap = following.filter(
        pl.col("block_start").is_not_null()
        & pl.col("gap_start").is_not_null()
        & (pl.col("gap_start") <= pl.col("end_ns"))
        & (pl.col("ready_ns") - pl.col("gap_start") <= CPU_SYNC_TOLERANCE_NS)
    ).with_columns(_before=pl.col("ready_ns") <= pl.col("gap_start"))
    # CPU-only ranks: does the gap hold an explicit wait on a collective?
    last_wait = waits_union.lazy().select("rank", _w_start="start_ns", _w_end="end_ns").sort("_w_start")
    return _collect(
        in_gap.sort("block_start")
        .join_asof(
            last_wait,
            left_on="block_start",
            right_on="_w_start",
            by="rank",
            strategy="backward",
            allow_exact_matches=False,
            check_sortedness=False,
        )
        .with_columns(_waited=pl.col("_w_end").is_not_null() & (pl.col("_w_end") > pl.col("gap_start")))
        .select(
            "rank",
            "op_id",
            "block_start",
            "gap_start",
            _resumed=resumed,
            _gradient=pl.col("_before") & pl.col("op_id").is_in(gradient_ops),
        )
        .filter(pl.col("_resumed") | pl.col("_gradient"))
    )


def _resumed(modes: Mapping[int, str], tolerance_ns: int) -> pl.Expr:
    """Return whether compute resumed because the collective ended (or explicitly waited for it).

    Within ``tolerance_ns`` of its end, when it was ready before the gap; on CPU-only ranks also when
    the gap holds an explicit wait, or when the collective was synchronous. Over the columns of
    :func:`_collectives_ending_in_gaps` before they are filtered.
    """
    cpu = [r for r, m in modes.items() if m == "cpu"]
    synchronous = pl.col("block_start") - pl.col("end_ns") <= CPU_SYNC_TOLERANCE_NS
    return (pl.col("_before") & (pl.col("block_start") - pl.col("end_ns") <= tolerance_ns)) | (
        pl.col("rank").is_in(cpu) & ((pl.col("_before") & pl.col("_waited")) | synchronous)
    )


def _record_resumed_waits(
    in_gap: pl.DataFrame,
    deps: dict[tuple[int, int], set[int]],
    gap_of: dict[tuple[int, int], int],
) -> None:
    """Record the gaps where compute resumed right after a collective ended (or explicitly waited)."""
    for rank, block_start, gap_start, op_id, resumed in zip(
        *(
            in_gap.get_column(name).to_list()
            for name in ("rank", "block_start", "gap_start", "op_id", "_resumed")
        ),
        strict=True,
    ):
        if not resumed:
            continue
        deps[(rank, block_start)].add(op_id)
        gap_of[(rank, block_start)] = gap_start


def _record_post_backward_waits(
    in_gap: pl.DataFrame,
    window_of: Mapping[int, tuple[int, int]],
    by_window: Mapping[tuple[int, int], list[CommOp]],
    last_gradient: Mapping[tuple[int, int | None], int],
    deps: dict[tuple[int, int], set[int]],
    gap_of: dict[tuple[int, int], int],
) -> None:
    """Record the gaps after the backward pass that a gradient collective of the iteration ended in.

    ``window_of``: the window (``(rank, window_id)``) of each gradient collective (by op id).
    """
    if not window_of:
        return
    backward_end = {
        key: max(max(o.ready_ns for o in group), last_gradient.get(key, 0))
        for key, group in by_window.items()
    }
    for rank, block_start, gap_start, op_id, gradient in zip(
        *(
            in_gap.get_column(name).to_list()
            for name in ("rank", "block_start", "gap_start", "op_id", "_gradient")
        ),
        strict=True,
    ):
        if not gradient or gap_start < backward_end[window_of[op_id]]:
            continue
        deps[(rank, block_start)].add(op_id)
        gap_of[(rank, block_start)] = gap_start


def _record_update_waits(
    blocks: pl.DataFrame,
    windows: pl.DataFrame,
    by_window: Mapping[tuple[int, int], list[CommOp]],
    last_gradient: Mapping[tuple[int, int | None], int],
    deps: dict[tuple[int, int], set[int]],
    gap_of: dict[tuple[int, int], int],
    update: set[tuple[int, int]],
) -> None:
    """Record each iteration's update: the first compute block after its last gradient collective.

    The update waits for every gradient collective of the iteration, hidden or not.
    """
    window_end = dict(
        zip(windows.get_column("window_id").to_list(), windows.get_column("end_ns").to_list(), strict=True)
    )
    wanted = pl.DataFrame(
        {
            "rank": [k[0] for k in by_window],
            "window_id": [k[1] for k in by_window],
            "after_ns": [
                max(
                    max(max(o.end_ns, o.ready_ns) for o in group),
                    last_gradient.get(key, 0),
                )
                for key, group in by_window.items()
            ],
        },
        schema={"rank": pl.Int32, "window_id": pl.Int64, "after_ns": pl.Int64},
    )
    located = _collect(_next_block(wanted.lazy(), "after_ns", blocks))
    for rank, window_id, block_start, gap_start in zip(
        *(located.get_column(name).to_list() for name in ("rank", "window_id", "block_start", "gap_start")),
        strict=True,
    ):
        if block_start is None or gap_start is None or block_start >= window_end[window_id]:
            continue
        key = (rank, block_start)
        deps[key].update(o.op_id for o in by_window[(rank, window_id)])
        gap_of[key] = gap_start
        update.add(key)


def _next_block(times: pl.LazyFrame, column: str, blocks: pl.DataFrame) -> pl.LazyFrame:
    """Return ``times`` (by ``column``) with the first compute block of the rank at or after each time.

    ``blocks``' columns joined (``block_start``, ``gap_start``, …), null where no block follows.
    """
    return times.sort(column).join_asof(
        blocks.lazy(),
        left_on=column,
        right_on="block_start",
        by="rank",
        strategy="forward",
        check_sortedness=False,
    )


def _assemble_wait_points(
    ops: tuple[CommOp, ...],
    deps: Mapping[tuple[int, int], set[int]],
    gap_of: Mapping[tuple[int, int], int],
    update: set[tuple[int, int]],
) -> tuple[WaitPoint, ...]:
    """Turn the recorded gaps into :class:`WaitPoint` s, by rank and resume time."""
    end_of = {o.op_id: o.end_ns for o in ops}
    points: list[WaitPoint] = []
    for key in sorted(deps):
        rank, resume = key
        gap_start = gap_of[key]
        inside = [end_of[i] for i in deps[key] if gap_start <= end_of[i] <= resume]
        points.append(
            WaitPoint(
                rank=rank,
                gap_start_ns=gap_start,
                resume_ns=resume,
                deps=tuple(sorted(deps[key])),
                resume_delay_ns=resume - max(inside) if inside else None,
                update=key in update,
            )
        )
    return tuple(points)
