"""The verdicts of ``timeline check`` as typed, versioned data (kind ``check``, ``docs/ci.md``).

:func:`timeline.budgets.evaluation.evaluate_budgets` builds a :class:`CheckReport`: a
:class:`Verdict` per budget and per regression check, with its :class:`Worst` sample, the
:class:`Counts` of each status, and the noise rule's ``k``. ``timeline check --json`` prints it
(:func:`timeline.results.base.encode`); the table, markdown, JUnit XML and GitHub annotations render
it (:mod:`timeline.render`). Nothing here imports polars.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from timeline.results.base import Result, Row
from timeline.stats import NOISE_K
from timeline.units import format_value

__all__ = [
    "CHECK_VERSION",
    "CheckReport",
    "Counts",
    "Over",
    "Status",
    "Verdict",
    "VerdictKind",
    "Worst",
    "check_report",
]

CHECK_VERSION = 2
"""The layout version of :class:`CheckReport` (``timeline check --json``)."""

Over = Literal["all", "rank"]
"""``all``: one aggregate over every rank's samples pooled; ``rank``: one per rank, the worst decides."""
Status = Literal["pass", "fail", "nodata", "skip"]
VerdictKind = Literal["budget", "regression"]


class Worst(Row, frozen=True, kw_only=True):
    """The sample that decided a verdict (the one closest to, or furthest past, the limit).

    Attributes
    ----------
    rank, iteration, collective
        Where it was measured (null when the metric has no such key).
    value
        Its value.
    """

    rank: int | None
    iteration: int | None
    collective: str | None
    value: float

    def describe(self, unit: str) -> str:
        """``rank 1, iteration 2: 30.00%``."""
        parts = []
        if self.rank is not None:
            parts.append(f"rank {self.rank}")
        if self.iteration is not None:
            parts.append(f"iteration {self.iteration}")
        if self.collective is not None:
            parts.append(self.collective)
        return f"{', '.join(parts) or 'all'}: {format_value(self.value, unit)}"


class Verdict(Row, frozen=True, kw_only=True):
    """The outcome of one budget or one regression check.

    Attributes
    ----------
    kind
        ``budget`` or ``regression``.
    name
        The budget's name.
    status
        ``pass``, ``fail``, ``nodata`` or ``skip``.
    metric, unit, aggregate, over
        What was measured, as in the budget file.
    value
        The aggregate (of the worst rank with ``over = "rank"``); ``None`` when not measured.
    upper, lower
        The limits the value was held to (``max`` and ``min`` in JSON); for a regression, the
        baseline plus or minus the larger of the tolerance and ``k`` times the noise.
    samples
        How many samples the aggregate is over.
    worst
        The worst sample (of the worst rank).
    baseline, tolerance, noise
        For a regression: the baseline aggregate, the allowed worsening from the tolerances, and the
        noise of the change (its standard error, :func:`timeline.stats.noise`; null with fewer than
        3 samples in either run, when the tolerance alone decides).
    link_gbps
        The link's bandwidth the metric was measured against (link utilisation metrics), in Gbit/s.
    message
        One line saying why it passed or failed.
    where, line
        Where the budget was read (``timeline.toml:budgets[0]``), and its line.
    """

    kind: VerdictKind
    name: str
    status: Status
    metric: str
    unit: str
    aggregate: str
    over: Over
    value: float | None
    upper: float | None = msgspec.field(name="max")
    lower: float | None = msgspec.field(name="min")
    samples: int
    worst: Worst | None
    baseline: float | None = None
    tolerance: float | None = None
    noise: float | None = None
    link_gbps: float | None = None
    message: str
    where: str
    line: int | None = None

    @property
    def failed(self) -> bool:
        """Whether this verdict fails the check (``fail`` or ``nodata``)."""
        return self.status in ("fail", "nodata")

    def describe_measure(self) -> str:
        """``exposed_comm_ratio p90 per rank``."""
        return f"{self.metric} {self.aggregate}" + (" per rank" if self.over == "rank" else "")

    def describe_limit(self) -> str:
        """``<= 25.00%``, ``>= 80.00%``, or both."""
        parts = []
        if self.lower is not None:
            parts.append(f">= {format_value(self.lower, self.unit)}")
        if self.upper is not None:
            parts.append(f"<= {format_value(self.upper, self.unit)}")
        text = ", ".join(parts) or "-"
        if self.kind == "regression" and self.baseline is not None:
            text += f" (baseline {format_value(self.baseline, self.unit)})"
        return text

    def describe_worst(self) -> str:
        """Return the worst sample, for people (``-`` when none)."""
        return "-" if self.worst is None else self.worst.describe(self.unit)


class Counts(Row, frozen=True, kw_only=True):
    """How many verdicts have each status (``pass`` in JSON is ``passed`` here, a Python keyword)."""

    passed: int = msgspec.field(name="pass")
    fail: int
    nodata: int
    skip: int


class CheckReport(Result, tag="check", kw_only=True):
    """Every verdict of one ``timeline check`` (``kind`` ``check``, layout version 2).

    Layout 2 (from 1): ``kind`` and ``timeline`` come first; ``noise_k`` is added last; a
    regression's ``noise`` is now the standard error of the change (layout 1: two standard errors
    of the noisier run), held to ``noise_k`` times it, the one noise rule of ``timeline check`` and
    ``timeline diff`` (:mod:`timeline.stats`); every other key, value and their order are layout 1's.

    Attributes
    ----------
    ok
        Whether every budget holds.
    exit_code
        0 when every budget holds, 1 otherwise.
    budget_file
        The budget file.
    inputs
        The run checked.
    baseline
        The baseline run, if any.
    counts
        How many verdicts have each status.
    verdicts
        Budgets first, then regression checks, in file order.
    warnings
        What makes the verdicts doubtful: a baseline that looks like another job
        (:func:`~timeline.budgets.evaluation.compare_jobs`).
    noise_k
        A regression is flagged only beyond this many times its noise.
    """

    version: int = CHECK_VERSION
    ok: bool
    exit_code: int
    budget_file: str
    inputs: str
    baseline: str | None
    counts: Counts
    verdicts: list[Verdict]
    warnings: list[str]
    noise_k: float = NOISE_K

    @property
    def failed(self) -> list[Verdict]:
        """The verdicts that fail the check."""
        return [v for v in self.verdicts if v.failed]


def check_report(
    verdicts: list[Verdict], *, budget_file: str, inputs: str, baseline: str | None, warnings: list[str]
) -> CheckReport:
    """Return the report of these verdicts: whether every budget holds, the exit code, the counts."""
    failed = any(v.failed for v in verdicts)
    statuses = [v.status for v in verdicts]
    return CheckReport(
        ok=not failed,
        exit_code=1 if failed else 0,
        budget_file=budget_file,
        inputs=inputs,
        baseline=baseline,
        counts=Counts(
            passed=statuses.count("pass"),
            fail=statuses.count("fail"),
            nodata=statuses.count("nodata"),
            skip=statuses.count("skip"),
        ),
        verdicts=verdicts,
        warnings=warnings,
        noise_k=NOISE_K,
    )
