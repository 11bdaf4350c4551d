"""The verdicts of ``timeline check`` as plain, versioned data (the ``--json`` layout, ``docs/ci.md``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from timeline.budgets.evaluation import CheckReport, Verdict

__all__ = ["REPORT_VERSION", "report_to_dict"]

REPORT_VERSION = 1
"""The layout version of :func:`report_to_dict` (``timeline check --json``)."""


def _verdict_dict(v: Verdict) -> dict[str, Any]:
    return {
        "kind": v.kind,
        "name": v.name,
        "status": v.status,
        "metric": v.metric,
        "unit": v.unit,
        "aggregate": v.aggregate,
        "over": v.over,
        "value": v.value,
        "max": v.upper,
        "min": v.lower,
        "samples": v.samples,
        "worst": None
        if v.worst is None
        else {
            "rank": v.worst.rank,
            "iteration": v.worst.iteration,
            "collective": v.worst.collective,
            "value": v.worst.value,
        },
        "baseline": v.baseline,
        "tolerance": v.tolerance,
        "noise": v.noise,
        "link_gbps": v.link_gbps,
        "message": v.message,
        "where": v.where,
        "line": v.line,
    }


def report_to_dict(report: CheckReport) -> dict[str, Any]:
    """Return the report as plain data (the layout of ``timeline check --json``, see ``docs/ci.md``)."""
    return {
        "version": REPORT_VERSION,
        "ok": report.ok,
        "exit_code": report.exit_code,
        "budget_file": report.budget_file,
        "inputs": report.inputs,
        "baseline": report.baseline,
        "counts": report.counts(),
        "verdicts": [_verdict_dict(v) for v in report.verdicts],
        "warnings": list(report.warnings),
    }
