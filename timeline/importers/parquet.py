"""Parquet files written by ``timeline convert``: the canonical events with the file table and warnings.

:func:`write_parquet` writes the events frame, zstd-compressed, with the file table, the load
warnings, the process groups the traces declared and a digest of the content as JSON and text in
the file's key-value metadata;
:func:`read_parquet` reads such a file back as a :class:`~timeline.importers.result.FileResult`
(a Parquet file from anywhere else is refused), checking the metadata, the columns and the digest,
so that a file changed or damaged after timeline wrote it is refused rather than analysed.
:func:`written_by_timeline` tells whether an existing path is such a file (what ``convert --force``
may replace).

The digest (:func:`content_digest`) is a SHA-256 over a canonical form of the content that does not
depend on how polars holds it in memory (chunks, categorical codes) nor on how Parquet encodes it:
each integer column's values as the machine's (little-endian) integers (with a byte per row marking the
nulls where there are any), each text column as the sorted list of its distinct values and, per row,
the value's position in that list. The bytes are read through the Arrow C stream interface that
polars exports (``__arrow_c_stream__``), so no copy is made and neither numpy nor pyarrow is needed.
Columns are digested in up to four threads: about 1 s for 10 million events on two cores, about
as long as reading them.
"""

from __future__ import annotations

import ctypes
import hashlib
import io
import os
import re
import stat
import struct
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Annotated, Any

import msgspec
import polars as pl

from timeline.errors import TraceFormatError
from timeline.importers.panics import panic_notices_dropped
from timeline.importers.result import FileResult
from timeline.paths import path_text
from timeline.schema import EVENTS_SCHEMA, PROCESS_GROUPS_SCHEMA, validate

__all__ = ["Stored", "content_digest", "read_parquet", "read_stored", "write_parquet", "written_by_timeline"]

_FILES_KEY = "timeline.files"
_WARNINGS_KEY = "timeline.warnings"
_GROUPS_KEY = "timeline.groups"
"""The process groups the traces declared (:data:`~timeline.schema.PROCESS_GROUPS_SCHEMA`), as JSON
rows; files written before it existed have no such key (no groups)."""
_DIGEST_KEY = "timeline.digest"
_DIGEST_SCHEME = "sha256-v1"
"""The digest's name and the version of its canonical form: ``sha256-v1:<64 hex digits>``."""

_RECREATE = "re-create it with timeline convert"
_PARTITION = re.compile(r"^rank=(\d+)$")
"""The folder of a dataset's part files (:func:`timeline.execution.dataset.write_dataset`)."""

_READ_ERRORS = (OSError, ValueError, pl.exceptions.PolarsError, pl.exceptions.PanicException)
"""What polars raises on a damaged file: its own errors, I/O errors, and panics of its Rust code."""


# --- the file table kept in the metadata ----------------------------------------------------------

_Int32 = Annotated[int, msgspec.Meta(ge=-(2**31), lt=2**31)]
_Count = Annotated[int, msgspec.Meta(ge=0)]


class _FileRow(msgspec.Struct, forbid_unknown_fields=False):
    """One row of the file table (:data:`timeline.schema.FILES_SCHEMA`) as the metadata keeps it."""

    path: str
    format: str
    rank: _Int32 | None = None
    rank_from: str | None = None
    world_size: _Int32 | None = None
    backend: str | None = None
    host: str | None = None
    clock: str | None = None
    events: _Count | None = None


class _GroupRow(msgspec.Struct, forbid_unknown_fields=False):
    """One row of the process groups table (:data:`timeline.schema.PROCESS_GROUPS_SCHEMA`)."""

    rank: _Int32 | None = None
    pg_name: str | None = None
    pg_desc: str | None = None
    ranks: list[Annotated[int, msgspec.Meta(ge=0, lt=2**31)]] = msgspec.field(default_factory=list)
    ranks_text: str | None = None
    ranks_truncated: bool | None = None
    pg_size: _Int32 | None = None
    backend: str | None = None


def _decode_groups(metadata: dict[str, str], source: str) -> pl.DataFrame:
    """Return the process groups kept in the metadata (none in files written before they were kept).

    Raises
    ------
    TraceFormatError
        A key that is not JSON rows of that table.
    """
    text = metadata.get(_GROUPS_KEY)
    if text is None:
        return pl.DataFrame(schema=PROCESS_GROUPS_SCHEMA)
    try:
        rows = msgspec.json.decode(text, type=list[_GroupRow])
    except msgspec.DecodeError as exc:
        what = f"metadata key {_GROUPS_KEY} is not a process group table"
        msg = f"{source}: {what} ({_one_line(exc)}); {_RECREATE}"
        raise TraceFormatError(msg) from exc
    return pl.DataFrame([msgspec.structs.asdict(row) for row in rows], schema=PROCESS_GROUPS_SCHEMA)


def _decode_metadata(metadata: dict[str, str], source: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Return the file table and the warnings kept in the metadata.

    Raises
    ------
    TraceFormatError
        A key that is not JSON, or JSON of another shape or with values of other types.
    """
    try:
        rows = msgspec.json.decode(metadata[_FILES_KEY], type=list[_FileRow])
    except msgspec.DecodeError as exc:  # ValidationError is a DecodeError
        msg = f"{source}: metadata key {_FILES_KEY} is not a file table ({_one_line(exc)}); {_RECREATE}"
        raise TraceFormatError(msg) from exc
    try:
        warnings = msgspec.json.decode(metadata.get(_WARNINGS_KEY, "[]"), type=list[str])
    except msgspec.DecodeError as exc:
        what = f"metadata key {_WARNINGS_KEY} is not a list of warnings"
        msg = f"{source}: {what} ({_one_line(exc)}); {_RECREATE}"
        raise TraceFormatError(msg) from exc
    return [msgspec.structs.asdict(row) for row in rows], warnings


def _one_line(exc: BaseException) -> str:
    """Return the first line of an exception's message (polars adds lines of context)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# --- the digest ----------------------------------------------------------------------------------


class _ArrowArray(ctypes.Structure):
    """``struct ArrowArray`` of the Arrow C data interface (a stable ABI)."""


_ArrowArray._fields_ = [
    ("length", ctypes.c_int64),
    ("null_count", ctypes.c_int64),
    ("offset", ctypes.c_int64),
    ("n_buffers", ctypes.c_int64),
    ("n_children", ctypes.c_int64),
    ("buffers", ctypes.POINTER(ctypes.c_void_p)),
    ("children", ctypes.c_void_p),
    ("dictionary", ctypes.c_void_p),
    ("release", ctypes.CFUNCTYPE(None, ctypes.POINTER(_ArrowArray))),
    ("private_data", ctypes.c_void_p),
]


class _ArrowArrayStream(ctypes.Structure):
    """``struct ArrowArrayStream`` of the Arrow C stream interface (a stable ABI)."""


_ArrowArrayStream._fields_ = [
    ("get_schema", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(_ArrowArrayStream), ctypes.c_void_p)),
    (
        "get_next",
        ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(_ArrowArrayStream), ctypes.POINTER(_ArrowArray)),
    ),
    ("get_last_error", ctypes.CFUNCTYPE(ctypes.c_char_p, ctypes.POINTER(_ArrowArrayStream))),
    ("release", ctypes.CFUNCTYPE(None, ctypes.POINTER(_ArrowArrayStream))),
    ("private_data", ctypes.c_void_p),
]

_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]

_DIGEST_THREADS = 4
"""Columns digested at once: past four, the memory bandwidth, not the cores, is the limit."""

_WIDTHS: dict[pl.DataType, int] = {
    pl.UInt8(): 1,
    pl.Int32(): 4,
    pl.UInt32(): 4,
    pl.Int64(): 8,
    pl.UInt64(): 8,
}
"""Bytes per value of the fixed-width dtypes the canonical form uses."""


def _hash_values(hasher: Any, series: pl.Series) -> None:
    """Feed the values of a series of a fixed-width dtype without nulls to ``hasher``, chunk by chunk.

    Reads the value buffers in place (the Arrow C stream interface of polars): the bytes are the
    values as little-endian integers whatever the series' chunks, in order.
    """
    width = _WIDTHS[series.dtype]
    capsule = series.__arrow_c_stream__()
    address = _capsule_pointer(capsule, b"arrow_array_stream")
    stream = ctypes.cast(address, ctypes.POINTER(_ArrowArrayStream))
    while True:
        array = _ArrowArray()
        if stream.contents.get_next(stream, ctypes.byref(array)) != 0:
            msg = f"polars could not export column {series.name} (a bug in timeline)"
            raise RuntimeError(msg)
        if not array.release:  # the end of the stream
            break
        try:
            if array.n_buffers != 2:
                msg = f"column {series.name}: {array.n_buffers} Arrow buffers, expected 2 (a bug in timeline)"
                raise RuntimeError(msg)
            if array.length:
                start = array.buffers[1] + array.offset * width
                hasher.update(memoryview((ctypes.c_char * (array.length * width)).from_address(start)))
        finally:
            array.release(ctypes.byref(array))
    # the capsule's destructor releases the stream


def _canonical_codes(series: pl.Series) -> tuple[pl.Series, list[str]]:
    """Return a text column as each row's position in the sorted list of its distinct values, and that list.

    Categorical codes depend on the process that built the column; these positions do not.
    """
    if series.dtype == pl.String:
        series = series.cast(pl.Categorical())
    distinct = series.drop_nulls().unique()
    texts: list[str] = distinct.cast(pl.String).to_list()
    ordered = sorted(set(texts))
    if not ordered:
        return pl.Series(series.name, [], dtype=pl.UInt32).extend_constant(None, series.len()), []
    position = {text: i for i, text in enumerate(ordered)}
    keys: list[int] = distinct.to_physical().cast(pl.Int64).to_list()
    table = [0] * (max(keys) + 1)
    for key, text in zip(keys, texts, strict=True):
        table[key] = position[text]
    codes = pl.Series(series.name, table, dtype=pl.UInt32).gather(series.to_physical())
    return codes, ordered


def _column_digest(series: pl.Series) -> bytes:
    """Return the SHA-256 of one column in its canonical form (a task of :func:`content_digest`)."""
    hasher = hashlib.sha256(_framed(series.name.encode()))
    if series.dtype == pl.String or isinstance(series.dtype, (pl.Categorical, pl.Enum)):
        series, texts = _canonical_codes(series)
        hasher.update(struct.pack("<q", len(texts)))
        for text in texts:
            hasher.update(_framed(text.encode()))
    nulls = series.null_count()
    hasher.update(struct.pack("<q", nulls))
    if nulls:
        _hash_values(hasher, series.is_null().cast(pl.UInt8))
        series = series.fill_null(0)
    _hash_values(hasher, series)
    return hasher.digest()


def _framed(data: bytes) -> bytes:
    """Return ``data`` preceded by its length, so that successive strings cannot run into each other."""
    return struct.pack("<q", len(data)) + data


def content_digest(
    events: pl.DataFrame, *, files_json: str, warnings_json: str, groups_json: str | None = None
) -> str:
    """Return the digest of an events frame of :data:`~timeline.schema.EVENTS_SCHEMA` and its metadata.

    The same content gives the same digest whatever its chunks or categorical codes, in any process
    and with any polars version; ``events`` must have exactly the schema's columns and dtypes. The
    process groups' JSON (``groups_json``) counts when the file keeps it: a file written before it
    was kept digests as it did.

    Returns
    -------
    str
        ``sha256-v1:`` and 64 hex digits.
    """
    if events.schema != EVENTS_SCHEMA:
        raise ValueError("content_digest: the frame is not of EVENTS_SCHEMA (a bug in timeline)")
    hasher = hashlib.sha256()
    hasher.update(_framed(files_json.encode()))
    hasher.update(_framed(warnings_json.encode()))
    if groups_json is not None:
        hasher.update(_framed(groups_json.encode()))
    hasher.update(struct.pack("<q", events.height))
    # columns in threads: polars and hashlib release the GIL on large buffers
    with ThreadPoolExecutor(max_workers=min(_DIGEST_THREADS, os.cpu_count() or 1)) as pool:
        for column in pool.map(_column_digest, events.iter_columns()):
            hasher.update(column)
    return f"{_DIGEST_SCHEME}:{hasher.hexdigest()}"


# --- writing -------------------------------------------------------------------------------------


def write_parquet(
    target: str | Path | IO[bytes],
    *,
    events: pl.DataFrame,
    files: pl.DataFrame,
    warnings: tuple[str, ...] | list[str],
    groups: pl.DataFrame | None = None,
    extra: dict[str, str] | None = None,
    one_row_group: bool = False,
) -> None:
    """Write events as Parquet, with the file table, warnings, process groups and digest in the metadata.

    ``target``: a path, or a file opened for writing in binary mode. ``groups``: the process groups
    the traces declared (:data:`~timeline.schema.PROCESS_GROUPS_SCHEMA`; none: an empty table).
    ``extra``: more key-value metadata, which the digest does not cover (the cache's key,
    :mod:`timeline.importers.cache`). ``one_row_group``: the events in one row group, read back
    as one chunk (the cache's entries, always read whole: a frame of many chunks costs the analyses
    copies); by default, polars' row groups, which other Parquet readers read a part at a time.
    """
    events = validate(events, EVENTS_SCHEMA, what="the events")
    files_json = msgspec.json.encode(files.to_dicts()).decode()
    warnings_json = msgspec.json.encode(list(warnings)).decode()
    table = validate(
        groups if groups is not None else pl.DataFrame(schema=PROCESS_GROUPS_SCHEMA),
        PROCESS_GROUPS_SCHEMA,
        what="the process groups",
    )
    groups_json = msgspec.json.encode(table.to_dicts()).decode()
    digest = content_digest(
        events, files_json=files_json, warnings_json=warnings_json, groups_json=groups_json
    )
    metadata = {
        _FILES_KEY: files_json,
        _WARNINGS_KEY: warnings_json,
        _GROUPS_KEY: groups_json,
        _DIGEST_KEY: digest,
        **(extra or {}),
    }
    size = max(events.height, 1) if one_row_group else None
    events.write_parquet(target, compression="zstd", metadata=metadata, row_group_size=size)


def written_by_timeline(path: Path) -> bool:
    """Whether ``path`` is a regular file (not a link) holding Parquet written by ``timeline convert``.

    Never follows a symbolic link and never opens anything but a regular file (a FIFO would block).
    """
    try:
        if not stat.S_ISREG(path.lstat().st_mode):
            return False
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return False
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return False
        try:
            metadata = pl.read_parquet_metadata(handle)
        except _READ_ERRORS:
            return False
    return _FILES_KEY in metadata


# --- reading -------------------------------------------------------------------------------------


def read_parquet(path: Path) -> FileResult:
    """Read a Parquet file written by :func:`write_parquet`, checking what it holds.

    A file with a digest must match it; a file without one (written by an older timeline) is read
    with a warning that it cannot be checked. Events that end before they start, or lack a start or
    an end, are dropped and counted in a warning, as the JSON importers do. The file is read once
    into memory (:func:`_snapshot`), never mapped.

    Raises
    ------
    TraceFormatError
        An unreadable or damaged file, one not written by ``timeline convert``, broken metadata,
        missing columns or columns of other types, content that does not match its digest, a file
        that changed while it was read, a dataset part holding another rank than its folder's.
    """
    source = path_text(path)
    data = _snapshot(path, source)
    metadata = _read_metadata(data, source)
    files, warnings = _decode_metadata(metadata, source)
    groups = _decode_groups(metadata, source)
    events = _read_events(data, metadata, source, part=path)
    del data
    if _DIGEST_KEY not in metadata:
        warnings.append(
            f"{source}: no content digest (written by an older timeline): its content cannot be verified; "
            f"{_RECREATE} to have it checked"
        )
    events = _drop_invalid_times(events, source, warnings)
    return FileResult(
        events=events,
        format="parquet",
        claims_rank=False,
        warnings=warnings,
        stored_files=files,
        groups=groups,
    )


@dataclass(frozen=True)
class Stored:
    """What a Parquet file written by :func:`write_parquet` holds, its digest checked."""

    events: pl.DataFrame
    """The events, with exactly :data:`~timeline.schema.EVENTS_SCHEMA`'s columns and dtypes."""
    files_json: str
    """The file table as JSON text (its rows may hold more keys than ``convert`` writes)."""
    warnings: list[str]
    groups: pl.DataFrame
    """The process groups (:data:`~timeline.schema.PROCESS_GROUPS_SCHEMA`)."""
    metadata: dict[str, str]
    """The file's key-value metadata (the file table, warnings and groups as JSON text, the digest…)."""


def read_stored(path: Path, *, digest: bool = True) -> Stored:
    """Read the events and metadata of a Parquet file written by :func:`write_parquet`, checking them.

    The content must match the file's digest; ``digest=False``: a file without one (an older
    timeline's) is read unchecked. Read once into memory, as :func:`read_parquet` reads.

    Raises
    ------
    TraceFormatError
        An unreadable or damaged file, one not written by timeline, missing columns or columns of
        other types, no digest (unless ``digest=False``), content that does not match its digest.
    """
    source = path_text(path)
    data = _snapshot(path, source)
    metadata = _read_metadata(data, source)
    if digest and _DIGEST_KEY not in metadata:
        raise TraceFormatError(f"{source}: no content digest; {_RECREATE}")
    _, warnings = _decode_metadata(metadata, source)
    return Stored(
        events=_read_events(data, metadata, source),
        files_json=metadata[_FILES_KEY],
        warnings=warnings,
        groups=_decode_groups(metadata, source),
        metadata=metadata,
    )


def _read_metadata(data: bytes, source: str) -> dict[str, str]:
    """Return the key-value metadata of a Parquet file written by timeline (its bytes).

    Raises
    ------
    TraceFormatError
        A damaged file, or one not written by timeline.
    """
    try:
        with panic_notices_dropped():
            metadata = pl.read_parquet_metadata(io.BytesIO(data))
    except _READ_ERRORS as exc:
        raise TraceFormatError(_damaged(source, exc)) from exc
    if _FILES_KEY not in metadata:
        msg = f"{source}: a Parquet file not written by timeline convert; convert the original traces with it"
        raise TraceFormatError(msg)
    return metadata


def _read_events(
    data: bytes, metadata: dict[str, str], source: str, *, part: Path | None = None
) -> pl.DataFrame:
    """Return the events of a Parquet file written by timeline, checked against its digest if it has one.

    ``part``: the file's path, for a dataset part's check that it holds its folder's rank (before
    the digest: that error says what changed).

    Raises
    ------
    TraceFormatError
        Damaged data, missing columns or columns of other types, content that does not match.
    """
    try:
        with panic_notices_dropped():  # a panic is reported as one error line, not above it too
            raw = pl.read_parquet(data)
    except _READ_ERRORS as exc:
        raise TraceFormatError(_damaged(source, exc)) from exc
    events = _conform(raw, source)
    if part is not None:
        _check_folder_rank(events, part, source)
    expected = metadata.get(_DIGEST_KEY)
    if expected is not None:
        _check_digest(events, metadata, expected, source)
    return events


def _check_folder_rank(events: pl.DataFrame, path: Path, source: str) -> None:
    """Refuse a dataset part (``rank=N/part-K.parquet``) holding events of another rank than ``N``.

    ``timeline convert --partition-by-rank`` writes each rank's events under its own folder; a part
    whose ``rank`` column says otherwise was changed since (without a digest, nothing else tells).

    Raises
    ------
    TraceFormatError
        The first rank of the part that is not its folder's.
    """
    folder = _PARTITION.match(path.parent.name)
    if folder is None:
        return
    expected = int(folder.group(1))
    others = events.get_column("rank").unique().drop_nulls().sort().to_list()
    wrong = [rank for rank in others if rank != expected]
    if wrong:
        msg = (
            f"{source}: holds events of rank {wrong[0]} but its folder rank={expected} says rank "
            f"{expected}; the dataset was changed after timeline convert wrote it: convert the original "
            "traces again"
        )
        raise TraceFormatError(msg)


def _snapshot(path: Path, source: str) -> bytes:
    """Return the bytes of a Parquet file, read once, refusing a file that changed while it was read.

    polars maps a file it is given by path into memory: a file truncated meanwhile (rewritten in
    place) killed the process with SIGBUS, and the metadata and the columns, read in two opens,
    could come from two versions. Read once, the bytes are one version; a size or modification time
    that differs after the read from before says the file was being written.

    Raises
    ------
    TraceFormatError
        The file cannot be read, is not a regular file, or changed while it was read.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        msg = f"{source}: cannot read: {exc.strerror or exc}; check that it exists and is readable"
        raise TraceFormatError(msg) from None
    with os.fdopen(fd, "rb") as handle:
        before = os.fstat(fd)
        if not stat.S_ISREG(before.st_mode):
            raise TraceFormatError(f"{source}: not a regular file; pass the Parquet file itself")
        try:
            data = handle.read(before.st_size + 1)
        except OSError as exc:
            raise TraceFormatError(f"{source}: cannot read: {exc.strerror or exc}") from None
        after = os.fstat(fd)
    same = (before.st_size, before.st_mtime_ns) == (after.st_size, after.st_mtime_ns)
    if not same or len(data) != before.st_size:
        msg = (
            f"{source}: changed while it was read (something is writing it); read it again once it "
            "is complete"
        )
        raise TraceFormatError(msg)
    return data


def _damaged(source: str, exc: BaseException) -> str:
    return f"{source}: damaged Parquet file, it cannot be read ({_one_line(exc)}); {_RECREATE}"


def _check_digest(events: pl.DataFrame, metadata: dict[str, str], expected: str, source: str) -> None:
    """Compare the content with the digest timeline wrote.

    Raises
    ------
    TraceFormatError
        A digest of an unknown form, or content that does not match it.
    """
    scheme, _, value = expected.partition(":")
    if scheme != _DIGEST_SCHEME or len(value) != 64:
        msg = f"{source}: metadata key {_DIGEST_KEY} is not a digest this timeline knows; {_RECREATE}"
        raise TraceFormatError(msg)
    actual = content_digest(
        events,
        files_json=metadata[_FILES_KEY],
        warnings_json=metadata.get(_WARNINGS_KEY, "[]"),
        groups_json=metadata.get(_GROUPS_KEY),
    )
    if actual != expected:
        msg = (
            f"{source}: content does not match its digest: the file was changed or damaged after "
            f"timeline wrote it; {_RECREATE}"
        )
        raise TraceFormatError(msg)


def _is_text(dtype: pl.DataType) -> bool:
    return dtype == pl.String or isinstance(dtype, (pl.Categorical, pl.Enum))


def _conform(raw: pl.DataFrame, source: str) -> pl.DataFrame:
    """Return the events with exactly :data:`~timeline.schema.EVENTS_SCHEMA`'s columns and dtypes.

    A column stored with another integer width, or text stored as another text type, is cast.

    Raises
    ------
    TraceFormatError
        A missing column, a column of another kind (floats for times, numbers for names), or values
        the cast refuses (a width overflowed, an event kind timeline does not know).
    """
    missing = [c for c in EVENTS_SCHEMA.names() if c not in raw.columns]
    if missing:
        msg = f"{source}: Parquet file lacks columns {missing}; re-run timeline convert with this version"
        raise TraceFormatError(msg)
    columns: list[pl.Series] = []
    for name, dtype in EVENTS_SCHEMA.items():
        column = raw.get_column(name)
        if column.dtype == dtype:
            columns.append(column)
            continue
        fits = column.dtype == pl.Null or (
            column.dtype.is_integer() if dtype.is_integer() else _is_text(column.dtype)
        )
        if not fits:
            msg = f"{source}: column {name} holds {column.dtype}, expected {dtype}; {_RECREATE}"
            raise TraceFormatError(msg)
        try:
            columns.append(column.cast(dtype, strict=True))
        except _READ_ERRORS as exc:
            msg = f"{source}: column {name} holds values that are not {dtype} ({_one_line(exc)}); {_RECREATE}"
            raise TraceFormatError(msg) from exc
    return pl.DataFrame(columns)


def _drop_invalid_times(events: pl.DataFrame, source: str, warnings: list[str]) -> pl.DataFrame:
    """Drop the events without a start or an end, and those that end before they start, with warnings.

    The JSON importers drop and count such events the same way; timeline never writes them.
    """
    start, end = pl.col("start_ns"), pl.col("end_ns")
    missing = start.is_null() | end.is_null()
    negative = ~missing & (end < start)
    n_missing, n_negative = events.select(m=missing.sum(), n=negative.sum()).row(0)
    if not (n_missing or n_negative):
        return events
    if n_missing:
        warnings.append(f"{source}: dropped {n_missing} events without start_ns or end_ns")
    if n_negative:
        warnings.append(f"{source}: dropped {n_negative} events with end < start")
    return events.filter(~missing & ~negative)
