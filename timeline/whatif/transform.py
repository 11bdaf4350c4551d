"""Changes to a run's graph that a fix would make, for the replay to re-time.

Takes a :class:`~timeline.whatif.graph.TraceGraph` and gives another, to replay
(:func:`~timeline.whatif.engine.replay`, :func:`~timeline.whatif.engine.window_lengths`) under the
measured conditions or any :class:`~timeline.whatif.engine.Scenario`:

- :func:`restrict`: only some iterations (their windows, and the compute, collectives, waits and
  gradients in them): a replay of the median iteration costs a fraction of the whole trace's;
- :func:`contract`: time removed from ranks' timelines, as if it had never been spent (a late
  rank's extra idle or compute, every rank's input stall, the device's launch gaps): everything
  the rank did after a removed interval happens earlier by its length;
- :func:`launch_when_ready`: each gradient collective ready as soon as the gradients it carries
  are, instead of when the job asked for it (communication issued after the backward pass).

Each is a pure function of the graph: the measured numbers it keeps are kept exactly, so
replaying an unchanged graph still reproduces the trace. ``docs/diagnosis.md`` says which fix uses
which change.
"""

from __future__ import annotations

import bisect
import itertools
import operator
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import replace

import msgspec
import polars as pl

from timeline.analysis.intervals import merged
from timeline.whatif.graph import CommOp, Gradient, TraceGraph, WaitPoint

__all__ = ["Removals", "contract", "launch_when_ready", "restrict"]

Removals = Mapping[int, Sequence[tuple[int, int]]]
"""Per rank, measured intervals ``[start_ns, end_ns)`` of its timeline to remove."""


def restrict(graph: TraceGraph, iterations: Collection[int]) -> TraceGraph:
    """Return the graph of some iterations only.

    Kept: the windows of these iterations; the compute intervals that overlap a kept window of
    their rank; the collectives and gradients located in a kept window; the waits whose compute
    resumes inside one (their dependencies on dropped collectives left out); each logical
    collective's members that were kept. Nothing kept is changed, so each kept window replays as
    in the whole graph, but for what earlier iterations left running into it.

    Parameters
    ----------
    graph
        The run's graph.
    iterations
        ``ProfilerStep`` numbers to keep.

    Returns
    -------
    TraceGraph
    """
    wanted = set(iterations)
    windows = graph.windows.filter(pl.col("iteration").is_in(sorted(wanted)))
    kept_windows = set(windows.get_column("window_id").to_list())
    spans = _spans_by_rank(windows)
    compute = _overlapping(graph.compute, windows)
    ops = tuple(o for o in graph.ops if o.window_id in kept_windows)
    kept_ops = {o.op_id for o in ops}
    instances = []
    for inst in graph.instances:
        members = [(op, lag) for op, lag in zip(inst.ops, inst.lags_ns, strict=True) if op in kept_ops]
        if len(members) == len(inst.ops):
            instances.append(inst)
        elif members:
            instances.append(
                msgspec.structs.replace(
                    inst, ops=tuple(m[0] for m in members), lags_ns=tuple(m[1] for m in members)
                )
            )
    waits = tuple(_kept_deps(w, kept_ops) for w in graph.waits if _inside(spans.get(w.rank, []), w.resume_ns))
    gradients = tuple(g for g in graph.gradients if g.window_id in kept_windows)
    return replace(
        graph,
        windows=windows,
        compute=compute,
        ops=ops,
        instances=tuple(instances),
        waits=waits,
        gradients=gradients,
    )


def _kept_deps(wait: WaitPoint, kept_ops: set[int]) -> WaitPoint:
    """Return the wait without its dependencies on collectives not kept (itself when none is dropped)."""
    deps = tuple(d for d in wait.deps if d in kept_ops)
    if len(deps) == len(wait.deps):
        return wait
    return msgspec.structs.replace(wait, deps=deps)


def _spans_by_rank(windows: pl.DataFrame) -> dict[int, list[tuple[int, int]]]:
    spans: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for rank, start, end in windows.select("rank", "start_ns", "end_ns").iter_rows():
        spans[rank].append((start, end))
    for values in spans.values():
        values.sort()
    return dict(spans)


def _inside(spans: list[tuple[int, int]], t: int) -> bool:
    return any(start <= t < end for start, end in spans)


def _overlapping(intervals: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """Return the intervals (``rank``, ``start_ns``, ``end_ns``) that overlap a window of their rank."""
    if intervals.height == 0 or windows.height == 0:
        return intervals.clear()
    bounds = windows.lazy().select("rank", _w0="start_ns", _w1="end_ns")
    hits = (
        intervals.lazy()
        .with_row_index("_row")
        .join(bounds, on="rank", how="inner")
        .filter((pl.col("start_ns") < pl.col("_w1")) & (pl.col("end_ns") > pl.col("_w0")))
        .select(pl.col("_row").unique())
        .collect(engine="in-memory")
        .get_column("_row")
    )
    return (
        intervals.lazy()
        .with_row_index("_row")
        .filter(pl.col("_row").is_in(hits.implode()))
        .drop("_row")
        .collect(engine="in-memory")
    )


class _Contraction:
    """The map ``φ(t) = t − |removed ∩ (−∞, t)|`` of one rank's removals (sorted, disjoint).

    With ``k`` the last removed interval that starts at or before ``t``: ``φ(t) = landing[k] +
    max(0, t − ends[k])``, where ``landing[k]``, what interval ``k`` maps to, is its start less what
    was removed before it (``φ(t) = t`` before the first one).
    """

    __slots__ = ("ends", "landing", "starts")

    def __init__(self, removals: Iterable[tuple[int, int]]) -> None:
        pairs = sorted(removals)
        starts = [a for a, _ in pairs]
        ends = [b for _, b in pairs]
        gaps = list(map(operator.sub, starts[1:], ends))
        # already disjoint, none empty and none touching (the usual case), else their union
        if not (all(map(operator.lt, starts, ends)) and (not gaps or min(gaps) > 0)):
            union = merged(pairs)
            starts, ends = [a for a, _ in union], [b for _, b in union]
            gaps = list(map(operator.sub, starts[1:], ends))
        self.starts = starts
        self.ends = ends
        self.landing: list[int] = list(itertools.accumulate(gaps, initial=starts[0])) if starts else []

    def __call__(self, t: int) -> int:
        k = bisect.bisect_right(self.starts, t) - 1
        if k < 0:
            return t
        end = self.ends[k]
        return self.landing[k] + (t - end if t > end else 0)


def contract(graph: TraceGraph, removals: Removals) -> TraceGraph:
    """Return the graph with time removed from ranks' timelines, as if never spent.

    On a rank with removed intervals ``R``, every measured time ``t`` of the rank becomes
    ``φ(t) = t − |R ∩ (−∞, t)|``: its compute intervals (shortened where they overlap ``R``, dropped
    when nothing is left), its windows, its collectives' ready, start and end times, its waits and
    its gradients. A launch delay or a resume delay longer than what is left of its span is cut to
    it. Other ranks and every logical collective's measured transfer and lags are unchanged: a
    replay then tells what the others gain when this rank arrives earlier.

    Parameters
    ----------
    graph
        The run's graph.
    removals
        Per rank, intervals ``[start_ns, end_ns)`` of measured time to remove (they may overlap).

    Returns
    -------
    TraceGraph
    """
    maps = {rank: _Contraction(intervals) for rank, intervals in removals.items() if intervals}
    if not maps:
        return graph
    return replace(
        graph,
        windows=_map_frame(graph.windows, maps),
        compute=_map_frame(graph.compute, maps).filter(pl.col("end_ns") > pl.col("start_ns")),
        ops=tuple(_map_op(o, maps[o.rank]) if o.rank in maps else o for o in graph.ops),
        waits=tuple(_map_wait(w, maps[w.rank]) if w.rank in maps else w for w in graph.waits),
        gradients=tuple(_map_gradient(g, maps[g.rank]) if g.rank in maps else g for g in graph.gradients),
    )


_FEW_ROWS = 1024
"""Up to this many rows of the ranks mapped, :func:`_map_frame` maps each time in Python.

The join costs about 2 ms whatever the size; Python about 2.4 µs a row (measured on 300 to 30,000
rows): they cost the same at about 1,000 rows.
"""


def _map_frame(frame: pl.DataFrame, maps: Mapping[int, _Contraction]) -> pl.DataFrame:
    """Apply each rank's map to ``start_ns`` and ``end_ns`` (other columns and row order kept).

    In polars: each time joins the last removed interval of its rank that starts at or before it
    (the start and end times in one column: sorted once, joined once, put back in place); when few
    rows are of ranks with a map (the windows: a few per rank; one rank's compute intervals of a
    few iterations), each time is mapped value by value, which costs less than the join.
    """
    if frame.height <= 8 * _FEW_ROWS:
        ranks = frame.get_column("rank").to_list()
        if sum(r in maps for r in ranks) > _FEW_ROWS:
            return _joined(frame, maps)
        return frame.with_columns(
            pl.Series(
                column,
                [
                    t if t is None or r not in maps else maps[r](t)
                    for r, t in zip(ranks, frame.get_column(column).to_list(), strict=True)
                ],
                dtype=frame.schema[column],
            )
            for column in ("start_ns", "end_ns")
        )
    return _joined(frame, maps)


def _joined(frame: pl.DataFrame, maps: Mapping[int, _Contraction]) -> pl.DataFrame:
    """:func:`_map_frame` in polars: one join of every time with its rank's removed intervals."""
    table = pl.DataFrame(
        {
            "rank": list(itertools.chain.from_iterable([r] * len(m.starts) for r, m in maps.items())),
            "_a": list(itertools.chain.from_iterable(m.starts for m in maps.values())),
            "_b": list(itertools.chain.from_iterable(m.ends for m in maps.values())),
            "_landing": list(itertools.chain.from_iterable(m.landing for m in maps.values())),
        },
        schema={"rank": frame.schema["rank"], "_a": pl.Int64, "_b": pl.Int64, "_landing": pl.Int64},
    ).sort("_a")
    # the start times, then the end times, in one column: sorted for the join, mapped, put back
    times = pl.concat([frame.get_column(c).cast(pl.Int64) for c in ("start_ns", "end_ns")])
    rank_column = frame.get_column("rank")
    order = times.arg_sort()
    mapped = (
        pl.DataFrame({"rank": pl.concat([rank_column, rank_column]).gather(order), "_t": times.gather(order)})
        .join_asof(table, left_on="_t", right_on="_a", by="rank", strategy="backward", check_sortedness=False)
        .select(pl.coalesce(pl.col("_landing") + (pl.col("_t") - pl.col("_b")).clip(lower_bound=0), "_t"))
        .to_series()
    )
    times = times.clone().scatter(order, mapped)
    return frame.with_columns(
        times.slice(0, frame.height).alias("start_ns"), times.slice(frame.height).alias("end_ns")
    )


def _map_op(op: CommOp, phi: _Contraction) -> CommOp:
    """Apply a rank's map to its collective's ready, start and end times (the launch delay cut to fit)."""
    ready, start = phi(op.ready_ns), phi(op.start_ns)
    return _moved_op(op, ready, start, phi(op.end_ns), min(op.launch_delay_ns, start - ready))


def _moved_op(op: CommOp, ready_ns: int, start_ns: int, end_ns: int, launch_delay_ns: int) -> CommOp:
    """Return ``op`` with these times (itself when they are its own)."""
    if (
        ready_ns == op.ready_ns
        and start_ns == op.start_ns
        and end_ns == op.end_ns
        and launch_delay_ns == op.launch_delay_ns
    ):
        return op
    return msgspec.structs.replace(
        op, ready_ns=ready_ns, start_ns=start_ns, end_ns=end_ns, launch_delay_ns=launch_delay_ns
    )


def _map_wait(wait: WaitPoint, phi: _Contraction) -> WaitPoint:
    gap_start, resume = phi(wait.gap_start_ns), phi(wait.resume_ns)
    delay = None if wait.resume_delay_ns is None else min(wait.resume_delay_ns, resume - gap_start)
    return msgspec.structs.replace(wait, gap_start_ns=gap_start, resume_ns=resume, resume_delay_ns=delay)


def _map_gradient(gradient: Gradient, phi: _Contraction) -> Gradient:
    return msgspec.structs.replace(gradient, ready_ns=phi(gradient.ready_ns))


def launch_when_ready(graph: TraceGraph) -> TraceGraph:
    """Return the graph with each gradient collective ready as soon as the gradients it carries are.

    Per rank and window, the gradient collectives in order of their ready time carry the gradients
    in order of theirs, byte for byte: collective ``k`` is ready when the gradients ready so far add
    up to the bytes of collectives ``1..k`` (nccl-tests' convention for both): the schedule of a job
    that reduces each gradient as soon as it is ready, in the order gradients become ready (DDP's
    buckets, wait-free back-propagation). Only gradients a signal gave count (markers,
    ``AccumulateGrad`` ops); when their bytes do not add up to the collectives' (bytes shared out of
    the collective that carried them, :mod:`timeline.whatif.graph`), each counts for its share of the
    collectives' total, in proportion to its own bytes (equal shares when it has none).
    A collective is never made ready later than it was; one without bytes keeps its ready time, and
    so does every collective of a window whose gradients carry no bytes at all.

    Parameters
    ----------
    graph
        The run's graph (gradient-ready times from markers or ``AccumulateGrad`` ops).

    Returns
    -------
    TraceGraph
    """
    by_window: dict[tuple[int, int | None], list[CommOp]] = defaultdict(list)
    for op in graph.ops:
        if op.gradient:
            by_window[(op.rank, op.window_id)].append(op)
    grads: dict[tuple[int, int | None], list[Gradient]] = defaultdict(list)
    for g in graph.gradients:
        if g.signal:  # a collective standing in for its gradients says nothing of when they were ready
            grads[(g.rank, g.window_id)].append(g)
    ready: dict[int, int] = {}
    for key, ops in by_window.items():
        ready.update(_ready_by_bytes(sorted(ops, key=lambda o: (o.ready_ns, o.start_ns)), grads.get(key, [])))
    if not ready:
        return graph
    return replace(
        graph,
        ops=tuple(
            msgspec.structs.replace(o, ready_ns=ready[o.op_id]) if o.op_id in ready else o for o in graph.ops
        ),
    )


def _ready_by_bytes(ops: Sequence[CommOp], gradients: Sequence[Gradient]) -> dict[int, int]:
    """Return the earlier ready times of ``ops`` (in order) from the cumulative bytes of ``gradients``."""
    if not gradients or any(o.nbytes is None for o in ops):
        return {}
    ordered = sorted(gradients, key=lambda g: g.ready_ns)
    needed_total = sum(o.nbytes or 0 for o in ops)
    have_total = sum(g.nbytes for g in ordered)
    if needed_total <= 0:
        return {}
    if have_total <= 0:
        have_total = len(ordered)
        shares = [needed_total / len(ordered)] * len(ordered)
    else:
        shares = [g.nbytes * needed_total / have_total for g in ordered]
    cumulative: list[float] = []
    total = 0.0
    for share in shares:
        total += share
        cumulative.append(total)
    out: dict[int, int] = {}
    needed = 0
    for op in ops:
        needed += op.nbytes or 0
        k = bisect.bisect_left(cumulative, needed * (1 - 1e-9))
        at = ordered[min(k, len(ordered) - 1)].ready_ns
        if at < op.ready_ns:
            out[op.op_id] = at
    return out
