"""The verdicts of ``timeline check`` as markdown (``--markdown``: a pull-request comment, a job summary)."""

from __future__ import annotations

from timeline.budgets.evaluation import CheckReport
from timeline.budgets.metrics import format_value
from timeline.render.terminal.verdicts import headline, worst

__all__ = ["render_markdown"]

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
    source = f"Budgets {_code(report.budget_file)} · run {_code(report.inputs)}"
    if report.baseline is not None:
        source += f" · baseline {_code(report.baseline)}"
    out += ["", source]
    return "\n".join(out) + "\n"
