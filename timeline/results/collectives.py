"""The collectives report: collectives matched across ranks, their bandwidth, stragglers, Horovod phases.

Takes a :class:`~timeline.run.Run` (its one matching of the collectives, its stragglers and
utilisation) and gives typed, versioned data: :class:`CollectivesReport`, what ``timeline
collectives`` prints and ``--json`` emits (:func:`build_collectives_report`), and
:class:`Utilisation`, the link utilisation that ``timeline analyze --link-gbps`` adds
(:func:`utilisation_summary`). Every figure a renderer shows is a field here: the renderers
(terminal, HTML, the report's collectives view) compute nothing.

Unknown is null. An unknown process group is null: the communication of ranks whose traces name
no group, matched as one sequence per rank (``"*"`` inside :mod:`timeline.analysis.collectives`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import msgspec
import polars as pl

from timeline.analysis.collectives import ALL_COMMUNICATION_GROUP, CollectiveMatch, implausible_warning
from timeline.arguments import check_run
from timeline.errors import UsageError
from timeline.results.base import Result, Row, rows_of
from timeline.trace import Trace

if TYPE_CHECKING:
    from timeline.run import Run

__all__ = [
    "REPORT_VERSION",
    "Ambiguity",
    "AmbiguousEvent",
    "ClockOffset",
    "Collective",
    "CollectiveCost",
    "CollectiveRank",
    "CollectivesReport",
    "FileRow",
    "Group",
    "Horovod",
    "HorovodAttribution",
    "HorovodBatch",
    "HorovodIteration",
    "HorovodNegotiation",
    "HorovodTensor",
    "HorovodTotals",
    "Incomplete",
    "IterationUtilisation",
    "Mismatch",
    "Pair",
    "RankIterationWait",
    "RankWait",
    "StragglerIteration",
    "StragglerRank",
    "Stragglers",
    "Utilisation",
    "build_collectives_report",
    "utilisation_summary",
]

REPORT_VERSION = 4
"""The layout version of :class:`CollectivesReport` (``timeline collectives --json``).

4 (#37): ``costs``, the fixed cost per call and the time per byte of each collective kind per process
group (:func:`~timeline.analysis.collective_costs.fit_collective_costs`). 3 (#36): ``kind``
(``"collectives"``) and ``timeline`` (timeline's version) come first; an unknown process group is null,
no longer ``"*"`` (``group`` of ``collectives``, ``collective_ranks``, ``mismatches``, ``groups`` and
``point_to_point``); the figures the tables showed without ``--json`` holding them are keys:
``collective_groups``, ``complete_collectives``, ``incomplete``, ``ambiguous_events``,
``collectives_by_wait``, ``pairs_by_wait``, ``wait_by_rank``, ``wait_by_rank_iteration``, and in
``horovod`` ``implausible_batches``, ``batches_by_bytes``, ``tensors_by_time``,
``negotiation_by_caused_wait``. 2 (#20): ``groups``, ``point_to_point``, ``ambiguity``, ``ambiguous``
and ``gpus_per_node`` keys; ``collectives`` rows gain ``dimension``, ``attributed_by`` and
``spans_nodes``; ``matched_by`` may be ``comms_id``; sends and receives are paired in ``point_to_point``
instead of matched as collectives. 1: the first layout."""

UTILISATION_VERSION = 1
"""The layout of :class:`Utilisation` (the summary's ``utilisation``): versioned with the summary."""


# ---------------------------------------------------------------- rows


class FileRow(Row, frozen=True):
    """One input file (``FILES_SCHEMA``): where each rank came from."""

    rank: int | None
    path: str
    format: str
    rank_from: str | None
    world_size: int | None
    backend: str | None
    host: str | None
    clock: str | None
    events: int | None  # a Parquet file written before the count was kept


class ClockOffset(Row, frozen=True):
    """One rank's clock offset from the reference rank's (``CLOCK_OFFSETS_SCHEMA``, ``--align``)."""

    rank: int
    reference_rank: int | None
    offset_ns: int | None
    collectives: int
    mad_ns: int | None
    host: str | None


class Collective(Row, frozen=True):
    """One logical collective: the k-th collective of a group across its ranks (``COLLECTIVES_SCHEMA``).

    ``group`` is null for the communication of ranks whose traces name no process group. Where the
    ranks' clocks disagree, the figures that compare their times (first and last starts and ends,
    skews, first and last rank) are null.
    """

    collective_id: int
    group: str | None
    dimension: str | None
    index: int
    matched_by: str | None
    attributed_by: str | None
    collective: str | None
    iteration: int | None
    synchronising: bool
    ranks: int
    expected_ranks: int
    complete: bool
    consistent: bool
    group_size: int | None
    bytes: int | None
    first_start_ns: int | None
    last_start_ns: int | None
    first_end_ns: int | None
    last_end_ns: int | None
    start_skew_ns: int | None
    end_skew_ns: int | None
    transfer_ns: int | None
    max_wait_ns: int | None
    total_wait_ns: int | None
    first_rank: int | None
    last_rank: int | None
    bus_factor: float | None
    algbw_bytes_per_s: float | None
    busbw_bytes_per_s: float | None
    algbw_gbps: float | None
    busbw_gbps: float | None
    link_gbps: float | None
    link_utilisation_ratio: float | None
    implausible: bool
    spans_nodes: bool | None


class CollectiveRank(Row, frozen=True):
    """One logical collective on one rank: its own timing and wait (``COLLECTIVE_RANKS_SCHEMA``)."""

    collective_id: int
    group: str | None
    index: int
    rank: int
    collective: str | None
    iteration: int | None
    events: int
    start_ns: int
    end_ns: int
    dur_ns: int
    in_bytes: int | None
    out_bytes: int | None
    bytes: int | None
    arrival_lag_ns: int | None
    end_lag_ns: int | None
    transfer_ns: int | None
    wait_ns: int | None
    last: bool | None


class Mismatch(Row, frozen=True):
    """A group and rank with fewer collectives than the group's most (``COLLECTIVE_MISMATCHES_SCHEMA``)."""

    group: str | None
    rank: int
    collectives: int
    expected: int
    missing: int


class Group(Row, frozen=True):
    """One process group instance with what was matched on it (``COLLECTIVE_GROUPS_SCHEMA``).

    ``group`` null: the communication of ranks whose traces name no group.
    """

    group: str | None
    pg_name: str | None
    pg_desc: str | None
    dimension: str | None
    ranks: list[int] | None
    ranks_truncated: bool | None
    size: int | None
    backend: str | None
    declared_by: int | None
    hosts: int | None
    spans_nodes: bool | None
    collectives: int
    complete: int
    matched_by: str | None
    attributed_by: str | None
    point_to_point: int
    ambiguous: int


class Pair(Row, frozen=True):
    """One send with its receive (``POINT_TO_POINT_SCHEMA``)."""

    pair_id: int
    group: str | None
    dimension: str | None
    src: int
    dst: int
    index: int
    iteration: int | None
    complete: bool
    consistent: bool
    bytes: int | None
    send_start_ns: int | None
    send_end_ns: int | None
    recv_start_ns: int | None
    recv_end_ns: int | None
    start_skew_ns: int | None
    transfer_ns: int | None
    send_wait_ns: int | None
    recv_wait_ns: int | None
    bus_factor: float | None
    algbw_bytes_per_s: float | None
    busbw_bytes_per_s: float | None
    algbw_gbps: float | None
    busbw_gbps: float | None
    link_gbps: float | None
    link_utilisation_ratio: float | None
    implausible: bool
    spans_nodes: bool | None


class Ambiguity(Row, frozen=True):
    """The collectives matched across no rank for doubt, per candidate groups, reason and collective."""

    candidates: list[str]
    matched_by: str
    collective: str | None
    events: int
    ranks: list[int]
    group_size: list[int]


class AmbiguousEvent(Row, frozen=True):
    """One communication event whose group, or place in its group's order, stays ambiguous."""

    rank: int
    collective: str | None
    matched_by: str
    candidates: list[str] | None
    group_size: int | None
    start_ns: int
    end_ns: int
    dur_ns: int
    in_bytes: int | None
    out_bytes: int | None


class IterationUtilisation(Row, frozen=True):
    """The bus bandwidth and link use of one iteration's collectives (``ITERATION_UTILISATION_SCHEMA``).

    ``iteration`` null: the collectives outside every ProfilerStep window.
    """

    iteration: int | None
    collectives: int
    bytes: int | None
    bus_bytes: float | None
    transfer_ns: int | None
    total_wait_ns: int | None
    algbw_gbps: float | None
    busbw_gbps: float | None
    link_gbps: float | None
    link_utilisation_ratio: float | None
    step_ns: int | None
    step_link_utilisation_ratio: float | None
    exposed_comm_ns: int | None
    exposed_link_bytes: float | None


class StragglerIteration(Row, frozen=True):
    """The rank the others waited for in one iteration, and the verdict (``STRAGGLER_ITERATIONS_SCHEMA``)."""

    iteration: int | None
    collectives: int
    ranks: int
    straggler_rank: int | None
    straggler_times_last: int | None
    straggler_caused_wait_ns: int | None
    caused_wait_ns: int | None
    straggler_share_ratio: float | None
    transfer_ns: int | None
    mean_wait_ns: int | None
    wait_ratio: float | None
    straggler_compute_ns: int | None
    median_compute_ns: int | None
    verdict: Literal["slow_rank", "imbalance", "slow_link"] | None


class StragglerRank(Row, frozen=True):
    """One rank, ranked by the wait it caused over the whole trace (``STRAGGLER_RANKS_SCHEMA``)."""

    position: int
    rank: int
    collectives: int
    times_last: int
    caused_wait_ns: int | None
    caused_wait_ratio: float | None
    waited_ns: int | None
    mean_arrival_lag_ns: int | None


class Stragglers(msgspec.Struct, kw_only=True, frozen=True):
    """Who everyone waits for: per iteration and per rank over the trace (empty when clocks disagree)."""

    iterations: list[StragglerIteration]
    ranks: list[StragglerRank]


class Incomplete(Row, frozen=True):
    """How many logical collectives were matched on ``ranks`` of the ``expected_ranks`` of their group.

    ``untraced``: their group has more ranks than the report has (``ranks``): the other ranks'
    traces were not given.
    """

    ranks: int
    expected_ranks: int
    collectives: int
    untraced: bool


class RankWait(Row, frozen=True):
    """One rank's time in the logical collectives it took part in, over the whole trace.

    ``transfer_ns`` sums each collective's transfer once per rank that took part; ``wait_ns`` the
    rank's own wait (``CollectiveRank.wait_ns``).
    """

    rank: int
    collectives: int
    transfer_ns: int
    wait_ns: int


class RankIterationWait(Row, frozen=True):
    """One rank's time in collectives in one iteration: a cell of the report's wait heat map.

    The iteration of a collective on a rank is the iteration window holding its start there;
    ``iteration`` null: outside every ProfilerStep window. Every rank × iteration is present (zeros
    where the rank took part in nothing).
    """

    rank: int
    iteration: int | None
    collectives: int
    transfer_ns: int
    wait_ns: int


class HorovodTensor(Row, frozen=True):
    """One Horovod tensor: the summed duration of each of its phases (``HOROVOD_TENSORS_SCHEMA``)."""

    tensor: str | None
    pid: int
    collective: str | None
    operations: int
    bytes: int | None
    negotiation_ns: int
    wait_ns: int
    queue_ns: int
    memcpy_in_ns: int
    memcpy_out_ns: int
    wire_ns: int
    other_ns: int
    operation_ns: int


class HorovodBatch(Row, frozen=True):
    """One fused batch (a Horovod response): its tensors, bytes and bandwidth (``HOROVOD_BATCHES_SCHEMA``)."""

    batch: int
    collective: str | None
    wire_phases: str | None
    tensors: int
    bytes: int | None
    start_ns: int | None
    end_ns: int | None
    wire_ns: int | None
    world_size: int | None
    bus_factor: float | None
    algbw_bytes_per_s: float | None
    busbw_bytes_per_s: float | None
    algbw_gbps: float | None
    busbw_gbps: float | None
    link_gbps: float | None
    link_utilisation_ratio: float | None
    implausible: bool


class HorovodNegotiation(Row, frozen=True):
    """One rank's negotiation wait, from the readiness ticks (``HOROVOD_NEGOTIATION_SCHEMA``)."""

    rank: int
    negotiations: int
    waited_ns: int
    mean_waited_ns: int | None
    times_last: int
    caused_wait_ns: int


class HorovodTotals(Row, frozen=True):
    """The whole Horovod timeline, wire time as a union over fused tensors (``HOROVOD_TOTALS_SCHEMA``)."""

    tensors: int
    operations: int
    batches: int
    world_size: int | None
    span_ns: int | None
    wire_sum_ns: int
    wire_ns: int
    wire_ratio: float | None
    negotiation_ns: int
    bytes: int | None
    algbw_bytes_per_s: float | None
    busbw_bytes_per_s: float | None
    algbw_gbps: float | None
    busbw_gbps: float | None
    link_gbps: float | None
    link_utilisation_ratio: float | None


class HorovodIteration(Row, frozen=True):
    """One iteration of the writer rank: Horovod against its compute (``HOROVOD_ITERATIONS_SCHEMA``)."""

    rank: int
    iteration: int | None
    start_ns: int | None
    end_ns: int | None
    step_ns: int | None
    wire_ns: int | None
    hidden_wire_ns: int | None
    exposed_wire_ns: int | None
    negotiation_ns: int | None
    queue_ns: int | None
    memcpy_ns: int | None
    kernel_comm_ns: int | None
    exposed_kernel_comm_ns: int | None
    exposed_wire_ratio: float | None


class HorovodAttribution(msgspec.Struct, kw_only=True, frozen=True):
    """Horovod's phases set against the compute of the rank that wrote the timeline, per iteration."""

    writer_rank: int
    iterations: list[HorovodIteration]


class Horovod(msgspec.Struct, kw_only=True, frozen=True):
    """What a Horovod timeline tells: totals, tensors, fused batches, negotiation, attribution.

    Attributes
    ----------
    limitations
        What the timeline cannot tell, and what would (one sentence each).
    attribution
        With the writer rank's profiler trace on the wall clock; else null.
    implausible_batches
        The fused batches faster than the link (or physics): left out of the totals' bandwidth.
    batches_by_bytes
        Positions in ``batches``, the most bytes first (unknown as 0; ties in batch order).
    tensors_by_time
        Positions in ``tensors``, the most ``wire_ns + negotiation_ns`` first (ties in pid order).
    negotiation_by_caused_wait
        Positions in ``negotiation``, the most ``caused_wait_ns`` first (ties in rank order).
    """

    totals: HorovodTotals
    tensors: list[HorovodTensor]
    batches: list[HorovodBatch]
    negotiation: list[HorovodNegotiation]
    limitations: list[str]
    attribution: HorovodAttribution | None
    implausible_batches: int
    batches_by_bytes: list[int]
    tensors_by_time: list[int]
    negotiation_by_caused_wait: list[int]


class Utilisation(msgspec.Struct, kw_only=True, frozen=True):
    """The link utilisation ``timeline analyze --link-gbps`` adds (the summary's ``utilisation``).

    Attributes
    ----------
    link_gbps
        The link's one-direction bandwidth, Gbit/s.
    iterations
        Per iteration, the bus bandwidth of the collectives matched across ranks and the link's use.
    horovod
        A Horovod timeline's totals row, else null.
    implausible
        How many logical collectives and fused batches were faster than the link (left out of both:
        :func:`~timeline.analysis.collectives.implausible_warning` words the warning).
    """

    link_gbps: float
    iterations: list[IterationUtilisation]
    horovod: HorovodTotals | None
    implausible: int


class CollectiveCost(Row, frozen=True):
    """One collective kind on one process group: its fixed cost per call and time per byte.

    ``COLLECTIVE_COSTS_SCHEMA`` (:func:`~timeline.analysis.collective_costs.fit_collective_costs`);
    ``basis`` says where ``alpha_ns`` and ``beta_ns_per_byte`` come from, ``cannot_separate`` where
    the trace cannot tell them apart (``docs/collectives.md``).
    """

    collective: str
    group: str | None
    dimension: str | None
    group_size: int | None
    calls: int
    sizes: int
    bus_factor: float | None
    alpha_ns: float | None
    beta_ns_per_byte: float | None
    busbw_gbps: float | None
    alpha_se_ns: float | None
    beta_se_ns_per_byte: float | None
    median_ns: float | None
    basis: str


class CollectivesReport(Result, tag="collectives", kw_only=True):
    """What ``timeline collectives`` prints and ``--json`` emits (layout :data:`REPORT_VERSION`).

    Layout 4 adds ``costs`` (the last key). Layout 3 keeps every key of layout 2, in its order,
    after ``kind``, ``version`` and ``timeline``, and adds the figures the tables show (the last
    keys). Changed: an unknown process group is null (was ``"*"``). Every column is defined in
    ``docs/collectives.md``.

    Attributes
    ----------
    files, warnings
        As in ``timeline analyze``, plus the matching's and the Horovod analysis' warnings.
    link_gbps
        The link, or null.
    clock_offsets
        With ``--align``: one row per rank; else null.
    ranks
        The ranks with a matched collective, a send or receive, or a collective of an ambiguous group.
    collectives, collective_ranks, mismatches, groups, point_to_point, ambiguity, ambiguous
        The matching (``collective_ranks`` and ``ambiguous`` empty for the tables).
    gpus_per_node
        ``--gpus-per-node``, or null.
    utilisation, stragglers
        Per iteration; who everyone waits for.
    horovod
        A Horovod timeline's analysis, else null.
    collective_groups
        How many groups the logical collectives ran on (the unknown group counts as one).
    complete_collectives
        The logical collectives matched on every rank of their group.
    incomplete
        The others, counted per ranks matched and expected: the most first.
    ambiguous_events
        The events matched across no rank for doubt (the sum of ``ambiguity``'s ``events``).
    collectives_by_wait
        Positions in ``collectives``, the most ``total_wait_ns`` first (null as 0; ties in order).
    pairs_by_wait
        Positions in ``point_to_point``, the most ``send_wait_ns + recv_wait_ns`` first.
    wait_by_rank
        Per rank of the matched collectives, its summed transfer and wait over the trace.
    wait_by_rank_iteration
        The same per rank × iteration, every cell present: the iterations of the collectives and
        every ProfilerStep window; null (outside every ProfilerStep window) where a collective or a
        rank's window is.
    costs
        The α-β cost model of each collective kind per process group (the run's
        :attr:`~timeline.run.Run.collective_costs`).
    """

    version: int = REPORT_VERSION
    files: list[FileRow]
    warnings: list[str]
    link_gbps: float | None
    clock_offsets: list[ClockOffset] | None
    ranks: list[int]
    collectives: list[Collective]
    collective_ranks: list[CollectiveRank]
    mismatches: list[Mismatch]
    gpus_per_node: int | None
    groups: list[Group]
    point_to_point: list[Pair]
    ambiguity: list[Ambiguity]
    ambiguous: list[AmbiguousEvent]
    utilisation: list[IterationUtilisation]
    stragglers: Stragglers
    horovod: Horovod | None
    collective_groups: int
    complete_collectives: int
    incomplete: list[Incomplete]
    ambiguous_events: int
    collectives_by_wait: list[int]
    pairs_by_wait: list[int]
    wait_by_rank: list[RankWait]
    wait_by_rank_iteration: list[RankIterationWait]
    costs: list[CollectiveCost]


# ---------------------------------------------------------------- helpers


def _implausible(frame: pl.DataFrame) -> int:
    """How many rows of a frame with an ``implausible`` column are faster than physics."""
    return int(frame.get_column("implausible").sum())


def _known_group(frame: pl.DataFrame) -> pl.DataFrame:
    """Return a frame whose ``group`` is null where the analysis says ``"*"`` (no group known)."""
    group = pl.col("group")
    return frame.with_columns(pl.when(group != ALL_COMMUNICATION_GROUP).then(group).alias("group"))


def _order(frame: pl.DataFrame, key: pl.Expr) -> list[int]:
    """Return the positions of a frame's rows, the largest ``key`` first (null as 0; ties in order)."""
    positions = frame.select(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("_at"), key.fill_null(0).alias("_by")
    )
    ordered: list[int] = (
        positions.sort("_by", descending=True, maintain_order=True).get_column("_at").to_list()
    )
    return ordered


def utilisation_summary(run: Run) -> Utilisation:
    """Return the ``utilisation`` object of ``timeline analyze --json`` (the run has a link's bandwidth).

    ``iterations``: the run's :attr:`~timeline.run.Run.utilisation`, from its collectives matched
    across ranks; ``horovod``: the timeline's totals row, or None; ``implausible``: how many
    logical collectives and fused batches were faster than the link, left out of both.

    Raises
    ------
    UsageError
        The run has no link's bandwidth (``--link-gbps``).
    """
    link_gbps = run.options.link_gbps
    if link_gbps is None:
        raise UsageError("the link utilisation needs the link's bandwidth: pass --link-gbps")
    iterations: list[IterationUtilisation] = []
    implausible = 0
    if run.kineto_communication:
        iterations = rows_of(run.utilisation, IterationUtilisation)
        implausible += _implausible(run.matched.collectives)
    horovod = None
    events = run.trace.events
    if events.filter(pl.col("source") == "horovod").height:
        from timeline.analysis.horovod_phases import analyze_horovod

        analysis = analyze_horovod(events, link_gbps=link_gbps)
        horovod = rows_of(analysis.totals, HorovodTotals)[0]
        implausible += _implausible(analysis.batches)
    return Utilisation(link_gbps=link_gbps, iterations=iterations, horovod=horovod, implausible=implausible)


# ---------------------------------------------------------------- the matching's part


def _matched_ranks(match: CollectiveMatch) -> list[int]:
    """Return the ranks with a collective, a send or receive, or a collective of an ambiguous group."""
    pairs = match.point_to_point
    ranks = pl.concat(
        [
            match.ranks.get_column("rank"),
            pairs.get_column("src").filter(pairs.get_column("send_start_ns").is_not_null()),
            pairs.get_column("dst").filter(pairs.get_column("recv_start_ns").is_not_null()),
            match.ambiguous.get_column("rank"),
        ]
    )
    return sorted(ranks.unique().to_list())


def _ambiguity(ambiguous: pl.DataFrame) -> list[Ambiguity]:
    """Summarise the events matched across no rank for doubt: per candidates, why and collective."""
    summary = (
        ambiguous.with_columns(pl.col("candidates").list.join(","))
        .group_by("candidates", "matched_by", "collective")
        .agg(
            events=pl.len().cast(pl.Int64),
            ranks=pl.col("rank").unique().sort(),
            group_size=pl.col("group_size").drop_nulls().unique().sort(),
        )
        .sort("candidates", "matched_by", "collective", nulls_last=True)
        .with_columns(
            candidates=pl.when(pl.col("candidates") != "")
            .then(pl.col("candidates").str.split(","))
            .otherwise(pl.lit([], dtype=pl.List(pl.String)))
        )
    )
    return rows_of(summary, Ambiguity)


def _incomplete(collectives: pl.DataFrame, traced: int) -> list[Incomplete]:
    """Count the incomplete collectives per ranks matched and expected, the most first."""
    counts = (
        collectives.filter(~pl.col("complete"))
        .group_by("ranks", "expected_ranks")
        .agg(collectives=pl.len().cast(pl.Int64))
        .with_columns(untraced=pl.col("expected_ranks") > traced)
        .sort(["collectives", "ranks", "expected_ranks"], descending=[True, False, False])
    )
    return rows_of(counts, Incomplete)


def _wait_by_rank(match: CollectiveMatch) -> list[RankWait]:
    """Sum each rank's transfer and wait over the logical collectives it took part in."""
    sums = (
        match.ranks.group_by("rank")
        .agg(
            collectives=pl.len().cast(pl.Int64),
            transfer_ns=pl.col("transfer_ns").sum(),
            wait_ns=pl.col("wait_ns").sum(),
        )
        .sort("rank")
    )
    return rows_of(sums, RankWait)


def _wait_by_rank_iteration(match: CollectiveMatch, windows: pl.DataFrame) -> list[RankIterationWait]:
    """Sum each rank's transfer and wait per iteration, every rank × iteration present.

    The iterations: those of the collectives and of every ProfilerStep window; null (outside every
    ProfilerStep window) where a collective or a window has it.
    """
    rows = match.ranks
    iterations = set(rows.get_column("iteration").drop_nulls().to_list())
    steps = windows.filter(pl.col("window") == "profiler_step").get_column("iteration").drop_nulls()
    columns: list[int | None] = sorted(iterations | set(steps.to_list()))
    outside = rows.get_column("iteration").is_null().any() or windows.get_column("iteration").is_null().any()
    if outside:
        columns.append(None)
    grid = rows.select(pl.col("rank").unique().sort()).join(
        pl.DataFrame({"iteration": columns}, schema={"iteration": pl.Int64}), how="cross"
    )
    sums = rows.group_by("rank", "iteration").agg(
        collectives=pl.len().cast(pl.Int64),
        transfer_ns=pl.col("transfer_ns").sum(),
        wait_ns=pl.col("wait_ns").sum(),
    )
    cells = (
        grid.join(sums, on=["rank", "iteration"], how="left", nulls_equal=True)
        .with_columns(pl.col("collectives", "transfer_ns", "wait_ns").fill_null(0))
        .sort("iteration", "rank", nulls_last=True)
    )
    return rows_of(cells, RankIterationWait)


class _Matched(msgspec.Struct, kw_only=True, frozen=True):
    """The report's keys that the matching of profiler collectives fills (empty without)."""

    ranks: list[int] = []
    collectives: list[Collective] = []
    collective_ranks: list[CollectiveRank] = []
    mismatches: list[Mismatch] = []
    groups: list[Group] = []
    point_to_point: list[Pair] = []
    ambiguity: list[Ambiguity] = []
    ambiguous: list[AmbiguousEvent] = []
    utilisation: list[IterationUtilisation] = []
    stragglers: Stragglers = msgspec.field(default_factory=lambda: Stragglers(iterations=[], ranks=[]))
    collective_groups: int = 0
    complete_collectives: int = 0
    incomplete: list[Incomplete] = []
    ambiguous_events: int = 0
    collectives_by_wait: list[int] = []
    pairs_by_wait: list[int] = []
    wait_by_rank: list[RankWait] = []
    wait_by_rank_iteration: list[RankIterationWait] = []


def _matched(run: Run, *, rank_rows: bool) -> _Matched:
    """Return the matching's part of the report: the run's one matching, stragglers and utilisation."""
    match, stragglers = run.matched, run.stragglers
    collectives = match.collectives
    ranks = _matched_ranks(match)
    pairs = match.point_to_point
    return _Matched(
        ranks=ranks,
        collectives=rows_of(_known_group(collectives), Collective),
        collective_ranks=rows_of(_known_group(match.ranks), CollectiveRank) if rank_rows else [],
        mismatches=rows_of(_known_group(match.mismatches), Mismatch),
        groups=rows_of(_known_group(match.groups), Group),
        point_to_point=rows_of(_known_group(pairs), Pair),
        ambiguity=_ambiguity(match.ambiguous),
        ambiguous=rows_of(match.ambiguous, AmbiguousEvent) if rank_rows else [],
        utilisation=rows_of(run.utilisation, IterationUtilisation),
        stragglers=Stragglers(
            iterations=rows_of(stragglers.iterations, StragglerIteration),
            ranks=rows_of(stragglers.ranks, StragglerRank),
        ),
        collective_groups=collectives.get_column("group").n_unique(),
        complete_collectives=int(collectives.get_column("complete").sum()),
        incomplete=_incomplete(collectives, len(ranks)),
        ambiguous_events=match.ambiguous.height,
        collectives_by_wait=_order(collectives, pl.col("total_wait_ns")),
        pairs_by_wait=_order(
            pairs, pl.col("send_wait_ns").fill_null(0) + pl.col("recv_wait_ns").fill_null(0)
        ),
        wait_by_rank=_wait_by_rank(match),
        wait_by_rank_iteration=_wait_by_rank_iteration(match, run.overlap.windows),
    )


# ---------------------------------------------------------------- Horovod


def _horovod_section(run: Run, warnings: list[str]) -> Horovod:
    """Return the ``horovod`` object of the report; its warnings are added to ``warnings``."""
    from timeline.analysis.horovod_phases import (
        analyze_horovod,
        attribute_horovod_phases,
        horovod_limitations,
    )

    trace, link_gbps = run.trace, run.options.link_gbps
    events = trace.events
    clock = _horovod_clock(trace)
    analysis = analyze_horovod(events, link_gbps=link_gbps, clock=clock)
    attribution = None
    limitations = analysis.limitations
    if events.filter((pl.col("source") == "kineto") & (pl.col("rank") == 0)).height and clock == "epoch":
        attributed = attribute_horovod_phases(run.full_ranks([0]))
        warnings.extend(attributed.warnings)
        limitations = horovod_limitations(clock=clock, with_framework_trace=True)
        attribution = HorovodAttribution(
            writer_rank=attributed.writer_rank, iterations=rows_of(attributed.iterations, HorovodIteration)
        )
    implausible = _implausible(analysis.batches)
    too_fast = implausible_warning(implausible, link_gbps)
    if too_fast is not None:
        warnings.append(f"horovod fused batches: {too_fast}")
    tensors, batches, negotiation = analysis.tensors, analysis.batches, analysis.negotiation
    return Horovod(
        totals=rows_of(analysis.totals, HorovodTotals)[0],
        tensors=rows_of(tensors, HorovodTensor),
        batches=rows_of(batches, HorovodBatch),
        negotiation=rows_of(negotiation, HorovodNegotiation),
        limitations=list(limitations),
        attribution=attribution,
        implausible_batches=implausible,
        batches_by_bytes=_order(batches, pl.col("bytes")),
        tensors_by_time=_order(tensors, pl.col("wire_ns") + pl.col("negotiation_ns")),
        negotiation_by_caused_wait=_order(negotiation, pl.col("caused_wait_ns")),
    )


def _horovod_clock(trace: Trace) -> str | None:
    clocks = trace.files.filter(pl.col("format") == "horovod").get_column("clock").to_list()
    return clocks[0] if clocks else None


def build_collectives_report(run: Run, *, rank_rows: bool = True) -> CollectivesReport:
    """Return everything ``timeline collectives`` prints (the ``--json`` layout).

    Every figure is one of the run's facts (:class:`timeline.run.Run`): its one matching of the
    collectives, its stragglers and utilisation; the Horovod phases set against the compute of the
    rank that wrote the timeline (:meth:`~timeline.run.Run.full_ranks`). ``rank_rows=False`` leaves
    ``collective_ranks`` (a row per collective per rank: the largest part on many ranks) and
    ``ambiguous`` (a row per event whose group is ambiguous) empty, for the tables, which do not
    print them.

    Raises
    ------
    TypeError
        ``run`` is not a :class:`~timeline.run.Run` (named).
    UsageError
        No communication events in the traces.
    """
    check_run(run)
    trace = run.trace
    has_horovod = trace.events.filter(pl.col("source") == "horovod").height > 0
    if not run.kineto_communication and not has_horovod:
        msg = (
            "no communication events in the traces: nothing to match "
            "(is --comm-kernel needed for custom kernels?)"
        )
        raise UsageError(msg)
    warnings = list(run.warnings)
    matched = _Matched()
    if run.kineto_communication:
        matched = _matched(run, rank_rows=rank_rows)
        warnings.extend(run.matched.warnings)
    horovod = _horovod_section(run, warnings) if has_horovod else None
    offsets = run.offsets
    return CollectivesReport(
        files=rows_of(trace.files, FileRow),
        warnings=warnings,
        link_gbps=run.options.link_gbps,
        clock_offsets=None if offsets is None else rows_of(offsets, ClockOffset),
        ranks=matched.ranks,
        collectives=matched.collectives,
        collective_ranks=matched.collective_ranks,
        mismatches=matched.mismatches,
        gpus_per_node=run.options.gpus_per_node,
        groups=matched.groups,
        point_to_point=matched.point_to_point,
        ambiguity=matched.ambiguity,
        ambiguous=matched.ambiguous,
        utilisation=matched.utilisation,
        stragglers=matched.stragglers,
        horovod=horovod,
        collective_groups=matched.collective_groups,
        complete_collectives=matched.complete_collectives,
        incomplete=matched.incomplete,
        ambiguous_events=matched.ambiguous_events,
        collectives_by_wait=matched.collectives_by_wait,
        pairs_by_wait=matched.pairs_by_wait,
        wait_by_rank=matched.wait_by_rank,
        wait_by_rank_iteration=matched.wait_by_rank_iteration,
        costs=rows_of(run.collective_costs, CollectiveCost) if run.kineto_communication else [],
    )
