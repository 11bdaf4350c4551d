"""Stragglers: per iteration, the rank the others waited for, and whether a rank or the link was slow.

Takes a :class:`~timeline.analysis.collectives.CollectiveMatch` (and optionally the per-iteration
overlap of the same events) and gives a row per iteration
(:data:`~timeline.analysis.schemas.STRAGGLER_ITERATIONS_SCHEMA`) and a ranking of the ranks over the
whole trace (:data:`~timeline.analysis.schemas.STRAGGLER_RANKS_SCHEMA`).

Only synchronising collectives count (all-reduce, all-gather, reduce-scatter, all-to-all, barrier):
there, every rank but the last to arrive waits for it. For a logical collective ``c`` with last
arrival ``L(c)`` and per-rank ``wait_ns = dur_ns − transfer_ns``:

- the wait ``L(c)`` caused is ``Σ_{r ≠ L(c)} wait(r, c)``;
- over an iteration, the straggler is the rank that caused the most wait;
- ``mean_wait_ns`` = the iteration's total wait over all ranks / ranks: the time an average rank
  spent waiting in collectives; ``transfer_ns`` = the summed transfer time every rank spent;
- verdict: ``slow_link`` when ``transfer_ns ≥ mean_wait_ns`` (the time in collectives is mostly the
  transfer itself, seen by everyone: the link or the algorithm is the limit; compare ``busbw`` with
  the link), else ``slow_rank`` when the straggler caused at least half of the wait (one rank
  arrives late: its compute or input is slower, see ``straggler_compute_ns``), else ``imbalance``
  (ranks arrive late by turns).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from timeline.analysis.collectives import CollectiveMatch
from timeline.analysis.schemas import STRAGGLER_ITERATIONS_SCHEMA, STRAGGLER_RANKS_SCHEMA
from timeline.schema import validate

__all__ = ["SLOW_RANK_SHARE", "Stragglers", "find_stragglers"]

SLOW_RANK_SHARE = 0.5
"""The share of an iteration's wait one rank must cause for the verdict ``slow_rank``."""


@dataclass(frozen=True)
class Stragglers:
    """Who everyone waits for.

    Attributes
    ----------
    iterations
        One row per iteration (:data:`~timeline.analysis.schemas.STRAGGLER_ITERATIONS_SCHEMA`);
        the null iteration holds collectives outside every ProfilerStep window.
    ranks
        One row per rank, ranked by the wait it caused
        (:data:`~timeline.analysis.schemas.STRAGGLER_RANKS_SCHEMA`).
    """

    iterations: pl.DataFrame
    ranks: pl.DataFrame


def find_stragglers(match: CollectiveMatch, *, iteration_overlap: pl.DataFrame | None = None) -> Stragglers:
    """Return, per iteration, the rank the others waited for, and a ranking over the trace.

    Parameters
    ----------
    match
        :func:`~timeline.analysis.collectives.match_collectives` of the events.
    iteration_overlap
        :func:`~timeline.analysis.overlap.compute_iteration_overlap` of the same events: fills
        ``straggler_compute_ns`` (the straggler's compute in the iteration) and
        ``median_compute_ns`` (the median over ranks); null without.

    Returns
    -------
    Stragglers
    """
    sync = match.collectives.filter(pl.col("synchronising")).select(
        "collective_id", "iteration", "last_rank", "transfer_ns", "ranks"
    )
    per_rank = match.ranks.join(sync.select("collective_id", "last_rank"), on="collective_id", how="inner")
    caused = (
        per_rank.filter(pl.col("rank") != pl.col("last_rank"))
        .group_by("collective_id")
        .agg(caused_wait_ns=pl.col("wait_ns").sum())
    )
    sync = sync.join(caused, on="collective_id", how="left").with_columns(
        pl.col("caused_wait_ns").fill_null(0)
    )
    iterations = _with_compute(_with_verdicts(_iteration_waits(sync, per_rank)), iteration_overlap)
    iterations = validate(
        iterations.sort("iteration", nulls_last=False),
        STRAGGLER_ITERATIONS_SCHEMA,
        what="straggler iterations",
    )
    return Stragglers(iterations=iterations, ranks=_rank_ranking(per_rank, sync))


def _iteration_waits(sync: pl.DataFrame, per_rank: pl.DataFrame) -> pl.DataFrame:
    """Per iteration: its synchronising collectives' waits and transfers, and the rank most waited for."""
    by_rank_iteration = sync.group_by("iteration", "last_rank").agg(
        times_last=pl.len().cast(pl.Int64), caused=pl.col("caused_wait_ns").sum()
    )
    straggler = (
        by_rank_iteration.sort(["caused", "times_last", "last_rank"], descending=[True, True, False])
        .group_by("iteration", maintain_order=True)
        .first()
        .select(
            "iteration",
            straggler_rank=pl.col("last_rank"),
            straggler_times_last=pl.col("times_last"),
            straggler_caused_wait_ns=pl.col("caused"),
        )
    )
    waits = per_rank.group_by("iteration").agg(
        _total_wait=pl.col("wait_ns").sum(), ranks=pl.col("rank").n_unique().cast(pl.Int32)
    )
    return (
        sync.group_by("iteration")
        .agg(
            collectives=pl.len().cast(pl.Int64),
            caused_wait_ns=pl.col("caused_wait_ns").sum(),
            transfer_ns=pl.col("transfer_ns").sum(),
        )
        .join(straggler, on="iteration", how="left", nulls_equal=True)
        .join(waits, on="iteration", how="left", nulls_equal=True)
        .with_columns(mean_wait_ns=(pl.col("_total_wait") / pl.col("ranks")).round().cast(pl.Int64))
    )


def _with_verdicts(iterations: pl.DataFrame) -> pl.DataFrame:
    """Add each iteration's straggler share, wait ratio and verdict (slow link, slow rank, imbalance)."""
    in_collectives = pl.col("mean_wait_ns") + pl.col("transfer_ns")
    share = pl.when(pl.col("caused_wait_ns") > 0).then(
        pl.col("straggler_caused_wait_ns") / pl.col("caused_wait_ns")
    )
    return iterations.with_columns(
        straggler_share_ratio=share,
        wait_ratio=pl.when(in_collectives > 0).then(pl.col("mean_wait_ns") / in_collectives),
    ).with_columns(
        verdict=pl.when(in_collectives <= 0)
        .then(pl.lit(None, dtype=pl.String))
        .when(pl.col("transfer_ns") >= pl.col("mean_wait_ns"))
        .then(pl.lit("slow_link"))
        .when(pl.col("straggler_share_ratio") >= SLOW_RANK_SHARE)
        .then(pl.lit("slow_rank"))
        .otherwise(pl.lit("imbalance"))
    )


def _with_compute(iterations: pl.DataFrame, iteration_overlap: pl.DataFrame | None) -> pl.DataFrame:
    """Add the straggler's compute time in each iteration and the median over ranks."""
    if iteration_overlap is None or iteration_overlap.height == 0:
        return iterations.with_columns(
            straggler_compute_ns=pl.lit(None, dtype=pl.Int64), median_compute_ns=pl.lit(None, dtype=pl.Int64)
        )
    compute = iteration_overlap.filter(pl.col("iteration").is_not_null()).select(
        "rank", "iteration", "compute_ns"
    )
    median = compute.group_by("iteration").agg(
        median_compute_ns=pl.col("compute_ns").median().round().cast(pl.Int64)
    )
    own = compute.select(
        "iteration", straggler_rank=pl.col("rank"), straggler_compute_ns=pl.col("compute_ns")
    )
    return iterations.join(own, on=["iteration", "straggler_rank"], how="left").join(
        median, on="iteration", how="left"
    )


def _rank_ranking(per_rank: pl.DataFrame, sync: pl.DataFrame) -> pl.DataFrame:
    """Rank the ranks by the wait they caused over the whole trace."""
    total_caused = sync.get_column("caused_wait_ns").sum()
    caused = sync.group_by("last_rank").agg(
        times_last=pl.len().cast(pl.Int64), caused_wait_ns=pl.col("caused_wait_ns").sum()
    )
    own = per_rank.group_by("rank").agg(
        collectives=pl.len().cast(pl.Int64),
        waited_ns=pl.col("wait_ns").sum(),
        mean_arrival_lag_ns=pl.col("arrival_lag_ns").mean().round().cast(pl.Int64),
    )
    ranking = (
        own.join(caused.rename({"last_rank": "rank"}), on="rank", how="left")
        .with_columns(pl.col("times_last").fill_null(0), pl.col("caused_wait_ns").fill_null(0))
        .with_columns(
            caused_wait_ratio=pl.when(pl.lit(total_caused) > 0).then(
                pl.col("caused_wait_ns") / pl.lit(total_caused)
            )
        )
        .sort(["caused_wait_ns", "times_last", "rank"], descending=[True, True, False])
        .with_row_index("position", offset=1)
        .with_columns(pl.col("position").cast(pl.Int32))
    )
    return validate(ranking, STRAGGLER_RANKS_SCHEMA, what="straggler ranks")
