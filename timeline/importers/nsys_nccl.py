"""NCCL's NVTX ranges in an Nsight Systems export: payloads, ranks, communicators, collective values.

NCCL (2.19+) marks each API call with an NVTX push/pop range in its own domain (``ncclAllReduce``,
``ncclSend``, ``ncclGroupEnd``, ``ncclCommInitRank``…) carrying a binary payload described by a
schema it registers (``NVTX_PAYLOAD_SCHEMAS`` / ``NVTX_PAYLOAD_SCHEMA_ENTRIES`` in the export):
communicator id, message size in bytes, peer, root, and for communicator creation the number of
ranks, the rank and the CUDA device. The schema ids differ between NCCL versions, so entries are
read by their names (``NCCL communicator ID``, ``Message size [bytes]``, ``Peer rank``, ``Root``,
``No. of ranks``, ``Rank``, ``CUDA device``).

The export keeps a range's payload in ``NVTX_EVENTS.binaryData`` when exported with
``--include-blobs=true``: a 32-byte header of four little-endian unsigned 64-bit integers (domain
id, schema id, payload size, offset of the payload in the blob), then the payload. This layout is
the one GindaChen/nsys-ai reads (``nccl_communicator.py``); the NVTX payload entry types and their
sizes are those of NVTX's ``nvToolsExtPayload.h``. A blob that does not fit it is counted and left
out, never guessed. The blobs are decoded in polars, one pass per schema (:func:`decode_payloads`).

Gives :func:`nccl_calls` (the calls and their decoded values), :func:`stated_ranks` (rank and world
size per process and device, from communicator creation), :func:`launch_values` (the collective
values of each communication kernel's launch) and :func:`communicator_groups`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import polars as pl

from timeline.importers.nsys_db import NsysDatabase, int_column

__all__ = [
    "API_COLLECTIVES",
    "PayloadEntry",
    "communicator_groups",
    "decode_payload",
    "decode_payloads",
    "launch_values",
    "nccl_calls",
    "payload_schemas",
    "stated_ranks",
]

# NVTX payload entry types (nvToolsExtPayload.h NVTX_PAYLOAD_ENTRY_TYPE_*): (struct format, size)
# on LP64 (long is 8 bytes): 1 char … 10 unsigned long long, 11-18 the sized integers, 19 float,
# 20 double, 22 size_t, 23 an address.
_TYPES: dict[int, str] = {
    1: "b", 2: "B", 3: "h", 4: "H", 5: "i", 6: "I", 7: "q", 8: "Q", 9: "q", 10: "Q",
    11: "b", 12: "B", 13: "h", 14: "H", 15: "i", 16: "I", 17: "q", 18: "Q",
    19: "f", 20: "d", 22: "Q", 23: "Q",
}  # fmt: skip
_HEADER = struct.Struct("<4Q")
_FIELDS = {
    "ncclcommunicatorid": "comm",
    "messagesizebytes": "bytes",
    "peerrank": "peer",
    "root": "root",
    "noofranks": "nranks",
    "rank": "comm_rank",
    "cudadevice": "cuda_device",
}
API_COLLECTIVES: dict[str, str] = {
    "ncclAllReduce": "all_reduce",
    "ncclAllGather": "all_gather",
    "ncclReduceScatter": "reduce_scatter",
    "ncclBroadcast": "broadcast",
    "ncclBcast": "broadcast",
    "ncclReduce": "reduce",
    "ncclAlltoAll": "all_to_all",
    "ncclAllToAll": "all_to_all",
    "ncclSend": "send",
    "ncclRecv": "recv",
}
"""NCCL API calls that move data, and the collective each is."""
_SAME_SIZE = ("all_reduce", "broadcast", "reduce")
CALLS_SCHEMA = pl.Schema(
    {
        "process": pl.Int64(),
        "thread": pl.Int64(),
        "start_ns": pl.Int64(),
        "api": pl.String(),
        "comm": pl.UInt64(),
        "bytes": pl.Int64(),
        "peer": pl.Int32(),
        "root": pl.Int32(),
        "nranks": pl.Int32(),
        "comm_rank": pl.Int32(),
        "cuda_device": pl.Int32(),
    }
)
"""One row per NCCL call with a decoded payload (:func:`nccl_calls`)."""


@dataclass(frozen=True)
class PayloadEntry:
    """One entry of a payload schema: its field (see ``_FIELDS``), struct format and byte offset."""

    field: str
    fmt: str
    offset: int


def _normalised(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


def payload_schemas(db: NsysDatabase) -> dict[tuple[int, int], list[PayloadEntry]]:
    """Return the entries of each payload schema this module reads, by ``(domain id, schema id)``.

    An entry without an offset lies at the next offset aligned to its size (C struct layout).
    Entries of other names or types are skipped (their space still counted).
    """
    if not db.has("NVTX_PAYLOAD_SCHEMA_ENTRIES", "domainId", "schemaId", "idx", "type", "name", "offset"):
        return {}
    rows = db.scalar_rows(
        "SELECT DISTINCT domainId, schemaId, idx, type, name, offset FROM NVTX_PAYLOAD_SCHEMA_ENTRIES "
        "ORDER BY domainId, schemaId, idx"
    )
    schemas: dict[tuple[int, int], list[PayloadEntry]] = {}
    cursor: dict[tuple[int, int], int] = {}
    seen: set[tuple[int, int, int]] = set()
    for domain, schema, idx, kind, name, offset in rows:
        if not (isinstance(domain, int) and isinstance(schema, int) and isinstance(idx, int)):
            continue
        if (domain, schema, idx) in seen:
            continue
        seen.add((domain, schema, idx))
        fmt = _TYPES.get(kind) if isinstance(kind, int) else None
        size = struct.calcsize(fmt) if fmt else 8  # a nested schema or enum: 8 bytes at most here
        at = offset if isinstance(offset, int) else -(-cursor.get((domain, schema), 0) // size) * size
        cursor[(domain, schema)] = at + size
        field = _FIELDS.get(_normalised(str(name or "")))
        if fmt and field:
            schemas.setdefault((domain, schema), []).append(PayloadEntry(field, fmt, at))
    return schemas


_DTYPES: dict[str, pl.DataType] = {
    "b": pl.Int8(), "B": pl.UInt8(), "h": pl.Int16(), "H": pl.UInt16(), "i": pl.Int32(), "I": pl.UInt32(),
    "q": pl.Int64(), "Q": pl.UInt64(), "f": pl.Float32(), "d": pl.Float64(),
}  # fmt: skip


def _word(blob: pl.Expr, at: int | pl.Expr, fmt: str) -> pl.Expr:
    """Return the little-endian value of struct format ``fmt`` at byte ``at`` of each blob."""
    return blob.bin.slice(at, struct.calcsize(fmt)).bin.reinterpret(dtype=_DTYPES[fmt], endianness="little")


def decode_payloads(
    blobs: pl.DataFrame, schemas: dict[tuple[int, int], list[PayloadEntry]]
) -> tuple[pl.DataFrame, int]:
    """Decode the ``blob`` column (Binary) of ``blobs``: add the fields of :data:`_FIELDS`; count the misfits.

    A blob fits when it holds its 32-byte header, its schema is known, and the payload and every
    entry read lie inside it; the others are left out and counted. Vectorised: one pass per schema.
    """
    blob = pl.col("blob")
    framed = blobs.with_columns(
        _domain=_word(blob, 0, "Q"), _schema=_word(blob, 8, "Q"), _size=_word(blob, 16, "Q"),
        _offset=_word(blob, 24, "Q"), _length=blob.bin.size(),
    ).filter(pl.col("_length") >= _HEADER.size)  # fmt: skip
    out: list[pl.DataFrame] = []
    for (domain, schema), entries in schemas.items():
        mine = framed.filter(
            (pl.col("_domain") == domain)
            & (pl.col("_schema") == schema)
            & (pl.col("_offset") >= _HEADER.size)
            & (pl.col("_offset") + pl.col("_size") <= pl.col("_length"))
            & (pl.col("_size") >= max((e.offset + struct.calcsize(e.fmt) for e in entries), default=0))
        )
        at = pl.col("_offset").cast(pl.Int64)
        out.append(
            mine.select(
                pl.exclude("blob", "_domain", "_schema", "_size", "_offset", "_length"),
                *(
                    _word(blob, at + e.offset, e.fmt).cast(CALLS_SCHEMA[e.field]).alias(e.field)
                    for e in entries
                    if e.field in CALLS_SCHEMA
                ),
            )
        )
    decoded = pl.concat(out, how="diagonal_relaxed") if out else blobs.clear().drop("blob")
    return decoded, blobs.height - decoded.height


def decode_payload(blob: bytes, schemas: dict[tuple[int, int], list[PayloadEntry]]) -> dict[str, int] | None:
    """Return the fields of one ``binaryData`` blob, or None when it does not fit it (``decode_payloads``)."""
    decoded, misfits = decode_payloads(pl.DataFrame({"blob": [blob]}, schema={"blob": pl.Binary()}), schemas)
    if misfits:
        return None
    row = decoded.row(0, named=True)
    return {k: int(v) for k, v in row.items() if v is not None}


def nccl_calls(db: NsysDatabase, processes: list[int], *, warnings: list[str]) -> pl.DataFrame:
    """Return the NCCL calls of ``processes`` (global pids) whose payloads decode (:data:`CALLS_SCHEMA`).

    Ranges with a blob that does not decode are counted in one warning.
    """
    empty = pl.DataFrame(schema=CALLS_SCHEMA)
    if not processes or not db.has("NVTX_EVENTS", "binaryData", "globalTid", "start", "textId", "text"):
        return empty
    schemas = payload_schemas(db)
    listed = ",".join(str(p >> 24) for p in processes)
    blobs = db.rows(
        f"SELECT {int_column('n.globalTid')}, {int_column('n.start')}, COALESCE(n.text, s.value), "
        "CAST(n.binaryData AS BLOB) FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
        f"WHERE n.binaryData IS NOT NULL AND (n.globalTid >> 24) IN ({listed})",
        {"thread": pl.Int64(), "start_ns": pl.Int64(), "api": pl.String(), "blob": pl.Binary()},
    )
    decoded, bad = decode_payloads(blobs, schemas)
    if bad:
        warnings.append(
            f"{db.source}: ignored the payloads of {bad} NVTX ranges that do not fit their schema "
            "(NCCL's communicator, sizes and peers are not read from them)"
        )
    if decoded.height == 0:
        return empty
    decoded = decoded.with_columns(process=(pl.col("thread") // 2**24) * 2**24)
    return decoded.select(
        (pl.col(name) if name in decoded.columns else pl.lit(None)).cast(dtype).alias(name)
        for name, dtype in CALLS_SCHEMA.items()
    )


def stated_ranks(calls: pl.DataFrame) -> pl.DataFrame:
    """Return the rank and world size each process and device states when creating communicators.

    From the calls with a rank and a number of ranks (``ncclCommInitRank`` and its kin): per process
    and CUDA device, those of its largest communicator (the world's, in a job's first communicator).
    Columns ``process``, ``cuda_device``, ``stated_rank``, ``world``; a process and device whose
    largest communicators disagree is left out (no guess).
    """
    init = calls.filter(
        pl.col("comm_rank").is_not_null()
        & pl.col("nranks").is_not_null()
        & (pl.col("comm_rank") >= 0)
        & (pl.col("comm_rank") < pl.col("nranks"))
    )
    return (
        init.filter(pl.col("nranks") == pl.col("nranks").max().over("process", "cuda_device"))
        .group_by("process", "cuda_device")
        .agg(stated_rank=pl.col("comm_rank").unique(), world=pl.col("nranks").first())
        .filter(pl.col("stated_rank").list.len() == 1)
        .select("process", "cuda_device", pl.col("stated_rank").list.first(), "world")
    )


def launch_values(calls: pl.DataFrame, launches: pl.DataFrame) -> pl.DataFrame:
    """Return the NCCL values of each communication kernel's launch.

    ``launches``: ``_p`` (the kernel), ``thread`` and ``at_ns`` (its launch). A data-moving call
    (:data:`API_COLLECTIVES`) belongs to the first launch of its thread at or after its start: the
    calls of a group (``ncclGroupStart`` … ``ncclGroupEnd``) to the kernel ``ncclGroupEnd``
    launches, a lone ``ncclAllReduce`` to the kernel it launches. Returns ``_p``, ``api_collective``
    (``send_recv`` for sends and receives together), ``comm`` (when the calls name one),
    ``api_in_bytes`` (sends and collectives), ``api_out_bytes`` (receives; a collective that writes
    what it reads: its size), ``api_peer`` (when one) and ``api_root``.
    """
    data = calls.filter(pl.col("api").is_in(list(API_COLLECTIVES)) & pl.col("bytes").is_not_null())
    if data.height == 0 or launches.height == 0:
        schema: dict[str, pl.DataType] = {
            "_p": launches.schema["_p"],
            "api_collective": pl.String(),
            "comm": pl.UInt64(),
            "api_in_bytes": pl.Int64(),
            "api_out_bytes": pl.Int64(),
            "api_peer": pl.Int32(),
            "api_root": pl.Int32(),
        }
        return pl.DataFrame(schema=schema)
    kind = pl.col("api").replace_strict(API_COLLECTIVES, return_dtype=pl.String)
    owned = (
        data.with_columns(kind=kind)
        .sort("start_ns")
        .join_asof(
            launches.sort("at_ns"),
            left_on="start_ns",
            right_on="at_ns",
            by="thread",
            strategy="forward",
            check_sortedness=False,  # sorted just above; polars cannot check it per group
        )
        .filter(pl.col("_p").is_not_null())
    )
    kinds = pl.col("kind").unique()
    collective = (
        pl.when(kinds.len() == 1)
        .then(kinds.first())
        .when(kinds.is_in(["send", "recv"]).all())
        .then(pl.lit("send_recv"))
    )
    moved_out = pl.col("kind").is_in(["recv"])
    return owned.group_by("_p").agg(
        api_collective=collective,
        comm=pl.when(pl.col("comm").n_unique() == 1).then(pl.col("comm").first()),
        api_in_bytes=pl.col("bytes").filter(~moved_out).sum().cast(pl.Int64),
        api_out_bytes=pl.when(moved_out.any())
        .then(pl.col("bytes").filter(moved_out).sum())
        .when(pl.col("kind").is_in(list(_SAME_SIZE)).all())
        .then(pl.col("bytes").sum())
        .cast(pl.Int64),
        api_peer=pl.when(pl.col("peer").n_unique() == 1).then(pl.col("peer").first()),
        api_root=pl.when(pl.col("root").n_unique() == 1).then(pl.col("root").first()),
    )


def communicator_groups(calls: pl.DataFrame, members: pl.DataFrame) -> pl.DataFrame:
    """Return one row per rank and communicator it creates: the process groups of the export.

    ``members``: ``process``, ``cuda_device``, ``key`` (the rank's key). The communicator's name is
    its id in hexadecimal (NCCL hashes the unique id every member is given, so every member names
    it alike); its members are the ranks of the export that create it, complete when as many as its
    number of ranks. Columns ``key``, ``pg_name``, ``pg_size``, ``member_keys`` (List[Int64]).
    """
    created = calls.filter(pl.col("comm").is_not_null() & pl.col("nranks").is_not_null())
    joined = created.join(members, on=["process", "cuda_device"], how="inner")
    per_comm = joined.group_by("comm").agg(
        member_keys=pl.col("key").unique().sort(), pg_size=pl.col("nranks").max()
    )
    return (
        joined.select("key", "comm")
        .unique()
        .join(per_comm, on="comm")
        .select(
            "key",
            pg_name=pl.format(
                "0x{}", pl.col("comm").map_elements(lambda c: f"{c:016x}", return_dtype=pl.String)
            ),
            pg_size="pg_size",
            member_keys="member_keys",
        )
        .sort("key", "pg_name")
    )
