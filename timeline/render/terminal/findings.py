"""The verdict and the findings (:mod:`timeline.results.diagnosis`): the first lines of ``timeline analyze``.

Takes the ``verdict`` and ``findings`` of a summary (or of
:func:`~timeline.results.diagnosis.build_diagnosis`) and draws them on a console: the verdict
sentence, the top findings with their predicted gain and fix, the model intensity and the bandwidth
at which communication hides, then the notes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape

from timeline.render.terminal.tables import print_prose
from timeline.units import format_ns

__all__ = [
    "FINDINGS_SHOWN",
    "describe_finding",
    "describe_verdict_figures",
    "format_ranks",
    "render_findings",
]

FINDINGS_SHOWN = 3
"""Findings drawn before the tables; ``--json`` holds every one."""


def format_ranks(ranks: Sequence[int] | None) -> str:
    """Return ranks compactly: ``0-3, 8, 12-15``; ``-`` for none; ``all`` for None.

    Examples
    --------
    >>> format_ranks([0, 1, 2, 3, 8, 12, 13, 14, 15]), format_ranks([]), format_ranks(None)
    ('0-3, 8, 12-15', '-', 'all')
    """
    if ranks is None:
        return "all"
    values = sorted(set(ranks))
    if not values:
        return "-"
    runs: list[str] = []
    start = prev = values[0]
    for r in [*values[1:], None]:
        if r is not None and r == prev + 1:
            prev = r
            continue
        runs.append(
            str(start) if start == prev else f"{start}-{prev}" if prev > start + 1 else f"{start}, {prev}"
        )
        if r is not None:
            start = prev = r
    return ", ".join(runs)


def describe_finding(finding: Mapping[str, Any]) -> str:
    """Return a finding's headline: cause, ranks, predicted gain and step, and how it was predicted."""
    ranks = finding.get("ranks")
    where = "" if not ranks else f" (rank{'s' if len(ranks) > 1 else ''} {format_ranks(ranks)})"
    gain = finding.get("predicted_gain_ratio")
    if gain is None and finding.get("basis") == "observed":
        return f"{finding['cause']}{where}"  # what happened (a Flight Recorder dump), nothing to predict
    if gain is None:
        return f"{finding['cause']}{where}: no prediction ({finding['basis']})"
    step = finding.get("predicted_step_ns")
    if finding["basis"] == "replay":
        return f"{finding['cause']}{where}: saves {gain:.0%} of the step, to {format_ns(step)} (replayed)"
    # a bound: the most the fix could save (no replay of it), so "at most"
    return f"{finding['cause']}{where}: saves at most {gain:.0%} of the step, to {format_ns(step)} (a bound)"


def describe_verdict_figures(verdict: Mapping[str, Any]) -> str:
    """Return the line of the model intensity and the bandwidth at which communication hides."""
    parts = []
    intensity = verdict.get("model_intensity_ns_per_byte")
    if intensity is not None:
        parts.append(
            f"model intensity {intensity:.3g} ns of compute per gradient byte (the compute each byte "
            "of gradient has to hide under)"
        )
    hide = verdict.get("hide_bandwidth_gbps")
    if hide is not None:
        parts.append(f"communication would hide completely at about {hide:.3g} Gbit/s (link used in full)")
    elif verdict.get("step_ns") is not None:
        parts.append("no link bandwidth would hide the communication (no bytes, or no replay)")
    return "; ".join(parts)


def render_findings(
    verdict: Mapping[str, Any],
    findings: Sequence[Mapping[str, Any]],
    console: Console,
    *,
    shown: int | None = FINDINGS_SHOWN,
    verbose: bool = False,
) -> None:
    """Print the verdict, the first ``shown`` findings (None: all) and the notes, wrapped to the console.

    The one renderer of findings in the terminal: the diagnosis of profiler traces (ranked by
    predicted gain) and the findings of Flight Recorder dumps (what was observed, no prediction).
    Several notes are folded into one line counting them, unless ``verbose``.
    """
    print_prose(console, f"[bold]verdict[/bold]: {escape(verdict['summary'])}")
    step = verdict.get("step_ns")
    iterations = verdict.get("iterations")
    many = iterations is not None and len(iterations) > 1
    scope = (
        "whole traces" if iterations is None else f"iteration{'s' if many else ''} {format_ranks(iterations)}"
    )
    if findings and any(f.get("predicted_gain_ratio") is not None for f in findings):
        head = f"findings, by predicted gain ({scope}"
        head += f"; measured step {format_ns(step)})" if step is not None else ")"
        print_prose(console, head, markup=False)
    elif findings:
        console.print("findings")
    limit = len(findings) if shown is None else shown
    for k, finding in enumerate(findings[:limit], start=1):
        print_prose(console, f"{k}. [bold]{escape(describe_finding(finding))}[/bold]", indent=2, hang=3)
        print_prose(console, finding["summary"], indent=5, hang=0, markup=False)
        print_prose(console, f"fix: {finding['fix']}", indent=5, hang=5, markup=False)
    if len(findings) > limit:
        rest = ", ".join(f["cause"] for f in findings[limit:])
        more = f"… {len(findings) - limit} more ({rest}): --json lists every finding"
        print_prose(console, more, indent=2, markup=False)
    figures = describe_verdict_figures(verdict)
    if figures:
        print_prose(console, figures, markup=False)
    notes = list(verdict.get("notes") or [])
    if verbose or len(notes) <= 1:
        for note in notes:
            print_prose(console, f"note: {note}", hang=6, markup=False)
    else:
        kept = "what was not examined and how the figures were made"
        print_prose(console, f"notes: {len(notes)} on {kept} (--verbose shows them)", markup=False)
