"""The library refuses misuse at its boundary (#42, items 3, 11): TypeError or TimelineError naming it.

Before, ``compute_overlap(pl.DataFrame())`` raised polars' ``ColumnNotFoundError`` with a query
plan; ``None``, a ``str``, a pandas frame or a ``LazyFrame`` an ``AttributeError``; a ``str`` rank
column polars' ``SchemaError``; ``load(f, rank=2**40)`` polars' ``ComputeError``; ``analyze(b"path")``
said "105: no such file"; and ``comm_kernels="gemm"`` was read as the patterns g, e, m, m.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import timeline
from tests.builders import SAMPLES, TRACES
from timeline.errors import RankError, TimelineError, UsageError
from timeline.whatif.settings import Settings

API: Any = timeline
"""The library, untyped: these tests give it what its signatures refuse."""
GLOO = SAMPLES / "ddp_gloo"
RANK0 = GLOO / "rank0.2-4.pt.trace.json.gz"
NCCL = TRACES / "kineto" / "hta_nccl_parser_config" / "nccl_data.json.gz"


@pytest.fixture(scope="module")
def events() -> pl.DataFrame:
    return timeline.load(GLOO).events


def _refused(call: Callable[[], Any]) -> BaseException:
    """Return what ``call`` raised: a TypeError or a TimelineError, never an engine's error."""
    with pytest.raises((TypeError, TimelineError)) as raised:
        call()
    assert type(raised.value).__module__.split(".")[0] in ("builtins", "timeline")
    return raised.value


# --- 3. a str where a list of patterns is expected ----------------------------------------------


def test_a_str_of_patterns_is_refused_not_read_letter_by_letter() -> None:
    error = _refused(lambda: API.analyze(GLOO, comm_kernels="gemm"))
    assert isinstance(error, TypeError)
    assert str(error) == (
        "comm_kernels: a str ('gemm') where a list of patterns is expected; pass ['gemm'] (a str would "
        "be read as one pattern per character)"
    )


def test_a_list_of_one_pattern_is_that_pattern() -> None:
    # On a GPU trace: the kernels named ...gemm... become communication; the letters g, e, m, m
    # would have made every kernel communication (compute 0).
    listed = API.analyze(NCCL, comm_kernels=["gemm"]).overlap.ranks.row(0, named=True)
    letters = API.analyze(NCCL, comm_kernels=list("gemm")).overlap.ranks.row(0, named=True)
    plain = API.analyze(NCCL).overlap.ranks.row(0, named=True)
    assert letters["compute_ns"] == 0
    assert 0 < listed["compute_ns"] < plain["compute_ns"]


@pytest.mark.parametrize("patterns", [[b"gemm"], [1], "x", b"gemm"])
def test_patterns_that_are_not_str_are_refused(patterns: object) -> None:
    error = _refused(lambda: API.analyze(GLOO, comm_kernels=patterns))
    assert isinstance(error, TypeError)
    assert str(error).startswith("comm_kernels")


# --- 11. arguments of the wrong type ------------------------------------------------------------


@pytest.mark.parametrize("load", [timeline.load, timeline.analyze, timeline.load_dumps])
@pytest.mark.parametrize(
    ("paths", "named", "says"),
    [
        (b"sample_traces/ddp_gloo", "paths", "bytes (b'sample_traces/ddp_gloo') are not a path"),
        (None, "paths", "None is not a path"),
        (42, "paths", "42 is not a path"),
        ([str(RANK0), 3], "paths[1]", "3 is not a path"),
        ([str(RANK0), b"x"], "paths[1]", "bytes (b'x') are not a path"),
    ],
)
def test_paths_that_are_not_paths_are_a_type_error(
    load: Callable[..., Any], paths: object, named: str, says: str
) -> None:
    error = _refused(lambda: load(paths))
    assert isinstance(error, TypeError)
    assert str(error).startswith(f"{named}: {says}; pass a")


def test_a_path_like_is_a_path() -> None:
    class Named:
        def __fspath__(self) -> str:
            return str(RANK0)

    assert API.load(Named()).events.height == API.load(RANK0).events.height


@pytest.mark.parametrize(
    ("rank", "error", "says"),
    [
        (
            2**40,
            RankError,
            "rank: 1099511627776 is not a rank; a rank is an integer from 0 to 2,147,483,647",
        ),
        (-1, RankError, "--rank -1: a rank is an index from 0 to world_size - 1; pass 0 or more"),
        (True, TypeError, "rank: True is not an int"),
        (1.0, TypeError, "rank: 1.0 is not an int"),
        ("1", TypeError, "rank: '1' is not an int"),
    ],
)
def test_a_rank_out_of_range_or_of_another_type_is_refused(rank: object, error: type, says: str) -> None:
    for name in ("load", "analyze"):
        load: Callable[..., Any] = getattr(API, name)
        raised = _refused(partial(load, RANK0, rank=rank))
        assert type(raised) is error
        assert str(raised) == says


@pytest.mark.parametrize(
    ("argument", "value"),
    [("include_python", "no"), ("rank_regex", 3), ("executor", 1), ("align", 1)],
)
def test_options_of_analyze_of_another_type_are_named(argument: str, value: object) -> None:
    error = _refused(lambda: API.analyze(GLOO, **{argument: value}))
    assert isinstance(error, TypeError)
    assert str(error).startswith(f"{argument}: ")


# --- 11. the events frame -------------------------------------------------------------------------


def _pandas(events: pl.DataFrame) -> object:
    """The frame as pandas (the dev extra's), built from its columns: polars' ``to_pandas`` needs
    pyarrow, which nothing installs."""
    pandas = importlib.import_module("pandas")  # untyped: no stubs needed for one constructor
    return pandas.DataFrame(events.to_dict(as_series=False))


def _frames(events: pl.DataFrame) -> dict[str, tuple[object, type, str]]:
    """Misused events frames: what is given, the error, the start of its message."""
    return {
        "empty frame": (pl.DataFrame(), UsageError, "events: not the events frame (missing columns rank,"),
        "None": (None, TypeError, "events: None is not a polars DataFrame"),
        "str": ("rank0.json", TypeError, "events: 'rank0.json' is not a polars DataFrame"),
        "pandas": (_pandas(events.head(3)), TypeError, "events: a pandas."),
        "LazyFrame": (events.lazy(), TypeError, "events: a polars LazyFrame; pass a DataFrame"),
        "str rank": (
            events.with_columns(pl.col("rank").cast(pl.String)),
            UsageError,
            "events.rank: String, where the events frame has Int32",
        ),
        "column missing": (
            events.drop("end_ns"),
            UsageError,
            "events: not the events frame (missing columns end_ns)",
        ),
    }


@pytest.mark.parametrize(
    "case", ["empty frame", "None", "str", "pandas", "LazyFrame", "str rank", "column missing"]
)
@pytest.mark.parametrize("function", [timeline.compute_overlap, timeline.match_collectives])
def test_a_frame_that_is_not_the_events_frame_is_refused(
    case: str, function: Callable[[Any], Any], events: pl.DataFrame
) -> None:
    given, error, says = _frames(events)[case]
    raised = _refused(lambda: function(given))
    assert type(raised) is error
    assert str(raised).startswith(says)


def test_the_events_frame_itself_is_accepted(events: pl.DataFrame) -> None:
    overlap = API.compute_overlap(events)
    assert overlap.ranks.height == 2


@pytest.mark.parametrize(
    ("call", "named"),
    [
        (lambda: API.build_summary(None), "run"),
        (lambda: API.build_summary(API.load(GLOO)), "run"),
        (lambda: API.build_summary(API.analyze(GLOO), top="10"), "top"),
        (lambda: API.build_collectives_report(pl.DataFrame()), "run"),
        (lambda: API.build_flight_report("dumps/"), "dumps"),
        (lambda: API.build_whatif_report(None, Settings()), "graph"),
    ],
)
def test_results_refuse_what_is_not_their_input(call: Callable[[], Any], named: str) -> None:
    error = _refused(call)
    assert isinstance(error, TypeError)
    assert str(error).startswith(f"{named}: ")


def test_a_summary_of_the_right_arguments_is_built() -> None:
    summary = API.build_summary(API.analyze(Path(GLOO)))
    assert [row.rank for row in summary.ranks] == [0, 1]


def test_integers_of_another_width_and_text_for_categories_are_read(events: pl.DataFrame) -> None:
    widened = events.with_columns(pl.col("rank").cast(pl.Int64), pl.col("name").cast(pl.String))
    assert timeline.compute_overlap(widened).ranks.equals(timeline.compute_overlap(events).ranks)


def test_a_value_that_does_not_fit_its_column_is_refused(events: pl.DataFrame) -> None:
    too_large = events.with_columns(pl.lit(2**40, dtype=pl.Int64).alias("rank"))
    error = _refused(lambda: timeline.compute_overlap(too_large))
    assert isinstance(error, UsageError)
    assert str(error).startswith("events: the columns rank cannot be read as the events frame's types (")
    unknown_kind = events.with_columns(pl.lit("teleport").alias("kind"))
    error = _refused(lambda: timeline.compute_overlap(unknown_kind))
    assert str(error).startswith("events: the columns kind cannot be read as the events frame's types (")
