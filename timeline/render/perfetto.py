"""The events of a trace, and the tracks timeline adds, as a Chrome Trace Event Format JSON document.

Takes the canonical events frame, the iteration windows (:data:`timeline.schema.ITERATIONS_SCHEMA`)
and the exposed and hidden communication intervals
(:data:`timeline.analysis.schemas.COMM_INTERVALS_SCHEMA`), and gives the bytes of one JSON Object
Format document (``{"traceEvents": [...]}``) that Perfetto UI and ``chrome://tracing`` open:

- one process per rank (``pid`` = the rank), named ``rank N`` and sorted by rank;
- in it, one thread per track of the original events (a GPU stream, a CPU thread, a Horovod
  tensor), each event a complete event (``"ph": "X"``) with its name and its Kineto category (a
  Horovod phase, which has none: its timeline kind), and its kind, collective, sizes and ids in
  ``args``;
- and three tracks timeline adds, first in each process: ``iterations`` (one span per iteration
  window), ``exposed communication`` and ``hidden communication`` (the intervals of
  :func:`timeline.analysis.overlap.comm_intervals`). Their categories, ``timeline.iteration``,
  ``timeline.exposed_comm`` and ``timeline.hidden_comm``, are none that timeline's importer
  measures: reading the document back, they are events of kind ``other`` off the GPU.

Times: the Trace Event Format counts ``ts`` and ``dur`` in microseconds; they are written as
decimals with three fractional digits' worth of precision (whole nanoseconds), counted from
``baseTimeNanoseconds`` (the first start, in nanoseconds since the epoch) as torch >= 2.4 writes
them, so timeline's importer reads every time back to the nanosecond. ``displayTimeUnit`` is
``"ns"``. The Kineto argument names (``External id``, ``Collective name``, ``In msg nelems``...)
are kept so that the importer finds the collective of each communication event again.

Format reference: "Trace Event Format" (Google, the document ``chrome://tracing`` implements).
"""

from __future__ import annotations

from typing import Any

import msgspec
import polars as pl

from timeline.importers.collectives import dtype_size

__all__ = ["ADDED_CATEGORIES", "WRITER", "is_perfetto_export", "render_perfetto"]

WRITER = "timeline convert --to perfetto"
"""``otherData.writer`` of every document :func:`render_perfetto` writes (its first key)."""

ITERATION_CAT = "timeline.iteration"
EXPOSED_CAT = "timeline.exposed_comm"
HIDDEN_CAT = "timeline.hidden_comm"
ADDED_CATEGORIES: tuple[str, ...] = (ITERATION_CAT, EXPOSED_CAT, HIDDEN_CAT)
"""The categories of the events timeline adds (none of them is measured when read back)."""

_VERSION = 1
_HEAD = b'{"otherData":{"writer":"' + WRITER.encode() + b'"'
# The added tracks come first in each process; the original tracks follow, numbered from here.
_ADDED_TRACKS: tuple[tuple[int, str, str], ...] = (
    (1, "iterations", ITERATION_CAT),
    (2, "exposed communication", EXPOSED_CAT),
    (3, "hidden communication", HIDDEN_CAT),
)
_FIRST_TID = 10
_ENCODER = msgspec.json.Encoder()
# Collective columns → (their Kineto argument name, as the importer reads it)
_COLLECTIVE_ARGS: tuple[tuple[str, str], ...] = (
    ("collective", "Collective name"),
    ("group_size", "Group size"),
    ("pg_name", "Process Group Name"),
    ("pg_desc", "Process Group Description"),
    ("pg_ranks", "Process Group Ranks"),
    ("seq", "Seq"),
    ("comms_id", "Comms Id"),
)


def is_perfetto_export(head: bytes) -> bool:
    """Whether ``head``, the first bytes of a file, begin a document :func:`render_perfetto` wrote."""
    return head.startswith(_HEAD)


def render_perfetto(events: pl.DataFrame, *, windows: pl.DataFrame, comm: pl.DataFrame) -> bytes:
    """Return the Trace Event Format JSON document of the events and the tracks timeline adds.

    Parameters
    ----------
    events
        The canonical events frame (``Trace.events``).
    windows
        The iteration windows of each rank (:func:`timeline.analysis.iterations.assign_iterations`).
    comm
        The exposed and hidden communication intervals
        (:func:`timeline.analysis.overlap.comm_intervals`).

    Returns
    -------
    bytes
        UTF-8 JSON: ``otherData`` (``writer``, ``version``), ``displayTimeUnit``,
        ``baseTimeNanoseconds``, ``distributedInfo`` (only when there is one rank) and
        ``traceEvents``.
    """
    starts = [f.get_column("start_ns").min() for f in (events, windows, comm) if f.height]
    base = min((int(s) for s in starts if isinstance(s, int)), default=0)
    tracks = _tracks(events)
    trace_events: list[dict[str, Any]] = _metadata_events(events, windows, comm, tracks)
    trace_events.extend(_original_events(events, tracks, base))
    trace_events.extend(_added_events(windows, comm, base))
    ranks = events.get_column("rank").unique().drop_nulls()
    document: dict[str, Any] = {
        "otherData": {"writer": WRITER, "version": _VERSION},
        "displayTimeUnit": "ns",
        **({"baseTimeNanoseconds": base} if base >= 0 else {}),
        **({"distributedInfo": {"rank": int(ranks.item())}} if ranks.len() == 1 else {}),
        "traceEvents": trace_events,
    }
    return _ENCODER.encode(document)


def _track_label() -> pl.Expr:
    """Return the name of the track of each event: its GPU stream, Horovod tensor or CPU thread."""

    def text(column: str) -> pl.Expr:
        return pl.col(column).cast(pl.String).fill_null("?")

    return (
        pl.when(pl.col("device").is_not_null())
        .then(pl.format("GPU {} stream {}", text("device"), text("stream")))
        .when(pl.col("source") == "horovod")
        .then(pl.format("Horovod {}", text("tensor")))
        .otherwise(pl.format("CPU process {} thread {}", text("pid"), text("tid")))
    )


def _tracks(events: pl.DataFrame) -> pl.DataFrame:
    """Return one row per track of each rank: ``rank``, ``_label``, and its thread id ``_tid``.

    GPU streams come first, then Horovod tensors, then CPU threads, each in order of their ids.
    """
    keyed = events.select(
        "rank",
        _order=pl.when(pl.col("device").is_not_null())
        .then(0)
        .when(pl.col("source") == "horovod")
        .then(1)
        .otherwise(2),
        _a=pl.coalesce("device", "pid"),
        _b=pl.coalesce("stream", "tid"),
        _label=_track_label(),
    ).unique(["rank", "_label"])
    return keyed.sort("rank", "_order", "_a", "_b", "_label", nulls_last=True).select(
        "rank", "_label", _tid=pl.int_range(pl.len()).over("rank") + _FIRST_TID
    )


def _metadata_events(
    events: pl.DataFrame, windows: pl.DataFrame, comm: pl.DataFrame, tracks: pl.DataFrame
) -> list[dict[str, Any]]:
    """Return the ``"ph": "M"`` events that name and order the processes (ranks) and threads (tracks)."""
    ranks = sorted(
        set(events.get_column("rank").drop_nulls().to_list())
        | set(windows.get_column("rank").to_list())
        | set(comm.get_column("rank").to_list())
    )
    out: list[dict[str, Any]] = []
    for rank in ranks:
        out.append(
            {"ph": "M", "name": "process_name", "pid": rank, "tid": 0, "args": {"name": f"rank {rank}"}}
        )
        out.append(
            {"ph": "M", "name": "process_sort_index", "pid": rank, "tid": 0, "args": {"sort_index": rank}}
        )
        for tid, label, _ in _ADDED_TRACKS:
            out.extend(_thread_metadata(rank, tid, label))
    for rank, label, tid in tracks.iter_rows():
        out.extend(_thread_metadata(rank, tid, label))
    return out


def _thread_metadata(pid: int, tid: int, label: str) -> list[dict[str, Any]]:
    return [
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": label}},
        {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}},
    ]


def _micros(column: str, base: int) -> pl.Expr:
    """``column`` (ns) as µs from ``base``: a float the importer rounds back to the same nanosecond."""
    return ((pl.col(column) - base) / 1000).cast(pl.Float64)


def _original_events(events: pl.DataFrame, tracks: pl.DataFrame, base: int) -> list[dict[str, Any]]:
    """Return one complete event per row of ``events``, on its rank's process and its track's thread."""
    frame = (
        events.with_columns(_label=_track_label())
        .join(tracks, on=["rank", "_label"], how="left", maintain_order="left", nulls_equal=True)
        .select(
            "rank",
            "_tid",
            pl.col("name").cast(pl.String).fill_null(""),
            # Horovod phases have no category: their kind is one
            cat=pl.coalesce(pl.col("cat").cast(pl.String), pl.col("kind").cast(pl.String)),
            ts=_micros("start_ns", base),
            dur=(pl.col("dur_ns") / 1000).cast(pl.Float64),
            kind=pl.col("kind").cast(pl.String),
            device=pl.col("device"),
            stream=pl.col("stream"),
            correlation=pl.col("correlation"),
            external_id=pl.col("external_id"),
            collective=pl.col("collective").cast(pl.String),
            in_bytes=pl.col("in_bytes"),
            out_bytes=pl.col("out_bytes"),
            dtype=pl.col("dtype").cast(pl.String),
            group_size=pl.col("group_size"),
            pg_name=pl.col("pg_name").cast(pl.String),
            pg_desc=pl.col("pg_desc").cast(pl.String),
            pg_ranks=pl.col("pg_ranks"),
            seq=pl.col("seq"),
            comms_id=pl.col("comms_id"),
            peer=pl.col("peer"),
            tensor=pl.col("tensor").cast(pl.String),
        )
    )
    rows = msgspec.convert(frame.rename({"_tid": "tid"}).to_dicts(), list[_EventRow])
    return [
        {
            "ph": "X",
            "name": row.name,
            "cat": row.cat,
            "pid": row.rank,
            "tid": row.tid,
            "ts": row.ts,
            "dur": row.dur,
            "args": _args(row),
        }
        for row in rows
    ]


class _EventRow(msgspec.Struct, frozen=True):
    """One event as the export reads it: the columns of the events frame it writes, typed."""

    rank: int
    tid: int
    name: str
    cat: str | None
    ts: float
    dur: float
    kind: str
    device: int | None
    stream: int | None
    correlation: int | None
    external_id: int | None
    collective: str | None
    in_bytes: int | None
    out_bytes: int | None
    dtype: str | None
    group_size: int | None
    pg_name: str | None
    pg_desc: str | None
    pg_ranks: str | None  # as the trace writes it: "[0, 2]"
    seq: int | None
    comms_id: int | None
    peer: int | None
    tensor: str | None


def _args(row: _EventRow) -> dict[str, Any]:
    """Return the ``args`` of one event: its kind, ids, collective and sizes, as Kineto names them."""
    args: dict[str, Any] = {"kind": row.kind}
    for column, key in (
        ("device", "device"),
        ("stream", "stream"),
        ("correlation", "correlation"),
        ("external_id", "External id"),
        ("tensor", "tensor"),
    ):
        value = getattr(row, column)
        if value is not None:
            args[key] = value
    if row.collective is None and row.in_bytes is None and row.out_bytes is None:
        return args
    for column, key in _COLLECTIVE_ARGS:
        value = getattr(row, column)
        if value is not None:
            args[key] = value
    if row.peer is not None:  # as torch names the other side: a receive's source, a send's destination
        args["Src Rank" if row.collective == "recv" else "Dst Rank"] = row.peer
    args.update(_sizes(row.dtype, row.in_bytes, row.out_bytes))
    return args


def _sizes(dtype: str | None, in_bytes: int | None, out_bytes: int | None) -> dict[str, Any]:
    """Return the sizes of a collective: bytes, and element counts of a dtype that gives the bytes back.

    The importer reads sizes as element counts times the dtype's size; when the dtype is unknown, or
    does not divide the bytes, the counts are written in ``Byte`` elements.
    """
    size = dtype_size(dtype)
    known = [b for b in (in_bytes, out_bytes) if b is not None]
    if size is None or any(b % size for b in known):
        dtype, size = ("Byte", 1) if known else (dtype, None)
    out: dict[str, Any] = {} if dtype is None else {"dtype": dtype}
    for key, nbytes, count_key in (
        ("in_bytes", in_bytes, "In msg nelems"),
        ("out_bytes", out_bytes, "Out msg nelems"),
    ):
        if nbytes is not None and size is not None:
            out[key] = nbytes
            out[count_key] = nbytes // size
    return out


def _added_events(windows: pl.DataFrame, comm: pl.DataFrame, base: int) -> list[dict[str, Any]]:
    """Return the spans of the tracks timeline adds: iterations, exposed and hidden communication."""
    out: list[dict[str, Any]] = []
    spans = windows.select(
        "rank",
        "iteration",
        pl.col("window").cast(pl.String),
        ts=_micros("start_ns", base),
        dur=((pl.col("end_ns") - pl.col("start_ns")) / 1000).cast(pl.Float64),
    )
    for rank, iteration, window, ts, dur in spans.iter_rows():
        name = "whole trace" if iteration is None else f"iteration {iteration}"
        args = {"window": window} if iteration is None else {"iteration": iteration, "window": window}
        out.append(_span(name, ITERATION_CAT, rank, 1, ts, dur, args))
    intervals = comm.select(
        "rank",
        pl.col("state").cast(pl.String),
        ts=_micros("start_ns", base),
        dur=((pl.col("end_ns") - pl.col("start_ns")) / 1000).cast(pl.Float64),
    )
    for rank, state, ts, dur in intervals.iter_rows():
        tid, cat = (2, EXPOSED_CAT) if state == "exposed" else (3, HIDDEN_CAT)
        out.append(_span(f"{state} communication", cat, rank, tid, ts, dur, {}))
    return out


def _span(
    name: str, cat: str, pid: int, tid: int, ts: float, dur: float, args: dict[str, Any]
) -> dict[str, Any]:
    return {"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}
