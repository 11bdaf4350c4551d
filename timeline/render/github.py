"""The verdicts of ``timeline check`` as GitHub Actions workflow commands (``--github`` annotations)."""

from __future__ import annotations

from timeline.render.terminal.verdicts import LABELS, headline
from timeline.results.verdicts import CheckReport

__all__ = ["render_github"]


def _escape_data(text: str) -> str:
    # The escaping of the GitHub Actions toolkit (@actions/core, command.ts).
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def render_github(report: CheckReport) -> str:
    """Return GitHub Actions workflow commands: an ``::error`` per failed check, on its budget file line.

    Then a ``::warning`` per warning of the report (a baseline of another job); ends with a
    ``::notice`` when every budget holds. Print them on stdout in a workflow step.
    """
    lines = []
    for v in report.verdicts:
        if not v.failed:
            continue
        line = {} if v.line is None else {"line": str(v.line)}
        props = {
            "file": report.budget_file,
            **line,
            "title": f"timeline check: {v.name} ({LABELS[v.status]})",
        }
        joined = ",".join(f"{k}={_escape_property(val)}" for k, val in props.items())
        lines.append(f"::error {joined}::{_escape_data(v.message)}")
    lines += [f"::warning title=timeline check::{_escape_data(w)}" for w in report.warnings]
    if report.ok:
        lines.append(f"::notice title=timeline check::{_escape_data(headline(report))}")
    return "\n".join(lines) + "\n"
