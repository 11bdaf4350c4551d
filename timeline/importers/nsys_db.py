"""Reading an Nsight Systems SQLite export: the database, its tables by name, rows into polars.

Takes the path of a ``nsys export --type sqlite`` file and gives an :class:`NsysDatabase`: the
connection, opened read-only and immutable (``file:…?mode=ro&immutable=1``: SQLite then writes no
``-journal``, ``-wal`` or ``-shm`` file beside it and takes no lock), the tables and columns the
export holds (schemas 3.16, Nsight Systems 2024.6, to 3.25, 2026.2, are read by table and column
name: a table or column a version lacks is simply absent), its export metadata (product and schema
version) and queries whose rows come back as polars frames.

The large tables are read through ADBC's SQLite driver (``adbc-driver-sqlite``: SQLite's C API
straight into Arrow columns, handed to polars through the Arrow C stream interface, no Python object
per row and no pyarrow), about 3 times faster than the standard library's ``sqlite3`` and 5 times
less memory; connectorx, faster still, cannot open a database read-only and immutable (it takes a
path, not a URI): ``docs/performance.md`` has the numbers. The driver infers each column's type from
its first batch, so every integer column is selected through ``CAST(… AS INTEGER)`` (:func:`int_column`)
and a result is one batch. Small tables and the NVTX payload blobs are read with ``sqlite3``.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import polars as pl

from timeline.errors import TraceFormatError

__all__ = [
    "BATCH_ROWS",
    "NEWEST_TESTED_SCHEMA",
    "OLDEST_TESTED_SCHEMA",
    "NsysDatabase",
    "int_column",
    "is_nsys_database",
    "open_nsys",
]

OLDEST_TESTED_SCHEMA = (3, 16)
"""The oldest export schema tested (Nsight Systems 2024.6: ``EXPORT_SCHEMA_VERSION`` 3.16.1)."""
NEWEST_TESTED_SCHEMA = (3, 25)
"""The newest export schema tested (Nsight Systems 2026.2: 3.25.0); newer ones load with a warning."""
BATCH_ROWS = 1 << 30
"""Rows of one batch of ADBC's driver: every result is one batch (its column types inferred from all
its rows, never from a first batch that a later one contradicts)."""
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


def int_column(name: str) -> str:
    """Return the SQL that selects an integer column as integers (NULL kept), for ADBC's type inference."""
    return f"CAST({name} AS INTEGER)"


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
        database = NsysDatabase.of(conn, name, uri=_uri(path))
    except TraceFormatError:
        conn.close()
        raise
    try:
        if not database.is_export():
            msg = (
                f"{name}: a SQLite database, not an Nsight Systems export (no StringIds, "
                "CUPTI_ACTIVITY_KIND_* or NVTX_EVENTS tables); export the report with "
                "nsys export --type sqlite"
            )
            raise TraceFormatError(msg)
        yield database
    finally:
        database.close()
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
        The read-only connection (``sqlite3``).
    source
        The file, as messages name it.
    uri
        The read-only, immutable URI ADBC's driver opens.
    columns
        The columns of each table, by table name.
    """

    conn: sqlite3.Connection
    source: str
    uri: str = ""
    columns: dict[str, tuple[str, ...]] = field(default_factory=dict)
    _adbc: list[Any] = field(default_factory=list)

    @classmethod
    def of(cls, conn: sqlite3.Connection, source: str, *, uri: str = "") -> NsysDatabase:
        """Return the database of ``conn``, its tables and columns read by name.

        Raises
        ------
        TraceFormatError
            A damaged or truncated file.
        """
        database = cls(conn, source, uri)
        try:
            tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            for table in tables:
                info = conn.execute(f'PRAGMA table_info("{table}")').fetchall()
                database.columns[table] = tuple(str(row[1]) for row in info)
        except _DAMAGED as exc:
            raise TraceFormatError(damaged_message(source, exc)) from exc
        return database

    def close(self) -> None:
        """Close ADBC's connection, if one was opened."""
        for handle in reversed(self._adbc):
            handle.close()
        self._adbc.clear()

    def is_export(self) -> bool:
        """Whether the tables are an Nsight Systems export's (StringIds and one of the nsys tables)."""
        return "StringIds" in self.columns and any(t in self.columns for t in _NSYS_TABLES)

    def has(self, table: str, *columns: str) -> bool:
        """Whether ``table`` exists with every one of ``columns``."""
        held = self.columns.get(table)
        return held is not None and all(c in held for c in columns)

    def rows(self, sql: str, schema: Mapping[str, pl.DataType]) -> pl.DataFrame:
        """Return the rows of ``sql`` as a frame of ``schema`` (its columns in the order selected).

        Read through ADBC's driver: select integer columns with :func:`int_column`.

        Raises
        ------
        TraceFormatError
            A damaged or truncated file (SQLite finds it while reading the pages), or a value of
            another type than the export's schema says.
        """
        import adbc_driver_manager

        try:
            statement = adbc_driver_manager.AdbcStatement(self._adbc_connection())
            try:
                statement.set_options(**{"adbc.sqlite.query.batch_rows": str(BATCH_ROWS)})
                statement.set_sql_query(sql)
                stream, _ = statement.execute_query()
                frame = pl.DataFrame(stream)
            finally:
                statement.close()
        except (adbc_driver_manager.Error, pl.exceptions.ComputeError) as exc:
            raise TraceFormatError(damaged_message(self.source, exc)) from exc
        frame.columns = list(schema)
        return frame.cast(pl.Schema(schema))

    def _adbc_connection(self) -> Any:
        """Return ADBC's connection to the database, opened read-only and immutable the first time."""
        if not self._adbc:
            import adbc_driver_manager
            import adbc_driver_sqlite

            database = adbc_driver_sqlite.connect(self.uri)
            self._adbc.append(database)
            self._adbc.append(adbc_driver_manager.AdbcConnection(database))
        return self._adbc[-1]

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
