"""Hostile input (#19): generated, damaged traces give a TimelineError or sound figures, never a crash.

Each case (``tests/fuzz/strategies.py``) is written to a fresh folder and read the way every
command reads it (:func:`timeline.analyze`: inputs, policy, load, overlap), then matched
(:func:`timeline.match_collectives`) and summarised (:func:`timeline.build_summary`; with a Horovod
timeline, :func:`timeline.build_collectives_report`; the ``--json`` encoding). What must hold
(docs/fuzzing.md):

- the only exception is a :class:`timeline.TimelineError`; a load error's message is one line that
  starts with the path of an input (where);
- the events frame has the declared schema and no event ends before it starts;
- in every overlap view: ``hidden + exposed = comm`` (per collective: ``hidden + exposed = dur``),
  ``0 ≤ hidden ≤ comm``, no negative duration, every ``*_ratio`` in [0, 1] (never NaN);
- the input files are left as they were (content and modification time).

``TIMELINE_FUZZ_EXAMPLES`` sets the number of cases (default 2,000, the CI run);
``TIMELINE_FUZZ_SEED`` draws them from that seed instead of the fixed, derandomized sequence.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import polars as pl
from hypothesis import HealthCheck, Phase, example, given, seed, settings

import timeline
from tests.builders import file_digests
from tests.fuzz.strategies import FuzzCase, TraceFile, fuzz_cases
from timeline.render.json import render_json
from timeline.schema import EVENTS_SCHEMA

EXAMPLES = int(os.environ.get("TIMELINE_FUZZ_EXAMPLES", "2000"))
SEED = os.environ.get("TIMELINE_FUZZ_SEED")

FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    # The CI run is one fixed sequence of cases: a red build is the change's doing, and it
    # reproduces exactly. A seed draws other cases (the long runs of docs/fuzzing.md).
    derandomize=SEED is None,
    database=None,  # nothing written into the repository
    phases=(Phase.explicit, Phase.generate, Phase.shrink),
    suppress_health_check=(HealthCheck.too_slow, HealthCheck.data_too_large),
    print_blob=True,
)

# Durations of the overlap views (start_ns/end_ns are times, not durations).
_DURATIONS = (
    "step_ns",
    "comm_ns",
    "compute_ns",
    "hidden_comm_ns",
    "exposed_comm_ns",
    "other_busy_ns",
    "idle_ns",
)


def _where_ok(message: str, paths: list[Path], root: Path) -> bool:
    """A load error says where: it starts with an input's path (or the folder's)."""
    return message.startswith((*map(str, paths), str(root)))


def _assert_ratios(frame: pl.DataFrame, what: str) -> None:
    for name in (c for c in frame.columns if c.endswith("_ratio")):
        values = frame.get_column(name).drop_nulls()
        bad = values.filter(values.is_nan() | (values < 0) | (values > 1))
        assert bad.is_empty(), f"{what}.{name} outside [0, 1]: {bad.head(5).to_list()}"


def _assert_overlap_view(frame: pl.DataFrame, what: str) -> None:
    """hidden + exposed = comm, 0 ≤ hidden ≤ comm, durations ≥ 0, ratios in [0, 1]."""
    known = frame.filter(pl.col("hidden_comm_ns").is_not_null())
    broken = known.filter(
        (pl.col("hidden_comm_ns") + pl.col("exposed_comm_ns") != pl.col("comm_ns"))
        | (pl.col("hidden_comm_ns") < 0)
        | (pl.col("hidden_comm_ns") > pl.col("comm_ns"))
    )
    assert broken.is_empty(), f"{what}: hidden + exposed != comm or hidden outside [0, comm]:\n{broken}"
    unknown = frame.filter(pl.col("hidden_comm_ns").is_null() & pl.col("exposed_comm_ns").is_not_null())
    assert unknown.is_empty(), f"{what}: exposed without hidden:\n{unknown}"
    for name in _DURATIONS:
        negative = frame.filter(pl.col(name) < 0)
        assert negative.is_empty(), f"{what}.{name} negative:\n{negative}"
    _assert_ratios(frame, what)


def _assert_sound(analysed: timeline.Run) -> None:
    """What every loaded and analysed trace satisfies, however damaged its files were."""
    trace, overlap = analysed.trace, analysed.overlap
    events = trace.events
    assert events.schema == EVENTS_SCHEMA
    backwards = events.filter((pl.col("end_ns") < pl.col("start_ns")) | (pl.col("dur_ns") < 0))
    assert backwards.is_empty(), f"events ending before they start:\n{backwards}"
    for warning in trace.warnings:
        assert isinstance(warning, str)
        assert warning
        assert "\n" not in warning, f"a warning of several lines: {warning!r}"
    _assert_overlap_view(overlap.ranks, "ranks")
    _assert_overlap_view(overlap.iterations, "iterations")
    exposure = overlap.collectives.filter(pl.col("hidden_ns").is_not_null())
    broken = exposure.filter(
        (pl.col("hidden_ns") + pl.col("exposed_ns") != pl.col("dur_ns"))
        | (pl.col("hidden_ns") < 0)
        | (pl.col("hidden_ns") > pl.col("dur_ns"))
    )
    assert broken.is_empty(), f"collectives: hidden + exposed != dur or hidden outside [0, dur]:\n{broken}"
    _assert_ratios(overlap.collectives, "collectives")


def _assert_plain_ratios(data: Any, what: str) -> None:
    """Every ``*_ratio`` value of a result's plain data is null or in [0, 1] (a typed result's too)."""
    if isinstance(data, msgspec.Struct):
        data = msgspec.to_builtins(data)
    if isinstance(data, dict):
        for key, value in data.items():
            if str(key).endswith("_ratio") and isinstance(value, (int, float)):
                assert 0 <= value <= 1, f"{what}: {key} = {value}"
            _assert_plain_ratios(value, what)
    elif isinstance(data, list):
        for value in data:
            _assert_plain_ratios(value, what)


def _analyse_further(analysed: timeline.Run) -> None:
    """The cross-rank analyses and the results; each may refuse the input, none may crash."""
    trace, overlap = analysed.trace, analysed.overlap
    source = trace.events.get_column("source")
    kineto_comm = trace.events.filter((source == "kineto") & (pl.col("kind") == "communication"))
    # Without Kineto communication there is nothing to match (Horovod spans are not): skipped for time.
    if not kineto_comm.is_empty():
        try:
            match = timeline.match_collectives(trace.events, windows=overlap.windows)
        except timeline.TimelineError:
            pass
        else:
            _assert_ratios(match.collectives, "matched collectives")
            _assert_ratios(match.ranks, "matched collective ranks")
    with contextlib.suppress(timeline.TimelineError):
        summary = timeline.build_summary(analysed, findings=False)
        render_json(summary)
        _assert_plain_ratios(summary, "summary")
    if not (source == "horovod").any():
        return  # the collectives report of Kineto traces is match_collectives' (above): skipped for time
    with contextlib.suppress(timeline.TimelineError):
        report = timeline.build_collectives_report(analysed)
        render_json(report)
        _assert_plain_ratios(report, "collectives report")


def check_case(case: FuzzCase, root: Path) -> None:
    """Write the case under ``root``, read and analyse it, and check everything that must hold."""
    paths = case.write(root)
    before = file_digests(root)
    try:
        analysed = timeline.analyze(paths)
    except timeline.TimelineError as exc:
        message = str(exc)
        assert _where_ok(message, paths, root), f"the error does not start with where: {message!r}"
        assert "\n" not in message, f"an error of several lines: {message!r}"
    else:
        _assert_sound(analysed)
        _analyse_further(analysed)
    assert file_digests(root) == before, "an input file was changed"


def _found(name: str, data: bytes, how: str) -> FuzzCase:
    return FuzzCase(files=(TraceFile(name=name, data=data, how=how),))


_KINETO = (
    b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": %s, "dur": 5}%s]}'
)
_HOROVOD_HEADER = (
    b'[{"name": "process_name", "ph": "M", "pid": 0, '
    b'"args": {"start_time_since_epoch_in_micros": 1700000000000000}}, '
    b'{"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "t"}}, '
)
_OVERHEAD_ONLY = b'{"traceEvents": [{"ph": "X", "cat": "overhead", "name": "Flush", "ts": 1, "dur": 2}]}'
FOUND: tuple[FuzzCase, ...] = (
    # What this test found (minimal inputs), run first in every run: docs/fuzzing.md, "Findings".
    _found("rank0.json.gz", gzip.compress(_KINETO % (b"1", b""), mtime=0)[:20], "F1: gzip cut in its header"),
    _found(
        "rank0.json", b'{"traceEvents": [{"name": "process_name", "ph": "Z"', "F2: an odd value, then cut"
    ),
    _found("rank0.json", b'{"traceEvents": [{"ph": "X", "args": []}]}\x00', "F2: an odd value, then a NUL"),
    _found(
        "rank0.json", b'{"traceEvents": [{"ph": "X", "args": []}, {"name": "\xff"}]}', "F2: invalid UTF-8"
    ),
    _found("rank0.json", _KINETO % (b"1e400", b""), "F2: a float out of range"),
    _found(
        "horovod_timeline.json",
        _HOROVOD_HEADER + b'{"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": 1000.0, "pid": 1}, '
        b'{"ph": "X", "name": "0", "ts": 1005, "pid": 1, "dur": 0}, {"ph": "E", "ts": 1033, "pid": 1}]',
        "F3: one float ts in a Horovod timeline",
    ),
    FuzzCase(
        files=tuple(
            TraceFile(
                name=f"rank{r}.json",
                data=_OVERHEAD_ONLY,
                how=f"F4: rank {r} of two with nothing to measure",
            )
            for r in (0, 1)
        )
    ),
)


def _with_found(test: Callable[[FuzzCase], None]) -> Callable[[FuzzCase], None]:
    for case in reversed(FOUND):
        test = example(case=case)(test)
    return test


@FUZZ
@given(case=fuzz_cases())
@_with_found
def test_damaged_traces_raise_only_timeline_errors(case: FuzzCase) -> None:
    with tempfile.TemporaryDirectory(prefix="timeline-fuzz-") as tmp:
        check_case(case, Path(tmp))


if SEED is not None:
    test_damaged_traces_raise_only_timeline_errors = seed(int(SEED))(
        test_damaged_traces_raise_only_timeline_errors
    )
