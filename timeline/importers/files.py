"""Reading trace files and recognising their format by content.

Reads the text of one file (gzip recognised by its magic number, not by its name) through
:class:`TraceText`, which decompresses as it is read and never holds more than a block of it, and
names its format: Kineto JSON, Horovod JSON, a Parquet file written by ``timeline convert``, or a
PyTorch Flight Recorder dump (pickle or JSON: :func:`is_dump_head`).

Hostile input is met with limits rather than with memory: the size a gzip trailer records is never
trusted; text past :data:`MAX_TEXT_BYTES`, or gzip data expanding more than :data:`MAX_GZIP_RATIO`
times, stops reading with an error; runs of blank text longer than :data:`BLANK_RUN_BYTES` are
collapsed while they are read (a counted warning), so a file of gigabytes of whitespace costs the
time to decompress it and no memory; a file read whole holds at most :data:`WHOLE_MAX_TEXT_BYTES`.
A gzip stream cut off mid-way gives what it holds plus a warning (the JSON it holds is then repaired
like any file cut off mid-record); damaged gzip data is an error naming the byte where it was found.
"""

from __future__ import annotations

import io
import re
import zlib
from pathlib import Path
from typing import Any, BinaryIO

from timeline.errors import TraceFormatError, UsageError
from timeline.importers.result import TraceFormat
from timeline.paths import path_text

__all__ = [
    "BLANK_RUN_BYTES",
    "MAX_GZIP_RATIO",
    "MAX_TEXT_BYTES",
    "RATIO_MIN_TEXT_BYTES",
    "WHOLE_MAX_TEXT_BYTES",
    "ReadLimitError",
    "TextTooLargeError",
    "TraceText",
    "is_dump_head",
    "open_file",
    "read_trace_bytes",
    "size_text",
    "sniff_format",
    "sniff_path",
]

MAX_TEXT_BYTES = 64 * 1024**3
"""The most text one file may hold once decompressed: 64 GiB (the largest traces reported are about
10 GB). Reading stops past it with an error, whatever the size a gzip trailer records."""
MAX_GZIP_RATIO = 200
"""How many times its compressed size the text of a gzip file may be, once it is past
:data:`RATIO_MIN_TEXT_BYTES`: traces pack 10-30 times, a decompression bomb 1,000 times. Blank text
collapsed while reading (:data:`BLANK_RUN_BYTES`) does not count."""
RATIO_MIN_TEXT_BYTES = 256 * 1024 * 1024
"""The text size from which :data:`MAX_GZIP_RATIO` is checked (small files may pack better)."""
BLANK_RUN_BYTES = 64 * 1024
"""Runs of blank text (spaces, tabs, newlines) are collapsed while a file is read, each whole block
of this many blank bytes becoming its first byte: JSON never needs them, and a file padded with
gigabytes of whitespace is then read in the time it takes to decompress it, in no memory. Counted
in a warning."""
WHOLE_MAX_TEXT_BYTES = 1024 * 1024 * 1024
"""The most text a file read whole may hold: a Horovod timeline (read whole), or a Kineto trace read
whole to be repaired. Larger Kineto traces are read in chunks."""

_GZIP_MAGIC = b"\x1f\x8b"
_PARQUET_MAGIC = b"PAR1"
SQLITE_MAGIC = b"SQLite format 3\x00"  # the first bytes of every SQLite 3 database
_RAW_BLOCK = 256 * 1024  # compressed bytes given to the decompressor at a time
_TEXT_BLOCK = 1024 * 1024  # text produced at a time
_HEAD_BYTES = 65536  # what recognising the format reads
_BLANKS = b" \t\r\n"
_SPACES = b" " * BLANK_RUN_BYTES
_NOT_BLANK = re.compile(rb"[^ \t\r\n]")
_LEADING = b"\xef\xbb\xbf \t\r\n"  # what may come before the first byte of a document
# A Flight Recorder dump: torch pickles its dict with protocol 2 (FlightRecorderDetail.hpp, dump:
# pickle_str), a newer pickler may frame it (protocol 4+: FRAME and its 8-byte length); its JSON
# writer (nlohmann::json, keys sorted) starts with one of these keys.
_DUMP_PICKLE_HEAD = re.compile(rb"^\x80[\x02-\x05](?:\x95.{8})?\}", re.DOTALL)
_DUMP_JSON_HEAD = re.compile(
    rb'^\s*\{\s*"(?:comm_lib_version|entries|nccl_comm_state|nccl_version|pg_config|pg_status|version)"\s*:'
)


def _decompressor() -> Any:
    """Return a decompressor of one gzip member (ISA-L's: about 1.5x faster than zlib on large traces)."""
    try:
        from isal import isal_zlib
    except ImportError:  # pragma: no cover - isal is a dependency; zlib is the fallback
        return zlib.decompressobj(wbits=31)
    return isal_zlib.decompressobj(wbits=31)


def _gzip_errors() -> tuple[type[Exception], ...]:
    """Return what the decompressors raise on damaged data."""
    try:
        from isal import isal_zlib
    except ImportError:  # pragma: no cover
        return (zlib.error,)
    isal_error: type[Exception] = isal_zlib.error  # type: ignore[assignment]  # the stubs call it an instance
    return (zlib.error, isal_error)


def open_file(path: Path) -> BinaryIO:
    """Open ``path`` for reading bytes.

    Raises
    ------
    UsageError
        The file cannot be read (missing, a directory, no permission).
    """
    try:
        return path.open("rb")
    except OSError as exc:
        msg = f"{path}: cannot read: {exc.strerror or exc}; check that it exists and is readable"
        raise UsageError(msg) from exc


class ReadLimitError(TraceFormatError):
    """A file past one of the limits of reading: not damage another reader could repair.

    :data:`MAX_TEXT_BYTES`, :data:`MAX_GZIP_RATIO`, the text a file read whole may hold, the longest
    event of :mod:`timeline.importers.stream`.
    """


class TextTooLargeError(ReadLimitError):
    """A file read whole holds more text than the limit it was read with."""


class TraceText(io.RawIOBase):
    """The text of a trace file, decompressed (gzip, recognised by content) while it is read.

    Holds at most a block of text at a time. Stops with an error past :data:`MAX_TEXT_BYTES` or
    :data:`MAX_GZIP_RATIO`, and at damaged gzip data; collapses runs of blank text
    (:data:`BLANK_RUN_BYTES`). :meth:`notes` says what a reader should warn about: a gzip stream cut
    off, blank text collapsed.

    Parameters
    ----------
    path
        The file.
    source
        The name used in messages (default: ``path``).
    block
        The most text decompressed at a time (a reader of the first bytes only asks for few).
    """

    def __init__(self, path: Path, *, source: str | None = None, block: int = _TEXT_BLOCK) -> None:
        super().__init__()
        self._text_block = max(block, BLANK_RUN_BYTES)
        self.source = path_text(path) if source is None else source
        self._raw = open_file(path)
        try:
            self.gzipped = self._raw.read(2) == _GZIP_MAGIC
            self._raw.seek(0)
        except OSError as exc:
            self._raw.close()
            msg = f"{path}: cannot read: {exc.strerror or exc}; check that it is a readable file"
            raise UsageError(msg) from exc
        self._errors = _gzip_errors()
        self._inflate: Any = _decompressor() if self.gzipped else None
        self._input = b""  # compressed bytes not yet given to the decompressor
        self._member_bytes = 0  # compressed bytes given to the current member
        self._full = False  # the decompressor's last output filled a block: it may hold more
        self._block = memoryview(b"")
        self._at = 0
        self._done = False
        self.raw_bytes = 0
        """Bytes read from the file so far."""
        self.text_bytes = 0
        """Bytes of text produced so far (after blank runs were collapsed)."""
        self.blank_bytes = 0
        """Bytes of blank text collapsed away."""
        self.cut_off = False
        """Whether the gzip stream ended mid-way (a writer killed while writing)."""
        self.trailing = False
        """Whether bytes that are not a gzip member follow the gzip data (ignored)."""

    def readable(self) -> bool:
        """Return True: the text can be read."""
        return True

    def readinto(self, buffer: Any) -> int:
        """Read text into ``buffer``; return how many bytes (0 at the end)."""
        while self._at >= len(self._block):
            if self._done:
                return 0
            self._block, self._at = memoryview(self._next_block()), 0
        with memoryview(buffer) as view:
            n = min(len(view), len(self._block) - self._at)
            view[:n] = self._block[self._at : self._at + n]
        self._at += n
        return n

    def read_all(self, limit: int) -> bytes:
        """Return the rest of the text; raise :class:`TextTooLargeError` past ``limit`` bytes."""
        parts = [bytes(self._block[self._at :])]
        size = len(parts[0])
        self._block, self._at = memoryview(b""), 0
        while not self._done:
            block = self._next_block()
            size += len(block)
            if size > limit:
                msg = (
                    f"{self.source}: more than {size_text(limit)} of text, the most a file read whole may "
                    "hold (WHOLE_MAX_TEXT_BYTES); split the file or write it as a PyTorch profiler trace"
                )
                raise TextTooLargeError(msg)
            parts.append(block)
        return b"".join(parts)

    def close(self) -> None:
        """Close the file."""
        self._raw.close()
        super().close()

    def notes(self) -> list[str]:
        """Return the warnings about what was read: a gzip stream cut off, blank text collapsed."""
        notes = []
        if self.cut_off:
            notes.append(
                f"{self.source}: gzip stream cut off at byte {self.raw_bytes:,}; "
                f"read the {self.text_bytes:,} bytes it holds"
            )
        if self.trailing:
            notes.append(f"{self.source}: ignored the bytes after the end of the gzip data")
        if self.blank_bytes:
            notes.append(
                f"{self.source}: skipped {self.blank_bytes:,} bytes of blank text "
                f"(runs of more than {size_text(BLANK_RUN_BYTES)} of spaces or newlines)"
            )
        return notes

    def _read_raw(self, size: int = _RAW_BLOCK) -> bytes:
        try:
            data = self._raw.read(size)
        except OSError as exc:
            raise UsageError(f"{self.source}: cannot read: {exc.strerror or exc}") from exc
        self.raw_bytes += len(data)
        return data

    def _next_block(self) -> bytes:
        """Return the next block of text (after blank runs were collapsed); b"" and done at the end."""
        while not self._done:
            block = self._next_plain() if self._inflate is None else self._next_inflated()
            if block:
                return self._kept(block)
        return b""

    def _next_plain(self) -> bytes:
        data = self._read_raw(self._text_block)
        if not data:
            self._done = True
        return data

    def _next_inflated(self) -> bytes:
        """Return the next text of the gzip stream (possibly empty); set done at its end."""
        if not self._input and not self._full:
            self._input = self._read_raw()
            if not self._input:
                self._done = True
                self.cut_off = self._member_bytes > 0
                return b""
        if self._member_bytes == 0 and not self._input.startswith(_GZIP_MAGIC[: len(self._input)]):
            self._end_of_members()
            return b""
        fed = len(self._input)
        try:
            text = self._inflate.decompress(self._input, self._text_block)
        except self._errors as exc:
            start = self.raw_bytes - len(self._input)
            msg = (
                f"{self.source}:1:1: damaged gzip file: the damage was found in bytes {start:,}-"
                f"{self.raw_bytes:,} ({exc}); re-copy or re-export it"
            )
            raise TraceFormatError(msg) from None
        self._full = len(text) == self._text_block
        self._input = self._inflate.unconsumed_tail
        self._member_bytes += fed - len(self._input)
        if self._inflate.eof:  # the end of a member: another may follow
            self._input = self._inflate.unused_data + self._input
            self._inflate, self._member_bytes, self._full = _decompressor(), 0, False
        return bytes(text)

    def _end_of_members(self) -> None:
        """After the last gzip member: zero padding is allowed; anything else is noted and ignored."""
        while self._input:
            if self._input.strip(b"\0"):
                self.trailing = True
                break
            self._input = self._read_raw()
        self._input = b""
        self._done = True

    def _kept(self, block: bytes) -> bytes:
        """Collapse the blank runs of ``block``; count its text against the limits."""
        size = BLANK_RUN_BYTES
        pieces: list[bytes] = []
        last = 0
        for i in range(0, len(block) - size + 1, size):
            if (
                block[i] in _BLANKS
                and block[i + size - 1] in _BLANKS
                and (block.startswith(_SPACES, i) or _NOT_BLANK.search(block, i, i + size) is None)
            ):
                pieces += (block[last:i], block[i : i + 1])
                last = i + size
        if pieces:
            pieces.append(block[last:])
            kept = b"".join(pieces)
            self.blank_bytes += len(block) - len(kept)
            block = kept
        self.text_bytes += len(block)
        if self.text_bytes > MAX_TEXT_BYTES:
            msg = (
                f"{self.source}: more than {size_text(MAX_TEXT_BYTES)} of text (MAX_TEXT_BYTES); "
                "not a trace timeline can read: split the profile into shorter ones"
            )
            raise ReadLimitError(msg)
        consumed = self.raw_bytes - len(self._input)  # compressed bytes the text came from
        bomb = self.text_bytes > RATIO_MIN_TEXT_BYTES and self.text_bytes > MAX_GZIP_RATIO * consumed
        if self.gzipped and bomb:
            msg = (
                f"{self.source}: gzip data expanding more than {MAX_GZIP_RATIO} times by byte "
                f"{consumed:,} (MAX_GZIP_RATIO; traces pack 10-30 times): a decompression bomb, not a trace"
            )
            raise ReadLimitError(msg)
        return block


def size_text(n: int) -> str:
    """Return a limit in the largest binary unit that divides it: ``64 GiB``, ``64 KiB``, ``1,000 bytes``."""
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= scale and n % scale == 0:
            return f"{n // scale:,} {unit}"
    return f"{n:,} bytes"


def read_trace_bytes(path: Path, warnings: list[str], *, limit: int | None = None) -> bytes:
    """Return the text of ``path``, decompressed if it is gzip (recognised by content).

    Appends to ``warnings`` what :meth:`TraceText.notes` says. ``limit``: the most text to hold
    (default :data:`WHOLE_MAX_TEXT_BYTES`).

    Raises
    ------
    UsageError
        The file cannot be read.
    TextTooLargeError
        The text is longer than ``limit`` bytes.
    TraceFormatError
        Damaged gzip data, or past :data:`MAX_TEXT_BYTES` / :data:`MAX_GZIP_RATIO`.
    """
    with TraceText(path) as text:
        data = text.read_all(WHOLE_MAX_TEXT_BYTES if limit is None else limit)
        warnings.extend(text.notes())
    return data


def sniff_path(path: Path, *, source: str | None = None) -> TraceFormat:
    """Return the format of a file from the first bytes of its text (:func:`sniff_format`).

    Raises
    ------
    UsageError
        The file cannot be read.
    TraceFormatError
        Empty files, content that is not a trace, damaged gzip data.
    """
    name = path_text(path) if source is None else source
    with TraceText(path, source=name, block=_HEAD_BYTES) as text:
        head = text.read(_HEAD_BYTES)
        skipped = False
        # blank text before the document (collapsed past BLANK_RUN_BYTES): look past it
        while head and not head.lstrip(_LEADING):
            skipped = True
            head = text.read(_HEAD_BYTES)
        gzipped = text.gzipped
    fmt = sniff_format(head.lstrip(_LEADING) if skipped else head, name)
    if fmt == "nsys":
        _check_nsys(path, name, gzipped=gzipped)
    return fmt


def _check_nsys(path: Path, source: str, *, gzipped: bool) -> None:
    """Check that a SQLite file is an Nsight Systems export that can be opened in place.

    Raises
    ------
    TraceFormatError
        A gzipped database (SQLite reads files, not streams), a damaged one, or one without the
        tables of an export.
    """
    if gzipped:
        msg = f"{source}: a gzipped SQLite database; decompress it (gunzip -k) and pass the .sqlite file"
        raise TraceFormatError(msg)
    from timeline.importers.nsys_db import open_nsys

    with open_nsys(path, source=source):
        pass


def is_dump_head(head: bytes) -> bool:
    r"""Whether the first bytes of a file's text are those of a Flight Recorder dump (pickle or JSON).

    A pickle of protocol 2 to 5 whose first object is a dict (torch writes ``\x80\x02}``), or a JSON
    object whose first key is one torch's JSON writer can put first (``comm_lib_version``,
    ``entries``…: it sorts keys) or ``version``.
    """
    return bool(_DUMP_PICKLE_HEAD.match(head) or _DUMP_JSON_HEAD.match(head))


def sniff_format(data: bytes, source: str) -> TraceFormat:
    """Return the format of a file from its first bytes.

    A SQLite database is taken as an Nsight Systems export (``nsys``): its tables are checked once
    it is opened (:func:`sniff_path` does, :mod:`timeline.importers.nsys_db`), the first bytes do
    not hold them.

    Raises
    ------
    TraceFormatError
        Empty files and content that is not a trace.
    """
    if data[:4] == _PARQUET_MAGIC:
        return "parquet"
    if data[: len(SQLITE_MAGIC)] == SQLITE_MAGIC:
        return "nsys"
    if is_dump_head(data[:65536]):
        return "flight_recorder"
    head = data[:65536].lstrip(_LEADING)
    if not head:
        raise TraceFormatError(
            f"{source}:1:1: empty file; expected a PyTorch profiler trace or a Horovod timeline"
        )
    if head[:1] == b"[":
        return "horovod"
    if head[:1] == b"{":
        return "kineto"
    offset = len(data) - len(data.lstrip(_LEADING))
    line = data.count(b"\n", 0, offset) + 1
    col = offset - data.rfind(b"\n", 0, offset)
    msg = (
        f"{source}:{line}:{col}: not a trace: expected JSON (a PyTorch profiler trace or a Horovod "
        "timeline, optionally gzipped) or a Parquet file from timeline convert"
    )
    raise TraceFormatError(msg)
