"""What a user gives, turned into what to read: trace files, the units of work, and each file's rank.

Takes files, directories, glob patterns, Parquet files and Parquet datasets partitioned by rank
(``timeline convert``), and ``timeline.capture`` run folders; gives

- :func:`expand_inputs`: the trace files, sorted, without duplicates (a dataset gives its part
  files, a capture run folder the files its manifest lists);
- :func:`plan_units`: the units of work over those files (one per file; one per rank whose capture
  wrote several windows), which rank-by-rank analyses run as separate tasks;
- Flight Recorder dumps: :func:`split_dumps` (which inputs are dumps, recognised by content; a
  directory gives its dumps too, whatever their names), :func:`rank_from_dump_name` (torch names a
  dump ``<prefix><rank>``: ``nccl_trace_rank_3``, Megatron's ``_dump_3``);
- rank resolution: :func:`resolve_rank` (``distributedInfo.rank``, ``--rank``, the file name; a
  single input file naming no rank is rank 0, said in a warning; several such files are an error),
  :func:`claim_rank` and :func:`check_claims` (two files claiming one rank, several Horovod
  timelines), :func:`check_world` (a rank is an index below the world size, and the files of one run
  agree on it).

Every command and :func:`timeline.load` go through here, so these rules and their messages exist once.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from timeline.errors import RankError, UsageError
from timeline.globs import glob_paths
from timeline.importers.manifest import MANIFEST_NAME, read_manifest
from timeline.importers.result import FileResult, HeldRank, ImportOptions
from timeline.paths import check_path, path_text
from timeline.selection import Selection

if TYPE_CHECKING:
    import polars as pl

__all__ = [
    "PathsLike",
    "Unit",
    "capture_windows",
    "check_claims",
    "check_world",
    "claim_rank",
    "dataset_parts",
    "expand_datasets",
    "expand_inputs",
    "expand_paths",
    "input_paths",
    "is_dataset",
    "is_pattern",
    "is_trace_name",
    "manifest_windows",
    "plan_inputs",
    "plan_units",
    "rank_from_dump_name",
    "rank_from_name",
    "resolve_held_ranks",
    "resolve_rank",
    "several_timelines_error",
    "split_dumps",
    "unit_claims",
]

PathsLike = Sequence[str | Path] | str | Path
"""What the loading functions accept: one path or pattern, or several."""

_TRACE_SUFFIXES = (".json", ".json.gz", ".parquet", ".json.tmp", ".sqlite", ".nsys-rep", ".qdrep")
_NOT_TRACES = (MANIFEST_NAME,)  # the run manifest written by timeline.capture
# rank3, rank-3, rank_3, worker3, worker-3 (worker<N> is torch-tb-profiler's convention); not the
# digits of a larger word or number.
_RANK_IN_NAME = re.compile(r"(?<![a-z0-9])(?:rank|worker)[-_]?(\d+)(?![0-9])", re.IGNORECASE)
# torch's DebugInfoWriter names a dump <prefix><rank> (TORCH_NCCL_DEBUG_INFO_TEMP_FILE, default
# /tmp/nccl_trace_rank_): the rank is the digits that end the name (a .json or .pkl suffix aside).
_RANK_ENDING_NAME = re.compile(r"(?<![0-9])(\d{1,9})(?:\.json|\.pkl|\.pickle)?$", re.IGNORECASE)
_PARTITION = re.compile(r"^rank=(\d+)$")
_PART = re.compile(r"^part-(\d+)\.parquet$")


def is_trace_name(name: str) -> bool:
    """Whether a directory's reader takes a file of this name as a trace (``*.json[.gz]``, ``*.parquet``).

    Not the capture ``manifest.json``. (A directory's Flight Recorder dumps are recognised by content.)
    """
    return name.lower().endswith(_TRACE_SUFFIXES) and name not in _NOT_TRACES


def is_pattern(path: str | Path) -> bool:
    """Whether an input is a glob pattern (``*``, ``?``, ``[``)."""
    return any(c in str(path) for c in "*?[")


def input_paths(paths: Sequence[str]) -> list[str | Path]:
    """Return command-line inputs as the loaders take them: patterns as given, the rest as paths."""
    return [p if is_pattern(p) else Path(p) for p in paths]


def _as_list(paths: PathsLike) -> list[str | Path]:
    return [paths] if isinstance(paths, (str, Path)) else list(paths)


def expand_inputs(paths: PathsLike, *, rank: int | None = None) -> list[Path]:
    """Return the trace files of the inputs: datasets, directories and patterns expanded.

    Parameters
    ----------
    paths
        Files, directories, glob patterns, Parquet datasets partitioned by rank.
    rank
        ``--rank``: only valid for a single file.

    Raises
    ------
    UsageError
        A missing input, a pattern matching nothing, a directory holding no trace.
    RankError
        ``rank`` given for several files.
    """
    path_list = expand_paths(expand_datasets(_as_list(paths)))
    if rank is not None and len(path_list) != 1:
        raise RankError(f"--rank applies to a single file; {len(path_list)} files given (use --rank-regex)")
    return path_list


def expand_paths(paths: Sequence[str | Path]) -> list[Path]:
    """Return the trace files named by ``paths``: files, directories and glob patterns.

    A directory gives its ``*.json``, ``*.json.gz`` and ``*.parquet`` files (not the capture
    ``manifest.json``); a pattern gives its matches. The result is sorted and has no duplicates.

    Raises
    ------
    UsageError
        A path that does not exist, a pattern that matches nothing, a directory with no traces.
    """
    if not paths:
        raise UsageError("no trace given; pass one or more files, a directory or a glob pattern")
    found: list[Path] = []
    for raw in paths:
        text = str(raw)
        check_path(text)
        path = Path(text)
        if path.is_dir():
            found.extend(_directory_traces(path, text))
        elif path.is_file():
            found.append(path)
        elif is_pattern(text):
            # bounded, never through a link into a folder already walked (glob.glob loops forever)
            matches = sorted(Path(m) for m in glob_paths(text) if Path(m).is_file())
            if not matches:
                raise UsageError(f"{text}: pattern matches no file")
            found.extend(matches)
        elif path.exists():
            raise UsageError(f"{text}: not a regular file or directory")
        else:
            raise UsageError(f"{text}: no such file or directory")
    return sorted({p.resolve() for p in found})


def _directory_traces(path: Path, text: str) -> list[Path]:
    """Return the trace files of a directory (a capture run folder: those its manifest lists).

    Besides the files named as traces, the Flight Recorder dumps it holds, recognised by content:
    torch names them ``<prefix><rank>``, with no suffix.
    """
    listed = manifest_windows(path)
    members = sorted(
        p
        for p in path.iterdir()
        if p.is_file() and (is_trace_name(p.name) or (p.name not in _NOT_TRACES and _is_dump_file(p)))
    )
    if listed:
        # A capture run folder: exactly the files its manifest lists (stale traces of an
        # earlier run in the same folder are not mixed in).
        members = sorted(listed)
        missing = [p for p in members if not p.is_file()]
        if missing:
            manifest = path / "manifest.json"
            msg = f"{missing[0]}: listed in {manifest} but missing; re-copy the run folder"
            raise UsageError(msg)
    if not members:
        msg = (
            f"{text}: directory holds no trace files (*.json, *.json.gz, *.parquet, Nsight Systems *.sqlite, "
            "*.nsys-rep) nor Flight Recorder dumps"
        )
        raise UsageError(msg)
    return members


def _is_dump_file(path: Path) -> bool:
    """Whether a file's text begins as a Flight Recorder dump's (gzip recognised; unreadable: no)."""
    from timeline.errors import TimelineError
    from timeline.importers.files import sniff_path

    try:
        return sniff_path(path) == "flight_recorder"
    except TimelineError:
        return False


def split_dumps(paths: Sequence[Path]) -> tuple[list[Path], list[Path]]:
    """Return ``(dumps, traces)``: which of the expanded input files are Flight Recorder dumps.

    Recognised by content (:func:`timeline.importers.files.sniff_path`, gzip included); a file
    that is neither is left with the traces, whose reader says what is wrong with it.
    """
    dumps: list[Path] = []
    traces: list[Path] = []
    for path in paths:
        (dumps if _is_dump_file(path) else traces).append(path)
    return dumps, traces


def rank_from_dump_name(path: Path, *, rank_regex: str | None = None) -> int | None:
    """Return the rank a dump's file name states: ``--rank-regex``, ``rank<N>``, or the digits ending it.

    torch writes a dump to ``<prefix><rank>`` (``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``, default
    ``/tmp/nccl_trace_rank_``; Megatron and NVIDIA's resiliency tools use ``_dump_``), so the digits
    that end the name are the rank.

    Examples
    --------
    >>> rank_from_dump_name(Path("_dump_12")), rank_from_dump_name(Path("nccl_trace_rank_3"))
    (12, 3)
    """
    named = rank_from_name(path, rank_regex=rank_regex)
    if named is not None or rank_regex is not None:
        return named
    match = _RANK_ENDING_NAME.search(path.name)
    return int(match.group(1)) if match else None


def _partitions(directory: Path) -> list[tuple[int, Path]]:
    """Return the ``rank=N`` subdirectories of ``directory`` with their rank, by rank."""
    found = []
    for child in directory.iterdir():
        match = _PARTITION.match(child.name)
        if match and child.is_dir():
            found.append((int(match.group(1)), child))
    return sorted(found)


def is_dataset(path: str | Path) -> bool:
    """Whether ``path`` is a directory of ``rank=N/*.parquet`` partitions (``timeline convert``).

    A path the system cannot name (:func:`timeline.paths.check_path`) or examine is not one.
    """
    directory = Path(path)
    try:
        if not directory.is_dir():
            return False
        return any(any(p.suffix == ".parquet" for p in part.iterdir()) for _, part in _partitions(directory))
    except OSError:
        return False


def dataset_parts(path: str | Path) -> list[Path]:
    """Return the Parquet files of a dataset, by rank, then part number.

    Raises
    ------
    UsageError
        If ``path`` is not such a dataset.
    """
    directory = Path(path)
    if not is_dataset(directory):
        raise UsageError(f"{path}: not a Parquet dataset partitioned by rank (rank=N/part-0.parquet)")
    parts: list[Path] = []
    for _, partition in _partitions(directory):

        def number(p: Path) -> tuple[int, str]:
            match = _PART.match(p.name)
            return (int(match.group(1)) if match else 1 << 62, p.name)

        parts.extend(sorted((p for p in partition.iterdir() if p.suffix == ".parquet"), key=number))
    return parts


def expand_datasets(paths: Sequence[str | Path]) -> list[str | Path]:
    """Return ``paths`` with every dataset directory replaced by its part files."""
    out: list[str | Path] = []
    for path in paths:
        if not is_pattern(path) and is_dataset(path):
            out.extend(dataset_parts(path))
        else:
            out.append(path)
    return out


def rank_from_name(path: Path, *, rank_regex: str | None = None) -> int | None:
    """Return the rank a file name states (``rank3``, ``rank-3``, ``worker3`` or a user regex).

    Parameters
    ----------
    path
        The file.
    rank_regex
        A regex with one capturing group of digits, searched in the file name.

    Raises
    ------
    RankError
        A user regex that does not compile or has no group.
    """
    if rank_regex is not None:
        try:
            pattern = re.compile(rank_regex)
        except re.error as exc:
            raise RankError(f"--rank-regex {rank_regex!r}: not a valid regex ({exc})") from exc
        if pattern.groups < 1:
            raise RankError(f"--rank-regex {rank_regex!r}: needs one capturing group around the rank digits")
        match = pattern.search(path.name)
        if match is None or not match.group(1).isdigit():
            return None
        return int(match.group(1))
    match = _RANK_IN_NAME.search(path.name)
    return int(match.group(1)) if match else None


def resolve_rank(
    result: FileResult,
    path: Path,
    *,
    rank: int | None,
    rank_regex: str | None,
    warnings: list[str],
    only_file: bool = False,
) -> tuple[int, str]:
    """Return the rank of a parsed file and where it came from.

    In order: a Horovod timeline is rank 0's (its writer); ``--rank``; ``distributedInfo.rank`` (a
    file name that disagrees is a warning); the file name (``rank_regex`` or ``rank<N>``); for the
    only file of the inputs (``only_file``), rank 0, with a warning.

    Raises
    ------
    RankError
        A profiler trace whose rank nothing states, among several files (or with a ``rank_regex``
        that finds none in its name).
    """
    if not result.claims_rank:
        # A Horovod timeline is written by rank 0 and covers every worker.
        return 0, "horovod writer (rank 0)"
    if rank is not None:
        return rank, "--rank"
    named = rank_from_name(path, rank_regex=rank_regex)
    if result.rank is not None:
        if named is not None and named != result.rank:
            warnings.append(
                f"{path}: file name says rank {named} but distributedInfo.rank is {result.rank}; "
                f"used {result.rank}"
            )
        return result.rank, "distributedInfo"
    if named is not None:
        return named, "--rank-regex" if rank_regex else "file name"
    if only_file and rank_regex is None:
        # A single-GPU profile (no distributedInfo, default file name): the only rank of its job.
        job = (
            "of a one-rank job"
            if result.world_size in (None, 1)
            else f"of its {result.world_size}-rank job (pass --rank N if it is another rank)"
        )
        warnings.append(f"{path}: no rank in the file or its name; read as rank 0 {job}")
        return 0, SOLE_FILE
    msg = (
        f"{path}: no rank: the trace has no distributedInfo.rank and the file name has none; "
        "name files rank<N>.json, pass --rank-regex, or --rank N for a single file"
    )
    raise RankError(msg)


HELD_ORDER = "(host, device) order"
"""``rank_from`` of the ranks of an export that states none: numbered in (host, device) order."""


def resolve_held_ranks(
    result: FileResult,
    path: Path,
    *,
    rank: int | None,
    rank_regex: str | None,
    warnings: list[str],
    only_file: bool = False,
) -> dict[int, tuple[int, str]]:
    """Return the rank of each rank a file holds (an Nsight Systems export), by key, and where it came from.

    In order: what the file states for each (NCCL's communicators, the environment: see
    :class:`~timeline.importers.result.HeldRank`); for a file of one rank, ``--rank``, else the file
    name (``rank<N>``, ``rank_regex``); for the only file of the inputs, the ranks it does not state
    are numbered in (host, device) order, with a warning, after those it states.

    Raises
    ------
    RankError
        Ranks the file does not state, among several input files (no silent guess across files).
    """
    held = result.held_ranks or []
    resolved = {h.key: (h.rank, h.rank_from or "") for h in held if h.rank is not None}
    missing = [h for h in held if h.rank is None]
    if not missing:
        return {k: (int(r), f) for k, (r, f) in resolved.items()}
    if len(held) == 1:
        named = rank_from_name(path, rank_regex=rank_regex)
        if rank is not None:
            return {held[0].key: (rank, "--rank")}
        if named is not None:
            return {held[0].key: (named, "--rank-regex" if rank_regex else "file name")}
    if not only_file:
        msg = (
            f"{path}: no rank stated for {len(missing)} of its processes (no NCCL communicator in its NVTX "
            "ranges, no RANK in the captured environment); name a single-process export rank<N>.sqlite, pass "
            "--rank-regex, or analyse one export at a time"
        )
        raise RankError(msg)
    taken = {r for r, _ in resolved.values()}
    free = (n for n in range(len(held) + len(taken)) if n not in taken)
    for h in missing:
        resolved[h.key] = (next(free), HELD_ORDER)
    warnings.append(_held_order_note(path, missing, resolved))
    return {k: (int(r), f) for k, (r, f) in resolved.items()}


def _held_order_note(path: Path, missing: Sequence[HeldRank], resolved: Mapping[int, tuple[int, str]]) -> str:
    """Return the warning for ranks numbered in (host, device) order: which process became which rank."""
    shown = ", ".join(
        f"pid {h.pid} device {h.device}{f' on {h.host}' if h.host else ''} → rank {resolved[h.key][0]}"
        for h in missing[:8]
    )
    more = f" (and {len(missing) - 8} more)" if len(missing) > 8 else ""
    return (
        f"{path}: no rank stated for its processes (no NCCL communicator creation in its NVTX ranges, "
        f"no RANK in the captured environment); numbered in (host, device) order: {shown}{more}"
    )


SOLE_FILE = "only file (rank 0)"
"""``rank_from`` of the only input file, which names no rank: rank 0 (:func:`resolve_rank`)."""


def check_world(files: pl.DataFrame) -> None:
    """Check that every rank is an index below its world size and that the files agree on the world.

    Parameters
    ----------
    files
        The file table (:data:`timeline.schema.FILES_SCHEMA`) of every file of the run. Horovod
        timelines are left out of the world-size comparison: theirs is a lower bound (the highest
        rank seen negotiating).

    Raises
    ------
    RankError
        A negative rank, a world size of 0 or less, a rank not below its file's world size, or two
        profiler traces that state different world sizes (both files and values named).
    """
    first: tuple[str, int] | None = None
    for row in files.iter_rows(named=True):
        path, rank, world = row["path"], row["rank"], row["world_size"]
        if rank is not None and rank < 0:
            if row["rank_from"] == "--rank":
                msg = f"--rank {rank}: a rank is an index from 0 to world_size - 1; pass 0 or more"
            else:
                msg = (
                    f"{path}: rank {rank} (from {row['rank_from']}) is negative; a rank is an index "
                    "from 0 to world_size - 1: fix distributedInfo.rank in the trace or pass --rank N"
                )
            raise RankError(msg)
        if world is None:
            continue
        if world <= 0:
            msg = (
                f"{path}: distributedInfo.world_size is {world}; a job has at least one rank: "
                "fix or remove world_size in the trace"
            )
            raise RankError(msg)
        if rank is not None and rank >= world and row["format"] != "horovod":
            msg = (
                f"{path}: rank {rank} (from {row['rank_from']}) is outside its job of world_size {world} "
                f"(ranks 0 to {world - 1}); a rank is an index below world_size: fix the rank "
                "(distributedInfo.rank, --rank, --rank-regex) or distributedInfo.world_size"
            )
            raise RankError(msg)
        if row["format"] == "horovod":
            continue
        if first is None:
            first = (path, world)
        elif world != first[1]:
            msg = (
                f"{path}: distributedInfo.world_size is {world} but {first[0]} says {first[1]}; "
                "the traces of one run share one world size: pass the traces of one run only"
            )
            raise RankError(msg)


def claim_rank(owner: dict[int, Path], rank: int, path: Path, windows: dict[Path, int]) -> None:
    """Record that ``path`` holds ``rank``; two files claiming one rank is an error.

    Unless a capture manifest lists both as windows of that rank (``repeat > 1``).

    Raises
    ------
    RankError
        Another file already claims ``rank``.
    """
    other = owner.get(rank)
    if other is not None and windows.get(other) == rank and windows.get(path) == rank:
        return
    if rank in owner and owner[rank] != path:
        msg = (
            f"{path}: rank {rank} is also claimed by {owner[rank]}; "
            "pass the traces of one run only, or fix the ranks with --rank-regex"
        )
        raise RankError(msg)
    owner[rank] = path


def manifest_windows(directory: Path) -> dict[Path, int]:
    """Return the trace files a ``timeline.capture`` manifest in ``directory`` lists, with their rank.

    A capture with ``repeat > 1`` writes several windows per rank (``rank0.2-4``, ``rank0.7-9``):
    they are one rank's successive windows, not two ranks. Empty when there is no such manifest
    (absent, unreadable or not valid: :func:`~timeline.importers.manifest.read_manifest`).
    """
    manifest = read_manifest(directory / MANIFEST_NAME)
    if manifest is None:
        return {}
    return {
        (directory / name).resolve(): entry.rank
        for entry in manifest.ranks
        for name in entry.files
        if "/" not in name and "\\" not in name  # names in the run folder only
    }


def several_timelines_error(timelines: Sequence[str | Path]) -> RankError:
    """Return the error for several Horovod timelines given at once (a run has one)."""
    names = ", ".join(str(p) for p in timelines[:3])
    msg = (
        f"{names}: several Horovod timelines given; a run has one (written by rank 0): "
        "analyse one run at a time"
    )
    return RankError(msg)


def capture_windows(paths: Sequence[Path]) -> dict[Path, int]:
    """Return the files that capture manifests beside ``paths`` list as windows of a rank."""
    windows: dict[Path, int] = {}
    for directory in {p.parent for p in paths}:
        windows.update(manifest_windows(directory))
    return windows


def check_claims(horovod: Sequence[Sequence[str]], claims: Sequence[Sequence[tuple[int, str]]]) -> None:
    """Raise what :func:`timeline.load` raises for several Horovod timelines or a rank claimed twice.

    Parameters
    ----------
    horovod
        Per unit, in order: its Horovod timelines.
    claims
        Per unit, in order: ``(rank, file)`` pairs (:func:`unit_claims`).

    Raises
    ------
    RankError
        Several Horovod timelines, or a rank claimed by two files.
    """
    timelines = [path for unit in horovod for path in unit]
    if len(timelines) > 1:
        raise several_timelines_error(timelines)
    owner: dict[int, Path] = {}
    for unit in claims:
        for rank, path in unit:
            claim_rank(owner, rank, Path(path), {})


def unit_claims(
    paths: tuple[Path, ...], files: pl.DataFrame
) -> tuple[tuple[tuple[int, str], ...], tuple[str, ...]]:
    """Return the ranks a unit's files claim (with the claiming file) and its Horovod timelines.

    As :func:`timeline.load` counts them: a profiler trace claims its rank, a converted Parquet
    file the ranks of the traces it holds, a Horovod timeline none.
    """
    claims: dict[int, str] = {}
    horovod: list[str] = []
    own = {path_text(p) for p in paths}
    for row in files.iter_rows(named=True):
        if row["format"] == "horovod":
            if row["path"] in own:
                horovod.append(row["path"])
            continue
        if row["rank"] is not None:
            claims.setdefault(int(row["rank"]), path_text(paths[0]) if len(paths) == 1 else row["path"])
    return tuple(claims.items()), tuple(horovod)


@dataclass(frozen=True, kw_only=True)
class Unit:
    """Files whose events are analysed together: one rank's file (or its capture windows)."""

    paths: tuple[Path, ...]
    options: ImportOptions = field(default_factory=ImportOptions)
    rank: int | None = None
    rank_regex: str | None = None
    workers: int = 1
    """Processes that may decode the chunks of one large trace (the only unit of a run: all cores)."""
    communication: bool = True
    """Return the unit's communication events; without them a rank-by-rank task returns only its
    overlap rows, for callers that compare no ranks."""
    graph: bool = False
    """Also return the what-if graph parts of the iterations the diagnosis replays
    (:func:`timeline.diagnosis.parts.diagnosis_parts`)."""
    only_file: bool = False
    """The unit's file is the only file of the inputs: naming no rank, it is rank 0
    (:func:`resolve_rank`)."""
    selection: Selection = field(default_factory=Selection)
    """The ranks and iterations the run keeps (``--ranks``, ``--iterations``): a task keeps only
    their events and overlap rows (:mod:`timeline.selection`)."""


def plan_units(
    paths: Sequence[Path],
    *,
    options: ImportOptions | None = None,
    rank: int | None = None,
    rank_regex: str | None = None,
) -> list[Unit]:
    """Return the units of work for files, in order: one per file, one per rank's capture windows.

    Files a ``timeline.capture`` manifest lists as successive windows of one rank are one unit.
    """
    options = options or ImportOptions()
    windows = capture_windows(paths)
    groups: dict[tuple[Path, int], list[Path]] = {}
    ordered: list[list[Path]] = []
    for path in paths:
        window_rank = windows.get(path)
        if window_rank is None:
            ordered.append([path])
            continue
        key = (path.parent, window_rank)
        if key not in groups:
            groups[key] = []
            ordered.append(groups[key])
        groups[key].append(path)
    only_file = len(paths) == 1
    units = []
    for g in ordered:
        unit = Unit(paths=tuple(g), options=options, rank=rank, rank_regex=rank_regex, only_file=only_file)
        units.extend(_held_units(unit))
    return units


def _held_units(unit: Unit) -> list[Unit]:
    """Return a unit of one Nsight Systems export split into one unit per rank it holds, else the unit.

    Every part reads the whole file's tables of ranks, clock and counts, and its own rank's events
    (:attr:`~timeline.importers.result.ImportOptions.held_keys`): no task holds every rank.
    """
    from dataclasses import replace

    from timeline.importers.nsys_plan import nsys_rank_count

    if len(unit.paths) != 1:
        return [unit]
    count = nsys_rank_count(unit.paths[0])
    if count is None or count < 2:
        return [unit]
    return [replace(unit, options=replace(unit.options, held_keys=(key,))) for key in range(count)]


def plan_inputs(
    paths: PathsLike,
    *,
    options: ImportOptions | None = None,
    rank: int | None = None,
    rank_regex: str | None = None,
) -> list[Unit]:
    """Return the units of the inputs (files, directories, patterns, datasets), in order.

    Raises
    ------
    TimelineError
        Missing inputs; ``rank`` with several files.
    """
    path_list = expand_inputs(paths, rank=rank)
    return plan_units(path_list, options=options, rank=rank, rank_regex=rank_regex)
