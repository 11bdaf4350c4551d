"""A run's frames for the budgets, read from what the user gave: a saved summary JSON or traces.

:func:`read_run` is what ``timeline check`` calls; it imports the frames (and polars) only once the
traces are read (a summary JSON needs none of them).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from timeline.errors import UsageError
from timeline.paths import check_path, path_text

if TYPE_CHECKING:
    from timeline.budgets.frames import MetricFrames
    from timeline.run import Inputs, RunOptions

__all__ = ["is_summary_file", "read_run", "summary_path"]

# ``timeline analyze --json`` writes "kind" first (layout 4; every result of timeline does), "version"
# first before; jq and json.dump(indent=...) keep key order.
_SUMMARY_START = re.compile(rb'^\s*\{\s*"(?:kind|version)"\s*:')


def is_summary_file(path: str | Path) -> bool:
    """Return whether ``path`` is a result JSON of timeline: a summary written by ``timeline analyze --json``.

    Only the first bytes are read: a trace is never a summary (Kineto JSON starts with other keys,
    Horovod with ``[``, Parquet and gzip are binary). Another kind of result (``kind`` first, as a
    summary of layout 4) is read as a summary and refused with what it is
    (:func:`~timeline.budgets.frames.frames_from_summary`).
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
    options: RunOptions,
    *,
    match: bool,
    findings: bool = False,
    dimensions: bool = False,
    progress: Callable[[str, int, int], None] | None = None,
    warn: Callable[[Sequence[str]], None] | None = None,
) -> MetricFrames:
    """Return the frames of a run: a saved summary JSON, or its traces read (rank by rank when large).

    ``match``: with the collectives matched across ranks (only when a budget reads them: rank by
    rank, the communication events are then kept). ``findings``: with the diagnosis (the
    ``*_gain_ratio`` metrics and the markdown summary read it). ``dimensions``: with the exposure per
    dimension, for budgets scoped to a dimension. Every frame is a fact of the one
    :class:`~timeline.run.Run` of the inputs and ``options``. ``warn``: called with the load
    warnings, the run's own and the frames' own, as soon as they are known.

    Raises
    ------
    TimelineError
        Bad input.
    """
    summary = summary_path(inputs)
    if summary is not None:
        if not options.selection.everything:
            msg = (
                f"{summary}: a summary JSON holds the figures it was written with; --ranks and "
                "--iterations select from traces: give the traces, or write the summary with them "
                "(timeline analyze TRACES --ranks ... --json)"
            )
            raise UsageError(msg)
        if warn is not None and (inputs.executor is not None or inputs.ray_address is not None):
            warn([f"{summary} is a summary JSON; --executor is not used for it"])
        from timeline.budgets.frames import read_summary

        return read_summary(summary)
    from timeline.run import Needs, Run

    needs = Needs(communication=match or dimensions or findings, graph=findings)
    run = Run(inputs, options, needs=needs, progress=progress, warn=warn).read()
    if warn is not None:
        warn(run.own_warnings)
    from timeline.budgets.frames import frames_of_run

    frames = frames_of_run(
        run,
        label=" ".join(map(path_text, inputs.paths)),
        matched=match,
        dimensions=dimensions,
        diagnosed=findings,
    )
    if warn is not None:
        warn(frames.warnings)
    return frames
