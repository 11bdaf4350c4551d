"""What a format importer returns for one file, and the options every importer takes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from timeline.importers.rules import ClassificationRules

if TYPE_CHECKING:
    import polars as pl

    from timeline.importers.cache import Cache

__all__ = ["Clock", "FileResult", "HeldRank", "ImportOptions", "TraceFormat"]

TraceFormat = Literal["kineto", "horovod", "parquet", "flight_recorder", "nsys"]
Clock = Literal["epoch", "relative", "boot"]
"""``epoch``: ns since the Unix epoch; ``relative``: ns since the start of the trace or an unknown
origin (Horovod v0.9-v0.15); ``boot``: ns since machine boot (Horovod v0.16-v0.20 writer bug)."""


@dataclass(frozen=True, kw_only=True)
class ImportOptions:
    """Options of every importer.

    Attributes
    ----------
    rules
        How events are classified into kinds.
    include_python
        Keep ``python_function`` events (dropped while decoding by default: they are often most of a
        trace and no communication analysis needs them).
    overlap_only
        Skip the events no overlap figure reads (the rank-by-rank analysis sets it).
    cache
        The cache of the files' frames, or None.
    """

    rules: ClassificationRules = field(default_factory=ClassificationRules)
    include_python: bool = False
    overlap_only: bool = False
    """Keep only what the overlap analysis and the cross-rank analyses read: on a trace with GPU
    kernels, CPU operators other than collective ops and step markers (often half of the events) are
    skipped while building the frame, and counted in :attr:`FileResult.skipped`."""
    iteration_range: str | None = None
    """``--iteration-range``: a regex searched in the names of an Nsight Systems export's NVTX
    ranges, whose ranges are then its iterations (:mod:`timeline.importers.nsys_ranges`); None:
    ``ProfilerStep#N`` ranges, else those matching the default pattern."""
    held_keys: tuple[int, ...] | None = None
    """A rank-by-rank task's part of a file holding several ranks (an Nsight Systems export): the keys
    (:attr:`HeldRank.key`) of the ranks to load; None: every rank of the file."""
    cache: Cache | None = None
    """Where each file's frame is cached (:mod:`timeline.importers.cache`); None: no cache. Not an
    option of the parse: the same file gives the same frame either way."""


@dataclass(frozen=True, kw_only=True)
class HeldRank:
    """One rank of a file that holds several: a process and CUDA device of an Nsight Systems export.

    Attributes
    ----------
    key
        What the events' ``rank`` column holds for this rank until the loader resolves the ranks
        (:func:`timeline.inputs.resolve_held_ranks`): 0, 1, … in (host, device, process) order.
    rank, rank_from
        The rank the file states and where (NCCL's NVTX payloads, the captured environment), or None.
    world_size
        The job's size the file states, or None.
    host, pid, device
        Where the rank ran: the host name, the OS process id, the CUDA device.
    events
        The rank's events, including those left out on purpose (:attr:`FileResult.skipped`).
    loaded
        Whether its events were loaded (:attr:`ImportOptions.held_keys`): the file states every rank
        it holds, so that ranks are resolved alike whichever part of it a task loads.
    """

    key: int
    rank: int | None
    rank_from: str | None
    world_size: int | None
    host: str | None
    pid: int
    device: int
    events: int
    loaded: bool = True


@dataclass(kw_only=True)
class FileResult:
    """The events of one file and what the file says about itself.

    Attributes
    ----------
    events
        A frame with the columns of :data:`timeline.schema.EVENTS_SCHEMA`. ``rank`` is null where the
        event belongs to the file's own rank (filled in by the loader once the rank is known) and set
        where the format names another rank (Horovod negotiation ticks).
    format
        The format the content was recognised as.
    rank
        The rank the file declares for itself (``distributedInfo.rank``), or None.
    claims_rank
        Whether the file is one rank's trace (Kineto) rather than a job-wide log (Horovod's timeline,
        written by rank 0 for every worker).
    world_size, backend, host
        From the file's metadata, where present.
    clock
        What the nanosecond times count from.
    warnings
        One line per recoverable oddity, each with a count ("repaired 3 malformed records").
    """

    events: pl.DataFrame
    format: TraceFormat
    rank: int | None = None
    claims_rank: bool = True
    world_size: int | None = None
    backend: str | None = None
    host: str | None = None
    clock: Clock = "epoch"
    warnings: list[str] = field(default_factory=list)
    stored_files: list[dict[str, Any]] | None = None
    """For Parquet input: the file table of the original load, kept in the Parquet metadata."""
    groups: pl.DataFrame | None = None
    """The process groups the file declares (:data:`timeline.schema.PROCESS_GROUPS_SCHEMA`): a
    profiler trace's ``distributedInfo.pg_config`` (``rank`` null: the loader fills it in), a
    Parquet file's stored table; None when the format has none."""
    skipped: int = 0
    """Valid events left out of ``events`` on purpose (:attr:`ImportOptions.overlap_only`): the file
    table counts them, as a full load would."""
    held_ranks: list[HeldRank] | None = None
    """For a file holding several ranks (an Nsight Systems export: one per process and CUDA device
    that ran kernels): one entry per rank, whose ``key`` the events' ``rank`` column holds until the
    loader resolves the ranks; None for a file of one rank (or none: Horovod)."""
