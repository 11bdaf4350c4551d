"""Findings: what limits a job and what would fix it, as typed data.

A :class:`Finding` is one cause with its evidence, the fix, and the step the fix is predicted to
give: a msgspec Struct, so that the ``findings`` list of ``timeline analyze --json`` is the findings
themselves, encoded (their keys in the order of the fields), sorted by :func:`ranked` (largest
predicted gain first). The diagnosis (``timeline.diagnosis``) and the Flight Recorder analysis build
them. Every cause is defined in ``docs/diagnosis.md``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import msgspec

__all__ = [
    "CAUSES",
    "COMMUNICATION_CAUSES",
    "FINDINGS_VERSION",
    "MEASURED_BASES",
    "Basis",
    "Evidence",
    "Finding",
    "finding_dict",
    "gain_ratio",
    "hide_text",
    "ranked",
]

FINDINGS_VERSION = 1
"""The layout version of a finding (its keys in ``--json``: :class:`Finding`'s fields)."""

Basis = Literal["replay", "bound", "assumption", "observed"]
"""How ``predicted_step_ns`` was obtained: the what-if replay of the trace with the fix applied, a
stated bound (the step minus the time the fix removes at most), ``assumption`` (the replay of a fix
whose gain rests on a quantity the trace does not measure and the user did not give: a codec's
speed), or ``observed`` for findings with no prediction (a hang, a desync: the dumps show what
happened, no replay applies)."""

MEASURED_BASES = frozenset({"replay", "bound"})
"""The bases of a gain measured from the trace (not resting on an assumption)."""

Evidence = Mapping[str, int | float | str | bool | Sequence[int | str] | None]
"""Named numbers (and names) a finding rests on: waits, skews, idle, busbw, link use, sizes…; a list
holds ranks or names (one type of list only: msgspec types a value with at most one array type)."""

CAUSES: dict[str, str] = {
    "straggler": "one or a few ranks arrive late at the collectives and the others wait for them",
    "imbalance": "lateness at the collectives rotates among the ranks",
    "input_stall": "every rank idles between or before its steps (data loading, host synchronisation)",
    "no_overlap": "communication runs after the compute that could have hidden it",
    "bucketing": "bucket or fusion sizes launch the first collective late, or many small ones",
    "slow_link": "transfers run at the link's capacity and the link is what limits",
    "link_underused": "transfers run far below the link's capacity",
    "compression": "what gradient compression would give, its encoding cost included",
    "launch_bound": "the device idles between short kernels while the host launches them",
    "exposed_dimension": "one mesh dimension's communication is exposed",
    "hang": "ranks of a process group stopped in a collective the others wait in",
    "desync": "ranks of a process group issued different collectives at the same position",
}
"""Every cause a finding may name, with its meaning (``docs/diagnosis.md`` defines each)."""

COMMUNICATION_CAUSES = frozenset(
    {"no_overlap", "bucketing", "slow_link", "link_underused", "compression", "exposed_dimension"}
)
"""Causes that make a job communication-bound when the largest gain is theirs."""


def gain_ratio(measured_step_ns: float, predicted_step_ns: float | None) -> float | None:
    """Return ``1 − predicted / measured`` (the share of the step the fix saves), None when unknown.

    Examples
    --------
    >>> gain_ratio(100.0, 75.0)
    0.25
    >>> gain_ratio(0.0, 1.0) is None
    True
    """
    if predicted_step_ns is None or measured_step_ns <= 0:
        return None
    return 1.0 - predicted_step_ns / measured_step_ns


class Finding(msgspec.Struct, frozen=True, kw_only=True):
    """One cause of lost time, its evidence and its fix.

    The fields are in the order of their keys in ``--json`` (``fix`` after ``evidence``).

    Attributes
    ----------
    cause
        A key of :data:`CAUSES`.
    summary
        One sentence with the numbers.
    ranks
        The ranks concerned, or None for all.
    iterations
        The iterations concerned, or None for all (or none known).
    evidence
        The named numbers the finding rests on.
    fix
        One sentence: what to change.
    predicted_step_ns
        The step after the fix (None where no prediction applies).
    predicted_gain_ratio
        ``1 − predicted_step_ns / measured step`` (:func:`gain_ratio`); None with no prediction.
    basis
        How the prediction was made (:data:`Basis`).

    Raises
    ------
    ValueError
        A cause that is not one of :data:`CAUSES` (``msgspec.ValidationError`` when decoded).
    """

    cause: str
    summary: str
    ranks: tuple[int, ...] | None = None
    iterations: tuple[int, ...] | None = None
    evidence: Evidence = msgspec.field(default_factory=dict)
    fix: str
    predicted_step_ns: int | None = None
    predicted_gain_ratio: float | None = None
    basis: Basis = "observed"

    def __post_init__(self) -> None:
        if self.cause not in CAUSES:
            raise ValueError(f"unknown cause {self.cause!r}; known: {', '.join(CAUSES)}")


def finding_dict(finding: Finding) -> dict[str, Any]:
    """Return a finding as plain data (the layout of ``--json``; lists for tuples, evidence copied)."""
    plain: dict[str, Any] = msgspec.to_builtins(finding)
    return plain


def ranked(findings: Iterable[Finding]) -> list[Finding]:
    """Return findings by predicted gain, largest first; findings without a gain keep their order, first.

    A finding with no prediction (a hang, a desync) is about the job not running at all, so it
    comes before every gain. A gain resting on an assumption (basis ``assumption``) comes after
    every gain measured from the trace, whatever its size.
    """
    items = list(findings)
    unpredicted = [f for f in items if f.predicted_gain_ratio is None]
    predicted = sorted(
        (f for f in items if f.predicted_gain_ratio is not None),
        key=lambda f: (f.basis == "assumption", -(f.predicted_gain_ratio or 0.0), f.cause),
    )
    return [*unpredicted, *predicted]


def hide_text(gbps: float) -> str:
    """Return where communication would hide, said as hypothetical beyond any link that exists.

    Beyond :data:`~timeline.analysis.links.PHYSICAL_CEILING_GBPS` (NVLink 5, one direction) no
    hardware reaches it: the figure is a hypothetical one, and says so.
    """
    from timeline.analysis.links import PHYSICAL_CEILING_GBPS

    if gbps > PHYSICAL_CEILING_GBPS:
        return (
            f"communication would hide completely only on a hypothetical link of about {gbps:.3g} Gbit/s, "
            f"beyond any that exists ({PHYSICAL_CEILING_GBPS:g} Gbit/s, NVLink 5)"
        )
    return f"communication would hide completely at about {gbps:.3g} Gbit/s"
