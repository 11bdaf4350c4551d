"""Budget files: the layout, discovery, and every mistake as one message naming the file and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from timeline.budgets import (
    BudgetFile,
    Metric,
    find_budget_file,
    get_metric,
    parse_budgets,
    read_budget_file,
    register_metric,
    registered_metrics,
)
from timeline.budgets import metrics as metrics_module
from timeline.errors import BudgetError
from timeline.schema import ITERATION_OVERLAP_SCHEMA


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def read(text: str, name: str = "timeline.toml") -> BudgetFile:
    Path(name).write_text(text, encoding="utf-8")
    return read_budget_file(name)


# --- the registry ------------------------------------------------------------------------------------


def test_every_iteration_overlap_metric_is_registered() -> None:
    names = {m.name for m in registered_metrics()}
    overlap_columns = set(ITERATION_OVERLAP_SCHEMA.names()) - {
        "rank",
        "iteration",
        "window",
        "mode",
        "start_ns",
        "end_ns",
    }
    assert overlap_columns <= names
    assert {"collective_exposed_ns", "collective_dur_ns", "collective_iteration_exposed_ns"} <= names


def test_metric_reads_its_column_by_default() -> None:
    metric = get_metric("exposed_comm_ratio", where="x")
    assert metric.columns == ("exposed_comm_ratio",)
    assert metric.source == "iterations"
    assert metric.better == "lower"
    assert get_metric("hidden_comm_ratio", where="x").better == "higher"


def test_unknown_metric_names_the_closest() -> None:
    with pytest.raises(BudgetError) as info:
        get_metric("exposed_comm_ration", where="f.toml:budgets[2].metric")
    assert str(info.value) == (
        "f.toml:budgets[2].metric: unknown metric 'exposed_comm_ration'; did you mean 'exposed_comm_ratio'?"
    )
    with pytest.raises(BudgetError, match=r"unknown metric 'zzz'; see docs/ci\.md for the list"):
        get_metric("zzz", where="f.toml:budgets[0].metric")


def test_registering_twice_is_a_bug(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics_module, "_REGISTRY", dict(metrics_module._REGISTRY))
    with pytest.raises(ValueError, match="already registered"):
        register_metric(Metric("step_ns", "again", "ns", "iterations"))
    replaced = register_metric(Metric("step_ns", "again", "ns", "iterations"), replace=True)
    assert get_metric("step_ns", where="x") is replaced
    with pytest.raises(ValueError, match="per_iteration applies to collectives"):
        register_metric(Metric("bad", "x", "ns", "iterations", per_iteration=True))


def test_a_registered_metric_can_be_budgeted_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import polars as pl

    monkeypatch.setattr(metrics_module, "_REGISTRY", dict(metrics_module._REGISTRY))
    register_metric(
        Metric(
            "busy_ratio", "not idle", "ratio", "iterations", expr=1 - pl.col("idle_ratio"), better="higher"
        )
    )
    parsed = parse_budgets({"budgets": [{"metric": "busy_ratio", "min": 0.5}]}, source="t.toml")
    assert parsed.budgets[0].metric.columns == ("idle_ratio",)


# --- the layout ----------------------------------------------------------------------------------------


def test_full_budget_entry(in_tmp: Path) -> None:
    parsed = read(
        """
[[budgets]]
name = "exposed comm per step"
metric = "exposed_comm_ratio"
aggregate = "p90"
over = "rank"
max = 0.25
skip_iterations = 1
ranks = [1, 0]

[[budgets]]
metric = "collective_exposed_ns"
collective = ["all_reduce", "all_to_all"]
pg_name = "0"
min = 0
max = 5_000_000
aggregate = "p99.9"

[regression]
exposed_comm_ratio = { relative = 0.10 }
step_ns = { absolute = 1_000, relative = 0.05, over = "rank", aggregate = "p50", name = "steps" }
"""
    )
    first, second = parsed.budgets
    assert (first.name, first.metric.name, first.aggregate, first.over, first.upper, first.lower) == (
        "exposed comm per step",
        "exposed_comm_ratio",
        "p90",
        "rank",
        0.25,
        None,
    )
    assert (first.scope.ranks, first.scope.skip_iterations) == ((0, 1), 1)
    assert (first.where, first.line) == ("timeline.toml:budgets[0]", 2)
    assert second.name == "collective_exposed_ns p99.9 (all_reduce,all_to_all; group 0)"
    assert (second.aggregate, second.over, second.upper, second.lower) == ("p99.9", "all", 5e6, 0.0)
    assert second.scope.collectives == ("all_reduce", "all_to_all")
    assert second.line == 11
    ratio, steps = parsed.regressions
    assert (ratio.name, ratio.aggregate, ratio.relative, ratio.absolute, ratio.line) == (
        "exposed_comm_ratio mean vs baseline",
        "mean",
        0.1,
        None,
        20,
    )
    assert (steps.name, steps.over, steps.aggregate, steps.line) == ("steps", "rank", "p50", 21)
    assert steps.allowed(100_000) == 5_000  # the larger of the two tolerances
    assert steps.allowed(1_000) == 1_000


def test_defaults(in_tmp: Path) -> None:
    budget = read('[[budgets]]\nmetric = "step_ns"\nmax = 5\n').budgets[0]
    assert (budget.name, budget.aggregate, budget.over, budget.scope.skip_iterations, budget.scope.ranks) == (
        "step_ns max",
        "max",
        "all",
        0,
        None,
    )


def test_pyproject_layout(in_tmp: Path) -> None:
    text = (
        '[project]\nname = "x"\n\n[[tool.timeline.budgets]]\nmetric = "step_ns"\nmax = 5\n\n'
        "[tool.timeline.regression]\nstep_ns = { relative = 0.1 }\n"
    )
    parsed = read(text, "pyproject.toml")
    assert parsed.budgets[0].where == "pyproject.toml:tool.timeline.budgets[0]"
    assert parsed.budgets[0].line == 4
    assert parsed.regressions[0].where == "pyproject.toml:tool.timeline.regression.step_ns"
    assert parsed.regressions[0].line == 9
    with pytest.raises(BudgetError) as info:
        read('[[tool.timeline.budgets]]\nmetric = "step_n"\nmax = 5\n', "pyproject.toml")
    assert str(info.value) == (
        "pyproject.toml:tool.timeline.budgets[0].metric: unknown metric 'step_n'; did you mean 'step_ns'?"
    )


def test_regression_section_header_form(in_tmp: Path) -> None:
    parsed = read(
        '[regression.step_ns]\nrelative = 0.1\n\n[regression]\n"idle_ratio" = { absolute = 0.01 }\n'
    )
    assert [(r.metric.name, r.line) for r in parsed.regressions] == [("step_ns", 1), ("idle_ratio", 5)]


def test_discovery(in_tmp: Path) -> None:
    with pytest.raises(BudgetError) as info:
        find_budget_file(in_tmp)
    assert str(info.value) == "no budgets: pass --budget FILE or add timeline.toml (see docs/ci.md)"
    (in_tmp / "pyproject.toml").write_text('[project]\nname = "x"\n')
    with pytest.raises(BudgetError):
        find_budget_file(in_tmp)
    (in_tmp / "pyproject.toml").write_text('[[tool.timeline.budgets]]\nmetric = "step_ns"\nmax = 1\n')
    assert find_budget_file(in_tmp) == in_tmp / "pyproject.toml"
    (in_tmp / "timeline.toml").write_text('[[budgets]]\nmetric = "step_ns"\nmax = 1\n')
    assert find_budget_file(in_tmp) == in_tmp / "timeline.toml"


# --- every mistake -----------------------------------------------------------------------------------------

ERRORS = [
    pytest.param(
        '[[budgets]]\nmetric = "step_ns"\nmax = 1\n[[budgets]]\nmetric = "step_ns"\nmax = 1\n'
        '[[budgets]]\nmetric = "exposed_comm_ration"\nmax = 0.2\n',
        "timeline.toml:budgets[2].metric: unknown metric 'exposed_comm_ration'; did you mean "
        "'exposed_comm_ratio'?",
        id="unknown-metric",
    ),
    pytest.param(
        "[[budgets]]\nmax = 0.2\n",
        "timeline.toml:budgets[0]: metric is missing; name one, e.g. metric = 'exposed_comm_ratio'",
        id="missing-metric",
    ),
    pytest.param(
        "[[budgets]]\nmetric = 3\nmax = 0.2\n",
        "timeline.toml:budgets[0].metric: must be a string (a metric name), got 3",
        id="metric-type",
    ),
    pytest.param(
        '[[budgets]]\nmetric = "exposed_comm_ratio"\n',
        "timeline.toml:budgets[0]: limit is missing; set max = ... (an upper limit) or min = ... (a "
        "lower limit), "
        "as a fraction in [0, 1]",
        id="missing-limit",
    ),
    pytest.param(
        '[[budgets]]\nmetric = "step_ns"\naggregate = "p90"\n',
        "timeline.toml:budgets[0]: limit is missing; set max = ... (an upper limit) or min = ... (a "
        "lower limit), "
        "in ns",
        id="missing-limit-ns",
    ),
    pytest.param(
        '[[budgets]]\nmetric = "exposed_comm_ratio"\nmax = "abc"\n',
        "timeline.toml:budgets[0].max: limit must be a number, got 'abc'",
        id="limit-string",
    ),
    pytest.param(
        '[[budgets]]\nmetric = "exposed_comm_ratio"\nmin = true\n',
        "timeline.toml:budgets[0].min: limit must be a number, got true",
        id="limit-bool",
    ),
    pytest.param(
        '[[budgets]]\nmetric = "step_ns"\nmax = nan\n',
        "timeline.toml:budgets[0].max: limit must be a finite number, got nan",
        id="limit-nan",
    ),
    pytest.param(
        '[[budgets]]\nmetric = "exposed_comm_ratio"\nmax = 25\n',
        "timeline.toml:budgets[0].max: a ratio limit is a fraction in [0, 1], got 25; write 0.25 for 25%",
        id="ratio-as-percent",
    ),
    pytest.param(
        '[[budgets]]\nmetric = "step_ns"\nmax = 1\nmin = 2\n',
        "timeline.toml:budgets[0]: min = 2 is above max = 1",
        id="min-above-max",
    ),
    pytest.param(
        '[[budgets]]\nmetric = "step_ns"\nmax = 1\n[[budgets]]\nmetric = "step_ns"\nmax = '
        '1\naggregate = "median"\n',
        "timeline.toml:budgets[1].aggregate: unknown aggregate 'median'; did you mean 'p50'? use "
        "one of max, min, "
        "mean, p50, p90, p99 or any pNN",
        id="bad-aggregate",
    ),
    pytest.param(
        '[[budgets]]\nmetric = "step_ns"\nmax = 1\naggregate = "pp90"\n',
        "timeline.toml:budgets[0].aggregate: unknown aggregate 'pp90'; did you mean 'p90'? use one "
        "of max, min, "
        "mean, p50, p90, p99 or any pNN",
        id="aggregate-typo",
    ),
    pytest.param(
        '[[budgets]]\nmetric = "step_ns"\nmax = 1\naggregate = 90\n',
        "timeline.toml:budgets[0].aggregate: must be a string such as 'p90', got 90",
        id="aggregate-type",
    ),
    pytest.param(
        '[[budgets]]\nmetric = "step_ns"\nmax = 1\nover = "ranks"\n',
        "timeline.toml:budgets[0].over: must be 'all' (ranks pooled) or 'rank' (each rank), got 'ranks'; "
        "did you mean 'rank'?",
        id="bad-over",
    ),
    pytest.param(
        '[[budgets]]\nmetric = "step_ns"\nmax = 1\nagregate = "p90"\n',
        "timeline.toml:budgets[0].agregate: unknown key; did you mean 'aggregate'?",
        id="unknown-key",
    ),
    pytest.param(
        '[[budgets]]\nmetric = "step_ns"\nmax = 1\ncolour = "red"\n',
        "timeline.toml:budgets[0].colour: unknown key; the keys are name, metric, aggregate, over, max, min, "
        "skip_iterations, ranks, collective, pg_name, dimension, pg_desc, link_gbps",
        id="unknown-key-no-match",
    ),
    pytest.param(
        '[[budgets]]\nmetric = "step_ns"\nmax = 1\nskip_iterations = -1\n',
        "timeline.toml:budgets[0].skip_iterations: must be a whole number ≥ 0 (iterations per rank), got -1",
        id="skip-negative",
    ),
    pytest.param(
        '[[budgets]]\nmetric = "step_ns"\nmax = 1\nskip_iterations = 1.5\n',
        "timeline.toml:budgets[0].skip_iterations: must be a whole number ≥ 0 (iterations per rank), got 1.5",
        id="skip-float",
    ),
    pytest.param(
        '[[budgets]]\nmetric = "step_ns"\nmax = 1\nranks = ["0"]\n',
        "timeline.toml:budgets[0].ranks: must be a rank or a non-empty array of ranks like [0, 1], got ['0']",
        id="ranks-type",
    ),
    pytest.param(
        '[[budgets]]\nmetric = "step_ns"\nmax = 1\nranks = []\n',
        "timeline.toml:budgets[0].ranks: must be a rank or a non-empty array of ranks like [0, 1], got []",
        id="ranks-empty",
    ),
    pytest.param(
        '[[budgets]]\nmetric = "step_ns"\nmax = 1\ncollective = "all_reduce"\n',
        "timeline.toml:budgets[0].collective: applies to collective metrics (collective_dur_ns, "
        "collective_exposed_ns, collective_exposed_ratio, collective_iteration_dur_ns, "
        "collective_iteration_exposed_ns, collective_start_skew_ns, collective_end_skew_ns, "
        "collective_algbw_gbps, collective_busbw_gbps, collective_link_utilisation_ratio, "
        "collective_wait_ns, collective_iteration_wait_ns), not to step_ns",
        id="collective-on-iteration-metric",
    ),
    pytest.param(
        '[[budgets]]\nmetric = "collective_exposed_ns"\nmax = 1\npg_name = 3\n',
        "timeline.toml:budgets[0].pg_name: must be a name or a non-empty array of names, got 3",
        id="pg-name-type",
    ),
    pytest.param(
        '[[budgets]]\nmetric = "step_ns"\nmax = 1\nname = 3\n',
        "timeline.toml:budgets[0].name: must be a string, got 3",
        id="name-type",
    ),
    pytest.param(
        'budgets = { metric = "step_ns" }\n',
        "timeline.toml:budgets: must be an array of tables ([[budgets]] entries), got a table",
        id="budgets-not-array",
    ),
    pytest.param(
        "budgets = [1]\n",
        "timeline.toml:budgets[0]: must be a table, got 1",
        id="entry-not-table",
    ),
    pytest.param(
        '[[budget]]\nmetric = "step_ns"\nmax = 1\n',
        "timeline.toml:budget: unknown key; did you mean 'budgets'?",
        id="top-level-typo",
    ),
    pytest.param(
        "regression = 3\n",
        "timeline.toml:regression: must be a table ([regression]), got 3",
        id="regression-not-table",
    ),
    pytest.param(
        "[regression]\nstep_ns = 0.1\n",
        "timeline.toml:regression.step_ns: must be a table such as { relative = 0.10 }, got 0.1",
        id="regression-entry-not-table",
    ),
    pytest.param(
        "[regression]\nstep_ns = {}\n",
        "timeline.toml:regression.step_ns: tolerance is missing; set relative = 0.10 (10 % of the "
        "baseline) or "
        "absolute = ... (in ns)",
        id="regression-tolerance-missing",
    ),
    pytest.param(
        '[regression]\nstep_ns = { relative = "10%" }\n',
        "timeline.toml:regression.step_ns.relative: tolerance must be a number, got '10%'",
        id="regression-tolerance-type",
    ),
    pytest.param(
        "[regression]\nstep_ns = { absolute = -1 }\n",
        "timeline.toml:regression.step_ns.absolute: a tolerance cannot be negative, got -1",
        id="regression-tolerance-negative",
    ),
    pytest.param(
        "[regression]\nidle_ration = { relative = 0.1 }\n",
        "timeline.toml:regression.idle_ration: unknown metric 'idle_ration'; did you mean 'idle_ratio'?",
        id="regression-unknown-metric",
    ),
    pytest.param(
        "[regression]\nstep_ns = { relativ = 0.1 }\n",
        "timeline.toml:regression.step_ns.relativ: unknown key; did you mean 'relative'?",
        id="regression-unknown-key",
    ),
    pytest.param(
        "",
        "timeline.toml: no budgets; add a [[budgets]] entry or a [regression] table (see docs/ci.md)",
        id="empty",
    ),
    pytest.param(
        '[[budgets]]\nmetric = "step_ns"\nmax = \n',
        "timeline.toml:3:7: not valid TOML: invalid value",
        id="not-toml",
    ),
    pytest.param(
        '[[budgets]]\nmetric = "step_ns"\nmax = [1,',
        "timeline.toml:3: not valid TOML: invalid value (at the end of the file)",
        id="not-toml-truncated",
    ),
    pytest.param(
        '[[budgets]]\nmetric = "step_ns"\nmax = 1\nmax = 2\n',
        "timeline.toml:4:8: not valid TOML: cannot overwrite a value",
        id="duplicate-key",
    ),
]


@pytest.mark.parametrize(("text", "message"), ERRORS)
def test_budget_file_errors(in_tmp: Path, text: str, message: str) -> None:
    with pytest.raises(BudgetError) as info:
        read(text)
    assert str(info.value) == message
    assert "\n" not in str(info.value)


def test_file_errors(in_tmp: Path) -> None:
    with pytest.raises(BudgetError, match=r"^nope\.toml: no such budget file$"):
        read_budget_file("nope.toml")
    (in_tmp / "dir.toml").mkdir()
    with pytest.raises(
        BudgetError, match=r"^dir\.toml: is a directory, not a regular file; pass the budget file itself$"
    ):
        read_budget_file("dir.toml")
    Path("latin1.toml").write_bytes(b'[[budgets]]\nname = "caf\xe9"\n')
    with pytest.raises(
        BudgetError, match=r"^latin1\.toml:2:12: not UTF-8 text; save the budget file as UTF-8$"
    ):
        read_budget_file("latin1.toml")
    Path("pyproject.toml").write_text('[project]\nname = "x"\n')
    with pytest.raises(BudgetError) as info:
        read_budget_file("pyproject.toml")
    assert str(info.value) == (
        "pyproject.toml: no [tool.timeline] table; add [[tool.timeline.budgets]] entries (see docs/ci.md)"
    )
