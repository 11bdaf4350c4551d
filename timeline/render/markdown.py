"""The verdicts of ``timeline check`` as markdown (``--markdown``: a pull-request comment, a job summary)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from timeline.budgets.evaluation import CheckReport
from timeline.budgets.metrics import format_value
from timeline.render.terminal import diff as cells
from timeline.render.terminal.verdicts import headline, worst

if TYPE_CHECKING:
    from timeline.results.diagnosis import Verdict
    from timeline.results.findings import Finding

__all__ = ["FINDINGS_SHOWN", "render_diff_markdown", "render_findings_markdown", "render_markdown"]

_ICON = {"pass": "✅", "fail": "❌", "nodata": "⚠️", "skip": "⏭️"}


def _md(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("`", "\\`").replace("\n", " ")


def _code(text: str) -> str:
    return "`" + text.replace("`", "'").replace("\n", " ") + "`"


def render_markdown(report: CheckReport) -> str:
    """Return a markdown summary for a pull-request comment or ``$GITHUB_STEP_SUMMARY``."""
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
            f"| {format_value(v.value, v.unit)} | {_md(limit)} | {_md(worst(v))} |"
        )
    if report.warnings:
        out += ["", *(f"> ⚠️ **warning**: {_md(w)}" for w in report.warnings)]
    notes = [v for v in report.verdicts if v.status != "pass" or v.kind == "regression"]
    if notes:
        out += ["", "<details><summary>Why</summary>", ""]
        out += [f"- {_ICON[v.status]} **{_md(v.name)}**: {_md(v.message)}" for v in notes]
        out += ["", "</details>"]
    if report.diagnosis is not None:
        out += ["", *render_findings_markdown(report.diagnosis.verdict, report.diagnosis.findings)]
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


def render_diff_markdown(diff: dict[str, Any]) -> str:
    """Return two runs compared (``timeline diff --markdown``) as markdown, for a pull-request comment."""
    out = [
        f"### timeline diff: {_md(cells.headline(diff))}",
        "",
        "| figure | base | new | change | change % | noise | beyond noise |",
        "|---|--:|--:|--:|--:|--:|:-:|",
    ]
    for metric, f in diff["summary"].items():
        values = [cells.format_value(metric, f["base"]), cells.format_value(metric, f["new"])]
        values += [cells.format_delta(metric, f["delta"]), cells.format_relative(f["relative"])]
        values += [cells.format_value(metric, f["noise"]), cells.format_significance(f["significant"])]
        out.append(f"| {cells.METRIC_NAMES[metric]} | " + " | ".join(values) + " |")
    if diff["warnings"]:
        out += ["", *(f"> ⚠️ **warning**: {_md(w)}" for w in diff["warnings"])]
    out += ["", "<details><summary>Per iteration, rank and collective</summary>", ""]
    out += _diff_details(diff)
    out += ["", "</details>", "", cells.NOTE.format(k=diff["noise_k"]).replace("*", "\\*", 1)]
    out += ["", f"Base {_code(diff['base'])} · new {_code(diff['new'])}"]
    return "\n".join(out) + "\n"


def _diff_details(diff: dict[str, Any]) -> list[str]:
    """Return the per-iteration, per-rank and per-collective tables of :func:`render_diff_markdown`."""
    names = cells.METRIC_NAMES
    out = ["| # | base iteration | new iteration | " + " | ".join(names.values()) + " |"]
    out.append("|--:|--:|--:|" + "--:|" * len(names))
    for row in diff["iterations"]:
        first = [str(row["position"]), *(_or_dash(row[k]) for k in ("base_iteration", "new_iteration"))]
        changes = [cells.format_change(m, row["metrics"][m]) for m in names]
        out.append("| " + " | ".join(first + changes).replace("*", "\\*") + " |")
    times = [m for m in names if m != "busbw_gbps"]
    if diff["ranks"]:
        out += ["", "| rank | iterations | " + " | ".join(names[m] for m in times) + " |"]
        out.append("|--:|--:|" + "--:|" * len(times))
        for row in diff["ranks"]:
            changes = [cells.format_change(m, row["metrics"][m]) for m in times]
            head = f"| {row['rank']} | {row['base_iterations']} → {row['new_iterations']} | "
            out.append(head + " | ".join(changes).replace("*", "\\*") + " |")
    if diff["collectives"]:
        out += ["", "| collective | matched | base busbw | new busbw | change | beyond noise |"]
        out.append("|---|--:|--:|--:|--:|:-:|")
        for row in diff["collectives"]:
            f = row["busbw_gbps"]
            change = cells.format_change("busbw_gbps", f).replace("*", "\\*")
            values = [cells.format_value("busbw_gbps", f[k]) for k in ("base", "new")]
            head = f"| {_md(row['collective'])} | {row['base_collectives']} → {row['new_collectives']} | "
            values += [change, cells.format_significance(f["significant"])]
            out.append(head + " | ".join(values) + " |")
    return out


def _or_dash(value: object) -> str:
    return "-" if value is None else str(value)
