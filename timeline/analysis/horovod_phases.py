"""Horovod timelines: per-tensor phases, fused batches, negotiation wait, and the profiler trace beside.

Takes the canonical events frame holding one Horovod timeline (see ``docs/horovod.md`` for how its
records become rows) and gives:

- per tensor (:func:`compute_tensor_phases`): the summed duration of each phase (negotiation,
  ``WAIT_FOR_*``, ``QUEUE``, memcpy into and out of the fusion buffer, the wire, the rest);
- per fused batch (:func:`compute_fused_batches`): Horovod fuses tensors into one buffer and then
  writes the same activity spans on every fused tensor's pid (identical since v0.20.1, a few µs
  apart before), so operations whose first wire spans match (name, and start and end within a few
  µs) are one batch; its bytes are the sum of its tensors' bytes, its wire time the union of its
  wire spans, and its bandwidth follows nccl-tests' convention (``algbw = bytes / wire``,
  ``busbw = algbw × factor(world size)``);
- per rank (:func:`compute_negotiation_wait`): from the readiness ticks inside each negotiation,
  how long each rank, once ready, waited for the last rank, and how much waiting each rank caused;
- for the whole timeline (:func:`analyze_horovod`): wire time as a union over fused tensors (never
  the sum over pids), and what a timeline alone cannot tell.

With the PyTorch profiler trace of the writer rank loaded beside the timeline (both on the wall
clock: Horovod ≥ 0.20.1 writes epoch µs), :func:`attribute_horovod_phases` sets every Horovod phase
against that rank's compute, so exposed vs hidden communication applies to Horovod jobs, and
:func:`horovod_wire_sets` gives the wire phases the overlap analysis (``analyze``, budgets, the
report) counts as that rank's communication (``docs/horovod.md``). Every figure is defined in
``docs/collectives.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import polars as pl

from timeline.analysis.collectives import bandwidth_columns, bus_factor_expr
from timeline.analysis.intervals import (
    Formula,
    clip_to_windows,
    covered_within,
    formula_intervals,
    measure,
    union_intervals,
)
from timeline.analysis.iterations import activity_sets, assign_iterations, rank_modes, with_iterations
from timeline.analysis.schemas import (
    HOROVOD_BATCHES_SCHEMA,
    HOROVOD_ITERATIONS_SCHEMA,
    HOROVOD_NEGOTIATION_SCHEMA,
    HOROVOD_PHASES_SCHEMA,
    HOROVOD_TENSORS_SCHEMA,
    HOROVOD_TOTALS_SCHEMA,
)
from timeline.errors import TraceContentError
from timeline.schema import validate

if TYPE_CHECKING:
    from timeline.trace import Trace

__all__ = [
    "FUSION_END_TOLERANCE_NS",
    "FUSION_START_TOLERANCE_NS",
    "HorovodAnalysis",
    "HorovodAttribution",
    "analyze_horovod",
    "attribute_horovod_phases",
    "compute_fused_batches",
    "compute_negotiation_wait",
    "compute_tensor_phases",
    "continued_wire_phases",
    "framework_advice",
    "horovod_framework",
    "horovod_limitations",
    "horovod_wire_sets",
    "horovod_world_size",
]


@dataclass(frozen=True)
class HorovodAnalysis:
    """What a Horovod timeline alone tells.

    Attributes
    ----------
    tensors
        Per tensor, its phases (:data:`~timeline.analysis.schemas.HOROVOD_TENSORS_SCHEMA`).
    batches
        Per fused batch, bytes and bandwidth (:data:`~timeline.analysis.schemas.HOROVOD_BATCHES_SCHEMA`).
    negotiation
        Per rank, negotiation wait (:data:`~timeline.analysis.schemas.HOROVOD_NEGOTIATION_SCHEMA`).
    totals
        One row for the timeline (:data:`~timeline.analysis.schemas.HOROVOD_TOTALS_SCHEMA`).
    limitations
        What the timeline cannot tell, and what would (one sentence each).
    """

    tensors: pl.DataFrame
    batches: pl.DataFrame
    negotiation: pl.DataFrame
    totals: pl.DataFrame
    limitations: tuple[str, ...]


@dataclass(frozen=True)
class HorovodAttribution:
    """Horovod's phases set against the compute of the rank that wrote the timeline.

    Attributes
    ----------
    phases
        One row per Horovod span (:data:`~timeline.analysis.schemas.HOROVOD_PHASES_SCHEMA`).
    iterations
        One row per iteration of the writer rank
        (:data:`~timeline.analysis.schemas.HOROVOD_ITERATIONS_SCHEMA`).
    writer_rank
        The rank whose profiler trace the timeline was set against.
    offset_ns
        The shift applied to the timeline's times (``horovod − offset``).
    warnings
        Oddities (e.g. the two traces do not overlap in time).
    """

    phases: pl.DataFrame
    iterations: pl.DataFrame
    writer_rank: int
    offset_ns: int
    warnings: tuple[str, ...] = ()


def _horovod(events: pl.DataFrame) -> pl.DataFrame:
    return events.filter(pl.col("source") == "horovod")


def _require_horovod(events: pl.DataFrame) -> pl.DataFrame:
    spans = _horovod(events)
    if spans.height == 0:
        msg = "no Horovod timeline among the inputs; give the file written with HOROVOD_TIMELINE=…"
        raise TraceContentError(msg)
    return spans


def horovod_world_size(events: pl.DataFrame) -> int | None:
    """Return one more than the highest rank in the readiness ticks, or None without ticks."""
    highest = _ticks(_horovod(events)).select(pl.col("rank").max()).item()
    return None if highest is None else int(highest) + 1


def horovod_wire_sets(events: pl.DataFrame, modes: pl.DataFrame) -> tuple[pl.DataFrame, tuple[str, ...]]:
    """Return the Horovod wire phases of ranks that have a profiler trace, as ``comm`` intervals.

    A Horovod timeline beside the PyTorch profiler trace of the rank that wrote it (both on the
    wall clock: Horovod ≥ 0.20.1 writes epoch µs, the profiler ``baseTimeNanoseconds``) gives that
    rank communication its profiler trace lacks (Horovod's gloo and MPI transfers run on its own
    background thread, outside the profiler). Its wire phases (``kind`` communication: the
    ``NCCL_*``/``MPI_*``/``GLOO_*`` spans) join the rank's ``comm`` set, so the overlap analysis
    measures them against the rank's compute. Fused tensors repeat the same spans: the analysis
    takes the union, so each counts once. A timeline whose spans do not overlap the rank's profiler
    trace in time (another run, or a clock other than the wall clock) is left out, with a warning.

    Parameters
    ----------
    events
        The canonical events frame.
    modes
        :func:`~timeline.analysis.iterations.rank_modes` of ``events``.

    Returns
    -------
    tuple[pl.DataFrame, tuple[str, ...]]
        The intervals (columns ``event``, ``rank``, ``set``, ``start_ns``, ``end_ns``, as
        :func:`~timeline.analysis.iterations.activity_sets`), and one warning per rank left out.
    """
    indexed = events.select("rank", "source", "kind", "pid", "start_ns", "end_ns").with_row_index("event")
    profiled = modes.filter(pl.col("mode").is_in(["gpu", "cpu"])).select("rank")
    wire = indexed.filter(
        (pl.col("source") == "horovod") & (pl.col("kind") == "communication") & pl.col("pid").is_not_null()
    ).join(profiled, on="rank", how="semi")
    columns = ("event", "rank", "set", "start_ns", "end_ns")
    wire = wire.with_columns(set=pl.lit("comm")).select(columns)
    if wire.height == 0:
        return wire, ()
    profile = (
        indexed.filter((pl.col("source") == "kineto") & (pl.col("kind") != "instant"))
        .group_by("rank")
        .agg(_k_lo=pl.col("start_ns").min(), _k_hi=pl.col("end_ns").max())
    )
    extent = wire.group_by("rank").agg(_h_lo=pl.col("start_ns").min(), _h_hi=pl.col("end_ns").max())
    apart = (
        extent.join(profile, on="rank", how="left")
        .filter(
            pl.col("_k_lo").is_null()
            | (pl.col("_h_hi") <= pl.col("_k_lo"))
            | (pl.col("_k_hi") <= pl.col("_h_lo"))
        )
        .get_column("rank")
        .sort()
    )
    warnings = tuple(
        f"the Horovod timeline and rank {rank}'s profiler trace do not overlap in wall-clock time, so "
        f"its wire phases were left out of rank {rank}'s exposed and hidden communication: load the "
        "timeline and the profiler trace of one run, recorded with Horovod ≥ 0.20.1 (wall-clock times)"
        for rank in apart.to_list()
    )
    return wire.filter(~pl.col("rank").is_in(apart.implode())), warnings


def _ticks(horovod: pl.DataFrame) -> pl.DataFrame:
    """Return the readiness ticks: instants named by a rank number, inside a tensor's negotiation."""
    return horovod.filter(
        (pl.col("kind") == "instant")
        & pl.col("pid").is_not_null()
        & pl.col("rank").is_not_null()
        & pl.col("name").cast(pl.String).str.contains(r"^\d+$")
    )


def compute_tensor_phases(events: pl.DataFrame) -> pl.DataFrame:
    """Return, per Horovod tensor, the summed duration of each of its phases.

    Phases are summed per tensor over all its operations: ``negotiation_ns`` (``NEGOTIATE_*``),
    ``wait_ns`` (``WAIT_FOR_DATA``, ``WAIT_FOR_OTHER_TENSOR_DATA``), ``queue_ns`` (``QUEUE``),
    ``memcpy_in_ns`` (``MEMCPY_IN_*``), ``memcpy_out_ns`` (``MEMCPY_OUT_*``,
    ``COPY_ALLGATHER_OUTPUT``), ``wire_ns`` (the wire phases), ``other_ns`` (``INIT_*`` and the
    rest), ``operation_ns`` (the operation spans that hold the phases). The depth-1 phases of one
    operation follow one another, so their sum is their union.

    Parameters
    ----------
    events
        The canonical events frame holding a Horovod timeline.

    Returns
    -------
    pl.DataFrame
        :data:`~timeline.analysis.schemas.HOROVOD_TENSORS_SCHEMA`, sorted by ``pid``.

    Raises
    ------
    TraceContentError
        If the events hold no Horovod timeline.
    """
    spans = _require_horovod(events).filter((pl.col("kind") != "instant") & pl.col("pid").is_not_null())
    is_op = pl.col("kind") == "annotation"
    per_tensor = (
        spans.with_columns(_phase=_phase_column())
        .group_by("pid")
        .agg(
            pl.col("tensor").cast(pl.String).drop_nulls().first(),
            pl.col("collective").cast(pl.String).drop_nulls().first(),
            is_op.sum().cast(pl.Int64).alias("operations"),
            pl.col("in_bytes").filter(is_op).max().alias("bytes"),
            *[pl.col("dur_ns").filter(pl.col("_phase") == p).sum().alias(p) for p in _PHASE_COLUMNS],
        )
        .sort("pid")
    )
    return validate(per_tensor, HOROVOD_TENSORS_SCHEMA, what="horovod tensors")


_PHASE_COLUMNS = (
    *("negotiation_ns", "wait_ns", "queue_ns", "memcpy_in_ns", "memcpy_out_ns"),
    *("wire_ns", "other_ns", "operation_ns"),
)
"""The phases of :func:`compute_tensor_phases`, in the order of its columns."""


def _phase_column() -> pl.Expr:
    """Return the phase column a Horovod span's duration is summed into (:data:`_PHASE_COLUMNS`)."""
    kind = pl.col("kind")
    return (
        pl.when(kind == "negotiation")
        .then(pl.lit("negotiation_ns"))
        .when(kind == "wait")
        .then(pl.lit("wait_ns"))
        .when(kind == "queue")
        .then(pl.lit("queue_ns"))
        .when((kind == "memcpy") & pl.col("name").cast(pl.String).str.contains("_IN_"))
        .then(pl.lit("memcpy_in_ns"))
        .when(kind == "memcpy")
        .then(pl.lit("memcpy_out_ns"))
        .when(kind == "communication")
        .then(pl.lit("wire_ns"))
        .when(kind == "annotation")
        .then(pl.lit("operation_ns"))
        .otherwise(pl.lit("other_ns"))
    )


def _wire_operations(horovod: pl.DataFrame) -> pl.DataFrame:
    """Return the wire spans, each with the operation (pid, operation start) that holds it.

    A wire span outside any closed operation (its operation was left open by a killed job) is
    its own operation.
    """
    ops = (
        horovod.filter((pl.col("kind") == "annotation") & pl.col("pid").is_not_null())
        .select("pid", _op_start="start_ns", _op_end="end_ns")
        .sort("_op_start")
    )
    wire = (
        horovod.filter((pl.col("kind") == "communication") & pl.col("pid").is_not_null())
        .select(
            "pid",
            "start_ns",
            "end_ns",
            "in_bytes",
            name=pl.col("name").cast(pl.String),
            collective=pl.col("collective").cast(pl.String),
        )
        .sort("start_ns")
    )
    located = wire.join_asof(
        ops, left_on="start_ns", right_on="_op_start", by="pid", strategy="backward", check_sortedness=False
    )
    inside = pl.col("_op_start").is_not_null() & (pl.col("end_ns") <= pl.col("_op_end"))
    return located.with_columns(
        op=pl.when(inside).then(pl.col("_op_start")).otherwise(pl.col("start_ns"))
    ).drop("_op_start", "_op_end")


def continued_wire_phases(events: pl.DataFrame) -> pl.DataFrame:
    """Return the wire spans that continue an operation an earlier wire span of it began.

    One tensor's operation may cross the wire in several phases: a hierarchical all-reduce is
    ``NCCL_REDUCESCATTER``, ``MPI_ALLREDUCE`` and ``NCCL_ALLGATHER`` inside one ``ALLREDUCE``. Its
    first wire span is the call; the later ones, returned here, are not calls of their own. Fused
    tensors repeat the same spans, so each span is listed once.

    Parameters
    ----------
    events
        The canonical events frame (no Horovod timeline: an empty frame).

    Returns
    -------
    pl.DataFrame
        Columns ``name`` (String), ``start_ns``, ``end_ns`` (Int64), one row per distinct span.
    """
    horovod = _horovod(events)
    if horovod.height == 0:
        return pl.DataFrame(schema={"name": pl.String(), "start_ns": pl.Int64(), "end_ns": pl.Int64()})
    wire = _wire_operations(horovod)
    first = pl.col("start_ns") == pl.col("start_ns").min().over("pid", "op")
    return wire.filter(~first).select("name", "start_ns", "end_ns").unique().sort("start_ns", "name")


FUSION_START_TOLERANCE_NS = 20_000
"""How far apart the first wire spans of two fused tensors may start (older writers time each tensor)."""
FUSION_END_TOLERANCE_NS = 5_000
"""How far apart the first wire spans of two fused tensors may end."""


def compute_fused_batches(
    events: pl.DataFrame,
    *,
    world_size: int | None = None,
    link_gbps: float | None = None,
    start_tolerance_ns: int = FUSION_START_TOLERANCE_NS,
    end_tolerance_ns: int = FUSION_END_TOLERANCE_NS,
) -> pl.DataFrame:
    """Return one row per fused batch: its tensors, bytes, wire time and achieved bandwidth.

    Horovod writes a fused response's activity spans on every tensor's pid: identical since
    v0.20.1, a few µs apart before (each tensor's record timed as it was written). So operations
    are one batch when their first wire spans have the same name and, taken in order of start,
    each starts within ``start_tolerance_ns`` and ends within ``end_tolerance_ns`` of the previous
    one. ``bytes`` = Σ of the tensors' bytes (null when one is unknown); ``wire_ns`` = |∪ of the
    batch's wire spans|; ``algbw = bytes / wire``, ``busbw = algbw × factor(collective,
    world_size)``, ``link_utilisation_ratio = busbw / link``.

    Parameters
    ----------
    events
        The canonical events frame holding a Horovod timeline.
    world_size
        Ranks in the job; default: :func:`horovod_world_size` (from the ticks), else busbw is null.
    link_gbps
        The link's one-direction bandwidth in Gbit/s.
    start_tolerance_ns, end_tolerance_ns
        How far the first wire spans of fused tensors may be apart.

    Returns
    -------
    pl.DataFrame
        :data:`~timeline.analysis.schemas.HOROVOD_BATCHES_SCHEMA`, sorted by start (``batch`` counts
        from 0).

    Raises
    ------
    TraceContentError
        If the events hold no Horovod timeline.
    """
    horovod = _require_horovod(events)
    batches, _ = _batches(
        horovod,
        world_size=world_size if world_size is not None else horovod_world_size(horovod),
        link_gbps=link_gbps,
        start_tolerance_ns=start_tolerance_ns,
        end_tolerance_ns=end_tolerance_ns,
    )
    return batches


def _batches(
    horovod: pl.DataFrame,
    *,
    world_size: int | None,
    link_gbps: float | None,
    start_tolerance_ns: int,
    end_tolerance_ns: int,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Return the batches and the wire spans with their ``batch``."""
    wire = _wire_operations(horovod)
    per_op = wire.group_by("pid", "op").agg(
        _key_name=pl.col("name").sort_by("start_ns").first(),
        _key_start=pl.col("start_ns").min(),
        _key_end=pl.col("end_ns").sort_by("start_ns").first(),
        bytes=pl.col("in_bytes").max(),
        collective=pl.col("collective").drop_nulls().first(),
        wire_phases=pl.col("name").sort_by("start_ns").str.join("+"),
    )
    new_batch = (
        pl.col("_key_name").shift(1).is_null()
        | (pl.col("_key_name") != pl.col("_key_name").shift(1))
        | ((pl.col("_key_start") - pl.col("_key_start").shift(1)) > start_tolerance_ns)
        | ((pl.col("_key_end") - pl.col("_key_end").shift(1)).abs() > end_tolerance_ns)
    )
    per_op = per_op.sort("_key_start", "_key_name", "_key_end", "pid").with_columns(
        batch=(new_batch.cast(pl.Int64).cum_sum() - 1)
    )
    batches = per_op.group_by("batch").agg(
        tensors=pl.col("pid").n_unique().cast(pl.Int64),
        bytes=pl.when(pl.col("bytes").is_null().any()).then(None).otherwise(pl.col("bytes").sum()),
        collective=pl.col("collective").drop_nulls().first(),
        wire_phases=pl.col("wire_phases").first(),
    )
    spans = wire.join(per_op.select("pid", "op", "batch"), on=["pid", "op"])
    union = union_intervals(spans.select("batch", "start_ns", "end_ns"), by=["batch"])
    extent = union.group_by("batch").agg(
        start_ns=pl.col("start_ns").min(),
        end_ns=pl.col("end_ns").max(),
        wire_ns=(pl.col("end_ns") - pl.col("start_ns")).sum(),
    )
    frame = (
        batches.join(extent, on="batch", how="left")
        .with_columns(world_size=pl.lit(world_size, dtype=pl.Int32))
        .with_columns(bus_factor=bus_factor_expr(pl.col("collective"), pl.col("world_size")))
        .with_columns(bandwidth_columns(link_gbps, time="wire_ns"))
        .sort("batch")
    )
    return validate(frame, HOROVOD_BATCHES_SCHEMA, what="horovod batches"), spans


def compute_negotiation_wait(events: pl.DataFrame) -> pl.DataFrame:
    """Return, per rank, how long it waited in negotiations for the last rank, and how much it caused.

    Each negotiation of a tensor (``NEGOTIATE_*`` on its pid) holds one readiness tick per rank
    (on response-cache misses). With ``last`` the latest tick of a negotiation, rank ``r`` waited
    ``last − tick(r)`` for the others; the rank with the latest tick (ties, common because ticks
    are quantised to the coordinator's cycle, go to the lowest rank) caused ``Σ_r (last − tick(r))``.

    Parameters
    ----------
    events
        The canonical events frame holding a Horovod timeline.

    Returns
    -------
    pl.DataFrame
        :data:`~timeline.analysis.schemas.HOROVOD_NEGOTIATION_SCHEMA`, one row per rank seen in
        ticks, sorted by rank; empty when the timeline has no ticks.

    Raises
    ------
    TraceContentError
        If the events hold no Horovod timeline.
    """
    per_negotiation = ["pid", "_n_start"]
    ticks = (
        _negotiation_ticks(_require_horovod(events))
        .with_columns(
            _last=pl.col("start_ns").max().over(per_negotiation),
            _last_rank=pl.col("rank")
            .sort_by(["start_ns", "rank"], descending=[True, False])
            .first()
            .over(per_negotiation),
        )
        .with_columns(_waited=pl.col("_last") - pl.col("start_ns"))
    )
    caused = (
        ticks.group_by(per_negotiation)
        .agg(rank=pl.col("_last_rank").first(), _caused=pl.col("_waited").sum())
        .group_by("rank")
        .agg(times_last=pl.len().cast(pl.Int64), caused_wait_ns=pl.col("_caused").sum())
    )
    per_rank = (
        ticks.group_by("rank")
        .agg(
            negotiations=pl.len().cast(pl.Int64),
            waited_ns=pl.col("_waited").sum(),
            mean_waited_ns=pl.col("_waited").mean().round().cast(pl.Int64),
        )
        .join(caused, on="rank", how="left")
        .with_columns(pl.col("times_last").fill_null(0), pl.col("caused_wait_ns").fill_null(0))
        .sort("rank")
    )
    return validate(per_rank, HOROVOD_NEGOTIATION_SCHEMA, what="horovod negotiation")


def _negotiation_ticks(horovod: pl.DataFrame) -> pl.DataFrame:
    """Return the readiness ticks inside a negotiation, each with its negotiation's start and end."""
    negotiations = (
        horovod.filter((pl.col("kind") == "negotiation") & pl.col("pid").is_not_null())
        .select("pid", _n_start="start_ns", _n_end="end_ns")
        .sort("_n_start")
    )
    return (
        _ticks(horovod)
        .select("pid", "rank", "start_ns")
        .sort("start_ns")
        .join_asof(
            negotiations,
            left_on="start_ns",
            right_on="_n_start",
            by="pid",
            strategy="backward",
            check_sortedness=False,
        )
        .filter(pl.col("_n_start").is_not_null() & (pl.col("start_ns") <= pl.col("_n_end")))
    )


_TENSORFLOW_TENSOR = r"(?:^|/)Horovod(?:Allreduce|Broadcast|Allgather|Alltoall|Reducescatter)_"
"""A tensor name of Horovod's TensorFlow (and Keras) ops: ``HorovodAllreduce_<grad>_0``, scoped or not."""
_PYTORCH_TENSOR = r"^(?:allreduce|broadcast|allgather|alltoall|reducescatter|grouped_allreduce)\."
"""A tensor name of Horovod's PyTorch ops: ``allreduce.<parameter>`` or ``allreduce.noname.N``."""


def horovod_framework(events: pl.DataFrame) -> str | None:
    """Return the framework a Horovod timeline came from, by its tensor names: ``tensorflow``, ``pytorch``.

    Horovod names a tensor after the op that submitted it: TensorFlow's ``HorovodAllreduce_…``
    (``horovod/tensorflow/mpi_ops.py``), PyTorch's ``allreduce.…`` (``horovod/torch/mpi_ops.py``).
    None when neither (or both) is seen.
    """
    if "tensor" not in events.columns:
        return None
    names = (
        events.filter(pl.col("source") == "horovod")
        .select(pl.col("tensor").cast(pl.String))
        .drop_nulls()
        .unique()
        .to_series()
    )
    tensorflow = bool(names.str.contains(_TENSORFLOW_TENSOR).any())
    pytorch = bool(names.str.contains(_PYTORCH_TENSOR).any())
    if tensorflow == pytorch:
        return None
    return "tensorflow" if tensorflow else "pytorch"


def framework_advice(framework: str | None) -> str:
    """Return how to measure exposed vs hidden communication beside a Horovod timeline of a framework."""
    if framework == "tensorflow":
        return (
            "the timeline comes from TensorFlow, whose profiler traces timeline does not read: exposed "
            "vs hidden communication cannot be measured for this job (a PyTorch job's profiler trace "
            "of rank 0 can be loaded with its timeline)"
        )
    return "load the PyTorch profiler trace of rank 0 (the writer) of the same run together with the timeline"


def horovod_limitations(
    *, clock: str | None = None, with_framework_trace: bool = False, framework: str | None = None
) -> tuple[str, ...]:
    """Return what a Horovod timeline cannot tell, and what would, one sentence each.

    ``framework``: the framework the timeline came from (:func:`horovod_framework`): the advice fits it.
    """
    lines: list[str] = []
    if not with_framework_trace:
        advice = framework_advice(framework)
        lines.append(f"exposed vs hidden communication: the timeline has no compute events; {advice}")
    if clock is not None and clock != "epoch":
        lines.append(
            f"the timeline's clock is {clock!r} (Horovod < 0.20.1): it cannot be aligned with a framework "
            "trace's wall clock; record it with Horovod ≥ 0.20.1"
        )
    lines.extend(
        [
            "iterations: CYCLE_START marks Horovod's background loop, not training steps; iterations come "
            "from the framework trace's ProfilerStep",
            "per-rank timing of the transfers: the spans are rank 0's; other ranks appear only in "
            "negotiation ticks (on response-cache misses, quantised to the cycle time)",
        ]
    )
    return tuple(lines)


def analyze_horovod(
    events: pl.DataFrame,
    *,
    world_size: int | None = None,
    link_gbps: float | None = None,
    clock: str | None = None,
) -> HorovodAnalysis:
    """Return everything a Horovod timeline alone tells: phases, batches, negotiation wait, totals.

    Parameters
    ----------
    events
        The canonical events frame holding a Horovod timeline (Kineto events beside it are ignored).
    world_size
        Ranks in the job; default: from the ticks.
    link_gbps
        The link's one-direction bandwidth in Gbit/s.
    clock
        The timeline's clock (``Trace.files``), to say whether it can be aligned.

    Returns
    -------
    HorovodAnalysis

    Raises
    ------
    TraceContentError
        If the events hold no Horovod timeline.
    """
    horovod = _require_horovod(events)
    n = world_size if world_size is not None else horovod_world_size(horovod)
    tensors = compute_tensor_phases(horovod)
    batches, batch_spans = _batches(
        horovod,
        world_size=n,
        link_gbps=link_gbps,
        start_tolerance_ns=FUSION_START_TOLERANCE_NS,
        end_tolerance_ns=FUSION_END_TOLERANCE_NS,
    )
    totals = _totals(horovod, tensors=tensors, batches=batches, batch_spans=batch_spans, world_size=n)
    return HorovodAnalysis(
        tensors=tensors,
        batches=batches,
        negotiation=compute_negotiation_wait(horovod),
        totals=validate(_with_total_rates(totals, link_gbps), HOROVOD_TOTALS_SCHEMA, what="horovod totals"),
        limitations=horovod_limitations(clock=clock, framework=horovod_framework(horovod)),
    )


def _totals(
    horovod: pl.DataFrame,
    *,
    tensors: pl.DataFrame,
    batches: pl.DataFrame,
    batch_spans: pl.DataFrame,
    world_size: int | None,
) -> pl.DataFrame:
    """Return the timeline's one row of counts, span, wire union, negotiation union and known bytes.

    ``_bus_bytes`` and ``_known_wire_ns``: what :func:`_with_total_rates` divides.
    """
    spans = horovod.filter(pl.col("kind") != "instant")
    wire = spans.filter(pl.col("kind") == "communication")
    first, last = spans.select(pl.col("start_ns").min(), pl.col("end_ns").max()).row(0)
    # Bytes and bandwidth over the batches whose size is known and whose bandwidth is plausible (not
    # faster than the link or physics), against the union of their wire spans.
    known = batches.filter(pl.col("bytes").is_not_null() & (pl.col("wire_ns") > 0) & ~pl.col("implausible"))
    known_spans = batch_spans.join(known.select("batch"), on="batch")
    bus_known = known.height > 0 and known.get_column("bus_factor").null_count() == 0
    return pl.DataFrame(
        {
            "tensors": [tensors.height],
            "operations": [int(tensors.get_column("operations").sum())],
            "batches": [batches.height],
            "world_size": [world_size],
            "span_ns": [None if first is None else last - first],
            "wire_sum_ns": [int(wire.get_column("dur_ns").sum())],
            "wire_ns": [_union_length(wire)],
            "negotiation_ns": [_union_length(spans.filter(pl.col("kind") == "negotiation"))],
            "bytes": [int(known.get_column("bytes").sum()) if known.height else None],
            "_bus_bytes": [
                float((known.get_column("bytes") * known.get_column("bus_factor")).sum())
                if bus_known
                else None
            ],
            "_known_wire_ns": [_union_length(known_spans)],
        },
        schema_overrides={
            "world_size": pl.Int32,
            "span_ns": pl.Int64,
            "bytes": pl.Int64,
            "_bus_bytes": pl.Float64,
        },
    )


def _with_total_rates(totals: pl.DataFrame, link_gbps: float | None) -> pl.DataFrame:
    """Add the wire ratio, and the bandwidths and link utilisation over the known batches."""
    usable = pl.col("bytes").is_not_null() & (pl.col("_known_wire_ns") > 0)
    algbw = pl.when(usable).then(pl.col("bytes") * 1e9 / pl.col("_known_wire_ns"))
    busbw = pl.when(usable).then(pl.col("_bus_bytes") * 1e9 / pl.col("_known_wire_ns"))
    link = pl.lit(link_gbps, dtype=pl.Float64)
    return totals.with_columns(
        wire_ratio=pl.when(pl.col("span_ns") > 0).then(pl.col("wire_ns") / pl.col("span_ns")),
        algbw_bytes_per_s=algbw,
        busbw_bytes_per_s=busbw,
        algbw_gbps=algbw * 8 / 1e9,
        busbw_gbps=busbw * 8 / 1e9,
        link_gbps=link,
        link_utilisation_ratio=busbw * 8 / 1e9 / link,
    )


def _union_length(intervals: pl.DataFrame) -> int:
    """Return the length of the union of the ``[start_ns, end_ns)`` intervals of a frame."""
    if intervals.height == 0:
        return 0
    union = union_intervals(intervals.select("start_ns", "end_ns"), by=[])
    return int((union.get_column("end_ns") - union.get_column("start_ns")).sum())


_WORKING: Formula = lambda s: s["compute"] & ~s["wait"]  # noqa: E731


def _attribution_formulas() -> dict[str, Formula]:
    return {
        "wire_ns": lambda s: s["wire"],
        "hidden_wire_ns": lambda s: s["wire"] & _WORKING(s),
        "exposed_wire_ns": lambda s: s["wire"] & ~_WORKING(s),
        "negotiation_ns": lambda s: s["negotiation"],
        "queue_ns": lambda s: s["queue"],
        "memcpy_ns": lambda s: s["memcpy"],
        "kernel_comm_ns": lambda s: s["kcomm"],
        "exposed_kernel_comm_ns": lambda s: s["kcomm"] & ~_WORKING(s),
    }


_HOROVOD_SETS: Mapping[str, str] = {
    "communication": "wire",
    "negotiation": "negotiation",
    "queue": "queue",
    "memcpy": "memcpy",
}


def attribute_horovod_phases(trace: Trace, *, writer_rank: int = 0, offset_ns: int = 0) -> HorovodAttribution:
    """Set Horovod's per-tensor phases against the compute of the rank that wrote the timeline.

    The timeline (``epoch`` clock, Horovod ≥ 0.20.1) and the profiler trace are both on the wall
    clock, so they align directly; ``offset_ns`` corrects a known difference between the two
    clocks (timeline times become ``t − offset_ns``). Compute is the writer rank's, as in
    :mod:`timeline.analysis.overlap` (GPU kernels that are not communication; CPU operators on
    CPU-only ranks). For each Horovod span: ``hidden_ns = |span ∩ compute|``, ``exposed_ns =
    dur_ns − hidden_ns``, ``kernel_ns = |span ∩ profiler communication|`` (the NCCL kernels that ran
    inside it). Per iteration of the writer rank, the unions: ``wire_ns = |wire|``,
    ``hidden_wire_ns = |wire ∩ compute|``, ``exposed_wire_ns = |wire − compute|``, and likewise for
    the other phases and the profiler's communication kernels.

    Parameters
    ----------
    trace
        A trace holding one Horovod timeline and the profiler trace of ``writer_rank``.
    writer_rank
        The rank that wrote the timeline (the loader gives its spans rank 0).
    offset_ns
        Added shift: timeline times become ``t − offset_ns``.

    Returns
    -------
    HorovodAttribution

    Raises
    ------
    TraceContentError
        If there is no Horovod timeline, no profiler trace of the writer rank, or the timeline's
        clock is not the wall clock.
    """
    events = trace.events
    horovod = _require_horovod(events)
    _require_wall_clock(trace.files)
    kineto = events.filter(pl.col("source") == "kineto")
    if kineto.filter(pl.col("rank") == writer_rank).height == 0:
        msg = (
            f"no PyTorch profiler trace of rank {writer_rank}, the rank that wrote the Horovod timeline: "
            "load its trace together with the timeline"
        )
        raise TraceContentError(msg)
    horovod = horovod.with_columns(
        start_ns=pl.col("start_ns") - offset_ns, end_ns=pl.col("end_ns") - offset_ns
    ).filter((pl.col("kind") != "instant") & pl.col("pid").is_not_null())

    modes = rank_modes(kineto)
    sets = activity_sets(kineto, modes).filter(pl.col("rank") == writer_rank)
    windows = assign_iterations(kineto).filter(pl.col("rank") == writer_rank)
    phases = _span_phases(horovod, sets, windows, writer_rank)
    iterations = _attribution_iterations(horovod, sets, windows, writer_rank)
    return HorovodAttribution(
        phases=validate(phases, HOROVOD_PHASES_SCHEMA, what="horovod phases"),
        iterations=iterations,
        writer_rank=writer_rank,
        offset_ns=offset_ns,
        warnings=_overlap_warnings(horovod, kineto, writer_rank),
    )


def _require_wall_clock(files: pl.DataFrame) -> None:
    """Refuse Horovod timelines not on the wall clock (``epoch``, Horovod ≥ 0.20.1).

    Raises
    ------
    TraceContentError
        A Horovod timeline of ``files`` has another clock.
    """
    horovod_files = files.filter(pl.col("format") == "horovod")
    for row in horovod_files.iter_rows(named=True):
        if row["clock"] != "epoch":
            msg = (
                f"{row['path']}: the Horovod timeline's clock is {row['clock']!r} (Horovod < 0.20.1): it "
                "cannot be aligned with the profiler's wall clock; record the timeline with Horovod ≥ 0.20.1"
            )
            raise TraceContentError(msg)


def _span_phases(
    horovod: pl.DataFrame, sets: pl.DataFrame, windows: pl.DataFrame, writer_rank: int
) -> pl.DataFrame:
    """Measure each Horovod span against the writer rank's compute and communication kernels.

    ``hidden_ns`` (under compute), ``exposed_ns`` and ``kernel_ns`` (under the profiler's
    communication) of every span, and the writer's iteration it started in; sorted by start.
    """
    working = formula_intervals(
        sets, by=["rank"], sets=("comm", "compute", "wait", "other"), formula=_WORKING
    )
    kernel_comm = union_intervals(sets.filter(pl.col("set") == "comm"), by=["rank"])

    spans = horovod.with_row_index("_span").with_columns(rank=pl.lit(writer_rank, dtype=pl.Int32))
    points = spans.select("_span", "rank", "start_ns", "end_ns")
    covered = covered_within(working, points, by=["rank"], key="_span", out="hidden_ns").join(
        covered_within(kernel_comm, points, by=["rank"], key="_span", out="kernel_ns"), on="_span"
    )
    return (
        with_iterations(spans.join(covered, on="_span").lazy(), windows)  # the writer's windows only
        .with_columns(
            exposed_ns=pl.col("dur_ns") - pl.col("hidden_ns"),
            tensor=pl.col("tensor").cast(pl.String),
            kind=pl.col("kind").cast(pl.String),
            name=pl.col("name").cast(pl.String),
        )
        .sort("start_ns", "pid")
        .collect(engine="in-memory")
    )


def _overlap_warnings(horovod: pl.DataFrame, kineto: pl.DataFrame, writer_rank: int) -> tuple[str, ...]:
    """Warn when the Horovod timeline and the writer rank's profiler trace do not overlap in time."""
    warnings: list[str] = []
    k_span = kineto.filter(pl.col("rank") == writer_rank).select(
        lo=pl.col("start_ns").min(), hi=pl.col("end_ns").max()
    )
    h_lo, h_hi = horovod.get_column("start_ns").min(), horovod.get_column("end_ns").max()
    k_lo, k_hi = k_span.row(0)
    if h_lo is not None and (h_hi <= k_lo or k_hi <= h_lo):
        warnings.append(
            f"the Horovod timeline and rank {writer_rank}'s profiler trace do not overlap in wall-clock "
            "time: are they from the same run?"
        )
    return tuple(warnings)


def _attribution_iterations(
    horovod: pl.DataFrame, sets: pl.DataFrame, windows: pl.DataFrame, writer_rank: int
) -> pl.DataFrame:
    """Per window of the writer rank, the unions of Horovod's phases against its compute."""
    kind = pl.col("kind").cast(pl.String)
    phase_set = pl.lit(None, dtype=pl.String)
    for horovod_kind, set_name in reversed(list(_HOROVOD_SETS.items())):
        phase_set = pl.when(kind == horovod_kind).then(pl.lit(set_name)).otherwise(phase_set)
    horovod_sets = (
        horovod.with_columns(set=phase_set)
        .filter(pl.col("set").is_not_null())
        .select(pl.lit(writer_rank, dtype=pl.Int32).alias("rank"), "set", "start_ns", "end_ns")
    )
    profiler_sets = sets.select(
        "rank",
        pl.when(pl.col("set") == "comm").then(pl.lit("kcomm")).otherwise(pl.col("set")).alias("set"),
        "start_ns",
        "end_ns",
    )
    intervals = pl.concat([horovod_sets, profiler_sets.with_columns(pl.col("rank").cast(pl.Int32))])
    keyed = windows.with_row_index("window_id").with_columns(pl.col("window_id").cast(pl.Int64))
    clipped = clip_to_windows(
        intervals, keyed.select("rank", "window_id", w_start="start_ns", w_end="end_ns"), by=["rank"]
    )
    set_names = ("wire", "negotiation", "queue", "memcpy", "kcomm", "compute", "wait", "other")
    formulas = _attribution_formulas()
    measured = measure(clipped, by=["rank", "window_id"], sets=set_names, formulas=formulas)
    frame = (
        keyed.join(measured, on=["rank", "window_id"], how="left")
        .with_columns([pl.col(name).fill_null(0) for name in formulas])
        .with_columns(step_ns=pl.col("end_ns") - pl.col("start_ns"))
        .with_columns(
            exposed_wire_ratio=pl.when(pl.col("step_ns") > 0).then(
                pl.col("exposed_wire_ns") / pl.col("step_ns")
            )
        )
        .sort("start_ns")
    )
    return validate(frame, HOROVOD_ITERATIONS_SCHEMA, what="horovod iterations")
