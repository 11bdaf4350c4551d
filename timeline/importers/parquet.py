"""Parquet files written by ``timeline convert``: the canonical events with the file table and warnings.

:func:`write_parquet` writes the events frame, zstd-compressed, with the file table and the load
warnings as JSON in the file's key-value metadata; :func:`read_parquet` reads such a file back as a
:class:`~timeline.importers.result.FileResult` (a Parquet file from anywhere else is refused).
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import polars as pl

from timeline.errors import TraceFormatError
from timeline.importers.result import FileResult
from timeline.schema import EVENTS_SCHEMA, validate

__all__ = ["read_parquet", "write_parquet"]

_FILES_KEY = "timeline.files"
_WARNINGS_KEY = "timeline.warnings"


def write_parquet(
    path: str | Path, *, events: pl.DataFrame, files: pl.DataFrame, warnings: tuple[str, ...]
) -> None:
    """Write events as Parquet, with the file table and warnings in the file's metadata."""
    files_json = msgspec.json.encode(files.to_dicts()).decode()
    warnings_json = msgspec.json.encode(list(warnings)).decode()
    events.write_parquet(
        path, compression="zstd", metadata={_FILES_KEY: files_json, _WARNINGS_KEY: warnings_json}
    )


def read_parquet(path: Path) -> FileResult:
    """Read a Parquet file written by :func:`write_parquet`.

    Raises
    ------
    TraceFormatError
        An unreadable file, one not written by ``timeline convert``, one lacking columns.
    """
    source = str(path)
    try:
        metadata = pl.read_parquet_metadata(path)
        events = pl.read_parquet(path)
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise TraceFormatError(f"{source}: unreadable Parquet file ({exc})") from exc
    if _FILES_KEY not in metadata:
        msg = f"{source}: a Parquet file not written by timeline convert; convert the original traces with it"
        raise TraceFormatError(msg)
    missing = [c for c in EVENTS_SCHEMA.names() if c not in events.columns]
    if missing:
        msg = f"{source}: Parquet file lacks columns {missing}; re-run timeline convert with this version"
        raise TraceFormatError(msg)
    files = msgspec.json.decode(metadata[_FILES_KEY])
    warnings = msgspec.json.decode(metadata.get(_WARNINGS_KEY, "[]"))
    return FileResult(
        events=validate(events, EVENTS_SCHEMA, what=source),
        format="parquet",
        claims_rank=False,
        warnings=[str(w) for w in warnings],
        stored_files=[dict(row) for row in files],
    )
