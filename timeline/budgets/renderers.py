"""Verdicts rendered for people and for CI systems: a table, JSON, JUnit XML, GitHub annotations, markdown.

Takes a :class:`~timeline.budgets.evaluation.CheckReport` and gives text; nothing here prints or
writes files.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

import msgspec

from timeline.budgets.evaluation import CheckReport, Verdict
from timeline.budgets.metrics import format_value

__all__ = [
    "REPORT_VERSION",
    "render_github",
    "render_json",
    "render_junit",
    "render_markdown",
    "render_table",
    "report_to_dict",
]

REPORT_VERSION = 1
"""The layout version of :func:`report_to_dict` (``timeline check --json``)."""

_LABEL = {"pass": "PASS", "fail": "FAIL", "nodata": "NO DATA", "skip": "SKIP"}
_ICON = {"pass": "✅", "fail": "❌", "nodata": "⚠️", "skip": "⏭️"}
_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _headline(report: CheckReport) -> str:
    counts = report.counts()
    total = len(report.verdicts)
    checks = f"{total} check{'s' if total != 1 else ''}"
    if report.ok:
        skipped = f", {counts['skip']} skipped" if counts["skip"] else ""
        return (
            f"{checks}, all hold{skipped}" if total - counts["skip"] else f"{checks}, none evaluated{skipped}"
        )
    parts = [f"{counts['fail']} failed"] if counts["fail"] else []
    if counts["nodata"]:
        parts.append(f"{counts['nodata']} without data")
    return f"{checks}: {', '.join(parts)}"


def _worst(verdict: Verdict) -> str:
    return "-" if verdict.worst is None else verdict.worst.describe(verdict.unit)


def render_table(report: CheckReport) -> str:
    """Return the PASS/FAIL table: one row per check with metric, value, limit and the worst sample.

    Below the table, one line per check that did not pass says why.
    """
    header = ["STATUS", "CHECK", "METRIC", "VALUE", "LIMIT", "WORST (rank, iteration)"]
    rows = [
        [
            _LABEL[v.status],
            v.name,
            v.describe_measure(),
            format_value(v.value, v.unit),
            v.describe_limit(),
            _worst(v),
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

    out = [f"timeline check: {_headline(report)}", line(header), *(line(r) for r in rows)]
    notes = [
        f"{_LABEL[v.status]} {v.name}: {v.message}"
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
    }


def render_json(report: CheckReport) -> str:
    """Return :func:`report_to_dict` as one line of JSON."""
    return msgspec.json.encode(report_to_dict(report)).decode()


def _xml_text(text: str) -> str:
    return _XML_INVALID.sub("?", text)


def render_junit(report: CheckReport) -> str:
    """Return a JUnit XML report: one test case per check, a failure per failed budget.

    ``nodata`` becomes an ``<error>`` (the budget could not be measured), ``skip`` a ``<skipped>``.
    The document validates against the Jenkins xUnit JUnit schema (``junit-10.xsd``), which GitLab,
    Jenkins, Azure Pipelines and the GitHub test-report actions read.
    """
    counts = report.counts()
    totals = {
        "tests": str(len(report.verdicts)),
        "failures": str(counts["fail"]),
        "errors": str(counts["nodata"]),
    }
    root = ET.Element("testsuites", {"name": "timeline check", **totals, "time": "0"})
    suite = ET.SubElement(
        root,
        "testsuite",
        {
            "name": f"timeline check ({_xml_text(report.budget_file)})",
            **totals,
            "skipped": str(counts["skip"]),
            "time": "0",
        },
    )
    properties = ET.SubElement(suite, "properties")
    for name, value in (
        ("budget_file", report.budget_file),
        ("inputs", report.inputs),
        ("baseline", report.baseline or ""),
    ):
        ET.SubElement(properties, "property", {"name": name, "value": _xml_text(value)})
    for v in report.verdicts:
        case = ET.SubElement(
            suite, "testcase", {"name": _xml_text(v.name), "classname": f"timeline.{v.kind}", "time": "0"}
        )
        details = "\n".join(
            [
                f"metric: {v.describe_measure()}",
                f"value: {format_value(v.value, v.unit)}",
                f"limit: {v.describe_limit()}",
                f"worst: {_worst(v)}",
                f"samples: {v.samples}",
                f"budget: {v.where}",
            ]
        )
        message = _xml_text(v.message)
        if v.status == "fail":
            element = ET.SubElement(case, "failure", {"type": f"{v.kind} exceeded", "message": message})
            element.text = _xml_text(details)
        elif v.status == "nodata":
            element = ET.SubElement(case, "error", {"type": "no data", "message": message})
            element.text = _xml_text(details)
        elif v.status == "skip":
            ET.SubElement(case, "skipped", {"message": message})
        else:
            ET.SubElement(case, "system-out").text = _xml_text(f"{v.message}\n{details}")
    ET.SubElement(suite, "system-out").text = _xml_text(render_table(report))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _escape_data(text: str) -> str:
    # The escaping of the GitHub Actions toolkit (@actions/core, command.ts).
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def render_github(report: CheckReport) -> str:
    """Return GitHub Actions workflow commands: an ``::error`` per failed check, on its budget file line.

    Ends with a ``::notice`` when every budget holds. Print them on stdout in a workflow step.
    """
    lines = []
    for v in report.verdicts:
        if not v.failed:
            continue
        props = {"file": report.budget_file}
        if v.line is not None:
            props["line"] = str(v.line)
        props["title"] = f"timeline check: {v.name} ({_LABEL[v.status]})"
        joined = ",".join(f"{k}={_escape_property(val)}" for k, val in props.items())
        lines.append(f"::error {joined}::{_escape_data(v.message)}")
    if report.ok:
        lines.append(f"::notice title=timeline check::{_escape_data(_headline(report))}")
    return "\n".join(lines) + "\n"


def _md(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("`", "\\`").replace("\n", " ")


def _code(text: str) -> str:
    return "`" + text.replace("`", "'").replace("\n", " ") + "`"


def render_markdown(report: CheckReport) -> str:
    """Return a markdown summary for a pull-request comment or ``$GITHUB_STEP_SUMMARY``."""
    icon = "✅" if report.ok else "❌"
    out = [
        f"### {icon} timeline check: {_md(_headline(report))}",
        "",
        "| | check | metric | value | limit | worst (rank, iteration) |",
        "|:-:|---|---|--:|---|---|",
    ]
    for v in report.verdicts:
        limit = v.describe_limit().replace("<=", "≤").replace(">=", "≥")
        out.append(
            f"| {_ICON[v.status]} | {_md(v.name)} | `{v.metric}` {v.describe_measure()[len(v.metric) + 1 :]} "
            f"| {format_value(v.value, v.unit)} | {_md(limit)} | {_md(_worst(v))} |"
        )
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
