"""Results as markdown (``--markdown``: a pull-request comment, a job summary).

The verdicts of ``timeline check`` (:class:`~timeline.results.verdicts.CheckReport`, with the
diagnosis' verdict and top findings when the run was diagnosed) and two runs compared by ``timeline
diff`` (:class:`~timeline.results.diff.Diff`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from timeline.render.terminal import diff as cells
from timeline.render.terminal.verdicts import headline
from timeline.results.diff import TIME_METRICS, Diff
from timeline.results.verdicts import CheckReport
from timeline.units import format_value

if TYPE_CHECKING:
    from timeline.results.diagnosis import DiagnosisReport, Verdict
    from timeline.results.findings import Finding

__all__ = ["FINDINGS_SHOWN", "render_diff_markdown", "render_findings_markdown", "render_markdown"]

_ICON = {"pass": "✅", "fail": "❌", "nodata": "⚠️", "skip": "⏭️"}


def _md(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("`", "\\`").replace("\n", " ")


def _code(text: str) -> str:
    return "`" + text.replace("`", "'").replace("\n", " ") + "`"


def render_markdown(report: CheckReport, *, diagnosis: DiagnosisReport | None = None) -> str:
    """Return a markdown summary for a pull-request comment or ``$GITHUB_STEP_SUMMARY``.

    ``diagnosis``: the run's verdict and findings (:mod:`timeline.results.diagnosis`), listed last.
    """
    icon = "✅" if report.ok else "❌"
    out = [
        f"### {icon} timeline check: {_md(headline(report))}",
        "",
        "| | check | metric | value | limit | worst (rank, iteration) |",
        "|:-:|---|---|--:|---|---|",
    ]
    for v in report.verdicts:
        limit = v.describe_limit().replace("<=", "≤").replace(">=", "≥")
        out.append(
            f"| {_ICON[v.status]} | {_md(v.name)} | `{v.metric}` {v.describe_measure()[len(v.metric) + 1 :]} "
            f"| {format_value(v.value, v.unit)} | {_md(limit)} | {_md(v.describe_worst())} |"
        )
    if report.warnings:
        out += ["", *(f"> ⚠️ **warning**: {_md(w)}" for w in report.warnings)]
    notes = [v for v in report.verdicts if v.status != "pass" or v.kind == "regression"]
    if notes:
        out += ["", "<details><summary>Why</summary>", ""]
        out += [f"- {_ICON[v.status]} **{_md(v.name)}**: {_md(v.message)}" for v in notes]
        out += ["", "</details>"]
    if diagnosis is not None:
        out += ["", *render_findings_markdown(diagnosis.verdict, diagnosis.findings)]
    source = f"Budgets {_code(report.budget_file)} · run {_code(report.inputs)}"
    if report.baseline is not None:
        source += f" · baseline {_code(report.baseline)}"
    out += ["", source]
    return "\n".join(out) + "\n"


FINDINGS_SHOWN = 3
"""Findings listed in the markdown summary; ``timeline analyze --json`` holds every one."""


def render_findings_markdown(verdict: Verdict, findings: Sequence[Finding]) -> list[str]:
    """Return the verdict and the top findings (:mod:`timeline.results.diagnosis`) as markdown lines."""
    from timeline.render.terminal.findings import describe_finding, describe_verdict_figures

    out = [f"#### Diagnosis: {_md(verdict.summary)}", ""]
    if findings:
        out += ["| # | finding | predicted gain | fix |", "|--:|---|--:|---|"]
    for k, finding in enumerate(findings[:FINDINGS_SHOWN], start=1):
        gain = finding.predicted_gain_ratio
        shown = "-" if gain is None else f"{gain:.1%} ({finding.basis})"
        out.append(
            f"| {k} | **{_md(describe_finding(finding))}**: {_md(finding.summary)} | {shown} "
            f"| {_md(finding.fix)} |"
        )
    if len(findings) > FINDINGS_SHOWN:
        out += [
            "",
            f"{len(findings) - FINDINGS_SHOWN} more finding(s): `timeline analyze --json` lists them.",
        ]
    figures = describe_verdict_figures(verdict)
    if figures:
        out += ["", _md(figures)]
    out += [f"> note: {_md(note)}" for note in verdict.notes]
    return out


def render_diff_markdown(diff: Diff) -> str:
    """Return two runs compared (``timeline diff --markdown``) as markdown, for a pull-request comment."""
    out = [
        f"### timeline diff: {_md(cells.headline(diff))}",
        "",
        "| figure | base | new | change | change % | noise | beyond noise |",
        "|---|--:|--:|--:|--:|--:|:-:|",
    ]
    for metric, figure in diff.summary.figures():
        out.append(
            f"| {cells.METRIC_NAMES[metric]} | " + " | ".join(cells.figure_cells(metric, figure)) + " |"
        )
    if diff.warnings:
        out += ["", *(f"> ⚠️ **warning**: {_md(w)}" for w in diff.warnings)]
    out += ["", "<details><summary>Per iteration, rank and collective</summary>", ""]
    out += _diff_details(diff)
    out += ["", "</details>", "", cells.NOTE.format(k=diff.noise_k).replace("*", "\\*", 1)]
    out += ["", f"Base {_code(diff.base)} · new {_code(diff.new)}"]
    return "\n".join(out) + "\n"


def _diff_details(diff: Diff) -> list[str]:
    """Return the per-iteration, per-rank and per-collective tables of :func:`render_diff_markdown`."""
    names = cells.METRIC_NAMES
    out = ["| # | base iteration | new iteration | " + " | ".join(names.values()) + " |"]
    out.append("|--:|--:|--:|" + "--:|" * len(names))
    for pair in diff.iterations:
        first = [str(pair.position), _or_dash(pair.base_iteration), _or_dash(pair.new_iteration)]
        changes = [cells.format_change(m, figure) for m, figure in pair.metrics.figures()]
        out.append("| " + " | ".join(first + changes).replace("*", "\\*") + " |")
    if diff.ranks:
        out += ["", "| rank | iterations | " + " | ".join(names[m] for m in TIME_METRICS) + " |"]
        out.append("|--:|--:|" + "--:|" * len(TIME_METRICS))
        for row in diff.ranks:
            changes = [cells.format_change(m, figure) for m, figure in row.metrics.figures()]
            head = f"| {row.rank} | {row.base_iterations} → {row.new_iterations} | "
            out.append(head + " | ".join(changes).replace("*", "\\*") + " |")
    if diff.collectives:
        out += ["", "| collective | matched | base busbw | new busbw | change | beyond noise |"]
        out.append("|---|--:|--:|--:|--:|:-:|")
        for kind in diff.collectives:
            figure = kind.busbw_gbps
            change = cells.format_change("busbw_gbps", figure).replace("*", "\\*")
            values = [cells.format_value("busbw_gbps", v) for v in (figure.base, figure.new)]
            head = f"| {_md(kind.collective)} | {kind.base_collectives} → {kind.new_collectives} | "
            values += [change, cells.format_significance(figure.significant)]
            out.append(head + " | ".join(values) + " |")
    return out


def _or_dash(value: object) -> str:
    return "-" if value is None else str(value)
