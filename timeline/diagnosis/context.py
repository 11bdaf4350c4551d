"""What every rule of the diagnosis reads, gathered once.

Takes the loaded trace, its overlap analysis and facts, and the replays when there is a graph;
gives a :class:`Context` and :func:`predicted`, the one way a rule turns a predicted step into a
finding's prediction.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

import msgspec

from timeline.diagnosis.facts import Facts
from timeline.results.findings import Basis, Evidence, Finding, gain_ratio

if TYPE_CHECKING:
    import polars as pl

    from timeline.analysis.collectives import CollectiveMatch
    from timeline.analysis.overlap import Overlap
    from timeline.diagnosis.replays import Replayer

__all__ = ["Context", "Prediction", "finding", "predicted"]


@dataclass
class Context:
    """The inputs of the rules.

    Attributes
    ----------
    facts
        The measured facts of the diagnosed iterations.
    overlap
        The overlap analysis.
    events
        The events loaded (in memory: those the overlap and the cross-rank analyses read; rank by
        rank: the communication events only).
    match
        The collectives matched across ranks (None with one rank, or clocks that disagree).
    replays
        Builds the replays of the what-if graph (None when there is no graph: a note says why),
        on first use only (:attr:`replayer`): a diagnosis no rule of which replays never imports the
        what-if engine.
    link_gbps
        The link's one-direction bandwidth, when known.
    codec_gbps
        The compression codec's throughput, when given (else it is counted as free).
    launch_gaps
        ``(iteration, rank)`` → launch-bound device idle (:mod:`timeline.analysis.launches`), or
        None when it could not be measured.
    launch_intervals
        ``(iteration, rank)`` → the launch-bound gaps themselves.
    groups
        The process groups the traces declare (:attr:`timeline.trace.Trace.groups`): the dimensions
        of collectives whose events name no group (gloo), attributed as ``timeline analyze`` does.
    clocks
        Which ranks' times compare (:func:`~timeline.analysis.groups.shared_clocks`), for that
        attribution.
    dimensions
        Description → dimension label (``--dimension``).
    exposure
        The exposure per dimension × iteration × rank when already computed
        (:func:`timeline.results.dimensions.dimension_exposure_of`, which ``timeline analyze`` shows),
        for the ``exposed_dimension`` rule; else computed there.
    notes
        What the diagnosis left out, and why (one line each).
    unexamined
        The causes the rules could not examine for lack of data (no link, no gradient-ready times…).
    exposed_gradient_ns
        Kept by the first rule that measures it.
    """

    facts: Facts
    overlap: Overlap
    events: pl.DataFrame
    match: CollectiveMatch | None
    replays: Callable[[], Replayer | None]
    link_gbps: float | None = None
    codec_gbps: float | None = None
    launch_gaps: Mapping[tuple[int | None, int], int] | None = None
    launch_intervals: Mapping[tuple[int | None, int], tuple[tuple[int, int], ...]] = field(
        default_factory=dict
    )
    groups: pl.DataFrame | None = None
    clocks: pl.DataFrame | None = None
    dimensions: Mapping[str, str] | None = None
    exposure: pl.DataFrame | None = None
    notes: list[str] = field(default_factory=list)
    unexamined: set[str] = field(default_factory=set)
    exposed_gradient_ns: int | None = None
    """The gradient collectives' exposed time, once a rule measured it
    (:func:`timeline.diagnosis.communication.exposed_gradient_ns`: three rules read it)."""
    world_size: int | None = None
    """The job's world size as the profiler traces record it (``distributedInfo.world_size``)."""

    @property
    def partial(self) -> bool:
        """Whether fewer ranks were diagnosed than the job had (a partial run)."""
        return self.world_size is not None and len(self.facts.ranks) < self.world_size

    @cached_property
    def replayer(self) -> Replayer | None:
        """The replays of the diagnosed iterations, built on first use (None: no graph)."""
        return self.replays()

    def launch_gap(self, rank: int, iteration: int | None) -> int:
        """Return a rank's launch-bound idle in an iteration (0 when unknown or none)."""
        return 0 if self.launch_gaps is None else self.launch_gaps.get((iteration, rank), 0)

    def note(self, line: str, *, causes: tuple[str, ...] = ()) -> None:
        """Add a note once; ``causes``: the causes it says could not be examined."""
        if line not in self.notes:
            self.notes.append(line)
        self.unexamined.update(causes)


class Prediction(msgspec.Struct, frozen=True):
    """A finding's prediction: the step after the fix, its gain and how it was made."""

    step_ns: int
    gain_ratio: float
    basis: Basis


def predicted(context: Context, step_ns: float, basis: Basis) -> Prediction:
    """Return the prediction of a fix whose step is ``step_ns``, kept between 0 and the measured step.

    A fix never lengthens the step: a replay that predicts a longer one (the model's own noise)
    gives the measured step and no gain.
    """
    measured = context.facts.step_ns
    step = min(max(round(step_ns), 0), measured)
    return Prediction(step_ns=step, gain_ratio=gain_ratio(measured, step) or 0.0, basis=basis)


def finding(
    cause: str,
    prediction: Prediction,
    *,
    summary: str,
    fix: str,
    evidence: Evidence,
    ranks: tuple[int, ...] | None = None,
    iterations: tuple[int, ...] | None = None,
) -> Finding:
    """Return the finding of a cause with its prediction (the one way every rule makes one)."""
    return Finding(
        cause=cause,
        summary=summary,
        fix=fix,
        ranks=ranks,
        iterations=iterations,
        evidence=evidence,
        predicted_step_ns=prediction.step_ns,
        predicted_gain_ratio=prediction.gain_ratio,
        basis=prediction.basis,
    )
