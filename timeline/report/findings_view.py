"""The findings panel the report opens with: the verdict, and findings that select their rank and iteration.

Takes the diagnosis (:class:`timeline.results.diagnosis.DiagnosisReport`) and the report's views;
gives a bokeh column: the verdict (``findings_verdict``) and a table of the findings
(``findings_table``, source ``findings``), largest predicted gain first. Selecting a row (a click)
sets the iteration selector to the finding's first iteration (else the first diagnosed one) and the
rank filter to its ranks (all of them when it names none), so the Gantt shows where the cause is; in
the served app the same values reach the Python callbacks.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import polars as pl
from bokeh.layouts import column
from bokeh.models import ColumnDataSource, CustomJS
from bokeh.models.widgets import DataTable, Div, MultiChoice, Select, TableColumn

if TYPE_CHECKING:
    from timeline.results.diagnosis import DiagnosisReport, Verdict
    from timeline.results.findings import Finding

__all__ = ["build_findings_panel", "finding_targets"]

# A selected row: its ranks into the rank filter (all when it names none), its view into the selector.
_PICK_JS = """
const picked = cb_obj.indices;
if (picked.length === 0) return;
const i = picked[0];
const wanted = source.data.rank_list[i];
const value = wanted === "" ? all_ranks : wanted.split(",");
if (JSON.stringify(ranks.value) !== JSON.stringify(value)) ranks.value = value;
const v = source.data.view[i];
if (v !== "" && select.value !== v) select.value = v;
"""


def finding_targets(
    findings: Sequence[Finding], verdict: Verdict, views: pl.DataFrame
) -> list[tuple[str, list[int] | None]]:
    """Return, per finding, the view it selects (``""``: none) and the ranks it names (None: all).

    The view is that of the finding's first iteration, else of the first iteration the diagnosis
    read (``verdict.iterations``), when the report has it.
    """
    view_of = {
        iteration: str(view)
        for view, iteration in views.select("view", "iteration").iter_rows()
        if iteration is not None
    }
    diagnosed = verdict.iterations or []
    targets = []
    for finding in findings:
        iterations = finding.iterations or diagnosed
        view = next((view_of[i] for i in iterations if i in view_of), "")
        ranks = finding.ranks
        targets.append((view, None if not ranks else list(ranks)))
    return targets


def build_findings_panel(
    diagnosis: DiagnosisReport, views: pl.DataFrame, *, select: Select, ranks: MultiChoice, width: int
) -> Any:
    """Return the verdict and the findings table, its rows wired to the selector and the rank filter."""
    verdict = diagnosis.verdict
    findings = diagnosis.findings
    targets = finding_targets(findings, verdict, views)
    source = ColumnDataSource(
        data={
            "cause": [f.cause for f in findings],
            "where": [_where(f) for f in findings],
            "gain": [
                "-" if f.predicted_gain_ratio is None else f"{f.predicted_gain_ratio:.1%}" for f in findings
            ],
            "basis": [f.basis for f in findings],
            "summary": [f.summary for f in findings],
            "fix": [f.fix for f in findings],
            "view": [view for view, _ in targets],
            "rank_list": ["" if r is None else ",".join(map(str, r)) for _, r in targets],
        },
        name="findings",
    )
    table = DataTable(
        source=source,
        columns=[
            TableColumn(field="cause", title="cause", width=110),
            TableColumn(field="where", title="where", width=150),
            TableColumn(field="gain", title="predicted gain", width=100),
            TableColumn(field="basis", title="basis", width=60),
            TableColumn(field="summary", title="finding", width=560),
            TableColumn(field="fix", title="fix", width=420),
        ],
        width=width,
        height=min(28 + 28 * max(len(findings), 1), 200),
        index_position=None,
        name="findings_table",
    )
    source.selected.js_on_change(
        "indices",
        CustomJS(
            args={"source": source, "select": select, "ranks": ranks, "all_ranks": list(ranks.options)},
            code=_PICK_JS,
        ),
    )
    notes = "".join(f"<br>note: {html.escape(n)}" for n in verdict.notes)
    head = Div(
        text=f"<b>verdict</b>: {html.escape(verdict.summary)}{notes}",
        width=width,
        name="findings_verdict",
    )
    if not findings:
        return column(head)
    hint = Div(text="<i>select a finding to show its rank and iteration in the Gantt</i>", width=width)
    return column(head, hint, table)


def _where(finding: Finding) -> str:
    ranks = finding.ranks
    iterations = finding.iterations
    parts = ["all ranks" if not ranks else "rank " + ", ".join(map(str, ranks))]
    if iterations:
        parts.append("iteration " + ", ".join(map(str, iterations)))
    return "; ".join(parts)
