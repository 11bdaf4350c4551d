"""The diagnosis as plain data: the verdict and the findings, what ``timeline analyze --json`` adds.

Takes a :class:`~timeline.diagnosis.verdict.Diagnosis`; gives plain, versioned data
(:func:`build_diagnosis`): ``version``, ``verdict`` (:func:`verdict_dict`) and ``findings`` (one
:func:`~timeline.results.findings.finding_dict` each, largest predicted gain first). The summary of
``timeline analyze`` holds the same ``verdict`` and ``findings`` (``docs/cli.md``,
``docs/diagnosis.md``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from timeline.results.findings import MEASURED_BASES, finding_dict

if TYPE_CHECKING:
    from timeline.diagnosis.verdict import Diagnosis

__all__ = ["DIAGNOSIS_VERSION", "build_diagnosis", "verdict_dict"]

DIAGNOSIS_VERSION = 2
"""The layout version of :func:`build_diagnosis` and of the verdict (its ``version`` key).

2 (#37): the verdict's ``ranks`` and ``world_size``; ``at_stake_ratio`` is the largest gain measured
from the trace (a finding with basis ``assumption`` does not count); findings may have basis
``assumption``."""


def verdict_dict(diagnosis: Diagnosis) -> dict[str, Any]:
    """Return the verdict of a diagnosis as plain data.

    Keys: ``version``; ``communication_bound`` (the largest-gain finding measured from the trace has
    a communication cause); ``summary`` (one sentence); ``at_stake_ratio`` (the largest predicted
    gain measured from the trace, null without one); ``step_ns`` (the measured step the gains are
    shares of); ``ranks`` and ``world_size`` (the ranks diagnosed, of how many); ``iterations`` (the
    diagnosed ``ProfilerStep`` numbers, null: whole traces); ``exposed_comm_ratio``;
    ``model_intensity_ns_per_byte``; ``hide_bandwidth_gbps``; ``link_gbps``;
    ``replay_error_ratio``; ``examined`` (the causes the diagnosis could examine: one without a
    finding would save less than 2 % of the step); ``notes`` (what was left out, and why).
    """
    top = next(
        (f for f in diagnosis.findings if f.predicted_gain_ratio is not None and f.basis in MEASURED_BASES),
        None,
    )
    return {
        "version": DIAGNOSIS_VERSION,
        "communication_bound": diagnosis.communication_bound,
        "summary": diagnosis.summary,
        "at_stake_ratio": None if top is None else top.predicted_gain_ratio,
        "step_ns": diagnosis.step_ns,
        "ranks": None if diagnosis.ranks is None else list(diagnosis.ranks),
        "world_size": diagnosis.world_size,
        "iterations": None if diagnosis.iterations is None else list(diagnosis.iterations),
        "exposed_comm_ratio": diagnosis.exposed_comm_ratio,
        "model_intensity_ns_per_byte": diagnosis.model_intensity_ns_per_byte,
        "hide_bandwidth_gbps": diagnosis.hide_bandwidth_gbps,
        "link_gbps": diagnosis.link_gbps,
        "replay_error_ratio": diagnosis.replay_error_ratio,
        "examined": list(diagnosis.examined),
        "notes": list(diagnosis.notes),
    }


def build_diagnosis(diagnosis: Diagnosis) -> dict[str, Any]:
    """Return a diagnosis as plain data: ``version``, ``verdict`` and ``findings``.

    Examples
    --------
    >>> import timeline  # doctest: +SKIP
    >>> from timeline.diagnosis import diagnose  # doctest: +SKIP
    >>> analysed = timeline.analyze("sample_traces/ddp_gloo")  # doctest: +SKIP
    >>> build_diagnosis(diagnose(analysed.trace, analysed.overlap))["findings"][0]["cause"]  # doctest: +SKIP
    """
    return {
        "version": DIAGNOSIS_VERSION,
        "verdict": verdict_dict(diagnosis),
        "findings": [finding_dict(f) for f in diagnosis.findings],
    }
