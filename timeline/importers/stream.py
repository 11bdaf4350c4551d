"""The Kineto decoder: a trace of any size read in chunks, memory bounded by the chunk.

Takes a path to a ``.pt.trace.json`` file (gzipped or not, any size) and gives the same
:class:`FileResult` as :func:`timeline.importers.kineto.parse_kineto`, while holding at most about
one chunk of JSON text and its decoded events at a time: the file is decompressed as a stream, the
``traceEvents`` array is cut at event boundaries into chunks of ``chunk_bytes``, each chunk is
decoded and reduced to the canonical columns at once (dropping ``python_function``, counters and
instants while decoding), and only the reduced frames are kept. Metadata before or after
``traceEvents`` (``distributedInfo``, ``baseTimeNanoseconds``) is read from the text around the array.
It is the one decoder of Kineto JSON, for every size: the parallel and two-process readers it
replaced paid on no input on this project's 2-core machines (docs/performance.md, "One Kineto
decoder"); a damaged trace is read again whole to be repaired (:mod:`timeline.importers.parse`).

A chunk boundary is the ``}`` that closes an event followed by ``,`` and the ``{`` of the next one;
a candidate inside a string (it would not decode) is skipped for the one before it. Text with no
boundary for :data:`MAX_EVENT_BYTES` (one event that long, a string of tens of MB) stops reading with
an error at the line and column where it starts: memory stays bounded by the chunk size and that
limit, whatever the file holds (the reader, :class:`timeline.importers.files.TraceText`, keeps its
own limits on the decompressed size and collapses runs of blank text).

With a spare core, the polars work of a batch of chunks runs on a thread while the next chunks are
decoded.

With :attr:`ImportOptions.overlap_only`, a trace's CPU operators are skipped only if it holds GPU
kernels, which a profiler writes after its CPU operators: a chunk cannot tell by itself. The header
does: a trace whose ``deviceProperties`` list a GPU is read as one with kernels from its first chunk
on, and read again keeping everything in the rare case none turns up (a CPU-only job on a GPU host).
"""

from __future__ import annotations

import io
import re
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import msgspec
import polars as pl

from timeline.errors import TraceContentError, TraceFormatError
from timeline.importers.files import BLANK_RUN_BYTES, ReadLimitError, TraceText, size_text
from timeline.importers.kineto import (
    Columns,
    add_counts,
    build_frame,
    decode_events,
    extract_columns,
    finish_columns,
    finish_kineto,
)
from timeline.importers.result import FileResult, ImportOptions

__all__ = [
    "MAX_EVENT_BYTES",
    "SERIAL_CHUNK_BYTES",
    "DamagedEndError",
    "parse_kineto_stream",
    "read_head",
]

SERIAL_CHUNK_BYTES = 2 * 1024 * 1024
"""Chunk size of the reader: smaller chunks keep memory near the size of the frame, and a
chunk's text and events stay in cache while its columns are read. 2 MiB: a third fewer page faults
per 54 MB rank than 4 MiB and a few per cent less CPU in paired runs; 1 MiB and less pay more per
chunk (about 20 polars calls each) than they save."""
FINISH_BATCH_ROWS = 32 * 1024
"""The serial reader with a finishing thread finishes the columns of several chunks at once, about
this many events: a polars pass has a fixed cost (its regexes are compiled per call) that small
chunks would pay often, and the batch is what the thread works on while the next chunks are read."""
SERIAL_FINISH_BATCH_ROWS = 256 * 1024
"""Without a thread nothing overlaps the finishing: batches as large as memory allows cheaply (their
columns are a few tens of MB), so that a rank of up to ~250k kept events is finished in one pass."""
MAX_EVENT_BYTES = 64 * 1024 * 1024
"""The most text the chunked reader holds without finding the end of an event: 64 MiB. A profiler's
events are at most a few kB (a name, a stack, shapes); text with no event boundary for this long (a
string of 1 GiB, a file that is not a trace) stops reading with an error at the line and column where
it starts, as does a header this long before ``traceEvents``."""
_HEAD_BLOCK = 1024 * 1024
_KEY = b'"traceEvents"'
_GENERIC = msgspec.json.Decoder()
_SYNTAX = msgspec.json.Decoder(list[msgspec.Raw])  # checks the syntax of an array, building nothing
_VALID = msgspec.json.Decoder(msgspec.Raw)  # checks the syntax of any document, building nothing
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_TRAILING = re.compile(r"trailing characters \(byte (\d+)\)")
_BYTE = re.compile(r"\(byte (\d+)\)")
_MAX_BOUNDARY_TRIES = 64
_TAIL_BYTES = 64 * 1024  # at the end of the text, what is left after the last full cut
_CUT_OFF = "file cut off mid-record, closed after the last complete event"  # as repair_json says it
_AFTER_END = "bytes after the end of the document dropped"  # as repair_json says it


@contextmanager
def _open(path: Path, source: str | None = None) -> Iterator[TraceText]:
    """Open ``path`` for reading its text (gzip recognised by its magic number), within the limits."""
    with TraceText(path, source=source) as handle:
        yield handle


def _nesting_error(source: str) -> TraceFormatError:
    """Return :func:`~timeline.importers.repair.nesting_error`, imported for damaged input only.

    Its module's regexes take milliseconds to compile, at every start of a process reading a trace.
    """
    from timeline.importers.repair import nesting_error

    return nesting_error(source)


def read_head(path: Path, *, size: int = 4096) -> bytes:
    """Return the first ``size`` decompressed bytes of a file."""
    with _open(path) as handle:
        return handle.read(size)


class _Position:
    """How many bytes of the decompressed text precede the buffer, to report errors as FILE:LINE:COL.

    Lines are counted only when an error is reported, by reading the text again up to the error:
    counting them chunk by chunk would cost a pass over every byte of every good file.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def advance(self, count: int) -> None:
        """Record that ``count`` more bytes now lie before the buffer."""
        self.offset += count

    def locate(self, index: int) -> tuple[int, int]:
        """Return the 1-based line and column of the buffer's byte ``index``."""
        target = self.offset + index
        lines, line_start, done = 0, 0, 0
        with _open(self.path) as handle:
            while done < target:
                block = handle.read(min(_HEAD_BLOCK, target - done))
                if not block:
                    break
                newlines = block.count(b"\n")
                if newlines:
                    lines += newlines
                    line_start = done + block.rfind(b"\n") + 1
                done += len(block)
        return lines + 1, target - line_start + 1


def _read_header(handle: io.RawIOBase, source: str, position: _Position) -> tuple[dict[str, Any], bytearray]:
    """Read up to the ``[`` of ``traceEvents``; return the metadata before it and the bytes after."""
    head = bytearray()
    key = -1
    while True:
        searched = max(0, len(head) - len(_KEY))
        block = handle.read(_HEAD_BLOCK)
        head += block
        if key < 0:
            key = head.find(_KEY, searched)
        if key >= 0:
            bracket = head.find(b"[", max(key, searched))
            if bracket >= 0:
                break
        if not block:
            if not _is_json(head):  # cut off or damaged before its events: the repair reader says where
                raise TraceFormatError(f"{source}:1:1: not valid JSON before a traceEvents array")
            msg = f"{source}:1:1: no traceEvents array: not a PyTorch profiler trace"
            raise TraceContentError(msg)
        if len(head) > MAX_EVENT_BYTES:
            msg = (
                f"{source}:1:1: no traceEvents array in the first {size_text(MAX_EVENT_BYTES)} of text "
                "(MAX_EVENT_BYTES): not a PyTorch profiler trace"
            )
            raise TraceContentError(msg)
    prefix = bytes(head[:key]).strip()
    metadata: dict[str, Any] = {}
    if prefix.startswith(b"{") and len(prefix) > 1:
        try:
            parsed = _GENERIC.decode(prefix.rstrip(b",") + b"}")
        except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError):
            parsed = None  # damaged metadata: the events may still be fine
        except RecursionError:
            raise _nesting_error(source) from None
        if isinstance(parsed, dict):
            metadata.update(parsed)
    rest = head[bracket + 1 :]
    position.advance(bracket + 1)
    return metadata, rest


def _is_json(text: bytearray) -> bool:
    """Whether ``text`` is one JSON document (checked without building it)."""
    try:
        _VALID.decode(text)
    except (msgspec.DecodeError, RecursionError):
        return False
    return True


def _cut(buffer: bytearray, source: str, repairs: dict[str, int]) -> tuple[list[Any], int]:
    """Decode the complete events at the front of ``buffer``; return them and the bytes used."""
    end = len(buffer)
    for _ in range(_MAX_BOUNDARY_TRIES):
        # the last "}, {" before `end`: search a window backwards (regex has no reverse search)
        start = max(0, end - 65536)
        matches = list(_BOUNDARY.finditer(buffer, start, end))
        if not matches:
            if start == 0:
                return [], 0
            end = start + 16  # widen the window backwards
            continue
        boundary = matches[-1].start() + 1  # just after the "}"
        chunk = b"[" + bytes(buffer[:boundary]) + b"]"
        try:
            return decode_events(chunk, source, repairs=repairs), boundary
        except msgspec.DecodeError:
            end = matches[-1].start()
    return [], 0


def _decode_tail(
    buffer: bytearray,
    source: str,
    position: _Position,
    warnings: list[str],
    repairs: dict[str, int],
    *,
    repair_end: bool = True,
) -> tuple[list[Any], dict[str, Any]]:
    """Decode the last events and the metadata that follows the ``traceEvents`` array.

    Damage at the end of the text (cut off mid-record or before the document's last ``}``, bytes
    after the document) is repaired here as the whole-text reader repairs it, counted in
    ``repairs``, or with ``repair_end=False`` is a :class:`DamagedEndError`.
    """
    text = b"[" + bytes(buffer)
    try:
        # syntax first: its error positions are the text's own (the decoding may repair values,
        # invalid UTF-8 for one, which moves them)
        _SYNTAX.decode(text)
    except msgspec.DecodeError as exc:
        message = str(exc)
    except RecursionError:
        raise _nesting_error(source) from None
    else:
        events = decode_events(text, source, repairs=repairs)
        _count_cut_off(source, repairs, repair_end)  # the text ends with the array: no closing "}"
        return events, {}
    trailing = _TRAILING.search(message)
    if trailing is not None:
        split = int(trailing.group(1)) - 1  # msgspec names the byte after the first extra one
        events = decode_events(text[:split], source, repairs=repairs)
        return events, _after_array(text[split:], source, warnings, repairs, repair_end)
    if "truncated" in message:
        _count_cut_off(source, repairs, repair_end)
        closed = _closed_after_last_event(buffer, source, repairs)
        return (closed if closed is not None else _cut(buffer, source, repairs)[0]), {}
    raise _malformed(message, source, position)


def _after_array(
    rest: bytes, source: str, warnings: list[str], repairs: dict[str, int], repair_end: bool
) -> dict[str, Any]:
    """Return the metadata after the ``traceEvents`` array; ``rest``: the text after its ``]``.

    The document ends there: ``}``, or ``, "key": value, ...}``. Bytes after its end are dropped and
    counted, a document cut off there loses that metadata (counted as a cut), as the whole-text reader
    does; with ``repair_end=False`` either is a :class:`DamagedEndError`.
    """
    body = rest.lstrip()
    if not body.startswith((b",", b"}")):
        if not repair_end:
            raise DamagedEndError(f"{source}: text after traceEvents that is not JSON")
        warnings.append(f"{source}: unreadable metadata after traceEvents ignored")
        return {}
    document = b"{" + (body[1:] if body.startswith(b",") else body)
    try:
        _VALID.decode(document)
    except msgspec.DecodeError as exc:
        message = str(exc)
        trailing = _TRAILING.search(message)
        if "truncated" in message:
            _count_cut_off(source, repairs, repair_end)
            return {}
        if trailing is None:
            if not repair_end:
                raise DamagedEndError(f"{source}: damaged metadata after traceEvents") from None
            warnings.append(f"{source}: unreadable metadata after traceEvents ignored")
            return {}
        if not repair_end:
            raise DamagedEndError(f"{source}: bytes after the end of the document") from None
        end = int(trailing.group(1)) - 1
        repairs[_AFTER_END] = repairs.get(_AFTER_END, 0) + len(document) - end
        document = document[:end]
    except RecursionError:
        raise _nesting_error(source) from None
    try:
        parsed = _GENERIC.decode(document)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError):
        warnings.append(f"{source}: unreadable metadata after traceEvents ignored")
        return {}
    return parsed if isinstance(parsed, dict) else {}


class DamagedEndError(TraceFormatError):
    """The end of the text is damaged (``repair_end=False``): the caller reads it whole to repair it."""


def _count_cut_off(source: str, repairs: dict[str, int], repair_end: bool) -> None:
    """Count a text cut off (closed after its last complete event), or raise :class:`DamagedEndError`."""
    if not repair_end:
        raise DamagedEndError(f"{source}: cut off mid-record")
    repairs[_CUT_OFF] = repairs.get(_CUT_OFF, 0) + 1


def _closed_after_last_event(buffer: bytearray, source: str, repairs: dict[str, int]) -> list[Any] | None:
    """Return every event of a text cut off right after one (``{...},``), as the repair closes it; else None.

    The cut at the last ``}, {`` (:func:`_cut`) would leave out the last complete event.
    """
    text = bytes(buffer).rstrip(b" \t\r\n,")
    if not text.endswith(b"}"):
        return None
    try:
        return decode_events(b"[" + text + b"]", source, repairs=repairs)
    except msgspec.DecodeError:
        return None


def _malformed(message: str, source: str, position: _Position) -> TraceFormatError:
    """Return the error for a syntax error msgspec reported in the text after ``[`` (``message``)."""
    match = _BYTE.search(message)
    index = max(0, int(match.group(1)) - 1) if match else 0
    line, col = position.locate(index)
    detail = message.replace("JSON is malformed: ", "").split(" (byte")[0]
    msg = f"{source}:{line}:{col}: {detail}; the file is not valid JSON (too large to repair in place)"
    return TraceFormatError(msg)


class _NoKernelsError(Exception):
    """The header listed GPUs, so CPU operators were skipped, but no kernel came: read again."""


def lists_gpus(metadata: dict[str, Any]) -> bool:
    """Return whether a trace's metadata lists a GPU (``deviceProperties``, non-empty)."""
    devices = metadata.get("deviceProperties")
    return isinstance(devices, list) and len(devices) > 0


class _Frames:
    """The reduced frames of the chunks read so far, with their sparse metadata and drop counts.

    The columns of consecutive chunks are gathered until they hold :data:`FINISH_BATCH_ROWS` events
    (:data:`SERIAL_FINISH_BATCH_ROWS` without a thread), then finished at once. With a thread
    ``pool``, that polars work (:func:`finish_columns`, which releases the GIL) runs in the pool
    while the reader decodes the next chunks; at most two batches are in flight.
    ``gpu`` (set by the reader from the header): the trace is taken to hold GPU kernels from its
    first chunk on, as its header lists GPUs (only read with :attr:`ImportOptions.overlap_only`).
    """

    def __init__(self, options: ImportOptions, pool: ThreadPoolExecutor | None = None) -> None:
        self.options = options
        self.pool = pool
        self.repair_end = True
        """Damage at the end of the text is repaired here (else: :class:`DamagedEndError`)."""
        self.gpu = False
        self.kernels = False
        """Whether a chunk so far held a GPU kernel (looked for with ``overlap_only`` only)."""
        self.pending: deque[Future[tuple[pl.DataFrame, dict[str, int], pl.DataFrame]]] = deque()
        self.frames: list[pl.DataFrame] = []
        self.metas: list[pl.DataFrame] = []
        self.dropped: dict[str, int] = {}
        self.repairs: dict[str, int] = {}
        """What the decoding repaired, counted as :func:`~timeline.importers.repair.repair_json` does."""
        self.rows = 0
        self.batch: list[Columns] = []
        self.batch_rows = 0
        self.batch_limit = SERIAL_FINISH_BATCH_ROWS if pool is None else FINISH_BATCH_ROWS

    def add(self, built: tuple[pl.DataFrame, dict[str, int], pl.DataFrame], *, kernels: bool = False) -> None:
        self.kernels |= kernels
        frame, counts, meta = built
        self.frames.append(frame)
        # the chunk's metadata, keyed by row position in the whole frame
        self.metas.append(meta.with_columns(pl.col("_row") + self.rows))
        self.rows += frame.height
        add_counts(self.dropped, counts)

    def add_events(self, events: list[Any]) -> None:
        if not events:
            return
        # once a kernel was seen, later chunks are a GPU trace's too
        columns = extract_columns(events, self.options, gpu=(self.gpu or self.kernels) or None)
        self.kernels |= columns.kernels
        self.batch.append(columns)
        self.batch_rows += columns.frame.height
        if self.batch_rows >= self.batch_limit:
            self._flush()

    def _flush(self) -> None:
        if not self.batch:
            return
        columns = Columns.concat(self.batch)
        self.batch, self.batch_rows = [], 0
        if self.pool is None:
            self.add(finish_columns(columns, self.options))
            return
        self.pending.append(self.pool.submit(finish_columns, columns, self.options))
        while len(self.pending) > 1:
            self.add(self.pending.popleft().result())

    def collect(self) -> tuple[pl.DataFrame, pl.DataFrame]:
        """Finish every batch; return the frame of the events read and its metadata, each one frame."""
        self._flush()
        while self.pending:
            self.add(self.pending.popleft().result())
        if not self.frames:
            self.add(build_frame([], self.options))
        frames, metas = self.frames, self.metas
        frame = pl.concat(frames, how="vertical") if len(frames) > 1 else frames[0]
        meta = pl.concat(metas, how="vertical") if len(metas) > 1 else metas[0]
        self.frames, self.metas = [frame], [meta]
        return frame, meta

    def finish(self, metadata: dict[str, Any], *, source: str, warnings: list[str]) -> FileResult:
        frame, meta = self.collect()
        if self.gpu and self.options.overlap_only and not self.kernels:
            raise _NoKernelsError
        self.frames, self.metas = [], []
        return finish_kineto(frame, self.dropped, metadata, source=source, warnings=warnings, meta=meta)


def _last_boundary(buffer: bytearray, end: int, floor: int = 0) -> int:
    """Return the index just after the ``}`` of the last ``}, {`` in ``buffer[floor:end]``, or 0 if none.

    ``floor``: where an earlier search, before more text was read, found no usable boundary.
    """
    floor = max(0, floor)
    while end > floor:
        start = max(floor, end - 65536)
        matches = list(_BOUNDARY.finditer(buffer, start, end))
        if matches:
            return matches[-1].start() + 1
        if start == floor:
            return 0
        end = start + 16  # widen the window backwards
    return 0


def _searched_to(end: int) -> int:
    """Return the floor of the next boundary search once ``buffer[:end]`` was searched in vain.

    The last bytes are searched again: a boundary may begin there and end in the text read next
    (its blank text is at most two collapsed runs, see :data:`~timeline.importers.files.BLANK_RUN_BYTES`).
    """
    return end - 4 * BLANK_RUN_BYTES


def _too_long(buffer: bytearray, end: int, source: str, position: _Position) -> TraceFormatError:
    """Return the error for ``buffer[1:end]``, text with no usable cut for :data:`MAX_EVENT_BYTES`.

    Damage (every cut after it fails to decode) is located where it is; else the text is one event
    longer than the limit.
    """
    with memoryview(buffer) as view:
        try:
            _SYNTAX.decode(view[:end])  # buffer[0] is "["
        except msgspec.DecodeError as exc:
            message = str(exc)
            if "truncated" not in message and "trailing characters" not in message:
                return _malformed(message, source, position)
        except RecursionError:
            return _nesting_error(source)
    line, col = position.locate(0)
    msg = (
        f"{source}:{line}:{col}: no end of an event in the {size_text(MAX_EVENT_BYTES)} of text from "
        "here (MAX_EVENT_BYTES): a string or record that long is not a profiler's; the file is damaged "
        "or not a trace"
    )
    return ReadLimitError(msg)


def _read_more(handle: io.RawIOBase, buffer: bytearray, end: int, grow: int) -> tuple[int, bool]:
    """Read into ``buffer[end:]`` (grown by ``grow`` bytes when full); return the new end and EOF."""
    if end == len(buffer):
        buffer.extend(bytes(grow))
    with memoryview(buffer) as view:
        n = handle.readinto(view[end:])
    return end + n, n == 0


def _read_warnings(handle: TraceText, out: _Frames, warnings: list[str]) -> list[str]:
    """Return the warnings of a file read in chunks, in the order the whole-file reader gives them.

    What reading the text met (:meth:`TraceText.notes`), what the decoding repaired (as
    :func:`~timeline.importers.repair.repair_json` words it), then the rest.
    """
    return [*handle.notes(), *_repaired(handle.source, out.repairs), *warnings]


def _repaired(source: str, repairs: dict[str, int]) -> list[str]:
    """Return the warnings of what the decoding repaired, as the whole-file reader words them."""
    return [f"{source}: repaired malformed JSON: {what} ({n})" for what, n in sorted(repairs.items()) if n]


def parse_kineto_stream(
    path: Path,
    *,
    source: str,
    options: ImportOptions | None = None,
    chunk_bytes: int = SERIAL_CHUNK_BYTES,
    spare_core: bool = True,
    repair_end: bool = True,
) -> FileResult:
    """Parse a Kineto trace of any size in chunks, with memory bounded by the chunk size.

    Parameters
    ----------
    path
        The trace file (``.json`` or ``.json.gz``, recognised by content).
    source
        The file name used in messages.
    options
        Classification rules and whether to keep ``python_function`` events.
    chunk_bytes
        About how many bytes of JSON text are decoded at once.
    spare_core
        Whether a core is free for a thread that finishes the columns of a batch in polars while
        the next chunks are decoded. False when every core runs a process of the same job (a rank's
        task): the thread would only add hand-overs between threads and GIL waits.
    repair_end
        Damage at the end of the text is repaired as the whole-text reader repairs it, with a counted
        repair in the warnings: a text cut off (a job killed while writing) is closed after its last
        complete event, bytes after the end of the document (a log line appended) are dropped.
        False: it is a :class:`DamagedEndError`, for a caller that repairs the whole text instead
        (:func:`timeline.importers.parse.parse_file`).

    Returns
    -------
    FileResult
        The same result as :func:`timeline.importers.kineto.parse_kineto` on the whole file.

    Raises
    ------
    TraceFormatError
        JSON damage inside the array (located as FILE:LINE:COL).
    TraceContentError
        No ``traceEvents`` array.
    """
    options = options or ImportOptions()

    def read(gpu_header: bool) -> FileResult:
        return _parse_serial(
            path,
            source,
            options,
            chunk_bytes,
            gpu_header=gpu_header,
            spare_core=spare_core,
            repair_end=repair_end,
        )

    try:
        return read(gpu_header=True)
    except _NoKernelsError:
        # the header lists GPUs, yet no kernel came: a CPU-only job, which keeps its CPU operators
        return read(gpu_header=False)


def _decode_front(
    buffer: bytearray, end: int, source: str, repairs: dict[str, int], floor: int = 0
) -> tuple[list[Any], int]:
    """Decode the complete events of ``buffer[1:end]`` (``buffer[0]`` is ``[``) up to the last cut.

    Returns the events and the index just after the ``}`` of the last one, or ``([], 0)`` when no
    cut decodes. The text is decoded in place, with the byte after the cut set to ``]`` for the
    time of the decoding: no copy of the chunk is made.
    """
    limit = end
    for _ in range(_MAX_BOUNDARY_TRIES):
        cut = _last_boundary(buffer, limit, floor)
        if cut <= 1:
            return [], 0
        saved = buffer[cut]
        buffer[cut] = 0x5D  # "]"
        try:
            with memoryview(buffer) as view:
                return decode_events(view[: cut + 1], source, repairs=repairs), cut
        except msgspec.DecodeError as exc:
            if "trailing characters" in str(exc):
                return [], 0  # the array ends before the cut: the rest is the tail's
            limit = cut - 1  # the cut is inside a string: try the one before it
        finally:
            buffer[cut] = saved
    return [], 0


def _parse_serial(
    path: Path,
    source: str,
    options: ImportOptions,
    chunk_bytes: int,
    *,
    gpu_header: bool,
    spare_core: bool,
    repair_end: bool,
) -> FileResult:
    """Decompress, cut and decode in this process, one chunk of text at a time, into one buffer.

    ``spare_core``: finish the columns in a thread while the next chunks are decoded.
    ``repair_end``: as :func:`parse_kineto_stream` takes it.
    """
    warnings: list[str] = []
    position = _Position(path)
    with ExitStack() as stack:
        pool = stack.enter_context(ThreadPoolExecutor(max_workers=1)) if spare_core else None
        handle = stack.enter_context(_open(path, source))
        out = _Frames(options, pool)
        out.repair_end = repair_end
        metadata, head_rest = _read_header(handle, source, position)
        out.gpu = gpu_header and lists_gpus(metadata)
        metadata.update(_read_events(handle, head_rest, out, chunk_bytes, source, position, warnings))
        return out.finish(metadata, source=source, warnings=_read_warnings(handle, out, warnings))


def _read_events(
    handle: io.RawIOBase,
    head_rest: bytes | bytearray,
    out: _Frames,
    chunk_bytes: int,
    source: str,
    position: _Position,
    warnings: list[str],
) -> dict[str, Any]:
    """Read the events of the ``traceEvents`` array into ``out``, one chunk of text at a time.

    ``head_rest``: the text after the array's ``[`` already read; ``handle`` gives the rest. Returns
    the metadata that follows the array.
    """
    # buffer[0] is the "[" that makes each chunk a JSON array; the text follows it
    buffer = bytearray(1 + max(len(head_rest), chunk_bytes) + chunk_bytes // 4)
    buffer[0] = 0x5B  # "["
    buffer[1 : 1 + len(head_rest)] = head_rest
    end = 1 + len(head_rest)
    del head_rest
    eof = False
    floor = 0  # where the text with no usable cut begins (see _searched_to)
    while True:
        while not eof and end < chunk_bytes:
            end, eof = _read_more(handle, buffer, end, chunk_bytes)
        # At the end, the cut stays clear of the last 64 KiB (the metadata after the array):
        # what is left there is decoded once by _decode_tail.
        events, used = (
            ([], 0)
            if eof and end <= _TAIL_BYTES
            else _decode_front(buffer, end - eof * _TAIL_BYTES, source, out.repairs, floor)
        )
        if used == 0 and eof:
            events, trailer = _decode_tail(
                buffer[1:end], source, position, warnings, out.repairs, repair_end=out.repair_end
            )
            out.add_events(events)
            return trailer
        if used == 0:
            if end > MAX_EVENT_BYTES:
                raise _too_long(buffer, end, source, position)
            # no cut in a whole chunk: one giant event, or damage; read more before deciding
            floor = _searched_to(end)
            end, eof = _read_more(handle, buffer, end, chunk_bytes)
            continue
        floor = 0
        # msgspec.Raw values (Input Dims) point into the buffer: build the frame before moving it
        out.add_events(events)
        del events
        rest = used
        while rest < end and buffer[rest] in b" \t\r\n,":
            rest += 1
        position.advance(rest - 1)
        buffer[1 : 1 + end - rest] = buffer[rest:end]  # the unread text (less than an event)
        end = 1 + end - rest
