"""The verdict and the findings (:mod:`timeline.results.diagnosis`): the first lines of ``timeline analyze``.

Takes a :class:`~timeline.results.diagnosis.Verdict` and its
:class:`~timeline.results.findings.Finding` list (a summary's ``verdict`` and ``findings``, or a
:class:`~timeline.results.diagnosis.DiagnosisReport`'s) and draws them on a console: the verdict
sentence, the top findings with their predicted gain and fix, the model intensity and the bandwidth
at which communication hides, then the notes. :func:`render_observed_findings` draws the findings
of Flight Recorder dumps (what was observed: no prediction, no figures).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from rich.console import Console
from rich.markup import escape

from timeline.render.terminal.tables import print_prose
from timeline.results.findings import hide_text
from timeline.units import format_ns

if TYPE_CHECKING:
    from timeline.results.diagnosis import Verdict

__all__ = [
    "FINDINGS_SHOWN",
    "FindingLike",
    "describe_finding",
    "describe_verdict_figures",
    "format_ranks",
    "render_findings",
    "render_observed_findings",
]

FINDINGS_SHOWN = 3
"""Findings drawn before the tables; ``--json`` holds every one."""


class FindingLike(Protocol):
    """What this module draws of a finding.

    A :class:`~timeline.results.findings.Finding`, or a result's typed row of one (the Flight
    Recorder report's).
    """

    @property
    def cause(self) -> str:
        """The cause."""
        ...

    @property
    def summary(self) -> str:
        """One sentence with the numbers."""
        ...

    @property
    def fix(self) -> str:
        """What to change."""
        ...

    @property
    def ranks(self) -> Sequence[int] | None:
        """The ranks concerned (None: all)."""
        ...

    @property
    def predicted_step_ns(self) -> int | None:
        """The step after the fix."""
        ...

    @property
    def predicted_gain_ratio(self) -> float | None:
        """The share of the step the fix saves."""
        ...

    @property
    def basis(self) -> str:
        """How the prediction was made."""
        ...


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


def describe_finding(finding: FindingLike) -> str:
    """Return a finding's headline: cause, ranks, predicted gain and step, and how it was predicted."""
    ranks = finding.ranks
    where = "" if not ranks else f" (rank{'s' if len(ranks) > 1 else ''} {format_ranks(ranks)})"
    gain = finding.predicted_gain_ratio
    if gain is None and finding.basis == "observed":
        return f"{finding.cause}{where}"  # what happened (a Flight Recorder dump), nothing to predict
    if gain is None:
        return f"{finding.cause}{where}: no prediction ({finding.basis})"
    step = format_ns(finding.predicted_step_ns)
    if finding.basis == "replay":
        return f"{finding.cause}{where}: saves {gain:.0%} of the step, to {step} (replayed)"
    if finding.basis == "assumption":
        return f"{finding.cause}{where}: saves {gain:.0%} of the step, to {step} (replayed on an assumption)"
    # a bound: the most the fix could save (no replay of it), so "at most"
    return f"{finding.cause}{where}: saves at most {gain:.0%} of the step, to {step} (a bound)"


def describe_verdict_figures(verdict: Verdict) -> str:
    """Return the line of the model intensity and the bandwidth at which communication hides."""
    parts = []
    intensity = verdict.model_intensity_ns_per_byte
    if intensity is not None:
        parts.append(
            f"model intensity {intensity:.3g} ns of compute per gradient byte (the compute each byte "
            "of gradient has to hide under)"
        )
    hide = verdict.hide_bandwidth_gbps
    if hide is not None:
        parts.append(f"{hide_text(hide)} (link used in full)")
    elif verdict.step_ns is not None:
        parts.append("no link bandwidth would hide the communication (no bytes, or no replay)")
    return "; ".join(parts)


def render_findings(
    verdict: Verdict,
    findings: Sequence[FindingLike],
    console: Console,
    *,
    shown: int | None = FINDINGS_SHOWN,
    verbose: bool = False,
) -> None:
    """Print the verdict, the first ``shown`` findings (None: all) and the notes, wrapped to the console.

    The one renderer of the diagnosis' findings in the terminal (ranked by predicted gain). Several
    notes are folded into one line counting them, unless ``verbose``.
    """
    print_prose(console, f"[bold]verdict[/bold]: {escape(verdict.summary)}")
    step = verdict.step_ns
    iterations = verdict.iterations
    many = iterations is not None and len(iterations) > 1
    scope = (
        "whole traces" if iterations is None else f"iteration{'s' if many else ''} {format_ranks(iterations)}"
    )
    if findings and any(f.predicted_gain_ratio is not None for f in findings):
        head = f"findings, by predicted gain ({scope}"
        head += f"; measured step {format_ns(step)})" if step is not None else ")"
        print_prose(console, head, markup=False)
    elif findings:
        console.print("findings")
    _list_findings(findings, console, shown=shown)
    figures = describe_verdict_figures(verdict)
    if figures:
        print_prose(console, figures, markup=False)
    notes = list(verdict.notes)
    if verbose or len(notes) <= 1:
        for note in notes:
            print_prose(console, f"note: {note}", hang=6, markup=False)
    else:
        kept = "what was not examined and how the figures were made"
        print_prose(console, f"notes: {len(notes)} on {kept} (--verbose shows them)", markup=False)


def render_observed_findings(summary: str, findings: Sequence[FindingLike], console: Console) -> None:
    """Print a verdict sentence and every finding: what Flight Recorder dumps show (no prediction)."""
    print_prose(console, f"[bold]verdict[/bold]: {escape(summary)}")
    if findings:
        console.print("findings")
    _list_findings(findings, console, shown=None)


def _list_findings(findings: Sequence[FindingLike], console: Console, *, shown: int | None) -> None:
    """Print the first ``shown`` findings (None: all): headline, sentence, fix; then how many more."""
    limit = len(findings) if shown is None else shown
    for k, finding in enumerate(findings[:limit], start=1):
        print_prose(console, f"{k}. [bold]{escape(describe_finding(finding))}[/bold]", indent=2, hang=3)
        print_prose(console, finding.summary, indent=5, hang=0, markup=False)
        print_prose(console, f"fix: {finding.fix}", indent=5, hang=5, markup=False)
    if len(findings) > limit:
        rest = ", ".join(f.cause for f in findings[limit:])
        more = f"… {len(findings) - limit} more ({rest}): --json lists every finding"
        print_prose(console, more, indent=2, markup=False)
