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

from timeline.lazy import attach_stub

__getattr__, __dir__, __all__ = attach_stub(__name__, __file__)
