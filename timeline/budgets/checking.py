"""What ``timeline check`` reads, decided from its budget file before any trace is read.

Takes the budget file's place, the run's options, the baseline given and whether a markdown summary
is asked for; gives a :class:`CheckPlan`: the budget file read and checked, the link, whether the
run is diagnosed, the baseline to read (none when the file has no regression check), the warnings
about options that are not used, and :meth:`CheckPlan.read`, which reads the run or its baseline
with what the budgets need (the collectives matched across ranks, the findings, the exposure per
dimension). Imports no polars: ``timeline check`` reaches the load as the loading policy says.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from timeline.budgets.budget_file import BudgetFile, check_links, find_budget_file, read_budget_file
from timeline.errors import shown

if TYPE_CHECKING:
    from timeline.budgets.frames import MetricFrames
    from timeline.run import Inputs, RunOptions

__all__ = ["CheckPlan", "plan_check"]


@dataclass(frozen=True, kw_only=True)
class CheckPlan:
    """What ``timeline check`` reads and with what, decided from its budget file.

    Attributes
    ----------
    budgets
        The budget file, read and checked.
    options
        The run's options as read (without the link when nothing reads it).
    link_gbps
        The link as given (``--link-gbps``), which the link utilisation budgets are measured against.
    diagnose
        Whether the run is diagnosed: a budget reads a finding, or the markdown summary lists them.
    baseline
        The baseline's paths; empty without one, or when the file has no ``[regression]`` entry.
    warnings
        One line per option given that is not used.
    """

    budgets: BudgetFile
    options: RunOptions
    link_gbps: float | None
    diagnose: bool
    baseline: tuple[str, ...]
    warnings: tuple[str, ...]

    def read(
        self,
        inputs: Inputs,
        *,
        baseline: bool = False,
        progress: Callable[[str, int, int], None] | None = None,
        warn: Callable[[Sequence[str]], None] | None = None,
    ) -> MetricFrames:
        """Return the frames of the run (or, ``baseline``, of the baseline) with what the budgets read.

        Raises
        ------
        TimelineError
            Bad input.
        """
        from timeline.budgets.runs import read_run

        budgets = self.budgets
        if baseline:
            return read_run(
                replace(inputs, paths=list(self.baseline)),
                self.options,
                match=budgets.needs_matching(regressions_only=True),
                findings=budgets.needs_findings(regressions_only=True),
                dimensions=budgets.needs_dimensions(regressions_only=True),
                progress=progress,
                warn=warn,
            )
        return read_run(
            inputs,
            self.options,
            match=budgets.needs_matching(),
            findings=self.diagnose,
            dimensions=budgets.needs_dimensions(),
            progress=progress,
            warn=warn,
        )


def plan_check(
    budget: str | Path | None, options: RunOptions, *, baseline: Sequence[str] = (), markdown: bool = False
) -> CheckPlan:
    """Read the budget file and decide what ``timeline check`` reads.

    Parameters
    ----------
    budget
        The budget file (``--budget``); default :func:`~timeline.budgets.budget_file.find_budget_file`.
    options
        The run's options (``--link-gbps``, ``--dimension``, ``--gpus-per-node``).
    baseline
        The baseline's paths (``--baseline``).
    markdown
        Whether a markdown summary is written (it lists the diagnosis' top findings).

    Raises
    ------
    BudgetError
        A bad budget file, or a link utilisation budget without a link (before any trace is read).
    """
    budgets = read_budget_file(budget if budget is not None else find_budget_file())
    link = options.link_gbps
    check_links(budgets, link_gbps=link)
    diagnose = budgets.needs_findings() or markdown
    warnings = []
    if link is not None and not budgets.needs_link() and not diagnose:
        warnings.append(f"{shown(budgets.path)} has no link utilisation budget; --link-gbps is not used")
        options = replace(options, link_gbps=None)
    if baseline and not budgets.regressions:
        warnings.append(f"{shown(budgets.path)} has no [regression] entries; --baseline is not used")
        baseline = ()
    return CheckPlan(
        budgets=budgets,
        options=options,
        link_gbps=link,
        diagnose=diagnose,
        baseline=tuple(baseline),
        warnings=tuple(warnings),
    )
