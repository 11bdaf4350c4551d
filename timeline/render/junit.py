"""The verdicts of ``timeline check`` as JUnit XML (``--junit``), for CI systems' test reports."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from timeline.render.terminal.verdicts import render_table
from timeline.results.verdicts import CheckReport
from timeline.units import format_value

__all__ = ["render_junit"]

_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _xml_text(text: str) -> str:
    return _XML_INVALID.sub("?", text)


def render_junit(report: CheckReport) -> str:
    """Return a JUnit XML report: one test case per check, a failure per failed budget.

    ``nodata`` becomes an ``<error>`` (the budget could not be measured), ``skip`` a ``<skipped>``;
    each warning of the report (a baseline of another job) a ``<property name="warning">`` of the suite
    (and a line of its ``<system-out>``, the table).
    The document validates against the Jenkins xUnit JUnit schema (``junit-10.xsd``), which GitLab,
    Jenkins, Azure Pipelines and the GitHub test-report actions read.
    """
    counts = report.counts
    totals = {"tests": str(len(report.verdicts)), "failures": str(counts.fail), "errors": str(counts.nodata)}
    root = ET.Element("testsuites", {"name": "timeline check", **totals, "time": "0"})
    suite = ET.SubElement(
        root,
        "testsuite",
        {
            "name": f"timeline check ({_xml_text(report.budget_file)})",
            **totals,
            "skipped": str(counts.skip),
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
    for warning in report.warnings:  # a baseline of another job: the suite's system-out says it too
        ET.SubElement(properties, "property", {"name": "warning", "value": _xml_text(warning)})
    for v in report.verdicts:
        case = ET.SubElement(
            suite, "testcase", {"name": _xml_text(v.name), "classname": f"timeline.{v.kind}", "time": "0"}
        )
        details = "\n".join(
            [
                f"metric: {v.describe_measure()}",
                f"value: {format_value(v.value, v.unit)}",
                f"limit: {v.describe_limit()}",
                f"worst: {v.describe_worst()}",
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
