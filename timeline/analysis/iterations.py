"""Iteration windows: ``ProfilerStep#N`` on the CPU, projected onto the GPU.

Takes the canonical events frame and gives one window per rank and step
(:data:`timeline.schema.ITERATIONS_SCHEMA`). A GPU activity belongs to the iteration of the CPU
step that launched it (its ``correlation`` names the runtime launch, whose time lies inside one
``ProfilerStep#N``); the window of step *k* is then

``start_k = max(end_{k-1}, cpu_start_k)`` and ``end_k = max(cpu_end_k, last end of the GPU
activities launched in step k)``,

the projection torch-tb-profiler established. Windows of one rank never overlap, so every instant
of the trace belongs to at most one iteration. A rank without ``ProfilerStep#N`` (a profile without
``schedule``/``step()``) gets one ``whole_trace`` window and a null iteration number. On CPU-only
ranks the window end is extended by the collectives that started inside the step.
"""

from __future__ import annotations

import polars as pl

from timeline.schema import ITERATIONS_SCHEMA, validate

__all__ = ["assign_iterations", "rank_modes"]

_STEP_PATTERN = r"^ProfilerStep#(\d+)$"


def rank_modes(events: pl.DataFrame) -> pl.DataFrame:
    """Return how each rank's overlap is measured: ``gpu``, ``cpu`` or ``horovod``.

    ``gpu``: the rank has GPU kernels (communication = collective kernels on any stream, compute =
    the other kernels). ``cpu``: no GPU activity (gloo on CPU-only jobs: communication = collectives
    on CPU threads, compute = CPU operators on the other threads, minus waits). ``horovod``: only a
    Horovod timeline (communication phases, no compute events).

    Returns
    -------
    pl.DataFrame
        Columns ``rank`` (Int32) and ``mode`` (String).
    """
    on_gpu = pl.col("device").is_not_null() & pl.col("kind").is_in(["compute", "communication"])
    mode = (
        pl.when(on_gpu.any())
        .then(pl.lit("gpu"))
        .when((pl.col("source") == "kineto").any())
        .then(pl.lit("cpu"))
        .otherwise(pl.lit("horovod"))
    )
    # the four columns read, selected before the filter: the filter copies only those
    spans = events.select("rank", "kind", "device", "source").filter(pl.col("kind") != "instant")
    return spans.group_by("rank").agg(mode.alias("mode")).sort("rank")


def activity_sets(events: pl.DataFrame, modes: pl.DataFrame) -> pl.DataFrame:
    """Return the intervals the overlap analysis measures, each tagged with its set.

    Sets: ``comm`` (communication), ``compute``, ``wait`` (CPU waits that cancel compute on CPU-only
    ranks) and ``other`` (GPU memcpy/memset). Columns: ``rank``, ``set``, ``start_ns``, ``end_ns``,
    plus ``event`` (the row index in ``events``) for per-event analyses.
    """
    columns = ("rank", "kind", "device", "source", "pid", "tid", "start_ns", "end_ns")
    frame = events.select(columns).with_row_index("event").join(modes, on="rank", how="inner")
    kind = pl.col("kind")
    on_gpu = pl.col("device").is_not_null()
    gpu = pl.col("mode") == "gpu"
    cpu = pl.col("mode") == "cpu"
    horovod = pl.col("mode") == "horovod"
    # On CPU-only ranks, threads that run collectives (gloo's worker threads) are not compute threads.
    comm_threads = (
        frame.filter(cpu & (kind == "communication") & pl.col("tid").is_not_null())
        .select("rank", "pid", "tid")
        .unique()
        .with_columns(_comm_thread=pl.lit(True))
    )
    if comm_threads.is_empty():  # no CPU-only rank runs collectives: GPU ranks
        frame = frame.with_columns(_comm_thread=pl.lit(False))
    else:
        frame = frame.join(comm_threads, on=["rank", "pid", "tid"], how="left").with_columns(
            pl.col("_comm_thread").fill_null(False)
        )
    on_compute_thread = ~pl.col("_comm_thread")
    set_expr = (
        pl.when(gpu & on_gpu & (kind == "communication"))
        .then(pl.lit("comm"))
        .when(gpu & on_gpu & (kind == "compute"))
        .then(pl.lit("compute"))
        .when(gpu & on_gpu & kind.is_in(["memcpy", "memset"]))
        .then(pl.lit("other"))
        .when(cpu & ~on_gpu & (kind == "communication") & (pl.col("source") == "kineto"))
        .then(pl.lit("comm"))
        .when(cpu & ~on_gpu & (kind == "cpu_op") & on_compute_thread)
        .then(pl.lit("compute"))
        .when(cpu & ~on_gpu & (kind == "sync") & on_compute_thread)
        .then(pl.lit("wait"))
        .when(horovod & (kind == "communication"))
        .then(pl.lit("comm"))
        .when(horovod & (kind == "memcpy"))
        .then(pl.lit("other"))
    )
    return (
        frame.with_columns(set=set_expr)
        .filter(pl.col("set").is_not_null())
        .select("event", "rank", "set", "start_ns", "end_ns")
    )


def assign_iterations(events: pl.DataFrame) -> pl.DataFrame:
    """Return the iteration windows of every rank, projected onto the GPU.

    Parameters
    ----------
    events
        The canonical events frame.

    Returns
    -------
    pl.DataFrame
        :data:`timeline.schema.ITERATIONS_SCHEMA`: one row per rank and iteration, sorted.
    """
    modes = rank_modes(events)
    return _assign_iterations(events, modes, activity_sets(events, modes))


def _assign_iterations(events: pl.DataFrame, modes: pl.DataFrame, sets: pl.DataFrame) -> pl.DataFrame:
    """:func:`assign_iterations` with the rank modes and activity sets already computed."""
    steps = (
        # the names of the few CPU annotations only are read as text, not those of every event
        events.filter((pl.col("kind") == "annotation") & pl.col("device").is_null())
        .filter(pl.col("name").cast(pl.String).str.contains(_STEP_PATTERN))
        .select(
            "rank",
            "pid",
            "tid",
            iteration=pl.col("name").cast(pl.String).str.extract(_STEP_PATTERN, 1).cast(pl.Int64),
            cpu_start=pl.col("start_ns"),
            cpu_end=pl.col("end_ns"),
        )
        .sort("rank", "cpu_start")
    )
    activities = sets.filter(pl.col("set") != "wait").join(
        events.with_row_index("event").select("event", "correlation", "device"), on="event", how="left"
    )
    launches = (
        events.filter((pl.col("kind") == "runtime") & pl.col("correlation").is_not_null())
        .select("rank", "correlation", launch_ns="start_ns")
        .unique(["rank", "correlation"], keep="first")
    )
    # When each activity was issued: its runtime launch on the CPU, else its own start.
    issued = activities.join(launches, on=["rank", "correlation"], how="left").with_columns(
        issued_ns=pl.coalesce("launch_ns", "start_ns")
    )
    step_starts = steps.select("rank", "iteration", "cpu_start", "cpu_end")
    owned = (
        issued.sort("issued_ns")
        .join_asof(
            step_starts.sort("cpu_start"),
            left_on="issued_ns",
            right_on="cpu_start",
            by="rank",
            strategy="backward",
            check_sortedness=False,
        )
        .filter(pl.col("iteration").is_not_null() & (pl.col("issued_ns") <= pl.col("cpu_end")))
        .group_by("rank", "iteration")
        .agg(last_end=pl.col("end_ns").max())
    )
    projected = (
        step_starts.join(owned, on=["rank", "iteration"], how="left")
        .with_columns(proj_end=pl.max_horizontal("cpu_end", "last_end"))
        .sort("rank", "cpu_start")
        .with_columns(prev_end=pl.col("proj_end").shift(1).over("rank"))
        .with_columns(start_ns=pl.max_horizontal("cpu_start", "prev_end"), end_ns=pl.col("proj_end"))
        .with_columns(end_ns=pl.max_horizontal("start_ns", "end_ns"), window=pl.lit("profiler_step"))
    )
    # Ranks without steps: one window over all their measured activity.
    stepped = steps.get_column("rank").unique()
    whole = (
        sets.filter(~pl.col("rank").is_in(stepped.implode()))
        .group_by("rank")
        .agg(start_ns=pl.col("start_ns").min(), end_ns=pl.col("end_ns").max())
        .with_columns(iteration=pl.lit(None, dtype=pl.Int64), window=pl.lit("whole_trace"))
    )
    columns = ["rank", "iteration", "window", "start_ns", "end_ns"]
    windows = pl.concat(
        [
            validate(projected.select(columns), ITERATIONS_SCHEMA, what="iterations"),
            validate(whole.select(columns), ITERATIONS_SCHEMA, what="iterations"),
        ]
    )
    return windows.sort("rank", "start_ns")
