"""Read one Horovod timeline into the canonical events frame.

Takes the raw, already decompressed bytes of a Horovod timeline (``HOROVOD_TIMELINE=file.json``) and
gives a :class:`~timeline.importers.result.FileResult` whose events follow
:data:`timeline.schema.EVENTS_SCHEMA`: one row per closed ``B``/``E`` span, per negotiation tick and per
``CYCLE_START`` marker. The format facts, and how each column is filled, are in ``docs/horovod.md``:

- the timeline is written by rank 0 and covers every worker, so the file claims no rank;
- each tensor is a Chrome-trace "process" (``pid`` = 1-based tensor index, named by ``process_name``
  metadata); ``E`` records carry no name and close the innermost open ``B`` of their pid;
- three byte layouts: v0.9-v0.15 (one record a line ending ``},``, the array never closed, ``ts`` in µs
  since the timeline started), v0.16-v0.20.0 (the same, but ``ts`` in µs since machine boot, with
  ``CYCLE_START`` markers), v0.20.1+ (valid JSON after every record, records concatenated, a ``pid 0``
  header holding ``start_time_since_epoch_in_micros``). A killed job leaves any of them cut off
  mid-record; a job killed before its first tensor leaves a lone ``[``.
"""

from __future__ import annotations

import math
import re
from typing import Annotated

import msgspec
import polars as pl

from timeline.errors import TraceFormatError, position_of
from timeline.importers.collectives import dtype_size, normalise_collective
from timeline.importers.result import Clock, FileResult, ImportOptions
from timeline.schema import EVENTS_SCHEMA, validate

__all__ = ["parse_horovod"]

_EXPECTED = "expected a Horovod timeline (a JSON array of Chrome-trace records)"

# Without the v0.20.1+ header, v0.16-v0.20.0 timelines count µs from machine boot (the writer used the
# steady clock's own origin) and v0.9-v0.15 timelines from the start of the timeline. Boot-relative
# files are recognised by CYCLE_START markers (first written by v0.16) or, failing that, by a first
# timestamp at least this far from zero: the first tensor of a job rarely comes 10 minutes after
# hvd.init(), while a machine rarely runs a job within 10 minutes of booting.
_BOOT_CLOCK_MIN_TS_US = 10 * 60 * 1_000_000

# How many candidate record ends (``}`` bytes, from the end) the repair of an unterminated or cut-off
# file tries. A Horovod record nests at most one object (``args``), so two tries suffice on real files;
# the bound keeps damaged files from costing one full decode per ``}``.
_MAX_REPAIR_TRIES = 32

_INT64_MAX = 2**63 - 1
_Int64 = Annotated[int, msgspec.Meta(ge=-_INT64_MAX - 1, le=_INT64_MAX)]
_UTF8_BOM = b"\xef\xbb\xbf"
_BYTE_OFFSET = re.compile(rb"\(byte (\d+)\)")
_SHAPE_DIM = re.compile(r"-?\d+")

# Depth-1 activity names (horovod/common/common.h): the wire phase is named by a backend prefix and
# the collective it runs (NCCL_ALLREDUCE, MPI_BCAST, GLOO_ALLGATHER, CCL_ALLTOALL, DDL_ALLREDUCE,
# MPI_ADASUM_ALLREDUCE, and the hierarchical NCCL_REDUCESCATTER / NCCL_REDUCE / NCCL_BCAST around an
# MPI_ALLREDUCE).
_WIRE_BACKENDS = frozenset({"NCCL", "RCCL", "MPI", "GLOO", "CCL", "ONECCL", "DDL", "MLSL", "HCCL"})
_WIRE_OPS: dict[str, str] = {
    "ALLREDUCE": "all_reduce",
    "ALLGATHER": "all_gather",
    "ALLGATHERV": "all_gather",
    "REDUCESCATTER": "reduce_scatter",
    "BCAST": "broadcast",
    "BROADCAST": "broadcast",
    "ALLTOALL": "all_to_all",
    "ALLTOALLV": "all_to_all",
    "REDUCE": "reduce",
    "GATHER": "gather",
    "SCATTER": "scatter",
    "ADASUM": "adasum",
    "BARRIER": "barrier",
    "SEND": "send",
    "RECV": "recv",
}


class _Args(msgspec.Struct, gc=False):
    """The ``args`` of a record: tensor name (``M``), dtype and shape (top-level ``E``), header."""

    name: str | None = None
    dtype: str | None = None
    shape: str | list[int] | None = None
    start_time_since_epoch_in_micros: int | None = None


class _Record(msgspec.Struct, gc=False):
    """One Chrome-trace record as Horovod writes it (unknown fields such as ``s`` are ignored)."""

    ph: str | None = None
    name: str | None = None
    ts: int | float | None = None
    pid: _Int64 | None = None
    dur: int | float | None = None
    args: _Args | None = None


# Records hold no references to other objects: gc=False keeps the cycle collector off 20k+ structs.
_DECODER = msgspec.json.Decoder(list[_Record])

# One open B: name, ts (µs, as written), kind, collective, and for a top-level op the rows of its wire
# spans (to receive the bytes its E carries), else None.
_Frame = tuple[str, int | float, str, str | None, list[int] | None]


def parse_horovod(data: bytes, *, source: str, options: ImportOptions) -> FileResult:
    """Return the events of one Horovod timeline.

    Parameters
    ----------
    data
        The whole file, already decompressed.
    source
        The file's name, used in warnings and error messages.
    options
        The import options. Horovod activity names are a closed vocabulary, so the classification rules
        (written for kernel names) do not apply.

    Returns
    -------
    FileResult
        ``format="horovod"``, ``rank=None``, ``claims_rank=False`` (rank 0 writes the timeline of every
        worker); ``clock`` is ``"epoch"`` (v0.20.1+ header), ``"boot"`` (v0.16-v0.20.0) or
        ``"relative"`` (v0.9-v0.15); ``world_size`` is one more than the highest rank in the
        negotiation ticks, or None without ticks. Events have a null ``rank`` except the ticks, which
        name theirs.

    Raises
    ------
    TraceFormatError
        If the file is empty, is not a JSON array of Chrome-trace records (a JSON object, records with
        no ``ph``), or is damaged before its end (the message starts ``source:line:column:``).

    Examples
    --------
    >>> from timeline.importers.result import ImportOptions
    >>> data = (  # v0.9-v0.20.0 layout: the array is never closed
    ...     b'[{"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": 10, "pid": 1},'
    ...     b'{"ph": "E", "ts": 15, "pid": 1},'
    ... )
    >>> result = parse_horovod(data, source="t.json", options=ImportOptions())
    >>> result.clock, result.events["kind"].to_list(), result.events["dur_ns"].to_list()
    ('relative', ['negotiation'], [5000])
    """
    del options  # Horovod names need no configurable rules (see Parameters).
    warnings: list[str] = []
    records = _records(data, source, warnings)
    built = _Builder(source)
    built.consume(records)
    _refuse_rewrites(built, source)
    warnings.extend(built.warnings())

    events = built.frame(offset_us=built.epoch_start_us or 0)
    return FileResult(
        events=validate(events, EVENTS_SCHEMA, what=f"{source} (horovod)"),
        format="horovod",
        rank=None,
        claims_rank=False,
        # Ranks are 0-based: a tick of rank r means at least r + 1 workers (an excerpt may lack some).
        world_size=None if built.highest_rank is None else built.highest_rank + 1,
        clock=_clock(built),
        warnings=warnings,
    )


def _records(data: bytes, source: str, warnings: list[str]) -> list[_Record]:
    """Return a timeline's records, decoded (invalid UTF-8 replaced, a cut-off last record dropped).

    Raises :class:`TraceFormatError` for records with no phase and for nesting too deep to decode.
    """
    if data.startswith(_UTF8_BOM):
        data = b"   " + data[len(_UTF8_BOM) :]  # blanks keep error positions where they were
    try:
        try:
            records, cut_off = _decode_records(data, source)
        except UnicodeDecodeError:
            # Invalid UTF-8 inside a string (a mangled tensor name): decode with replacement characters.
            text = data.decode("utf-8", errors="replace")
            bad = text.count("\ufffd") - data.decode("utf-8", errors="ignore").count("\ufffd")
            warnings.append(f"{source}: repaired malformed JSON: invalid UTF-8 sequences replaced ({bad})")
            records, cut_off = _decode_records(text.encode("utf-8"), source)
    except RecursionError:  # arrays or objects nested deeper than the decoder goes
        from timeline.importers.repair import nesting_error

        raise nesting_error(source) from None
    if cut_off:
        warnings.append(f"{source}: file cut off mid-record: dropped the incomplete last record")
    if not records:
        warnings.append(f"{source}: the timeline holds no records")
    elif all(record.ph is None for record in records):
        msg = f"{source}: the records have no `ph` (phase) field; {_EXPECTED}"
        raise TraceFormatError(msg)
    return records


def _clock(built: _Builder) -> Clock:
    """Return the clock of a timeline's timestamps, from its header and the size of its first ones."""
    if built.epoch_start_us is not None:
        return "epoch"
    if built.cycle_starts or (built.start and min(built.start) >= _BOOT_CLOCK_MIN_TS_US):
        return "boot"
    return "relative"


def _refuse_rewrites(built: _Builder, source: str) -> None:
    """Refuse a timeline SageMaker Debugger (smdebug) rewrote: its records cannot be paired.

    Horovod writes a negotiation tick as an ``X`` record named by a rank with ``dur`` 0 (timeline.cc,
    ``NegotiateRankReady``). smdebug's ``HvdTraceFileRotation`` re-writes the timeline into rotated
    ``*_horovod_timeline.json`` files through its ``TimelineFileWriter``, which gives every ``X``
    record without a duration one of "now − its timestamp" (812,355 s in smdebug's own test files),
    names ``E`` records ``""`` and re-numbers pids by the last tensor name seen, so an ``E`` closes
    another tensor's span.
    """
    if built.timed_ticks:
        longest = max(built.timed_ticks) / 1e6
        ticks = _plural(len(built.timed_ticks), "negotiation tick")
        evidence = f"{ticks} last up to {longest:,.0f} s (Horovod writes 0)"
    elif built.named_ends and built.cycles_with_pid:
        evidence = (
            f'{_plural(built.named_ends, "`E` record")} named "" and '
            f"{_plural(built.cycles_with_pid, 'CYCLE_START marker')} with a pid (Horovod writes neither)"
        )
    else:
        return
    msg = (
        f"{source}: a Horovod timeline rewritten by SageMaker Debugger (smdebug), not the file Horovod "
        f"wrote: {evidence}, and smdebug renumbers the tensors' pids, so its spans cannot be paired; "
        "give the file HOROVOD_TIMELINE names"
    )
    raise TraceFormatError(msg)


def _decode_records(data: bytes, source: str) -> tuple[list[_Record], bool]:
    """Return the complete records of ``data`` and whether an incomplete last record was dropped.

    Valid JSON (v0.20.1+, or a v0.9-v0.20.0 file someone closed) decodes in one pass. Otherwise the
    array is closed after the last ``}`` that ends a record: each candidate is tried from the end with a
    full decode of ``data[:k + 1] + b"]"``, so no Python loop walks the bytes.
    """
    # Only a document that ends with "]" can be valid JSON: v0.9-v0.20.0 files skip this decode.
    if data[-64:].rstrip().endswith(b"]"):
        try:
            return _decode(data, source), False
        except msgspec.DecodeError:
            pass
    start = len(data) - len(data.lstrip())
    if start == len(data):
        msg = f"{source}: the file is empty; {_EXPECTED}"
        raise TraceFormatError(msg)
    if data[start] == ord("{"):
        msg = f"{source}: a JSON object, not an array; {_EXPECTED}"
        raise TraceFormatError(msg)
    if data[start] != ord("["):
        raise _not_an_array(data, source)
    end = len(data)
    for _ in range(_MAX_REPAIR_TRIES):
        k = data.rfind(b"}", start, end)
        if k < 0:
            # No complete record: a lone "[" (killed before the first tensor) or a first record cut off.
            return [], _check_tail(data, start + 1, source)
        try:
            records = _decode(data[: k + 1] + b"]", source)
        except msgspec.DecodeError as error:
            offset = _error_offset(error)
            if offset is not None and offset <= k:
                # The kept prefix itself is broken: damage before the end, not a cut-off.
                raise _malformed(data, source, error) from None
            end = k  # This "}" closed an inner object (args) or sat in a string: try the one before.
            continue
        return records, _check_tail(data, k + 1, source)
    raise _not_an_array(data, source)


def _decode(data: bytes, source: str) -> list[_Record]:
    """Decode ``data`` as an array of records; raise TraceFormatError on a layout that is not Horovod's."""
    try:
        return _DECODER.decode(data)
    except msgspec.ValidationError as error:
        detail = str(error).replace(" - at ", " at ")
        if detail.startswith("Expected `array`, got `object`"):
            what = "a JSON object, not an array"
        else:
            what = f"not a Horovod record layout: {detail[:1].lower()}{detail[1:]}"
        msg = f"{source}: {what}; {_EXPECTED}"
        raise TraceFormatError(msg) from None


def _check_tail(data: bytes, offset: int, source: str) -> bool:
    """Return whether ``data[offset:]``, after the last complete record, holds an incomplete record.

    Whitespace and the separating comma are the normal end of a v0.9-v0.20.0 file; ``]`` closes a
    v0.20.1+ one. Anything else must be the start of a record cut off by a killed writer (the JSON
    decoder reports it as truncated); other bytes are damage and raise.
    """
    rest = data[offset:]
    body = rest.lstrip()
    if body.startswith(b","):
        body = body[1:].lstrip()
    if not body:
        return False
    at = len(data) - len(body)
    if body.startswith(b"]"):
        trailing = body[1:].lstrip()
        if not trailing:
            return False
        at = len(data) - len(trailing)
        line, col = position_of(data, at)
        msg = f"{source}:{line}:{col}: unexpected data after the end of the array; {_EXPECTED}"
        raise TraceFormatError(msg)
    try:
        msgspec.json.decode(body)
    except msgspec.DecodeError as error:
        offset_in_body = _error_offset(error)
        if offset_in_body is None:
            return True  # "Input data was truncated": a record cut off mid-write.
        line, col = position_of(data, at + offset_in_body)
        msg = f"{source}:{line}:{col}: malformed JSON ({_reason(error)}) in the last record; {_EXPECTED}"
        raise TraceFormatError(msg) from None
    line, col = position_of(data, at)
    msg = f"{source}:{line}:{col}: unexpected data after the last record; {_EXPECTED}"
    raise TraceFormatError(msg)


def _error_offset(error: msgspec.DecodeError) -> int | None:
    """Return the byte offset msgspec names in ``error`` ("... (byte 123)"), or None (truncated input)."""
    match = _BYTE_OFFSET.search(str(error).encode())
    return int(match.group(1)) if match else None


def _reason(error: msgspec.DecodeError) -> str:
    """Return msgspec's description of a syntax error without its prefix and byte offset."""
    text = str(error).removeprefix("JSON is malformed: ")
    return re.sub(r"\s*\(byte \d+\)$", "", text)


def _not_an_array(data: bytes, source: str) -> TraceFormatError:
    """Return the error for a document that is not a (repairable) JSON array, located where possible."""
    try:
        value = msgspec.json.decode(data)
    except msgspec.DecodeError as error:
        return _malformed(data, source, error)
    return TraceFormatError(f"{source}: a JSON {type(value).__name__}, not an array; {_EXPECTED}")


def _malformed(data: bytes, source: str, error: msgspec.DecodeError) -> TraceFormatError:
    """Return the error for JSON that cannot be repaired, located at msgspec's byte offset."""
    offset = _error_offset(error)
    line, col = position_of(data, len(data) if offset is None else offset)
    return TraceFormatError(f"{source}:{line}:{col}: malformed JSON ({_reason(error)}); {_EXPECTED}")


def _activity(name: str) -> tuple[str, str | None]:
    """Return the kind of a depth-1 activity and the collective its own name implies.

    ``WAIT_FOR_DATA`` / ``WAIT_FOR_OTHER_TENSOR_DATA`` wait for the framework to produce the tensor;
    ``QUEUE`` waits for the GPU stream; ``MEMCPY_*`` and ``COPY_ALLGATHER_OUTPUT`` copy into or out of
    the fusion / host buffer; a backend-prefixed collective is the wire; ``INIT_*`` / ``ALLOCATE_*`` and
    anything unknown are "other".
    """
    if name.startswith("WAIT_FOR"):
        return "wait", None
    if name == "QUEUE":
        return "queue", None
    if "MEMCPY" in name or name.startswith("COPY_"):
        return "memcpy", None
    if name.startswith(("INIT_", "ALLOCATE_")):
        return "other", None
    tokens = name.split("_")
    collective = next((_WIRE_OPS[token] for token in reversed(tokens) if token in _WIRE_OPS), None)
    if collective is not None or tokens[0] in _WIRE_BACKENDS:
        return "communication", collective
    return "other", None


def _elements(shape: str | list[int]) -> int | None:
    """Return the number of elements of a shape (``"[172, 4096]"``; ``"[]"`` is a scalar), or None."""
    if isinstance(shape, list):
        dims = shape
    else:
        text = shape.strip()
        if not (text.startswith("[") and text.endswith("]")):
            return None
        dims = [int(dim) for dim in _SHAPE_DIM.findall(text)]
    if any(dim < 0 for dim in dims):
        return None  # an unknown (-1) dimension
    return math.prod(dims)


def _plural(count: int, word: str) -> str:
    """Return ``"1 span"`` / ``"3 spans"``."""
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


class _Builder:
    """Pair ``B``/``E`` records per pid and collect the columns of the events frame.

    Times stay in µs as written (int, or float if a tool rewrote the file) until :meth:`frame`
    converts them in bulk.
    """

    def __init__(self, source: str) -> None:
        self.source = source
        self.kind: list[str] = []
        self.name: list[str] = []
        self.start: list[int | float] = []
        self.end: list[int | float] = []
        self.pid: list[int | None] = []
        self.rank: list[int | None] = []
        self.collective: list[str | None] = []
        self.nbytes: list[int | None] = []
        self.dtype: list[str | None] = []
        self.tensors: dict[int, str] = {}
        self.stacks: dict[int, list[_Frame]] = {}
        self.epoch_start_us: int | None = None
        self.cycle_starts = 0
        self.highest_rank: int | None = None
        self.unmatched_ends = 0
        self.negative = 0
        self.incomplete = 0
        self.other_phases: dict[str, int] = {}
        self.timed_ticks: list[int | float] = []  # durations (µs) of rank ticks: smdebug's rewrite
        self.named_ends = 0
        self.cycles_with_pid = 0
        self._activities: dict[str, tuple[str, str | None]] = {}
        self._op_collectives: dict[str, str | None] = {}

    def _emit(
        self,
        kind: str,
        name: str,
        start: int | float,
        end: int | float,
        pid: int | None,
        rank: int | None,
        collective: str | None,
    ) -> int:
        """Append one row (bytes and dtype null) and return its index."""
        self.kind.append(kind)
        self.name.append(name)
        self.start.append(start)
        self.end.append(end)
        self.pid.append(pid)
        self.rank.append(rank)
        self.collective.append(collective)
        self.nbytes.append(None)
        self.dtype.append(None)
        return len(self.kind) - 1

    def _op_collective(self, name: str) -> str | None:
        """Return the canonical collective of a top-level op or negotiation (``NEGOTIATE_ALLREDUCE``)."""
        if name not in self._op_collectives:
            self._op_collectives[name] = normalise_collective(name.removeprefix("NEGOTIATE_"))
        return self._op_collectives[name]

    def _activity(self, name: str) -> tuple[str, str | None]:
        """Return the cached :func:`_activity` of ``name``."""
        found = self._activities.get(name)
        if found is None:
            found = self._activities[name] = _activity(name)
        return found

    def consume(self, records: list[_Record]) -> None:
        """Turn the records, in file order, into rows."""
        stacks = self.stacks
        for record in records:
            ph = record.ph
            ts = record.ts
            if ph == "i" and ts is not None:
                # CYCLE_START: a background-loop cycle (v0.16+), global scope ("s": "g"), no pid. The
                # most frequent record (14k in a 1.4 MB file): emitted inline.
                name = record.name or ""
                if name == "CYCLE_START":
                    self.cycle_starts += 1
                    self.cycles_with_pid += record.pid is not None  # Horovod's have none: smdebug's do
                self._emit("instant", name, ts, ts, record.pid, None, None)
            elif ph == "M":
                self._metadata(record)
            elif ts is None or record.pid is None:
                self.incomplete += 1
            elif ph == "B":
                name = record.name or ""
                stack = stacks.setdefault(record.pid, [])
                if stack:
                    kind, collective = self._activity(name)
                    stack.append((name, ts, kind, stack[0][3] or collective, None))
                elif name.startswith("NEGOTIATE_"):
                    stack.append((name, ts, "negotiation", self._op_collective(name), None))
                else:
                    stack.append((name, ts, "annotation", self._op_collective(name), []))
            elif ph == "E":
                self._end(record, record.pid, ts)
            elif ph == "X":
                self._complete(record, record.pid, ts)
            else:
                self.other_phases[str(ph)] = self.other_phases.get(str(ph), 0) + 1

    def _metadata(self, record: _Record) -> None:
        """Keep the tensor name of a pid, and the v0.20.1+ epoch header of pid 0."""
        args = record.args
        if record.name != "process_name" or args is None or record.pid is None:
            return
        if args.start_time_since_epoch_in_micros is not None:
            self.epoch_start_us = args.start_time_since_epoch_in_micros
        elif args.name is not None:
            self.tensors[record.pid] = args.name

    def _end(self, record: _Record, pid: int, end: int | float) -> None:
        """Close the innermost open span of ``pid``; a top-level ``E`` gives the tensor's bytes."""
        self.named_ends += record.name == ""  # Horovod's E has no name; smdebug's is named ""
        stack = self.stacks.get(pid)
        if not stack:
            self.unmatched_ends += 1
            return
        name, start, kind, collective, wire_rows = stack.pop()
        if end < start:
            self.negative += 1
            return
        row = self._emit(kind, name, start, end, pid, None, collective)
        if stack:
            if kind == "communication":
                outer_wire = stack[0][4]
                if outer_wire is not None:
                    outer_wire.append(row)
            return
        args = record.args
        if wire_rows is None or args is None:
            return
        # Only the top-level E carries {"dtype": "float32", "shape": "[172, 4096]"}: the tensor this
        # op moved, which its wire phases moved too (a fused response repeats them on every tensor).
        dtype = args.dtype
        size = dtype_size(dtype)
        elements = _elements(args.shape) if args.shape is not None else None
        nbytes = elements * size if elements is not None and size is not None else None
        if nbytes is not None and nbytes > _INT64_MAX:
            nbytes = None  # not a real tensor: no size rather than an overflow
        for index in (row, *wire_rows):
            self.nbytes[index] = nbytes
            self.dtype[index] = dtype

    def _complete(self, record: _Record, pid: int, start: int | float) -> None:
        """Turn an ``X`` record into a negotiation tick (``name`` = a rank, ``dur`` 0) or a span."""
        name = record.name or ""
        dur = record.dur or 0
        stack = self.stacks.get(pid)
        outer = stack[0][3] if stack else None
        if dur == 0 and name.isascii() and name.isdigit() and len(name) < 10:  # fits the Int32 rank
            # NegotiateRankReady: rank <name> was ready for this tensor (on response-cache misses).
            rank = int(name)
            if self.highest_rank is None or rank > self.highest_rank:
                self.highest_rank = rank
            self._emit("instant", name, start, start, pid, rank, outer)
        elif dur > 0 and name.isascii() and name.isdigit():
            self.timed_ticks.append(dur)  # Horovod writes ticks with dur 0: see _refuse_rewrites
        elif dur == 0:
            self._emit("instant", name, start, start, pid, None, outer)
        elif dur < 0:
            self.negative += 1
        else:
            kind, collective = self._activity(name)
            self._emit(kind, name, start, start + dur, pid, None, outer or collective)

    def warnings(self) -> list[str]:
        """Return one counted line per kind of record that was dropped."""
        source = self.source
        lines: list[str] = []
        still_open = sum(len(stack) for stack in self.stacks.values())
        if still_open == 1:
            lines.append(
                f"{source}: 1 span left open at the end of the timeline was dropped "
                "(the job was killed while it ran)"
            )
        elif still_open:
            lines.append(
                f"{source}: {still_open} spans left open at the end of the timeline were dropped "
                "(the job was killed while they ran)"
            )
        if self.unmatched_ends:
            ends = _plural(self.unmatched_ends, "`E` record")
            lines.append(f"{source}: dropped {ends} with no open `B` of the same pid to close")
        if self.negative:
            lines.append(f"{source}: dropped {_plural(self.negative, 'span')} that end before they start")
        if self.incomplete:
            lines.append(f"{source}: dropped {_plural(self.incomplete, 'record')} without `ts` or `pid`")
        if self.other_phases:
            phases = ", ".join(f"{ph!r} ({count})" for ph, count in sorted(self.other_phases.items()))
            lines.append(f"{source}: ignored records of phases Horovod does not write: {phases}")
        return lines

    def _ns(self, values: list[int | float], offset_us: int) -> pl.Series:
        """Return ``(offset_us + value) * 1000`` as Int64 ns: integer arithmetic for integer µs."""
        limit = _INT64_MAX // 1000
        if values and (min(values) + offset_us < -limit or max(values) + offset_us > limit):
            # Polars integer arithmetic wraps around silently: refuse instead.
            msg = f"{self.source}: a timestamp does not fit in 64-bit nanoseconds; {_EXPECTED}"
            raise TraceFormatError(msg)
        series = pl.Series(values, strict=False)  # Int64, or Float64 if a tool rewrote ts as floats
        if series.dtype.is_float():
            # ns of the value first, then the offset in Int64: adding an epoch offset in float64 first
            # would put every time on a 0.25 µs grid (and a short span could end before it starts)
            return (series * 1000).round().cast(pl.Int64()) + offset_us * 1000
        return (series.cast(pl.Int64()) + offset_us) * 1000

    def frame(self, *, offset_us: int) -> pl.DataFrame:
        """Return the rows as a frame with the columns of EVENTS_SCHEMA, ``offset_us`` added to times.

        ``start_ns = (offset_us + ts) * 1000`` in Int64 arithmetic: exact for integer timestamps.
        """
        tensors = self.tensors
        frame = pl.DataFrame(
            {
                "rank": pl.Series(self.rank, dtype=pl.Int32()),
                "kind": pl.Series(self.kind, dtype=pl.String()),
                "name": pl.Series(self.name, dtype=pl.String()),
                "start_ns": self._ns(self.start, offset_us),
                "end_ns": self._ns(self.end, offset_us),
                "pid": pl.Series(self.pid, dtype=pl.Int64()),
                "collective": pl.Series(self.collective, dtype=pl.String()),
                "in_bytes": pl.Series(self.nbytes, dtype=pl.Int64()),
                "dtype": pl.Series(self.dtype, dtype=pl.String()),
                "tensor": pl.Series(
                    [tensors.get(pid) if pid is not None else None for pid in self.pid], dtype=pl.String()
                ),
            }
        )
        derived = {"source", "dur_ns", "out_bytes"}
        nulls = [
            pl.lit(None, dtype=dtype).alias(name)
            for name, dtype in EVENTS_SCHEMA.items()
            if name not in frame.columns and name not in derived
        ]
        return frame.with_columns(
            *nulls,
            pl.lit("horovod").alias("source"),
            (pl.col("end_ns") - pl.col("start_ns")).alias("dur_ns"),
            pl.col("in_bytes").alias("out_bytes"),
        ).sort("start_ns", maintain_order=True)
