"""Streaming import of Kineto traces larger than memory comfortably allows.

Takes a path to a ``.pt.trace.json`` file (gzipped or not, any size) and gives the same
:class:`FileResult` as :func:`timeline.importers.kineto.parse_kineto`, while holding at most about
one chunk of JSON text and its decoded events at a time: the file is decompressed as a stream, the
``traceEvents`` array is cut at event boundaries into chunks of ``chunk_bytes``, each chunk is
decoded and reduced to the canonical columns at once (dropping ``python_function``, counters and
instants while decoding), and only the reduced frames are kept. Metadata before or after
``traceEvents`` (``distributedInfo``, ``baseTimeNanoseconds``) is read from the text around the array.

A chunk boundary is the ``}`` that closes an event followed by ``,`` and the ``{`` of the next one;
a candidate inside a string (it would not decode) is skipped for the one before it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import msgspec
import polars as pl

from timeline.errors import TraceContentError, TraceFormatError
from timeline.importers.kineto import build_frame, decode_events, finish_kineto
from timeline.importers.result import FileResult, ImportOptions

__all__ = ["DEFAULT_CHUNK_BYTES", "parse_kineto_stream", "read_head"]

DEFAULT_CHUNK_BYTES = 32 * 1024 * 1024
_HEAD_BLOCK = 1024 * 1024
_KEY = b'"traceEvents"'
_GENERIC = msgspec.json.Decoder()
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_TRAILING = re.compile(r"trailing characters \(byte (\d+)\)")
_BYTE = re.compile(r"\(byte (\d+)\)")
_MAX_BOUNDARY_TRIES = 64


@contextmanager
def _open(path: Path) -> Iterator[IO[bytes]]:
    """Open ``path`` for reading decompressed bytes (gzip recognised by its magic number)."""
    with path.open("rb") as probe:
        gzipped = probe.read(2) == b"\x1f\x8b"
    if gzipped:
        try:
            from isal import igzip

            handle: IO[bytes] = igzip.open(path, "rb")  # type: ignore[no-untyped-call]
        except ImportError:  # pragma: no cover - isal is a dependency
            import gzip

            handle = gzip.open(path, "rb")  # type: ignore[assignment]  # noqa: SIM115
    else:
        handle = path.open("rb")
    with handle:
        yield handle


def read_head(path: Path, size: int = 4096) -> bytes:
    """Return the first ``size`` decompressed bytes of a file."""
    with _open(path) as handle:
        return handle.read(size)


class _Position:
    """Tracks how many bytes and newlines precede the buffer, to report errors as FILE:LINE:COL."""

    def __init__(self) -> None:
        self.offset = 0
        self.lines = 0
        self.last_line_start = 0

    def consume(self, text: bytes | bytearray | memoryview) -> None:
        data = bytes(text)
        newlines = data.count(b"\n")
        if newlines:
            self.lines += newlines
            self.last_line_start = self.offset + data.rfind(b"\n") + 1
        self.offset += len(data)

    def locate(self, buffer: bytes | bytearray, index: int) -> tuple[int, int]:
        head = bytes(buffer[:index])
        newlines = head.count(b"\n")
        if newlines:
            return self.lines + newlines + 1, index - head.rfind(b"\n")
        return self.lines + 1, self.offset + index - self.last_line_start + 1


def _read_header(handle: IO[bytes], source: str, position: _Position) -> tuple[dict[str, Any], bytearray]:
    """Read up to the ``[`` of ``traceEvents``; return the metadata before it and the bytes after."""
    head = bytearray()
    while True:
        block = handle.read(_HEAD_BLOCK)
        head += block
        key = head.find(_KEY)
        if key >= 0:
            bracket = head.find(b"[", key)
            if bracket >= 0:
                break
        if not block:
            msg = f"{source}:1:1: no traceEvents array: not a PyTorch profiler trace"
            raise TraceContentError(msg)
    prefix = bytes(head[:key]).strip()
    metadata: dict[str, Any] = {}
    if prefix.startswith(b"{") and len(prefix) > 1:
        try:
            parsed = _GENERIC.decode(prefix.rstrip(b",") + b"}")
        except msgspec.DecodeError:
            parsed = None  # damaged metadata: the events may still be fine
        if isinstance(parsed, dict):
            metadata.update(parsed)
    rest = head[bracket + 1 :]
    position.consume(head[: bracket + 1])
    return metadata, rest


def _cut(buffer: bytearray, source: str) -> tuple[list[Any], int]:
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
            return decode_events(chunk, source), boundary
        except msgspec.DecodeError:
            end = matches[-1].start()
        except UnicodeDecodeError:
            fixed = chunk.decode("utf-8", errors="replace").encode("utf-8")
            return decode_events(fixed, source), boundary
    return [], 0


def _decode_tail(
    buffer: bytearray, source: str, position: _Position, warnings: list[str]
) -> tuple[list[Any], dict[str, Any]]:
    """Decode the last events and the metadata that follows the ``traceEvents`` array."""
    text = b"[" + bytes(buffer)
    try:
        return decode_events(text, source), {}
    except msgspec.DecodeError as exc:
        message = str(exc)
    trailing = _TRAILING.search(message)
    if trailing is not None:
        split = int(trailing.group(1)) - 1  # msgspec names the byte after the first extra one
        events = decode_events(text[:split], source)
        rest = text[split:].strip()
        metadata: dict[str, Any] = {}
        if rest.startswith(b","):
            try:
                parsed = _GENERIC.decode(b"{" + rest[1:].strip())
            except msgspec.DecodeError:
                warnings.append(f"{source}: unreadable metadata after traceEvents ignored")
                parsed = None
            if isinstance(parsed, dict):
                metadata = parsed
        return events, metadata
    if "truncated" in message:
        events, used = _cut(buffer, source)
        warnings.append(
            f"{source}: repaired malformed JSON: "
            "file cut off mid-record, closed after the last complete event (1)"
        )
        del used
        return events, {}
    match = _BYTE.search(message)
    index = max(0, int(match.group(1)) - 1) if match else 0
    line, col = position.locate(buffer, index)
    detail = message.replace("JSON is malformed: ", "").split(" (byte")[0]
    msg = f"{source}:{line}:{col}: {detail}; the file is not valid JSON (too large to repair in place)"
    raise TraceFormatError(msg)


def parse_kineto_stream(
    path: Path,
    *,
    source: str,
    options: ImportOptions | None = None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
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
    warnings: list[str] = []
    position = _Position()
    frames: list[pl.DataFrame] = []
    dropped: dict[str, int] = {}

    def add(events: list[Any]) -> None:
        if events:
            frame, counts = build_frame(events, options)
            frames.append(frame.drop("_row"))
            for key, count in counts.items():
                dropped[key] = dropped.get(key, 0) + count

    with _open(path) as handle:
        metadata, buffer = _read_header(handle, source, position)
        eof = False
        while True:
            while not eof and len(buffer) < chunk_bytes:
                block = handle.read(chunk_bytes)
                if not block:
                    eof = True
                buffer += block
            if eof:
                events, trailer = _decode_tail(buffer, source, position, warnings)
                add(events)
                metadata.update(trailer)
                break
            events, used = _cut(buffer, source)
            if used == 0:
                # no boundary in a whole chunk: one giant event, or damage; read more before deciding
                more = handle.read(chunk_bytes)
                if not more:
                    eof = True
                buffer += more
                continue
            add(events)
            rest_start = used
            while rest_start < len(buffer) and buffer[rest_start] in b" \t\r\n,":
                rest_start += 1
            position.consume(buffer[:rest_start])
            del buffer[:rest_start]
            del events
    frame = pl.concat(frames, how="vertical") if frames else build_frame([], options)[0].drop("_row")
    return finish_kineto(frame.with_row_index("_row"), dropped, metadata, source=source, warnings=warnings)
