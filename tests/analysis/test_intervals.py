"""Interval algebra: hand-computed cases and properties against an O(n²) reference."""

from __future__ import annotations

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from timeline.analysis.intervals import (
    clip_to_windows,
    covered_length,
    covered_within,
    formula_intervals,
    measure,
    union_intervals,
)

Interval = tuple[int, int]


def naive_length(intervals: list[Interval]) -> int:
    """|union| by marking every nanosecond: O(total length), obviously right."""
    covered: set[int] = set()
    for a, b in intervals:
        covered.update(range(a, b))
    return len(covered)


def naive_points(intervals: list[Interval]) -> set[int]:
    covered: set[int] = set()
    for a, b in intervals:
        covered.update(range(a, b))
    return covered


def frame_of(sets: dict[str, list[Interval]], group: int = 0) -> pl.DataFrame:
    rows = [(group, name, a, b) for name, items in sets.items() for a, b in items]
    return pl.DataFrame(
        rows, schema={"g": pl.Int64, "set": pl.String, "start_ns": pl.Int64, "end_ns": pl.Int64}, orient="row"
    )


FORMULAS = {
    "a": lambda s: s["a"],
    "b": lambda s: s["b"],
    "both": lambda s: s["a"] & s["b"],
    "a_only": lambda s: s["a"] & ~s["b"],
    "either": lambda s: s["a"] | s["b"],
}


def lengths(sets: dict[str, list[Interval]]) -> dict[str, int]:
    out = measure(frame_of(sets), by=["g"], sets=["a", "b"], formulas=FORMULAS)
    if out.height == 0:
        return dict.fromkeys(FORMULAS, 0)
    return {k: out[k].item() for k in FORMULAS}


def test_union_merges_overlapping_nested_and_touching() -> None:
    frame = frame_of({"a": [(0, 10), (2, 5), (10, 12), (20, 30), (25, 26), (40, 40)]})
    union = union_intervals(frame, by=["g"])
    assert union.select("start_ns", "end_ns").rows() == [(0, 12), (20, 30)]


def test_fully_hidden() -> None:
    assert lengths({"a": [(10, 20)], "b": [(0, 30)]}) == {
        "a": 10,
        "b": 30,
        "both": 10,
        "a_only": 0,
        "either": 30,
    }


def test_fully_exposed() -> None:
    assert lengths({"a": [(0, 10)], "b": [(20, 30)]})["a_only"] == 10


def test_partial_overlap() -> None:
    got = lengths({"a": [(0, 10)], "b": [(6, 30)]})
    assert (got["both"], got["a_only"], got["either"]) == (4, 6, 30)


def test_nested_and_duplicated_intervals_count_once() -> None:
    got = lengths({"a": [(0, 10), (2, 8), (0, 10)], "b": [(3, 4), (3, 4)]})
    assert (got["a"], got["both"], got["a_only"]) == (10, 1, 9)


def test_touching_intervals_do_not_overlap() -> None:
    got = lengths({"a": [(0, 10)], "b": [(10, 20)]})
    assert (got["both"], got["either"]) == (0, 20)


def test_zero_length_intervals_contribute_nothing() -> None:
    got = lengths({"a": [(5, 5), (0, 2)], "b": [(1, 1)]})
    assert (got["a"], got["b"], got["both"]) == (2, 0, 0)


def test_groups_are_independent() -> None:
    frame = pl.concat([frame_of({"a": [(0, 10)], "b": [(5, 15)]}, 0), frame_of({"a": [(0, 10)]}, 1)])
    out = measure(frame, by=["g"], sets=["a", "b"], formulas=FORMULAS).sort("g")
    assert out["both"].to_list() == [5, 0]


def test_formula_intervals_gives_the_pieces() -> None:
    pieces = formula_intervals(
        frame_of({"a": [(0, 10), (20, 30)], "b": [(5, 25)]}),
        by=["g"],
        sets=["a", "b"],
        formula=lambda s: s["a"] & ~s["b"],
    )
    assert pieces.select("start_ns", "end_ns").rows() == [(0, 5), (25, 30)]


def test_covered_length_prefix_function() -> None:
    union = union_intervals(frame_of({"a": [(10, 20), (30, 40)]}), by=["g"])
    points = pl.DataFrame({"g": [0] * 6, "t": [0, 10, 15, 25, 35, 50]})
    got = covered_length(union, points, by=["g"], at="t", out="f")
    assert got["f"].to_list() == [0, 0, 5, 10, 15, 20]


def test_clip_splits_across_windows_and_drops_outside() -> None:
    intervals = pl.DataFrame(
        {"g": [0, 0, 0], "start_ns": [5, 15, 45], "end_ns": [25, 18, 50], "tag": ["x", "y", "z"]}
    )
    windows = pl.DataFrame({"g": [0, 0], "window_id": [1, 2], "w_start": [0, 20], "w_end": [20, 40]})
    got = clip_to_windows(intervals, windows, by=["g"]).sort("start_ns")
    assert got.select("tag", "window_id", "start_ns", "end_ns").rows() == [
        ("x", 1, 5, 20),
        ("y", 1, 15, 18),
        ("x", 2, 20, 25),
    ]


def test_clip_interval_spanning_three_windows() -> None:
    intervals = pl.DataFrame({"g": [0], "start_ns": [5], "end_ns": [95]})
    windows = pl.DataFrame(
        {"g": [0, 0, 0], "window_id": [0, 1, 2], "w_start": [0, 30, 60], "w_end": [30, 60, 90]}
    )
    got = clip_to_windows(intervals, windows, by=["g"])
    assert got.select("window_id", "start_ns", "end_ns").rows() == [(0, 5, 30), (1, 30, 60), (2, 60, 90)]


interval = st.tuples(st.integers(0, 200), st.integers(0, 40)).map(lambda t: (t[0], t[0] + t[1]))
interval_lists = st.lists(interval, max_size=25)


@settings(max_examples=150, deadline=None)
@given(a=interval_lists, b=interval_lists)
def test_matches_naive_reference(a: list[Interval], b: list[Interval]) -> None:
    got = lengths({"a": a, "b": b})
    pa, pb = naive_points(a), naive_points(b)
    assert got == {
        "a": len(pa),
        "b": len(pb),
        "both": len(pa & pb),
        "a_only": len(pa - pb),
        "either": len(pa | pb),
    }


@settings(max_examples=100, deadline=None)
@given(a=interval_lists, b=interval_lists, shift=st.integers(-(10**15), 10**15), seed=st.randoms())
def test_invariant_under_shift_and_order(a: list[Interval], b: list[Interval], shift: int, seed) -> None:  # type: ignore[no-untyped-def]
    base = lengths({"a": a, "b": b})
    moved_a = [(x + shift, y + shift) for x, y in a]
    moved_b = [(x + shift, y + shift) for x, y in b]
    seed.shuffle(moved_a)
    seed.shuffle(moved_b)
    assert lengths({"a": moved_a, "b": moved_b}) == base
    # hidden + exposed = comm
    assert base["both"] + base["a_only"] == base["a"]


@settings(max_examples=100, deadline=None)
@given(a=interval_lists, points=st.lists(st.integers(-5, 260), min_size=1, max_size=10))
def test_covered_length_matches_naive(a: list[Interval], points: list[int]) -> None:
    union = union_intervals(frame_of({"a": a}), by=["g"])
    frame = pl.DataFrame({"g": [0] * len(points), "t": points})
    got = covered_length(union, frame, by=["g"], at="t", out="f")["f"].to_list()
    covered = naive_points(a)
    assert got == [sum(1 for x in covered if x < t) for t in points]


@settings(max_examples=100, deadline=None)
@given(a=interval_lists, spans=st.lists(interval, min_size=1, max_size=10))
def test_covered_within_matches_naive(a: list[Interval], spans: list[Interval]) -> None:
    union = union_intervals(frame_of({"a": a}), by=["g"])
    frame = pl.DataFrame(
        {
            "span": range(len(spans)),
            "g": [0] * len(spans),
            "start_ns": [s for s, _ in spans],
            "end_ns": [e for _, e in spans],
        }
    )
    got = covered_within(union, frame, by=["g"], key="span", out="inside").sort("span")
    covered = naive_points(a)
    assert got["inside"].to_list() == [len(covered & set(range(s, e))) for s, e in spans]
