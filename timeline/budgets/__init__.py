"""CI budgets: limits on communication overhead, and regressions against a baseline run.

The pipeline reads in the module names: :mod:`~timeline.budgets.metrics` (the open registry of
metrics a budget can name) → :mod:`~timeline.budgets.budget_file` (``timeline.toml`` read and
checked) → :mod:`~timeline.budgets.frames` (the rows of a run: a :class:`~timeline.run.Run` or a saved
summary JSON) → :mod:`~timeline.budgets.evaluation` (verdicts, a :class:`CheckReport`), which the renderers of
:mod:`timeline.render` turn into a table, JSON, JUnit XML, GitHub annotations or markdown
(:class:`timeline.results.verdicts.CheckReport` is its typed data). ``timeline check`` wires them together;
``docs/ci.md`` documents the file layout, the metrics and the regression rule. Metrics on the
collectives matched across ranks (skew, bandwidth, link utilisation, wait) need the run's
frames with ``matched=True`` (:func:`frames_of_run`), and a link for the utilisation metrics.

>>> import timeline  # doctest: +SKIP
>>> from timeline.budgets import evaluate_budgets, frames_of_run, read_budget_file  # doctest: +SKIP
>>> budgets = read_budget_file("timeline.toml")  # doctest: +SKIP
>>> run = timeline.analyze("runs/pr", link_gbps=100)  # doctest: +SKIP
>>> frames = frames_of_run(  # doctest: +SKIP
...     run, label="runs/pr", matched=True, dimensions=False, diagnosed=False
... )
>>> report = evaluate_budgets(budgets, frames, link_gbps=100)  # doctest: +SKIP
>>> from timeline.render.terminal.verdicts import render_table  # doctest: +SKIP
>>> print(render_table(report))  # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from timeline.lazy import lazy_names

if TYPE_CHECKING:
    from timeline.budgets.budget_file import (
        AGGREGATES,
        Budget,
        BudgetFile,
        Over,
        Regression,
        Scope,
        check_links,
        find_budget_file,
        parse_budgets,
        read_budget_file,
    )
    from timeline.budgets.evaluation import (
        NOISE_K,
        CheckReport,
        Status,
        Verdict,
        Worst,
        compare_jobs,
        evaluate_budgets,
        select_samples,
        statistic_of,
    )
    from timeline.budgets.frames import (
        JobFacts,
        MetricFrames,
        frames_from_summary,
        frames_of_run,
        job_facts,
        read_summary,
    )
    from timeline.budgets.metrics import (
        MATCHED_SOURCES,
        Better,
        Metric,
        MetricSource,
        get_metric,
        register_metric,
        registered_metrics,
    )
    from timeline.budgets.runs import is_summary_file, read_run
    from timeline.units import format_value

__all__ = [
    "AGGREGATES",
    "MATCHED_SOURCES",
    "NOISE_K",
    "Better",
    "Budget",
    "BudgetFile",
    "CheckReport",
    "JobFacts",
    "Metric",
    "MetricFrames",
    "MetricSource",
    "Over",
    "Regression",
    "Scope",
    "Status",
    "Verdict",
    "Worst",
    "check_links",
    "compare_jobs",
    "evaluate_budgets",
    "find_budget_file",
    "format_value",
    "frames_from_summary",
    "frames_of_run",
    "get_metric",
    "is_summary_file",
    "job_facts",
    "parse_budgets",
    "read_budget_file",
    "read_run",
    "read_summary",
    "register_metric",
    "registered_metrics",
    "select_samples",
    "statistic_of",
]

_LAZY = {
    "AGGREGATES": "timeline.budgets.budget_file",
    "Budget": "timeline.budgets.budget_file",
    "BudgetFile": "timeline.budgets.budget_file",
    "Over": "timeline.budgets.budget_file",
    "Regression": "timeline.budgets.budget_file",
    "Scope": "timeline.budgets.budget_file",
    "find_budget_file": "timeline.budgets.budget_file",
    "parse_budgets": "timeline.budgets.budget_file",
    "read_budget_file": "timeline.budgets.budget_file",
    "check_links": "timeline.budgets.budget_file",
    "NOISE_K": "timeline.budgets.evaluation",
    "CheckReport": "timeline.budgets.evaluation",
    "Status": "timeline.budgets.evaluation",
    "Verdict": "timeline.budgets.evaluation",
    "Worst": "timeline.budgets.evaluation",
    "compare_jobs": "timeline.budgets.evaluation",
    "evaluate_budgets": "timeline.budgets.evaluation",
    "select_samples": "timeline.budgets.evaluation",
    "statistic_of": "timeline.budgets.evaluation",
    "JobFacts": "timeline.budgets.frames",
    "MetricFrames": "timeline.budgets.frames",
    "frames_of_run": "timeline.budgets.frames",
    "frames_from_summary": "timeline.budgets.frames",
    "is_summary_file": "timeline.budgets.runs",
    "job_facts": "timeline.budgets.frames",
    "read_run": "timeline.budgets.runs",
    "read_summary": "timeline.budgets.frames",
    "MATCHED_SOURCES": "timeline.budgets.metrics",
    "Better": "timeline.budgets.metrics",
    "Metric": "timeline.budgets.metrics",
    "MetricSource": "timeline.budgets.metrics",
    "format_value": "timeline.units",
    "get_metric": "timeline.budgets.metrics",
    "register_metric": "timeline.budgets.metrics",
    "registered_metrics": "timeline.budgets.metrics",
}

__getattr__, __dir__ = lazy_names("timeline.budgets", _LAZY, globals())
