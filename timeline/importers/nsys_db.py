"""Reading an Nsight Systems SQLite export: the database, its tables by name, rows into polars.

Takes the path of a ``nsys export --type sqlite`` file and gives an :class:`NsysDatabase`: the
connection, opened read-only and immutable (``file:…?mode=ro&immutable=1``: SQLite then writes no
``-journal``, ``-wal`` or ``-shm`` file beside it and takes no lock), the tables and columns the
export holds (schemas 3.16, Nsight Systems 2024.6, to 3.25, 2026.2, are read by table and column
name: a table or column a version lacks is simply absent), its export metadata (product and schema
version) and queries whose rows come back as polars frames.

Rows are fetched with the standard library's ``sqlite3`` in batches of :data:`BATCH_ROWS`, each
batch turned into a frame at once (polars builds the columns from the row tuples in native code),
so that no more than a batch of Python tuples is ever held: ``docs/performance.md`` records why
this driver (measured against ADBC's SQLite driver and connectorx).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import polars as pl

from timeline.errors import TraceFormatError

__all__ = [
    "BATCH_ROWS",
    "NEWEST_TESTED_SCHEMA",
    "OLDEST_TESTED_SCHEMA",
    "NsysDatabase",
    "is_nsys_database",
    "open_nsys",
]

OLDEST_TESTED_SCHEMA = (3, 16)
"""The oldest export schema tested (Nsight Systems 2024.6: ``EXPORT_SCHEMA_VERSION`` 3.16.1)."""
NEWEST_TESTED_SCHEMA = (3, 25)
"""The newest export schema tested (Nsight Systems 2026.2: 3.25.0); newer ones load with a warning."""
BATCH_ROWS = 262_144
"""Rows fetched and turned into a frame at a time."""
# Tables whose presence (beside StringIds) makes a SQLite file an Nsight Systems export.
_NSYS_TABLES = (
    "META_DATA_EXPORT",
    "TARGET_INFO_SESSION_START_TIME",
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "NVTX_EVENTS",
)
_VERSION = re.compile(r"^(\d+)\.(\d+)")
_DAMAGED = (sqlite3.DatabaseError,)


def _uri(path: Path) -> str:
    """Return the read-only, immutable URI of ``path`` (``immutable``: no lock, no journal read or made)."""
    return f"file:{quote(str(path.resolve()))}?mode=ro&immutable=1"


def damaged_message(source: str, exc: BaseException) -> str:
    """Return the message for a SQLite file that cannot be read: cut short or damaged."""
    reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return (
        f"{source}: damaged or truncated SQLite file ({reason}); re-copy the export or export it again "
        "with nsys export --type sqlite"
    )


@contextmanager
def open_nsys(path: Path, *, source: str | None = None) -> Iterator[NsysDatabase]:
    """Open an export read-only and immutable; yield its :class:`NsysDatabase`, closed at the end.

    Raises
    ------
    TraceFormatError
        A file SQLite cannot open (damaged, truncated, not SQLite), or a SQLite database that is not
        an Nsight Systems export.
    """
    name = str(path) if source is None else source
    try:
        conn = sqlite3.connect(_uri(path), uri=True, check_same_thread=False)
    except _DAMAGED as exc:
        raise TraceFormatError(damaged_message(name, exc)) from exc
    try:
        database = NsysDatabase.of(conn, name)
        if not database.is_export():
            msg = (
                f"{name}: a SQLite database, not an Nsight Systems export (no StringIds, "
                "CUPTI_ACTIVITY_KIND_* "
                "or NVTX_EVENTS tables); export the report with nsys export --type sqlite"
            )
            raise TraceFormatError(msg)
        yield database
    finally:
        conn.close()


def is_nsys_database(path: Path) -> bool:
    """Whether ``path`` is a SQLite database holding an Nsight Systems export's tables (never raises)."""
    try:
        with open_nsys(path):
            return True
    except TraceFormatError:
        return False


@dataclass
class NsysDatabase:
    """An open export: its connection, tables and columns, and rows as polars frames.

    Attributes
    ----------
    conn
        The read-only connection.
    source
        The file, as messages name it.
    columns
        The columns of each table, by table name.
    """

    conn: sqlite3.Connection
    source: str
    columns: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, conn: sqlite3.Connection, source: str) -> NsysDatabase:
        """Return the database of ``conn``, its tables and columns read by name.

        Raises
        ------
        TraceFormatError
            A damaged or truncated file.
        """
        database = cls(conn, source)
        try:
            tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            for table in tables:
                info = conn.execute(f'PRAGMA table_info("{table}")').fetchall()
                database.columns[table] = tuple(str(row[1]) for row in info)
        except _DAMAGED as exc:
            raise TraceFormatError(damaged_message(source, exc)) from exc
        return database

    def is_export(self) -> bool:
        """Whether the tables are an Nsight Systems export's (StringIds and one of the nsys tables)."""
        return "StringIds" in self.columns and any(t in self.columns for t in _NSYS_TABLES)

    def has(self, table: str, *columns: str) -> bool:
        """Whether ``table`` exists with every one of ``columns``."""
        held = self.columns.get(table)
        return held is not None and all(c in held for c in columns)

    def rows(
        self, sql: str, schema: Mapping[str, pl.DataType], params: tuple[object, ...] = ()
    ) -> pl.DataFrame:
        """Return the rows of ``sql`` as a frame of ``schema`` (its columns in the order selected).

        Raises
        ------
        TraceFormatError
            A damaged or truncated file (SQLite finds it while reading the pages).
        """
        frames: list[pl.DataFrame] = []
        try:
            cursor = self.conn.execute(sql, params)
            while batch := cursor.fetchmany(BATCH_ROWS):
                frames.append(pl.DataFrame(batch, schema=dict(schema), orient="row"))
        except _DAMAGED as exc:
            raise TraceFormatError(damaged_message(self.source, exc)) from exc
        except OverflowError as exc:  # an integer beyond 64 bits in a column read as Int64
            msg = f"{self.source}: a value beyond 64 bits in a time or id column; export the report again"
            raise TraceFormatError(msg) from exc
        if not frames:
            return pl.DataFrame(schema=dict(schema))
        return pl.concat(frames, how="vertical", rechunk=True) if len(frames) > 1 else frames[0]

    def scalar_rows(self, sql: str) -> list[tuple[object, ...]]:
        """Return the rows of a small query as tuples.

        Raises
        ------
        TraceFormatError
            A damaged or truncated file.
        """
        try:
            return self.conn.execute(sql).fetchall()
        except _DAMAGED as exc:
            raise TraceFormatError(damaged_message(self.source, exc)) from exc

    def export_metadata(self) -> dict[str, str]:
        """Return ``META_DATA_EXPORT`` as a dict (empty without the table)."""
        if not self.has("META_DATA_EXPORT", "name", "value"):
            return {}
        return {str(k): str(v) for k, v in self.scalar_rows("SELECT name, value FROM META_DATA_EXPORT")}

    def schema_version(self) -> tuple[str | None, tuple[int, int] | None]:
        """Return the export schema version as written (``3.25.0``) and as ``(major, minor)``."""
        text = self.export_metadata().get("EXPORT_SCHEMA_VERSION")
        match = _VERSION.match(text or "")
        return text, (int(match.group(1)), int(match.group(2))) if match else None
