"""The verdicts of ``timeline check`` (a :class:`~timeline.results.verdicts.CheckReport`) as a table."""

from __future__ import annotations

from timeline.render.terminal.layout import Col, plain_table, wrap_plain
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


_COLUMNS = [
    Col("STATUS", justify="left"),
    Col("CHECK", justify="left"),
    Col("METRIC", justify="left", drop=3),
    Col("VALUE"),
    Col("LIMIT", justify="left", drop=1),
    Col("WORST (rank, iteration)", justify="left", drop=2),
]


def render_table(report: CheckReport, *, width: int | None = None) -> str:
    """Return the PASS/FAIL table: one row per check with metric, value, limit and the worst sample.

    Below the table, a ``warning:`` line per doubt about the verdicts (a baseline of another job),
    then one line per check that did not pass says why. ``width``: the table leaves out the columns
    that matter least and the lines wrap with a hanging indent to fit it (None: every column, one
    line each).
    """
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
    out = [*wrap_plain(f"timeline check: {headline(report)}", width), *plain_table(_COLUMNS, rows, width)]
    if report.warnings:
        out += ["", *(line for w in report.warnings for line in wrap_plain(f"warning: {w}", width))]
    notes = [
        f"{LABELS[v.status]} {v.name}: {v.message}"
        for v in report.verdicts
        if v.status != "pass" or v.kind == "regression"
    ]
    if notes:
        out += ["", *(line for note in notes for line in wrap_plain(note, width))]
    source = f"budgets: {report.budget_file}; run: {report.inputs}"
    if report.baseline is not None:
        source += f"; baseline: {report.baseline}"
    out += ["", *wrap_plain(source, width)]
    return "\n".join(out) + "\n"
