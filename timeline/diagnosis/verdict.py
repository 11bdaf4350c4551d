"""The diagnosis as a value: its findings, its verdict and the figures beside them.

Takes nothing; gives :class:`Diagnosis` (what :func:`timeline.diagnosis.diagnosis.diagnose` and the
Horovod diagnosis return), the causes this diagnosis examines, and :func:`headline`, the short
phrase the verdict names a finding's cause with.
"""

from __future__ import annotations

from dataclasses import dataclass

from timeline.results.findings import CAUSES, Finding

__all__ = ["DIAGNOSED_CAUSES", "NOTHING", "Diagnosis", "headline"]

NOTHING = "Nothing to diagnose: no rank's compute and communication were measured."
"""The summary of a diagnosis without a rank to diagnose."""

DIAGNOSED_CAUSES = (
    "straggler",
    "imbalance",
    "input_stall",
    "launch_bound",
    "no_overlap",
    "bucketing",
    "slow_link",
    "link_underused",
    "compression",
    "exposed_dimension",
)
"""The causes this diagnosis examines (the others of :data:`~timeline.results.findings.CAUSES` come
from the Flight Recorder's dumps)."""


@dataclass(frozen=True)
class Diagnosis:
    """What limits a job, and what would fix it.

    Attributes
    ----------
    findings
        Sorted by predicted gain, largest first (:func:`~timeline.results.findings.ranked`).
    communication_bound
        Whether the finding with the largest gain has a communication cause
        (:data:`~timeline.results.findings.COMMUNICATION_CAUSES`).
    summary
        One sentence answering "is communication my bottleneck, and what would fix it?".
    step_ns
        The measured step the gains are shares of (median over the diagnosed iterations of the
        median over ranks); None without a profiler trace.
    iterations
        The diagnosed ``ProfilerStep`` numbers (None: each rank's whole trace, or none).
    model_intensity_ns_per_byte
        Compute time per gradient byte (the median rank's compute over the bytes of its gradient
        collectives, per iteration); None without gradient collectives.
    hide_bandwidth_gbps
        The link (Gbit/s, used in full) at which the replayed step comes within 1 % of the step
        with an infinitely fast link: beyond it the link no longer matters; None without a replay or
        bytes.
    exposed_comm_ratio
        The median rank's exposed communication over the step.
    link_gbps
        The link's bandwidth used, when known.
    replay_error_ratio
        How far the self-replay of the diagnosed iterations is from the measured step (None: no replay).
    notes
        What the diagnosis left out, and why, one line each.
    examined
        The causes the diagnosis could examine (:data:`DIAGNOSED_CAUSES` minus those it lacked the
        data for): a cause examined without a finding would save less than :data:`MIN_GAIN`.
    ranks
        The ranks the diagnosis saw (None: not known, a Horovod timeline alone).
    world_size
        The job's world size as the traces record it (None: not recorded); more than ``ranks``: a
        partial run, which the summary says first.
    """

    findings: tuple[Finding, ...]
    communication_bound: bool
    summary: str
    step_ns: int | None = None
    iterations: tuple[int, ...] | None = None
    model_intensity_ns_per_byte: float | None = None
    hide_bandwidth_gbps: float | None = None
    exposed_comm_ratio: float | None = None
    link_gbps: float | None = None
    replay_error_ratio: float | None = None
    notes: tuple[str, ...] = ()
    examined: tuple[str, ...] = ()
    ranks: tuple[int, ...] | None = None
    world_size: int | None = None


_HEADLINES = {
    "straggler": "rank {rank} arrives late at the collectives and the others wait for it",
    "imbalance": "ranks arrive late at the collectives by turns",
    "input_stall": "every rank idles before or between its steps",
    "launch_bound": "the device waits for the host to launch its kernels",
    "no_overlap": "gradient collectives leave after the compute that could have hidden them",
    "bucketing": "the gradient buckets start the communication late or send too many small messages",
    "slow_link": "the link limits the transfers",
    "link_underused": "transfers run far below the link's capacity",
    "compression": "the gradient communication is on the critical path (compression would shorten it)",
    "exposed_dimension": "the {dimension} dimension's communication is exposed",
}


def headline(finding: Finding) -> str:
    """Return the short phrase the verdict names a finding's cause with."""
    template = _HEADLINES.get(finding.cause)
    if template is None:
        return CAUSES[finding.cause]
    evidence = finding.evidence
    return template.format(rank=evidence.get("rank", "?"), dimension=evidence.get("dimension", "?"))
