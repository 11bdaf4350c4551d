"""The frames budgets are evaluated on, from an overlap analysis or from a saved summary JSON.

Takes an :class:`~timeline.analysis.overlap.Overlap` (a trace or a Parquet file, analysed), with
the trace's events when the budgets need the collectives matched across ranks, or the JSON written by
``timeline analyze --json`` (:func:`timeline.results.summary.build_summary`), and gives
:class:`MetricFrames`: the per-iteration, per-rank and (when known) per-collective rows that metrics
read, and the frames of :func:`~timeline.analysis.collectives.match_collectives`. A summary holds no
per-collective rows, so collective metrics need the trace itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import polars as pl

from timeline.analysis.collectives import compute_iteration_utilisation, match_collectives
from timeline.analysis.overlap import Overlap
from timeline.analysis.schemas import DIMENSION_EXPOSURE_SCHEMA
from timeline.analysis.stragglers import find_stragglers
from timeline.errors import TraceFormatError
from timeline.paths import path_text, read_regular_file
from timeline.plausibility import without_cross_rank_times, without_stragglers
from timeline.results.collectives import world_size_of_files
from timeline.results.summary import READABLE_SUMMARY_VERSIONS, SUMMARY_VERSION
from timeline.schema import ITERATION_OVERLAP_SCHEMA, RANK_OVERLAP_SCHEMA

if TYPE_CHECKING:
    from timeline.trace import Trace

__all__ = [
    "DIMENSION_ROWS_SCHEMA",
    "FINDINGS_SCHEMA",
    "MAX_SUMMARY_BYTES",
    "JobFacts",
    "MetricFrames",
    "findings_frame",
    "frames_from_overlap",
    "frames_from_summary",
    "job_facts",
    "read_summary",
    "with_dimensions",
]


@dataclass(frozen=True)
class JobFacts:
    """What tells one job from another, to warn when a baseline is of another job.

    Attributes
    ----------
    world_size
        The largest world size the files record (``distributedInfo.world_size``), or None.
    backends
        The communication backends the files record (``nccl``, ``gloo``…), sorted.
    modes
        How the ranks were measured (``gpu``: GPU kernels, ``cpu``: CPU only, ``horovod``), sorted.
    collectives
        The kinds of collective the run's communication events are (``all_reduce``…), sorted; None
        when not known (a summary JSON keeps no per-collective rows).
    """

    world_size: int | None
    backends: tuple[str, ...]
    modes: tuple[str, ...]
    collectives: tuple[str, ...] | None


def _distinct(values: Sequence[object]) -> tuple[str, ...]:
    return tuple(sorted({str(v).lower() for v in values if v is not None and str(v) != ""}))


def job_facts(
    ranks: pl.DataFrame, *, files: pl.DataFrame | None = None, collectives: pl.DataFrame | None = None
) -> JobFacts:
    """Return the facts of a job from its rank rows, its file table and its communication events.

    Parameters
    ----------
    ranks
        Rows with a ``mode`` column (:data:`timeline.schema.RANK_OVERLAP_SCHEMA`, or a summary's).
    files
        Rows with ``world_size`` and ``backend`` (:data:`timeline.schema.FILES_SCHEMA`); without
        them the world size and backends are unknown.
    collectives
        Rows with a ``collective`` column (the communication events); None: the mix is unknown.
    """
    world_size = None
    backends: tuple[str, ...] = ()
    if files is not None and files.height:
        if "world_size" in files.columns:
            sizes = [int(v) for v in files.get_column("world_size").to_list() if isinstance(v, int | float)]
            world_size = max(sizes) if sizes else None
        if "backend" in files.columns:
            backends = _distinct(files.get_column("backend").to_list())
    modes = _distinct(ranks.get_column("mode").to_list()) if "mode" in ranks.columns else ()
    mix = None
    if collectives is not None and "collective" in collectives.columns:
        mix = _distinct(collectives.get_column("collective").cast(pl.String).to_list())
    return JobFacts(world_size=world_size, backends=backends, modes=modes, collectives=mix)


@dataclass(frozen=True)
class MetricFrames:
    """The rows budgets read, and where they came from.

    Attributes
    ----------
    label
        The input, for messages (``runs/pr``, ``baseline.json``).
    iterations
        Rank × iteration rows (:data:`timeline.schema.ITERATION_OVERLAP_SCHEMA`).
    ranks
        Whole-trace rank rows (:data:`timeline.schema.RANK_OVERLAP_SCHEMA`).
    collectives
        Communication events (:data:`timeline.schema.COLLECTIVE_EXPOSURE_SCHEMA`); ``None`` for a
        summary, which does not keep them.
    logical_collectives
        The collectives matched across ranks, one row per logical collective
        (:data:`timeline.analysis.schemas.COLLECTIVES_SCHEMA`, without a link); ``None`` unless
        matched (:func:`frames_from_overlap` with ``events``).
    collective_ranks
        One row per logical collective and rank
        (:data:`timeline.analysis.schemas.COLLECTIVE_RANKS_SCHEMA`); ``None`` unless matched.
    iteration_utilisation
        One row per iteration (:data:`timeline.analysis.schemas.ITERATION_UTILISATION_SCHEMA`,
        without a link); ``None`` unless matched.
    straggler_iterations
        One row per iteration (:data:`timeline.analysis.schemas.STRAGGLER_ITERATIONS_SCHEMA`);
        ``None`` unless matched.
    warnings
        The matching's warnings (ranks with fewer collectives than the others).
    job
        What tells this job from another (:class:`JobFacts`), to warn when a baseline is of
        another job; None when unknown.
    findings
        One row per cause the diagnosis examined (:func:`findings_frame`); ``None`` unless the
        run was diagnosed (a budget on a ``*_gain_ratio`` metric, or ``check --markdown``).
    diagnosis
        The diagnosis as plain data (``verdict`` and ``findings``, :mod:`timeline.results.diagnosis`),
        for the markdown summary; ``None`` unless diagnosed.
    dimensions
        The exposure per dimension × iteration × rank (:data:`DIMENSION_ROWS_SCHEMA`: the rows of
        :func:`~timeline.analysis.dimensions.exposure_by` split by ``dimension`` and by ``pg_desc``,
        ``by`` saying which), read by budgets scoped to a dimension; ``None`` unless asked for
        (:func:`with_dimensions`) or read from a summary of layout 3.
    """

    label: str
    iterations: pl.DataFrame
    ranks: pl.DataFrame
    collectives: pl.DataFrame | None = None
    logical_collectives: pl.DataFrame | None = None
    collective_ranks: pl.DataFrame | None = None
    iteration_utilisation: pl.DataFrame | None = None
    straggler_iterations: pl.DataFrame | None = None
    warnings: tuple[str, ...] = ()
    job: JobFacts | None = None
    findings: pl.DataFrame | None = None
    diagnosis: Mapping[str, Any] | None = None
    dimensions: pl.DataFrame | None = None

    @property
    def matched(self) -> bool:
        """Whether the collectives were matched across ranks (the cross-rank frames are known)."""
        return self.logical_collectives is not None


def frames_from_overlap(
    overlap: Overlap,
    *,
    label: str,
    events: pl.DataFrame | None = None,
    files: pl.DataFrame | None = None,
    clock_note: str | None = None,
    groups: pl.DataFrame | None = None,
) -> MetricFrames:
    """Return the frames of an overlap analysis, and of the collectives matched across ranks.

    Parameters
    ----------
    overlap
        :func:`timeline.analysis.overlap.compute_overlap` of a trace.
    label
        The input, for messages.
    events
        The events ``overlap`` was computed from: also match their collectives across ranks
        (:func:`~timeline.analysis.collectives.match_collectives`, with the overlap's iteration
        windows), for the metrics of :data:`~timeline.budgets.metrics.MATCHED_SOURCES`. Leave it out
        when no budget reads them (``BudgetFile.needs_matching``): matching is a pass over every
        rank's communication events.
    files
        The trace's file table (``Trace.files``): the world size and backend of :attr:`MetricFrames.job`.
    clock_note
        ``Trace.clock_note``: when the ranks' clocks disagree, the figures that compare ranks' times
        (start skews, arrival lags, stragglers) are left out, as the collectives report leaves them out
        (:func:`timeline.plausibility.without_cross_rank_times`); a budget on them then has no value.
    groups
        ``Trace.groups``: the process groups the traces declare, for the matching (a collective that
        names no group may have run on one of them).

    Notes
    -----
    The per-iteration frames of the matched collectives (``iteration_utilisation``,
    ``straggler_iterations``) keep the row of the collectives outside every ProfilerStep window
    (``iteration`` null) only when there is no window at all, as the per-iteration collective metrics
    leave out events outside every window.
    """
    frames = MetricFrames(
        label=label,
        iterations=overlap.iterations,
        ranks=overlap.ranks,
        collectives=overlap.collectives,
        job=job_facts(overlap.ranks, files=files, collectives=overlap.collectives),
    )
    if events is None:
        return frames
    world_size = None if files is None else world_size_of_files(files)
    match = match_collectives(events, windows=overlap.windows, world_size=world_size, groups=groups)
    utilisation = compute_iteration_utilisation(
        match.collectives, windows=overlap.windows, iteration_overlap=overlap.iterations
    )
    stragglers = find_stragglers(match, iteration_overlap=overlap.iterations)
    if clock_note is not None:  # the ranks' clocks disagree (a load warning): no time compares
        match, stragglers = without_cross_rank_times(match), without_stragglers(stragglers)
    descriptions = match.groups.select("group", "pg_desc").unique("group")
    return replace(
        frames,
        logical_collectives=match.collectives.join(
            descriptions, on="group", how="left", maintain_order="left"
        ),
        collective_ranks=match.ranks.join(descriptions, on="group", how="left", maintain_order="left"),
        iteration_utilisation=_in_windows(utilisation),
        straggler_iterations=_in_windows(stragglers.iterations),
        warnings=match.warnings,
    )


DIMENSION_ROWS_SCHEMA = pl.Schema({"by": pl.String(), **DIMENSION_EXPOSURE_SCHEMA})
"""The exposure per dimension (``by = "dimension"``) or per group description (``by = "pg_desc"``)."""


def with_dimensions(
    frames: MetricFrames,
    trace: Trace,
    overlap: Overlap,
    *,
    offsets: pl.DataFrame | None = None,
    overrides: Mapping[str, str] | None = None,
    gpus_per_node: int | None = None,
) -> MetricFrames:
    """Return the frames with the exposure per dimension and each communication event's dimension.

    :attr:`MetricFrames.dimensions` (split by dimension and by ``pg_desc``), and the ``dimension``
    and ``pg_desc`` of every row of :attr:`MetricFrames.collectives`
    (:func:`~timeline.results.dimensions.labels_of`: the group attribution of ``timeline
    collectives``). ``overrides``: description → dimension label; ``gpus_per_node``: ranks per node.
    """
    from timeline.analysis.dimensions import exposure_by
    from timeline.results.dimensions import labels_of

    labels = labels_of(trace, overlap, offsets=offsets, overrides=overrides, gpus_per_node=gpus_per_node)
    rows = pl.concat(
        [
            exposure_by(overlap, labels, by="dimension").with_columns(by=pl.lit("dimension")),
            exposure_by(overlap, labels, by="pg_desc").with_columns(by=pl.lit("pg_desc")),
        ]
    ).select(DIMENSION_ROWS_SCHEMA.names())
    collectives = frames.collectives
    if collectives is not None:
        keyed = labels.unique(["rank", "start_ns", "end_ns"], keep="first", maintain_order=True)
        collectives = collectives.join(
            keyed, on=["rank", "start_ns", "end_ns"], how="left", maintain_order="left"
        )
    return replace(frames, dimensions=rows, collectives=collectives)


def _summary_dimensions(summary: Mapping[str, Any], label: str) -> pl.DataFrame | None:
    """Return the exposure per dimension a summary holds: none before layout 3, no rows if it names none."""
    if summary.get("version", 0) < 3:
        return None
    held = summary.get("dimensions")
    if held is None:
        return DIMENSION_ROWS_SCHEMA.to_frame()
    rows = held.get("rows") if isinstance(held, dict) else None
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise TraceFormatError(
            f"{label}: summary 'dimensions' has no rows; write it with timeline analyze --json"
        )
    try:
        frame = pl.DataFrame(rows, schema=DIMENSION_EXPOSURE_SCHEMA, strict=False)
    except (pl.exceptions.PolarsError, TypeError, ValueError) as exc:
        raise TraceFormatError(f"{label}: summary 'dimensions' rows of an unexpected shape ({exc})") from None
    return frame.with_columns(by=pl.lit("dimension")).select(DIMENSION_ROWS_SCHEMA.names())


def _in_windows(frame: pl.DataFrame) -> pl.DataFrame:
    """Drop the row of the collectives outside every iteration window, unless it is the only one."""
    return frame.filter(pl.col("iteration").is_not_null() | pl.col("iteration").is_null().all())


MAX_SUMMARY_BYTES = 1 << 30
"""The largest summary JSON read, 1 GiB (``timeline analyze --json`` of 1,024 ranks writes a few MB)."""

FINDINGS_SCHEMA = pl.Schema(
    {
        "cause": pl.String(),
        "predicted_gain_ratio": pl.Float64(),
        "predicted_step_ns": pl.Int64(),
        "basis": pl.String(),
        "found": pl.Boolean(),
    }
)
"""One row per cause the diagnosis examined: the largest gain of its findings (0 without one)."""


def findings_frame(
    verdict: Mapping[str, Any] | None, findings: Sequence[Mapping[str, Any]] | None
) -> pl.DataFrame:
    """Return the rows the ``*_gain_ratio`` metrics read, from a diagnosis' plain data.

    One row per cause of ``verdict["examined"]``: the largest predicted gain of its findings, and
    the predicted step that gain comes with; ``0`` (and the measured step) for a cause examined
    without a finding (its fix would save less than :data:`~timeline.diagnosis.thresholds.MIN_GAIN`),
    ``found`` false. Findings of other causes (a hang, a desync) add rows of their own.
    """
    if verdict is None or findings is None:
        return FINDINGS_SCHEMA.to_frame()
    best: dict[str, Mapping[str, Any]] = {}
    for finding in findings:
        cause = str(finding.get("cause"))
        gain = finding.get("predicted_gain_ratio")
        if gain is None:
            continue
        if cause not in best or gain > best[cause]["predicted_gain_ratio"]:
            best[cause] = finding
    rows = []
    for cause in [*verdict.get("examined", []), *(c for c in best if c not in verdict.get("examined", []))]:
        kept = best.get(cause)
        rows.append(
            {
                "cause": cause,
                "predicted_gain_ratio": 0.0 if kept is None else float(kept["predicted_gain_ratio"]),
                "predicted_step_ns": verdict.get("step_ns") if kept is None else kept["predicted_step_ns"],
                "basis": None if kept is None else kept["basis"],
                "found": kept is not None,
            }
        )
    return pl.DataFrame(rows, schema=FINDINGS_SCHEMA)


def read_summary(path: str | Path) -> MetricFrames:
    """Read a summary JSON written by ``timeline analyze --json``.

    Raises
    ------
    TraceFormatError
        Unreadable, not JSON, or not a summary of this layout version.
    """
    source = str(path)
    data = read_regular_file(path, limit=MAX_SUMMARY_BYTES, error=TraceFormatError, what="summary")
    try:
        summary = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise TraceFormatError(
            f"{source}: not valid JSON ({exc}); write it with timeline analyze --json"
        ) from None
    if not isinstance(summary, dict):
        raise TraceFormatError(f"{source}: not a summary of timeline analyze --json")
    return frames_from_summary(summary, label=path_text(path))


def frames_from_summary(summary: Mapping[str, Any], *, label: str) -> MetricFrames:
    """Return the frames held by a summary (:func:`timeline.results.summary.build_summary`).

    Raises
    ------
    TraceFormatError
        Another layout version, or rows of the wrong shape.
    """
    version = summary.get("version")
    if not isinstance(version, int) or version not in READABLE_SUMMARY_VERSIONS:
        readable = ", ".join(str(v) for v in sorted(READABLE_SUMMARY_VERSIONS))
        msg = (
            f"{label}: summary layout version {version!r}, this timeline reads versions {readable} "
            f"(it writes {SUMMARY_VERSION}); "
            "re-run timeline analyze --json with this version"
        )
        raise TraceFormatError(msg)
    iterations = _frame(summary, "iterations", ITERATION_OVERLAP_SCHEMA, label)
    ranks = _frame(summary, "ranks", RANK_OVERLAP_SCHEMA, label)
    files = summary.get("files")
    file_rows = None
    if isinstance(files, list) and files and all(isinstance(row, dict) for row in files):
        keys = ("world_size", "backend")
        file_rows = pl.DataFrame(
            [{key: row.get(key) for key in keys} for row in files],
            schema={"world_size": pl.Int64(), "backend": pl.String()},
            strict=False,
        )
    # A summary keeps the top collectives only: its collective mix is unknown.
    job = job_facts(ranks, files=file_rows)
    verdict, findings = summary.get("verdict"), summary.get("findings")
    diagnosed = isinstance(verdict, dict) and isinstance(findings, list)
    return MetricFrames(
        label=label,
        iterations=iterations,
        ranks=ranks,
        collectives=None,
        job=job,
        findings=findings_frame(verdict, findings) if diagnosed else None,
        diagnosis={"verdict": verdict, "findings": findings} if diagnosed else None,
        dimensions=_summary_dimensions(summary, label),
    )


def _frame(summary: Mapping[str, Any], key: str, schema: pl.Schema, label: str) -> pl.DataFrame:
    rows = summary.get(key)
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise TraceFormatError(f"{label}: summary has no {key!r} rows; write it with timeline analyze --json")
    names: dict[str, None] = {}
    for row in rows:
        names.update(dict.fromkeys(row))
    # Only the columns the file has: a metric needing a column an older summary lacks is reported, not nulled.
    dtypes = {name: schema.get(name) or pl.Float64() for name in names}
    if "rank" in dtypes:
        dtypes["rank"] = pl.Int32()
    try:
        return pl.DataFrame(rows, schema={name: dtype for name, dtype in dtypes.items()}, strict=False)
    except (pl.exceptions.PolarsError, TypeError, ValueError) as exc:
        raise TraceFormatError(f"{label}: summary {key!r} rows of an unexpected shape ({exc})") from None
