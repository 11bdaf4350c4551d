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
from timeline.importers.groups import declared_groups
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
    pg_desc: Any = msgspec.field(default=None, name="Process Group Description")  # torch >= 2.4
    seq: Any = msgspec.field(default=None, name="Seq")  # 2026
    # torch >= 2.10: c10::get_hash(pg name, seq, isP2P, rank start, stride, size), a size_t (uint64)
    comms_id: Any = msgspec.field(default=None, name="Comms Id")
    dst_rank: Any = msgspec.field(default=None, name="Dst Rank")  # send: the peer's global rank
    src_rank: Any = msgspec.field(default=None, name="Src Rank")  # recv: the peer's global rank
    # Raw: kept as undecoded bytes, parsed only for the few collective ops that need them.
    # (msgspec does not accept ``Raw | None``: an empty Raw means absent. One shared empty Raw as
    # the default, not a default_factory: a factory is a Python call per event, a third of decoding.)
    input_dims: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input type")
    # c10d::send / c10d::recv_ (record_shapes): [tensors, group, peer's rank in the group, tag]
    concrete_inputs: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Concrete Inputs")


class _Event(msgspec.Struct, gc=False, tag_field="ph", tag="X"):
    """A complete event (``"ph": "X"``), the only phase the analysis reads.

    Names and categories are text, times numbers: a file where one is not (``"ts": true``) fails
    this type and is decoded generically, where :func:`_document_from_generic` marks such values
    (the column builders then need no type checks).
    """

    cat: str | None = None
    name: str | None = None
    pid: Any = None  # ints, numeric strings, labels ("Spans"): see _id_column
    tid: Any = None
    ts: int | float | None = None
    dur: int | float | None = None
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
    "mtia_ccp_events": "compute",
    "mtia_runtime": "runtime",
}
# MTIA (Meta's accelerator, Kineto's MTIA plugin): on-device activity is written as "mtia_ccp_events"
# (Kineto's MTIA_CCP_EVENTS, "MTIA ondevice CCP events", an alias of CONCURRENT_KERNEL in newer
# Kineto), pid the device as for GPU kernels; host-side runtime calls as "mtia_runtime". Copies and
# sets among them are named as on every Kineto device ("Memcpy HtoD ...", "Memset ..."). "mtia_insight"
# (MTIA Insight measurement ranges) and "mtia_counters" are not device activity: "other".
_MTIA_DEVICE_CATS: tuple[str, ...] = ("mtia_ccp_events",)
# Categories of activities that run on a GPU (or another device): pid is the device index, tid the stream.
_GPU_CATS: tuple[str, ...] = (
    "kernel",
    "Kernel",
    "gpu_memcpy",
    "Memcpy",
    "gpu_memset",
    "Memset",
    "cuda_sync",
    "gpu_user_annotation",
    *_MTIA_DEVICE_CATS,
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
# The c10d ops of point-to-point transfers: their arguments name the peer (rank within the group).
_P2P_OPS = frozenset({"c10d::send", "c10d::recv_"})
_NO_DATA = ("wait", "barrier")
# The what-if graph's gradient-ready signals (timeline.whatif.graph): few events, kept by overlap_only
# so that the diagnosis of `timeline analyze` replays the graph of the events it loaded.
_GRADIENT_SIGNAL_REGEX = r"^torch::autograd::AccumulateGrad$|^timeline\.grad_ready:"
_KERNEL_CATS = ("kernel", "Kernel", *_MTIA_DEVICE_CATS)
_UNMEASURED_CATS = ("cpu_op", "Operator", "python_function")
SKIPPED = "_skipped"
"""Key of the dropped counts of :func:`build_frame` that holds the valid events skipped on purpose."""
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_MAX_US = 4.0e15 * 2  # µs: twice today's epoch; ns stays far inside Int64
_SAME_SIZE = ("all_reduce", "broadcast", "all_to_all", "send", "recv", "send_recv")
_DIGITS = re.compile(r"(\d+)")
# Timestamps below this many µs (~1973) are not epoch times: they count from baseTimeNanoseconds.
_EPOCH_US_FLOOR = 1e14
_NUMBER_TYPES = frozenset({int, float, type(None)})
_INT_OR_NONE = frozenset({int, type(None)})
_NAN = float("nan")
_INT32_MAX = 2**31 - 1


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
        return _decode_valid(data, source)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError):
        # Damaged JSON (maybe after an oddity that sent it to the generic decoder), invalid UTF-8
        # inside a string (msgspec raises UnicodeDecodeError for it), a number beyond a double (1e400).
        pass
    from timeline.importers.repair import repair_json  # damaged input only

    repaired = repair_json(data, source=source)
    warnings.extend(repaired.warnings)
    try:
        return _decode_valid(repaired.data, source)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:  # pragma: no cover - repaired is valid
        raise TraceFormatError(f"{source}: {exc}") from exc


def _decode_valid(data: bytes, source: str) -> _Document:
    """Decode a document of valid JSON; events of an unexpected shape are dropped.

    Raises
    ------
    msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError
        Not valid JSON, a number beyond a double, invalid UTF-8 (the caller repairs them).
    TraceFormatError
        Nested too deep for the decoder.
    """
    try:
        try:
            return _DECODER.decode(data)
        except msgspec.ValidationError:
            # Valid JSON with an unexpected shape somewhere (e.g. args that is a list): decode generically.
            return _document_from_generic(_GENERIC.decode(data), source)
    except RecursionError:
        from timeline.importers.repair import nesting_error

        raise nesting_error(source) from None


def decode_events(
    data: bytes | bytearray | memoryview, source: str, *, repairs: dict[str, int] | None = None
) -> list[Any]:
    """Decode a JSON array of trace events (a chunk of ``traceEvents``), tolerating odd shapes.

    Repairs what valid syntax may still hold, as :func:`timeline.importers.repair.repair_json` does,
    and counts it in ``repairs`` (by the repair's description) once the chunk decodes: numbers beyond a
    double (``1e400``) become null, invalid UTF-8 becomes replacement characters.

    Raises
    ------
    msgspec.DecodeError
        The chunk is not valid JSON (the caller locates the error in the file).
    TraceFormatError
        Nested too deep for the decoder.
    """
    fixes: dict[str, int] = {}
    events = _decode_events(data, source, fixes)
    if repairs is not None:
        add_counts(repairs, fixes)
    return events


def _decode_events(data: bytes | bytearray | memoryview, source: str, fixes: dict[str, int]) -> list[Any]:
    try:
        try:
            return _EVENTS_DECODER.decode(data)
        except msgspec.ValidationError:
            generic = _GENERIC.decode(data)
    except msgspec.ValidationError:  # a number beyond a double: the only error of the generic decoder
        from timeline.importers.repair import HUGE_NUMBERS, replace_huge_numbers

        fixed, count = replace_huge_numbers(bytes(data), source=source)
        add_counts(fixes, {HUGE_NUMBERS: count})
        return _decode_events(fixed, source, fixes)
    except UnicodeDecodeError:  # invalid UTF-8 inside a string
        from timeline.importers.repair import INVALID_UTF8

        raw = bytes(data)
        text = raw.decode("utf-8", errors="replace")
        # every replacement character that was not already there is one invalid sequence
        count = max(1, text.count("\ufffd") - raw.count("\ufffd".encode()))
        add_counts(fixes, {INVALID_UTF8: count})
        return _decode_events(text.encode("utf-8"), source, fixes)
    except RecursionError:
        from timeline.importers.repair import nesting_error

        raise nesting_error(source) from None
    events = _document_from_generic({"traceEvents": generic}, source).traceEvents
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
                        if attr in ("input_dims", "input_type", "concrete_inputs"):
                            value = msgspec.Raw(msgspec.json.encode(value))
                        kwargs[attr] = value
                args = _Args(**kwargs)
            events.append(
                _Event(
                    cat=_text(item.get("cat")),
                    name=_text(item.get("name")),
                    pid=item.get("pid"),
                    tid=item.get("tid"),
                    ts=_time(item.get("ts")),
                    dur=_time(item.get("dur")),
                    args=args,
                )
            )
    return _Document(
        traceEvents=events if isinstance(events_in, list) else None,
        distributedInfo=obj.get("distributedInfo"),
        baseTimeNanoseconds=obj.get("baseTimeNanoseconds"),
        host_name=obj.get("host_name"),
    )


def _text(value: Any) -> str | None:
    """Return a name or category that is text; anything else (a number, an object) is None."""
    return value if value.__class__ is str else None


def _time(value: Any) -> int | float | None:
    """Return a time that is a number or absent; anything else (text, a boolean) is NaN.

    NaN never comes from JSON: it marks the times that are not numbers, which :func:`_invalid`
    drops and counts.
    """
    return value if value.__class__ in _NUMBER_TYPES else _NAN


def _as_int(value: Any) -> int | None:
    """Return an int from an int, an integral float or a decimal string; None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().removeprefix("-").isdecimal():
        try:
            return int(value)
        except ValueError:  # more digits than int() converts (4,300)
            return None
    return None


def _float_column(values: list[int | float | None]) -> pl.Series:
    """Return a Float64 series of times; integer µs (most traces before 2023) take the fast path.

    The values are numbers, None, or the NaN of :func:`_time` (the types of :class:`_Event`).
    """
    try:
        return pl.Series(values, dtype=pl.Int64()).cast(pl.Float64())
    except (TypeError, OverflowError):  # floats, huge integers
        return pl.Series(values, dtype=pl.Float64(), strict=False)


def _int_column(values: list[Any]) -> pl.Series:
    """Return an Int64 series of an argument (device, stream, ids); anything else is null."""
    return pl.Series(values, dtype=pl.Int64(), strict=False)


def _id_column(values: list[Any]) -> pl.Series:
    """Return an Int64 series from pids/tids that may be ints, numeric strings or labels.

    Legacy torch 1.9 writes tids as strings ("25738", "stream 7"); some pids are labels ("Spans",
    "Traces"): those become null, as do ids of any other type and integers beyond Int64.
    """
    if set(map(type, values)) <= _INT_OR_NONE:  # the usual case, in one scan in C
        try:
            return pl.Series(values, dtype=pl.Int64())
        except (OverflowError, TypeError):  # an id beyond Int64: below
            pass
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
    if not stripped.isdecimal():
        return None
    try:
        return int(stripped)
    except ValueError:  # more digits than int() converts (4,300)
        return None


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
    if not all(d.__class__ is int and d >= 0 for d in first):
        return None, None  # a dimension that is not a size (-1: unknown)
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
    rank = _declared(info, "rank", 0, source)
    world_size = _declared(info, "world_size", 0, source)
    frame, clock = _anchored(frame, metadata.get("baseTimeNanoseconds"), source, warnings)
    frame = _attach_collectives(frame.drop("_row", strict=False), info, meta)
    backend = info.get("backend")
    host = metadata.get("host_name")
    return FileResult(
        events=validate(frame, EVENTS_SCHEMA, what=source),
        format="kineto",
        rank=rank,
        claims_rank=True,
        world_size=world_size,
        backend=backend if isinstance(backend, str) else None,
        host=host if isinstance(host, str) else None,
        clock=clock,
        warnings=warnings,
        groups=declared_groups(info),
        skipped=dropped.get(SKIPPED, 0),
    )


def _anchored(
    frame: pl.DataFrame, raw_base: Any, source: str, warnings: list[str]
) -> tuple[pl.DataFrame, Clock]:
    """Return the frame with relative times anchored on ``baseTimeNanoseconds``, and its clock.

    torch >= 2.4: ts counts µs from baseTimeNanoseconds (the wall clock floored to a multiple of
    7,889,238 s). Without a usable base the origin is unknown: the clock is ``relative``, with a
    warning when the trace has a base that cannot be used (not an integer, or times that would not fit
    in 64-bit nanoseconds once it is added).
    """
    if not frame.height:
        return frame, "epoch"
    median_start_ns = frame.get_column("start_ns").median()
    if not (isinstance(median_start_ns, (int, float)) and median_start_ns < _EPOCH_US_FLOOR * 1000):
        return frame, "epoch"
    if raw_base is None:
        return frame, "relative"
    base_ns = _as_int(raw_base)
    latest = frame.select(pl.max_horizontal(pl.col("start_ns").max(), pl.col("end_ns").max())).item()
    if base_ns is None or not 0 <= base_ns <= _INT64_MAX - max(0, latest or 0):
        shown = repr(raw_base) if len(repr(raw_base)) <= 40 else repr(raw_base)[:37] + "..."
        warnings.append(
            f"{source}: ignored baseTimeNanoseconds {shown}: not a time in nanoseconds since the epoch; "
            "times count from an unknown origin"
        )
        return frame, "relative"
    return frame.with_columns(pl.col("start_ns") + base_ns, pl.col("end_ns") + base_ns), "epoch"


def _declared(info: dict[str, Any], key: str, low: int, source: str) -> int | None:
    """Return ``distributedInfo[key]`` (a rank, a world size), None if absent or not an integer.

    Raises
    ------
    TraceContentError
        A value out of ``[low, 2**31 - 1]``, the range of the rank and world size columns.
    """
    value = _as_int(info.get(key))
    if value is None or low <= value <= _INT32_MAX:
        return value
    shown = str(value) if len(str(value)) <= 40 else str(value)[:37] + "..."
    msg = (
        f"{source}: distributedInfo.{key} {shown} is out of range: a {key.replace('_', ' ')} is a whole "
        f"number from {low} to {_INT32_MAX:,}; fix distributedInfo in the trace"
    )
    raise TraceContentError(msg)


def _measured(
    cat: pl.Series, name: pl.Series, ts: pl.Series, dur: pl.Series, options: ImportOptions
) -> tuple[pl.Series, dict[str, int]]:
    """Return the mask of the events the overlap analysis reads on a trace with GPU kernels.

    Its overlap is measured on the GPU: CPU operators and Python frames are skipped unless they are
    collective ops (the candidates kernels are linked to), CPU-side collectives, ``ProfilerStep#N``
    (torch 1.9) or gradient-ready signals (``AccumulateGrad``, ``timeline.grad_ready:`` markers: the
    what-if graph's). A CPU-only trace keeps everything (not decided here).

    Also returns the counts of the skipped events as a full load counts them: invalid ones under
    their :func:`_invalid` reason, the valid ones under :data:`SKIPPED`.
    """
    needed = f"{_COMM_OP_REGEX}|{options.rules.cpu_comm_regex()}|^ProfilerStep#|{_GRADIENT_SIGNAL_REGEX}"
    # one query (each Series method is one, with its fixed cost, per chunk)
    keep = (
        pl.DataFrame({"cat": cat, "name": name})
        .select(
            (~pl.col("cat").is_in(_UNMEASURED_CATS)).fill_null(True)
            | pl.col("name").str.contains(needed).fill_null(False)
        )
        .to_series()
    )
    n_skipped = keep.len() - int(keep.sum())
    if n_skipped == 0 or _all_valid(ts, dur):
        # the usual case: every time is valid, so every skipped event counts under SKIPPED
        return keep, ({SKIPPED: n_skipped} if n_skipped else {})
    masks = _invalid(pl.col("ts"), pl.col("dur"))
    *invalid, any_invalid = (
        pl.DataFrame({"skipped": ~keep, "ts": ts, "dur": dur})
        .filter("skipped")
        .select(*(m.sum().alias(f"m{i}") for i, m in enumerate(masks)), a=pl.any_horizontal(masks).sum())
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
        or (a.concrete_inputs and kept[i].name in _P2P_OPS)
    ]


def _metadata_row(i: int, e: _Event, a: _Args) -> tuple[Any, ...]:
    """Return the sparse metadata row of a candidate of :func:`_metadata_candidates` (row ``i``).

    The order is that of :func:`_metadata_columns`: row, collective, in and out element counts,
    dtype, group size, group name, ranks, sequence number, in and out bytes, description, comms id,
    peer (global) and peer in the group.
    """
    if a.collective is not None or a.in_nelems is not None or a.in_size is not None:
        return (
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
            a.pg_desc,
            _as_int(a.comms_id),
            a.dst_rank if a.dst_rank is not None else a.src_rank,
            None,
        )
    if e.name in _P2P_OPS:
        peer = _p2p_argument(a.concrete_inputs)
        return (i, None, None, None, None, None, None, None, None, None, None, None, None, None, peer)
    nbytes, dtype = _parse_dims_bytes(a.input_dims, a.input_type)
    return (i, None, None, None, dtype, None, None, None, None, nbytes, None, None, None, None, None)


def _p2p_argument(raw: msgspec.Raw) -> int | None:
    """Return the peer's rank in its group from the ``Concrete Inputs`` of ``c10d::send`` / ``c10d::recv_``.

    The op's schema is ``(Tensor[] tensors, ProcessGroup process_group, int dst|src, int tag)``
    (``torch/csrc/distributed/c10d/Ops.cpp``): the third value, a decimal string, is the peer's rank
    within the group the op ran on.
    """
    try:
        values = _GENERIC.decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return None
    if not isinstance(values, list) or len(values) < 3:
        return None
    return _as_int(values[2])


def add_counts(into: dict[str, int], counts: dict[str, int]) -> None:
    """Add drop counts (:func:`build_frame`'s) to ``into``, key by key."""
    for key, count in counts.items():
        into[key] = into.get(key, 0) + count


_INVALID_REASONS = (
    "events without ts or dur",
    "events whose ts or dur is not a number",
    "events with times out of range",
    "events with end < start",
)
"""The drop counts' keys for the masks of :func:`_invalid`, in their order."""


def _all_valid(ts: pl.Series, dur: pl.Series) -> bool:
    """Whether no time is missing, out of range or negative (:func:`_invalid`), from a few scans.

    Cheaper than evaluating the three masks: the usual trace has no invalid time at all.
    """
    if ts.null_count() or dur.null_count():
        return False
    if ts.len() == 0:
        return True
    ts_, dur_ = pl.col("ts"), pl.col("dur")
    nan, *extremes = (
        pl.DataFrame({"ts": ts, "dur": dur})
        .select(  # one query: each Series method is one, with its fixed cost
            nan=ts_.is_nan().any() | dur_.is_nan().any(),
            low=ts_.min(),
            high=ts_.max(),
            shortest=dur_.min(),
            longest=dur_.max(),
        )
        .row(0)
    )
    if nan:
        return False
    low, high, shortest, longest = (float(x) for x in extremes)
    return abs(low) <= _MAX_US and abs(high) <= _MAX_US and shortest >= 0 and longest <= _MAX_US


def _invalid(ts: pl.Expr, dur: pl.Expr) -> tuple[pl.Expr, ...]:
    """Return the masks of the events to drop, in the order of :data:`_INVALID_REASONS`.

    Events without times, with times that are not numbers (NaN, see :func:`_float_column`), with
    times out of range, with end < start.
    """
    missing = ts.is_null() | dur.is_null()
    not_number = ~missing & (ts.is_nan() | dur.is_nan())
    usable = ~missing & ~not_number
    # Beyond ~292 years of µs the ns value overflows Int64: not a time any profiler writes.
    out_of_range = usable & ((ts.abs() > _MAX_US) | (dur > _MAX_US))
    negative = usable & (dur < 0)
    return missing, not_number, out_of_range, negative


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
    cat = pl.Series(cats, dtype=pl.String())
    if not options.include_python and (cat == "python_function").any():
        kept = [e for e, c in zip(kept, cats, strict=True) if c != "python_function"]
        cats = [c for c in cats if c != "python_function"]
        cat = pl.Series(cats, dtype=pl.String())
    name = pl.Series([e.name for e in kept], dtype=pl.String())
    ts = _float_column([e.ts for e in kept])
    dur = _float_column([e.dur for e in kept])
    skipped: dict[str, int] = {}
    kernels = False
    if options.overlap_only:
        kernels = bool(cat.is_in(_KERNEL_CATS).any())
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
    meta_rows = [_metadata_row(i, kept[i], args[i]) for i in _metadata_candidates(kept, args)]
    # Kept sparse: a few thousand rows, not fifteen mostly-null columns over every event.
    return Columns(frame=frame, meta=_metadata_frame(meta_rows), skipped=skipped, kernels=kernels)


def finish_columns(
    columns: Columns, options: ImportOptions
) -> tuple[pl.DataFrame, dict[str, int], pl.DataFrame]:
    """Finish :func:`extract_columns` in polars: drop invalid times, convert to ns, classify."""
    frame, meta = columns.frame, columns.meta
    masks = _invalid(pl.col("ts"), pl.col("dur"))
    counts = (
        (0,) * len(masks)
        if _all_valid(frame.get_column("ts"), frame.get_column("dur"))
        else frame.select(*(m.sum().alias(f"m{i}") for i, m in enumerate(masks))).row(0)
    )
    dropped: dict[str, int] = {reason: int(c) for reason, c in zip(_INVALID_REASONS, counts, strict=True)}
    # skipped events are counted as a full load counts them: invalid ones as dropped, the others in
    # the file's events
    add_counts(dropped, columns.skipped)
    if any(counts):
        frame = frame.with_row_index("_row").filter(~pl.any_horizontal(masks))
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
    # The kind depends on the category and the name alone: decided once per distinct pair (a few
    # thousand of a trace's events, the regexes being the costly part), then joined back. One lazy
    # query run by the in-memory engine: polars' per-query overhead dominates on these frames.
    frame_lf = frame.lazy().with_columns(pl.col("name", "cat").cast(pl.Categorical()))
    classified = (
        frame_lf.select("cat", "name")
        .unique()
        .with_columns(pl.col("cat", "name").cast(pl.String))
        .with_columns(
            kind=_kind_expr(options).cast(KIND),
            # CPU-side collective ops, the candidates kernels are linked to (_attach_collectives)
            _comm_op=pl.col("name").str.contains(_COMM_OP_REGEX).fill_null(False),
        )
        .with_columns(pl.col("cat", "name").cast(pl.Categorical()))
    )
    frame = (
        frame_lf.join(classified, on=["cat", "name"], how="left", nulls_equal=True, maintain_order="left")
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
        .collect(engine="in-memory")
    )
    return frame, dropped, meta


def _metadata_frame(rows: list[tuple[Any, ...]]) -> pl.DataFrame:
    """Return the sparse collective metadata as typed columns keyed by row index."""
    if not rows:  # most chunks: fifteen empty series built once (a chunk's build is ~0.2 ms)
        return _empty_metadata().clone()
    return _metadata_columns(rows)


@functools.cache
def _empty_metadata() -> pl.DataFrame:
    return _metadata_columns([])


def _metadata_columns(rows: list[tuple[Any, ...]]) -> pl.DataFrame:
    columns: list[tuple[Any, ...]] = list(zip(*rows, strict=True)) if rows else [() for _ in range(15)]
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
            "m_pg_desc": pl.Series([None if p is None else str(p) for p in columns[11]], dtype=pl.String()),
            "m_comms_id": pl.Series(columns[12], dtype=pl.UInt64(), strict=False),
            "m_peer": pl.Series(columns[13], dtype=pl.Int32(), strict=False),
            "m_group_peer": pl.Series(columns[14], dtype=pl.Int32(), strict=False),
        }
    )


def _kind_expr(options: ImportOptions) -> pl.Expr:
    """Return the expression that classifies each event into a kind."""
    rules = options.rules
    base = pl.col("cat").replace_strict(_KIND_BY_CAT, default="other", return_dtype=pl.String)
    name = pl.col("name")
    is_kernel = pl.col("cat").is_in(_KERNEL_CATS)
    is_mtia = pl.col("cat").is_in(_MTIA_DEVICE_CATS)
    is_cpu = pl.col("cat").is_in(("cpu_op", "Operator", "user_annotation"))
    return (
        pl.when(is_kernel & name.str.contains(rules.comm_kernel_regex()))
        .then(pl.lit("communication"))
        .when(is_mtia & name.str.starts_with("Memcpy"))
        .then(pl.lit("memcpy"))
        .when(is_mtia & name.str.starts_with("Memset"))
        .then(pl.lit("memset"))
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
    metadata) and joined back to the frame by row: no sort over every event. The last steps run
    as one lazy query (in-memory engine): polars' per-query overhead dominates on these frames.
    """
    frame = frame.with_row_index("_row")
    meta = _normalised_metadata(meta)
    ops = _collective_ops(frame, meta)
    linked = _link_kernels_to_ops(frame, ops)
    is_comm = pl.col("kind") == "communication"
    comm = (
        frame.lazy()
        .filter(is_comm)
        .select("_row", "name")
        .join(meta.lazy(), on="_row", how="left", maintain_order="left")
        .join(linked.lazy(), on="_row", how="left", maintain_order="left")
        .join(_p2p_peers(frame, meta), on="_row", how="left", maintain_order="left")
    )
    values = _collective_values(comm, info, _mapped(frame, "name", _collective_from_name, is_comm))
    return _scatter_collective_columns(frame, values).drop("_row", "_comm_op").collect(engine="in-memory")


def _normalised_metadata(meta: pl.DataFrame | None) -> pl.DataFrame:
    """Normalise the collective names of the metadata rows and derive their bytes from element counts."""
    if meta is None:
        meta = _metadata_frame([])
    size = _mapped(meta, "m_dtype", dtype_size)
    return meta.with_columns(
        m_collective=_mapped(meta, "m_collective", normalise_collective),
        m_in_bytes=pl.coalesce("m_in_bytes", pl.col("m_in_nelems") * size),
        m_out_bytes=pl.coalesce("m_out_bytes", pl.col("m_out_nelems") * size),
    )


def _collective_ops(frame: pl.DataFrame, meta: pl.DataFrame) -> pl.DataFrame:
    """Gather the CPU-side collective ops (record_param_comms, nccl:*), the candidates a kernel is linked to.

    One row per op, its thread and span, and its ``op_*`` collective values (from its metadata,
    else its name).
    """
    is_op = pl.col("_comm_op")
    return (
        frame.lazy()
        .filter(is_op)
        .select("_row", "pid", "tid", "start_ns", "end_ns", "name", "external_id")
        .join(meta.lazy(), on="_row", how="left", maintain_order="left")
        .select(
            "pid",
            "tid",
            op_start=pl.col("start_ns"),
            op_end=pl.col("end_ns"),
            op_name=pl.col("name"),
            op_external_id=pl.col("external_id"),
            op_collective=pl.coalesce("m_collective", _mapped(frame, "name", normalise_collective, is_op)),
            op_in_bytes=pl.col("m_in_bytes"),
            op_out_bytes=pl.col("m_out_bytes"),
            op_dtype=pl.col("m_dtype"),
            op_group_size=pl.col("m_group_size"),
            op_pg_name=pl.col("m_pg_name"),
            op_pg_ranks=pl.col("m_pg_ranks"),
            op_seq=pl.col("m_seq"),
            op_pg_desc=pl.col("m_pg_desc"),
            op_comms_id=pl.col("m_comms_id"),
            op_peer=pl.col("m_peer"),
        )
        .collect(engine="in-memory")
    )


def _link_kernels_to_ops(frame: pl.DataFrame, ops: pl.DataFrame) -> pl.DataFrame:
    """Link each communication kernel to the collective op that launched it.

    Through its launch (the runtime event of the same ``correlation``, inside the innermost op of
    its thread) first, else through the op's ``external_id``. One row per linked kernel ``_row``,
    with the op's ``op_*`` values; empty (with those columns) when no kernel or no op.
    """
    op_cols = [
        c for c in ops.columns if c.startswith("op_") and c not in ("op_start", "op_end", "op_external_id")
    ]
    if not ops.height:
        return pl.DataFrame(schema={"_row": pl.UInt32, **{c: ops.schema[c] for c in op_cols}})
    kernels = (
        frame.lazy()
        .filter((pl.col("kind") == "communication") & pl.col("device").is_not_null())
        .select("_row", "correlation", "external_id")
    )
    launches = (
        frame.lazy()
        .filter((pl.col("kind") == "runtime") & pl.col("correlation").is_not_null())
        .select("correlation", l_pid="pid", l_tid="tid", launch_ns="start_ns")
        .unique("correlation", keep="first")
    )
    via_launch = (
        kernels.join(launches, on="correlation", how="inner")
        .sort("launch_ns")
        .join_asof(
            ops.lazy().sort("op_start"),
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
        ops.lazy().filter(pl.col("op_external_id").is_not_null()).unique("op_external_id", keep="last"),
        left_on="external_id",
        right_on="op_external_id",
        how="inner",
    )
    return (
        pl.concat(
            [via_launch.select("_row", *op_cols), via_external.select("_row", *op_cols)],
            how="vertical_relaxed",
        )
        .unique("_row", keep="first", maintain_order=True)
        .collect(engine="in-memory")
    )


def _collective_values(comm: pl.LazyFrame, info: dict[str, Any], comm_names: pl.Expr) -> pl.LazyFrame:
    """Resolve the collective columns of the communication events, first source that has them.

    ``comm`` holds each event's ``_row`` and name, its own metadata (``m_*``) and its linked op's
    values (``op_*``); ``info`` is the trace's ``distributedInfo``; ``comm_names`` the collective
    of each event from its name (:func:`_collective_from_name`). Returns the query of the values,
    one row per event, cast to the events' dtypes.
    """
    collective = pl.coalesce("m_collective", "op_collective", comm_names)
    carries_data = ~collective.is_in(_NO_DATA)
    # With a single process group in distributedInfo.pg_config, every collective belongs to it.
    pg_name = pl.coalesce("m_pg_name", "op_pg_name", pl.lit(_single_group_name(info), dtype=pl.String))
    group_size = pl.coalesce("m_group_size", "op_group_size", _group_from_info(info, pg_name, "pg_size"))
    pg_desc = pl.coalesce("m_pg_desc", "op_pg_desc", _group_from_info(info, pg_name, "pg_desc"))
    values = {
        "collective": collective,
        "in_bytes": pl.when(carries_data).then(pl.coalesce("m_in_bytes", "op_in_bytes")),
        "out_bytes": pl.when(carries_data).then(
            pl.coalesce(
                "m_out_bytes",
                "op_out_bytes",
                # Only the input shape is recorded on older traces; these collectives write as much
                # as they read (all-to-all: in total), so the output size is known too.
                pl.when(collective.is_in(_SAME_SIZE)).then(pl.coalesce("m_in_bytes", "op_in_bytes")),
            )
        ),
        "dtype": pl.coalesce("m_dtype", "op_dtype"),
        "group_size": group_size,
        "pg_name": pg_name,
        "pg_ranks": pl.coalesce("m_pg_ranks", "op_pg_ranks"),
        "seq": pl.coalesce("m_seq", "op_seq"),
        "pg_desc": pg_desc,
        "comms_id": pl.coalesce("m_comms_id", "op_comms_id"),
        "peer": pl.coalesce("m_peer", "op_peer"),
        "group_peer": pl.col("p2p_group_peer"),
    }
    return comm.select(
        "_row", *(values[name].cast(EVENTS_SCHEMA[name]).alias(name) for name in _COLLECTIVE_COLUMNS)
    )


def _scatter_collective_columns(frame: pl.DataFrame, values: pl.LazyFrame) -> pl.LazyFrame:
    """Return the query adding the collective columns to ``frame``: the values at their ``_row``, else null.

    ``values`` holds at most one row per ``_row``; the frame keeps its rows and their order.
    """
    return frame.lazy().join(values, on="_row", how="left", maintain_order="left")


_COLLECTIVE_COLUMNS = (
    "collective",
    "in_bytes",
    "out_bytes",
    "dtype",
    "group_size",
    "pg_name",
    "pg_desc",
    "pg_ranks",
    "seq",
    "comms_id",
    "peer",
    "group_peer",
)
"""The columns :func:`_attach_collectives` fills on communication events (null on the others)."""


def _p2p_peers(frame: pl.DataFrame, meta: pl.DataFrame) -> pl.LazyFrame:
    """Return the query of the peer's rank in the group of each CPU send or receive (``gloo:send``).

    gloo runs a send or receive on the calling thread, inside the ``c10d::send`` / ``c10d::recv_``
    op whose arguments name the peer (:func:`_p2p_argument`): the innermost such op of the same
    thread that holds the event's start. One row per linked event ``_row``, ``p2p_group_peer``.
    """
    ops = (
        frame.lazy()
        .filter(pl.col("name").cast(pl.String).is_in(list(_P2P_OPS)))
        .select("_row", "pid", "tid", p_start="start_ns", p_end="end_ns")
        .join(meta.lazy().select("_row", p2p_group_peer="m_group_peer"), on="_row", how="inner")
        .drop("_row")
        .filter(pl.col("p2p_group_peer").is_not_null())
        .collect(engine="in-memory")
    )
    if not ops.height:
        return pl.LazyFrame(schema={"_row": pl.UInt32, "p2p_group_peer": pl.Int32})
    events = (
        frame.lazy()
        .filter((pl.col("kind") == "communication") & pl.col("device").is_null())
        .select("_row", "pid", "tid", "start_ns")
    )
    return (
        events.sort("start_ns")
        .join_asof(
            ops.lazy().sort("p_start"),
            left_on="start_ns",
            right_on="p_start",
            by=["pid", "tid"],
            strategy="backward",
            check_sortedness=False,  # sorted just above; polars cannot check it per group
        )
        .filter(pl.col("p_end") >= pl.col("start_ns"))
        .select("_row", "p2p_group_peer")
    )


def _single_group_name(info: dict[str, Any]) -> str | None:
    """Return the name of the only process group in ``distributedInfo.pg_config``, or None."""
    config = info.get("pg_config")
    if isinstance(config, list) and len(config) == 1 and isinstance(config[0], dict):
        name = config[0].get("pg_name")
        return None if name is None else str(name)
    return None


def _group_from_info(info: dict[str, Any], pg_name: pl.Expr, key: str) -> pl.Expr:
    """Return a process group's ``pg_size`` or ``pg_desc`` from ``distributedInfo.pg_config``, by its name.

    A name the rank's ``pg_config`` lists with two different values gives null (never a guess).
    """
    config = info.get("pg_config")
    values: dict[str, Any] = {}
    seen: set[str] = set()
    for entry in config if isinstance(config, list) else []:
        if not (isinstance(entry, dict) and entry.get("pg_name") is not None):
            continue
        name, value = str(entry["pg_name"]), entry.get(key)
        if key == "pg_size":
            value = _as_int(value)
            value = value if value is not None and 0 < value <= _INT32_MAX else None
        elif value is not None:
            value = str(value)
        if name in seen and values.get(name) != value:
            values[name] = None
        elif value is not None and name not in seen:
            values[name] = value
        seen.add(name)
    dtype = pl.Int32 if key == "pg_size" else pl.String
    known = {k: v for k, v in values.items() if v is not None}
    if not known:
        return pl.lit(None, dtype=dtype)
    return pg_name.replace_strict(known, default=None, return_dtype=dtype)


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
