"""The what-if graph of a Horovod timeline alone: no profiler trace, compute derived from the timeline.

A Horovod timeline (``docs/horovod.md``) records the writer's (rank 0's) operations and every rank's
readiness, but no compute. :func:`horovod_frames` derives the frames from which
:func:`timeline.whatif.graph.trace_graph` builds the same ``TraceGraph`` the profiler road builds, so
the replay, the sweep and the report work unchanged:

- **collectives**: one per fused batch (the operations whose spans coincide, as
  :func:`~timeline.analysis.horovod_phases.compute_fused_batches` groups them), on one channel (Horovod's
  background thread runs one response at a time). Its *ready* time is the moment every rank had
  submitted its last tensor (the latest readiness tick of the tensors' negotiations; the negotiation's
  end on a response-cache hit, which writes no ticks). Its transfer runs from the first wire phase to
  the end of the operation (the copy out of the fusion buffer included); what comes before the wire
  (waiting for data, NCCL's initialisation, the queue, the copy into the fusion buffer) is its launch
  delay, kept as measured. Bytes: the operations' shapes, summed over the batch.
- **compute**, an opaque span: the writer is taken to compute from each resume until the next batch
  was ready, and to wait from there until the operations outstanding ended, when no tensor became
  ready in between (the framework blocked on them: ``synchronize`` before the update, or a
  benchmark's blocking call). While tensors keep becoming ready, it computes (the backward pass).
- **iterations**: the period of the training loop, when one is seen: the all-reduce tensor negotiated
  most often (the earliest of those, then the first by name) opens a window at each negotiation
  start; ``K`` negotiations give ``K − 1`` windows. Without a repeated tensor, one window: the whole timeline.
- **gradients**: each all-reduced tensor, ready when every rank had submitted it, with its bytes.
- One rank (the writer) stands for all: the world size is the ranks in the readiness ticks.

The graph's ``notes`` say all of this for the run at hand, and what the timeline lacked.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from timeline.analysis.horovod_phases import (
    FUSION_END_TOLERANCE_NS,
    FUSION_START_TOLERANCE_NS,
    horovod_world_size,
)
from timeline.errors import TraceContentError
from timeline.schema import ITERATIONS_SCHEMA
from timeline.trace import Trace

__all__ = ["GRADIENT_KINDS", "HOROVOD_CHANNEL", "HorovodFrames", "horovod_frames", "horovod_operations"]

GRADIENT_KINDS = ("all_reduce", "reduce_scatter")
"""The collectives whose tensors are gradients: ``timeline.whatif.graph.GRADIENT_COLLECTIVES``, sorted
(this module cannot import the graph module, which imports it)."""

HOROVOD_CHANNEL = "horovod background thread"
"""The channel (and pool) of every collective of a Horovod timeline: one response at a time."""

_INTERVALS = {"rank": pl.Int32(), "start_ns": pl.Int64(), "end_ns": pl.Int64()}
_SIGNALS = {"rank": pl.Int32(), "param": pl.String(), "nbytes": pl.Int64(), "ready_ns": pl.Int64()}


@dataclass(frozen=True)
class HorovodFrames:
    """What :func:`timeline.whatif.graph.assemble_graph` takes, derived from a Horovod timeline.

    Attributes
    ----------
    modes
        ``{writer: "horovod"}``: the writer (rank 0) stands for every rank.
    windows
        The iteration windows (:data:`timeline.schema.ITERATIONS_SCHEMA` + ``window_id``).
    compute
        The opaque compute timeline: ``rank``, ``start_ns``, ``end_ns``.
    comm
        One row per fused batch, the columns of ``GraphParts.comm``.
    signals
        One gradient per all-reduced tensor: ``rank``, ``param``, ``nbytes``, ``ready_ns``.
    world_size
        The ranks in the readiness ticks (else the file's world size, else 1).
    notes
        What was derived and how, one line each.
    """

    modes: dict[int, str]
    windows: pl.DataFrame
    compute: pl.DataFrame
    comm: pl.DataFrame
    signals: pl.DataFrame
    world_size: int
    notes: tuple[str, ...]


def horovod_frames(trace: Trace) -> HorovodFrames:
    """Derive the graph's frames from a loaded Horovod timeline (and nothing else).

    :func:`timeline.whatif.graph.trace_graph` turns them into a ``TraceGraph`` (this module does not
    import the graph module, which imports it).

    Parameters
    ----------
    trace
        A trace whose events all come from one Horovod timeline.

    Returns
    -------
    HorovodFrames

    Raises
    ------
    TraceContentError
        The timeline holds no tensor at all (only ``CYCLE_START`` markers).
    """
    horovod = trace.events.filter(pl.col("source") == "horovod")
    tensors = horovod.filter(pl.col("pid").is_not_null())
    if tensors.height == 0:
        msg = (
            f"{_file_name(trace)}: a Horovod timeline without a single tensor (only cycle markers): "
            "nothing to replay; give the timeline of a job that ran collectives"
        )
        raise TraceContentError(msg)
    ops = horovod_operations(horovod)
    writer = int(tensors.get_column("rank").drop_nulls().first() or 0)  # type: ignore[arg-type]
    batches = _batches(ops)
    world = horovod_world_size(horovod)
    file_sizes = trace.files.get_column("world_size").drop_nulls()
    world = world or (int(file_sizes.max()) if file_sizes.len() else 1)  # type: ignore[arg-type]
    first_ns = int(tensors.get_column("start_ns").min())  # type: ignore[arg-type]
    if ops.height:
        last_ns = int(batches.get_column("end_ns").max())  # type: ignore[arg-type]
        compute = _compute(batches, writer, first_ns)
    else:
        last_ns = int(tensors.get_column("end_ns").max())  # type: ignore[arg-type]
        compute = pl.DataFrame(
            {"rank": [writer], "start_ns": [first_ns], "end_ns": [last_ns]}, schema=_INTERVALS
        )
    windows, loop_note = _windows(ops, writer, first_ns, last_ns)
    comm, signals = _comm_and_signals(ops, batches, writer=writer, world=world)
    return HorovodFrames(
        modes={writer: "horovod"},
        windows=windows,
        compute=compute,
        comm=comm,
        signals=signals,
        world_size=world,
        notes=_notes(ops, batches, world, writer, loop_note),
    )


def _comm_and_signals(
    ops: pl.DataFrame, batches: pl.DataFrame, *, writer: int, world: int
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Return the graph's collectives (one per batch) and gradient signals (one per gradient tensor)."""
    comm = batches.select(
        rank=pl.lit(writer, dtype=pl.Int32),
        channel=pl.lit(HOROVOD_CHANNEL),
        collective="collective",
        group=pl.lit("horovod"),
        nbytes="nbytes",
        group_size=pl.lit(world, dtype=pl.Int32),
        start_ns="start_ns",
        end_ns="end_ns",
        ready_ns="ready_ns",
    )
    gradient_ops = ops.filter(pl.col("collective").is_in(GRADIENT_KINDS))
    signals = (
        gradient_ops.join(batches.select("batch", _batch_start="start_ns"), on="batch")
        .select(
            rank=pl.lit(writer, dtype=pl.Int32),
            param="tensor",
            nbytes="nbytes",
            ready_ns=pl.min_horizontal("ready_ns", "_batch_start"),
        )
        .sort("ready_ns", maintain_order=True)
        .cast(_SIGNALS)  # type: ignore[arg-type]
    )
    return comm, signals


def _file_name(trace: Trace) -> str:
    paths = trace.files.get_column("path").drop_nulls().to_list()
    return Path(paths[0]).name if paths else "the Horovod timeline"


def horovod_operations(horovod: pl.DataFrame) -> pl.DataFrame:
    """Return one row per operation of a tensor, with its readiness, first wire phase and batch.

    Parameters
    ----------
    horovod
        The rows of one Horovod timeline (canonical events frame).

    Returns
    -------
    pl.DataFrame
        Columns ``rank``, ``pid``, ``tensor``, ``collective``, ``nbytes``, ``op_start``, ``op_end``,
        ``negotiation_ns`` (its negotiation's start, null without one), ``ready_ns`` (the latest
        readiness tick of that negotiation, else its end, else the operation's start; never after
        the operation's start), ``wire_ns``, ``wire_end_ns``, ``wire_name`` (its first wire phase's
        start, end and name; the operation's start and end, and null, without one) and ``batch``
        (0, 1, …: the operations fused into one response share it); sorted by ``op_start``.
    """
    spans = horovod.filter(pl.col("pid").is_not_null())
    kind = pl.col("kind").cast(pl.String)
    ops = _annotated_operations(spans)
    negotiations = (
        spans.filter(kind == "negotiation")
        .select("pid", negotiation_ns="start_ns", _neg_end="end_ns")
        .sort("negotiation_ns")
    )
    ticks = _last_ticks(spans, negotiations)
    wire = _first_wires(spans, ops)
    own = (
        pl.col("_neg_end").is_not_null()
        & (pl.col("_neg_end") <= pl.col("op_start"))
        & (pl.col("_prev_end").is_null() | (pl.col("negotiation_ns") >= pl.col("_prev_end")))
    )
    located = (
        ops.join_asof(
            negotiations, left_on="op_start", right_on="negotiation_ns", by="pid", check_sortedness=False
        )
        .with_columns(
            negotiation_ns=pl.when(own).then("negotiation_ns"),
            _neg_end=pl.when(own).then("_neg_end"),
        )
        .join(ticks, on=["pid", "negotiation_ns"], how="left")
        .join(wire, on=["pid", "op_start"], how="left")
    )
    ready = pl.coalesce("_last_tick", "_neg_end", "op_start")
    return _number_batches(
        located.with_columns(
            ready_ns=pl.min_horizontal(ready, "op_start"),
            wire_ns=pl.coalesce("_first_wire", "op_start"),
            wire_end_ns=pl.coalesce("wire_end_ns", "op_end"),
        ).select(_OPERATION_COLUMNS)
    )


_OPERATION_COLUMNS = (
    "rank",
    "pid",
    "tensor",
    "collective",
    "nbytes",
    "op_start",
    "op_end",
    "negotiation_ns",
    "ready_ns",
    "wire_ns",
    "wire_end_ns",
    "wire_name",
)


def _annotated_operations(spans: pl.DataFrame) -> pl.DataFrame:
    """Return each operation's annotation span, with the end of the one before it on its pid."""
    return (
        spans.filter(pl.col("kind").cast(pl.String) == "annotation")
        .select(
            "rank",
            "pid",
            tensor=pl.col("tensor").cast(pl.String),
            collective=pl.col("collective").cast(pl.String),
            nbytes="in_bytes",
            op_start="start_ns",
            op_end="end_ns",
        )
        .sort("op_start")
        .with_columns(_prev_end=pl.col("op_end").shift(1).over("pid", order_by="op_start"))
    )


def _last_ticks(spans: pl.DataFrame, negotiations: pl.DataFrame) -> pl.DataFrame:
    """Return the latest readiness tick of each negotiation: ``pid``, ``negotiation_ns``, ``_last_tick``."""
    kind = pl.col("kind").cast(pl.String)
    return (
        spans.filter((kind == "instant") & pl.col("name").cast(pl.String).str.contains(r"^\d+$"))
        .select("pid", _tick="start_ns")
        .sort("_tick")
        .join_asof(negotiations, left_on="_tick", right_on="negotiation_ns", by="pid", check_sortedness=False)
        .filter(pl.col("_tick") <= pl.col("_neg_end"))
        .group_by("pid", "negotiation_ns")
        .agg(_last_tick=pl.col("_tick").max())
    )


def _first_wires(spans: pl.DataFrame, ops: pl.DataFrame) -> pl.DataFrame:
    """Return each operation's first wire phase: ``pid``, ``op_start``, its start, end and name."""
    kind = pl.col("kind").cast(pl.String)
    return (
        spans.filter(kind == "communication")
        .select("pid", _w_start="start_ns", _w_end="end_ns", _w_name=pl.col("name").cast(pl.String))
        .sort("_w_start")
        .join_asof(
            ops.select("pid", "op_start", "op_end"),
            left_on="_w_start",
            right_on="op_start",
            by="pid",
            check_sortedness=False,
        )
        .filter(pl.col("_w_end") <= pl.col("op_end"))
        .group_by("pid", "op_start")
        .agg(
            _first_wire=pl.col("_w_start").min(),
            wire_end_ns=pl.col("_w_end").sort_by("_w_start").first(),
            wire_name=pl.col("_w_name").sort_by("_w_start").first(),
        )
    )


def _number_batches(ops: pl.DataFrame) -> pl.DataFrame:
    """Give each operation its fused batch (column ``batch``, from 0).

    As :func:`~timeline.analysis.horovod_phases.compute_fused_batches` groups them: in order of the
    first wire phase's start, an operation of the same collective whose first wire phase has the same
    name and starts and ends within the fusion tolerances of the previous one joins its batch (an
    operation without a wire phase is a batch of its own).
    """
    ops = ops.sort("wire_ns", "wire_name", "wire_end_ns", "pid", nulls_last=True)
    new_batch = (
        pl.col("collective").shift(1).is_null()
        | (pl.col("collective") != pl.col("collective").shift(1))
        | pl.col("wire_name").is_null()
        | (pl.col("wire_name") != pl.col("wire_name").shift(1)).fill_null(True)
        | ((pl.col("wire_ns") - pl.col("wire_ns").shift(1)) > FUSION_START_TOLERANCE_NS)
        | ((pl.col("wire_end_ns") - pl.col("wire_end_ns").shift(1)).abs() > FUSION_END_TOLERANCE_NS)
    )
    return ops.with_columns(batch=new_batch.cast(pl.Int64).cum_sum() - 1).sort("op_start", "pid")


def _batches(ops: pl.DataFrame) -> pl.DataFrame:
    """Return one row per batch.

    Columns ``batch``, ``collective``, ``tensors``, ``nbytes`` (null when a tensor's is unknown),
    ``start_ns`` (first wire phase), ``end_ns``, ``ready_ns`` (never after the start).
    """
    return (
        ops.group_by("batch")
        .agg(
            collective=pl.col("collective").first(),
            tensors=pl.len().cast(pl.Int64),
            nbytes=pl.when(pl.col("nbytes").is_null().any()).then(None).otherwise(pl.col("nbytes").sum()),
            start_ns=pl.col("wire_ns").min(),
            end_ns=pl.col("op_end").max(),
            ready_ns=pl.col("ready_ns").max(),
        )
        .with_columns(ready_ns=pl.min_horizontal("ready_ns", "start_ns"))
        .sort("batch")
    )


def _compute(batches: pl.DataFrame, writer: int, first_ns: int) -> pl.DataFrame:
    """Derive the writer's opaque compute timeline from the batches' ready and end times.

    Compute runs from each resume until the next batch is ready; when no batch becomes ready before
    every outstanding one ended, the writer waited from the last readiness until that end.
    """
    rows = sorted(
        zip(batches.get_column("ready_ns").to_list(), batches.get_column("end_ns").to_list(), strict=True)
    )
    starts: list[int] = []
    ends: list[int] = []
    busy_from = first_ns
    outstanding = first_ns
    for i, (ready, end) in enumerate(rows):
        outstanding = max(outstanding, end)
        following = rows[i + 1][0] if i + 1 < len(rows) else None
        if following is None or following > outstanding:
            if ready > busy_from:
                starts.append(busy_from)
                ends.append(ready)
            busy_from = outstanding
    return pl.DataFrame(
        {"rank": [writer] * len(starts), "start_ns": starts, "end_ns": ends}, schema=_INTERVALS
    )


def _windows(ops: pl.DataFrame, writer: int, first_ns: int, last_ns: int) -> tuple[pl.DataFrame, str]:
    """Return the iteration windows (with ``window_id``) and a note saying how they were found."""
    gradient = ops.filter(pl.col("collective").is_in(GRADIENT_KINDS))
    counts = _negotiation_counts(gradient)
    if counts.height and int(counts.item(0, "n")) >= 2:  # two negotiations: one period
        pid = counts.item(0, "pid")
        marks = (
            gradient.filter(pl.col("pid") == pid)
            .select(pl.coalesce("negotiation_ns", "op_start"))
            .to_series()
            .sort()
            .to_list()
        )
        periods = [b - a for a, b in itertools.pairwise(marks)]
        frame = pl.DataFrame(
            {
                "rank": [writer] * len(periods),
                "iteration": list(range(len(periods))),
                "window": ["profiler_step"] * len(periods),
                "start_ns": marks[:-1],
                "end_ns": marks[1:],
            }
        )
        mean_ms = sum(periods) / len(periods) / 1e6
        note = (
            f"iterations: the period of the training loop, from the {len(marks)} negotiation starts of "
            f"tensor {counts.item(0, 'tensor') or pid} (the all-reduce negotiated most often): "
            f"{len(periods)} window(s) between them, {mean_ms:.3f} ms on average"
        )
    else:
        frame = pl.DataFrame(
            {
                "rank": [writer],
                "iteration": [None],
                "window": ["whole_trace"],
                "start_ns": [first_ns],
                "end_ns": [last_ns],
            }
        )
        note = (
            "no training loop seen (no all-reduce tensor negotiated twice): one window, the whole timeline "
            f"({(last_ns - first_ns) / 1e6:.3f} ms from its first tensor record to its last operation's "
            "end), replayed as one iteration"
        )
    windows = (
        frame.cast(ITERATIONS_SCHEMA)
        .with_row_index("window_id")
        .with_columns(pl.col("window_id").cast(pl.Int64))
    )
    return windows, note


def _negotiation_counts(gradient: pl.DataFrame) -> pl.DataFrame:
    """Return each gradient tensor's pid with its count of operations, the most negotiated first."""
    return (
        gradient.group_by("pid")
        .agg(n=pl.len(), first=pl.col("op_start").min(), tensor=pl.col("tensor").first())
        # ties (fused tensors share their negotiation) broken by name: the same tensor on every run
        .sort(
            pl.col("n"),
            pl.col("first"),
            pl.col("tensor"),
            pl.col("pid"),
            descending=[True, False, False, False],
        )
    )


def _notes(
    ops: pl.DataFrame, batches: pl.DataFrame, world: int, writer: int, loop_note: str
) -> tuple[str, ...]:
    """Say what the graph of a Horovod timeline derived, and how."""
    if ops.height == 0:
        return (
            "the timeline holds no operation (its tensors were negotiated, never all-reduced or broadcast: "
            "a job stopped before, or an excerpt): nothing to replay; the window is the timeline's span, "
            "all of it opaque compute, and every scenario gives it back",
            loop_note,
        )
    kinds = batches.group_by("collective").len().sort("collective")
    listing = ", ".join(f"{n} {k}" for k, n in kinds.iter_rows())
    notes = [
        "a Horovod timeline alone: it records no compute; the compute is an opaque span derived from it "
        "(busy from each resume until the next batch was ready on every rank, idle from there until the "
        "operations outstanding ended when no tensor became ready in between)",
        loop_note,
        f"rank {writer} (the writer) stands for all {world} rank{'s' if world != 1 else ''} (world size "
        f"from the readiness ticks); {ops.height} operation{'s' if ops.height != 1 else ''} in "
        f"{batches.height} fused batch{'es' if batches.height != 1 else ''}: {listing}; each transfer runs "
        "from its first wire phase to the operation's end, what came before (waiting for data, "
        "initialisation, queue, copy in) is kept as measured",
    ]
    if not (batches.get_column("collective").is_in(GRADIENT_KINDS)).any():
        notes.append(
            "no all-reduce in the timeline: no gradients to synchronise, so bucketing and compression "
            "change nothing; only the measured collectives are replayed"
        )
    if batches.get_column("nbytes").null_count():
        notes.append(
            f"{batches.get_column('nbytes').null_count()} batch(es) without bytes (operations without a "
            "shape): their link time stays as measured in every scenario"
        )
    if world == 1:
        notes.append(
            "world size 1 (readiness ticks of one rank only): a collective over one rank moves no data in "
            "the cost model, so other bandwidths give the measured time"
        )
    return tuple(notes)
