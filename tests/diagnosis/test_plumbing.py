"""The diagnosis' plumbing made for speed gives what the plain definitions give.

The events near the diagnosed windows (:func:`timeline.diagnosis.parts._near`, spans tested one by
one or joined) and the launch gaps per window (:func:`timeline.diagnosis.diagnosis._gaps_by_window`),
each against a plain-Python reference; and a replayer replays its own graph once per scenario.
"""

from __future__ import annotations

import random
import sys

import polars as pl
import pytest

from timeline.diagnosis import diagnosis as diagnosis_module
from timeline.diagnosis import parts


def _random_events(seed: int, ranks: int, n: int) -> pl.DataFrame:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        start = rng.randrange(0, 10_000)
        rows.append((rng.randrange(ranks), start, start + rng.randrange(0, 500)))
    return pl.DataFrame(
        rows, schema={"rank": pl.Int32, "start_ns": pl.Int64, "end_ns": pl.Int64}, orient="row"
    )


def _random_bounds(seed: int, ranks: int, n: int) -> pl.DataFrame:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        lo = rng.randrange(0, 10_000)
        rows.append((rng.randrange(ranks), lo, lo + rng.randrange(1, 2_000)))
    return pl.DataFrame(rows, schema={"rank": pl.Int32, "_lo": pl.Int64, "_hi": pl.Int64}, orient="row")


@pytest.mark.parametrize("spans", [0, 1, 3, parts._FEW_BOUNDS, parts._FEW_BOUNDS + 1, 200])
def test_events_near_the_spans_are_those_that_overlap_a_span_of_their_rank(spans: int) -> None:
    events = _random_events(spans, ranks=4, n=2_000)
    bounds = _random_bounds(spans + 1, ranks=4, n=spans)
    got = events.with_columns(near=parts._near(events, bounds)).get_column("near").to_list()
    spans_of = [(r, lo, hi) for r, lo, hi in bounds.iter_rows()]
    expected = [
        any(r == rank and end >= lo and start < hi for r, lo, hi in spans_of)
        for rank, start, end in events.iter_rows()
    ]
    assert got == expected


def _gaps() -> pl.DataFrame:
    rows = [
        (0, 1, 10, 15),
        (1, 1, 12, 20),
        (0, 1, 30, 31),
        (0, 2, 40, 49),
        (1, None, 50, 52),
        (0, 3, 60, 60),
        (1, 2, 70, 75),
        (0, 1, 80, 90),
    ]
    return pl.DataFrame(
        rows,
        schema={"rank": pl.Int32, "iteration": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64},
        orient="row",
    )


def _reference(
    gaps: pl.DataFrame, iterations: tuple[int | None, ...]
) -> tuple[dict[tuple[int | None, int], int], dict[tuple[int | None, int], tuple[tuple[int, int], ...]]]:
    whole = iterations == (None,)
    totals: dict[tuple[int | None, int], int] = {}
    intervals: dict[tuple[int | None, int], list[tuple[int, int]]] = {}
    for rank, iteration, start, end in gaps.iter_rows():
        key = (None if whole else iteration, rank)
        if key[0] in iterations:
            intervals.setdefault(key, []).append((start, end))
            totals[key] = totals.get(key, 0) + end - start
    return totals, {k: tuple(v) for k, v in intervals.items()}


@pytest.mark.parametrize("iterations", [(None,), (1,), (1, 2), (2, 3, 7), (1, None), ()])
def test_launch_gaps_per_window_are_summed_and_kept_in_order(iterations: tuple[int | None, ...]) -> None:
    gaps = _gaps()
    totals, intervals = diagnosis_module._gaps_by_window(gaps, iterations)
    expected_totals, expected_intervals = _reference(gaps, iterations)
    assert totals == expected_totals
    assert intervals == expected_intervals
    assert list(intervals) == list(expected_intervals)


def test_a_replayer_replays_its_own_graph_once_per_scenario(monkeypatch: pytest.MonkeyPatch) -> None:
    from timeline import analyze
    from timeline.diagnosis.diagnosis import diagnosis_graph
    from timeline.diagnosis.facts import facts_of
    from timeline.diagnosis.replays import Replayer
    from timeline.whatif import Scenario

    analysed = analyze("sample_traces/ddp_gloo")
    facts = facts_of(analysed.overlap)
    replayer = Replayer(diagnosis_graph(analysed.trace, analysed.overlap), facts.iterations, facts.step_ns)
    module = sys.modules["timeline.whatif.engine"]  # the package's name `replay` is the function
    calls: list[object] = []
    original = module.window_lengths

    def counted(*args: object, **kwargs: object) -> object:
        calls.append(kwargs.get("scenario"))
        return original(*args, **kwargs)

    monkeypatch.setattr(module, "window_lengths", counted)
    slow = Scenario(bandwidth_gbps=0.5, efficiency="full")
    first = [replayer.replayed_step(scenario=slow), replayer.replayed_step(), replayer.predict(scenario=slow)]
    again = [replayer.replayed_step(scenario=slow), replayer.replayed_step(), replayer.predict(scenario=slow)]
    assert first == again
    assert calls == [slow]  # the self-replay was made when the replayer was built


def _removed_before(removals: list[tuple[int, int]], t: int) -> int:
    """``|R ∩ (−∞, t)|`` of a union of intervals, point by point (the definition of a contraction)."""
    covered: set[int] = set()
    for a, b in removals:
        covered.update(range(a, min(b, t)))
    return len(covered)


@pytest.mark.parametrize("rows", [1, 7, 300, 3_000, 9_000])
def test_contracted_times_are_the_times_less_what_was_removed_before_them(rows: int) -> None:
    """Mapped value by value (up to ``_FEW_ROWS`` rows of mapped ranks) and by the join (beyond)."""
    from timeline.whatif import transform

    rng = random.Random(rows)
    removals = {0: [(100, 150), (120, 180), (400, 420)], 2: [(0, 10), (990, 1_000)]}
    frame = pl.DataFrame(
        [
            (rng.randrange(4), rng.randrange(1_000), rng.randrange(1_000), rng.randrange(3))
            for _ in range(rows)
        ],
        schema={"rank": pl.Int32, "start_ns": pl.Int64, "end_ns": pl.Int64, "window_id": pl.Int64},
        orient="row",
    )
    maps = {rank: transform._Contraction(spans) for rank, spans in removals.items()}
    got = transform._map_frame(frame, maps)
    expected = [
        (r, s - _removed_before(removals.get(r, []), s), e - _removed_before(removals.get(r, []), e), w)
        for r, s, e, w in frame.iter_rows()
    ]
    assert got.schema == frame.schema
    assert list(got.iter_rows()) == expected
