"""Starter budgets: a commented ``timeline.toml`` derived from a run (``timeline init``).

Takes the :class:`~timeline.budgets.frames.MetricFrames` of a run and gives a :class:`Starter`: for
each metric of :data:`STARTER_METRICS`, a limit at the run's worst iteration plus a margin from the
spread of its iterations, which :func:`render_starter` writes as a budget file that
:func:`~timeline.budgets.budget_file.read_budget_file` reads and that the run itself passes.

The rule (``docs/ci.md``, "Starter budgets"), with the samples of a metric being its per-iteration
values (every rank's iterations pooled, each rank's first iteration left out as warm-up when every
rank has at least :data:`SKIP_FROM` iterations):

- ``worst`` is the largest sample (the smallest for a higher-is-better metric);
- ``IQR`` is ``p75 − p25`` of the samples (percentiles interpolated linearly, as budgets compute them);
- ``floor`` is :data:`MARGIN_FLOOR` for a ratio, and :data:`MARGIN_FLOOR` × the median of the
  ``step_ns`` samples for a time;
- ``margin = max(MARGIN_K × IQR, floor)``; the limit is ``worst + margin`` (``worst − margin`` for a
  higher-is-better metric), rounded to whole nanoseconds for a time and to :data:`RATIO_DECIMALS`
  decimal places for a ratio, never to a value inside the worst one (the run always passes).

A ratio limit that reaches 1 (an upper limit) or 0 (a lower limit) holds every run: it is left out
of the file, and a comment says why. :func:`write_starter` writes the file beside its place and
renames it there, and replaces only a file that ``timeline init`` (or, before it, ``timeline check
--init``) wrote.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, ROUND_HALF_EVEN, Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Literal, cast

from timeline.budgets.budget_file import Scope
from timeline.budgets.metrics import Metric, get_metric
from timeline.errors import TraceContentError, UsageError, shown
from timeline.outputs import write_output
from timeline.units import format_value

if TYPE_CHECKING:
    from timeline.budgets.frames import MetricFrames

__all__ = [
    "EARLIER_MARKERS",
    "MARGIN_FLOOR",
    "MARGIN_K",
    "MARKER",
    "RATIO_DECIMALS",
    "SKIP_FROM",
    "STARTER_METRICS",
    "Starter",
    "StarterBudget",
    "check_starter_target",
    "render_starter",
    "starter_budgets",
    "write_starter",
]

MARGIN_K = 1.5
"""The margin is at least this many interquartile ranges of the samples (Tukey's fence distance)."""
MARGIN_FLOOR = 0.02
"""The smallest margin: 0.02 for a ratio, 2 % of the median step for a time (a run whose iterations
do not vary still gets room for the run-to-run noise of another machine)."""
RATIO_DECIMALS = 4
"""Ratio limits are rounded to this many decimal places (0.01 percentage points)."""
SKIP_FROM = 3
"""Each rank's first iteration is left out (``skip_iterations = 1``) when every rank has at least
this many: at least two remain for the spread."""
MARKER = "# Starter budgets written by timeline init"
"""The first line of every starter file: ``--force`` replaces only a file that begins with it."""
EARLIER_MARKERS = ("# Starter budgets written by timeline check --init",)
"""The first lines of the starter files earlier versions wrote (``timeline check --init``): replaced too."""

Bound = Literal["max", "min"]


@dataclass(frozen=True)
class _Choice:
    metric: str
    name: str
    why: str


STARTER_METRICS: tuple[_Choice, ...] = (
    _Choice(
        "exposed_comm_ns",
        "exposed communication per iteration",
        "Exposed communication per iteration: communication while no compute ran, so the step waited "
        "for it. It grows when a collective gets slower or stops overlapping.",
    ),
    _Choice(
        "exposed_comm_ratio",
        "exposed communication share of the step",
        "The exposed communication as a share of the step: the same regression seen independently of "
        "the step's length (a faster model makes the same exposed time a larger share).",
    ),
    _Choice(
        "hidden_comm_ratio",
        "communication hidden under compute",
        "The share of communication that ran under compute (HTA's overlap %): it falls when overlap "
        "breaks (a bucket size change, a synchronisation, a stream change), before the step shows it.",
    ),
    _Choice(
        "step_ns",
        "step time",
        "The step time: catches a slowdown from anywhere, compute included, that the communication "
        "budgets above do not explain.",
    ),
)
"""The metrics a starter file bounds, in file order, with the budget's name and why it matters."""


@dataclass(frozen=True)
class StarterBudget:
    """One starter budget: the limit derived from a run, and the figures it was derived from.

    Attributes
    ----------
    metric
        The registered metric.
    name
        The budget's name in the file.
    why
        What the metric catches (the file's comment).
    bound
        ``max`` for a lower-is-better metric, ``min`` for a higher-is-better one.
    samples
        How many per-iteration values the limit was derived from (0: none; then it is left out).
    worst
        The largest value (the smallest for ``min``); ``None`` without samples.
    iqr
        ``p75 − p25`` of the values.
    floor
        The smallest margin, in the metric's unit.
    margin
        ``max(MARGIN_K × iqr, floor)``.
    limit
        ``worst ± margin``, rounded; ``None`` when left out.
    left_out
        Why the budget is not in the file, or ``None``.
    """

    metric: Metric
    name: str
    why: str
    bound: Bound
    samples: int
    worst: float | None
    iqr: float
    floor: float
    margin: float
    limit: float | None
    left_out: str | None


@dataclass(frozen=True)
class Starter:
    """The starter budgets of a run.

    Attributes
    ----------
    label
        The run, as the file's header names it.
    ranks
        How many ranks the run has iteration rows of.
    iterations
        How many rank-iterations it has.
    skip_iterations
        The warm-up iterations left out of every rank (0 or 1).
    median_step_ns
        The median of the ``step_ns`` samples (the floor of a time is :data:`MARGIN_FLOOR` of it).
    budgets
        One per :data:`STARTER_METRICS` entry, in order (those left out included).
    """

    label: str
    ranks: int
    iterations: int
    skip_iterations: int
    median_step_ns: float | None
    budgets: tuple[StarterBudget, ...]

    @property
    def written(self) -> tuple[StarterBudget, ...]:
        """The budgets that go into the file."""
        return tuple(b for b in self.budgets if b.left_out is None)


def starter_budgets(frames: MetricFrames) -> Starter:
    """Derive starter budgets from a run.

    Parameters
    ----------
    frames
        The run (:func:`~timeline.budgets.runs.read_run`): its per-iteration rows are read.

    Returns
    -------
    Starter

    Raises
    ------
    TraceContentError
        The run has no per-iteration value of any starter metric.
    """
    iterations = frames.iterations
    per_rank = iterations.group_by("rank").len()
    fewest = per_rank.get_column("len").min()
    skip = 1 if isinstance(fewest, int) and fewest >= SKIP_FROM else 0
    scope = Scope(skip_iterations=skip)
    from timeline.budgets.evaluation import select_samples

    steps, _ = select_samples(frames, get_metric("step_ns", where="starter"), scope, where="starter")
    median = steps.get_column("value").median() if steps.height else None
    median_step = float(median) if isinstance(median, int | float) else None
    budgets = tuple(_starter_budget(frames, choice, scope, median_step) for choice in STARTER_METRICS)
    if not any(b.left_out is None for b in budgets):
        reasons = "; ".join(f"{b.metric.name}: {b.left_out}" for b in budgets)
        raise TraceContentError(
            f"{shown(frames.label)}: no budget can be derived from this run ({reasons}); pass traces "
            "with compute and communication of a few profiled steps"
        )
    return Starter(
        label=frames.label,
        ranks=per_rank.height,
        iterations=iterations.height,
        skip_iterations=skip,
        median_step_ns=median_step,
        budgets=budgets,
    )


def _starter_budget(
    frames: MetricFrames, choice: _Choice, scope: Scope, median_step: float | None
) -> StarterBudget:
    metric = get_metric(choice.metric, where="starter")
    bound: Bound = "max" if metric.better == "lower" else "min"
    from timeline.budgets.evaluation import select_samples

    samples, reason = select_samples(frames, metric, scope, where="starter")
    values = samples.get_column("value")
    if metric.unit == "ratio":
        floor = MARGIN_FLOOR
    else:
        floor = MARGIN_FLOOR * median_step if median_step is not None else 0.0
    empty = StarterBudget(metric, choice.name, choice.why, bound, 0, None, 0.0, floor, floor, None, reason)
    if values.len() == 0:
        return empty
    worst = cast(float, values.max() if bound == "max" else values.min())
    q1, q3 = (cast(float, values.quantile(q, interpolation="linear")) for q in (0.25, 0.75))
    iqr = q3 - q1
    margin = max(MARGIN_K * iqr, floor)
    limit = _rounded(worst + margin if bound == "max" else worst - margin, worst, metric.unit, bound)
    left_out = None
    if metric.unit == "ratio" and ((bound == "max" and limit >= 1) or (bound == "min" and limit <= 0)):
        left_out = (
            f"worst {format_value(worst, 'ratio')} with its margin gives a limit of "
            f"{'100%' if bound == 'max' else '0%'} or beyond, which every run holds"
        )
    elif metric.unit != "ratio" and bound == "min" and limit <= 0:
        left_out = "the lower limit would be 0 or below, which every run holds"
    return StarterBudget(
        metric, choice.name, choice.why, bound, values.len(), worst, iqr, floor, margin, limit, left_out
    )


def _rounded(value: float, worst: float, unit: str, bound: Bound) -> float:
    """Round a limit to the nearest whole ns or :data:`RATIO_DECIMALS` places, never inside ``worst``.

    Decimal holds the floats exactly (a sum such as ``0.99 + 0.02`` is rounded as the float it is);
    ``worst`` rounded outwards bounds the result, so the run itself always passes, and a float read
    back from the decimal text keeps that order (rounding to the nearest float is monotone).
    """
    places = Decimal(1).scaleb(-RATIO_DECIMALS) if unit == "ratio" else Decimal(1)
    nearest = Decimal(value).quantize(places, rounding=ROUND_HALF_EVEN)
    if bound == "max":
        return float(max(nearest, Decimal(worst).quantize(places, rounding=ROUND_CEILING)))
    return float(min(nearest, Decimal(worst).quantize(places, rounding=ROUND_FLOOR)))


def _limit_text(value: float, unit: str) -> str:
    if unit == "ratio":
        return format(Decimal(repr(value)).quantize(Decimal(1).scaleb(-RATIO_DECIMALS)), "f")
    return f"{int(value):_}"


def render_starter(starter: Starter, *, version: str) -> str:
    """Return the text of the starter budget file (TOML, commented).

    Parameters
    ----------
    starter
        :func:`starter_budgets`.
    version
        The timeline version, for the header.
    """
    counted = f"#   {starter.ranks} rank(s), {starter.iterations} rank-iteration(s)"
    skipped = (
        [f"{counted}; each rank's first iteration is left out as warm-up", "#   (skip_iterations = 1)."]
        if starter.skip_iterations
        else [f"{counted}."]
    )
    lines = [
        f"{MARKER} (timeline {version}): edit freely.",
        f"# Run: {_comment(starter.label)}",
        *skipped,
        "#",
        "# Each limit is the run's worst iteration plus a margin from the spread of its iterations",
        '# (docs/ci.md, "Starter budgets"):',
        f"#   limit = worst + max({MARGIN_K:g} × IQR, floor), rounded to whole ns or 4 decimals",
        "# IQR = p75 − p25 of the per-iteration values of every rank pooled; floor = "
        f"{MARGIN_FLOOR:g} for a ratio,",
        f"# {100 * MARGIN_FLOOR:g} % of the median step for a time. A higher-is-better metric gets a lower "
        "limit, worst − margin.",
        "# This run passes every budget; tighten them as the job improves. timeline init --force",
        "# rewrites this file (only a file whose first line is the one above).",
    ]
    for budget in starter.budgets:
        lines += ["", *_budget_lines(budget, starter)]
    lines += [
        "",
        "# Compare with a baseline run too (timeline check PATH --baseline OLD; see docs/ci.md):",
        "# [regression]",
        "# exposed_comm_ratio = { relative = 0.10 }",
    ]
    return "\n".join(lines) + "\n"


def _budget_lines(budget: StarterBudget, starter: Starter) -> list[str]:
    unit = budget.metric.unit
    lines = [f"# {line}" for line in _wrapped(budget.why, 98)]
    left_out = [f"# {line}" for line in _wrapped(f"{budget.metric.name}: left out: {budget.left_out}.", 98)]
    if budget.worst is None or budget.limit is None:
        return [*lines, *left_out]
    worst_word = "worst (largest)" if budget.bound == "max" else "worst (smallest)"
    floor_text = (
        f"{MARGIN_FLOOR:g}"
        if unit == "ratio"
        else f"{100 * MARGIN_FLOOR:g} % of the median step {format_value(starter.median_step_ns, 'ns')}"
    )
    lines += [
        f"# This run: {worst_word} {format_value(budget.worst, unit)} of {budget.samples} sample(s), "
        f"IQR {format_value(budget.iqr, unit)};",
        f"# margin = max({MARGIN_K:g} × IQR, {floor_text}) = {format_value(budget.margin, unit)}.",
    ]
    if budget.left_out is not None:
        return [*lines, *left_out]
    lines += [
        "[[budgets]]",
        f'name = "{budget.name}"',
        f'metric = "{budget.metric.name}"',
        f'aggregate = "{budget.bound}"    # every rank-iteration is held to the limit',
        'over = "all"',
        f"{budget.bound} = {_limit_text(budget.limit, unit)}    # {_unit_comment(budget.limit, unit)}",
    ]
    if starter.skip_iterations:
        lines.append(f"skip_iterations = {starter.skip_iterations}")
    return lines


def _unit_comment(limit: float, unit: str) -> str:
    if unit == "ratio":
        return f"a fraction: {format_value(limit, unit)}"
    return f"{unit} ({format_value(limit, unit)})"


def _comment(text: str) -> str:
    """Return a value for a comment: on one line, every character that does not print escaped."""
    return " ".join(shown(part) for part in text.split(" "))


def _wrapped(text: str, width: int) -> list[str]:
    lines: list[str] = []
    for word in text.split():
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines


def check_starter_target(path: str | Path, *, force: bool) -> None:
    """Refuse a place for a starter file that exists, unless ``force`` and ``timeline init`` wrote it.

    A missing file is fine (its directory must exist). Anything else is refused even with ``force``:
    a file that does not begin with :data:`MARKER` (or one of :data:`EARLIER_MARKERS`), a directory,
    a FIFO, a device, a symbolic link (whatever it points to). Nothing is opened but a regular file,
    and never through a link.

    Raises
    ------
    UsageError
        What is in the way and the fix.
    """
    target = Path(path)
    if target.name == "pyproject.toml":
        msg = (
            f"{shown(path)}: timeline init writes a budget file of its own, not [tool.timeline] of "
            "pyproject.toml; pass -o timeline.toml and copy its entries under [tool.timeline] if you want "
            "them there"
        )
        raise UsageError(msg)
    try:
        mode = target.lstat().st_mode
    except FileNotFoundError:
        parent = target.parent
        if not parent.is_dir():
            msg = f"{shown(parent)}: no such directory; create it or choose another file with -o FILE"
            raise UsageError(msg) from None
        return
    except OSError as exc:
        raise UsageError(f"{shown(path)}: cannot be examined ({exc.strerror or exc})") from None
    what = _not_starter(target, mode)
    if what is not None:
        msg = (
            f"{shown(path)}: exists and is {what}; --force replaces only a starter budget file written by "
            "timeline init; choose another file with -o FILE"
        )
        raise UsageError(msg)
    if not force:
        raise UsageError(f"{shown(path)}: exists; pass --force to overwrite it")


def _not_starter(target: Path, mode: int) -> str | None:
    """Say what ``target`` is when ``timeline init`` did not write it; else None."""
    kinds: Sequence[tuple[bool, str]] = (
        (stat.S_ISLNK(mode), "a symbolic link"),
        (stat.S_ISDIR(mode), "a directory"),
        (stat.S_ISFIFO(mode), "a FIFO"),
        (stat.S_ISCHR(mode) or stat.S_ISBLK(mode), "a device"),
        (stat.S_ISSOCK(mode), "a socket"),
        (not stat.S_ISREG(mode), "not a regular file"),
    )
    for matches, what in kinds:
        if matches:
            return what
    try:
        fd = os.open(target, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return "a file that cannot be read"
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return "not a regular file"
        head = handle.read(max(len(m.encode()) for m in (MARKER, *EARLIER_MARKERS)))
    known = any(head.startswith(m.encode()) for m in (MARKER, *EARLIER_MARKERS))
    return None if known else "a file that timeline init did not write"


def write_starter(path: str | Path, text: str, *, force: bool) -> None:
    """Write a starter budget file atomically: beside ``path`` under a new name, then renamed onto it.

    Parameters
    ----------
    path
        The budget file to write.
    text
        :func:`render_starter`.
    force
        Replace a starter file written earlier (never anything else: :func:`check_starter_target`).

    Raises
    ------
    UsageError
        An existing file without ``force``, one that ``timeline init`` did not write, or a
        directory that cannot be written.
    """
    target = Path(path)
    check_starter_target(target, force=force)
    # again once written, before the rename: it may have changed meanwhile
    write_output(target, text, check=lambda: check_starter_target(target, force=force))
