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

Only one span per step makes an iteration (:func:`redundant_steps`): a ``ProfilerStep#N`` span
nested in another step of its rank (an identical copy included) and a later span of a step number
seen earlier on the rank are left out, so that no iteration is counted twice and every activity
belongs to the step that encloses it. :func:`timeline.load` leaves those spans out of the events
with a counted warning (:mod:`timeline.plausibility`).
"""

from __future__ import annotations

import polars as pl

from timeline.importers.rules import CPU_COMMUNICATION_CALLS
from timeline.schema import ITERATIONS_SCHEMA

__all__ = ["assign_iterations", "rank_modes", "redundant_steps", "with_iterations"]

_STEP_PATTERN = r"^ProfilerStep#(\d+)$"
_COMMUNICATION_CALLS = "|".join(f"(?:{p})" for p in CPU_COMMUNICATION_CALLS)


def _step_spans(events: pl.DataFrame) -> pl.DataFrame:
    """Return the ``ProfilerStep#N`` spans on the CPU, with their row (``event``) and whether redundant.

    Columns: ``event`` (the row index in ``events``), ``rank``, ``pid``, ``tid``, ``iteration``,
    ``cpu_start``, ``cpu_end`` and ``redundant`` (``"nested"``, ``"repeated"`` or null), sorted by
    rank and start. A span is *nested* when it lies within an earlier-starting (or, for equal
    starts, longer or identical earlier) step of its rank; a span that is not is *repeated* when a
    kept span of its rank already has its step number.
    """
    # the names of the few CPU annotations only are read as text, not those of every event
    annotation = events.select((pl.col("kind") == "annotation") & pl.col("device").is_null()).to_series()
    rows = annotation.arg_true()
    columns = events.select("rank", "pid", "tid", "name", "start_ns", "end_ns")
    candidates = columns[rows].with_columns(event=rows)
    steps = (
        candidates.lazy()
        .filter(pl.col("name").cast(pl.String).str.contains(_STEP_PATTERN))
        .select(
            "event",
            "rank",
            "pid",
            "tid",
            iteration=pl.col("name").cast(pl.String).str.extract(_STEP_PATTERN, 1).cast(pl.Int64),
            cpu_start=pl.col("start_ns"),
            cpu_end=pl.col("end_ns"),
        )
        .sort("rank", "cpu_start", pl.col("cpu_end"), "event", descending=[False, False, True, False])
    )
    enclosing_end = pl.col("cpu_end").cum_max().shift(1).over("rank")
    nested = pl.col("cpu_end") <= enclosing_end
    steps = steps.with_columns(_nested=nested.fill_null(False))
    repeated = (~pl.col("_nested") & ~pl.struct("rank", "iteration").is_first_distinct()).alias("_repeated")
    kept = steps.filter(~pl.col("_nested")).with_columns(repeated).select("event", "_repeated")
    return (
        steps.join(kept, on="event", how="left", maintain_order="left")
        .with_columns(
            redundant=pl.when("_nested")
            .then(pl.lit("nested"))
            .when(pl.col("_repeated"))
            .then(pl.lit("repeated"))
            .otherwise(pl.lit(None, dtype=pl.String))
        )
        .drop("_nested", "_repeated")
        .collect(engine="in-memory")
    )


def redundant_steps(events: pl.DataFrame) -> pl.DataFrame:
    """Return the ``ProfilerStep#N`` spans that make no iteration, and why.

    A span inside another step of its rank (nested, or an identical copy) is ``nested``: the step
    that encloses it is the iteration. A later span of a step number already seen on the rank (and
    not nested) is ``repeated``: the first span of each number is the iteration. Neither becomes an
    iteration window (:func:`assign_iterations`).

    Parameters
    ----------
    events
        The canonical events frame.

    Returns
    -------
    pl.DataFrame
        Columns ``event`` (UInt32: the row in ``events``), ``rank``, ``iteration`` (the step
        number) and ``reason`` (``nested`` or ``repeated``), sorted by rank and start.
    """
    spans = _step_spans(events)
    return spans.filter(pl.col("redundant").is_not_null()).select(
        "event", "rank", "iteration", reason="redundant"
    )


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
    spans = events.lazy().select("rank", "kind", "device", "source").filter(pl.col("kind") != "instant")
    return spans.group_by("rank").agg(mode.alias("mode")).sort("rank").collect(engine="in-memory")


def _cpu_threads(
    events: pl.DataFrame, frame: pl.LazyFrame, modes: pl.DataFrame, steps: pl.DataFrame | None
) -> pl.LazyFrame:
    """Add ``_comm_thread`` and ``_comm_call`` to the rows of :func:`activity_sets` (CPU-only ranks).

    ``_comm_thread``: the row's thread runs collectives and is not a training thread, so it is no
    compute thread (gloo's worker threads). A training thread holds ``ProfilerStep#N``: it computes
    even when it runs sends and receives itself, as gloo does on the calling thread. ``_comm_call``:
    the row is a call into c10d (:data:`~timeline.importers.rules.CPU_COMMUNICATION_CALLS`): issuing
    or waiting on communication, not compute. ``steps``: :func:`_step_spans` of ``events`` when
    already computed. Returns ``frame`` with the two columns, lazily.
    """
    cpu = pl.col("mode") == "cpu"
    threads = ["rank", "pid", "tid"]
    none = frame.with_columns(_comm_thread=pl.lit(False), _comm_call=pl.lit(False))
    if "cpu" not in modes.get_column("mode").to_list():  # no CPU-only rank: GPU ranks
        return none
    comm_threads = (
        frame.filter(cpu & (pl.col("kind") == "communication") & pl.col("tid").is_not_null())
        .select(threads)
        .unique()
        .collect(engine="in-memory")
    )
    if comm_threads.is_empty():  # no CPU-only rank runs collectives
        return none
    if steps is None:
        steps = _step_spans(events)
    training = steps.lazy().select(pl.col("rank").cast(pl.Int32), "pid", "tid").unique()
    workers = (
        comm_threads.lazy().join(training, on=threads, how="anti").with_columns(_comm_thread=pl.lit(True))
    )
    calls = pl.col("name").cast(pl.String).str.contains(_COMMUNICATION_CALLS)
    return frame.join(workers, on=threads, how="left").with_columns(
        pl.col("_comm_thread").fill_null(False),
        _comm_call=(cpu & (pl.col("kind") == "cpu_op") & calls).fill_null(False),
    )


def activity_sets(
    events: pl.DataFrame, modes: pl.DataFrame, *, steps: pl.DataFrame | None = None
) -> pl.DataFrame:
    """Return the intervals the overlap analysis measures, each tagged with its set.

    Sets: ``comm`` (communication), ``compute``, ``wait`` (CPU waits and calls into c10d that cancel
    compute on CPU-only ranks) and ``other`` (GPU memcpy/memset). Columns: ``rank``, ``set``,
    ``start_ns``, ``end_ns``, plus ``event`` (the row index in ``events``) for per-event analyses.
    ``steps``: the ``ProfilerStep#N`` spans of ``events`` (internal) when already computed.
    """
    columns = ("rank", "kind", "device", "source", "pid", "tid", "name", "start_ns", "end_ns")
    frame = events.lazy().select(columns).with_row_index("event").join(modes.lazy(), on="rank", how="inner")
    kind = pl.col("kind")
    on_gpu = pl.col("device").is_not_null()
    gpu = pl.col("mode") == "gpu"
    cpu = pl.col("mode") == "cpu"
    horovod = pl.col("mode") == "horovod"
    # On CPU-only ranks, gloo's worker threads are no compute threads; calls into c10d are not compute
    frame = _cpu_threads(events, frame, modes, steps)
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
        .when(cpu & ~on_gpu & pl.col("_comm_call") & on_compute_thread)
        .then(pl.lit("wait"))
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
        .collect(engine="in-memory")
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


def with_iterations(rows: pl.LazyFrame, windows: pl.DataFrame) -> pl.LazyFrame:
    """Add ``iteration``, lazily: the ``ProfilerStep`` window of its rank that holds a row's start.

    ``rows``: columns ``rank`` and ``start_ns`` (any others are kept), returned sorted by
    ``start_ns``; ``windows``: :func:`assign_iterations`' windows. Null outside every step window.
    """
    steps = (
        windows.lazy()
        .filter(pl.col("window") == "profiler_step")
        .select("rank", "iteration", _w_start="start_ns", _w_end="end_ns")
        .sort("_w_start")
    )
    located = rows.sort("start_ns").join_asof(
        steps, left_on="start_ns", right_on="_w_start", by="rank", strategy="backward", check_sortedness=False
    )
    return located.with_columns(
        iteration=pl.when(pl.col("start_ns") < pl.col("_w_end")).then(pl.col("iteration"))
    ).drop("_w_start", "_w_end")


def _assign_iterations(
    events: pl.DataFrame, modes: pl.DataFrame, sets: pl.DataFrame, *, steps: pl.DataFrame | None = None
) -> pl.DataFrame:
    """:func:`assign_iterations` with the rank modes and activity sets (and step spans) already computed."""
    # one span per step: nested and repeated ProfilerStep#N spans make no iteration
    spans = _step_spans(events) if steps is None else steps
    kept = spans.filter(pl.col("redundant").is_null())
    step_starts = (
        kept.lazy()
        .select("rank", "iteration", "cpu_start", "cpu_end")
        .sort("rank", "cpu_start", maintain_order=True)
    )
    owned = (
        _issued_activities(events, sets)
        .sort("issued_ns")
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
    stepped = kept.get_column("rank").unique()
    whole = (
        sets.lazy()
        .filter(~pl.col("rank").is_in(stepped.implode()))
        .group_by("rank")
        .agg(start_ns=pl.col("start_ns").min(), end_ns=pl.col("end_ns").max())
        .with_columns(iteration=pl.lit(None, dtype=pl.Int64), window=pl.lit("whole_trace"))
    )
    # the casts of validate(), in the one query
    typed = [pl.col(name).cast(dtype) for name, dtype in ITERATIONS_SCHEMA.items()]
    windows = pl.concat([projected.select(typed), whole.select(typed)])
    return windows.sort("rank", "start_ns").collect(engine="in-memory")


def _issued_activities(events: pl.DataFrame, sets: pl.DataFrame) -> pl.LazyFrame:
    """Return the activities that are not waits, lazily, with ``issued_ns``: when each was issued.

    Its runtime launch on the CPU (the first runtime event of its correlation), else its own start.
    """
    activities = (
        sets.lazy()
        .filter(pl.col("set") != "wait")
        .join(
            events.lazy().with_row_index("event").select("event", "correlation", "device"),
            on="event",
            how="left",
        )
    )
    launches = (
        events.lazy()
        .filter((pl.col("kind") == "runtime") & pl.col("correlation").is_not_null())
        .select("rank", "correlation", launch_ns="start_ns")
        .unique(["rank", "correlation"], keep="first")
    )
    return activities.join(launches, on=["rank", "correlation"], how="left").with_columns(
        issued_ns=pl.coalesce("launch_ns", "start_ns")
    )
