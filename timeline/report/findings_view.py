"""The findings panel the report opens with: the verdict, and findings that select their rank and iteration.

Takes the diagnosis (:class:`timeline.results.diagnosis.DiagnosisReport`) and the report's
views; gives a bokeh column (``findings_panel``): the verdict (``findings_verdict``) in large type,
then one block per finding (``finding_<i>``), largest predicted gain first: its cause,
where, predicted gain and basis, its sentence and its fix in full, wrapped to the window's width,
beside a button (``finding_button_<i>``) that selects the finding's row of the ``findings`` source.
Selecting a row sets the iteration selector to the finding's first iteration (else the first
diagnosed one) and the rank filter to its ranks (all of them when it names none), so the Gantt
shows where the cause is; in the served app the same values reach the Python callbacks.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import polars as pl
from bokeh.layouts import column, row
from bokeh.models import ColumnDataSource, CustomJS
from bokeh.models.widgets import Button, Div, MultiChoice, Select

from timeline.report.layout import STRETCH

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

# A finding's button selects its row (whose selection the callback above follows).
_BUTTON_JS = "source.selected.indices = [row];"

_VERDICT = "font-size:16px;line-height:1.45;max-width:1400px"
_NOTE = "font-size:12px;color:#555;margin-top:2px"
_FINDING = "font-size:13px;line-height:1.45;max-width:1400px"


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
        targets.append((view, None if not ranks else [int(r) for r in ranks]))
    return targets


def build_findings_panel(
    diagnosis: DiagnosisReport, views: pl.DataFrame, *, select: Select, ranks: MultiChoice
) -> Any:
    """Return the verdict and the findings, each with a button wired to the selector and the rank filter."""
    verdict = diagnosis.verdict
    findings = list(diagnosis.findings)
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
    source.selected.js_on_change(
        "indices",
        CustomJS(
            args={"source": source, "select": select, "ranks": ranks, "all_ranks": list(ranks.options)},
            code=_PICK_JS,
        ),
    )
    notes = "".join(f'<div style="{_NOTE}">note: {html.escape(n)}</div>' for n in verdict.notes)
    head = Div(
        text=f'<div style="{_VERDICT}"><b>Verdict:</b> {html.escape(verdict.summary)}</div>{notes}',
        sizing_mode=STRETCH,
        name="findings_verdict",
    )
    if not findings:
        return column(head, sizing_mode=STRETCH, name="findings_panel")
    hint = Div(
        text='<i style="font-size:12px;color:#555">"show" selects the finding\'s ranks and iteration '
        "in the Gantt below</i>",
        sizing_mode=STRETCH,
    )
    blocks = [_finding_block(source, i) for i in range(len(findings))]
    return column(head, hint, *blocks, sizing_mode=STRETCH, name="findings_panel")


def _finding_block(source: ColumnDataSource, i: int) -> Any:
    """Return finding ``i`` of ``source`` as a block: a button that selects it, its text in full."""
    cause, where, gain, basis, summary, fix = (
        html.escape(str(source.data[column][i]))
        for column in ("cause", "where", "gain", "basis", "summary", "fix")
    )
    head = f"<b>{i + 1}. {cause}</b> · {where} · predicted gain <b>{gain}</b> ({basis})"
    text = f'<div style="{_FINDING}">{head}<br>{summary}<br><b>Fix:</b> {fix}</div>'

    button = Button(label="show", width=70, name=f"finding_button_{i}", button_type="primary")
    button.js_on_click(CustomJS(args={"source": source, "row": i}, code=_BUTTON_JS))
    block = Div(text=text, sizing_mode=STRETCH, name=f"finding_{i}")
    return row(button, block, sizing_mode=STRETCH)


def _where(finding: Finding) -> str:
    ranks = finding.ranks
    iterations = finding.iterations
    parts = ["all ranks" if not ranks else "rank " + ", ".join(map(str, ranks))]
    if iterations:
        parts.append("iteration " + ", ".join(map(str, iterations)))
    return "; ".join(parts)
