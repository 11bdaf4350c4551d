"""The verdicts of ``timeline check`` (a :class:`~timeline.results.verdicts.CheckReport`) as a table."""

from __future__ import annotations

from timeline.results.verdicts import CheckReport
from timeline.units import format_value

__all__ = ["LABELS", "headline", "render_table"]

LABELS = {"pass": "PASS", "fail": "FAIL", "nodata": "NO DATA", "skip": "SKIP"}


def headline(report: CheckReport) -> str:
    """Return the one-line outcome of a check: how many checks, how many failed or had no data."""
    counts = report.counts
    total = len(report.verdicts)
    checks = f"{total} check{'s' if total != 1 else ''}"
    if report.ok:
        skipped = f", {counts.skip} skipped" if counts.skip else ""
        return f"{checks}, all hold{skipped}" if total - counts.skip else f"{checks}, none evaluated{skipped}"
    parts = [f"{counts.fail} failed"] if counts.fail else []
    if counts.nodata:
        parts.append(f"{counts.nodata} without data")
    return f"{checks}: {', '.join(parts)}"


def render_table(report: CheckReport) -> str:
    """Return the PASS/FAIL table: one row per check with metric, value, limit and the worst sample.

    Below the table, a ``warning:`` line per doubt about the verdicts (a baseline of another job),
    then one line per check that did not pass says why.
    """
    header = ["STATUS", "CHECK", "METRIC", "VALUE", "LIMIT", "WORST (rank, iteration)"]
    rows = [
        [
            LABELS[v.status],
            v.name,
            v.describe_measure(),
            format_value(v.value, v.unit),
            v.describe_limit(),
            v.describe_worst(),
        ]
        for v in report.verdicts
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    right = {3}

    def line(cells: list[str]) -> str:
        padded = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(padded).rstrip()

    out = [f"timeline check: {headline(report)}", line(header), *(line(r) for r in rows)]
    if report.warnings:
        out += ["", *(f"warning: {w}" for w in report.warnings)]
    notes = [
        f"{LABELS[v.status]} {v.name}: {v.message}"
        for v in report.verdicts
        if v.status != "pass" or v.kind == "regression"
    ]
    if notes:
        out += ["", *notes]
    source = f"budgets: {report.budget_file}; run: {report.inputs}"
    if report.baseline is not None:
        source += f"; baseline: {report.baseline}"
    out += ["", source]
    return "\n".join(out) + "\n"
