"""The Flight Recorder report: why a job stopped, from the dumps of its ranks, as typed data.

Takes :class:`timeline.dumps.Dumps` and gives what ``timeline analyze DUMPS…`` prints and ``--json``
emits (:func:`build_flight_report`): a :class:`FlightReport` (kind ``flight_recorder``) holding a
verdict, findings (:class:`FlightFinding`: the fields of every
:class:`~timeline.results.findings.Finding`, causes ``hang`` and ``desync``, basis ``observed``),
the root ranks, every group instance's stop, every member's progress, the mismatched collectives,
who waits on whom and, with a profiler trace of the same job, the matched collectives
(:func:`profiler_matches`). The analysis is :mod:`timeline.analysis.flight_recorder`; every key is
documented in ``docs/flight-recorder.md``. The renderers (terminal, the bokeh page) read the
report's attributes and compute nothing: the order in which groups and members are listed
(``order``) and how far each member is behind its peers (``behind``) are the report's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import msgspec
import polars as pl

from timeline.arguments import check_events, check_instance
from timeline.results.base import Result, Row, rows_of
from timeline.results.findings import FINDINGS_VERSION, Basis, Finding, finding_dict, ranked

if TYPE_CHECKING:
    from timeline.analysis.flight_recorder import FlightAnalysis
    from timeline.dumps import Dumps

__all__ = [
    "FLIGHT_REPORT_VERSION",
    "EvidenceValue",
    "FlightDumps",
    "FlightFinding",
    "FlightGroup",
    "FlightMatch",
    "FlightMatches",
    "FlightMismatch",
    "FlightProgress",
    "FlightReport",
    "FlightRoot",
    "FlightVerdict",
    "FlightWait",
    "build_flight_report",
    "finding_row",
    "flight_findings",
    "profiler_matches",
    "rank_list",
]

FLIGHT_REPORT_VERSION = 2
"""The layout version of :class:`FlightReport` (``timeline analyze DUMPS --json``).

2: ``kind`` first, then ``version`` and ``timeline``; ``matches`` always present (null without
profiler traces); ``order`` on groups and progress rows, ``behind`` on progress rows; a ``desync``
finding's ``stalled`` evidence is the group's stalled ranks (was a boolean)."""

_KIND_WORDS = {
    "not_completed": "entered it and never completed it (a device or network fault)",
    "not_entered": "never entered it (the host did not issue it: a CPU stall, a held GIL, data, an error)",
    "circular_wait": "wait on ranks that wait on them",
}
_FIXES = {
    "not_completed": (
        "check the GPU and network of {ranks} (Xid errors in dmesg, nvidia-smi, NCCL_DEBUG=INFO logs), "
        "drain or replace them, and restart from the last checkpoint"
    ),
    "not_entered": (
        "look at what the host of {ranks} was doing when the others waited (py-spy dump of the process, "
        "the dump's stack frames): a CPU stall, a held GIL, a data loader or an exception kept it from "
        "issuing the collective"
    ),
    "circular_wait": (
        "make every rank issue its collectives in the same order in every group ({ranks} wait on one another)"
    ),
}


def rank_list(ranks: list[int] | tuple[int, ...]) -> str:
    """Return ranks as words: ``rank 3``, ``ranks 12 and 14``, ``ranks 1, 2 and 5``.

    Examples
    --------
    >>> rank_list([12, 14]), rank_list([3]), rank_list([1, 2, 5])
    ('ranks 12 and 14', 'rank 3', 'ranks 1, 2 and 5')
    """
    items = [str(r) for r in ranks]
    if len(items) == 1:
        return f"rank {items[0]}"
    return f"ranks {', '.join(items[:-1])} and {items[-1]}"


def _op(profiling_name: str | None) -> str | None:
    """Return the canonical collective of a profiling name (``nccl:_all_gather_base`` → ``all_gather``)."""
    from timeline.importers.collectives import normalise_collective
    from timeline.importers.flight_recorder import split_profiling_name

    name, _, _ = split_profiling_name(profiling_name)
    return name or normalise_collective(profiling_name)


def _group_words(row: dict[str, Any]) -> str:
    """``group 74 (expert_model_parallel: EXPERT_MODEL_PARALLEL_GROUP, ranks 12-15)``."""
    described = ", ".join(x for x in (row["dimension"], row["pg_desc"]) if x)
    members = row["group_ranks"]
    inside = f"{described}; " if described else ""
    ranks = f"ranks {', '.join(str(r) for r in members)}" if members else "members unknown"
    return f"group {row['group']} ({inside}{ranks})"


def _hang_finding(analysis: FlightAnalysis, blocked: int) -> Finding | None:
    """Return the hang of the root ranks, shown in the headline group; None without roots."""
    roots = analysis.roots
    if roots.is_empty() or analysis.headline is None:
        return None
    group = analysis.groups.filter(pl.col("group") == analysis.headline).row(0, named=True)
    members = analysis.progress.filter(pl.col("group") == analysis.headline)
    root_ranks = [int(r) for r in roots.get_column("rank")]
    shown = members.filter(pl.col("rank").is_in(root_ranks)).sort("rank")
    kinds = dict(
        zip(
            roots.get_column("rank").to_list(),
            roots.get_column("kind").cast(pl.String).to_list(),
            strict=True,
        )
    )
    stop_seq = int(shown.get_column("stop_seq").min())  # type: ignore[arg-type]
    op = group["stop_op"] if group["stop_seq"] == stop_seq else _first_op(members, stop_seq)
    summary = (
        f"{rank_list(root_ranks).capitalize()} stopped in {_group_words(group)} at "
        f"{_op(op) or op or 'an unknown operation'} #{stop_seq}: {_how(root_ranks, kinds)}"
    )
    waiting = group["waiting"]
    if waiting:
        summary += f"; {rank_list(waiting)} wait in #{group['wait_seq']}"
    summary += f"; {blocked} other rank{'s' if blocked != 1 else ''} blocked in all."
    kind_set = [kinds[r] for r in root_ranks]
    fix = "; ".join(
        _FIXES[k].format(ranks=rank_list([r for r in root_ranks if kinds[r] == k]))
        for k in dict.fromkeys(kind_set)
    )
    evidence: dict[str, Any] = {
        **_group_evidence(group, op, stop_seq),
        "wait_seq": group["wait_seq"],
        "stop_kinds": kind_set,
        "last_enqueued": [_int(v) for v in _by_rank(shown, root_ranks, "last_enqueued")],
        "last_completed": [_int(v) for v in _by_rank(shown, root_ranks, "last_completed")],
        "not_entered": group["not_entered"],
        "not_completed": group["not_completed"],
        "waiting": waiting,
        "no_dump": group["no_dump"],
        "blocked_ranks": blocked,
        "first_stop": analysis.first_stop,
    }
    return Finding(
        cause="hang",
        summary=summary,
        fix=fix[0].upper() + fix[1:] + ".",
        ranks=tuple(root_ranks),
        evidence=evidence,
    )


def _group_evidence(group: dict[str, Any], op: str | None, seq: int) -> dict[str, Any]:
    """Return the evidence naming a group and the collective at ``seq`` (``op``: its profiling name)."""
    return {
        "group": group["group"],
        "pg_name": group["pg_name"],
        "pg_desc": group["pg_desc"],
        "dimension": group["dimension"],
        "group_ranks": group["group_ranks"],
        "collective": _op(op),
        "profiling_name": op,
        "seq": seq,
    }


def _how(ranks: list[int], kinds: dict[int, str]) -> str:
    """How each kind of root stopped: ``both entered it and never completed it (…)``."""
    distinct = list(dict.fromkeys(kinds[r] for r in ranks))
    if len(distinct) == 1:
        both = {1: "", 2: "both "}.get(len(ranks), "all ")
        return both + _KIND_WORDS[distinct[0]]
    return "; ".join(f"{rank_list([r for r in ranks if kinds[r] == k])} {_KIND_WORDS[k]}" for k in distinct)


def _by_rank(frame: pl.DataFrame, ranks: list[int], column: str) -> list[Any]:
    """``column`` of ``frame`` for each of ``ranks`` in order (null where the rank has no row)."""
    values = dict(zip(frame.get_column("rank").to_list(), frame.get_column(column).to_list(), strict=True))
    return [values.get(r) for r in ranks]


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _first_op(members: pl.DataFrame, seq: int) -> str | None:
    ops = members.filter(pl.col("stop_seq") == seq).get_column("stop_op").drop_nulls()
    return None if ops.is_empty() else str(ops[0])


def _stall_finding(analysis: FlightAnalysis) -> Finding | None:
    """Return, with no root, the first group whose ranks all entered a collective none completed."""
    stalled = analysis.groups.filter(pl.col("state") == "stalled").sort(
        "stop_created_ns", "group", nulls_last=True
    )
    if not analysis.roots.is_empty() or stalled.is_empty():
        return None
    group = stalled.row(0, named=True)
    missing = group["no_dump"]
    op = group["stop_op"]
    summary = (
        f"Every rank with a dump in {_group_words(group)} entered {_op(op) or op or 'an operation'} "
        f"#{group['stop_seq']} and none completed it: a network fault, or a device fault on a rank the "
        "dumps cannot single out"
    )
    if missing:
        summary += f"; {rank_list(missing)} of the group have no dump and may be the ones that stopped"
    summary += "."
    fix = (
        f"Give the dumps of {rank_list(missing)}; " if missing else ""
    ) + "check the network between the group's ranks (NCCL_DEBUG=INFO logs, link errors) and their GPUs."
    evidence: dict[str, Any] = {
        **_group_evidence(group, op, group["stop_seq"]),
        "stalled": group["stalled"],
        "no_dump": missing,
        "stop_kinds": [],
    }
    return Finding(cause="hang", summary=summary, fix=fix, ranks=None, evidence=evidence)


def _desync_findings(analysis: FlightAnalysis) -> list[Finding]:
    """Return one ``desync`` finding per group: its first sequence number whose collectives differ."""
    out = []
    mismatches = analysis.mismatches.sort("group", "seq", "rank")
    for (group_name,), rows in mismatches.group_by("group", maintain_order=True):
        seq = rows.item(0, "seq")
        first = rows.filter(pl.col("seq") == seq)
        row = first.row(0, named=True)
        ranks = [int(r) for r in first.get_column("rank")]
        info = analysis.groups.filter(pl.col("group") == group_name)
        described = _group_words(info.row(0, named=True)) if info.height else f"group {group_name}"
        values = " / ".join(sorted(set(first.get_column("value").cast(pl.String).to_list())))
        expected, field = row["expected"], row["field"]
        others = f"{row['agreeing']} of the {row['ranks_compared']} ranks that recorded it"
        if field == "collective":
            did = f"issued {values} at #{seq}"
            theirs = f"where {others} issued {expected}"
        else:
            did = f"issued #{seq} with {field.replace('_', ' ')} {values}"
            theirs = f"where {others} have {expected}"
        if expected is None:
            theirs = "where no value is shared by more of the ranks that recorded it"
        count = f"{rows.height} mismatch{'es' if rows.height != 1 else ''}"
        summary = (
            f"{rank_list(ranks).capitalize()} of {described} {did} {theirs}; {count} in the group in all."
        )
        stalled = _stalled_at(info, seq)
        if stalled:
            summary += f" The group stalled there: its ranks entered #{seq} and none completed it."
        evidence: dict[str, Any] = {
            "group": group_name,
            "pg_name": row["pg_name"],
            "pg_desc": row["pg_desc"],
            "dimension": row["dimension"],
            "seq": seq,
            "field": row["field"],
            "values": first.get_column("value").cast(pl.String).to_list(),
            "expected": expected,
            "agreeing": row["agreeing"],
            "ranks_compared": row["ranks_compared"],
            "mismatches": rows.height,
            "stalled": stalled,
        }
        fix = (
            f"Make {rank_list(ranks)} issue the same collectives, in the same order and with the same shapes "
            "and dtypes, as the other ranks of the group (a rank-dependent branch, uneven data, or a "
            "collective skipped on some ranks)."
        )
        out.append(Finding(cause="desync", summary=summary, fix=fix, ranks=tuple(ranks), evidence=evidence))
    return out


def _stalled_at(info: pl.DataFrame, seq: int) -> list[int]:
    """Return the ranks of a group (``info``: its row, or none) that stalled at ``seq``, if it did."""
    if info.height == 0 or info.item(0, "state") != "stalled" or info.item(0, "stop_seq") != seq:
        return []
    return [int(r) for r in info.item(0, "stalled")]


def flight_findings(analysis: FlightAnalysis) -> list[Finding]:
    """Return the findings of an analysis of dumps.

    The ``hang`` of the root ranks; the ``desync`` of each group whose collectives differ across
    ranks; with neither, the ``hang`` of the first group whose ranks all entered a collective none
    completed (no rank to name: ``ranks`` null).
    """
    desyncs = _desync_findings(analysis)
    hang = _hang_finding(analysis, _blocked(analysis))
    if hang is None and not desyncs:
        # every member entered and none completed: a hang no rank of the dumps explains
        hang = _stall_finding(analysis)
    return ranked([*([hang] if hang else []), *desyncs])


def _blocked(analysis: FlightAnalysis) -> int:
    """How many ranks with a dump, other than the roots, have anything not completed."""
    roots = analysis.roots.get_column("rank").to_list()
    busy = analysis.progress.filter(
        pl.col("has_dump")
        & ~pl.col("state").is_in(["idle", "unknown", "no_dump"])
        & ~pl.col("rank").is_in(roots)
    )
    return busy.get_column("rank").n_unique()


def _verdict(findings: list[Finding], analysis: FlightAnalysis) -> FlightVerdict:
    """Return the verdict: whether a hang, whether a desync, and its one-sentence summary."""
    hang = next((f for f in findings if f.cause == "hang"), None)
    desync = [f for f in findings if f.cause == "desync"]
    if hang is not None:
        summary = hang.summary
        if desync:
            groups = f"{len(desync)} group{'s' if len(desync) != 1 else ''}"
            summary += f" The collectives of {groups} also differ across ranks (desync)."
    elif desync:
        summary = desync[0].summary
    elif analysis.groups.filter(pl.col("state") == "outstanding").height:
        summary = (
            "No rank stopped a collective: only point-to-point operations are outstanding, which the "
            "dumps alone cannot attribute (see the waits)."
        )
    else:
        summary = "No hang: every rank completed every collective it enqueued, as far as the dumps show."
    return FlightVerdict(
        hang=hang is not None, desync=bool(desync), communication_bound=None, summary=summary
    )


EvidenceValue = int | float | str | bool | list[int | str | None] | None
"""One named value of a finding's evidence: a number, a name, a flag, a list of ranks or of names."""


class FlightDumps(msgspec.Struct, frozen=True, kw_only=True):
    """What was read: the dumps' ranks, files, entries, format versions and whether timing was on.

    Attributes
    ----------
    ranks
        The ranks with a dump, ascending.
    files
        How many dump files.
    entries
        How many entries the dumps hold in all.
    versions, comm_lib_versions
        The Flight Recorder format versions and the communication library versions the dumps state.
    timing
        Whether any entry has a start time (``TORCH_NCCL_ENABLE_TIMING``).
    """

    ranks: list[int]
    files: int
    entries: int
    versions: list[str]
    comm_lib_versions: list[str]
    timing: bool


class FlightVerdict(msgspec.Struct, frozen=True, kw_only=True):
    """The verdict on the dumps.

    Attributes
    ----------
    hang
        Whether a ``hang`` finding was made.
    desync
        Whether a ``desync`` finding was made.
    communication_bound
        Always null: the dumps measure no step (kept so that every verdict has the key).
    summary
        One sentence: the first finding's, or why there is none.
    """

    hang: bool
    desync: bool
    communication_bound: bool | None
    summary: str


class FlightFinding(Row, frozen=True, kw_only=True):
    """A finding of the dumps: the fields of :class:`~timeline.results.findings.Finding`, typed.

    ``cause`` is ``hang`` or ``desync``, ``basis`` is ``observed`` and the predictions are null;
    ``evidence`` maps the names of ``docs/flight-recorder.md`` (*Findings and verdict*) to values.
    """

    cause: Literal["hang", "desync"]
    summary: str
    ranks: list[int] | None
    iterations: list[int] | None
    evidence: dict[str, EvidenceValue]
    fix: str
    predicted_step_ns: int | None
    predicted_gain_ratio: float | None
    basis: Basis


def finding_row(finding: Finding) -> FlightFinding:
    """Return a finding as the report's typed row (its ``--json`` fields, validated)."""
    return msgspec.convert(finding_dict(finding), FlightFinding)


class FlightRoot(Row, frozen=True, kw_only=True):
    """A root rank: others wait on it, it waits on no one (``FLIGHT_ROOTS_SCHEMA``)."""

    rank: int
    kind: Literal["not_entered", "not_completed", "circular_wait"]
    groups: int
    waited_on_by: int
    stopped_at_ns: int | None


GroupState = Literal["stopped", "stalled", "outstanding", "idle", "unknown"]
RankState = Literal[
    "not_entered", "not_completed", "waiting", "stalled", "outstanding", "idle", "no_dump", "unknown"
]
SeqKind = Literal["collective", "p2p", "mixed", "none"]


class FlightGroup(Row, frozen=True, kw_only=True):
    """A process group instance: where it stopped, which ranks are in which state (``FLIGHT_GROUPS_SCHEMA``).

    ``order``: its place when the groups are listed, most telling first (stopped, stalled,
    outstanding, unknown, idle; then by when the collective it stopped at was first enqueued, then
    by name), from 0; the terminal lists and the report draws the groups in that order.
    """

    group: str
    pg_name: str
    pg_desc: str | None
    dimension: str | None
    group_ranks: list[int] | None
    group_size: int | None
    seq_kind: SeqKind
    state: GroupState
    stop_seq: int | None
    wait_seq: int | None
    stop_op: str | None
    stop_created_ns: int | None
    not_entered: list[int]
    not_completed: list[int]
    waiting: list[int]
    stalled: list[int]
    no_dump: list[int]
    order: int


class FlightProgress(Row, frozen=True, kw_only=True):
    """A member rank of a group instance: its progress and state (``FLIGHT_PROGRESS_SCHEMA``).

    ``behind``: the group's highest ``last_completed`` minus this rank's (the collectives its peers
    completed and it did not); 0 in point-to-point groups and where progress is unknown.
    ``order``: its place when the members are listed, most telling first (stopped, waiting,
    stalled, outstanding, then the rest; then by group and rank), from 0.
    """

    group: str
    pg_name: str
    pg_desc: str | None
    dimension: str | None
    group_ranks: list[int] | None
    group_size: int | None
    seq_kind: SeqKind
    rank: int
    has_dump: bool
    pg_id: int | None
    progress_from: Literal["pg_status", "entries"] | None
    last_enqueued: int | None
    last_started: int | None
    last_completed: int | None
    outstanding: int
    state: RankState
    stop_seq: int | None
    stop_op: str | None
    waits_on: list[int] | None
    behind: int
    order: int


class FlightMismatch(Row, frozen=True, kw_only=True):
    """A rank whose collective at a number differs from its group's (``FLIGHT_MISMATCHES_SCHEMA``)."""

    group: str
    pg_name: str
    pg_desc: str | None
    dimension: str | None
    seq: int
    field: Literal["collective", "input_dtypes", "output_dtypes", "input_sizes", "output_sizes"]
    rank: int
    value: str | None
    expected: str | None
    agreeing: int
    ranks_compared: int


class FlightWait(Row, frozen=True, kw_only=True):
    """A rank and a rank it waits on, in which group, by what (``FLIGHT_WAITS_SCHEMA``)."""

    rank: int
    on_rank: int
    group: str
    via: Literal["collective", "p2p"]
    seq: int | None
    op: str | None


class FlightMatch(Row, frozen=True, kw_only=True):
    """A dump entry matched to the profiler's collective of its rank, group and number.

    The columns of ``FLIGHT_MATCHES_SCHEMA``.

    ``same_collective`` and ``same_bytes`` are null where either side does not say.
    """

    rank: int
    pg_name: str
    seq: int
    profiling_name: str | None
    state: str | None
    time_created_ns: int | None
    in_bytes: int | None
    trace_name: str | None
    trace_collective: str | None
    start_ns: int
    end_ns: int
    trace_in_bytes: int | None
    same_collective: bool | None
    same_bytes: bool | None


class FlightMatches(msgspec.Struct, frozen=True, kw_only=True):
    """The dumps' collectives matched to a profiler trace's of the same job (:func:`profiler_matches`).

    Attributes
    ----------
    entries
        Dump entries with a group and a sequence number.
    trace_collectives
        The profiler's communication events that record both (distinct rank, group, number).
    matched
        Entries matched to one.
    different_collective, different_bytes
        Matched pairs that name another collective, another input size.
    rows
        Every matched pair.
    """

    entries: int
    trace_collectives: int
    matched: int
    different_collective: int
    different_bytes: int
    rows: list[FlightMatch]


class FlightReport(Result, tag="flight_recorder", kw_only=True):
    """The Flight Recorder report of a job's dumps (``timeline analyze DUMPS --json``; ``flight_recorder``).

    Layout 2 (:data:`FLIGHT_REPORT_VERSION`): today's keys after ``kind``, ``version`` and
    ``timeline``, in today's order; ``matches`` is always present (null without profiler traces, was
    absent); groups and progress rows gain ``order``, progress rows ``behind`` (both drawn by the
    renderers, now in ``--json``); a ``desync`` finding's ``stalled`` evidence is the list of the
    group's stalled ranks (was a boolean: one word, one meaning, as in a stall's ``hang`` finding
    and the groups' rows).

    Attributes
    ----------
    dumps
        What was read.
    verdict
        The verdict.
    findings_version
        The layout version of a finding.
    findings
        ``hang`` first, then one ``desync`` per group (:func:`flight_findings`).
    roots
        The ranks the others wait on.
    first_stop
        The root that stopped first, when every root's time is known.
    groups, progress, mismatches, waits
        The analysis' rows (``docs/flight-recorder.md``).
    warnings
        What loading the dumps warned about.
    matches
        With profiler traces of the same job, the collectives matched (:class:`FlightMatches`).
    """

    version: int = FLIGHT_REPORT_VERSION
    dumps: FlightDumps
    verdict: FlightVerdict
    findings_version: int = FINDINGS_VERSION
    findings: list[FlightFinding]
    roots: list[FlightRoot]
    first_stop: int | None
    groups: list[FlightGroup]
    progress: list[FlightProgress]
    mismatches: list[FlightMismatch]
    waits: list[FlightWait]
    warnings: list[str]
    matches: FlightMatches | None = None


_GROUP_ORDER = {"stopped": 0, "stalled": 1, "outstanding": 2, "unknown": 3, "idle": 4}
_RANK_ORDER = {"not_entered": 0, "not_completed": 0, "waiting": 1, "stalled": 2, "outstanding": 3}


def _with_order(frame: pl.DataFrame, *by: pl.Expr | str) -> pl.DataFrame:
    """Return ``frame`` with ``order``: each row's place when sorted by ``by`` (nulls last), rows in place."""
    placed = frame.with_row_index("_at").sort(*by, nulls_last=True).with_row_index("order")
    return placed.sort("_at").drop("_at").with_columns(pl.col("order").cast(pl.Int64))


def _groups(groups: pl.DataFrame) -> list[FlightGroup]:
    """Return the groups' rows with their ``order`` (most telling first)."""
    state = pl.col("state").cast(pl.String).replace_strict(_GROUP_ORDER, return_dtype=pl.Int8)
    return rows_of(_with_order(groups, state, pl.col("stop_created_ns"), pl.col("group")), FlightGroup)


def _progress(progress: pl.DataFrame) -> list[FlightProgress]:
    """Return the members' rows with how far each is ``behind`` its peers, and their ``order``."""
    counted = (pl.col("seq_kind") != "p2p") & pl.col("last_completed").is_not_null()
    top = pl.col("last_completed").filter(counted).max().over("group")
    behind = pl.when(counted).then(top - pl.col("last_completed")).otherwise(0).alias("behind")
    state = pl.col("state").cast(pl.String).replace_strict(_RANK_ORDER, default=4, return_dtype=pl.Int8)
    frame = _with_order(progress.with_columns(behind), state, pl.col("group"), pl.col("rank"))
    return rows_of(frame, FlightProgress)


def _dumps(dumps: Dumps) -> FlightDumps:
    """Return what was read, from the dumps' files and entries."""
    entries = dumps.entries
    return FlightDumps(
        ranks=list(dumps.ranks),
        files=dumps.files.height,
        entries=entries.height,
        versions=sorted(set(dumps.files.get_column("version").drop_nulls().to_list())),
        comm_lib_versions=sorted(set(dumps.files.get_column("comm_lib_version").drop_nulls().to_list())),
        timing=entries.filter(pl.col("time_discovered_started_ns").is_not_null()).height > 0,
    )


def build_flight_report(dumps: Dumps, *, events: pl.DataFrame | None = None) -> FlightReport:
    """Return the Flight Recorder report of a job's dumps (``timeline analyze DUMPS --json``).

    Parameters
    ----------
    dumps
        The dumps of every rank (:func:`timeline.load_dumps`).
    events
        A profiler trace's events of the same job: the report then holds ``matches``
        (:func:`profiler_matches`).

    Returns
    -------
    FlightReport
        Its keys are documented in ``docs/flight-recorder.md`` (*The report's layout*).

    Raises
    ------
    TypeError
        ``dumps`` is not a :class:`~timeline.dumps.Dumps`, ``events`` not the events frame (named).
    UsageError
        ``events`` without the columns of the events frame.
    """
    from timeline.analysis.flight_recorder import analyze_dumps
    from timeline.dumps import Dumps

    check_instance(dumps, Dumps, argument="dumps", fix="pass timeline.load_dumps(...)")
    if events is not None:
        events = check_events(events)
    analysis = analyze_dumps(dumps.entries, dumps.status, dumps.groups, ranks=dumps.ranks)
    findings = flight_findings(analysis)
    return FlightReport(
        dumps=_dumps(dumps),
        verdict=_verdict(findings, analysis),
        findings=[finding_row(f) for f in findings],
        roots=rows_of(analysis.roots, FlightRoot),
        first_stop=analysis.first_stop,
        groups=_groups(analysis.groups),
        progress=_progress(analysis.progress),
        mismatches=rows_of(analysis.mismatches, FlightMismatch),
        waits=rows_of(analysis.waits, FlightWait),
        warnings=list(dumps.warnings),
        matches=None if events is None else profiler_matches(dumps, events),
    )


def profiler_matches(dumps: Dumps, events: pl.DataFrame) -> FlightMatches:
    """Return the dumps' collectives matched to a profiler trace's of the same job.

    ``entries`` (dump entries with a group and a sequence number), ``trace_collectives`` (the
    profiler's communication events that record both), ``matched``, ``different_collective`` and
    ``different_bytes`` (matched pairs that disagree), ``rows``
    (:data:`~timeline.analysis.flight_recorder.FLIGHT_MATCHES_SCHEMA`).
    """
    from timeline.analysis.flight_recorder import match_profiler_collectives

    matches = match_profiler_collectives(events, dumps.entries)
    traced = events.filter(
        (pl.col("kind") == "communication") & pl.col("seq").is_not_null() & pl.col("pg_name").is_not_null()
    )
    return FlightMatches(
        entries=dumps.entries.filter(pl.col("seq").is_not_null() & pl.col("pg_name").is_not_null()).height,
        trace_collectives=traced.select("rank", "pg_name", "seq").unique().height,
        matched=matches.height,
        different_collective=int((~matches.get_column("same_collective")).sum()),
        different_bytes=int((~matches.get_column("same_bytes")).sum()),
        rows=rows_of(matches, FlightMatch),
    )
