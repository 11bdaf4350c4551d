"""Interval algebra on polars frames: unions, boolean combinations of interval sets, clipping.

Takes frames of half-open intervals ``[start_ns, end_ns)`` with group keys and gives lengths and
intervals, vectorised (one sort of the boundaries per call, no Python loop over events). Intervals
within one set may overlap: a set is the union of its intervals.

The central tool is :func:`measure`: a sweep over all boundaries of several sets that counts, per
group, how long any boolean formula of set membership holds, e.g. ``comm & ~compute`` (exposed
communication). Zero-length and touching intervals contribute nothing, whatever their order.

For the few intervals of one rank that a rule or a replay walks in Python, :func:`merged`,
:func:`overlap_ns` and :func:`total_ns` do the same on lists of ``(start_ns, end_ns)`` pairs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

import polars as pl

__all__ = [
    "Formula",
    "clip_to_windows",
    "covered_length",
    "covered_within",
    "formula_intervals",
    "measure",
    "measure_sweep",
    "measure_windows",
    "merged",
    "overlap_ns",
    "sweep",
    "sweep_intervals",
    "total_ns",
    "union_intervals",
]

Formula = Callable[[Mapping[str, pl.Expr]], pl.Expr]
"""A boolean expression over set membership: ``lambda s: s["comm"] & ~s["compute"]``."""


def union_intervals(intervals: pl.DataFrame, *, by: Sequence[str]) -> pl.DataFrame:
    """Return the union of intervals per group as disjoint, sorted intervals.

    Parameters
    ----------
    intervals
        Columns ``by`` + ``start_ns``, ``end_ns``.
    by
        Group keys.

    Returns
    -------
    pl.DataFrame
        Columns ``by`` + ``start_ns``, ``end_ns``; within a group, sorted and disjoint (touching
        intervals are merged).
    """
    keys = list(by)
    if intervals.height == 0:
        return intervals.select(*keys, "start_ns", "end_ns")
    return _union_lazy(intervals.lazy(), keys).collect(engine="in-memory")


def _union_lazy(intervals: pl.LazyFrame, keys: list[str]) -> pl.LazyFrame:
    """:func:`union_intervals` as a lazy query (for callers that chain it into their own)."""
    ordered = intervals.select(*keys, "start_ns", "end_ns").filter(pl.col("end_ns") > pl.col("start_ns"))
    ordered = ordered.sort([*keys, "start_ns"])
    reach = pl.col("end_ns").cum_max().shift(1)
    if keys:
        reach = reach.over(keys)
    segment = (pl.col("start_ns") > reach).fill_null(True).cast(pl.UInt32).cum_sum()
    if keys:
        segment = segment.over(keys)
    return (
        ordered.with_columns(_segment=segment)
        .group_by([*keys, "_segment"], maintain_order=True)
        .agg(pl.col("start_ns").min(), pl.col("end_ns").max())
        .drop("_segment")
    )


def sweep(
    intervals: pl.DataFrame,
    *,
    by: Sequence[str],
    sets: Sequence[str],
    cuts: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Return the sorted boundaries of all sets with, after each, the open count of every set.

    One sweep answers several questions (:func:`measure_sweep`, :func:`measure_windows`,
    :func:`sweep_intervals`): the boundaries are sorted once.

    Parameters
    ----------
    intervals
        Columns ``by`` + ``set`` (one of ``sets``) + ``start_ns``, ``end_ns``.
    by
        Group keys.
    sets
        The set names.
    cuts
        Extra boundaries (columns ``by`` + ``_t``) where no set changes: the edges of the windows
        :func:`measure_windows` measures in, so that no stretch between two boundaries crosses one.

    Returns
    -------
    pl.DataFrame
        Columns ``by`` + ``_t`` (the boundary), ``_c_<set>`` (intervals of that set open just after
        ``_t``) and ``_dt`` (time to the next boundary of the group; 0 after the last). Of several
        boundaries at one time, only the last has a non-zero ``_dt``, with the counts after all of
        them.
    """
    return _sweep_lazy(intervals, list(by), sets, cuts).collect(engine="in-memory")


def _sweep_lazy(
    intervals: pl.DataFrame, keys: list[str], sets: Sequence[str], cuts: pl.DataFrame | None
) -> pl.LazyFrame:
    """:func:`sweep` as a lazy query (for callers that chain it into their own)."""
    base = intervals.lazy().filter(pl.col("end_ns") > pl.col("start_ns"))
    deltas = [
        pl.when(pl.col("set") == name).then(1).otherwise(0).cast(pl.Int32).alias(f"_d_{name}")
        for name in sets
    ]
    starts = base.select(*keys, pl.col("start_ns").alias("_t"), *deltas)
    ends = base.select(
        *keys, pl.col("end_ns").alias("_t"), *[(-d).alias(d.meta.output_name()) for d in deltas]
    )
    parts = [starts, ends]
    if cuts is not None:
        zero = [pl.lit(0, dtype=pl.Int32).alias(f"_d_{name}") for name in sets]
        dtypes: dict[str, pl.DataType] = {key: intervals.schema[key] for key in keys}
        dtypes["_t"] = intervals.schema["start_ns"]
        parts.append(cuts.lazy().select(*keys, "_t", *zero).cast(pl.Schema(dtypes)))
    bounds = pl.concat(parts).sort([*keys, "_t"])

    def per_group(expr: pl.Expr) -> pl.Expr:
        return expr.over(keys) if keys else expr

    counts = [per_group(pl.col(f"_d_{name}").cum_sum()).alias(f"_c_{name}") for name in sets]
    return bounds.with_columns(*counts, _dt=(per_group(pl.col("_t").shift(-1)) - pl.col("_t")).fill_null(0))


def _membership(sets: Sequence[str]) -> dict[str, pl.Expr]:
    return {name: pl.col(f"_c_{name}") > 0 for name in sets}


def measure(
    intervals: pl.DataFrame,
    *,
    by: Sequence[str],
    sets: Sequence[str],
    formulas: Mapping[str, Formula],
) -> pl.DataFrame:
    """Return, per group, how long each boolean formula of set membership holds.

    Parameters
    ----------
    intervals
        Columns ``by`` + ``set`` (one of ``sets``) + ``start_ns``, ``end_ns``.
    by
        Group keys (e.g. ``["rank"]`` or ``["rank", "iteration"]``).
    sets
        The set names.
    formulas
        Output column name → formula over membership expressions (``s[name]`` is true where at
        least one interval of that set is open).

    Returns
    -------
    pl.DataFrame
        Columns ``by`` + one Int64 column per formula (nanoseconds). Groups without intervals are
        absent.

    Examples
    --------
    >>> frame = pl.DataFrame({"g": [0, 0], "set": ["a", "b"], "start_ns": [0, 5], "end_ns": [10, 20]})
    >>> measure(frame, by=["g"], sets=["a", "b"], formulas={"both": lambda s: s["a"] & s["b"]})["both"].item()
    5
    """
    keys = list(by)
    bounds = _sweep_lazy(intervals, keys, sets, None)
    aggs = _formula_sums(sets, formulas)
    measured = bounds.group_by(keys, maintain_order=True).agg(aggs) if keys else bounds.select(aggs)
    return measured.collect(engine="in-memory")


def _formula_sums(sets: Sequence[str], formulas: Mapping[str, Formula]) -> list[pl.Expr]:
    member = _membership(sets)
    return [
        pl.col("_dt").filter(formula(member)).sum().cast(pl.Int64).alias(out)
        for out, formula in formulas.items()
    ]


def measure_sweep(
    bounds: pl.DataFrame, *, by: Sequence[str], sets: Sequence[str], formulas: Mapping[str, Formula]
) -> pl.DataFrame:
    """:func:`measure` on the boundaries of :func:`sweep` (the same ``by`` and ``sets``)."""
    keys = list(by)
    aggs = _formula_sums(sets, formulas)
    if not keys:
        return bounds.select(aggs)
    return bounds.group_by(keys, maintain_order=True).agg(aggs)


def measure_windows(
    bounds: pl.DataFrame,
    windows: pl.DataFrame,
    *,
    by: Sequence[str],
    sets: Sequence[str],
    formulas: Mapping[str, Formula],
) -> pl.DataFrame:
    """Return, per window, how long each formula holds inside it: :func:`measure` of the clipped sets.

    Parameters
    ----------
    bounds
        :func:`sweep` of the sets, with the window edges among its ``cuts``.
    windows
        Columns ``by`` + ``window_id`` + ``w_start``, ``w_end``; disjoint within a group.
    by, sets, formulas
        As for :func:`measure`.

    Returns
    -------
    pl.DataFrame
        Columns ``by`` + ``window_id`` + one Int64 column per formula. Windows where nothing holds
        are absent.
    """
    keys = list(by)
    # every stretch between two boundaries lies inside one window or outside all of them
    located = (
        bounds.lazy()
        .filter(pl.col("_dt") > 0)
        .sort("_t")
        .join_asof(
            windows.lazy().select(*keys, "window_id", "w_start", "w_end").sort("w_start"),
            left_on="_t",
            right_on="w_start",
            by=keys or None,
            strategy="backward",
            check_sortedness=False,
        )
        .filter(pl.col("_t") < pl.col("w_end"))
    )
    return (
        located.group_by([*keys, "window_id"], maintain_order=True)
        .agg(_formula_sums(sets, formulas))
        .collect(engine="in-memory")
    )


def formula_intervals(
    intervals: pl.DataFrame, *, by: Sequence[str], sets: Sequence[str], formula: Formula
) -> pl.DataFrame:
    """Return, per group, the disjoint sorted intervals where ``formula`` holds.

    Parameters
    ----------
    intervals
        Columns ``by`` + ``set`` + ``start_ns``, ``end_ns``.
    by
        Group keys.
    sets
        The set names.
    formula
        A boolean formula over set membership.

    Returns
    -------
    pl.DataFrame
        Columns ``by`` + ``start_ns``, ``end_ns``.
    """
    return sweep_intervals(sweep(intervals, by=by, sets=sets), by=by, sets=sets, formula=formula)


def sweep_intervals(
    bounds: pl.DataFrame, *, by: Sequence[str], sets: Sequence[str], formula: Formula
) -> pl.DataFrame:
    """:func:`formula_intervals` on the boundaries of :func:`sweep` (the same ``by`` and ``sets``)."""
    keys = list(by)
    pieces = (
        bounds.lazy()
        .filter(formula(_membership(sets)) & (pl.col("_dt") > 0))
        .select(*keys, start_ns=pl.col("_t"), end_ns=pl.col("_t") + pl.col("_dt"))
    )
    return _union_lazy(pieces, keys).collect(engine="in-memory")


def covered_length(
    union: pl.DataFrame, points: pl.DataFrame, *, by: Sequence[str], at: str, out: str
) -> pl.DataFrame:
    """Add column ``out``: the length of ``union`` before each point (per group).

    With ``F(t) = |union ∩ (-inf, t)|``, the part of any interval ``[a, b)`` covered by the union is
    ``F(b) - F(a)``: one as-of join answers it for every interval at once.

    Parameters
    ----------
    union
        Disjoint, sorted intervals (from :func:`union_intervals`) with columns ``by`` + start/end.
    points
        A frame with columns ``by`` and ``at`` (Int64 ns).
    by
        Group keys.
    at
        The column of ``points`` holding the times.
    out
        The name of the added column.
    """
    keys = list(by)
    prefix = (
        union.lazy()
        .sort([*keys, "start_ns"])
        .with_columns(
            _before=(pl.col("end_ns") - pl.col("start_ns")).cum_sum().over(keys)
            - (pl.col("end_ns") - pl.col("start_ns"))
            if keys
            else (pl.col("end_ns") - pl.col("start_ns")).cum_sum() - (pl.col("end_ns") - pl.col("start_ns")),
        )
    )
    prefix = prefix.rename({"start_ns": "_u_start", "end_ns": "_u_end"})
    order = "_order_covered"
    joined = (
        points.lazy()
        .with_row_index(order)
        .sort(at)
        .join_asof(
            prefix.sort("_u_start"),
            left_on=at,
            right_on="_u_start",
            by=keys or None,
            strategy="backward",
            check_sortedness=False,
        )
    )
    value = (
        pl.when(pl.col("_u_start").is_null())
        .then(0)
        .otherwise(pl.col("_before") + pl.min_horizontal(pl.col(at), pl.col("_u_end")) - pl.col("_u_start"))
    )
    return (
        joined.with_columns(value.cast(pl.Int64).alias(out))
        .sort(order)
        .drop(order, "_u_start", "_u_end", "_before")
        .collect(engine="in-memory")
    )


def covered_within(
    union: pl.DataFrame, spans: pl.DataFrame, *, by: Sequence[str], key: str, out: str
) -> pl.DataFrame:
    """Return columns ``key`` and ``out``: the length of ``union`` inside each span, per group.

    ``F(end_ns) - F(start_ns)`` (:func:`covered_length`, whose ``union`` and ``by`` these are);
    ``spans``: columns ``key`` (one value a span), ``by``, ``start_ns`` and ``end_ns``.
    """
    keys = list(by)
    at_start = covered_length(
        union, spans.select(key, *keys, "start_ns"), by=keys, at="start_ns", out="_covered_start"
    )
    at_end = covered_length(
        union, spans.select(key, *keys, "end_ns"), by=keys, at="end_ns", out="_covered_end"
    )
    return at_start.join(at_end.select(key, "_covered_end"), on=key).select(
        key, (pl.col("_covered_end") - pl.col("_covered_start")).alias(out)
    )


def clip_to_windows(intervals: pl.DataFrame, windows: pl.DataFrame, *, by: Sequence[str]) -> pl.DataFrame:
    """Split intervals at window boundaries and keep the parts inside windows.

    Parameters
    ----------
    intervals
        Columns ``by`` + ``start_ns``, ``end_ns`` and any others (carried along).
    windows
        Columns ``by`` + ``window_id`` + ``w_start``, ``w_end``; disjoint within a group.
    by
        Group keys shared by both frames.

    Returns
    -------
    pl.DataFrame
        The columns of ``intervals`` + ``window_id``, one row per non-empty part of an interval
        inside a window, ``start_ns``/``end_ns`` clipped to the window.
    """
    keys = list(by)
    if intervals.height == 0 or windows.height == 0:
        return intervals.with_columns(
            window_id=pl.lit(None, dtype=windows.schema.get("window_id", pl.Int64))
        ).head(0)
    ordered_windows = (
        windows.lazy()
        .sort([*keys, "w_start"])
        .with_columns(_widx=pl.int_range(pl.len()).over(keys) if keys else pl.int_range(pl.len()))
    )
    starts = ordered_windows.select(*keys, "_widx", _ws=pl.col("w_start"))
    # the first window an interval may reach: the last that starts at or before its start; the last
    # window: the last that starts before its end (none: the interval ends before every window)
    first = _window_index(intervals.lazy().with_row_index("_iid"), starts, at="start_ns", keys=keys)
    located = (
        _window_index(first.rename({"_widx": "_first"}), starts, at="end_ns", keys=keys, exact=False)
        .rename({"_widx": "_last"})
        .filter(pl.col("_last").is_not_null())
        .with_columns(pl.col("_first").fill_null(0))
    )
    exploded = located.with_columns(_widx=pl.int_ranges("_first", pl.col("_last") + 1)).explode("_widx")
    clipped = exploded.join(ordered_windows, on=[*keys, "_widx"], how="inner").with_columns(
        start_ns=pl.max_horizontal("start_ns", "w_start"), end_ns=pl.min_horizontal("end_ns", "w_end")
    )
    return (
        clipped.filter(pl.col("end_ns") > pl.col("start_ns"))
        .sort("_iid", "start_ns")
        .drop("_iid", "_first", "_last", "_widx", "w_start", "w_end")
        .collect(engine="in-memory")
    )


def _window_index(
    intervals: pl.LazyFrame, starts: pl.LazyFrame, *, at: str, keys: list[str], exact: bool = True
) -> pl.LazyFrame:
    """Add ``_widx``: the last of ``starts`` at or before ``at`` (before it, unless ``exact``)."""
    return (
        intervals.sort(at)
        .join_asof(
            starts,
            left_on=at,
            right_on="_ws",
            by=keys or None,
            strategy="backward",
            check_sortedness=False,
            allow_exact_matches=exact,
        )
        .drop("_ws")
    )


# -- plain Python, for the few intervals of one rank -------------------------------------------------


def total_ns(intervals: Iterable[tuple[int, int]]) -> int:
    """Return the summed length of ``[start, end)`` intervals (disjoint)."""
    return sum(b - a for a, b in intervals)


def merged(intervals: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Return the union of ``[start, end)`` intervals (empty ones dropped) as disjoint intervals, by start.

    >>> merged([(5, 7), (0, 2), (1, 3), (4, 4)])
    [(0, 3), (5, 7)]
    """
    out: list[tuple[int, int]] = []
    for a, b in sorted(i for i in intervals if i[1] > i[0]):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def overlap_ns(first: Sequence[tuple[int, int]], second: Sequence[tuple[int, int]]) -> int:
    """Return the length of the intersection of two lists of disjoint intervals, each by start.

    >>> overlap_ns([(0, 3), (5, 7)], [(2, 6)])
    2
    """
    total, j = 0, 0
    for a, b in first:
        while j < len(second) and second[j][1] <= a:
            j += 1
        k = j
        while k < len(second) and second[k][0] < b:
            total += min(b, second[k][1]) - max(a, second[k][0])
            k += 1
    return total
