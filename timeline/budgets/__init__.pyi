"""`timeline.budgets`'s public names, each from its module (read by :func:`timeline.lazy.attach_stub`)."""

from timeline.budgets.budget_file import (
    AGGREGATES as AGGREGATES,
)
from timeline.budgets.budget_file import (
    Budget as Budget,
)
from timeline.budgets.budget_file import (
    BudgetFile as BudgetFile,
)
from timeline.budgets.budget_file import (
    Over as Over,
)
from timeline.budgets.budget_file import (
    Regression as Regression,
)
from timeline.budgets.budget_file import (
    Scope as Scope,
)
from timeline.budgets.budget_file import (
    check_links as check_links,
)
from timeline.budgets.budget_file import (
    find_budget_file as find_budget_file,
)
from timeline.budgets.budget_file import (
    parse_budgets as parse_budgets,
)
from timeline.budgets.budget_file import (
    read_budget_file as read_budget_file,
)
from timeline.budgets.evaluation import (
    NOISE_K as NOISE_K,
)
from timeline.budgets.evaluation import (
    CheckReport as CheckReport,
)
from timeline.budgets.evaluation import (
    Status as Status,
)
from timeline.budgets.evaluation import (
    Verdict as Verdict,
)
from timeline.budgets.evaluation import (
    Worst as Worst,
)
from timeline.budgets.evaluation import (
    compare_jobs as compare_jobs,
)
from timeline.budgets.evaluation import (
    evaluate_budgets as evaluate_budgets,
)
from timeline.budgets.evaluation import (
    select_samples as select_samples,
)
from timeline.budgets.evaluation import (
    statistic_of as statistic_of,
)
from timeline.budgets.frames import (
    JobFacts as JobFacts,
)
from timeline.budgets.frames import (
    MetricFrames as MetricFrames,
)
from timeline.budgets.frames import (
    frames_from_summary as frames_from_summary,
)
from timeline.budgets.frames import (
    frames_of_run as frames_of_run,
)
from timeline.budgets.frames import (
    job_facts as job_facts,
)
from timeline.budgets.frames import (
    read_summary as read_summary,
)
from timeline.budgets.metrics import (
    MATCHED_SOURCES as MATCHED_SOURCES,
)
from timeline.budgets.metrics import (
    Better as Better,
)
from timeline.budgets.metrics import (
    Metric as Metric,
)
from timeline.budgets.metrics import (
    MetricSource as MetricSource,
)
from timeline.budgets.metrics import (
    get_metric as get_metric,
)
from timeline.budgets.metrics import (
    register_metric as register_metric,
)
from timeline.budgets.metrics import (
    registered_metrics as registered_metrics,
)
from timeline.budgets.runs import is_summary_file as is_summary_file
from timeline.budgets.runs import read_run as read_run
from timeline.units import format_value as format_value

__all__: list[str]
