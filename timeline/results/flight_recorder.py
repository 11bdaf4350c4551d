"""The Flight Recorder report: why a job stopped, from the dumps of its ranks, as plain data.

Takes :class:`timeline.dumps.Dumps` and gives what ``timeline analyze DUMPS…`` prints and ``--json``
emits (:func:`build_flight_report`): a verdict, findings (:class:`~timeline.results.findings.Finding`
of cause ``hang`` and ``desync``, in the layout of every finding), the root ranks, every group
instance's stop, every member's progress, the mismatched collectives and who waits on whom. The
analysis is :mod:`timeline.analysis.flight_recorder`; every key is documented in
``docs/flight-recorder.md``.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from timeline.analysis.flight_recorder import FlightAnalysis, analyze_dumps, match_profiler_collectives
from timeline.arguments import check_events, check_instance
from timeline.dumps import Dumps
from timeline.importers.collectives import normalise_collective
from timeline.importers.flight_recorder import split_profiling_name
from timeline.results.findings import FINDINGS_VERSION, Finding, finding_dict, ranked

__all__ = ["FLIGHT_REPORT_VERSION", "build_flight_report", "flight_findings", "profiler_matches", "rank_list"]

FLIGHT_REPORT_VERSION = 1
"""The layout version of :func:`build_flight_report` (``timeline analyze DUMPS --json``)."""

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
        stalled = info.height > 0 and info.item(0, "state") == "stalled" and info.item(0, "stop_seq") == seq
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


def _verdict(findings: list[Finding], analysis: FlightAnalysis) -> dict[str, Any]:
    """Return the verdict: ``hang``, ``desync``, ``communication_bound`` (null: no step), ``summary``."""
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
    return {"hang": hang is not None, "desync": bool(desync), "communication_bound": None, "summary": summary}


def _rows(frame: pl.DataFrame) -> list[dict[str, Any]]:
    """Plain rows of a frame (enums as strings)."""
    return frame.with_columns(pl.col(pl.Enum).cast(pl.String)).to_dicts()


def build_flight_report(dumps: Dumps, *, events: pl.DataFrame | None = None) -> dict[str, Any]:
    """Return the Flight Recorder report of a job's dumps (``timeline analyze DUMPS --json``).

    Keys: ``version`` (:data:`FLIGHT_REPORT_VERSION`), ``kind`` (``"flight_recorder"``), ``dumps``
    (the ranks, files, versions, whether timing was on), ``verdict``, ``findings`` (each
    :func:`~timeline.results.findings.finding_dict`; ``findings_version``), ``roots``,
    ``first_stop``, ``groups``, ``progress``, ``mismatches``, ``waits`` (rows of the analysis'
    frames), ``warnings``; with the profiler's ``events`` of the same job, ``matches``
    (:func:`profiler_matches`).

    Raises
    ------
    TypeError
        ``dumps`` is not a :class:`~timeline.dumps.Dumps`, ``events`` not the events frame (named).
    UsageError
        ``events`` without the columns of the events frame.
    """
    check_instance(dumps, Dumps, argument="dumps", fix="pass timeline.load_dumps(...)")
    if events is not None:
        events = check_events(events)
    analysis = analyze_dumps(dumps.entries, dumps.status, dumps.groups, ranks=dumps.ranks)
    findings = flight_findings(analysis)
    entries = dumps.entries
    timing = entries.filter(pl.col("time_discovered_started_ns").is_not_null()).height > 0
    return {
        "version": FLIGHT_REPORT_VERSION,
        "kind": "flight_recorder",
        "dumps": {
            "ranks": dumps.ranks,
            "files": dumps.files.height,
            "entries": entries.height,
            "versions": sorted(set(dumps.files.get_column("version").drop_nulls().to_list())),
            "comm_lib_versions": sorted(
                set(dumps.files.get_column("comm_lib_version").drop_nulls().to_list())
            ),
            "timing": timing,
        },
        "verdict": _verdict(findings, analysis),
        "findings_version": FINDINGS_VERSION,
        "findings": [finding_dict(f) for f in findings],
        "roots": _rows(analysis.roots),
        "first_stop": analysis.first_stop,
        "groups": _rows(analysis.groups),
        "progress": _rows(analysis.progress),
        "mismatches": _rows(analysis.mismatches),
        "waits": _rows(analysis.waits),
        "warnings": list(dumps.warnings),
        **({} if events is None else {"matches": profiler_matches(dumps, events)}),
    }


def profiler_matches(dumps: Dumps, events: pl.DataFrame) -> dict[str, Any]:
    """Return the dumps' collectives matched to a profiler trace's of the same job.

    Keys: ``entries`` (dump entries with a group and a sequence number), ``trace_collectives``
    (the profiler's communication events that record both), ``matched``, ``different_collective``
    and ``different_bytes`` (matched pairs that disagree), ``rows``
    (:data:`~timeline.analysis.flight_recorder.FLIGHT_MATCHES_SCHEMA`).
    """
    matches = match_profiler_collectives(events, dumps.entries)
    traced = events.filter(
        (pl.col("kind") == "communication") & pl.col("seq").is_not_null() & pl.col("pg_name").is_not_null()
    )
    return {
        "entries": dumps.entries.filter(pl.col("seq").is_not_null() & pl.col("pg_name").is_not_null()).height,
        "trace_collectives": traced.select("rank", "pg_name", "seq").unique().height,
        "matched": matches.height,
        "different_collective": int((~matches.get_column("same_collective")).sum()),
        "different_bytes": int((~matches.get_column("same_bytes")).sum()),
        "rows": _rows(matches),
    }
