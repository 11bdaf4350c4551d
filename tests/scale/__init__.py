"""Scale: rank-by-rank analysis on executors, Parquet datasets, generated traces, bounded-memory import."""

from __future__ import annotations

from pathlib import Path

import polars as pl
from polars.testing import assert_frame_equal

from timeline.analysis.overlap import Overlap

__all__ = ["HOROVOD", "SAMPLES", "assert_overlap_equal"]

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
HOROVOD = SAMPLES / "horovod" / "horovod_v021.json"


def assert_overlap_equal(expected: Overlap, got: Overlap) -> None:
    """Every view of two overlap analyses is equal, row for row."""
    for view in ("ranks", "iterations", "collectives", "windows"):
        left: pl.DataFrame = getattr(expected, view)
        right: pl.DataFrame = getattr(got, view)
        try:
            assert_frame_equal(left, right)
        except AssertionError as exc:
            raise AssertionError(f"{view}: {exc}") from None
