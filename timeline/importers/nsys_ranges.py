"""NVTX ranges of an Nsight Systems export: operators, iterations, and which range holds a launch.

Takes the NVTX ranges of the ranks' processes (a frame with ``name``, ``start_ns``, ``end_ns``,
``thread`` and the rank ``key``) and gives

- :func:`operator_names`: PyTorch's ranges (``torch.autograd.profiler.emit_nvtx`` writes
  ``aten::add, seq = 45329, op_id = 990727``; record_function ranges ``nccl:all_to_all, op_id = N``)
  split into the operator's name and its ``op_id``;
- :func:`iteration_names`: the ranges that are iterations renamed ``ProfilerStep#N`` (what
  :mod:`timeline.analysis.iterations` reads): ``--iteration-range REGEX`` when given, else
  ``ProfilerStep#N`` ranges, else the ranges matching :data:`DEFAULT_ITERATION_PATTERN`; only the
  outermost matching range of a rank counts, numbered by the number in its name, else by order;
- :func:`innermost_enclosing`: for instants on threads (kernel launches), the innermost range of the
  same thread that holds each one (NVTX push/pop ranges of a thread nest).
"""

from __future__ import annotations

import polars as pl

from timeline.importers.rules import check_pattern

__all__ = [
    "DEFAULT_ITERATION_PATTERN",
    "check_iteration_range",
    "innermost_enclosing",
    "iteration_names",
    "operator_names",
]

DEFAULT_ITERATION_PATTERN = r"(?i)^(?:train(?:ing)?[ _-]?)?(?:step|iter|iteration)(?:[ _#:=-]*(\d+))?$"
"""User ranges taken as iterations when an export has no ``ProfilerStep#N``: ``step``, ``iteration``,
``iter``, ``train_step``, ``training_step``, ``train iteration``…, any case, optionally followed by
the step number (``step 12``, ``iteration_3``, ``train_step#7``)."""
_STEP = r"^ProfilerStep#(\d+)$"
# emit_nvtx: "<name>, seq = <n>, op_id = <m>[, sizes = [...]][, input_op_ids = [...]]" (torch
# autograd/profiler_legacy getNvtxStr); record_function alike without seq.
_OP_ID = ", op_id = "
_SEQ = ", seq = "


def check_iteration_range(pattern: str) -> None:
    """Check an ``--iteration-range`` regex as polars runs it (``rules.check_pattern``).

    Raises
    ------
    UsageError
        A pattern polars' regex engine (Rust ``regex``) cannot run.
    """
    check_pattern(pattern, label="--iteration-range")


def operator_names(ranges: pl.LazyFrame) -> pl.LazyFrame:
    """Add ``op_name`` (the operator, null for other ranges) and ``op_id`` (Int64) to NVTX ranges.

    Split at the literal separators rather than matched with a regex: five times faster on the
    millions of ranges of a large export.
    """
    name = pl.col("name")
    is_op = name.str.contains(_OP_ID, literal=True)
    parts = name.str.split_exact(_OP_ID, 1)
    head = parts.struct.field("field_0").str.split_exact(_SEQ, 1).struct.field("field_0")
    number = parts.struct.field("field_1").str.split_exact(", ", 1).struct.field("field_0")
    return ranges.with_columns(
        op_name=pl.when(is_op).then(head),
        op_id=pl.when(is_op).then(number.cast(pl.Int64, strict=False)),
    )


def iteration_names(ranges: pl.DataFrame, *, pattern: str | None) -> tuple[pl.DataFrame, str]:
    """Return the ranges with the iterations renamed ``ProfilerStep#N`` (column ``step``), and the source.

    ``ranges``: ``key``, ``name``, ``op_name``, ``start_ns``, ``end_ns`` (one row per NVTX range,
    any order). The result has the same rows with a ``step`` column: the ``ProfilerStep#N`` name of
    each iteration range, else null. The source says where the iterations came from:
    ``--iteration-range``, ``ProfilerStep#N``, ``default pattern`` or ``none``.
    """
    base = pl.coalesce("op_name", "name")
    if pattern is not None:
        return _numbered(
            ranges, base.str.contains(pattern), base.str.extract(pattern, 1)
        ), "--iteration-range"
    steps = base.str.contains(_STEP).fill_null(False)
    if ranges.select(steps.any()).item():
        return _numbered(ranges, steps, base.str.extract(_STEP, 1)), "ProfilerStep#N"
    default = base.str.contains(DEFAULT_ITERATION_PATTERN).fill_null(False)
    if ranges.select(default.any()).item():
        return _numbered(ranges, default, base.str.extract(DEFAULT_ITERATION_PATTERN, 1)), "default pattern"
    return ranges.with_columns(step=pl.lit(None, dtype=pl.String)), "none"


def _numbered(ranges: pl.DataFrame, matches: pl.Expr, number: pl.Expr) -> pl.DataFrame:
    """Name the outermost matching ranges of each rank ``ProfilerStep#N``: N from the name, else the order.

    A matching range held by an earlier matching range of its rank is no iteration of its own. The
    few names are scattered into a column of nulls (no join over every range).
    """
    candidates = (
        ranges.lazy()
        .with_row_index("_i")
        .filter(matches.fill_null(False))
        .select("_i", "key", "start_ns", "end_ns", _number=number.cast(pl.Int64, strict=False))
        .sort("key", "start_ns", pl.col("end_ns"), descending=[False, False, True])
        .with_columns(
            _held=(pl.col("end_ns") <= pl.col("end_ns").cum_max().shift(1).over("key")).fill_null(False)
        )
        .filter(~pl.col("_held"))
        .with_columns(_order=pl.int_range(pl.len()).over("key"))
        .with_columns(_numbers_known=pl.col("_number").is_not_null().all().over("key"))
        .select(
            "_i",
            step=pl.format(
                "ProfilerStep#{}",
                pl.when(pl.col("_numbers_known")).then(pl.col("_number")).otherwise(pl.col("_order")),
            ),
        )
        .collect(engine="in-memory")
    )
    step = pl.Series("step", [None] * ranges.height, dtype=pl.String).scatter(
        candidates.get_column("_i"), candidates.get_column("step")
    )
    return ranges.with_columns(step)


def innermost_enclosing(ranges: pl.DataFrame, points: pl.DataFrame, *, value: str) -> pl.DataFrame:
    """Return, for each point, ``value`` of the innermost range of its thread that holds it (else null).

    ``ranges``: ``thread``, ``start_ns``, ``end_ns`` and ``value`` (push/pop ranges of a thread nest
    properly); ``points``: ``_p`` (an id) , ``thread`` and ``at_ns``. Returns ``_p`` and ``value``.

    The ranges are flattened into the innermost range at each boundary: a start opens its range; an
    end returns to the range that held it, the last range opened one level up (its depth found by
    counting the boundaries). A point takes the state after the last boundary at or before it.
    """
    if ranges.height == 0 or points.height == 0:
        return points.select("_p", pl.lit(None, dtype=ranges.schema[value]).alias(value))
    bounds = (
        pl.concat(
            [
                ranges.select("thread", t=pl.col("start_ns"), step=pl.lit(1, pl.Int32), v=pl.col(value)),
                ranges.select("thread", t=pl.col("end_ns"), step=pl.lit(-1, pl.Int32), v=pl.col(value)),
            ]
        )
        .sort("thread", "t", "step")  # at one instant, ends before starts
        .with_row_index("_b")
        .with_columns(depth=pl.col("step").cum_sum().over("thread"))
    )
    opened = bounds.filter(pl.col("step") == 1).select("thread", "depth", "_b", parent=pl.col("v")).sort("_b")
    closed = (
        bounds.filter(pl.col("step") == -1)
        .sort("_b")
        .join_asof(opened, on="_b", by=["thread", "depth"], strategy="backward", check_sortedness=False)
        .select("_b", "thread", "t", inner=pl.when(pl.col("depth") > 0).then(pl.col("parent")))
    )
    states = (
        pl.concat(
            [
                opened.join(bounds.select("_b", "t"), on="_b").select("_b", "thread", "t", inner="parent"),
                closed,
            ]
        )
        .sort("_b")
        .select("thread", "t", "inner")
    )
    return (
        points.sort("at_ns")
        .join_asof(
            states.sort("t", maintain_order=True),
            left_on="at_ns",
            right_on="t",
            by="thread",
            strategy="backward",
            check_sortedness=False,  # sorted just above; polars cannot check it per group
        )
        .select("_p", pl.col("inner").alias(value))
    )
