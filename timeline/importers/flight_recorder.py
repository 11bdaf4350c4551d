"""PyTorch Flight Recorder dumps (pickle or JSON, versions 2.x) → frames of entries, group progress, groups.

A Flight Recorder dump is what each rank of a job writes when a collective times out
(``TORCH_NCCL_DUMP_ON_TIMEOUT``) or on demand: its last collectives (``entries``), every process group
it belongs to (``pg_config``: name → description and member ranks) and, per group, the sequence
numbers of the last collective it enqueued, started and completed (``pg_status``). The layout is
torch's writer, ``torch/csrc/distributed/c10d/FlightRecorderDetail.hpp`` (``dump_dict`` pickled with
protocol 2, ``dump_json`` with nlohmann::json): facts the code below relies on are cited there.

:func:`parse_flight_recorder` takes the bytes of one dump and gives a :class:`DumpResult`: three
frames with the declared schemas :data:`FLIGHT_ENTRIES_SCHEMA`, :data:`FLIGHT_STATUS_SCHEMA` and
:data:`FLIGHT_GROUPS_SCHEMA`, and the warnings. A dump is data: pickles are read by an unpickler
that refuses every class (:class:`RefusedClassError`), so a file asking for one (``os.system``) is
refused before anything runs. Missing and unknown fields, values of the wrong type and rank lists
that do not parse are counted warnings (the value is null), never a guess. The rank is not in the
dump: the loader (:mod:`timeline.dumps`) takes it from the file name.
"""

from __future__ import annotations

import io
import pickle
import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from timeline.errors import TraceFormatError
from timeline.importers.collectives import dtype_size, normalise_collective

__all__ = [
    "FLIGHT_ENTRIES_SCHEMA",
    "FLIGHT_GROUPS_SCHEMA",
    "FLIGHT_STATUS_SCHEMA",
    "MAX_DUMP_BYTES",
    "STATE",
    "DumpResult",
    "RefusedClassError",
    "load_dump_object",
    "parse_flight_recorder",
    "parse_group_ranks",
    "split_profiling_name",
]

MAX_DUMP_BYTES = 256 * 1024**2
"""The most bytes one dump may hold (after gzip, when gzipped): 256 MiB. torch keeps at most
``TORCH_NCCL_TRACE_BUFFER_SIZE`` entries (2,000 to 20,000 in practice, about 1 KiB each with their
stack frames): a larger file is not a dump torch wrote. Decoded, a dump takes about ten times its
size in memory."""

STATE = pl.Enum(["scheduled", "started", "completed"])
"""An entry's state as torch's writer names it: ``scheduled`` (enqueued; with timing off, also
started but not known to be), ``started`` (its start event fired: ``TORCH_NCCL_ENABLE_TIMING``),
``completed`` (its end event fired)."""

FLIGHT_ENTRIES_SCHEMA = pl.Schema(
    {
        "rank": pl.Int32(),
        "record_id": pl.Int64(),
        "pg_id": pl.Int64(),
        "pg_name": pl.String(),
        "pg_desc": pl.String(),
        "collective_seq_id": pl.Int64(),
        "p2p_seq_id": pl.Int64(),
        "op_id": pl.Int64(),
        "seq": pl.Int64(),
        "is_p2p": pl.Boolean(),
        "profiling_name": pl.String(),
        "collective": pl.String(),
        "p2p_src": pl.Int32(),
        "p2p_dst": pl.Int32(),
        "input_sizes": pl.List(pl.List(pl.Int64())),
        "output_sizes": pl.List(pl.List(pl.Int64())),
        "input_dtypes": pl.List(pl.String()),
        "output_dtypes": pl.List(pl.String()),
        "in_elements": pl.Int64(),
        "out_elements": pl.Int64(),
        "in_bytes": pl.Int64(),
        "out_bytes": pl.Int64(),
        "state": STATE,
        "retired": pl.Boolean(),
        "time_created_ns": pl.Int64(),
        "time_discovered_started_ns": pl.Int64(),
        "time_discovered_completed_ns": pl.Int64(),
        "duration_ns": pl.Int64(),
        "timeout_ns": pl.Int64(),
        "thread_name": pl.String(),
    }
)
"""One row per entry of a dump: one collective or point-to-point operation a rank enqueued.
Every column is defined in ``docs/flight-recorder.md``."""

FLIGHT_STATUS_SCHEMA = pl.Schema(
    {
        "rank": pl.Int32(),
        "pg_id": pl.Int64(),
        "pg_name": pl.String(),
        "named_by": pl.String(),
        "last_enqueued": pl.Int64(),
        "last_started": pl.Int64(),
        "last_completed": pl.Int64(),
    }
)
"""One row per process group of a rank's ``pg_status``: the sequence numbers of the last operation
the rank enqueued, started and completed in that group (null: none, the dump's -1)."""

FLIGHT_GROUPS_SCHEMA = pl.Schema(
    {
        "rank": pl.Int32(),
        "pg_name": pl.String(),
        "pg_desc": pl.String(),
        "group_ranks": pl.List(pl.Int32()),
    }
)
"""One row per process group of a rank's ``pg_config``: its name, description and member ranks
(null when the dump's rank list does not parse or is empty)."""

_INT64_MAX = (1 << 63) - 1
_KNOWN_TOP = frozenset(
    {"version", "entries", "pg_config", "pg_status", "nccl_version", "comm_lib_version", "nccl_comm_state"}
)
_OPTIONAL_TOP = frozenset({"nccl_version", "comm_lib_version", "nccl_comm_state"})
_ENTRY_FIELDS = (
    "record_id",
    "pg_id",
    "process_group",
    "collective_seq_id",
    "p2p_seq_id",
    "op_id",
    "profiling_name",
    "time_created_ns",
    "input_sizes",
    "input_dtypes",
    "output_sizes",
    "output_dtypes",
    "state",
    "time_discovered_started_ns",
    "time_discovered_completed_ns",
    "retired",
    "timeout_ms",
    "is_p2p",
)
"""The entry fields every 2.x writer since the fields' introduction writes; one missing is a counted
warning. ``duration_ms`` is written only with timing on; ``thread_name``, ``thread_id`` and
``frames`` are read or known without being required."""
_KNOWN_ENTRY = frozenset({*_ENTRY_FIELDS, "duration_ms", "thread_name", "thread_id", "frames"})
_STATUS_KEYS = ("last_enqueued_collective", "last_started_collective", "last_completed_collective")
_STATUS_COLUMNS = ("last_enqueued", "last_started", "last_completed")
_RANKS_TEXT = re.compile(r"^\s*\[\s*(\d+(?:\s*,\s*\d+)*)?\s*,?\s*\]\s*$")
_P2P_NAME = re.compile(r"^(send|recv)\s+(\d+)\s*(->|<-)\s*(\d+)$")


class RefusedClassError(TraceFormatError):
    """A pickle that asks for a class or a persistent object: a dump holds plain data only."""


class _DataUnpickler(pickle.Unpickler):
    """An unpickler that builds plain data only: dicts, lists, tuples, strings, numbers, None, bools.

    Every class lookup (``GLOBAL``, ``STACK_GLOBAL``, the extension registry) goes through
    :meth:`find_class`, which refuses it, so no callable ever reaches ``REDUCE``, ``BUILD`` or
    ``NEWOBJ``: nothing a pickle names can run.
    """

    def find_class(self, module: str, name: str) -> Any:
        """Refuse every class."""
        raise _Refused(f"the class {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        """Refuse every persistent object."""
        raise _Refused("a persistent object")


class _Refused(Exception):
    """Raised inside the unpickler; carries what the pickle asked for."""


def load_dump_object(data: bytes, *, source: str) -> Any:
    """Return the plain data of a dump's bytes: pickle (classes refused) or JSON.

    Raises
    ------
    RefusedClassError
        A pickle asking for a class or a persistent object (nothing it names was run).
    TraceFormatError
        Bytes that are neither a pickle nor JSON, or are damaged.
    """
    if len(data) > MAX_DUMP_BYTES:
        msg = (
            f"{source}: {len(data):,} bytes, more than a Flight Recorder dump holds "
            f"(MAX_DUMP_BYTES, {MAX_DUMP_BYTES // 1024**2} MiB); not a dump torch writes"
        )
        raise TraceFormatError(msg)
    if data[:1] == b"\x80":
        return _unpickle(data, source)
    import msgspec

    try:
        return msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        msg = f"{source}: not a Flight Recorder dump: the JSON does not parse ({exc}); re-copy the dump"
        raise TraceFormatError(msg) from None


def _unpickle(data: bytes, source: str) -> Any:
    """Unpickle plain data only; every failure is a :class:`TraceFormatError` naming the file."""
    try:
        return _DataUnpickler(io.BytesIO(data)).load()
    except _Refused as exc:
        msg = (
            f"{source}: the pickle asks for {exc}; a Flight Recorder dump holds plain data only, so it "
            "was refused and nothing in it was run: pass the dumps torch wrote"
        )
        raise RefusedClassError(msg) from None
    except RecursionError:
        msg = f"{source}: the pickle is nested too deep; not a Flight Recorder dump"
        raise TraceFormatError(msg) from None
    except Exception as exc:  # any failure of the unpickler is damaged input
        what = f"{type(exc).__name__}: {exc}"
        msg = f"{source}: not a readable Flight Recorder dump: the pickle is damaged ({what})"
        raise TraceFormatError(msg) from None


@dataclass(kw_only=True)
class DumpResult:
    """The frames of one dump and what it says about itself.

    Attributes
    ----------
    entries, status, groups
        Frames of :data:`FLIGHT_ENTRIES_SCHEMA`, :data:`FLIGHT_STATUS_SCHEMA` and
        :data:`FLIGHT_GROUPS_SCHEMA`; ``rank`` is null (the loader fills it in).
    version
        The dump's ``version`` (``"2.9"``), or None when it has none.
    comm_lib_version
        ``comm_lib_version`` (``nccl_version`` before 2.10): the library's version, or None.
    encoding
        ``pickle`` or ``json``.
    rank
        A ``rank`` the dump states at its top level (torch's writer states none), or None.
    warnings
        One line per kind of oddity, with its count.
    """

    entries: pl.DataFrame
    status: pl.DataFrame
    groups: pl.DataFrame
    version: str | None
    comm_lib_version: str | None
    encoding: str
    rank: int | None = None
    warnings: list[str] = field(default_factory=list)


class _Counts:
    """Counted oddities of one dump, worded once each at the end."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.counts: Counter[str] = Counter()

    def add(self, what: str, n: int = 1) -> None:
        self.counts[what] += n

    def lines(self) -> list[str]:
        return [f"{self.source}: {what} ({n:,})" for what, n in self.counts.items()]


def _int(value: Any) -> int | None:
    """Return an integer within Int64 (a JSON string of digits too: torch's JSON pg_status); else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and re.fullmatch(r"-?\d{1,19}", value.strip()):
        value = int(value)
    if isinstance(value, int) and -_INT64_MAX - 1 <= value <= _INT64_MAX:
        return value
    return None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _bool(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def parse_group_ranks(value: Any) -> list[int] | None:
    """Return a group's member ranks from ``pg_config``: a list of ints, or the text torch writes.

    torch writes the list as text (``"[0, 1, 2]"``, ``ranks_str``); both are read, strictly: anything
    else (a truncated list, negative numbers, ``"[]"``) is None.

    Examples
    --------
    >>> parse_group_ranks("[0, 2]"), parse_group_ranks([1, 3]), parse_group_ranks("[0, 1, ...")
    ([0, 2], [1, 3], None)
    """
    if isinstance(value, str):
        match = _RANKS_TEXT.match(value)
        if match is None or match.group(1) is None:
            return None
        ranks = [int(part) for part in match.group(1).split(",")]
    elif isinstance(value, list | tuple):
        parsed = [_int(v) for v in value]
        if not parsed or any(v is None for v in parsed):
            return None
        ranks = [v for v in parsed if v is not None]
    else:
        return None
    if any(r < 0 or r > 2**31 - 1 for r in ranks):
        return None
    return ranks


def split_profiling_name(name: str | None) -> tuple[str | None, int | None, int | None]:
    """Return ``(collective, src, dst)`` of a profiling name; src and dst are group ranks of p2p ops.

    Examples
    --------
    >>> split_profiling_name("nccl:send 0->3"), split_profiling_name("nccl:recv 3<-0")
    (('send', 0, 3), ('recv', 0, 3))
    >>> split_profiling_name("nccl:_all_gather_base")
    ('all_gather', None, None)
    """
    if not name:
        return None, None, None
    _, _, op = name.partition(":") if ":" in name else ("", "", name)
    match = _P2P_NAME.match(op.strip())
    if match is None:
        return normalise_collective(name.split(" ", 1)[0]), None, None
    kind, a, arrow, b = match.groups()
    src, dst = (int(a), int(b)) if arrow == "->" else (int(b), int(a))
    if src > 2**31 - 1 or dst > 2**31 - 1:
        return kind, None, None
    return kind, src, dst


def _sizes(value: Any) -> list[list[int]] | None:
    """Return a list of shapes (lists of non-negative ints), or None."""
    if not isinstance(value, list | tuple):
        return None
    out: list[list[int]] = []
    for shape in value:
        if not isinstance(shape, list | tuple):
            return None
        dims = [_int(d) for d in shape]
        if any(d is None or d < 0 for d in dims):
            return None
        out.append([d for d in dims if d is not None])
    return out


def _dtypes(value: Any) -> list[str] | None:
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        return None
    return list(value)


def _elements(sizes: list[list[int]] | None) -> int | None:
    """Elements of all shapes together; None past Int64."""
    if sizes is None:
        return None
    total = 0
    for shape in sizes:
        n = 1
        for d in shape:
            n *= d
        total += n
    return total if total <= _INT64_MAX else None


def _bytes(sizes: list[list[int]] | None, dtypes: list[str] | None) -> int | None:
    """Bytes of all tensors: each shape's elements × its dtype's size; None if a dtype is unknown."""
    if sizes is None or dtypes is None or len(sizes) != len(dtypes):
        return None
    total = 0
    for shape, dtype in zip(sizes, dtypes, strict=True):
        size = dtype_size(dtype)
        if size is None:
            return None
        total += (_elements([shape]) or 0) * size
    return total if total <= _INT64_MAX else None


def parse_flight_recorder(data: bytes, *, source: str) -> DumpResult:
    """Parse one Flight Recorder dump (pickle or JSON, version 2.x) into its frames.

    Parameters
    ----------
    data
        The dump's bytes (decompressed).
    source
        The file name used in messages.

    Raises
    ------
    RefusedClassError
        A pickle asking for a class (refused; nothing run).
    TraceFormatError
        Not a dump: damaged, not a dict at the top, a version other than 2.x.
    """
    encoding = "pickle" if data[:1] == b"\x80" else "json"
    dump = load_dump_object(data, source=source)
    if not isinstance(dump, dict):
        msg = f"{source}: not a Flight Recorder dump: its top level is a {type(dump).__name__}, not a dict"
        raise TraceFormatError(msg)
    counts = _Counts(source)
    version = _version(dump.get("version"), source, counts)
    unknown = sorted(str(k) for k in dump if k not in _KNOWN_TOP and k != "rank")
    for key in unknown:
        counts.add(f"ignored the unknown top-level field {key!r}")
    for key in ("entries", "pg_config", "pg_status"):
        # torch's JSON writer leaves "entries" out when there are none (dump_json)
        if key not in dump and not (key == "entries" and encoding == "json"):
            counts.add(f"no {key!r} in the dump (read as empty)")
    entries = _entries_frame(dump.get("entries", []), counts)
    groups = _groups_frame(dump.get("pg_config", {}), counts)
    status = _status_frame(dump.get("pg_status", {}), entries, groups, counts)
    lib = _text(dump.get("comm_lib_version")) or _text(dump.get("nccl_version")) or None
    rank = _int(dump.get("rank"))
    if "rank" in dump and (rank is None or rank < 0 or rank > 2**31 - 1):
        counts.add("ignored a top-level 'rank' that is not a rank")
        rank = None
    return DumpResult(
        entries=entries,
        status=status,
        groups=groups,
        version=version,
        comm_lib_version=lib,
        encoding=encoding,
        rank=rank,
        warnings=counts.lines(),
    )


def _version(value: Any, source: str, counts: _Counts) -> str | None:
    """Return the dump's version text; a major version other than 2 is an error."""
    if value is None:
        counts.add("no 'version' in the dump (read as a 2.x dump)")
        return None
    text = str(value) if isinstance(value, str | int | float) and not isinstance(value, bool) else None
    match = re.fullmatch(r"(\d+)\.(\d+)", text or "")
    if match is None:
        msg = f"{source}: Flight Recorder dump version {value!r} is not MAJOR.MINOR; timeline reads 2.x"
        raise TraceFormatError(msg)
    if match.group(1) != "2":
        msg = (
            f"{source}: Flight Recorder dump version {text}; timeline reads versions 2.x "
            "(torch 2.3 and later): dump with such a torch"
        )
        raise TraceFormatError(msg)
    return text


def _entries_frame(raw: Any, counts: _Counts) -> pl.DataFrame:
    """Return the entries as a frame of :data:`FLIGHT_ENTRIES_SCHEMA` (rank null)."""
    if not isinstance(raw, list | tuple):
        counts.add("'entries' is not a list (read as empty)")
        raw = []
    columns: dict[str, list[Any]] = {name: [] for name in FLIGHT_ENTRIES_SCHEMA.names()}
    for entry in raw:
        if not isinstance(entry, dict):
            counts.add("dropped entries that are not dicts")
            continue
        row = _entry_row(entry, counts)
        if row is None:
            continue
        for name, values in columns.items():
            values.append(row.get(name))
    return pl.DataFrame(columns, schema=FLIGHT_ENTRIES_SCHEMA)


def _field(
    entry: Mapping[str, Any], name: str, read: Callable[[Any], Any], what: str, counts: _Counts
) -> Any:
    """Read one field: missing and wrong-typed values are null, each kind counted."""
    if name not in entry:
        if name in _ENTRY_FIELDS:
            counts.add(f"entries without {name} (read as null)")
        return None
    value = entry[name]
    if value is None:
        return None
    out = read(value)
    if out is None:
        counts.add(f"entries whose {name} is not {what} (read as null)")
    return out


def _pg_name(value: Any) -> tuple[str | None, str | None] | None:
    """``process_group``: (name, description), a tuple in pickles and a list in JSON."""
    if isinstance(value, list | tuple) and len(value) == 2 and all(isinstance(v, str) for v in value):
        return value[0], value[1]
    return None


def _entry_row(entry: Mapping[str, Any], counts: _Counts) -> dict[str, Any] | None:
    """One entry as a row; None (counted) when it names no process group."""
    for key in entry:
        if key not in _KNOWN_ENTRY:
            counts.add(f"ignored the unknown entry field {str(key)!r}")
    pg = _field(entry, "process_group", _pg_name, "a (name, description) pair", counts)
    pg_id = _field(entry, "pg_id", _int, "an integer", counts)
    if pg is None and pg_id is None:
        counts.add("dropped entries that name no process group (no process_group, no pg_id)")
        return None
    name = _field(entry, "profiling_name", _text, "text", counts)
    collective, src, dst = split_profiling_name(name)
    is_p2p = _field(entry, "is_p2p", _bool, "true or false", counts)
    if is_p2p is None:
        is_p2p = collective in {"send", "recv"}
    row: dict[str, Any] = {
        "pg_id": pg_id,
        "pg_name": None if pg is None else pg[0],
        "pg_desc": None if pg is None else pg[1],
        "profiling_name": name,
        "collective": collective,
        "p2p_src": src,
        "p2p_dst": dst,
        "is_p2p": is_p2p,
        "thread_name": _field(entry, "thread_name", _text, "text", counts),
    }
    for key in ("record_id", "collective_seq_id", "p2p_seq_id", "op_id", "time_created_ns"):
        row[key] = _field(entry, key, _int, "an integer", counts)
    row["seq"] = _seq(row, name)
    for side in ("input", "output"):
        sizes = _field(entry, f"{side}_sizes", _sizes, "a list of shapes", counts)
        dtypes = _field(entry, f"{side}_dtypes", _dtypes, "a list of dtype names", counts)
        prefix = "in" if side == "input" else "out"
        row[f"{side}_sizes"], row[f"{side}_dtypes"] = sizes, dtypes
        row[f"{prefix}_elements"], row[f"{prefix}_bytes"] = _elements(sizes), _bytes(sizes, dtypes)
    row.update(_entry_times(entry, counts))
    return row


def _seq(row: Mapping[str, Any], name: str | None) -> int | None:
    """Return the number ``pg_status`` counts this operation by.

    NCCL: ``p2p_seq_id`` for point-to-point operations, ``collective_seq_id`` for the rest (the
    work's ``seq_``, ``ProcessGroupNCCL``). gloo: ``op_id`` (``ProcessGroupGloo::enqueue`` records
    its tag counter as ``collective_seq_id`` and the work's ``seq_``, which ``pg_status`` counts, as
    ``op_id``).
    """
    if name is not None and name.startswith("gloo:"):
        return row["op_id"]  # type: ignore[no-any-return]
    return row["p2p_seq_id"] if row["is_p2p"] else row["collective_seq_id"]  # type: ignore[no-any-return]


def _entry_times(entry: Mapping[str, Any], counts: _Counts) -> dict[str, Any]:
    """State, retirement, times (0 in torch's JSON means "not discovered": null), duration, timeout."""
    state = _field(entry, "state", lambda v: v if v in STATE.categories else None, "a known state", counts)
    out: dict[str, Any] = {
        "state": state,
        "retired": _field(
            entry, "retired", lambda v: v if isinstance(v, bool) else None, "true or false", counts
        ),
    }
    for key in ("time_discovered_started_ns", "time_discovered_completed_ns"):
        value = _field(entry, key, _int, "an integer", counts)
        out[key] = None if value == 0 else value
    duration = _field(entry, "duration_ms", _milliseconds_ns, "a duration in ms", counts)
    timeout = _field(entry, "timeout_ms", _milliseconds_ns, "a duration in ms", counts)
    out["duration_ns"], out["timeout_ns"] = duration, timeout
    return out


def _milliseconds_ns(value: Any) -> int | None:
    """Milliseconds (int or float, finite, non-negative) as integer nanoseconds; else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not (0 <= value < _INT64_MAX / 1e6):  # also False for NaN
        return None
    return round(value * 1_000_000)


def _groups_frame(raw: Any, counts: _Counts) -> pl.DataFrame:
    """``pg_config`` as a frame of :data:`FLIGHT_GROUPS_SCHEMA` (rank null)."""
    rows: list[dict[str, Any]] = []
    if not isinstance(raw, dict):
        counts.add("'pg_config' is not a dict (read as empty)")
        raw = {}
    for key, info in raw.items():
        if not isinstance(info, dict):
            counts.add("ignored pg_config groups that are not dicts")
            continue
        name = _text(info.get("name"))
        name = name if name else (key if isinstance(key, str) else None)
        if not name:
            counts.add(
                "ignored pg_config groups without a name (gloo's writer records none): "
                "a group's members are then the ranks whose dumps use it"
            )
            continue
        ranks = parse_group_ranks(info.get("ranks"))
        if ranks is None:
            counts.add("pg_config groups whose ranks are not a list of ranks (members read as unknown)")
        desc = _text(info.get("desc"))
        rows.append({"rank": None, "pg_name": name, "pg_desc": desc, "group_ranks": ranks})
    return pl.DataFrame(rows, schema=FLIGHT_GROUPS_SCHEMA)


def _status_frame(raw: Any, entries: pl.DataFrame, groups: pl.DataFrame, counts: _Counts) -> pl.DataFrame:
    """``pg_status`` as a frame of :data:`FLIGHT_STATUS_SCHEMA`, each group named (see :func:`_names`)."""
    if not isinstance(raw, dict):
        counts.add("'pg_status' is not a dict (read as empty)")
        raw = {}
    rows: list[dict[str, Any]] = []
    for key, info in raw.items():
        pg_id = _int(key)
        if pg_id is None or not isinstance(info, dict):
            counts.add("ignored pg_status groups whose id is not an integer or whose status is not a dict")
            continue
        row: dict[str, Any] = {"rank": None, "pg_id": pg_id}
        for status_key, column in zip(
            _STATUS_KEYS, ("last_enqueued", "last_started", "last_completed"), strict=True
        ):
            value = _int(info.get(status_key))
            if status_key not in info or (info.get(status_key) is not None and value is None):
                counts.add(f"pg_status groups without an integer {status_key} (read as null)")
            row[column] = None if value is None or value < 0 else value
        rows.append(row)
    named = _names([r["pg_id"] for r in rows], entries, groups, counts)
    for row in rows:
        row["pg_name"], row["named_by"] = named.get(row["pg_id"], (None, None))
    return pl.DataFrame(rows, schema=FLIGHT_STATUS_SCHEMA)


def _names(
    pg_ids: list[int], entries: pl.DataFrame, groups: pl.DataFrame, counts: _Counts
) -> dict[int, tuple[str, str]]:
    """Name each ``pg_status`` group (keyed by the rank-local ``pg_id``, not by name).

    An entry of the group says its name (``pg_id`` and ``process_group`` together): ``entries``.
    A group no entry names is named by creation order when that order is known: torch numbers a
    rank's groups (``pg_id``) and the job's groups (default names ``"0"``, ``"1"``… from
    ``_world.group_count``) both in the order they are created, so with integer names and as many
    groups in ``pg_config`` as in ``pg_status``, the n-th ``pg_id`` is the n-th name; the pairing is
    used only where it agrees with every pair the entries give: ``creation_order``. Else the group
    stays unnamed (counted).
    """
    pairs = entries.filter(pl.col("pg_id").is_not_null() & pl.col("pg_name").is_not_null())
    known: dict[int, str] = dict(pairs.select("pg_id", "pg_name").unique().iter_rows())
    out = {pg_id: (name, "entries") for pg_id, name in known.items()}
    missing = [pg_id for pg_id in pg_ids if pg_id not in known]
    if not missing:
        return out
    names = groups.get_column("pg_name").unique().to_list()
    if len(names) == len(pg_ids) and all(re.fullmatch(r"\d{1,18}", n) for n in names):
        order = dict(zip(sorted(pg_ids), sorted(names, key=int), strict=True))
        if all(order[pg_id] == name for pg_id, name in known.items() if pg_id in order):
            out.update({pg_id: (order[pg_id], "creation_order") for pg_id in missing})
            return out
    counts.add(
        "pg_status groups that no entry names and whose name cannot be told (progress left out)", len(missing)
    )
    return out
