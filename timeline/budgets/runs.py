"""A run's frames for the budgets, read from what the user gave: a saved summary JSON or traces.

:func:`read_run` is what ``timeline check`` calls; it imports the frames (and polars) only once the
traces are read, so that a large trace is read as the loading policy says
(:func:`timeline.policy.reads_in_halves`: a helper process is started only before polars is imported).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from timeline.paths import check_path, path_text

if TYPE_CHECKING:
    from timeline.budgets.frames import MetricFrames
    from timeline.execution.session import Inputs

__all__ = ["is_summary_file", "read_run", "summary_path"]

# ``timeline analyze --json`` writes "version" first; jq and json.dump(indent=...) keep key order.
_SUMMARY_START = re.compile(rb'^\s*\{\s*"version"\s*:')


def is_summary_file(path: str | Path) -> bool:
    """Return whether ``path`` is a summary JSON written by ``timeline analyze --json``.

    Only the first bytes are read: a trace is never a summary (Kineto JSON starts with other keys,
    Horovod with ``[``, Parquet and gzip are binary).
    """
    try:
        with Path(path).open("rb") as fh:
            head = fh.read(256)
    except OSError:
        return False
    return _SUMMARY_START.match(head) is not None


def summary_path(inputs: Inputs) -> str | None:
    """Return the path the inputs name when it is one summary JSON (:func:`is_summary_file`), else None."""
    paths = inputs.paths
    if len(paths) != 1:
        return None
    check_path(paths[0])  # a name too long: one error, not the OSError Path.is_file raises
    if Path(paths[0]).is_file() and is_summary_file(paths[0]):
        return paths[0]
    return None


def read_run(
    inputs: Inputs,
    *,
    match: bool,
    findings: bool = False,
    link_gbps: float | None = None,
    dimensions: bool = False,
    overrides: Mapping[str, str] | None = None,
    gpus_per_node: int | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    warn: Callable[[Sequence[str]], None] | None = None,
) -> MetricFrames:
    """Return the frames of a run: a saved summary JSON, or its traces analysed (rank by rank when large).

    ``match``: also match the collectives across ranks (only when a budget reads them: it is one more
    pass over every rank's communication events, which rank by rank are then kept). ``findings``:
    also diagnose the run (:mod:`timeline.diagnosis`, with the link ``link_gbps`` when known): the
    ``*_gain_ratio`` metrics and the markdown summary read it. ``dimensions``: also the exposure per
    dimension (:func:`~timeline.budgets.frames.with_dimensions`, with ``overrides`` and
    ``gpus_per_node``), for budgets scoped to a dimension. ``warn``: called with the load warnings,
    and the frames' own, as soon as they are known.

    Raises
    ------
    TimelineError
        Bad input.
    """
    from timeline.execution.session import analyze_inputs

    summary = summary_path(inputs)
    if summary is not None:
        if warn is not None and (inputs.executor is not None or inputs.ray_address is not None):
            warn([f"{summary} is a summary JSON; --executor is not used for it"])
        from timeline.budgets.frames import read_summary

        return read_summary(summary)
    paths = inputs.paths
    analysed = analyze_inputs(
        inputs, communication=match or dimensions, findings=findings, progress=progress, warn=warn
    )
    import polars as pl

    from timeline.budgets.frames import findings_frame, frames_from_overlap, with_dimensions

    events = analysed.trace.events if match else None
    frames = frames_from_overlap(
        analysed.overlap,
        label=" ".join(map(path_text, paths)),
        events=events,
        files=analysed.trace.files,
        clock_note=analysed.trace.clock_note,
        groups=analysed.trace.groups,
    )
    exposure = None  # the exposure per dimension, when the budgets read it: the diagnosis reads it too
    if dimensions:
        frames = with_dimensions(
            frames,
            analysed.trace,
            analysed.overlap,
            offsets=analysed.offsets,
            overrides=overrides,
            gpus_per_node=gpus_per_node,
        )
        if frames.dimensions is not None:
            exposure = frames.dimensions.filter(pl.col("by") == "dimension").drop("by")
    if findings:
        from timeline.results.diagnosis import build_diagnosis

        built = build_diagnosis(
            analysed.diagnosis(
                link_gbps=link_gbps, dimensions=overrides, gpus_per_node=gpus_per_node, exposure=exposure
            )
        )
        frames = replace(
            frames,
            findings=findings_frame(built["verdict"], built["findings"]),
            diagnosis={"verdict": built["verdict"], "findings": built["findings"]},
        )
    if warn is not None:
        warn(frames.warnings)
    return frames
