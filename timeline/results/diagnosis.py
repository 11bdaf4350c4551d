"""The diagnosis as typed data: the verdict and the findings, what ``timeline analyze --json`` adds.

Takes a :class:`~timeline.diagnosis.verdict.Diagnosis`; gives a :class:`DiagnosisReport` (kind
``"diagnosis"``, :func:`build_diagnosis`): its :class:`Verdict` (:func:`verdict_of`) and its
findings (:class:`~timeline.results.findings.Finding`, largest predicted gain first). The summary
of ``timeline analyze`` holds the same ``verdict`` and ``findings`` (``docs/cli.md``,
``docs/diagnosis.md``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from timeline.results.base import Result
from timeline.results.findings import MEASURED_BASES, Finding

if TYPE_CHECKING:
    from timeline.diagnosis.verdict import Diagnosis

__all__ = [
    "DIAGNOSIS_VERSION",
    "VERDICT_VERSION",
    "DiagnosisReport",
    "Verdict",
    "build_diagnosis",
    "verdict_of",
]

DIAGNOSIS_VERSION = 3
"""The layout version of :class:`DiagnosisReport` (2: ``kind`` and ``timeline`` added; 3 (#37): its
verdict's layout 2)."""

VERDICT_VERSION = 2
"""The layout version of a :class:`Verdict` (its own ``version`` key). 2 (#37): ``ranks`` and
``world_size``; ``at_stake_ratio`` is the largest gain measured from the trace (a finding with basis
``assumption`` does not count); findings may have basis ``assumption``."""


class Verdict(msgspec.Struct, frozen=True, kw_only=True):
    """What limits the job, in one sentence, and the figures beside it.

    Attributes
    ----------
    version
        :data:`VERDICT_VERSION`.
    communication_bound
        The largest-gain finding has a communication cause.
    summary
        One sentence.
    at_stake_ratio
        The largest predicted gain measured from the trace (None without one: a finding whose gain
        rests on an assumed quantity does not count).
    step_ns
        The measured step the gains are shares of (None without a profiler trace).
    ranks, world_size
        The ranks diagnosed, and of how many the job has (a partial run's are fewer).
    iterations
        The diagnosed ``ProfilerStep`` numbers (None: whole traces).
    exposed_comm_ratio, model_intensity_ns_per_byte, hide_bandwidth_gbps, link_gbps, replay_error_ratio
        As :class:`~timeline.diagnosis.verdict.Diagnosis` defines them.
    examined
        The causes the diagnosis could examine (one without a finding would save less than 2 % of
        the step).
    notes
        What was left out, and why.
    """

    version: int = VERDICT_VERSION
    communication_bound: bool
    summary: str
    at_stake_ratio: float | None
    step_ns: int | None
    ranks: list[int] | None
    world_size: int | None
    iterations: list[int] | None
    exposed_comm_ratio: float | None
    model_intensity_ns_per_byte: float | None
    hide_bandwidth_gbps: float | None
    link_gbps: float | None
    replay_error_ratio: float | None
    examined: list[str]
    notes: list[str]


class DiagnosisReport(Result, tag="diagnosis", kw_only=True):
    """A diagnosis: the verdict and the findings (largest predicted gain first).

    Layout 2 adds ``kind`` and ``timeline`` before ``version``; the rest is layout 1's.
    """

    version: int = DIAGNOSIS_VERSION
    verdict: Verdict
    findings: list[Finding]


def verdict_of(diagnosis: Diagnosis) -> Verdict:
    """Return the verdict of a diagnosis."""
    top = next(
        (f for f in diagnosis.findings if f.predicted_gain_ratio is not None and f.basis in MEASURED_BASES),
        None,
    )
    return Verdict(
        communication_bound=diagnosis.communication_bound,
        summary=diagnosis.summary,
        at_stake_ratio=None if top is None else top.predicted_gain_ratio,
        step_ns=diagnosis.step_ns,
        ranks=None if diagnosis.ranks is None else list(diagnosis.ranks),
        world_size=diagnosis.world_size,
        iterations=None if diagnosis.iterations is None else list(diagnosis.iterations),
        exposed_comm_ratio=diagnosis.exposed_comm_ratio,
        model_intensity_ns_per_byte=diagnosis.model_intensity_ns_per_byte,
        hide_bandwidth_gbps=diagnosis.hide_bandwidth_gbps,
        link_gbps=diagnosis.link_gbps,
        replay_error_ratio=diagnosis.replay_error_ratio,
        examined=list(diagnosis.examined),
        notes=list(diagnosis.notes),
    )


def build_diagnosis(diagnosis: Diagnosis) -> DiagnosisReport:
    """Return a diagnosis as typed data: its verdict and findings.

    Examples
    --------
    >>> import timeline  # doctest: +SKIP
    >>> run = timeline.analyze("sample_traces/ddp_gloo")  # doctest: +SKIP
    >>> build_diagnosis(run.diagnosis).findings[0].cause  # doctest: +SKIP
    """
    return DiagnosisReport(verdict=verdict_of(diagnosis), findings=list(diagnosis.findings))
