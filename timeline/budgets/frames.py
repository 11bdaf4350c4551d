"""The frames budgets are evaluated on, from a run or from a saved summary JSON.

Takes a :class:`~timeline.run.Run` (traces, a Parquet file or dataset, read) or the JSON written by
``timeline analyze --json`` (a :class:`timeline.results.summary.Summary`: layout 4, ``kind`` first,
decoded into the Struct; or an older layout, version first, read as plain data), and gives
:class:`MetricFrames`: the per-iteration, per-rank and (when known) per-collective rows that metrics
read, the run's collectives matched across ranks, its exposure per dimension and its diagnosis. A
summary holds no per-collective rows, so collective metrics need the trace itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import polars as pl

from timeline.analysis.schemas import DIMENSION_EXPOSURE_SCHEMA
from timeline.errors import TraceFormatError
from timeline.paths import path_text, read_regular_file
from timeline.results.base import Row
from timeline.results.diagnosis import DiagnosisReport, Verdict
from timeline.results.dimensions import DimensionRow
from timeline.results.findings import Finding
from timeline.results.summary import (
    READABLE_SUMMARY_VERSIONS,
    SUMMARY_VERSION,
    IterationRow,
    RankRow,
    Summary,
)
from timeline.schema import ITERATION_OVERLAP_SCHEMA, RANK_OVERLAP_SCHEMA

if TYPE_CHECKING:
    from timeline.run import Run

__all__ = [
    "DIMENSION_ROWS_SCHEMA",
    "FINDINGS_SCHEMA",
    "MAX_SUMMARY_BYTES",
    "JobFacts",
    "MetricFrames",
    "findings_frame",
    "frames_from_summary",
    "frames_of_run",
    "job_facts",
    "read_summary",
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
        matched (:func:`frames_of_run` with ``matched=True``).
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
        The diagnosis (:class:`~timeline.results.diagnosis.DiagnosisReport`: its verdict and
        findings), for the markdown summary; ``None`` unless diagnosed.
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
    diagnosis: DiagnosisReport | None = None
    dimensions: pl.DataFrame | None = None

    @property
    def matched(self) -> bool:
        """Whether the collectives were matched across ranks (the cross-rank frames are known)."""
        return self.logical_collectives is not None


def frames_of_run(run: Run, *, label: str, matched: bool, dimensions: bool, diagnosed: bool) -> MetricFrames:
    """Return the frames a run's budgets read, every one a fact of the run (:class:`timeline.run.Run`).

    Parameters
    ----------
    run
        The run.
    label
        Its input, for messages.
    matched
        With the collectives matched across ranks (the run's one matching: its logical collectives
        and per-rank rows, with each group's description; the utilisation and stragglers per
        iteration), for the metrics of :data:`~timeline.budgets.metrics.MATCHED_SOURCES`.
    dimensions
        With the exposure per dimension and per group description, and each communication event's
        dimension and description (:attr:`~timeline.run.Run.labels`), for budgets scoped to one.
    diagnosed
        With the findings (the ``*_gain_ratio`` metrics) and the diagnosis (the markdown summary).

    Notes
    -----
    The per-iteration frames of the matched collectives (``iteration_utilisation``,
    ``straggler_iterations``) keep the row of the collectives outside every ProfilerStep window
    (``iteration`` null) only when there is no window at all, as the per-iteration collective metrics
    leave out events outside every window.
    """
    overlap = run.overlap
    frames = MetricFrames(
        label=label,
        iterations=overlap.iterations,
        ranks=overlap.ranks,
        collectives=overlap.collectives,
        job=job_facts(overlap.ranks, files=run.trace.files, collectives=overlap.collectives),
    )
    if matched:
        match, stragglers, utilisation = run.matched, run.stragglers, run.utilisation
        descriptions = match.groups.select("group", "pg_desc").unique("group")
        frames = replace(
            frames,
            logical_collectives=match.collectives.join(
                descriptions, on="group", how="left", maintain_order="left"
            ),
            collective_ranks=match.ranks.join(descriptions, on="group", how="left", maintain_order="left"),
            iteration_utilisation=_in_windows(utilisation),
            straggler_iterations=_in_windows(stragglers.iterations),
            warnings=match.warnings,
        )
    if dimensions:
        frames = _with_dimensions(frames, run)
    if diagnosed:
        from timeline.results.diagnosis import build_diagnosis

        built = build_diagnosis(run.diagnosis)
        frames = replace(frames, findings=findings_frame(built.verdict, built.findings), diagnosis=built)
    return frames


DIMENSION_ROWS_SCHEMA = pl.Schema({"by": pl.String(), **DIMENSION_EXPOSURE_SCHEMA})
"""The exposure per dimension (``by = "dimension"``) or per group description (``by = "pg_desc"``)."""


def _with_dimensions(frames: MetricFrames, run: Run) -> MetricFrames:
    """Return the frames with the exposure per dimension and each communication event's dimension.

    :attr:`MetricFrames.dimensions` (split by dimension and by ``pg_desc``), and the ``dimension``
    and ``pg_desc`` of every row of :attr:`MetricFrames.collectives` (:attr:`timeline.run.Run.labels`:
    the group attribution of ``timeline collectives``).
    """
    by_dimension, by_description = run.dimension_exposure, run.description_exposure
    if by_dimension is None or by_description is None:
        return replace(frames, dimensions=DIMENSION_ROWS_SCHEMA.to_frame())
    rows = pl.concat(
        [
            by_dimension.with_columns(by=pl.lit("dimension")),
            by_description.with_columns(by=pl.lit("pg_desc")),
        ]
    ).select(DIMENSION_ROWS_SCHEMA.names())
    collectives = frames.collectives
    if collectives is not None:
        keyed = run.labels.unique(["rank", "start_ns", "end_ns"], keep="first", maintain_order=True)
        collectives = collectives.join(
            keyed, on=["rank", "start_ns", "end_ns"], how="left", maintain_order="left"
        )
    return replace(frames, dimensions=rows, collectives=collectives)


def _summary_dimensions(summary: Mapping[str, Any], label: str) -> pl.DataFrame | None:
    """Return the exposure per dimension of an older summary: none before layout 3; no rows: none named."""
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


def findings_frame(verdict: Verdict | None, findings: Sequence[Finding] | None) -> pl.DataFrame:
    """Return the rows the ``*_gain_ratio`` metrics read, from a diagnosis' verdict and findings.

    One row per cause of ``verdict.examined``: the largest predicted gain of its findings, and
    the predicted step that gain comes with; ``0`` (and the measured step) for a cause examined
    without a finding (its fix would save less than :data:`~timeline.diagnosis.thresholds.MIN_GAIN`),
    ``found`` false. Findings of other causes (a hang, a desync) add rows of their own.
    """
    if verdict is None or findings is None:
        return FINDINGS_SCHEMA.to_frame()
    best: dict[str, Finding] = {}
    for finding in findings:
        gain = finding.predicted_gain_ratio
        if gain is None:
            continue
        kept = best.get(finding.cause)
        if kept is None or gain > (kept.predicted_gain_ratio or 0.0):
            best[finding.cause] = finding
    rows = []
    for cause in [*verdict.examined, *(c for c in best if c not in verdict.examined)]:
        found = best.get(cause)
        rows.append(
            {
                "cause": cause,
                "predicted_gain_ratio": 0.0 if found is None else found.predicted_gain_ratio,
                "predicted_step_ns": verdict.step_ns if found is None else found.predicted_step_ns,
                "basis": None if found is None else found.basis,
                "found": found is not None,
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


def frames_from_summary(summary: Mapping[str, Any] | Summary, *, label: str) -> MetricFrames:
    """Return the frames held by a summary (:class:`timeline.results.summary.Summary`).

    ``summary``: the Struct, or a summary JSON decoded as plain data: layout 4 (``kind`` first) is
    decoded into the Struct, layouts 1 to 3 (``version`` first) are read as they are.

    Raises
    ------
    TraceFormatError
        Another kind of result, another layout version, or rows of the wrong shape.
    """
    if isinstance(summary, Summary):
        return _frames_of_summary(summary, label=label)
    kind, version = summary.get("kind"), summary.get("version")
    if kind is not None and kind != "summary":
        raise TraceFormatError(
            f"{label}: a {kind!s:.40} result of timeline, not a summary; "
            "write one with timeline analyze --json"
        )
    if not isinstance(version, int) or version not in READABLE_SUMMARY_VERSIONS:
        readable = ", ".join(str(v) for v in sorted(READABLE_SUMMARY_VERSIONS))
        msg = (
            f"{label}: summary layout version {version!r}, this timeline reads versions {readable} "
            f"(it writes {SUMMARY_VERSION}); "
            "re-run timeline analyze --json with this version"
        )
        raise TraceFormatError(msg)
    if version == SUMMARY_VERSION:
        try:
            typed = msgspec.convert(summary, Summary)
        except msgspec.ValidationError as exc:
            raise TraceFormatError(
                f"{label}: not a summary of layout {SUMMARY_VERSION} ({exc}); "
                "write it with timeline analyze --json"
            ) from None
        return _frames_of_summary(typed, label=label)
    return _frames_of_older_summary(summary, label=label)


def _frames_of_summary(summary: Summary, *, label: str) -> MetricFrames:
    """Return the frames of a typed summary (layout 4)."""
    ranks = _rows_frame(summary.ranks, RankRow, RANK_OVERLAP_SCHEMA, rename={"span_ns": "step_ns"})
    files = pl.DataFrame(
        {
            "world_size": [row.world_size for row in summary.files],
            "backend": [row.backend for row in summary.files],
        },
        schema={"world_size": pl.Int64(), "backend": pl.String()},
    )
    diagnosis = None
    if summary.verdict is not None and summary.findings is not None:
        diagnosis = DiagnosisReport(
            timeline=summary.timeline, verdict=summary.verdict, findings=summary.findings
        )
    dimensions = DIMENSION_ROWS_SCHEMA.to_frame()
    if summary.dimensions is not None:
        rows = _rows_frame(summary.dimensions.rows, DimensionRow, DIMENSION_EXPOSURE_SCHEMA)
        dimensions = rows.with_columns(by=pl.lit("dimension")).select(DIMENSION_ROWS_SCHEMA.names())
    return MetricFrames(
        label=label,
        iterations=_rows_frame(summary.iterations, IterationRow, ITERATION_OVERLAP_SCHEMA),
        ranks=ranks,
        collectives=None,
        # A summary keeps the top collectives only: its collective mix is unknown.
        job=job_facts(ranks, files=files),
        findings=None if diagnosis is None else findings_frame(diagnosis.verdict, diagnosis.findings),
        diagnosis=diagnosis,
        dimensions=dimensions,
    )


def _rows_frame(
    rows: Sequence[Row], row: type[Row], schema: pl.Schema, *, rename: Mapping[str, str] | None = None
) -> pl.DataFrame:
    """Return typed rows as a frame of ``schema``'s types, a column per field (``rename``: field → column)."""
    names = {name: (rename or {}).get(name, name) for name in row.__struct_fields__}
    columns = {column: [getattr(r, name) for r in rows] for name, column in names.items()}
    return pl.DataFrame(columns, schema={column: schema[column] for column in names.values()})


def _frames_of_older_summary(summary: Mapping[str, Any], *, label: str) -> MetricFrames:
    """Return the frames of a summary of layout 1, 2 or 3, read as plain data."""
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
    diagnosis = _older_diagnosis(summary.get("verdict"), summary.get("findings"), label=label)
    return MetricFrames(
        label=label,
        iterations=iterations,
        ranks=ranks,
        collectives=None,
        job=job,
        findings=None if diagnosis is None else findings_frame(diagnosis.verdict, diagnosis.findings),
        diagnosis=diagnosis,
        dimensions=_summary_dimensions(summary, label),
    )


def _older_diagnosis(verdict: object, findings: object, *, label: str) -> DiagnosisReport | None:
    """Return the verdict and findings of a summary of layout 2 or 3 as a diagnosis (None: not diagnosed)."""
    if not isinstance(verdict, dict) or not isinstance(findings, list):
        return None
    try:
        return DiagnosisReport(
            verdict=msgspec.convert(verdict, Verdict), findings=msgspec.convert(findings, list[Finding])
        )
    except msgspec.ValidationError as exc:
        raise TraceFormatError(
            f"{label}: summary 'verdict' or 'findings' of an unexpected shape ({exc}); "
            "write it with timeline analyze --json"
        ) from None


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
