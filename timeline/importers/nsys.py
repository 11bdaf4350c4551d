"""Nsight Systems SQLite exports (``nsys export --type sqlite``) → the canonical events frame.

Takes the path of an export (:mod:`timeline.importers.nsys_db` opens it read-only and immutable)
and gives a :class:`~timeline.importers.result.FileResult` holding every rank of the file: one rank
per process and CUDA device that ran kernels (:class:`~timeline.importers.result.HeldRank`; the
loader resolves their numbers, :func:`timeline.inputs.resolve_held_ranks`). What maps to what
(``docs/nsys.md``):

- ``CUPTI_ACTIVITY_KIND_KERNEL`` → kernels: ``communication`` when the name matches the
  classification rules (``ncclDevKernel_*``, ``ncclKernel_*``, RCCL…), else ``compute``; ``pid`` the
  device and ``tid`` the stream, as PyTorch's profiler writes them;
- ``CUPTI_ACTIVITY_KIND_MEMCPY`` / ``_MEMSET`` / ``_SYNCHRONIZATION`` → ``memcpy``, ``memset``,
  ``sync`` on their device and stream;
- ``CUPTI_ACTIVITY_KIND_RUNTIME`` → ``runtime`` (``cudaLaunchKernel``; the ``_v7000`` suffix of
  the API version dropped), linked to the device activities by ``correlation`` within the process;
- ``NVTX_EVENTS`` ranges → ``cpu_op`` for PyTorch's operators (``emit_nvtx``: name and ``op_id``,
  which becomes ``external_id`` here and on the device activities they launched) and NCCL's API
  calls; the iterations (:func:`timeline.importers.nsys_ranges.iteration_names`) → ``annotation``
  ``ProfilerStep#N``; other ranges → ``annotation``;
- NCCL's payloads (:mod:`timeline.importers.nsys_nccl`) → the collective, bytes, communicator
  (``pg_name``, the process group), peer within it, and the ranks; PyTorch's ``nccl:<op>`` range
  around a launch names the collective (``all_to_all`` for SendRecv kernels).

Times are the export's integer nanoseconds, moved onto the Unix epoch when the export says where its
session started on it (``TARGET_INFO_SESSION_START_TIME``: ``utcEpochNs`` at ``systemClockNs``,
schema 3.2x), else kept on the session's clock (``relative``). Events ending before they start,
NVTX ranges never closed, and events far outside the capture window are dropped with counted
warnings.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from timeline.errors import TraceContentError
from timeline.importers.nsys_db import (
    NEWEST_TESTED_SCHEMA,
    OLDEST_TESTED_SCHEMA,
    NsysDatabase,
    int_column,
    open_nsys,
)
from timeline.importers.nsys_events import NsysExport, build_events, os_pid
from timeline.importers.nsys_nccl import communicator_groups, nccl_calls, stated_ranks
from timeline.importers.result import Clock, FileResult, HeldRank, ImportOptions
from timeline.schema import EVENTS_SCHEMA, PROCESS_GROUPS_SCHEMA, validate

__all__ = ["ENVIRONMENT_RANKS", "parse_nsys"]

# CUPTI's enums are stable across versions (cupti_activity.h): CUpti_ActivityMemcpyKind and
# CUpti_ActivitySynchronizationType, named as PyTorch's profiler names these activities.
_MEMCPY_KINDS = {
    1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD", 9: "HtoH",
    10: "PtoP", 11: "HtoD (unified)", 12: "DtoH (unified)", 13: "DtoD (unified)",
}  # fmt: skip
_SYNC_KINDS = {
    0: "Unknown Sync",
    1: "Event Sync",
    2: "Stream Wait Event",
    3: "Stream Sync",
    4: "Context Sync",
}
# ENUM_NSYS_EVENT_TYPE: the NVTX ranges (push/pop and start/end, NVTX 2's "Nvtxt" alike) and a
# domain's creation; the ids where the export has no enum table.
_RANGE_TYPES = ("NvtxPushPopRange", "NvtxStartEndRange", "NvtxtPushPopRange", "NvtxtStartEndRange")
_RANGE_IDS = (59, 60, 70, 71)
_DOMAIN_CREATE = ("NvtxDomainCreate", 75)
_RUNTIME_VERSION = r"_v\d+$"
_SEC = 1_000_000_000
ENVIRONMENT_RANKS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID")
"""Environment variables that state a process's rank, in order (torchrun, Open MPI, PMIx, PMI, Slurm)."""
_ENVIRONMENT_WORLDS = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS")


def parse_nsys(path: Path, *, source: str, options: ImportOptions | None = None) -> FileResult:
    """Parse one Nsight Systems SQLite export into the canonical events of every rank it holds.

    Parameters
    ----------
    path
        The ``.sqlite`` file (opened read-only and immutable: nothing is written beside it).
    source
        The file name used in messages.
    options
        Classification rules, ``overlap_only``, ``iteration_range``.

    Returns
    -------
    FileResult
        ``format="nsys"``; ``held_ranks`` one per process and device that ran kernels, the events'
        ``rank`` column holding each one's ``key``; the process groups of NCCL's communicators.

    Raises
    ------
    TraceFormatError
        A damaged or truncated file, a SQLite database that is not an export.
    TraceContentError
        An export without CUDA kernels.
    """
    options = options or ImportOptions()
    warnings: list[str] = []
    with open_nsys(path, source=source) as db:
        export = _read_export(db, options, warnings)
    events, skipped = build_events(export, options, source, warnings)
    held = _held_ranks(export, events, skipped)
    groups = _groups(export)
    communication = events.filter(pl.col("kind") == "communication").height > 0
    backend = "nccl" if export.calls.height or communication else None
    return FileResult(
        events=validate(events, EVENTS_SCHEMA, what=source),
        format="nsys",
        rank=None,
        claims_rank=True,
        world_size=_world(held),
        backend=backend,
        host=held[0].host if held and len({h.host for h in held}) == 1 else None,
        clock=export.clock,
        warnings=warnings,
        groups=groups,
        skipped=sum(skipped.values()),
        held_ranks=held,
    )


def _read_export(db: NsysDatabase, options: ImportOptions, warnings: list[str]) -> NsysExport:
    """Read what the analysis needs: the needed columns of the needed tables, of the ranks to load.

    The ranks' table, the clock, the capture window, NCCL's calls and the counts of what is dropped
    are the whole file's, whichever ranks are loaded (:attr:`ImportOptions.held_keys`): every part
    of a file read rank by rank resolves the ranks and warns alike.
    """
    version = _check_version(db, warnings)
    ranks = _rank_table(db, _hosts(db))
    if ranks.height == 0:
        msg = (
            f"{db.source}: an Nsight Systems export without CUDA kernels (CUPTI_ACTIVITY_KIND_KERNEL is "
            "missing or empty): nothing to analyse; profile with nsys profile --trace=cuda,nvtx"
        )
        raise TraceContentError(msg)
    everyone = ranks.get_column("process").unique().sort().to_list()
    held = ranks if options.held_keys is None else ranks.filter(pl.col("key").is_in(list(options.held_keys)))
    processes = held.get_column("process").unique().sort().to_list()
    names = _string_table(db)
    shift, clock = _clock(db)
    window = _analysis_window(db)
    if options.held_keys is None or 0 in options.held_keys:
        # what the whole file drops, said by its first part only: a rank-by-rank reduction keeps a
        # warning several parts give once, so the others need not scan every table again for it
        warnings.extend(dropped_warnings(db, everyone, window))
        _note_no_communication(db, names, options, warnings)
    return NsysExport(
        device=_device_activities(db, names, processes),
        runtime=_runtime(db, names, processes),
        ranges=_nvtx_ranges(db, names, processes),
        calls=nccl_calls(db, everyone, warnings=warnings),
        ranks=ranks,
        held=held.get_column("key").to_list(),
        version=version,
        clock=clock,
        shift=shift,
        window=window,
        environment=_environment(db),
    )


def _check_version(db: NsysDatabase, warnings: list[str]) -> str | None:
    """Return the export's schema version; warn when it is outside the tested ones."""
    text, version = db.schema_version()
    if version is not None and version > NEWEST_TESTED_SCHEMA:
        newest = ".".join(map(str, NEWEST_TESTED_SCHEMA))
        warnings.append(
            f"{db.source}: export schema {text} is newer than the newest tested ({newest}, Nsight Systems "
            "2026.2): tables and columns are read by name, but check the figures"
        )
    elif version is not None and version < OLDEST_TESTED_SCHEMA:
        oldest = ".".join(map(str, OLDEST_TESTED_SCHEMA))
        warnings.append(
            f"{db.source}: export schema {text} is older than the oldest tested ({oldest}, Nsight Systems "
            "2024.6): tables and columns are read by name, but check the figures"
        )
    return text


def _string_table(db: NsysDatabase) -> pl.DataFrame:
    """Return ``StringIds`` as ``id``, ``value``."""
    return db.rows(
        f"SELECT {int_column('id')}, value FROM StringIds", {"id": pl.Int64(), "value": pl.String()}
    )


def _named(frame: pl.DataFrame, names: pl.DataFrame, column: str, alias: str) -> pl.DataFrame:
    """Replace the string id ``column`` with its text, named ``alias``."""
    return frame.join(
        names.rename({"id": column, "value": alias}), on=column, how="left", maintain_order="left"
    ).drop(column)


_DEVICE_SCHEMA = {
    "start_ns": pl.Int64(),
    "end_ns": pl.Int64(),
    "device": pl.Int32(),
    "stream": pl.Int64(),
    "correlation": pl.Int64(),
    "process": pl.Int64(),
}


def _device_activities(db: NsysDatabase, names: pl.DataFrame, processes: list[int]) -> pl.DataFrame:
    """Return the kernels, copies, sets and synchronisations of ``processes`` (device columns, name, cat)."""
    frames = []
    base = _ints("start", "end", "deviceId", "streamId", "correlationId", "globalPid")
    kernel = "CUPTI_ACTIVITY_KIND_KERNEL"
    if db.has(kernel, "start", "end", "deviceId", "streamId", "correlationId", "globalPid"):
        name_id = next((c for c in ("demangledName", "shortName", "mangledName") if db.has(kernel, c)), None)
        if name_id is not None:
            rows = db.rows(
                f"SELECT {base}, {int_column(name_id)} FROM {kernel} WHERE {_of_processes(processes)}",
                {**_DEVICE_SCHEMA, "_name": pl.Int64()},
            )
            frames.append(_named(rows, names, "_name", "name").with_columns(cat=pl.lit("kernel")))
    for table, cat, kind_column, kinds, prefix in (
        ("CUPTI_ACTIVITY_KIND_MEMCPY", "gpu_memcpy", "copyKind", _MEMCPY_KINDS, "Memcpy "),
        ("CUPTI_ACTIVITY_KIND_MEMSET", "gpu_memset", None, None, "Memset"),
        ("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "cuda_sync", "syncType", _SYNC_KINDS, ""),
    ):
        if not db.has(table, "start", "end", "deviceId", "streamId", "correlationId", "globalPid"):
            continue
        if kind_column is not None and kinds is not None and db.has(table, kind_column):
            rows = db.rows(
                f"SELECT {base}, {int_column(kind_column)} FROM {table} WHERE {_of_processes(processes)}",
                {**_DEVICE_SCHEMA, "_k": pl.Int64()},
            )
            label = pl.col("_k").replace_strict(kinds, default="Unknown", return_dtype=pl.String)
            rows = rows.with_columns(name=pl.lit(prefix) + label).drop("_k")
        else:
            sql = f"SELECT {base} FROM {table} WHERE {_of_processes(processes)}"
            rows = db.rows(sql, _DEVICE_SCHEMA).with_columns(name=pl.lit(prefix.strip()))
        frames.append(rows.with_columns(cat=pl.lit(cat)))
    if not frames:
        return pl.DataFrame(schema={**_DEVICE_SCHEMA, "name": pl.String(), "cat": pl.String()})
    return pl.concat(frames, how="vertical")


def _hosts(db: NsysDatabase) -> dict[int, str]:
    """Return the host name of each virtual machine id (``globalVid >> 48``) of the export."""
    hosts: dict[int, str] = {}
    if db.has("TARGET_INFO_SYSTEM_ENV", "globalVid", "name", "value"):
        for vid, value in db.scalar_rows(
            "SELECT globalVid, value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'Hostname'"
        ):
            if isinstance(vid, int) and isinstance(value, str) and value:
                hosts.setdefault(vid >> 48, value)
    if not hosts:
        host = db.export_metadata().get("EXPORT_HOST")
        if host:
            hosts[-1] = host  # the exporting machine: a guess only when nothing else names one
    return hosts


def _rank_table(db: NsysDatabase, hosts: dict[int, str]) -> pl.DataFrame:
    """Return one row per process and device that ran kernels (``process``, ``device``, ``host``, ``key``…).

    ``key`` numbers them 0, 1, … in (host, device, process) order, over the whole file.
    """
    kernel = "CUPTI_ACTIVITY_KIND_KERNEL"
    schema = {"process": pl.Int64(), "device": pl.Int32()}
    if not db.has(kernel, "globalPid", "deviceId"):
        return pl.DataFrame(schema={**schema, "pid": pl.Int64(), "host": pl.String(), "key": pl.Int32()})
    pairs = db.rows(f"SELECT DISTINCT {_ints('globalPid', 'deviceId')} FROM {kernel}", schema).with_columns(
        pid=os_pid(pl.col("process")), vm=pl.col("process") // 2**48
    )
    default = hosts.get(-1)
    host = pl.col("vm").replace_strict(
        {k: v for k, v in hosts.items() if k >= 0}, default=default, return_dtype=pl.String
    )
    return (
        pairs.with_columns(host=host)
        .sort(pl.col("host").fill_null(""), "device", "process")
        .with_columns(key=pl.int_range(pl.len(), dtype=pl.Int32))
        .join(_process_names(db), on="process", how="left", maintain_order="left")
        .drop("vm")
    )


def _process_names(db: NsysDatabase) -> pl.DataFrame:
    """Return ``process`` (global pid) and ``process_name`` from ``PROCESSES``."""
    schema = {"process": pl.Int64(), "process_name": pl.String()}
    if not db.has("PROCESSES", "globalPid", "name"):
        return pl.DataFrame(schema=schema)
    sql = f"SELECT {int_column('globalPid')}, name FROM PROCESSES"
    return db.rows(sql, schema).unique("process", keep="first")


def _ints(*columns: str) -> str:
    """Return the SQL selecting ``columns`` as integers (:func:`~timeline.importers.nsys_db.int_column`)."""
    return ", ".join(map(int_column, columns))


def _of_processes(processes: list[int]) -> str:
    """Return the SQL condition on ``globalPid`` that keeps the activities of ``processes``."""
    return f"globalPid IN ({','.join(map(str, processes)) or 'NULL'})"


def _in_processes(processes: list[int]) -> str:
    """Return the SQL condition on ``globalTid`` that keeps the threads of ``processes``."""
    return f"(globalTid >> 24) IN ({','.join(str(p >> 24) for p in processes) or 'NULL'})"


def _runtime(db: NsysDatabase, names: pl.DataFrame, processes: list[int]) -> pl.DataFrame:
    """Return the CUDA runtime and driver calls of ``processes``: times, thread, correlation, name."""
    schema = {
        "start_ns": pl.Int64(),
        "end_ns": pl.Int64(),
        "thread": pl.Int64(),
        "correlation": pl.Int64(),
        "_name": pl.Int64(),
    }
    table = "CUPTI_ACTIVITY_KIND_RUNTIME"
    if not db.has(table, "start", "end", "globalTid", "correlationId", "nameId"):
        return pl.DataFrame(schema={**schema, "name": pl.String()}).drop("_name")
    rows = db.rows(
        f"SELECT {_ints('start', 'end', 'globalTid', 'correlationId', 'nameId')} FROM {table} "
        f"WHERE {_in_processes(processes)}",
        schema,
    )
    # the API version suffix dropped from the few distinct names, not from every row
    return _named(
        rows, names.with_columns(pl.col("value").str.replace(_RUNTIME_VERSION, "")), "_name", "name"
    )


def _event_type_ids(db: NsysDatabase, wanted: tuple[str, ...], fallback: tuple[int, ...]) -> tuple[int, ...]:
    """Return the ids of NVTX event types by their names (``ENUM_NSYS_EVENT_TYPE``), else the known ids."""
    if not db.has("ENUM_NSYS_EVENT_TYPE", "id", "name"):
        return fallback
    rows = db.scalar_rows("SELECT id, name FROM ENUM_NSYS_EVENT_TYPE")
    found = tuple(i for i, name in rows if isinstance(i, int) and name in wanted)
    return found or fallback


def _nvtx_ranges(db: NsysDatabase, names: pl.DataFrame, processes: list[int]) -> pl.DataFrame:
    """Return the NVTX ranges of ``processes``: times (``end_ns`` null if never closed), thread, name, cat."""
    schema = {
        "start_ns": pl.Int64(),
        "end_ns": pl.Int64(),
        "thread": pl.Int64(),
        "text": pl.String(),
        "_name": pl.Int64(),
        "domain": pl.Int64(),
    }
    table = "NVTX_EVENTS"
    if not db.has(table, "start", "end", "eventType", "globalTid"):
        return pl.DataFrame(schema={"start_ns": pl.Int64(), "end_ns": pl.Int64(), "thread": pl.Int64(),
                                    "name": pl.String(), "cat": pl.String()})  # fmt: skip
    text = "text" if db.has(table, "text") else "NULL"
    text_id = int_column("textId") if db.has(table, "textId") else "NULL"
    domain = int_column("domainId") if db.has(table, "domainId") else "NULL"
    kinds = ",".join(map(str, _event_type_ids(db, _RANGE_TYPES, _RANGE_IDS)))
    rows = db.rows(
        f"SELECT {_ints('start', 'end', 'globalTid')}, {text}, {text_id}, {domain} FROM {table} "
        f"WHERE eventType IN ({kinds}) AND {_in_processes(processes)}",
        schema,
    )
    named = _named(rows, names, "_name", "_text").with_columns(name=pl.coalesce("text", "_text"))
    domains = _domain_names(db)
    cat = (
        pl.when(pl.col("domain").fill_null(0) == 0)
        .then(pl.lit("nvtx"))
        .otherwise(
            pl.lit("nvtx:")
            + pl.col("domain")
            .replace_strict(domains, default=None, return_dtype=pl.String)
            .fill_null(pl.col("domain").cast(pl.String))
        )
    )
    return named.select("start_ns", "end_ns", "thread", "name", cat=cat)


def _domain_names(db: NsysDatabase) -> dict[int, str]:
    """Return the NVTX domains the export names (``NvtxDomainCreate`` events), by id."""
    if not db.has("NVTX_EVENTS", "eventType", "domainId", "text"):
        return {}
    ids = _event_type_ids(db, (str(_DOMAIN_CREATE[0]),), (int(_DOMAIN_CREATE[1]),))
    rows = db.scalar_rows(
        f"SELECT domainId, text FROM NVTX_EVENTS WHERE eventType IN ({','.join(map(str, ids))}) "
        "AND text IS NOT NULL"
    )
    return {d: t for d, t in rows if isinstance(d, int) and isinstance(t, str)}


def _clock(db: NsysDatabase) -> tuple[int, Clock]:
    """Return the shift that puts the export's times on the Unix epoch, and the clock.

    Schema 3.2x records both clocks at the session's start (``utcEpochNs`` and ``systemClockNs``);
    without the second, times stay on the session's clock (``relative``).
    """
    table = "TARGET_INFO_SESSION_START_TIME"
    if db.has(table, "utcEpochNs", "systemClockNs"):
        rows = db.scalar_rows(f"SELECT utcEpochNs, systemClockNs FROM {table}")
        if len(rows) == 1 and all(isinstance(v, int) and v >= 0 for v in rows[0]):
            epoch, system = rows[0]
            return int(str(epoch)) - int(str(system)), "epoch"
    return 0, "relative"


def _analysis_window(db: NsysDatabase) -> tuple[int, int] | None:
    """Return the capture window on the events' clock (``ANALYSIS_DETAILS``), or None.

    Schema 3.2x writes its start and stop on the events' clock; 3.16 writes events from the
    session's start, so the window is ``[0, duration]`` there: the one holding the median start of
    (a thousand evenly spaced) kernels is taken, none when neither does.
    """
    kernel = "CUPTI_ACTIVITY_KIND_KERNEL"
    if not (db.has("ANALYSIS_DETAILS", "duration", "startTime", "stopTime") and db.has(kernel, "start")):
        return None
    rows = db.scalar_rows("SELECT duration, startTime, stopTime FROM ANALYSIS_DETAILS")
    if len(rows) != 1 or not all(isinstance(v, int) for v in rows[0]):
        return None
    duration, start, stop = (int(str(v)) for v in rows[0])
    last = db.scalar_rows(f"SELECT max(rowid) FROM {kernel}")[0][0]  # the rowid index: no scan
    if not isinstance(last, int):
        return None
    picked = ",".join(map(str, range(1, last + 1, max(1, last // 1000))))
    starts = sorted(
        int(v)
        for (v,) in db.scalar_rows(f"SELECT start FROM {kernel} WHERE rowid IN ({picked})")
        if isinstance(v, int)
    )
    if not starts:
        return None
    median = starts[len(starts) // 2]
    for low, high in ((start, stop), (0, duration)):
        if low <= median <= high:
            return low, high
    return None


def dropped_warnings(db: NsysDatabase, processes: list[int], window: tuple[int, int] | None) -> list[str]:
    """Return the counted warnings of what the events of ``processes`` lose, counted in SQL on the whole file.

    NVTX ranges never closed, events ending before they start, events far outside the capture
    window (more than ``max(1 s, its length)``): the rows :func:`timeline.importers.nsys_events.build_events`
    drops, counted over every rank of the file whichever ranks are loaded.
    """
    slack = max(_SEC, window[1] - window[0]) if window is not None else 0
    far = f"(start < {window[0] - slack} OR end > {window[1] + slack})" if window is not None else "0"
    tables = [
        (t, _of_processes(processes))
        for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
                  "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")
        if db.has(t, "start", "end", "deviceId", "streamId", "correlationId", "globalPid")
    ]  # fmt: skip
    if db.has("CUPTI_ACTIVITY_KIND_RUNTIME", "start", "end", "globalTid", "correlationId", "nameId"):
        tables.append(("CUPTI_ACTIVITY_KIND_RUNTIME", _in_processes(processes)))
    unclosed = backwards = outside = 0
    if db.has("NVTX_EVENTS", "start", "end", "eventType", "globalTid"):
        kinds = ",".join(map(str, _event_type_ids(db, _RANGE_TYPES, _RANGE_IDS)))
        tables.append(("NVTX_EVENTS", f"eventType IN ({kinds}) AND {_in_processes(processes)}"))
    for table, where in tables:
        sql = f"SELECT total(end IS NULL), total(end < start), total(end >= start AND {far}) FROM {table}"
        n_open, n_back, n_far = (int(float(str(n))) for n in db.scalar_rows(f"{sql} WHERE {where}")[0])
        unclosed, backwards, outside = unclosed + n_open, backwards + n_back, outside + n_far
    out = []
    if unclosed:
        out.append(f"{db.source}: dropped {unclosed} NVTX ranges never closed (no end in the capture)")
    if backwards:
        out.append(f"{db.source}: dropped {backwards} events with end < start")
    if outside:
        out.append(
            f"{db.source}: dropped {outside} events more than {slack / _SEC:.3g} s outside the capture "
            "window (ANALYSIS_DETAILS; corrupt timestamps)"
        )
    return out


def _environment(db: NsysDatabase) -> dict[str, str]:
    """Return the environment of the process nsys launched (``META_DATA_CAPTURE``), when recorded."""
    if not db.has("META_DATA_CAPTURE", "name", "value"):
        return {}
    environment: dict[str, str] = {}
    rows = db.scalar_rows("SELECT value FROM META_DATA_CAPTURE WHERE name = 'PROCESS_0:ENVIRONMENT_VARIABLE'")
    for (value,) in rows:
        if isinstance(value, str) and "=" in value:
            name, _, text = value.partition("=")
            environment[name] = text.strip().strip('"')
    return environment


def _note_no_communication(
    db: NsysDatabase, names: pl.DataFrame, options: ImportOptions, warnings: list[str]
) -> None:
    """Say so when none of the file's kernels is communication (a single-GPU profile, or other kernels)."""
    kernel = "CUPTI_ACTIVITY_KIND_KERNEL"
    name_id = next((c for c in ("demangledName", "shortName", "mangledName") if db.has(kernel, c)), None)
    if name_id is None:
        return
    ids = db.rows(f"SELECT DISTINCT {int_column(name_id)} FROM {kernel}", {"id": pl.Int64()})
    kernel_names = ids.join(names, on="id", how="left").get_column("value").drop_nulls()
    if kernel_names.str.contains(options.rules.comm_kernel_regex()).any():
        return
    count = int(str(db.scalar_rows(f"SELECT count(*) FROM {kernel}")[0][0]))
    warnings.append(
        f"{db.source}: no communication: none of its {count:,} kernels is a collective "
        "(NCCL, RCCL…; --comm-kernel adds others), so every communication figure is 0"
    )


def _held_ranks(export: NsysExport, events: pl.DataFrame, skipped: dict[int, int]) -> list[HeldRank]:
    """Return the ranks the export holds, with the rank and world size it states for each.

    NCCL's communicator creation states them per process and device; else, for an export of a
    single process and device, the launched process's environment (:data:`ENVIRONMENT_RANKS`).
    """
    stated = stated_ranks(export.calls).rename({"cuda_device": "device"})
    table = export.ranks.join(stated, on=["process", "device"], how="left", maintain_order="left")
    counts = dict(events.group_by("rank").len().iter_rows())
    env_rank, env_world, env_name = _environment_rank(export.environment)
    alone = table.height == 1
    held = []
    loaded = set(export.held)
    for row in table.sort("key").iter_rows(named=True):
        rank, world, origin = row["stated_rank"], row["world"], "NCCL communicator (NVTX)"
        if rank is None and alone and env_rank is not None:
            rank, world, origin = env_rank, env_world, f"environment {env_name}"
        key = int(row["key"])
        held.append(
            HeldRank(
                key=key,
                rank=rank,
                rank_from=origin if rank is not None else None,
                world_size=world,
                host=row["host"],
                pid=int(row["pid"]),
                device=int(row["device"]),
                events=int(counts.get(key, 0)) + skipped.get(key, 0),
                loaded=key in loaded,
            )
        )
    return held


def _environment_rank(environment: dict[str, str]) -> tuple[int | None, int | None, str | None]:
    """Return the rank and world size the environment states, and the variable that states the rank."""
    rank = name = None
    for variable in ENVIRONMENT_RANKS:
        value = environment.get(variable, "")
        if value.isdecimal() and int(value) < 2**31:
            rank, name = int(value), variable
            break
    world = None
    for variable in _ENVIRONMENT_WORLDS:
        value = environment.get(variable, "")
        if value.isdecimal() and 0 < int(value) < 2**31:
            world = int(value)
            break
    return rank, world, name


def _world(held: list[HeldRank]) -> int | None:
    """Return the world size the ranks state, when they state one and agree."""
    worlds = {h.world_size for h in held if h.world_size is not None}
    return worlds.pop() if len(worlds) == 1 else None


def _groups(export: NsysExport) -> pl.DataFrame:
    """Return each rank's process groups (NCCL communicators): ``rank`` its key, ``ranks`` the members'."""
    members = export.ranks.select("process", cuda_device="device", key=pl.col("key").cast(pl.Int64))
    rows = communicator_groups(export.calls, members)
    if rows.height == 0:
        return pl.DataFrame(schema=PROCESS_GROUPS_SCHEMA)
    complete = pl.col("member_keys").list.len() >= pl.col("pg_size")
    return rows.select(
        rank=pl.col("key").cast(pl.Int32),
        pg_name="pg_name",
        pg_desc=pl.lit(None, dtype=pl.String),
        ranks=pl.col("member_keys").cast(pl.List(pl.Int32)),
        ranks_text=pl.lit(None, dtype=pl.String),
        ranks_truncated=~complete,
        pg_size=pl.col("pg_size").cast(pl.Int32),
        backend=pl.lit("nccl"),
    )
