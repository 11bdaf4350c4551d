"""Kineto / PyTorch profiler Chrome-trace JSON → the canonical events frame.

Takes the decompressed bytes of one ``*.pt.trace.json`` file of any generation (torch 1.8/1.9 legacy
categories and string tids; integer epoch µs up to 2023; float epoch µs in early 2024; µs with three
decimals relative to ``baseTimeNanoseconds`` from 2024-05) and gives a :class:`FileResult` whose
frame follows :data:`timeline.schema.EVENTS_SCHEMA`: Int64 nanosecond times, event kinds classified
by :class:`ClassificationRules`, and collective metadata (name, bytes, group, sequence number) on
communication events.

Decoding is the hot path: msgspec decodes straight into slotted structs that keep only the fields the
analysis needs (unknown keys are skipped without being materialised), with the garbage collector
paused, and columns are built in bulk. Malformed files fall back to :mod:`timeline.importers.repair`.
"""

from __future__ import annotations

import functools
import gc
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import compress
from typing import Any, TypeVar, Union

import msgspec
import polars as pl

from timeline.errors import TraceContentError, TraceFormatError, position_of
from timeline.importers.collectives import collective_from_kernel, dtype_size, normalise_collective
from timeline.importers.result import Clock, FileResult, ImportOptions
from timeline.schema import EVENTS_SCHEMA, KIND, SOURCE, validate

__all__ = [
    "SKIPPED",
    "Columns",
    "add_counts",
    "build_frame",
    "decode_events",
    "extract_columns",
    "finish_columns",
    "finish_kineto",
    "parse_kineto",
]

T = TypeVar("T", str, int)


_NO_RAW = msgspec.Raw()


class _Args(msgspec.Struct, gc=False):
    """The event ``args`` keys the analysis reads; every other key is skipped while decoding."""

    external_id: Any = msgspec.field(default=None, name="External id")
    external_id_legacy: Any = msgspec.field(default=None, name="external id")  # torch <= 1.9
    correlation: Any = None
    device: Any = None
    stream: Any = None
    collective: Any = msgspec.field(default=None, name="Collective name")  # torch >= 2.4
    in_nelems: Any = msgspec.field(default=None, name="In msg nelems")
    out_nelems: Any = msgspec.field(default=None, name="Out msg nelems")
    in_size: Any = msgspec.field(default=None, name="In msg size")  # some torch 2.3 builds: nelems
    out_size: Any = msgspec.field(default=None, name="Out msg size")
    dtype: Any = None
    group_size: Any = msgspec.field(default=None, name="Group size")
    pg_name: Any = msgspec.field(default=None, name="Process Group Name")
    pg_ranks: Any = msgspec.field(default=None, name="Process Group Ranks")
    seq: Any = msgspec.field(default=None, name="Seq")  # 2026
    # Raw: kept as undecoded bytes, parsed only for the few collective ops that need them.
    # (msgspec does not accept ``Raw | None``: an empty Raw means absent. One shared empty Raw as
    # the default, not a default_factory: a factory is a Python call per event, a third of decoding.)
    input_dims: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input type")


class _Event(msgspec.Struct, gc=False, tag_field="ph", tag="X"):
    """A complete event (``"ph": "X"``), the only phase the analysis reads."""

    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    args: _Args | None = None


# Every other phase of the Chrome trace format decodes into an empty struct chosen by its "ph": its
# keys are skipped without being materialised (flows, instants and counters are a third of the
# events of a typical trace). An event with no "ph", or a phase not listed, fails validation and the
# document is decoded generically instead (slower, same result).
_OTHER_PHASES = "BEiIsftCMbneNODPRVvcSTpF()"
_SKIPPED: tuple[type[msgspec.Struct], ...] = tuple(
    msgspec.defstruct(f"_Phase{ord(ph)}", [], tag_field="ph", tag=ph, gc=False) for ph in _OTHER_PHASES
)
_AnyEvent = Union[_Event, *_SKIPPED]  # type: ignore[valid-type]  # a union of a runtime tuple of types


class _Document(msgspec.Struct, gc=False):
    # Key order varies (2024 traces put metadata after traceEvents); msgspec does not care.
    traceEvents: list[_AnyEvent] | None = None
    distributedInfo: Any = None
    baseTimeNanoseconds: Any = None
    host_name: Any = None


_DECODER = msgspec.json.Decoder(_Document)
_EVENTS_DECODER = msgspec.json.Decoder(list[_AnyEvent])

_GENERIC = msgspec.json.Decoder()

# Category → kind. Current names and the torch 1.8/1.9 legacy ones (Operator, Runtime, Kernel, …).
_KIND_BY_CAT: dict[str, str] = {
    "kernel": "compute",
    "Kernel": "compute",
    "gpu_memcpy": "memcpy",
    "Memcpy": "memcpy",
    "gpu_memset": "memset",
    "Memset": "memset",
    "cuda_sync": "sync",
    "cuda_runtime": "runtime",
    "cuda_driver": "runtime",
    "Runtime": "runtime",
    "cpu_op": "cpu_op",
    "Operator": "cpu_op",
    "user_annotation": "annotation",
    "gpu_user_annotation": "annotation",
    "python_function": "python_function",
}
# Categories of activities that run on a GPU: pid is the device index, tid the stream.
_GPU_CATS: tuple[str, ...] = (
    "kernel",
    "Kernel",
    "gpu_memcpy",
    "Memcpy",
    "gpu_memset",
    "Memset",
    "cuda_sync",
    "gpu_user_annotation",
)
# CPU-side records that describe a collective and carry its sizes on older traces.
_COMM_OP_PREFIXES: tuple[str, ...] = (
    "nccl:",
    "gloo:",
    "mpi:",
    "ucc:",
    "hccl:",
    "xccl:",
    "record_param_comms",
)
_COMM_OP_REGEX = r"^(?:nccl:|gloo:|mpi:|ucc:|hccl:|xccl:|record_param_comms$)"
_NO_DATA = ("wait", "barrier")
_KERNEL_CATS = ("kernel", "Kernel")
_UNMEASURED_CATS = ("cpu_op", "Operator", "python_function")
SKIPPED = "_skipped"
"""Key of the dropped counts of :func:`build_frame` that holds the valid events skipped on purpose."""
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_MAX_US = 4.0e15 * 2  # µs: twice today's epoch; ns stays far inside Int64
_SAME_SIZE = ("all_reduce", "broadcast", "all_to_all", "send", "recv", "send_recv")
_DIGITS = re.compile(r"(\d+)")
# Timestamps below this many µs (~1973) are not epoch times: they count from baseTimeNanoseconds.
_EPOCH_US_FLOOR = 1e14


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector: decoding allocates millions of objects that are not cycles."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _decode(data: bytes, source: str, warnings: list[str]) -> _Document:
    """Decode the document, repairing malformed JSON where that is safe."""
    try:
        return _DECODER.decode(data)
    except msgspec.ValidationError:
        # Valid JSON with an unexpected shape somewhere (e.g. args that is a list): decode generically.
        return _document_from_generic(_GENERIC.decode(data), source)
    except (msgspec.DecodeError, UnicodeDecodeError):
        # msgspec raises UnicodeDecodeError, not DecodeError, for invalid UTF-8 inside a string.
        pass
    from timeline.importers.repair import repair_json  # damaged input only

    repaired = repair_json(data, source=source)
    warnings.extend(repaired.warnings)
    try:
        return _DECODER.decode(repaired.data)
    except msgspec.ValidationError:
        return _document_from_generic(_GENERIC.decode(repaired.data), source)
    except msgspec.DecodeError as exc:  # pragma: no cover - repair_json only returns decodable data
        raise TraceFormatError(f"{source}: {exc}") from exc


def decode_events(data: bytes | bytearray | memoryview, source: str) -> list[Any]:
    """Decode a JSON array of trace events (a chunk of ``traceEvents``), tolerating odd shapes.

    Raises
    ------
    msgspec.DecodeError
        The chunk is not valid JSON (the caller locates the error in the file).
    """
    try:
        return _EVENTS_DECODER.decode(data)
    except msgspec.ValidationError:
        events = _document_from_generic({"traceEvents": _GENERIC.decode(data)}, source).traceEvents
        return events or []


def _document_from_generic(obj: Any, source: str) -> _Document:
    """Build a document from generically decoded JSON, dropping events of an unusable shape."""
    if not isinstance(obj, dict):
        msg = f"{source}:1:1: expected a JSON object with traceEvents (a PyTorch profiler trace)"
        raise TraceFormatError(msg)
    events_in = obj.get("traceEvents")
    events: list[Any] = []
    if isinstance(events_in, list):
        arg_fields = {f.encode_name: f.name for f in msgspec.structs.fields(_Args)}
        for item in events_in:
            if not isinstance(item, dict) or item.get("ph") != "X":
                continue
            raw_args = item.get("args")
            args = None
            if isinstance(raw_args, dict):
                kwargs: dict[str, Any] = {}
                for key, attr in arg_fields.items():
                    if key in raw_args:
                        value = raw_args[key]
                        if attr in ("input_dims", "input_type"):
                            value = msgspec.Raw(msgspec.json.encode(value))
                        kwargs[attr] = value
                args = _Args(**kwargs)
            events.append(
                _Event(
                    cat=item.get("cat"),
                    name=item.get("name"),
                    pid=item.get("pid"),
                    tid=item.get("tid"),
                    ts=item.get("ts"),
                    dur=item.get("dur"),
                    args=args,
                )
            )
    return _Document(
        traceEvents=events if isinstance(events_in, list) else None,
        distributedInfo=obj.get("distributedInfo"),
        baseTimeNanoseconds=obj.get("baseTimeNanoseconds"),
        host_name=obj.get("host_name"),
    )


def _as_int(value: Any) -> int | None:
    """Return an int from an int, an integral float or a decimal string; None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def _float_column(values: list[Any]) -> pl.Series:
    """Return a Float64 series of times; integer µs (most traces before 2023) take the fast path."""
    try:
        return pl.Series(values, dtype=pl.Int64()).cast(pl.Float64())
    except (TypeError, OverflowError):  # floats, text, huge integers
        return pl.Series(values, dtype=pl.Float64(), strict=False)


def _int_column(values: list[Any]) -> pl.Series:
    """Return an Int64 series of an argument (device, stream, ids); anything else is null."""
    return pl.Series(values, dtype=pl.Int64(), strict=False)


def _id_column(values: list[Any]) -> pl.Series:
    """Return an Int64 series from pids/tids that may be ints, numeric strings or labels.

    Legacy torch 1.9 writes tids as strings ("25738", "stream 7"); some pids are labels ("Spans",
    "Traces"): those become null, as do ids of any other type and integers beyond Int64.
    """
    types = list(map(type, values))  # the scans below run in C: no Python loop over every event
    n_str = types.count(str)
    if n_str + types.count(int) + types.count(type(None)) != len(values):
        # floats, booleans, objects: not ids (rare; the slow path)
        values = [v if v.__class__ is int or v.__class__ is str else None for v in values]
        types = list(map(type, values))
    strings: list[int] = []
    ints = values
    if n_str:
        ints = list(values)
        at = -1
        for _ in range(n_str):
            at = types.index(str, at + 1)
            strings.append(at)
            ints[at] = None
    try:
        series = pl.Series(ints, dtype=pl.Int64())
    except (OverflowError, TypeError):  # an id beyond Int64: not an id timeline can use
        series = pl.Series(
            [v if v is not None and _INT64_MIN <= v <= _INT64_MAX else None for v in ints], dtype=pl.Int64()
        )
    if not strings:
        return series
    # Few distinct labels ("Spans", "stream 7"): parse each once.
    texts = [values[i] for i in strings]
    mapping = {t: _id_from_text(t) for t in set(texts)}
    parsed = [(i, mapping[t]) for i, t in zip(strings, texts, strict=True)]
    known = [(i, v) for i, v in parsed if v is not None and _INT64_MIN <= v <= _INT64_MAX]
    if not known:
        return series
    return series.scatter([i for i, _ in known], pl.Series([v for _, v in known], dtype=pl.Int64()))


def _id_from_text(text: str) -> int | None:
    """Return the number of an id written as text ("25738", "stream 7"), None for a label."""
    stripped = text.strip()
    if stripped.startswith("stream"):
        stripped = stripped[len("stream") :].strip()
    return int(stripped) if stripped.isdigit() else None


def _ns_from_us(us: pl.Expr) -> pl.Expr:
    """Convert float µs to Int64 ns without losing the ns digits of large epoch values.

    ``ts * 1000`` on epoch µs (~1.7e15) exceeds 2**53 and would round to 256 ns steps; splitting
    the whole µs from the fraction keeps every digit the file has.
    """
    whole = us.floor()
    return whole.cast(pl.Int64) * 1000 + ((us - whole) * 1000).round(0).cast(pl.Int64)


def _parse_dims_bytes(dims_raw: msgspec.Raw, types_raw: msgspec.Raw) -> tuple[int | None, str | None]:
    """Return (bytes, dtype) of the first tensor argument of a collective op from its shapes.

    ``Input Dims`` is a list with one entry per argument: a shape (a list of ints) for a tensor, a
    list of shapes for a TensorList. ``Input type`` holds the matching dtype names.
    """
    if not dims_raw or not types_raw:
        return None, None
    try:
        dims = _GENERIC.decode(dims_raw)
        types = _GENERIC.decode(types_raw)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return None, None
    if not isinstance(dims, list) or not isinstance(types, list) or not dims or not types:
        return None, None
    first, dtype = dims[0], types[0]
    if not isinstance(dtype, str):
        return None, None
    size = dtype_size(dtype)
    if size is None or not isinstance(first, list):
        return None, None
    if not all(isinstance(d, int) for d in first):
        return None, None
    nelems = 1
    for d in first:
        nelems *= d
    return nelems * size, dtype


def parse_kineto(data: bytes, *, source: str, options: ImportOptions | None = None) -> FileResult:
    """Parse one PyTorch profiler (Kineto) trace into the canonical events frame.

    Parameters
    ----------
    data
        The decompressed content of one ``.pt.trace.json`` file.
    source
        The file name used in messages.
    options
        Classification rules and whether to keep ``python_function`` events.

    Returns
    -------
    FileResult
        Events (``rank`` null: the loader fills it in), and the rank, world size, backend and host
        the file declares.

    Raises
    ------
    TraceFormatError
        Not JSON, JSON that is not a profiler trace, or damage that cannot be repaired safely.
    TraceContentError
        A trace with no ``traceEvents`` key.
    """
    options = options or ImportOptions()
    warnings: list[str] = []
    with _gc_paused():
        doc = _decode(data, source, warnings)
        if doc.traceEvents is None:
            line, col = position_of(data, 0)
            msg = (
                f"{source}:{line}:{col}: no traceEvents array: not a PyTorch profiler trace "
                "(export it with prof.export_chrome_trace or torch.profiler.tensorboard_trace_handler)"
            )
            raise TraceContentError(msg)
        frame, dropped, meta = build_frame(doc.traceEvents, options)
        del doc.traceEvents
    metadata = {
        "distributedInfo": doc.distributedInfo,
        "baseTimeNanoseconds": doc.baseTimeNanoseconds,
        "host_name": doc.host_name,
    }
    return finish_kineto(frame, dropped, metadata, source=source, warnings=warnings, meta=meta)


def finish_kineto(
    frame: pl.DataFrame,
    dropped: dict[str, int],
    metadata: dict[str, Any],
    *,
    source: str,
    warnings: list[str],
    meta: pl.DataFrame | None = None,
) -> FileResult:
    """Turn the frame of :func:`build_frame` into a :class:`FileResult`.

    Anchors relative times on ``baseTimeNanoseconds``, links collectives to their CPU ops, and
    reads the rank, world size, backend and host from the trace's metadata. ``meta`` is the sparse
    collective metadata of :func:`build_frame`, keyed by row position in ``frame``.
    """
    for what, count in dropped.items():
        if count and what != SKIPPED:
            warnings.append(f"{source}: dropped {count} {what}")
    raw_info = metadata.get("distributedInfo")
    info: dict[str, Any] = raw_info if isinstance(raw_info, dict) else {}
    base_ns = _as_int(metadata.get("baseTimeNanoseconds"))
    clock: Clock = "epoch"
    if frame.height:
        median_start_us = frame.get_column("start_ns").median()
        relative = isinstance(median_start_us, (int, float)) and median_start_us < _EPOCH_US_FLOOR * 1000
        if relative:
            # torch >= 2.4: ts counts µs from baseTimeNanoseconds (the wall clock floored to a
            # multiple of 7,889,238 s). Without a base the origin is unknown.
            if base_ns is not None:
                frame = frame.with_columns(pl.col("start_ns") + base_ns, pl.col("end_ns") + base_ns)
            else:
                clock = "relative"
    frame = _attach_collectives(frame.drop("_row", strict=False), info, meta)
    world_size = _as_int(info.get("world_size"))
    backend = info.get("backend")
    host = metadata.get("host_name")
    return FileResult(
        events=validate(frame, EVENTS_SCHEMA, what=source),
        format="kineto",
        rank=_as_int(info.get("rank")),
        claims_rank=True,
        world_size=world_size,
        backend=backend if isinstance(backend, str) else None,
        host=host if isinstance(host, str) else None,
        clock=clock,
        warnings=warnings,
        skipped=dropped.get(SKIPPED, 0),
    )


def _measured(
    cat: pl.Series, name: pl.Series, ts: pl.Series, dur: pl.Series, options: ImportOptions
) -> tuple[pl.Series, dict[str, int]]:
    """Return the mask of the events the overlap analysis reads on a trace with GPU kernels.

    Its overlap is measured on the GPU: CPU operators and Python frames are skipped unless they are
    collective ops (the candidates kernels are linked to), CPU-side collectives, or
    ``ProfilerStep#N`` (torch 1.9). A CPU-only trace keeps everything (not decided here).

    Also returns the counts of the skipped events as a full load counts them: invalid ones under
    their :func:`_invalid` reason, the valid ones under :data:`SKIPPED`.
    """
    needed = f"{_COMM_OP_REGEX}|{options.rules.cpu_comm_regex()}|^ProfilerStep#"
    keep = (~cat.is_in(_UNMEASURED_CATS)).fill_null(True) | name.str.contains(needed).fill_null(False)
    n_skipped = keep.len() - int(keep.sum())
    if n_skipped == 0 or _all_valid(ts, dur):
        # the usual case: every time is valid, so every skipped event counts under SKIPPED
        return keep, ({SKIPPED: n_skipped} if n_skipped else {})
    missing, out_of_range, negative = _invalid(pl.col("ts"), pl.col("dur"))
    *invalid, any_invalid = (
        pl.DataFrame({"skipped": ~keep, "ts": ts, "dur": dur})
        .filter("skipped")
        .select(
            m=missing.sum(),
            o=out_of_range.sum(),
            n=negative.sum(),
            a=(missing | out_of_range | negative).sum(),
        )
        .row(0)
    )
    # an event may be both out of range and negative: counted under both reasons, skipped once
    counts = dict(zip(_INVALID_REASONS, map(int, invalid), strict=True))
    counts[SKIPPED] = n_skipped - int(any_invalid)
    return keep, counts


def _metadata_candidates(kept: list[Any], args: list[_Args]) -> list[int]:
    """Return, in order, the positions of the few events that may carry collective metadata."""
    return [
        i
        for i, a in enumerate(args)
        if a.collective is not None
        or a.in_nelems is not None
        or a.in_size is not None
        or (a.input_dims and isinstance(name := kept[i].name, str) and name.startswith(_COMM_OP_PREFIXES))
    ]


def add_counts(into: dict[str, int], counts: dict[str, int]) -> None:
    """Add drop counts (:func:`build_frame`'s) to ``into``, key by key."""
    for key, count in counts.items():
        into[key] = into.get(key, 0) + count


_INVALID_REASONS = ("events without ts or dur", "events with times out of range", "events with end < start")
"""The drop counts' keys for the three masks of :func:`_invalid`, in their order."""


def _all_valid(ts: pl.Series, dur: pl.Series) -> bool:
    """Whether no time is missing, out of range or negative (:func:`_invalid`), from a few scans.

    Cheaper than evaluating the three masks: the usual trace has no invalid time at all.
    """
    if ts.null_count() or dur.null_count() or ts.is_nan().any() or dur.is_nan().any():
        return False
    if ts.len() == 0:
        return True
    low, high, shortest, longest = (float(x) for x in (ts.min(), ts.max(), dur.min(), dur.max()))  # type: ignore[arg-type]
    return abs(low) <= _MAX_US and abs(high) <= _MAX_US and shortest >= 0 and longest <= _MAX_US


def _invalid(ts: pl.Expr, dur: pl.Expr) -> tuple[pl.Expr, pl.Expr, pl.Expr]:
    """Return the masks of events without times, with times out of range, with end < start."""
    missing = ts.is_null() | dur.is_null() | ts.is_nan() | dur.is_nan()
    # Beyond ~292 years of µs the ns value overflows Int64: not a time any profiler writes.
    out_of_range = ~missing & ((ts.abs() > _MAX_US) | (dur > _MAX_US))
    negative = ~missing & (dur < 0)
    return missing, out_of_range, negative


def build_frame(
    events: list[Any], options: ImportOptions
) -> tuple[pl.DataFrame, dict[str, int], pl.DataFrame]:
    """Build the frame of complete ('X') events in bulk; count what was dropped and why.

    Returns the frame (times in ns, kinds classified, ``name``/``cat`` categorical), the counts of
    dropped events, and the sparse collective metadata of the few events that carry some
    (:func:`_metadata_frame`), keyed by ``_row``: the row's position in the frame.
    """
    return finish_columns(extract_columns(events, options), options)


@dataclass(frozen=True)
class Columns:
    """The columns of a chunk of events as read from the structs (:func:`extract_columns`)."""

    frame: pl.DataFrame
    """name, cat (strings), ts, dur (µs), pid, tid, device, stream, correlation, external_id."""
    meta: pl.DataFrame
    """The sparse collective metadata, keyed by ``_row``."""
    skipped: dict[str, int]
    """The events skipped on purpose (:attr:`ImportOptions.overlap_only`), counted as a full load
    counts them: the invalid ones under their reason, the valid ones under :data:`SKIPPED`."""
    kernels: bool
    """Whether the events held a GPU kernel (looked for only with :attr:`ImportOptions.overlap_only`)."""

    @staticmethod
    def concat(parts: list[Columns]) -> Columns:
        """Return the columns of consecutive chunks as one (metadata re-keyed to the joined rows)."""
        if len(parts) == 1:
            return parts[0]
        metas: list[pl.DataFrame] = []
        rows = 0
        for part in parts:
            metas.append(part.meta.with_columns(pl.col("_row") + rows))
            rows += part.frame.height
        skipped: dict[str, int] = {}
        for part in parts:
            add_counts(skipped, part.skipped)
        return Columns(
            frame=pl.concat([part.frame for part in parts], how="vertical"),
            meta=pl.concat(metas, how="vertical"),
            skipped=skipped,
            kernels=any(part.kernels for part in parts),
        )


def extract_columns(events: list[Any], options: ImportOptions, *, gpu: bool | None = None) -> Columns:
    """Read the decoded structs into columns: the part of :func:`build_frame` that holds the GIL.

    :func:`finish_columns` does the rest in polars (which releases the GIL), so a reader can decode
    the next chunk while the previous one is finished in a thread.

    ``gpu`` says whether the trace holds GPU kernels when that is known beyond ``events`` (a chunk
    of a trace whose kernels come later, see :attr:`ImportOptions.overlap_only`); None: ``events``
    are the whole trace and tell.
    """
    complete = _Event
    kept = [e for e in events if e.__class__ is complete]
    cats = [e.cat for e in kept]
    if not options.include_python and "python_function" in cats:
        kept = [e for e, c in zip(kept, cats, strict=True) if c != "python_function"]
        cats = [c for c in cats if c != "python_function"]
    cat = pl.Series(cats, dtype=pl.String(), strict=False)
    name = pl.Series([e.name for e in kept], dtype=pl.String(), strict=False)
    ts = _float_column([e.ts for e in kept])
    dur = _float_column([e.dur for e in kept])
    skipped: dict[str, int] = {}
    kernels = False
    if options.overlap_only:
        kernels = any(c in cats for c in _KERNEL_CATS)
        if kernels or gpu:
            # of the skipped events, only the times are read (to count them as a full load would)
            keep, skipped = _measured(cat, name, ts, dur, options)
            if not keep.all():
                kept = list(compress(kept, keep.to_list()))
                cat, name, ts, dur = cat.filter(keep), name.filter(keep), ts.filter(keep), dur.filter(keep)
    del cats
    n = len(kept)
    empty = _Args()
    args = [e.args or empty for e in kept]
    frame = pl.DataFrame(
        {
            "name": name,
            "cat": cat,
            "ts": ts,
            "dur": dur,
            "pid": _id_column([e.pid for e in kept]),
            "tid": _id_column([e.tid for e in kept]),
            "a_device": _int_column([a.device for a in args]),
            "a_stream": _int_column([a.stream for a in args]),
            "correlation": _int_column([a.correlation for a in args]),
            "external_id": _int_column([a.external_id for a in args]),
        },
        height=n,
    )
    # torch <= 1.9 writes "External id" on CPU ops but "external id" on runtime calls and GPU
    # activities, which come after thousands of CPU ops: look at every event, not a prefix.
    legacy_ids = [a.external_id_legacy for a in args]
    if legacy_ids.count(None) != n:
        legacy = pl.Series(legacy_ids, dtype=pl.Int64(), strict=False)
        frame = frame.with_columns(pl.coalesce(pl.col("external_id"), legacy).alias("external_id"))
    # Collective metadata lives on few events: gather it sparsely.
    meta_rows: list[tuple[Any, ...]] = []
    for i in _metadata_candidates(kept, args):
        e, a = kept[i], args[i]
        if a.collective is not None or a.in_nelems is not None or a.in_size is not None:
            meta_rows.append(
                (
                    i,
                    a.collective,
                    a.in_nelems if a.in_nelems is not None else a.in_size,
                    a.out_nelems if a.out_nelems is not None else a.out_size,
                    a.dtype,
                    a.group_size,
                    a.pg_name,
                    a.pg_ranks,
                    a.seq,
                    None,
                    None,
                )
            )
        elif a.input_dims and isinstance(e.name, str) and e.name.startswith(_COMM_OP_PREFIXES):
            nbytes, dtype = _parse_dims_bytes(a.input_dims, a.input_type)
            meta_rows.append((i, None, None, None, dtype, None, None, None, None, nbytes, None))
    # Kept sparse: a few thousand rows, not eleven mostly-null columns over every event.
    return Columns(frame=frame, meta=_metadata_frame(meta_rows), skipped=skipped, kernels=kernels)


def finish_columns(
    columns: Columns, options: ImportOptions
) -> tuple[pl.DataFrame, dict[str, int], pl.DataFrame]:
    """Finish :func:`extract_columns` in polars: drop invalid times, convert to ns, classify."""
    frame, meta = columns.frame, columns.meta
    missing, out_of_range, negative = _invalid(pl.col("ts"), pl.col("dur"))
    counts = (
        (0, 0, 0)
        if _all_valid(frame.get_column("ts"), frame.get_column("dur"))
        else frame.select(m=missing.sum(), o=out_of_range.sum(), n=negative.sum()).row(0)
    )
    dropped: dict[str, int] = {reason: int(c) for reason, c in zip(_INVALID_REASONS, counts, strict=True)}
    # skipped events are counted as a full load counts them: invalid ones as dropped, the others in
    # the file's events
    add_counts(dropped, columns.skipped)
    if any(counts):
        frame = frame.with_row_index("_row").filter(~missing & ~out_of_range & ~negative)
        # re-key the metadata to the positions of its rows in the filtered frame
        positions = frame.select("_row").with_row_index("_pos")
        meta = (
            meta.join(positions, on="_row", how="inner")
            .drop("_row")
            .rename({"_pos": "_row"})
            .select(meta.columns)
        )
        frame = frame.drop("_row")

    start = _ns_from_us(pl.col("ts"))
    dur_ns = (pl.col("dur") * 1000).round(0).cast(pl.Int64)
    is_gpu = pl.col("cat").is_in(_GPU_CATS)
    frame = frame.with_columns(pl.col("name", "cat").cast(pl.Categorical()))
    # The kind depends on the category and the name alone: decided once per distinct pair (a few
    # thousand of a trace's events, the regexes being the costly part), then joined back.
    pairs = frame.select("cat", "name").unique()
    as_text = pairs.select(pl.col("cat", "name").cast(pl.String))
    classified = pairs.with_columns(
        as_text.select(
            kind=_kind_expr(options).cast(KIND),
            # CPU-side collective ops, the candidates kernels are linked to (_attach_collectives)
            _comm_op=pl.col("name").str.contains(_COMM_OP_REGEX).fill_null(False),
        )
    )
    frame = (
        frame.join(classified, on=["cat", "name"], how="left", nulls_equal=True, maintain_order="left")
        .with_columns(start_ns=start, dur_ns=dur_ns)
        .with_columns(
            end_ns=pl.col("start_ns") + pl.col("dur_ns"),
            device=pl.when(is_gpu).then(pl.coalesce("a_device", "pid")).cast(pl.Int32),
            stream=pl.when(is_gpu).then(pl.coalesce("a_stream", "tid")),
            source=pl.lit("kineto", dtype=SOURCE),
            rank=pl.lit(None, dtype=pl.Int32),
            tensor=pl.lit(None, dtype=pl.Categorical()),
        )
        .drop("ts", "dur", "a_device", "a_stream")
    )
    return frame, dropped, meta


def _metadata_frame(rows: list[tuple[Any, ...]]) -> pl.DataFrame:
    """Return the sparse collective metadata as typed columns keyed by row index."""
    if not rows:  # most chunks: eleven empty series built once (a chunk's build is ~0.2 ms)
        return _empty_metadata().clone()
    return _metadata_columns(rows)


@functools.cache
def _empty_metadata() -> pl.DataFrame:
    return _metadata_columns([])


def _metadata_columns(rows: list[tuple[Any, ...]]) -> pl.DataFrame:
    columns: list[tuple[Any, ...]] = list(zip(*rows, strict=True)) if rows else [() for _ in range(11)]
    pg_ranks = [r if r is None or isinstance(r, str) else msgspec.json.encode(r).decode() for r in columns[7]]
    return pl.DataFrame(
        {
            "_row": pl.Series(columns[0], dtype=pl.UInt32()),
            "m_collective": pl.Series(
                [c if isinstance(c, str) else None for c in columns[1]], dtype=pl.String()
            ),
            "m_in_nelems": pl.Series(columns[2], dtype=pl.Int64(), strict=False),
            "m_out_nelems": pl.Series(columns[3], dtype=pl.Int64(), strict=False),
            "m_dtype": pl.Series([d if isinstance(d, str) else None for d in columns[4]], dtype=pl.String()),
            "m_group_size": pl.Series(columns[5], dtype=pl.Int32(), strict=False),
            "m_pg_name": pl.Series([None if p is None else str(p) for p in columns[6]], dtype=pl.String()),
            "m_pg_ranks": pl.Series(pg_ranks, dtype=pl.String()),
            "m_seq": pl.Series(columns[8], dtype=pl.Int64(), strict=False),
            "m_in_bytes": pl.Series(columns[9], dtype=pl.Int64(), strict=False),
            "m_out_bytes": pl.Series(columns[10], dtype=pl.Int64(), strict=False),
        }
    )


def _kind_expr(options: ImportOptions) -> pl.Expr:
    """Return the expression that classifies each event into a kind."""
    rules = options.rules
    base = pl.col("cat").replace_strict(_KIND_BY_CAT, default="other", return_dtype=pl.String)
    name = pl.col("name")
    is_kernel = pl.col("cat").is_in(("kernel", "Kernel"))
    is_cpu = pl.col("cat").is_in(("cpu_op", "Operator", "user_annotation"))
    return (
        pl.when(is_kernel & name.str.contains(rules.comm_kernel_regex()))
        .then(pl.lit("communication"))
        .when(is_cpu & name.str.contains(rules.cpu_comm_regex()))
        .then(pl.lit("communication"))
        .when(is_cpu & name.str.contains(rules.cpu_sync_regex()))
        .then(pl.lit("sync"))
        .when(name.str.starts_with("ProfilerStep#"))
        .then(pl.lit("annotation"))
        .otherwise(base)
    )


def _attach_collectives(frame: pl.DataFrame, info: dict[str, Any], meta: pl.DataFrame | None) -> pl.DataFrame:
    """Fill the collective columns of communication events.

    Sources, first match wins: the kernel's own args (torch >= 2.4); the CPU op that launched it
    (``record_param_comms`` args, or ``nccl:*`` / ``gloo:*`` shapes × dtype on older traces), found
    through the launch: the kernel's ``correlation`` names its runtime launch, and the launch lies
    inside the innermost collective op of its thread; the kernel's name.

    Everything is computed on the few rows involved (communication events, collective ops, their
    metadata) and scattered into the frame: no join or sort over every event.
    """
    frame = frame.with_row_index("_row")
    meta = _normalised_metadata(meta)
    ops = _collective_ops(frame, meta)
    linked = _link_kernels_to_ops(frame, ops)
    comm = (
        frame.filter(pl.col("kind") == "communication")
        .select("_row", "name")
        .join(meta, on="_row", how="left", maintain_order="left")
        .join(linked, on="_row", how="left", maintain_order="left")
    )
    values = _collective_values(comm, info)
    return _scatter_collective_columns(frame, values).drop("_row", "_comm_op")


def _normalised_metadata(meta: pl.DataFrame | None) -> pl.DataFrame:
    """Normalise the collective names of the metadata rows and derive their bytes from element counts."""
    if meta is None:
        meta = _metadata_frame([])
    return meta.with_columns(
        m_collective=_mapped(meta, "m_collective", normalise_collective),
        m_in_bytes=pl.coalesce("m_in_bytes", pl.col("m_in_nelems") * _mapped(meta, "m_dtype", dtype_size)),
        m_out_bytes=pl.coalesce("m_out_bytes", pl.col("m_out_nelems") * _mapped(meta, "m_dtype", dtype_size)),
    )


def _collective_ops(frame: pl.DataFrame, meta: pl.DataFrame) -> pl.DataFrame:
    """Gather the CPU-side collective ops (record_param_comms, nccl:*), the candidates a kernel is linked to.

    One row per op, its thread and span, and its ``op_*`` collective values (from its metadata,
    else its name).
    """
    op_rows = (
        frame.filter(pl.col("_comm_op"))
        .select("_row", "pid", "tid", "start_ns", "end_ns", "name", "external_id")
        .join(meta, on="_row", how="left", maintain_order="left")
    )
    return op_rows.select(
        "pid",
        "tid",
        op_start=pl.col("start_ns"),
        op_end=pl.col("end_ns"),
        op_name=pl.col("name"),
        op_external_id=pl.col("external_id"),
        op_collective=pl.coalesce("m_collective", _mapped(op_rows, "name", normalise_collective)),
        op_in_bytes=pl.col("m_in_bytes"),
        op_out_bytes=pl.col("m_out_bytes"),
        op_dtype=pl.col("m_dtype"),
        op_group_size=pl.col("m_group_size"),
        op_pg_name=pl.col("m_pg_name"),
        op_pg_ranks=pl.col("m_pg_ranks"),
        op_seq=pl.col("m_seq"),
    )


def _link_kernels_to_ops(frame: pl.DataFrame, ops: pl.DataFrame) -> pl.DataFrame:
    """Link each communication kernel to the collective op that launched it.

    Through its launch (the runtime event of the same ``correlation``, inside the innermost op of
    its thread) first, else through the op's ``external_id``. One row per linked kernel ``_row``,
    with the op's ``op_*`` values; empty (with those columns) when no kernel or no op.
    """
    kernels = frame.filter((pl.col("kind") == "communication") & pl.col("device").is_not_null()).select(
        "_row", "correlation", "external_id"
    )
    if not (kernels.height and ops.height):
        return pl.DataFrame(
            schema={"_row": pl.UInt32, **{c: ops.schema[c] for c in ops.columns if c.startswith("op_")}}
        ).drop("op_start", "op_end", "op_external_id")
    launches = (
        frame.filter((pl.col("kind") == "runtime") & pl.col("correlation").is_not_null())
        .select("correlation", l_pid="pid", l_tid="tid", launch_ns="start_ns")
        .unique("correlation", keep="first")
    )
    via_launch = (
        kernels.join(launches, on="correlation", how="inner")
        .sort("launch_ns")
        .join_asof(
            ops.sort("op_start"),
            left_on="launch_ns",
            right_on="op_start",
            by_left=["l_pid", "l_tid"],
            by_right=["pid", "tid"],
            strategy="backward",
            check_sortedness=False,  # sorted just above; polars cannot check it per group
        )
        .filter(pl.col("op_end") >= pl.col("launch_ns"))
    )
    via_external = kernels.join(
        ops.filter(pl.col("op_external_id").is_not_null()).unique("op_external_id", keep="last"),
        left_on="external_id",
        right_on="op_external_id",
        how="inner",
    )
    op_cols = [
        c for c in ops.columns if c.startswith("op_") and c not in ("op_start", "op_end", "op_external_id")
    ]
    return pl.concat(
        [via_launch.select("_row", *op_cols), via_external.select("_row", *op_cols)],
        how="vertical_relaxed",
    ).unique("_row", keep="first", maintain_order=True)


def _collective_values(comm: pl.DataFrame, info: dict[str, Any]) -> pl.DataFrame:
    """Resolve the collective columns of the communication events, first source that has them.

    ``comm`` holds each event's ``_row`` and name, its own metadata (``m_*``) and its linked op's
    values (``op_*``); ``info`` is the trace's ``distributedInfo``.
    """
    comm_names = _mapped(comm, "name", _collective_from_name)
    collective = pl.coalesce("m_collective", "op_collective", comm_names)
    carries_data = ~collective.is_in(_NO_DATA)
    # With a single process group in distributedInfo.pg_config, every collective belongs to it.
    pg_name = pl.coalesce("m_pg_name", "op_pg_name", pl.lit(_single_group_name(info), dtype=pl.String))
    group_size = pl.coalesce("m_group_size", "op_group_size", _group_size_from_info(info, pg_name))
    return comm.select(
        "_row",
        collective=collective,
        in_bytes=pl.when(carries_data).then(pl.coalesce("m_in_bytes", "op_in_bytes")),
        out_bytes=pl.when(carries_data).then(
            pl.coalesce(
                "m_out_bytes",
                "op_out_bytes",
                # Only the input shape is recorded on older traces; these collectives write as much
                # as they read (all-to-all: in total), so the output size is known too.
                pl.when(collective.is_in(_SAME_SIZE)).then(pl.coalesce("m_in_bytes", "op_in_bytes")),
            )
        ),
        dtype=pl.coalesce("m_dtype", "op_dtype"),
        group_size=group_size,
        pg_name=pg_name,
        pg_ranks=pl.coalesce("m_pg_ranks", "op_pg_ranks"),
        seq=pl.coalesce("m_seq", "op_seq"),
    )


def _scatter_collective_columns(frame: pl.DataFrame, values: pl.DataFrame) -> pl.DataFrame:
    """Add the collective columns to ``frame``: the values at their ``_row``, null everywhere else."""
    rows = values.get_column("_row")
    columns = []
    for name in ("collective", "in_bytes", "out_bytes", "dtype", "group_size", "pg_name", "pg_ranks", "seq"):
        dtype = EVENTS_SCHEMA[name]
        empty = pl.repeat(None, frame.height, dtype=dtype, eager=True).alias(name)
        columns.append(empty.scatter(rows, values.get_column(name).cast(dtype)) if rows.len() else empty)
    return frame.with_columns(columns)


def _single_group_name(info: dict[str, Any]) -> str | None:
    """Return the name of the only process group in ``distributedInfo.pg_config``, or None."""
    config = info.get("pg_config")
    if isinstance(config, list) and len(config) == 1 and isinstance(config[0], dict):
        name = config[0].get("pg_name")
        return None if name is None else str(name)
    return None


def _group_size_from_info(info: dict[str, Any], pg_name: pl.Expr) -> pl.Expr:
    """Return the group size of a process group from ``distributedInfo.pg_config``, by its name."""
    config = info.get("pg_config")
    sizes: dict[str, int] = {}
    if isinstance(config, list):
        for entry in config:
            if isinstance(entry, dict) and entry.get("pg_name") is not None:
                size = _as_int(entry.get("pg_size"))
                if size is not None:
                    sizes[str(entry["pg_name"])] = size
    if not sizes:
        return pl.lit(None, dtype=pl.Int32)
    return pg_name.replace_strict(sizes, default=None, return_dtype=pl.Int32)


def _collective_from_name(name: str) -> str | None:
    """Return the collective of a communication event from its name: a kernel or a gloo op."""
    return collective_from_kernel(name) or normalise_collective(name)


def _mapped(
    frame: pl.DataFrame, column: str, fn: Callable[[str], T | None], where: pl.Expr | None = None
) -> pl.Expr:
    """Return ``fn`` applied to ``column`` through a mapping built from its distinct values.

    Names repeat heavily (thousands of launches of a few kernels): calling Python once per distinct
    value instead of once per row keeps this off the hot path.
    """
    values = frame.filter(where) if where is not None else frame
    distinct = values.get_column(column).drop_nulls().unique().to_list()
    mapping = {v: r for v in distinct if (r := fn(v)) is not None}
    if not mapping:
        return pl.lit(None)
    dtype = pl.Int64 if isinstance(next(iter(mapping.values())), int) else pl.String
    return pl.col(column).replace_strict(mapping, default=None, return_dtype=dtype)
