"""A cache of each trace file's canonical frame: a trace is decoded once, and read as a frame after.

Takes one trace file (Kineto or Horovod JSON) and the options of its parse; gives the
:class:`~timeline.importers.result.FileResult` the parse gives, from the cache folder when it holds
the entry of the same file read with the same options by the same code, else from the parse, which
is then written there for next time (:func:`read_through`). The parse of one file
(:func:`timeline.importers.parse.parse_file`) asks it, so every road reads through it: in memory,
rank by rank on local processes and on Ray workers (the :class:`Cache` travels in
:class:`~timeline.importers.result.ImportOptions`).

- **Where**: ``--cache-dir DIR``, else ``$TIMELINE_CACHE_DIR``, else ``$XDG_CACHE_HOME/timeline``,
  else ``~/.cache/timeline`` (:func:`cache_folder`). Nothing is ever written beside the user's files.
- **An entry** is a Parquet file as ``timeline convert`` writes it (the events, a file table, the
  warnings, the process groups and the content digest, checked on every read), named after its key.
- **Its key**: the file (absolute path, size, modification time, inode and device, and a digest of
  its first and last 64 KiB) and the read (timeline's version and a digest of its importers' source
  code, polars' version, the classification rules, ``include_python``, ``overlap_only``). The key
  is kept in the entry and compared when it is read: a damaged entry, or one of another key (a
  foreign file), is ignored and written again.
- **Writes** go to a temporary file in the folder, renamed over the entry: a reader, or a command
  started at the same time, sees the whole entry or none, and two commands writing the same entry
  leave one. An entry is written only if the file did not change while it was read. Writing
  another version of a file's entry (the file changed) removes the old one.
- **Size**: at most :data:`DEFAULT_LIMIT_BYTES` (``TIMELINE_CACHE_LIMIT``: bytes, or with a
  ``K``/``M``/``G`` suffix), least recently used first out; reading an entry marks it used.
- **A read-only or full folder** costs speed only: :func:`open_cache` says so in one warning, the
  entries there are still read, and nothing is written. A write that fails later (the disk filled
  meanwhile) leaves no entry and no temporary file, and that process writes no more.

Nothing here imports polars until an entry is read or written.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from timeline.errors import TimelineError, UsageError
from timeline.importers.result import Clock
from timeline.paths import path_text

if TYPE_CHECKING:
    import polars as pl

    from timeline.importers.result import FileResult, ImportOptions

__all__ = [
    "CACHE_DIR_ENV",
    "CACHE_LIMIT_ENV",
    "DEFAULT_LIMIT_BYTES",
    "ENTRY_LAYOUT",
    "Cache",
    "CacheWarning",
    "Entry",
    "cache_folder",
    "clear_cache",
    "limit_bytes",
    "list_entries",
    "open_cache",
    "read_through",
    "resolve_cache",
]

CACHE_DIR_ENV = "TIMELINE_CACHE_DIR"
"""The environment variable naming the cache folder (``--cache-dir`` wins over it)."""
CACHE_LIMIT_ENV = "TIMELINE_CACHE_LIMIT"
"""The environment variable giving the cache's size limit: bytes, or ``500M``, ``8G`` (binary units)."""
DEFAULT_LIMIT_BYTES = 4 * 1024**3
"""The cache's default size limit: 4 GiB (an entry is smaller than its trace gzipped: the 54 MB
trace's is 1.0 MiB, the overlap events of a 1 GB trace 17 MiB)."""
MIN_FREE_BYTES = 256 * 1024**2
"""The free space below which a cache folder counts as full (:func:`open_cache`)."""
ENTRY_LAYOUT = 1
"""The layout of an entry (its file row and key); part of the key."""
HEAD_TAIL_BYTES = 64 * 1024
"""How many bytes at each end of a trace file its key digests (the whole of a smaller file)."""

_KEY = "timeline.cache.key"
"""The entry's metadata key holding its key (JSON)."""
_ENTRY = re.compile(r"^[0-9a-f]{16}-[0-9a-f]{16}-[0-9a-f]{16}\.parquet$")
_TEMPORARY = re.compile(r"^\.[0-9a-f]{16}-[0-9a-f]{16}-[0-9a-f]{16}\.parquet\.[0-9]+\.[A-Za-z0-9_]+\.tmp$")
_STALE_TEMPORARY_S = 3600.0
"""A temporary file older than this is a writer's that died: removed when the cache is trimmed."""
_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_CODE = ("importers", "schema.py", "policy.py", "errors.py")
"""What shapes a parse (under ``timeline/``; this module is in ``importers``): its digest is part
of the key, so that code changed under one version number never reads the frames of another."""


class CacheWarning(UserWarning):
    """The cache folder can only be read, or not at all: the library's one warning (the CLI prints it)."""


@dataclass(frozen=True)
class Cache:
    """Where the frames are cached, how much they may take, and whether new ones can be written.

    Build it with :func:`open_cache`.

    Attributes
    ----------
    folder
        The cache folder.
    limit_bytes
        The most its entries may take together.
    writable
        False: entries are read, none is written (the folder is read-only or full).
    """

    folder: Path
    limit_bytes: int = DEFAULT_LIMIT_BYTES
    writable: bool = True


@dataclass(frozen=True)
class Entry:
    """One entry of the cache: its file, its size, when it was last used and the trace it holds."""

    path: Path
    size_bytes: int
    used: float
    """When it was last read or written (seconds since the epoch)."""
    source: str | None = field(default=None)
    """The trace file it is the frame of (None when its key cannot be read)."""


def cache_folder(folder: str | Path | None = None) -> Path:
    """Return the cache folder: ``folder``, else ``$TIMELINE_CACHE_DIR``, else the XDG cache folder's.

    That is ``$XDG_CACHE_HOME/timeline`` (an absolute path), else ``~/.cache/timeline``. Returned
    absolute.
    """
    if folder is not None and str(folder) != "":
        chosen = Path(folder).expanduser()
    elif os.environ.get(CACHE_DIR_ENV, ""):
        chosen = Path(os.environ[CACHE_DIR_ENV]).expanduser()
    else:
        xdg = os.environ.get("XDG_CACHE_HOME", "")
        chosen = (Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache") / "timeline"
    return chosen.absolute()  # the same folder for workers started elsewhere


def limit_bytes() -> int:
    """Return the size limit: ``$TIMELINE_CACHE_LIMIT`` (bytes, ``500M``, ``8G``), else the default.

    The default is :data:`DEFAULT_LIMIT_BYTES`.

    Raises
    ------
    UsageError
        A limit that is not a size.
    """
    text = os.environ.get(CACHE_LIMIT_ENV, "")
    if not text:
        return DEFAULT_LIMIT_BYTES
    match = _SIZE.match(text)
    if match is None:
        msg = f"{CACHE_LIMIT_ENV}={text!r}: not a size; give bytes, or a number with K, M, G or T (8G)"
        raise UsageError(msg)
    return int(match.group(1)) * _UNITS[match.group(2).lower()]


def open_cache(folder: str | Path | None = None) -> tuple[Cache, str | None]:
    """Return the cache in ``folder`` (default: :func:`cache_folder`), and why it cannot be written, if so.

    The folder is made if missing. It is writable when a file can be made in it and its file
    system has :data:`MIN_FREE_BYTES` free; otherwise the warning says why: the cache then only
    costs speed (its entries are still read, none is written).

    Raises
    ------
    UsageError
        ``TIMELINE_CACHE_LIMIT`` is not a size.
    """
    where = cache_folder(folder)
    limit = limit_bytes()
    try:
        where.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".probe-", dir=where)
        os.close(fd)
        Path(probe).unlink()
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        note = f"cache folder {where}: cannot write there ({why}); traces are decoded again each time"
        return Cache(where, limit, writable=False), _with_fix(note)
    free = shutil.disk_usage(where).free
    if free < MIN_FREE_BYTES:
        note = f"cache folder {where}: full ({free // 1024**2} MiB free); traces are decoded again each time"
        return Cache(where, limit, writable=False), _with_fix(note)
    return Cache(where, limit), None


def _with_fix(note: str) -> str:
    return f"{note} (--cache-dir DIR or {CACHE_DIR_ENV} to use another folder, --no-cache to silence this)"


def resolve_cache(cache: bool | str | Path | Cache | None) -> Cache | None:
    """Return the :class:`Cache` a library call asks for: True the default folder, a path that folder.

    False or None: no cache. A folder that cannot be written gives a :class:`CacheWarning`.
    """
    import warnings

    if cache is None or cache is False:
        return None
    if isinstance(cache, Cache):
        return cache
    opened, note = open_cache(None if cache is True else cache)
    if note is not None:
        warnings.warn(note, CacheWarning, stacklevel=3)
    return opened


# --------------------------------------------------------------------------------------------------
# The key
# --------------------------------------------------------------------------------------------------


@cache
def _code_digest() -> str:
    """Return a digest of the source of the modules that shape a parse (:data:`_CODE`)."""
    root = Path(__file__).resolve().parent.parent
    hasher = hashlib.blake2b(digest_size=16)
    for name in _CODE:
        where = root / name
        files = sorted(where.glob("*.py")) if where.is_dir() else [where]
        for path in files:
            try:
                data = path.read_bytes()
            except OSError:
                continue  # an installation without sources: the version number alone decides
            hasher.update(path.name.encode() + b"\0" + len(data).to_bytes(8, "little") + data)
    return hasher.hexdigest()


def _settings(options: ImportOptions) -> dict[str, Any]:
    """Return what of the read decides the frame: the code, the versions and the options."""
    import polars as pl

    from timeline import __version__

    return {
        "layout": ENTRY_LAYOUT,
        "timeline": __version__,
        "code": _code_digest(),
        "polars": pl.__version__,
        "rules": asdict(options.rules),
        "include_python": options.include_python,
        "overlap_only": options.overlap_only,
        # read by Nsight Systems exports only (not cached), kept in the key should one ever be
        "iteration_range": options.iteration_range,
        "held_keys": options.held_keys,
    }


def _identity(path: Path) -> dict[str, Any] | None:
    """Return what identifies the file's content: path, size, times, inode, and its ends' digest.

    None when the file cannot be read (the parse reports it).
    """
    try:
        with path.open("rb") as handle:
            status = os.fstat(handle.fileno())
            hasher = hashlib.blake2b(handle.read(HEAD_TAIL_BYTES), digest_size=16)
            if status.st_size > 2 * HEAD_TAIL_BYTES:
                handle.seek(-HEAD_TAIL_BYTES, os.SEEK_END)
            hasher.update(handle.read())
    except OSError:
        return None
    return {
        "path": path_text(path.resolve()),  # valid UTF-8 (a name that is not: its bytes as \\xNN)
        "size": status.st_size,
        "mtime_ns": status.st_mtime_ns,
        "ctime_ns": status.st_ctime_ns,
        "inode": status.st_ino,
        "device": status.st_dev,
        "ends": hasher.hexdigest(),
    }


def _short(value: Any) -> str:
    return hashlib.blake2b(msgspec.json.encode(value), digest_size=8).hexdigest()


@dataclass(frozen=True)
class _Key:
    """An entry's key and name: ``<path>-<file version>-<read settings>.parquet``, 16 hex digits each."""

    identity: dict[str, Any]
    settings: dict[str, Any]

    @property
    def text(self) -> str:
        return msgspec.json.encode({"identity": self.identity, "settings": self.settings}).decode()

    @property
    def path_part(self) -> str:
        return _short(self.identity["path"])

    @property
    def name(self) -> str:
        return f"{self.path_part}-{_short(self.identity)}-{_short(self.settings)}.parquet"


# --------------------------------------------------------------------------------------------------
# Reading through the cache
# --------------------------------------------------------------------------------------------------


class _Row(msgspec.Struct, forbid_unknown_fields=False):
    """The entry's one file-table row: a ``timeline convert`` row, and what else the parse said."""

    path: str
    format: Literal["kineto", "horovod"]
    claims_rank: bool
    skipped: int
    has_groups: bool
    rank: int | None = None
    world_size: int | None = None
    backend: str | None = None
    host: str | None = None
    clock: Clock = "epoch"


_unwritable: set[Path] = set()
"""Folders this process failed to write an entry to: it writes no more there."""


def read_through(path: Path, options: ImportOptions, parse: Callable[[], FileResult]) -> FileResult:
    """Return ``path``'s parse: from its cache entry if one of the same key is there, else ``parse()``.

    A parse of a Kineto or Horovod file is written to the cache (when it is writable) if the file did
    not change meanwhile; other formats (a Parquet file) are returned as ``parse()`` gives them.
    ``options.cache`` is the cache (None: ``parse()`` alone).

    Raises
    ------
    TimelineError
        Bad input, as ``parse()`` raises it (a damaged entry is never an error: it is read again).
    """
    store = options.cache
    identity = _identity(path) if store is not None else None
    if store is None or identity is None:
        return parse()
    key = _Key(identity, _settings(options))
    entry = store.folder / key.name
    found = _read_entry(entry, key, path_text(path))
    if found is not None:
        _mark_used(entry)
        return found
    result = parse()
    if result.format not in _CACHED:
        return result  # a Parquet file is a frame already
    if store.writable and store.folder not in _unwritable and _identity(path) == identity:
        _write_entry(store, entry, key, result, path_text(path))
    return result


def _read_entry(entry: Path, key: _Key, source: str) -> FileResult | None:
    """Return the parse an entry holds, or None: none there, damaged, or of another key.

    ``source``: the file as this read names it; the entry's warnings name it so (:func:`_renamed`).
    """
    from timeline.importers.parquet import read_stored
    from timeline.importers.result import FileResult

    if not entry.is_file():
        return None
    try:
        stored = read_stored(entry)
        if stored.metadata.get(_KEY) != key.text:
            return None  # a foreign entry: written again
        rows = msgspec.json.decode(stored.files_json, type=list[_Row])
    except (TimelineError, OSError, msgspec.DecodeError):
        return None  # damaged: written again
    if len(rows) != 1:
        return None
    row = rows[0]
    warnings = _renamed(stored.warnings, row.path, source)
    if warnings is None:
        return None
    return FileResult(
        events=stored.events,
        format=row.format,
        rank=row.rank,
        claims_rank=row.claims_rank,
        world_size=row.world_size,
        backend=row.backend,
        host=row.host,
        clock=row.clock,
        warnings=warnings,
        groups=stored.groups if row.has_groups else None,
        skipped=row.skipped,
    )


_CACHED = ("kineto", "horovod")
"""The formats whose parse is cached (a Parquet file from ``convert`` is read as it is)."""


def _renamed(warnings: list[str], written: str, source: str) -> list[str] | None:
    """Return an entry's warnings as a read of the file under the name ``source`` words them.

    The parse that wrote them named the file ``written`` (the same file under another name: a
    relative path, a link) at the start of each. None if one names it elsewhere: decoded again.
    """
    if written == source:
        return warnings
    out = []
    for warning in warnings:
        named = warning.startswith(written + ":")
        rest = warning[len(written) :] if named else warning
        if written in rest:
            return None
        out.append(source + rest if named else warning)
    return out


def _mark_used(entry: Path) -> None:
    """Mark an entry as just used (its modification time: the least recently used go first)."""
    with contextlib.suppress(OSError):  # a read-only folder: the order of eviction is all it costs
        os.utime(entry)


def _files_row(result: FileResult, source: str) -> pl.DataFrame:
    """Return the entry's file table: the file's row as ``convert`` keeps it, and the parse's facts.

    ``source``: the file as the parse named it (in its warnings).
    """
    import polars as pl

    from timeline.schema import FILES_SCHEMA

    row = {
        "rank": result.rank,
        "path": source,
        "format": result.format,
        "rank_from": None,
        "world_size": result.world_size,
        "backend": result.backend,
        "host": result.host,
        "clock": result.clock,
        "events": result.events.height + result.skipped,
    }
    table = pl.DataFrame([row], schema=FILES_SCHEMA)
    return table.with_columns(
        claims_rank=pl.lit(result.claims_rank),
        skipped=pl.lit(result.skipped, dtype=pl.Int64),
        has_groups=pl.lit(result.groups is not None),
    )


def _write_entry(store: Cache, entry: Path, key: _Key, result: FileResult, source: str) -> None:
    """Write an entry: a temporary file renamed over it; then remove the file's older entries, trim."""
    from timeline.importers.parquet import write_parquet

    temporary = store.folder / f".{entry.name}.{os.getpid()}.{_random_part()}.tmp"
    try:
        store.folder.mkdir(parents=True, exist_ok=True)  # a Ray worker's machine may have none yet
        with temporary.open("xb") as handle:
            write_parquet(
                handle,
                events=result.events,
                files=_files_row(result, source),
                warnings=list(result.warnings),
                groups=result.groups,
                extra={_KEY: key.text},
                one_row_group=True,
            )
        written = temporary.stat().st_size
        temporary.replace(entry)
    except OSError:
        _unwritable.add(store.folder)  # read-only or full since open_cache looked: write no more
        temporary.unlink(missing_ok=True)
        return
    _remove_older(store.folder, key, entry.name)
    _trim(store, written, keep=entry.name)


def _random_part() -> str:
    return hashlib.blake2b(os.urandom(16), digest_size=4).hexdigest()


def _remove_older(folder: Path, key: _Key, keep: str) -> None:
    """Remove the entries of other versions of the same file (it changed: they cannot be read again)."""
    version = _short(key.identity)
    prefix = key.path_part + "-"
    for name in _names(folder):
        if name.startswith(prefix) and name != keep and _ENTRY.match(name) and name.split("-")[1] != version:
            (folder / name).unlink(missing_ok=True)


def _names(folder: Path) -> list[str]:
    try:
        return [child.name for child in folder.iterdir()]
    except OSError:
        return []


_usage: dict[Path, int] = {}
"""Per folder, the bytes its entries take as this process last counted them, plus what it wrote since."""


def _trim(store: Cache, written: int, *, keep: str) -> None:
    """Add a written entry to the folder's count; past the limit, remove the least recently used entries.

    The folder is counted when this process first writes to it, and again when the count passes the
    limit (other processes write too), so that a run of many files does not list it for each.
    """
    if store.folder not in _usage:
        _usage[store.folder] = sum(e.size_bytes for e in list_entries(store.folder, sources=False))
    else:
        _usage[store.folder] += written
    if _usage[store.folder] <= store.limit_bytes:
        return
    entries = sorted(list_entries(store.folder, sources=False), key=lambda e: e.used)
    total = sum(e.size_bytes for e in entries)
    for entry in entries:
        if total <= store.limit_bytes:
            break
        if entry.path.name == keep:
            continue
        entry.path.unlink(missing_ok=True)
        total -= entry.size_bytes
    _remove_stale_temporaries(store.folder)
    _usage[store.folder] = total


def _remove_stale_temporaries(folder: Path) -> None:
    """Remove the temporary files of writers that died (older than an hour)."""
    now = time.time()
    for name in _names(folder):
        if _TEMPORARY.match(name):
            try:
                if now - (folder / name).stat().st_mtime > _STALE_TEMPORARY_S:
                    (folder / name).unlink(missing_ok=True)
            except OSError:
                continue


# --------------------------------------------------------------------------------------------------
# What ``timeline cache`` shows and clears
# --------------------------------------------------------------------------------------------------


def list_entries(folder: Path, *, sources: bool = True) -> list[Entry]:
    """Return the entries in ``folder``, least recently used first; ``sources``: with their trace files.

    Only files named as entries count: nothing else in the folder is listed (or cleared).
    """
    found: list[Entry] = []
    for name in _names(folder):
        if not _ENTRY.match(name):
            continue
        try:
            status = (folder / name).stat()
        except OSError:
            continue  # removed meanwhile
        found.append(Entry(folder / name, status.st_size, status.st_mtime))
    found.sort(key=lambda e: (e.used, e.path.name))
    if sources:
        found = [Entry(e.path, e.size_bytes, e.used, _source_of(e.path)) for e in found]
    return found


def _source_of(entry: Path) -> str | None:
    """Return the trace file an entry is the frame of, from its key (None if it cannot be read)."""
    import polars as pl

    try:
        text = pl.read_parquet_metadata(entry).get(_KEY)
        key = msgspec.json.decode(text) if text is not None else None
    except (OSError, ValueError, pl.exceptions.PolarsError, msgspec.DecodeError):
        return None
    path = key.get("identity", {}).get("path") if isinstance(key, dict) else None
    return path if isinstance(path, str) else None


def clear_cache(folder: Path) -> tuple[int, int]:
    """Remove every entry (and temporary file) in ``folder``; return how many entries and bytes.

    Removes only files named as the cache names them: a folder given by mistake keeps the rest.
    """
    count = size = 0
    for entry in list_entries(folder, sources=False):
        try:
            entry.path.unlink()
        except FileNotFoundError:
            continue
        except OSError as exc:
            msg = f"{entry.path}: cannot remove it ({exc.strerror or exc}); check the folder's permissions"
            raise UsageError(msg) from exc
        count += 1
        size += entry.size_bytes
    for name in _names(folder):
        if _TEMPORARY.match(name):
            (folder / name).unlink(missing_ok=True)
    return count, size
