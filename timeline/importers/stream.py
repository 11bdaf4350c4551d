"""Streaming import of Kineto traces larger than memory comfortably allows.

Takes a path to a ``.pt.trace.json`` file (gzipped or not, any size) and gives the same
:class:`FileResult` as :func:`timeline.importers.kineto.parse_kineto`, while holding at most about
one chunk of JSON text and its decoded events at a time: the file is decompressed as a stream, the
``traceEvents`` array is cut at event boundaries into chunks of ``chunk_bytes``, each chunk is
decoded and reduced to the canonical columns at once (dropping ``python_function``, counters and
instants while decoding), and only the reduced frames are kept. Metadata before or after
``traceEvents`` (``distributedInfo``, ``baseTimeNanoseconds``) is read from the text around the array.

A chunk boundary is the ``}`` that closes an event followed by ``,`` and the ``{`` of the next one;
a candidate inside a string (it would not decode) is skipped for the one before it. Text with no
boundary for :data:`MAX_EVENT_BYTES` (one event that long, a string of tens of MB) stops reading with
an error at the line and column where it starts: memory stays bounded by the chunk size and that
limit, whatever the file holds (the reader, :class:`timeline.importers.files.TraceText`, keeps its
own limits on the decompressed size and collapses runs of blank text).

With ``workers > 1`` this process only decompresses and cuts; worker processes decode and reduce the
chunks, in order, and the text travels to them through reusable shared-memory slots. A cut that
falls inside a string, or damage, makes that reading stop, and the file is read again serially,
which checks every cut and locates damage as FILE:LINE:COL.

With a ``helper`` (a started :class:`~timeline.executors.LocalExecutor`), the text is read in two
halves (:func:`decode_half`): the helper decodes it up to the first ``}, {`` past
:data:`SPLIT_SHARE` of it, this process decompresses and skips that part and decodes the rest, each
as the serial reader does, and the frames are put one after the other. The first half must end where
the array closes (its ``}`` ends an event); if not, damage, or a helper that fails, the file is read
again serially. A helper not started on its half when this process is done with its own leaves it to
this process (whichever claims it first decodes it).

With :attr:`ImportOptions.overlap_only`, a trace's CPU operators are skipped only if it holds GPU
kernels, which a profiler writes after its CPU operators: a chunk cannot tell by itself. The header
does: a trace whose ``deviceProperties`` list a GPU is read as one with kernels from its first chunk
on, and read again keeping everything in the rare case none turns up (a CPU-only job on a GPU host).
"""

from __future__ import annotations

import io
import mmap
import os
import re
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from timeline.executors import LocalExecutor

__all__ = [
    "DEFAULT_CHUNK_BYTES",
    "MAX_EVENT_BYTES",
    "SERIAL_CHUNK_BYTES",
    "SPLIT_SHARE",
    "Half",
    "HalfResult",
    "decode_half",
    "parse_kineto_stream",
    "read_head",
]

DEFAULT_CHUNK_BYTES = 32 * 1024 * 1024
"""Chunk size of the parallel reader: a task per chunk, about 32 MiB of JSON each."""
SERIAL_CHUNK_BYTES = 2 * 1024 * 1024
"""Chunk size of the serial reader: smaller chunks keep memory near the size of the frame, and a
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
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_TRAILING = re.compile(r"trailing characters \(byte (\d+)\)")
_BYTE = re.compile(r"\(byte (\d+)\)")
_MAX_BOUNDARY_TRIES = 64
_TAIL_BYTES = 64 * 1024  # at the end of the text, what is left after the last full cut
_CUT_OFF = "file cut off mid-record, closed after the last complete event"  # as repair_json says it


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
    buffer: bytearray, source: str, position: _Position, warnings: list[str], repairs: dict[str, int]
) -> tuple[list[Any], dict[str, Any]]:
    """Decode the last events and the metadata that follows the ``traceEvents`` array."""
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
        return decode_events(text, source, repairs=repairs), {}
    trailing = _TRAILING.search(message)
    if trailing is not None:
        split = int(trailing.group(1)) - 1  # msgspec names the byte after the first extra one
        events = decode_events(text[:split], source, repairs=repairs)
        rest = text[split:].strip()
        metadata: dict[str, Any] = {}
        if rest.startswith(b","):
            try:
                parsed = _GENERIC.decode(b"{" + rest[1:].strip())
            except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError):
                warnings.append(f"{source}: unreadable metadata after traceEvents ignored")
                parsed = None
            except RecursionError:
                raise _nesting_error(source) from None
            if isinstance(parsed, dict):
                metadata = parsed
        return events, metadata
    if "truncated" in message:
        events, _ = _cut(buffer, source, repairs)
        repairs[_CUT_OFF] = repairs.get(_CUT_OFF, 0) + 1
        return events, {}
    raise _malformed(message, source, position)


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


class _Slot:
    """A file in shared memory (``/dev/shm``) that carries one chunk of text to a worker.

    Reused for chunk after chunk: the pages are faulted in once, and no chunk is pickled through a
    pipe (a 32 MiB chunk would otherwise be copied four times on its way).
    """

    def __init__(self, directory: str, size: int) -> None:
        import tempfile  # the parallel reader only

        fd, name = tempfile.mkstemp(prefix="timeline-chunk-", dir=directory)
        self.path = name
        self.file = os.fdopen(fd, "r+b")
        self.size = 0
        self.map: mmap.mmap | None = None
        self.resize(size)

    def resize(self, size: int) -> None:
        if self.map is not None:
            self.map.close()
        self.file.truncate(size)
        self.size = size
        self.map = mmap.mmap(self.file.fileno(), size)

    def write(self, text: memoryview) -> int:
        """Store ``[`` + text + ``]``; return its length."""
        length = len(text) + 2
        if length > self.size:
            self.resize(max(length, 2 * self.size))
        assert self.map is not None
        self.map[0:1] = b"["
        self.map[1 : length - 1] = text
        self.map[length - 1 : length] = b"]"
        return length

    def close(self) -> None:
        if self.map is not None:
            self.map.close()
        self.file.close()
        Path(self.path).unlink(missing_ok=True)


def _shared_directory() -> str:
    """Return where chunk slots live: shared memory when there is some, else the temp directory."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        return str(shm)
    import tempfile

    return tempfile.gettempdir()


_Built = tuple[tuple[pl.DataFrame, dict[str, int], pl.DataFrame], bool, dict[str, int]]


def _build_chunk(path: str, length: int, source: str, options: ImportOptions, gpu: bool) -> _Built | None:
    """Decode the chunk in a slot and build its frame (a worker task); None if it is not valid JSON.

    Returns the frame, its drop counts and metadata (:func:`build_frame`), whether the chunk held
    a GPU kernel, and what the decoding repaired (:func:`decode_events`). ``gpu``: as :class:`_Frames`
    takes it.
    """
    repairs: dict[str, int] = {}
    with Path(path).open("rb") as handle, mmap.mmap(handle.fileno(), length, access=mmap.ACCESS_READ) as text:
        view = memoryview(text)
        try:
            try:
                events = decode_events(view, source, repairs=repairs)
            except msgspec.DecodeError:
                return None  # a boundary inside a string, or damage: the serial reader sorts it out
            # msgspec.Raw values (Input Dims) point into the chunk: build the frame before letting go
            columns = extract_columns(events, options, gpu=gpu or None)
            del events
            built = finish_columns(columns, options), columns.kernels, repairs
        finally:
            view.release()
    return built


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


class _ChunkFailedError(Exception):
    """A chunk cut by the parallel reader did not decode: read the file again serially."""


def _parse_parallel(
    path: Path, source: str, options: ImportOptions, chunk_bytes: int, workers: int, *, gpu_header: bool
) -> FileResult:
    """Cut the text into chunks here and decode them in worker processes, in order.

    The cut is the last ``}, {`` of each chunk, not checked here: one that falls inside a string
    makes the chunk fail to decode, and the caller then reads the file serially (which checks every
    cut by decoding it). Damage, anywhere, is reported by the serial reader as well. The text is
    decompressed into one reusable buffer and handed over in reusable shared-memory slots, so this
    process allocates no memory per chunk.
    """
    from timeline.workers import polars_threads, process_pool, worker_environment

    warnings: list[str] = []
    position = _Position(path)
    out = _Frames(options)
    directory = _shared_directory()
    slots: list[_Slot] = []
    free: deque[_Slot] = deque()
    pending: deque[tuple[Future[_Built | None], _Slot]] = deque()

    def collect_oldest() -> None:
        future, slot = pending.popleft()
        built = future.result()
        free.append(slot)
        if built is None:
            raise _ChunkFailedError
        out.add(built[0], kernels=built[1])
        add_counts(out.repairs, built[2])

    try:
        with (
            _open(path, source) as handle,
            process_pool(workers) as pool,
        ):
            metadata, head_rest = _read_header(handle, source, position)
            out.gpu = gpu_header and lists_gpus(metadata)
            capacity = 2 * chunk_bytes + len(head_rest)
            buffer = bytearray(capacity)
            buffer[: len(head_rest)] = head_rest
            end = len(head_rest)
            eof = False
            floor = 0
            try:
                while True:
                    while not eof and end < chunk_bytes:
                        end, eof = _read_more(handle, buffer, end, chunk_bytes)
                    if eof:
                        break
                    used = _last_boundary(buffer, end, floor)
                    if used == 0:
                        if end > chunk_bytes + MAX_EVENT_BYTES:
                            raise _ChunkFailedError  # an event too long: located by the serial reader
                        # no boundary in a whole chunk: one giant event, or damage; read more first
                        floor = _searched_to(end)
                        end, eof = _read_more(handle, buffer, end, chunk_bytes)
                        continue
                    floor = 0
                    if not free:
                        if len(slots) <= workers:
                            slots.append(_Slot(directory, chunk_bytes + chunk_bytes // 4))
                            free.append(slots[-1])
                        else:
                            collect_oldest()
                    slot = free.popleft()
                    with memoryview(buffer) as view:
                        length = slot.write(view[:used])
                    # workers start on the first submissions
                    with worker_environment(polars_threads(workers), task=_build_chunk):
                        task = pool.submit(_build_chunk, slot.path, length, source, options, out.gpu)
                    pending.append((task, slot))
                    rest = used
                    while rest < end and buffer[rest] in b" \t\r\n,":
                        rest += 1
                    # keep the unread text (less than an event) at the front
                    buffer[: end - rest] = buffer[rest:end]
                    end -= rest
                # the last events and the metadata after the array, here, while the workers finish
                try:
                    tail, trailer = _decode_tail(buffer[:end], source, position, warnings, out.repairs)
                except TraceFormatError:
                    raise _ChunkFailedError from None  # located by the serial reader
                del buffer
                while pending:
                    collect_oldest()
                out.add_events(tail)
                metadata.update(trailer)
            except BaseException:
                for future, _ in pending:
                    future.cancel()
                raise
    finally:
        for slot in slots:
            slot.close()
    return out.finish(metadata, source=source, warnings=_read_warnings(handle, out, warnings))


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
    chunk_bytes: int | None = None,
    workers: int = 1,
    spare_core: bool = True,
    helper: LocalExecutor | None = None,
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
        About how many bytes of JSON text are decoded at once (default:
        :data:`DEFAULT_CHUNK_BYTES` in parallel, :data:`SERIAL_CHUNK_BYTES` serially).
    workers
        Processes decoding chunks in parallel while this one decompresses and cuts the text (1: all
        here). Memory then holds about ``workers + 1`` chunks in flight, and each worker one chunk.
    spare_core
        Whether a core is free for a thread that finishes the columns of a batch in polars while
        the next chunks are decoded (serial reading). False when every core runs a process of the
        same job (a rank's task): the thread would only add hand-overs between threads and GIL
        waits.
    helper
        A :class:`~timeline.executors.LocalExecutor` whose helper process is already started
        (:meth:`~timeline.executors.LocalExecutor.start`, importing this module): the text is
        decoded in two halves, the first (:data:`SPLIT_SHARE`) by the helper, or here if it has not
        started it when the second is done, each as the serial reader does (:func:`decode_half`).
        Used once: its helper is stopped when done. Where the halves do not decode, or the helper
        fails, the file is read serially.

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
    try:
        if helper is not None and workers == 1:
            halves = _parse_halves(path, source, options, chunk_bytes or SERIAL_CHUNK_BYTES, helper)
            if halves is not None:
                return halves
        return _parse_chunks(
            path, source, options, chunk_bytes, workers, gpu_header=True, spare_core=spare_core
        )
    except _NoKernelsError:
        # the header lists GPUs, yet no kernel came: a CPU-only job, which keeps its CPU operators
        return _parse_chunks(
            path, source, options, chunk_bytes, workers, gpu_header=False, spare_core=spare_core
        )


def _parse_chunks(
    path: Path,
    source: str,
    options: ImportOptions,
    chunk_bytes: int | None,
    workers: int,
    *,
    gpu_header: bool,
    spare_core: bool,
) -> FileResult:
    """Read in parallel where workers can start and the cuts decode, else serially."""
    if workers > 1:
        from timeline.workers import can_spawn

        if can_spawn():
            from concurrent.futures.process import BrokenProcessPool

            try:
                return _parse_parallel(
                    path, source, options, chunk_bytes or DEFAULT_CHUNK_BYTES, workers, gpu_header=gpu_header
                )
            except _ChunkFailedError:
                pass  # a cut inside a string, or damage: read again, serially, checking every cut
            except BrokenProcessPool:
                pass  # workers could not start (a script without `if __name__ == "__main__":`)
    return _parse_serial(
        path, source, options, chunk_bytes or SERIAL_CHUNK_BYTES, gpu_header=gpu_header, spare_core=spare_core
    )


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
    path: Path, source: str, options: ImportOptions, chunk_bytes: int, *, gpu_header: bool, spare_core: bool
) -> FileResult:
    """Decompress, cut and decode in this process, one chunk of text at a time, into one buffer.

    ``spare_core``: finish the columns in a thread while the next chunks are decoded.
    """
    warnings: list[str] = []
    position = _Position(path)
    with ExitStack() as stack:
        pool = stack.enter_context(ThreadPoolExecutor(max_workers=1)) if spare_core else None
        handle = stack.enter_context(_open(path, source))
        out = _Frames(options, pool)
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
            events, trailer = _decode_tail(buffer[1:end], source, position, warnings, out.repairs)
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


SPLIT_SHARE = 0.45
"""Where the text of a trace read in two halves (:func:`parse_kineto_stream` with a ``helper``) is
split, as a share of its size: the first part goes to the helper, the rest is read here after
decompressing (and skipping) the first. Less than half: the helper, started by the command once it
knows what it reads, is ready a little after this process reaches the trace (both import polars
meanwhile), about a fifth of the decoding's time later (docs/performance.md)."""
_PARTIAL_BOUNDARY = re.compile(rb"\s*(?:,\s*)?")


class _SplitFailedError(Exception):
    """The split point of a trace read in halves fell inside a string or an event: read it serially."""


class _HalfText(io.RawIOBase):
    """The text of a trace after its ``traceEvents`` ``[``, before or after its split point.

    The split point is the first ``}, {`` (the end of one value, the start of the next) that starts
    at or after the text offset ``split_at``. The first half is the text up to its ``}``, with a
    ``]`` that closes the array; the second half is the text from its ``{`` on. Both halves find the
    same point, whatever the sizes of their reads: it depends on the text alone. Whether it lies
    between two events is checked by decoding: if it is inside a string or an event, the first half
    does not end where its ``]`` is (see :func:`decode_half`).

    No such boundary within :data:`MAX_EVENT_BYTES` of ``split_at`` (or none at all): no split, the
    first half is the whole text and the second is empty. The text held while the point is looked for
    stays within that limit.

    Parameters
    ----------
    handle
        The text, read on from where ``pending`` ends.
    pending
        The text already read from ``handle`` (after the array's ``[``), at text offset ``offset``.
    """

    def __init__(
        self, handle: io.RawIOBase, pending: bytes | bytearray, offset: int, split_at: int, first: bool
    ) -> None:
        super().__init__()
        self.handle = handle
        self.first = first
        self.pending = bytearray(pending)
        self.offset = offset
        """The text offset of ``pending[0]`` (or of the next byte read, when nothing is pending)."""
        self.start = max(split_at, offset)
        """Where the split point is looked for from."""
        self.cut: int | None = None
        """The text offset just after the ``}`` of the split point; -1: no split; None: not known yet."""
        self.resume = 0
        """The text offset of the ``{`` the second half starts with."""
        self._closed = False  # the first half's "]" was given

    def readable(self) -> bool:
        """Return True: the text can be read."""
        return True

    def split(self) -> bool:
        """Find the split point (reading up to it); return whether there is one."""
        while self.cut is None:
            if self.offset < self.start:
                self._before_start()
            else:
                self._look()
        return self.cut >= 0

    def readinto(self, buffer: Any) -> int:
        """Read the half's text into ``buffer``; return how many bytes (0 at its end)."""
        with memoryview(buffer) as view:
            while True:
                if self.cut is None and self.offset < self.start:
                    if not self.first:
                        self._before_start()  # the second half drops the text before the point
                        continue
                    # the first half gives the text before the split point as it comes
                    n = self._give(view, self.start - self.offset)
                    if n:
                        return n
                    if self.offset < self.start:
                        self.cut = -1  # the text ends before the split point
                    continue
                if self.cut is None:
                    self._look()
                    continue
                if self.cut < 0:
                    return self._give(view, len(view))
                if self.first:
                    n = self._give(view, self.cut - self.offset)
                    if n or self._closed:
                        return n
                    view[0] = 0x5D  # "]": the first half is an array of its own
                    self._closed = True
                    return 1
                if self.offset < self.resume:
                    del self.pending[: self.resume - self.offset]
                    self.offset = self.resume
                return self._give(view, len(view))

    def _give(self, view: memoryview, most: int) -> int:
        """Copy up to ``most`` bytes of the text into ``view``: what is pending first, else from the file."""
        most = min(most, len(view))
        if most <= 0:
            return 0
        if self.pending:
            n = min(most, len(self.pending))
            view[:n] = self.pending[:n]
            del self.pending[:n]
        else:
            n = self.handle.readinto(view[:most]) or 0
        self.offset += n
        return n

    def _before_start(self) -> None:
        """Drop the text before the point is looked for (the second half); mark the end of a short text."""
        if self.pending:
            n = min(len(self.pending), self.start - self.offset)
            del self.pending[:n]
            self.offset += n
            return
        block = self.handle.read(min(_HEAD_BLOCK, self.start - self.offset))
        if not block:
            self.cut = -1
        self.offset += len(block)

    def _look(self) -> None:
        """Read on from the start of the search until the split point is found (or not)."""
        searched = 0
        while True:
            match = _BOUNDARY.search(self.pending, searched)
            if match is not None:
                if match.start() < MAX_EVENT_BYTES:
                    self.cut = self.offset + match.start() + 1
                    self.resume = self.offset + match.end() - 1
                else:
                    self.cut = -1
                return
            # a boundary not yet read whole starts at the last "}", if only blanks and a comma follow it
            brace = self.pending.rfind(b"}", searched)
            if brace >= 0 and _PARTIAL_BOUNDARY.fullmatch(self.pending, brace + 1):
                searched = brace
            else:
                searched = len(self.pending)
            if searched >= MAX_EVENT_BYTES:
                self.cut = -1
                return
            block = self.handle.read(_HEAD_BLOCK)
            if not block:
                self.cut = -1
                return
            self.pending += block


@dataclass(frozen=True)
class Half:
    """One half of a trace's text to decode: a task of the reader in halves (:func:`decode_half`)."""

    path: Path
    source: str
    options: ImportOptions
    split_at: int
    """The text offset from which the split point is looked for."""
    first: bool
    chunk_bytes: int
    claim: str | None = None
    """A file whose removal claims the half (:func:`_claimed`): the helper's first half is taken by
    whichever process claims it first (this one, done with its own half before the helper started)."""


@dataclass
class HalfResult:
    """What :func:`decode_half` read: the half's frame and what it counted and met."""

    frame: pl.DataFrame | None
    """The events (None for an empty second half)."""
    meta: pl.DataFrame | None
    """Their sparse collective metadata, keyed by row in ``frame``."""
    split: bool
    """Whether the text was split; if not, the first half holds all of it and the second nothing."""
    gpu: bool = False
    kernels: bool = False
    dropped: dict[str, int] = field(default_factory=dict)
    repairs: dict[str, int] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    """The first half: the metadata before the array; the half with the end: the metadata after it."""
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """What reading the text met (:meth:`TraceText.notes`); the half that read to the end has the whole's."""
    taken: bool = True
    """False: the half's claim was taken by the other process first, and the half was not read."""


def decode_half(half: Half) -> HalfResult:
    """Decode one half of a trace's text as the serial reader does (a helper's task, or this process's).

    With :attr:`ImportOptions.overlap_only`, a trace whose header lists no GPU keeps its CPU
    operators until a kernel comes: the second half cannot know whether one came before it, so the
    text is not split (the first half reads it all).

    Raises
    ------
    TimelineError
        Bad input; the caller reads the file serially, which reports it.
    """
    if half.claim is not None and not _claimed(half.claim):
        return HalfResult(frame=None, meta=None, split=False, taken=False)
    warnings: list[str] = []
    position = _Position(half.path)
    with _open(half.path, half.source) as handle:
        out = _Frames(half.options)
        metadata, head_rest = _read_header(handle, half.source, position)
        out.gpu = lists_gpus(metadata)
        whole = half.options.overlap_only and not out.gpu
        if whole and not half.first:
            return HalfResult(frame=None, meta=None, split=False)
        text = None if whole else _HalfText(handle, head_rest, position.offset, half.split_at, half.first)
        if text is not None and not half.first:
            if not text.split():
                return HalfResult(frame=None, meta=None, split=False)
            position.advance(text.resume - position.offset)
        trailer = (
            _read_events(handle, head_rest, out, half.chunk_bytes, half.source, position, warnings)
            if text is None
            else _read_events(text, b"", out, half.chunk_bytes, half.source, position, warnings)
        )
        split = text is not None and text.split()
        if half.first and split and out.repairs.get(_CUT_OFF):
            raise _SplitFailedError  # the first half did not end where its "]" is
        frame, meta = out.collect()
    return HalfResult(
        frame=frame,
        meta=meta,
        split=split,
        gpu=out.gpu,
        kernels=out.kernels,
        dropped=out.dropped,
        repairs=out.repairs,
        metadata={**metadata, **trailer} if half.first else trailer,
        warnings=warnings,
        notes=handle.notes(),
    )


def _claimed(claim: str) -> bool:
    """Claim a half by removing its claim file: True for the one process that removes it."""
    try:
        Path(claim).unlink()
    except FileNotFoundError:
        return False
    return True


@contextmanager
def _claim_file() -> Iterator[str]:
    """Yield the path of a new claim file (:attr:`Half.claim`), removed at the end if still there."""
    import tempfile

    fd, claim = tempfile.mkstemp(prefix="timeline-half-", dir=_shared_directory())
    os.close(fd)
    try:
        yield claim
    finally:
        _claimed(claim)


def _parse_halves(
    path: Path, source: str, options: ImportOptions, chunk_bytes: int, helper: LocalExecutor
) -> FileResult | None:
    """Decode the two halves of a trace's text, the first on the helper; None if that did not work.

    This process decodes the second half, then the first as well if the helper has not started it
    yet (busy or slow to start: the one of the two that claims it first decodes it). The result is
    the serial reader's (the frames of the halves one after the other, the counts added up, the
    notes of the half that read the text to its end).
    """
    from timeline.policy import text_size

    split_at = int(text_size(path) * SPLIT_SHARE)
    halves = [Half(path, source, options, split_at, first, chunk_bytes) for first in (True, False)]
    try:
        with _claim_file() as claim:
            task = helper.submit(decode_half, replace(halves[0], claim=claim))
            second = decode_half(halves[1])
            first = decode_half(halves[0]) if _claimed(claim) else task.result()
    except Exception:
        return None  # bad input, a split point inside a string, a helper that died: read serially
    finally:
        helper.stop()
    if first.split != second.split or first.frame is None or first.meta is None:
        return None
    frame, meta, dropped, repairs = first.frame, first.meta, dict(first.dropped), dict(first.repairs)
    if second.frame is not None and second.meta is not None:
        frame = pl.concat([frame, second.frame], how="vertical")
        meta = pl.concat(
            [meta, second.meta.with_columns(pl.col("_row") + first.frame.height)], how="vertical"
        )
        add_counts(dropped, second.dropped)
        add_counts(repairs, second.repairs)
    if first.gpu and options.overlap_only and not (first.kernels or second.kernels):
        raise _NoKernelsError
    notes = second.notes if second.split else first.notes
    warnings = [*notes, *_repaired(source, repairs), *first.warnings, *second.warnings]
    metadata = {**first.metadata, **second.metadata}
    return finish_kineto(frame, dropped, metadata, source=source, warnings=warnings, meta=meta)
