"""The process group of events the traces leave ambiguous, from what several ranks' traces make certain.

Takes the communication events after the rules that read one event at a time
(:func:`~timeline.analysis.groups.attribute_groups`: ``named``, ``only_group``, ``size``, ``peer``),
each with its candidate groups, and narrows the candidates of the ambiguous ones with three facts,
repeated until nothing changes (refuting one event's candidate can leave a partner's event one):

- **timing** (``attributed_by = "timing"``): a synchronising collective (all-reduce, all-gather,
  reduce-scatter, all-to-all, barrier) cannot finish on any rank before every rank of its group has
  started it, so on ranks whose times compare (one host, or clocks aligned with ``--align``) its
  instances overlap in time on every member: ``max(starts) ≤ min(ends)``. A candidate group ``g``
  of an event on rank ``r`` is refuted when another member ``q`` of ``g``, whose trace covers the
  event, has no event of the same collective and size (uneven collectives excepted) that overlaps
  it within :data:`TIMING_TOLERANCE_NS` and may have run on ``g``.
- **thread** (``"thread"``): gloo runs every collective of a process group on that group's own
  worker threads (``ProcessGroupGloo::runLoop``, threads named ``pt_gloo_runloop``, each serving
  the ``workQueue_`` of its own ``ProcessGroupGloo``: ``torch/csrc/distributed/c10d/
  ProcessGroupGloo.hpp``), and records it there as ``gloo:<collective>``. So all the collectives
  on one such thread ran on one group: the thread's candidates are the intersection of its events'.
  Sends and receives run on the calling thread and are left out; NCCL streams are not used (a
  stream may carry several communicators' kernels).
- **pairing** (``"pairing"``): a send from ``r`` to ``p`` on group ``g`` has its receive on ``p``
  from ``r`` on ``g`` (and a receive its send). A candidate ``g`` of a send (receive) is refuted
  when ``p``'s trace, which covers the event, holds no receive (send) that may have run on ``g``
  with ``r`` as its other side.

A rule only narrows candidates that hold the truth: those of a rank whose trace lists its groups
(``pg_config``). A rank is only asked about an event its trace covers: one of a step it recorded
(ranks record the same steps, and a synchronous job runs a step's communication inside that step
on every rank), else, without ProfilerStep windows, one between its first and last communication
event. When the
facts contradict each other (an event or a thread left without a candidate: clocks that do not
compare after all, an operation cut off by the profiler window), nothing inferred is kept and a
warning says so. Every rule is defined in
``docs/collectives.md`` (The group of an event).
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

import polars as pl

__all__ = [
    "INFERRED",
    "SYNCHRONISING_COLLECTIVES",
    "TIMING_TOLERANCE_NS",
    "UNEVEN_COLLECTIVES",
    "Inference",
    "RankClock",
    "infer_groups",
    "peer_in_group",
]

SYNCHRONISING_COLLECTIVES = frozenset({"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "barrier"})
"""Collectives no rank can finish before every rank of the group has started them."""

UNEVEN_COLLECTIVES = ("all_to_all", "gather", "scatter", "send", "recv", "send_recv")
"""Collectives whose input size may differ across the ranks of one instance (uneven splits, pairs)."""

INFERRED = ("timing", "thread", "pairing")
"""The ``attributed_by`` of the rules that read several events (see the module docstring)."""

TIMING_TOLERANCE_NS = 10_000
"""How far (ns) two instances of one collective may miss each other and still count as overlapping:
timestamps in whole µs (traces before 2024) and two processes' readings of one host's clock differ
by a few µs. On the bundled gloo samples the true partners overlap by 30 µs or more and the nearest
wrong ones miss by 35 µs or more."""

_DIRECTED = ("send", "recv")


class RankClock(NamedTuple):
    """How a rank's times compare with the others'."""

    clock: str
    """Ranks with the same value read one clock."""
    uncertainty_ns: int
    """How far its times may be off that clock (an alignment's estimate; 0 on one host)."""


@dataclass
class _Event:
    """One communication event as the rules see it."""

    row: int
    rank: int
    collective: str | None
    in_bytes: int | None
    start: int
    end: int
    candidates: set[str]
    closed: bool
    """Its rank's trace lists every group the rank is in: the truth is among ``candidates``."""
    thread: tuple[int, int, int] | None
    """(rank, pid, tid) of a gloo worker thread, for the thread rule; None elsewhere."""
    peer: int | None
    group_peer: int | None
    how: str | None = None


@dataclass(frozen=True)
class Inference:
    """What the rules found: per row of the events given, the candidates left and the rule that decided.

    Attributes
    ----------
    candidates
        Row → the candidates left, for every row whose candidates narrowed.
    decided_by
        Row → the rule (:data:`INFERRED`) that left one candidate.
    warnings
        One line when the facts contradicted each other (then both maps are empty).
    """

    candidates: dict[int, list[str]] = field(default_factory=dict)
    decided_by: dict[int, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()


def peer_in_group(
    ranks: tuple[int, ...] | None, rank: int, peer: int | None, group_peer: int | None
) -> int | None:
    """Return the global rank of a send's or receive's other side on a group of ``ranks``, or None.

    The peer the trace names; else the group rank ``group_peer`` through the group's ranks; else
    the other rank of a group of two. ``ranks`` None: the group's members are not all known.

    Examples
    --------
    >>> peer_in_group((0, 2), 0, None, 1), peer_in_group((1, 3), 3, None, None)
    (2, 1)
    >>> peer_in_group(None, 0, 5, None)
    5
    """
    if peer is not None:
        return peer
    if ranks is None:
        return None
    if group_peer is not None and 0 <= group_peer < len(ranks):
        return ranks[group_peer]
    if len(ranks) == 2 and rank in ranks:  # the other rank of a pair
        return ranks[1 - ranks.index(rank)]
    return None


class _Evidence:
    """The events of each rank, by collective and in order of start, and what each rank's trace covers."""

    def __init__(self, events: list[_Event], steps: Mapping[int, list[tuple[int, int, int]]]) -> None:
        self.by_kind: dict[tuple[int, str | None], list[_Event]] = defaultdict(list)
        spans: dict[int, list[int]] = {}
        for event in events:
            self.by_kind[(event.rank, event.collective)].append(event)
            span = spans.setdefault(event.rank, [event.start, event.end])
            span[0], span[1] = min(span[0], event.start), max(span[1], event.end)
        self.spans = {rank: (lo, hi) for rank, (lo, hi) in spans.items()}
        self.steps = {rank: sorted(windows) for rank, windows in steps.items() if windows}
        self.step_numbers = {
            rank: {number for number, _, _ in windows} for rank, windows in self.steps.items()
        }
        self.starts: dict[tuple[int, str | None], list[int]] = {}
        self.longest: dict[tuple[int, str | None], int] = {}
        for key, listed in self.by_kind.items():
            listed.sort(key=lambda e: (e.start, e.end, e.row))
            self.starts[key] = [e.start for e in listed]
            self.longest[key] = max(e.end - e.start for e in listed)

    def step_of(self, event: _Event) -> int | None:
        """Return the ProfilerStep of ``event``'s rank whose window holds its start, or None."""
        for number, start, end in self.steps.get(event.rank, ()):
            if start <= event.start < end:
                return number
        return None

    def covers(self, rank: int, event: _Event) -> bool:
        """Whether ``rank``'s trace covers ``event``: it recorded the step ``event`` ran in.

        Ranks record the same steps, and a step's communication runs inside that step on every
        rank. A rank without ProfilerStep windows covers the events between its first and last
        communication event; an event outside its own rank's windows is covered by none.
        """
        if event.rank in self.steps:
            number = self.step_of(event)
            if number is None or rank not in self.step_numbers:
                return False
            return number in self.step_numbers[rank]
        span = self.spans.get(rank)
        return span is not None and span[0] <= event.start and event.end <= span[1]

    def overlapping(self, rank: int, event: _Event, slack: int) -> Iterable[_Event]:
        """Yield ``rank``'s events of ``event``'s collective that overlap it within ``slack`` ns."""
        key = (rank, event.collective)
        starts = self.starts.get(key)
        if not starts:
            return
        listed = self.by_kind[key]
        last = bisect.bisect_right(starts, event.end + slack)
        first = bisect.bisect_left(starts, event.start - slack - self.longest[key])
        for other in listed[first:last]:
            if other.end + slack >= event.start:
                yield other


class _Rules:
    """The three rules over one set of events, with the groups' members and the ranks' clocks."""

    def __init__(
        self,
        events: list[_Event],
        members: Mapping[str, tuple[int, ...] | None],
        clocks: Mapping[int, RankClock],
        steps: Mapping[int, list[tuple[int, int, int]]],
    ) -> None:
        self.events = events
        self.members = members
        self.clocks = clocks
        self.evidence = _Evidence(events, steps)

    def slack(self, a: int, b: int) -> int | None:
        """Return the tolerance between two ranks' times, or None when they do not compare."""
        clock_a, clock_b = self.clocks.get(a), self.clocks.get(b)
        if clock_a is None or clock_b is None or clock_a.clock != clock_b.clock:
            return None
        return TIMING_TOLERANCE_NS + clock_a.uncertainty_ns + clock_b.uncertainty_ns

    @staticmethod
    def may_be_on(other: _Event, group: str) -> bool:
        """Whether ``other`` may have run on ``group`` (an open list of candidates may hold anything)."""
        return group in other.candidates or not other.closed

    def timing_refutes(self, event: _Event, group: str) -> bool:
        """Whether a member of ``group`` has no overlapping instance of ``event`` that may be on it."""
        members = self.members.get(group)
        if members is None:
            return False
        for rank in members:
            slack = None if rank == event.rank else self.slack(event.rank, rank)
            if slack is None or not self.evidence.covers(rank, event):
                continue
            if not any(
                self.may_be_on(other, group) and _same_size(event, other)
                for other in self.evidence.overlapping(rank, event, slack)
            ):
                return True
        return False

    def pairing_refutes(self, event: _Event, group: str) -> bool:
        """Whether the other side of a send or receive on ``group`` has nothing that pairs with it."""
        peer = peer_in_group(self.members.get(group), event.rank, event.peer, event.group_peer)
        if peer is None or peer == event.rank or self.slack(event.rank, peer) is None:
            return False
        if not self.evidence.covers(peer, event):
            return False
        other_kind = "recv" if event.collective == "send" else "send"
        for other in self.evidence.by_kind.get((peer, other_kind), []):
            if not self.may_be_on(other, group):
                continue
            back = peer_in_group(self.members.get(group), other.rank, other.peer, other.group_peer)
            if back is None or back == event.rank:
                return False
        return True

    def narrow(self, event: _Event) -> bool:
        """Apply the timing or pairing rule to one event; return whether its candidates changed."""
        if event.collective in SYNCHRONISING_COLLECTIVES:
            rule, refutes = "timing", self.timing_refutes
        elif event.collective in _DIRECTED:
            rule, refutes = "pairing", self.pairing_refutes
        else:
            return False
        refuted = {g for g in event.candidates if refutes(event, g)}
        if not refuted:
            return False
        event.candidates -= refuted
        if len(event.candidates) == 1:
            event.how = rule
        return True

    def threads(self) -> dict[tuple[int, int, int], list[_Event]]:
        """Return the events of each gloo worker thread of a rank whose groups are listed."""
        out: dict[tuple[int, int, int], list[_Event]] = defaultdict(list)
        for event in self.events:
            if event.thread is not None and event.closed:
                out[event.thread].append(event)
        return out

    def run(self) -> bool:
        """Narrow to a fixed point; return False when the facts contradict each other."""
        open_events = [e for e in self.events if e.closed and len(e.candidates) > 1]
        threads = self.threads()
        changed = True
        while changed:
            changed = False
            for event in open_events:
                if len(event.candidates) > 1 and self.narrow(event):
                    changed = True
                    if not event.candidates:
                        return False
            for listed in threads.values():
                common = set.intersection(*(e.candidates for e in listed))
                if not common:
                    return False
                for event in listed:
                    if event.candidates != common:
                        event.candidates = set(common)
                        changed = True
                        if len(common) == 1 and event.how is None:
                            event.how = "thread"
        return True


def _same_size(event: _Event, other: _Event) -> bool:
    """Whether two instances may be one collective by size (uneven collectives always may)."""
    if event.collective in UNEVEN_COLLECTIVES or event.in_bytes is None or other.in_bytes is None:
        return True
    return event.in_bytes == other.in_bytes


def _steps(windows: pl.DataFrame | None) -> dict[int, list[tuple[int, int, int]]]:
    """Rank → its ProfilerStep windows as (step, start, end)."""
    steps: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    if windows is None:
        return steps
    recorded = windows.filter((pl.col("window") == "profiler_step") & pl.col("iteration").is_not_null())
    for rank, number, start, end in recorded.select("rank", "iteration", "start_ns", "end_ns").iter_rows():
        steps[rank].append((number, start, end))
    return steps


def _order(event: _Event) -> tuple[int, int, int, str, tuple[int, ...], int]:
    """Sort key of the events: by rank and time, whatever the order of the frame."""
    return (event.rank, event.start, event.end, event.collective or "", event.thread or (), event.row)


def _events(frame: pl.DataFrame) -> list[_Event]:
    """Read the rows the rules need into :class:`_Event` objects."""
    events = []
    for row in frame.iter_rows(named=True):
        name = row["name"] or ""
        on_worker = (
            row["device"] is None and name.startswith("gloo:") and row["collective"] not in (*_DIRECTED, None)
        )
        events.append(
            _Event(
                row=row["_row"],
                rank=row["rank"],
                collective=row["collective"],
                in_bytes=row["in_bytes"],
                start=row["start_ns"],
                end=row["end_ns"],
                candidates=set(row["candidates"] or ()),
                closed=bool(row["_closed"]),
                thread=(row["rank"], row["pid"], row["tid"]) if on_worker else None,
                peer=row["peer"],
                group_peer=row["group_peer"],
            )
        )
    return events


def infer_groups(
    frame: pl.DataFrame,
    members: Mapping[str, tuple[int, ...] | None],
    clocks: Mapping[int, RankClock],
    *,
    windows: pl.DataFrame | None = None,
) -> Inference:
    """Narrow the candidate groups of ambiguous events with the timing, thread and pairing rules.

    Parameters
    ----------
    frame
        The communication events after the one-event rules: ``_row`` (the row's id), ``rank``,
        ``name``, ``pid``, ``tid``, ``device``, ``collective`` (String), ``in_bytes``, ``start_ns``,
        ``end_ns``, ``candidates`` (one group for an event whose group is known), ``_closed`` (the
        rank's trace lists its groups), ``peer``, ``group_peer``.
    members
        Group id → its global ranks in group order, or None when they are not all known.
    clocks
        Rank → its :class:`RankClock`: ranks with the same clock have times that compare, within
        :data:`TIMING_TOLERANCE_NS` plus both uncertainties (those of an alignment); a rank absent
        compares with none (the timing and pairing rules then leave it alone).
    windows
        The iteration windows (:func:`~timeline.analysis.iterations.assign_iterations`): a rank is
        asked only about the events of the steps it recorded (without them: the events between its
        first and last communication event).

    Returns
    -------
    Inference
    """
    # in an order of their own, not the frame's: which rule decides an event is the same on every road
    events = sorted(
        _events(frame), key=lambda e: (e.rank, e.start, e.end, e.collective or "", e.thread or (), e.row)
    )
    if not any(e.closed and len(e.candidates) > 1 for e in events):
        return Inference()
    before = {e.row: set(e.candidates) for e in events}
    rules = _Rules(events, members, clocks, _steps(windows))
    if not rules.run():
        return Inference(
            warnings=(
                "the timing of the traces contradicts the groups they declare (an event or a gloo "
                "thread fits no group: clocks that do not compare, or an operation cut off by the "
                "profiler window): the groups were told from each event alone",
            )
        )
    narrowed = {e.row: sorted(e.candidates) for e in events if e.candidates != before[e.row]}
    decided = {
        e.row: e.how for e in events if e.row in narrowed and e.how is not None and len(e.candidates) == 1
    }
    return Inference(candidates=narrowed, decided_by=decided)
