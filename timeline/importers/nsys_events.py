"""The canonical events of an Nsight Systems export, from the tables :mod:`timeline.importers.nsys` reads.

Takes an :class:`NsysExport` (device activities, runtime calls, NVTX ranges, NCCL calls, the ranks'
table, the clock and the capture window) and gives the events frame
(:data:`timeline.schema.EVENTS_SCHEMA`, ``rank`` holding each rank's key) with the counted warnings
of what was left out: events ending before they start, NVTX ranges never closed, events far
outside the capture window (more than ``max(1 s, its length)`` beyond it), and with
``overlap_only`` the NVTX ranges no overlap figure reads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import polars as pl

from timeline.importers.collectives import collective_from_kernel, normalise_collective
from timeline.importers.kineto import _GRADIENT_SIGNAL_REGEX  # one definition of the signals
from timeline.importers.nsys_nccl import launch_values
from timeline.importers.nsys_ranges import innermost_enclosing, iteration_names, operator_names
from timeline.importers.result import Clock, ImportOptions
from timeline.schema import EVENTS_SCHEMA, KIND, SOURCE

__all__ = ["NsysExport", "build_events", "comm_names", "os_pid", "os_tid", "process_of"]

_SEC = 1_000_000_000
_NCCL_API = r"^nccl[A-Z]"
_SOURCE = "kineto"  # the event model of a profiler timeline (GPU kernels, CPU ops): see docs/nsys.md
_NO_DATA = ("wait", "barrier")


@dataclass
class NsysExport:
    """What one export holds, read: device activities, runtime calls, NVTX ranges, NCCL calls, ranks.

    Attributes
    ----------
    device
        Kernels, copies, sets, synchronisations: ``start_ns``, ``end_ns``, ``device``, ``stream``,
        ``correlation``, ``process`` (global pid), ``name``, ``cat``.
    runtime
        ``start_ns``, ``end_ns``, ``thread`` (global tid), ``correlation``, ``name``.
    ranges
        NVTX ranges: ``start_ns``, ``end_ns`` (null if never closed), ``thread``, ``name``, ``cat``.
    calls
        NCCL's calls (:data:`timeline.importers.nsys_nccl.CALLS_SCHEMA`).
    ranks
        One row per process and device of the file that ran kernels: ``process``, ``device``,
        ``pid``, ``host``, ``key``, ``process_name``.
    held
        The keys of the ranks whose events were read (the others' events are not built).
    version
        The export schema version as written.
    clock, shift
        The clock of the events once ``shift`` is added to the export's times.
    window
        The capture window on the export's clock, or None.
    environment
        The environment of the process nsys launched.
    """

    device: pl.DataFrame
    runtime: pl.DataFrame
    ranges: pl.DataFrame
    calls: pl.DataFrame
    ranks: pl.DataFrame
    held: list[int]
    version: str | None
    clock: Clock
    shift: int
    window: tuple[int, int] | None
    environment: dict[str, str]


# Nsight Systems' serialised ids (the export's "Serialized process and thread identifiers"):
# globalTid = (vm id << 48) | (OS pid << 24) | OS tid; a process's globalPid has the OS tid bits 0.
_ID_BITS = 2**24


def process_of(global_tid: pl.Expr) -> pl.Expr:
    """Return the ``globalPid`` of a ``globalTid``: its OS thread bits cleared."""
    return (global_tid // _ID_BITS) * _ID_BITS


def os_pid(global_id: pl.Expr) -> pl.Expr:
    """Return the OS process id of a ``globalPid`` or ``globalTid``."""
    return (global_id // _ID_BITS) % _ID_BITS


def os_tid(global_tid: pl.Expr) -> pl.Expr:
    """Return the OS thread id of a ``globalTid``."""
    return global_tid % _ID_BITS


def comm_names(comm: pl.Series) -> dict[int, str]:
    """Return the process group name of each NCCL communicator id: ``0x`` and 16 hexadecimal digits."""
    return {int(c): f"0x{int(c):016x}" for c in comm.drop_nulls().unique().to_list()}


def build_events(
    export: NsysExport, options: ImportOptions, source: str, warnings: list[str]
) -> tuple[pl.DataFrame, dict[int, int]]:
    """Return the canonical events of the export (``rank`` = each rank's key) and the events skipped per key.

    Skipped: the valid NVTX ranges ``overlap_only`` leaves out (the file table counts them).
    """
    first_key = export.ranks.group_by("process").agg(_first=pl.col("key").min())
    held = pl.col("key").is_in(export.held)
    device = _keyed_device(export, first_key).filter(held)
    runtime = _keyed_runtime(export, device, first_key).filter(held)
    ranges = _keyed_ranges(export, first_key).filter(held)
    # the tables as read are not needed again: their memory goes now, not when the export does
    export.device, export.runtime, export.ranges = (
        export.device.clear(),
        export.runtime.clear(),
        export.ranges.clear(),
    )
    device, runtime, ranges = _valid(device, runtime, ranges, export.window)
    ranges = _classified_ranges(ranges, options, source, warnings)
    device = _linked_device(device, runtime, ranges, export.calls, options)
    skipped: dict[int, int] = {}
    if options.overlap_only:
        # what a profiler trace keeps (kineto._measured): steps, collective ops, CPU-side collectives,
        # the gradient-ready signals the diagnosis' what-if graph reads
        wanted = f"^record_param_comms$|{options.rules.cpu_comm_regex()}|{_GRADIENT_SIGNAL_REGEX}"
        keep = (
            pl.col("_step").is_not_null()
            | pl.col("_collective_op").is_not_null()
            | pl.col("name").str.contains(wanted).fill_null(False)
        )
        counts = ranges.filter(~keep).group_by("key").len()
        skipped = {int(k): int(n) for k, n in counts.iter_rows()}
        ranges = ranges.filter(keep)
    parts = [_device_events(device, export.shift), _runtime_events(runtime, export.shift)]
    del device, runtime
    parts.append(_range_events(ranges, export.shift))
    del ranges
    return pl.concat(parts, how="vertical"), skipped  # the loader sorts them by rank and start


def _keyed_device(export: NsysExport, first_key: pl.DataFrame) -> pl.DataFrame:
    """Give each device activity its rank's key: its process and device's, else its process's first."""
    exact = export.ranks.select("process", "device", _exact="key")
    return (
        export.device.join(exact, on=["process", "device"], how="left", maintain_order="left")
        .join(first_key, on="process", how="left", maintain_order="left")
        .with_columns(key=pl.coalesce("_exact", "_first"))
        .drop("_exact", "_first")
        .filter(pl.col("key").is_not_null())
        .with_row_index("_p")
    )


def _keyed_runtime(export: NsysExport, device: pl.DataFrame, first_key: pl.DataFrame) -> pl.DataFrame:
    """Give each runtime call its rank's key: that of the activity it launched, else its process's first."""
    runtime = export.runtime.with_columns(process=process_of(pl.col("thread")))
    if export.ranks.get_column("process").is_unique().all():  # one device per process: its key
        return (
            runtime.join(first_key, on="process", how="left", maintain_order="left")
            .rename({"_first": "key"})
            .filter(pl.col("key").is_not_null())
        )
    launched = device.select("process", "correlation", _launched="key").unique(["process", "correlation"])
    return (
        runtime.join(launched, on=["process", "correlation"], how="left", maintain_order="left")
        .join(first_key, on="process", how="left", maintain_order="left")
        .with_columns(key=pl.coalesce("_launched", "_first"))
        .drop("_launched", "_first")
        .filter(pl.col("key").is_not_null())
    )


def _keyed_ranges(export: NsysExport, first_key: pl.DataFrame) -> pl.DataFrame:
    """Give each NVTX range its process's first key (ranges run on the CPU, not on a device)."""
    return (
        export.ranges.with_columns(process=process_of(pl.col("thread")))
        .join(first_key, on="process", how="left", maintain_order="left")
        .rename({"_first": "key"})
        .filter(pl.col("key").is_not_null())
    )


def _valid(
    device: pl.DataFrame, runtime: pl.DataFrame, ranges: pl.DataFrame, window: tuple[int, int] | None
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Drop what cannot be used: open ranges, end < start, events far outside the capture window.

    Counted over the whole file, in SQL, by :func:`timeline.importers.nsys.dropped_warnings`.
    """
    ranges = ranges.filter(pl.col("end_ns").is_not_null())
    valid = pl.col("end_ns") >= pl.col("start_ns")
    if window is not None:
        low, high = window
        slack = max(_SEC, high - low)
        valid = valid & (pl.col("start_ns") >= low - slack) & (pl.col("end_ns") <= high + slack)
    return device.filter(valid), runtime.filter(valid), ranges.filter(valid)


def _classified_ranges(
    ranges: pl.DataFrame, options: ImportOptions, source: str, warnings: list[str]
) -> pl.DataFrame:
    """Name the iterations ``ProfilerStep#N`` and classify the ranges (``_kind``, ``_collective_op``)."""
    named = operator_names(ranges.lazy()).collect(engine="in-memory")
    stepped, origin = iteration_names(named, pattern=options.iteration_range)
    _note_iterations(origin, source, warnings)
    rules = options.rules
    base = pl.coalesce("op_name", "name")
    is_op = pl.col("op_name").is_not_null() | pl.col("name").str.contains(_NCCL_API)
    kind = (
        pl.when(pl.col("step").is_not_null())
        .then(pl.lit("annotation"))
        .when(is_op & base.str.contains(rules.cpu_comm_regex()))
        .then(pl.lit("communication"))
        .when(is_op & base.str.contains(rules.cpu_sync_regex()))
        .then(pl.lit("sync"))
        .when(is_op)
        .then(pl.lit("cpu_op"))
        .otherwise(pl.lit("annotation"))
    )
    collective = _mapped(stepped, "op_name", normalise_collective)
    return stepped.with_columns(
        _kind=kind,
        _collective_op=collective,
        _step=pl.col("step"),
        name=pl.coalesce("step", "op_name", "name"),
    ).drop("step")


def _note_iterations(origin: str, source: str, warnings: list[str]) -> None:
    """Say where the iterations came from when it is not ``ProfilerStep#N``."""
    if origin == "none":
        warnings.append(
            f"{source}: no iteration ranges (no NVTX ProfilerStep#N, no range named like step, iteration or "
            "train_step, no --iteration-range): each rank's whole capture is one iteration"
        )
    elif origin != "ProfilerStep#N":
        how = (
            "--iteration-range" if origin == "--iteration-range" else "the default pattern (step, iteration…)"
        )
        warnings.append(f"{source}: iterations from the NVTX ranges matching {how}, named ProfilerStep#N")


def _mapped(frame: pl.DataFrame, column: str, fn: Callable[[str], str | None]) -> pl.Expr:
    """Return ``fn`` of ``column`` through a mapping of its distinct values (names repeat)."""
    distinct = frame.get_column(column).drop_nulls().unique().to_list()
    mapping = {v: r for v in distinct if (r := fn(v)) is not None}
    return pl.col(column).replace_strict(mapping, default=None, return_dtype=pl.String)


def _linked_device(
    device: pl.DataFrame,
    runtime: pl.DataFrame,
    ranges: pl.DataFrame,
    calls: pl.DataFrame,
    options: ImportOptions,
) -> pl.DataFrame:
    """Add the kind, the launching operator (``external_id``) and the collective values to the activities."""
    # the rules matched on the few distinct kernel names, not on every kernel
    kernel_names = device.filter(pl.col("cat") == "kernel").get_column("name").unique()
    comm_names = kernel_names.filter(kernel_names.str.contains(options.rules.comm_kernel_regex()))
    is_comm = pl.col("name").is_in(comm_names.implode())
    device = device.with_columns(
        _kind=pl.when(pl.col("cat") == "kernel")
        .then(pl.when(is_comm).then(pl.lit("communication")).otherwise(pl.lit("compute")))
        .when(pl.col("cat") == "gpu_memcpy")
        .then(pl.lit("memcpy"))
        .when(pl.col("cat") == "gpu_memset")
        .then(pl.lit("memset"))
        .otherwise(pl.lit("sync"))
    )
    # the launches read: every activity's (its operator), or only the communication kernels'
    launching = device if not options.overlap_only else device.filter(pl.col("_kind") == "communication")
    launches = (
        launching.select("_p", "process", "correlation")
        .join(
            runtime.select("process", "correlation", "thread", at_ns="start_ns").unique(
                ["process", "correlation"]
            ),
            on=["process", "correlation"],
            how="inner",
        )
        .select("_p", "thread", "at_ns")
    )
    # the operator that launched each activity; no overlap figure reads it (overlap_only: not linked)
    ops = ranges.filter(pl.col("op_id").is_not_null() & (not options.overlap_only))
    ops = ops.select("thread", "start_ns", "end_ns", "op_id")
    external = innermost_enclosing(ops, launches, value="op_id").rename({"op_id": "external_id"})
    comm_launches = launches.join(device.filter(pl.col("_kind") == "communication").select("_p"), on="_p")
    collective_ops = ranges.filter(pl.col("_collective_op").is_not_null()).select(
        "thread", "start_ns", "end_ns", "_collective_op"
    )
    op_collective = innermost_enclosing(collective_ops, comm_launches, value="_collective_op")
    api = launch_values(calls, comm_launches)
    return (
        device.join(external, on="_p", how="left", maintain_order="left")
        .join(op_collective, on="_p", how="left", maintain_order="left")
        .join(api, on="_p", how="left", maintain_order="left")
        .join(_group_sizes(calls), on="comm", how="left", maintain_order="left")
    )


def _group_sizes(calls: pl.DataFrame) -> pl.DataFrame:
    """Return each communicator's number of ranks (from its creation): ``comm``, ``_group_size``."""
    return (
        calls.filter(pl.col("comm").is_not_null() & pl.col("nranks").is_not_null())
        .group_by("comm")
        .agg(_group_size=pl.col("nranks").max())
    )


def _device_events(device: pl.DataFrame, shift: int) -> pl.DataFrame:
    """Return the device activities as canonical events (``pid`` the device, ``tid`` the stream)."""
    is_comm = pl.col("_kind") == "communication"
    kernel_collective = _mapped(device.filter(is_comm), "name", collective_from_kernel)
    collective = pl.when(is_comm).then(pl.coalesce("_collective_op", "api_collective", kernel_collective))
    carries = ~collective.is_in(_NO_DATA).fill_null(False)
    names = comm_names(device.get_column("comm"))
    return _canonical(
        device,
        shift,
        kind="_kind",
        pid=pl.col("device").cast(pl.Int64),
        tid=pl.col("stream"),
        device=pl.col("device"),
        stream=pl.col("stream"),
        correlation=pl.col("correlation"),
        external_id=pl.col("external_id"),
        collective=collective,
        in_bytes=pl.when(is_comm & carries).then(pl.col("api_in_bytes")),
        out_bytes=pl.when(is_comm & carries).then(pl.col("api_out_bytes")),
        group_size=pl.when(is_comm).then(pl.col("_group_size")),
        pg_name=pl.when(is_comm).then(
            pl.col("comm").replace_strict(names, default=None, return_dtype=pl.String)
        ),
        group_peer=pl.when(is_comm).then(pl.col("api_peer")),
    )


def _runtime_events(runtime: pl.DataFrame, shift: int) -> pl.DataFrame:
    """Return the runtime calls as canonical events (``pid``/``tid`` the OS process and thread)."""
    return _canonical(
        runtime.with_columns(cat=pl.lit("cuda_runtime")),
        shift,
        kind=pl.lit("runtime"),
        pid=os_pid(pl.col("thread")),
        tid=os_tid(pl.col("thread")),
        correlation=pl.col("correlation"),
    )


def _range_events(ranges: pl.DataFrame, shift: int) -> pl.DataFrame:
    """Return the NVTX ranges as canonical events (``external_id`` the operator's ``op_id``)."""
    return _canonical(
        ranges,
        shift,
        kind="_kind",
        pid=os_pid(pl.col("thread")),
        tid=os_tid(pl.col("thread")),
        external_id=pl.col("op_id"),
    )


def _canonical(frame: pl.DataFrame, shift: int, *, kind: str | pl.Expr, **columns: pl.Expr) -> pl.DataFrame:
    """Return ``frame`` as the events schema: ``key`` as the rank, times + ``shift``, the given columns."""
    given = {
        "rank": pl.col("key"),
        "source": pl.lit(_SOURCE),
        "kind": pl.col(kind) if isinstance(kind, str) else kind,
        "name": pl.col("name"),
        "cat": pl.col("cat"),
        "start_ns": pl.col("start_ns") + shift,
        "end_ns": pl.col("end_ns") + shift,
        "dur_ns": pl.col("end_ns") - pl.col("start_ns"),
        **columns,
    }
    dtypes = {**EVENTS_SCHEMA, "kind": KIND, "source": SOURCE}
    return frame.select(
        (given[name] if name in given else pl.lit(None)).cast(dtypes[name]).alias(name)
        for name in EVENTS_SCHEMA.names()
    )
