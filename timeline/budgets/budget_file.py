"""Budget files: ``timeline.toml``, or ``[tool.timeline]`` in ``pyproject.toml``, read and checked.

Takes TOML text and gives a :class:`BudgetFile` of :class:`Budget` limits and :class:`Regression`
tolerances, each resolved against the metric registry, and the bandwidth of the link the utilisation
metrics compare with (``link_gbps``). Every mistake is a :class:`BudgetError` whose
message starts with the file and the key (``timeline.toml:budgets[2].metric: unknown metric
'exposed_comm_ration'; did you mean 'exposed_comm_ratio'?``). The layout is documented in
``docs/ci.md``.
"""

from __future__ import annotations

import difflib
import math
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from timeline.analysis.links import parse_link_gbps
from timeline.budgets.metrics import Metric, get_metric, registered_metrics
from timeline.errors import BudgetError, UsageError, position_of, shown
from timeline.paths import read_regular_file
from timeline.results.verdicts import Over

__all__ = [
    "AGGREGATES",
    "MAX_BUDGET_BYTES",
    "MAX_KEY_PARTS",
    "Budget",
    "BudgetFile",
    "Over",
    "Regression",
    "Scope",
    "check_links",
    "find_budget_file",
    "parse_budgets",
    "read_budget_file",
]

MAX_BUDGET_BYTES = 4 << 20
"""The largest budget file read, 4 MiB (a budget file holds a few kilobytes; a ``pyproject.toml`` tens)."""
MAX_KEY_PARTS = 32
"""The most dotted parts of a key or table name (``tool.timeline.budgets`` has three). Python's TOML
reader takes time quadratic in them: a key 100,000 parts deep took 18 s to be refused."""
# a key or table header of more than MAX_KEY_PARTS parts, bare or quoted, at the start of a line
_KEY_PART = r"""(?:[A-Za-z0-9_-]+|"(?:[^"\\\n]|\\.)*"|'[^'\n]*')"""
_DEEP_KEY = re.compile(
    rf"^[ \t]*\[{{0,2}}[ \t]*(?:{_KEY_PART}[ \t]*\.[ \t]*){{{MAX_KEY_PARTS}}}", re.MULTILINE
)

AGGREGATES: tuple[str, ...] = ("max", "min", "mean", "p50", "p90", "p99")
"""The named aggregates; any percentile ``pNN`` (``p95``, ``p99.9``) is accepted too."""

_AGGREGATE_SYNONYMS = {"median": "p50", "average": "mean", "avg": "mean", "maximum": "max", "minimum": "min"}
_PERCENTILE = re.compile(r"p(100|\d{1,2}(\.\d+)?)")
_OVERS: tuple[str, ...] = ("all", "rank")
_SCOPE_KEYS = ("skip_iterations", "ranks", "collective", "pg_name", "dimension", "pg_desc")
_BUDGET_KEYS = ("name", "metric", "aggregate", "over", "max", "min", *_SCOPE_KEYS, "link_gbps")
_REGRESSION_KEYS = ("name", "relative", "absolute", "aggregate", "over", *_SCOPE_KEYS, "link_gbps")
_TOP_KEYS = ("budgets", "regression", "link_gbps")
_TOML_POSITION = re.compile(
    r"^(?P<what>.*?) \((?:at line (?P<line>\d+), column (?P<col>\d+)|at end of document)\)$"
)


@dataclass(frozen=True)
class Scope:
    """Which samples a budget looks at.

    Attributes
    ----------
    ranks
        Only these ranks; ``None``: every rank.
    collectives
        Only communication events of these collectives (``all_reduce``); collective metrics only.
    pg_names
        Only communication events of these process groups; collective metrics only.
    dimensions
        Only the communication of these mesh dimensions (``tp``, ``dp``; ``ambiguous``,
        ``undescribed``): collective metrics, and the communication metrics of an iteration
        (:data:`~timeline.budgets.metrics.DIMENSION_METRICS`), which then read the exposure per
        dimension (``docs/metrics.md``).
    pg_descs
        Only the communication of the process groups with these descriptions (``mesh_tp``); as
        ``dimensions``.
    skip_iterations
        Leave out the first N iterations of every rank (warm-up).
    """

    ranks: tuple[int, ...] | None = None
    collectives: tuple[str, ...] | None = None
    pg_names: tuple[str, ...] | None = None
    skip_iterations: int = 0
    dimensions: tuple[str, ...] | None = None
    pg_descs: tuple[str, ...] | None = None

    @property
    def by_dimension(self) -> bool:
        """Whether the scope names dimensions or group descriptions."""
        return self.dimensions is not None or self.pg_descs is not None

    def describe(self) -> str:
        """Return the scope in a few words (``ranks 0,1; all_reduce; skip 1``), or ``""``."""
        parts = []
        if self.ranks is not None:
            parts.append("rank" + ("s " if len(self.ranks) > 1 else " ") + ",".join(map(str, self.ranks)))
        if self.collectives is not None:
            parts.append(",".join(self.collectives))
        if self.pg_names is not None:
            parts.append("group " + ",".join(self.pg_names))
        if self.dimensions is not None:
            parts.append("dimension " + ",".join(self.dimensions))
        if self.pg_descs is not None:
            parts.append("pg_desc " + ",".join(self.pg_descs))
        if self.skip_iterations:
            parts.append(f"skip {self.skip_iterations}")
        return "; ".join(parts)


@dataclass(frozen=True)
class Budget:
    """A limit on one aggregate of one metric.

    Attributes
    ----------
    name
        What CI shows (a test case name in JUnit).
    metric
        The registered metric.
    aggregate
        ``max``, ``min``, ``mean`` or a percentile ``pNN``.
    over
        ``all`` (samples of every rank pooled) or ``rank`` (per rank; the worst rank decides).
    upper
        The ``max =`` limit: the aggregate must be at most this, in the metric's unit.
    lower
        The ``min =`` limit: the aggregate must be at least this.
    scope
        Which samples count.
    where
        Where the budget was read: ``timeline.toml:budgets[0]``.
    line
        The line of its ``[[budgets]]`` header, when known (for CI annotations).
    link_gbps
        The link's bandwidth in Gbit/s given in the entry, for a metric that needs one; it wins over
        ``--link-gbps`` and the file's ``link_gbps``.
    """

    name: str
    metric: Metric
    aggregate: str
    over: Over
    upper: float | None
    lower: float | None
    scope: Scope
    where: str
    line: int | None = None
    link_gbps: float | None = None


@dataclass(frozen=True)
class Regression:
    """A tolerance on how much one aggregate of one metric may get worse than in the baseline.

    Attributes
    ----------
    name
        What CI shows.
    metric
        The registered metric; its ``better`` direction says what "worse" is.
    aggregate
        ``mean`` unless the file says otherwise.
    over
        ``all`` or ``rank`` (ranks compared with the same rank of the baseline).
    relative
        Allowed worsening as a fraction of the baseline value (``0.10``: 10 %).
    absolute
        Allowed worsening in the metric's unit.
    scope
        Which samples count, in both runs.
    where
        ``timeline.toml:regression.exposed_comm_ratio``.
    line
        The line of the entry, when known.
    link_gbps
        The link's bandwidth in Gbit/s given in the entry (used for both runs).
    """

    name: str
    metric: Metric
    aggregate: str
    over: Over
    relative: float | None
    absolute: float | None
    scope: Scope
    where: str
    line: int | None = None
    link_gbps: float | None = None

    def allowed(self, baseline: float) -> float:
        """Return the allowed worsening from ``baseline``: the larger of the two tolerances given."""
        limits = []
        if self.relative is not None:
            limits.append(self.relative * abs(baseline))
        if self.absolute is not None:
            limits.append(self.absolute)
        return max(limits)


@dataclass(frozen=True)
class BudgetFile:
    """A parsed budget file.

    Attributes
    ----------
    path
        The file, as given.
    budgets
        The ``[[budgets]]`` entries, in file order.
    regressions
        The ``[regression]`` entries, in file order.
    link_gbps
        The top-level ``link_gbps``: the link's bandwidth in Gbit/s for every entry that gives none
        (``--link-gbps`` wins over it).
    """

    path: str
    budgets: tuple[Budget, ...]
    regressions: tuple[Regression, ...]
    link_gbps: float | None = None

    def needs_matching(self, *, regressions_only: bool = False) -> bool:
        """Return whether a check reads the collectives matched across ranks.

        Parameters
        ----------
        regressions_only
            Look at the ``[regression]`` entries only (what a baseline run must provide).
        """
        checks: tuple[Budget | Regression, ...] = self.regressions
        if not regressions_only:
            checks = (*self.budgets, *checks)
        return any(check.metric.matched for check in checks)

    def needs_findings(self, *, regressions_only: bool = False) -> bool:
        """Return whether a check reads the diagnosis' findings (``regressions_only``: as above)."""
        checks: tuple[Budget | Regression, ...] = self.regressions
        if not regressions_only:
            checks = (*self.budgets, *checks)
        return any(check.metric.finding for check in checks)

    def needs_dimensions(self, *, regressions_only: bool = False) -> bool:
        """Return whether a check is scoped to dimensions or descriptions (``regressions_only``: as above)."""
        checks: tuple[Budget | Regression, ...] = self.regressions
        if not regressions_only:
            checks = (*self.budgets, *checks)
        return any(check.scope.by_dimension for check in checks)

    def needs_link(self) -> bool:
        """Return whether a check reads the link's bandwidth (a link utilisation metric)."""
        checks: tuple[Budget | Regression, ...] = (*self.budgets, *self.regressions)
        return any(check.metric.needs_link for check in checks)


def find_budget_file(directory: str | Path = ".") -> Path:
    """Return a project's budget file: ``timeline.toml``, else ``pyproject.toml`` with ``[tool.timeline]``.

    Parameters
    ----------
    directory
        Where to look (the current directory by default).

    Raises
    ------
    BudgetError
        If neither holds budgets.
    """
    base = Path(directory)
    toml = base / "timeline.toml"
    if toml.is_file():
        return toml
    pyproject = base / "pyproject.toml"
    if pyproject.is_file():
        try:
            with pyproject.open("rb") as handle:  # a regular file: at most what read_budget_file reads
                text = handle.read(MAX_BUDGET_BYTES + 1).decode("utf-8", errors="replace")
        except OSError:
            text = ""
        # A textual test: a broken pyproject.toml that mentions timeline is reported by read_budget_file.
        if re.search(r"^\s*\[{1,2}\s*tool\s*\.\s*timeline\b", text, flags=re.MULTILINE):
            return pyproject
    raise BudgetError("no budgets: pass --budget FILE or add timeline.toml (see docs/ci.md)")


def read_budget_file(path: str | Path) -> BudgetFile:
    """Read and check a budget file.

    A file named ``pyproject.toml`` is read from its ``[tool.timeline]`` table; any other file from
    its top level.

    Parameters
    ----------
    path
        ``timeline.toml``, ``pyproject.toml`` or any TOML file with the same layout.

    Returns
    -------
    BudgetFile

    Raises
    ------
    BudgetError
        The file is missing, not TOML, or a budget in it is wrong; the message names the file and the key.
    """
    source = str(path)
    file = Path(path)
    try:
        data = read_regular_file(file, limit=MAX_BUDGET_BYTES, error=BudgetError, what="budget file")
    except UsageError as exc:  # a path the system cannot name
        raise BudgetError(str(exc)) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line, col = position_of(data, exc.start)
        raise BudgetError(f"{source}:{line}:{col}: not UTF-8 text; save the budget file as UTF-8") from None
    _check_key_depth(source, text)
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BudgetError(_toml_message(source, text, exc)) from None
    except RecursionError:
        # tomllib reads nested arrays and inline tables recursively: a few hundred levels exhaust
        # Python's stack (a budget file needs three).
        msg = (
            f"{shown(source)}: arrays or inline tables nested too deeply to read; a budget file needs "
            "no more than a few levels (see docs/ci.md)"
        )
        raise BudgetError(msg) from None
    prefix = ""
    if file.name == "pyproject.toml" or ("tool" in document and not any(k in document for k in _TOP_KEYS)):
        tool = document.get("tool")
        section = tool.get("timeline") if isinstance(tool, dict) else None
        if section is None:
            msg = (
                f"{source}: no [tool.timeline] table; add [[tool.timeline.budgets]] entries (see docs/ci.md)"
            )
            raise BudgetError(msg)
        if not isinstance(section, dict):
            raise BudgetError(f"{source}:tool.timeline: must be a table, got {_show(section)}")
        document, prefix = section, "tool.timeline."
    return parse_budgets(document, source=source, prefix=prefix, text=text)


def parse_budgets(
    document: Mapping[str, object], *, source: str = "<budgets>", prefix: str = "", text: str | None = None
) -> BudgetFile:
    """Check the content of a budget file (already decoded from TOML).

    Parameters
    ----------
    document
        The table holding ``budgets`` and ``regression``.
    source
        The file name, for messages.
    prefix
        The key path of ``document`` in the file (``tool.timeline.``), for messages.
    text
        The file's text, to find the line of each entry (for CI annotations).

    Raises
    ------
    BudgetError
        The first mistake found, as ``FILE:KEY: what; how to fix it``.
    """
    for key in document:
        if key not in _TOP_KEYS:
            close = difflib.get_close_matches(key, _TOP_KEYS, n=1, cutoff=0.75)
            if close:  # other keys may belong to other timeline settings
                raise BudgetError(f"{source}:{prefix}{key}: unknown key; did you mean {close[0]!r}?")
    link_gbps = _link(document.get("link_gbps"), f"{source}:{prefix}link_gbps")
    budgets = _budget_entries(document, source=source, prefix=prefix, text=text)
    regressions = _regression_entries(document, source=source, prefix=prefix, text=text)
    if not budgets and not regressions:
        msg = (
            f"{source}: no budgets; add a [[{prefix}budgets]] entry or a [{prefix}regression] table "
            "(see docs/ci.md)"
        )
        raise BudgetError(msg)
    return BudgetFile(path=source, budgets=budgets, regressions=regressions, link_gbps=link_gbps)


def _budget_entries(
    document: Mapping[str, object], *, source: str, prefix: str, text: str | None
) -> tuple[Budget, ...]:
    """Return the checked ``budgets`` array of a budget file, each entry with its line when known."""
    lines = _header_lines(text, prefix) if text is not None else []
    raw_budgets = document.get("budgets", [])
    if not isinstance(raw_budgets, list):
        msg = (
            f"{source}:{prefix}budgets: must be an array of tables ([[{prefix}budgets]] entries), "
            f"got {_show(raw_budgets)}"
        )
        raise BudgetError(msg)
    return tuple(
        _parse_budget(
            entry, where=f"{source}:{prefix}budgets[{i}]", line=lines[i] if i < len(lines) else None
        )
        for i, entry in enumerate(raw_budgets)
    )


def _regression_entries(
    document: Mapping[str, object], *, source: str, prefix: str, text: str | None
) -> tuple[Regression, ...]:
    """Return the checked ``regression`` table of a budget file, each entry with its line when known."""
    raw_regression = document.get("regression", {})
    if not isinstance(raw_regression, dict):
        got = _show(raw_regression)
        msg = f"{source}:{prefix}regression: must be a table ([{prefix}regression]), got {got}"
        raise BudgetError(msg)
    return tuple(
        _parse_regression(
            name,
            entry,
            where=f"{source}:{prefix}regression.{name}",
            line=_entry_line(text, prefix, name) if text is not None else None,
        )
        for name, entry in raw_regression.items()
    )


def _parse_budget(entry: object, *, where: str, line: int | None) -> Budget:
    table = _table(entry, where, _BUDGET_KEYS)
    metric = _metric(table, where)
    upper = _number(table, "max", where)
    lower = _number(table, "min", where)
    if upper is None and lower is None:
        msg = (
            f"{where}: limit is missing; set max = ... (an upper limit) or min = ... (a lower limit), "
            f"{_unit_words(metric)}"
        )
        raise BudgetError(msg)
    for key, value in (("max", upper), ("min", lower)):
        if value is not None and metric.unit == "ratio" and not 0 <= value <= 1:
            hint = f"; write {value / 100:g} for {value:g}%" if 1 < value <= 100 else ""
            raise BudgetError(f"{where}.{key}: a ratio limit is a fraction in [0, 1], got {value:g}{hint}")
    if upper is not None and lower is not None and lower > upper:
        raise BudgetError(f"{where}: min = {lower:g} is above max = {upper:g}")
    # Without an aggregate a budget holds every sample: the largest against max, the smallest against min.
    aggregate = _aggregate(table, where, default="min" if upper is None else "max")
    over = _over(table, where, metric)
    scope = _scope(table, where, metric)
    link_gbps = _entry_link(table, where, metric)
    name = _string(table, "name", where) or _default_name(metric, aggregate, over, scope)
    return Budget(name, metric, aggregate, over, upper, lower, scope, where, line, link_gbps=link_gbps)


def _parse_regression(metric_name: str, entry: object, *, where: str, line: int | None) -> Regression:
    metric = get_metric(metric_name, where=where)
    if not isinstance(entry, dict):
        msg = f"{where}: must be a table such as {{ relative = 0.10 }}, got {_show(entry)}"
        raise BudgetError(msg)
    table = _table(entry, where, _REGRESSION_KEYS)
    relative = _number(table, "relative", where, what="tolerance")
    absolute = _number(table, "absolute", where, what="tolerance")
    if relative is None and absolute is None:
        msg = (
            f"{where}: tolerance is missing; set relative = 0.10 (10 % of the baseline) "
            f"or absolute = ... ({_unit_words(metric)})"
        )
        raise BudgetError(msg)
    for key, value in (("relative", relative), ("absolute", absolute)):
        if value is not None and value < 0:
            raise BudgetError(f"{where}.{key}: a tolerance cannot be negative, got {value:g}")
    aggregate = _aggregate(table, where, default="mean")
    over = _over(table, where, metric)
    scope = _scope(table, where, metric)
    link_gbps = _entry_link(table, where, metric)
    name = _string(table, "name", where) or f"{_default_name(metric, aggregate, over, scope)} vs baseline"
    return Regression(
        name, metric, aggregate, over, relative, absolute, scope, where, line, link_gbps=link_gbps
    )


def _table(entry: object, where: str, allowed: Sequence[str]) -> dict[str, object]:
    if not isinstance(entry, dict):
        raise BudgetError(f"{where}: must be a table, got {_show(entry)}")
    for key in entry:
        if key not in allowed:
            close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}?" if close else f"the keys are {', '.join(allowed)}"
            raise BudgetError(f"{where}.{key}: unknown key; {hint}")
    return entry


def _metric(table: Mapping[str, object], where: str) -> Metric:
    name = table.get("metric")
    if name is None:
        raise BudgetError(f"{where}: metric is missing; name one, e.g. metric = 'exposed_comm_ratio'")
    if not isinstance(name, str):
        raise BudgetError(f"{where}.metric: must be a string (a metric name), got {_show(name)}")
    return get_metric(name, where=f"{where}.metric")


def _string(table: Mapping[str, object], key: str, where: str) -> str | None:
    value = table.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise BudgetError(f"{where}.{key}: must be a string, got {_show(value)}")
    return value


def _number(table: Mapping[str, object], key: str, where: str, *, what: str = "limit") -> float | None:
    value = table.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BudgetError(f"{where}.{key}: {what} must be a number, got {_show(value)}")
    if not math.isfinite(value):
        raise BudgetError(f"{where}.{key}: {what} must be a finite number, got {_show(value)}")
    return float(value)


def _aggregate(table: Mapping[str, object], where: str, *, default: str) -> str:
    value = table.get("aggregate", default)
    if not isinstance(value, str):
        raise BudgetError(f"{where}.aggregate: must be a string such as 'p90', got {_show(value)}")
    if value in AGGREGATES or _PERCENTILE.fullmatch(value):
        return value
    close = [_AGGREGATE_SYNONYMS[value]] if value in _AGGREGATE_SYNONYMS else []
    close = close or difflib.get_close_matches(value, AGGREGATES, n=1, cutoff=0.5)
    hint = f"did you mean {close[0]!r}? " if close else ""
    msg = (
        f"{where}.aggregate: unknown aggregate {value!r}; {hint}use one of {', '.join(AGGREGATES)} or any pNN"
    )
    raise BudgetError(msg)


def _over(table: Mapping[str, object], where: str, metric: Metric) -> Over:
    value = table.get("over", "all")
    if value == "all":
        return "all"
    if value == "rank":
        if not metric.per_rank:
            msg = (
                f"{where}.over: {metric.name} is measured across ranks (one sample per "
                f"{_across_sample(metric)}), not per rank; leave out over"
            )
            raise BudgetError(msg)
        return "rank"
    close = difflib.get_close_matches(str(value), _OVERS, n=1, cutoff=0.5)
    msg = f"{where}.over: must be 'all' (ranks pooled) or 'rank' (each rank), got {_show(value)}"
    if close and isinstance(value, str):
        msg += f"; did you mean {close[0]!r}?"
    raise BudgetError(msg)


def _scope(table: Mapping[str, object], where: str, metric: Metric) -> Scope:
    skip = table.get("skip_iterations", 0)
    if isinstance(skip, bool) or not isinstance(skip, int) or skip < 0:
        msg = f"{where}.skip_iterations: must be a whole number ≥ 0 (iterations per rank), got {_show(skip)}"
        raise BudgetError(msg)
    if skip and metric.source == "ranks":
        msg = f"{where}.skip_iterations: {metric.name} is measured over each rank's whole trace, not per step"
        raise BudgetError(msg)
    if skip and metric.finding:
        msg = f"{where}.skip_iterations: {metric.name} is a finding of the diagnosis, not a per-step figure"
        raise BudgetError(msg)
    ranks = table.get("ranks")
    rank_list: tuple[int, ...] | None = None
    if ranks is not None:
        items = ranks if isinstance(ranks, list) else [ranks]
        if not items or any(isinstance(r, bool) or not isinstance(r, int) or r < 0 for r in items):
            msg = (
                f"{where}.ranks: must be a rank or a non-empty array of ranks like [0, 1], got {_show(ranks)}"
            )
            raise BudgetError(msg)
        rank_list = tuple(sorted({cast(int, r) for r in items}))
        if not metric.per_rank:
            msg = (
                f"{where}.ranks: {metric.name} is measured across ranks (one sample per "
                f"{_across_sample(metric)}); it cannot be limited to some ranks"
            )
            raise BudgetError(msg)
    names: dict[str, tuple[str, ...] | None] = {}
    for key in ("collective", "pg_name", "dimension", "pg_desc"):
        value = table.get(key)
        if value is None:
            names[key] = None
            continue
        if key in ("dimension", "pg_desc") and not metric.by_dimension:
            usable = ", ".join(m.name for m in registered_metrics() if m.by_dimension)
            msg = f"{where}.{key}: applies to communication metrics ({usable}), not to {metric.name}"
            raise BudgetError(msg)
        if key in ("collective", "pg_name") and not metric.per_collective:
            collective_metrics = ", ".join(m.name for m in registered_metrics() if m.per_collective)
            msg = f"{where}.{key}: applies to collective metrics ({collective_metrics}), not to {metric.name}"
            raise BudgetError(msg)
        items = value if isinstance(value, list) else [value]
        if not items or not all(isinstance(v, str) and v for v in items):
            msg = f"{where}.{key}: must be a name or a non-empty array of names, got {_show(value)}"
            raise BudgetError(msg)
        names[key] = tuple(str(v) for v in items)
    if names["dimension"] is not None and names["pg_desc"] is not None:
        raise BudgetError(
            f"{where}: give dimension or pg_desc, not both (each splits the communication its own way)"
        )
    return Scope(
        ranks=rank_list,
        collectives=names["collective"],
        pg_names=names["pg_name"],
        skip_iterations=skip,
        dimensions=names["dimension"],
        pg_descs=names["pg_desc"],
    )


def _link(value: object, where: str) -> float | None:
    """Return the Gbit/s of a ``link_gbps`` value: a number of Gbit/s, or what ``--link-gbps`` takes."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            return parse_link_gbps(value)
        except UsageError:
            msg = (
                f"{where}: {value!r} is not a positive bandwidth; give Gbit/s (100, '25G', '12.5GB/s') or a "
                "preset ('100gbe', 'ib-hdr', 'nvlink4'; see docs/collectives.md#link-utilisation)"
            )
            raise BudgetError(msg) from None
    if isinstance(value, bool) or not isinstance(value, int | float):
        msg = f"{where}: must be Gbit/s (a number) or a string such as '100GbE', got {_show(value)}"
        raise BudgetError(msg)
    if not math.isfinite(value) or value <= 0:
        raise BudgetError(f"{where}: the bandwidth must be a positive number of Gbit/s, got {_show(value)}")
    return float(value)


def _entry_link(table: Mapping[str, object], where: str, metric: Metric) -> float | None:
    if "link_gbps" in table and not metric.needs_link:
        link_metrics = ", ".join(m.name for m in registered_metrics() if m.needs_link)
        msg = (
            f"{where}.link_gbps: applies to the link utilisation metrics ({link_metrics}), "
            f"not to {metric.name}"
        )
        raise BudgetError(msg)
    return _link(table.get("link_gbps"), f"{where}.link_gbps")


def _across_sample(metric: Metric) -> str:
    if metric.finding:
        return "cause the diagnosis examined"
    return "logical collective" if metric.per_collective else "iteration"


def _default_name(metric: Metric, aggregate: str, over: Over, scope: Scope) -> str:
    name = f"{metric.name} {aggregate}" + (" per rank" if over == "rank" else "")
    described = scope.describe()
    return f"{name} ({described})" if described else name


def _unit_words(metric: Metric) -> str:
    return "as a fraction in [0, 1]" if metric.unit == "ratio" else f"in {metric.unit}"


def _show(value: object) -> str:
    """Show a TOML value the way the file spells it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "[" + ", ".join(_show(v) for v in value[:4]) + (", ...]" if len(value) > 4 else "]")
    if isinstance(value, int | float):
        return repr(value)
    return f"a {type(value).__name__}"


def _check_key_depth(source: str, text: str) -> None:
    """Refuse a key or table name of more than :data:`MAX_KEY_PARTS` dotted parts, before TOML reads it."""
    deep = _DEEP_KEY.search(text)
    if deep is not None:
        line = text.count("\n", 0, deep.start()) + 1
        msg = (
            f"{shown(source)}:{line}: a key of more than {MAX_KEY_PARTS} dotted parts; a budget file "
            "needs no more than a few levels (see docs/ci.md)"
        )
        raise BudgetError(msg)


def _toml_message(source: str, text: str, exc: tomllib.TOMLDecodeError) -> str:
    match = _TOML_POSITION.match(str(exc))
    if match is None:
        return f"{source}: not valid TOML: {exc}"
    what = match["what"]
    what = what[:1].lower() + what[1:]
    if match["line"] is not None:
        return f"{source}:{match['line']}:{match['col']}: not valid TOML: {what}"
    return f"{source}:{text.count(chr(10)) + 1}: not valid TOML: {what} (at the end of the file)"


def _header_lines(text: str, prefix: str) -> list[int]:
    """Return the 1-based line of each ``[[budgets]]`` header, in order."""
    dotted = r"\s*\.\s*".join(re.escape(part) for part in (prefix + "budgets").split("."))
    header = re.compile(rf"^\s*\[\[\s*{dotted}\s*\]\]")
    return [i for i, line in enumerate(text.splitlines(), 1) if header.match(line)]


def _entry_line(text: str, prefix: str, name: str) -> int | None:
    """Return the line of ``name = {...}`` under ``[regression]``, or of ``[regression.name]``."""
    dotted = r"\s*\.\s*".join(re.escape(part) for part in (prefix + "regression").split("."))
    quoted = rf"[\"']?{re.escape(name)}[\"']?"
    section = re.compile(rf"^\s*\[\s*{dotted}\s*\]")
    own = re.compile(rf"^\s*\[\s*{dotted}\s*\.\s*{quoted}\s*\]")
    key = re.compile(rf"^\s*{quoted}\s*=")
    inside = False
    for i, line in enumerate(text.splitlines(), 1):
        if own.match(line):
            return i
        if line.lstrip().startswith("["):
            inside = bool(section.match(line))
        elif inside and key.match(line):
            return i
    return None


def check_links(budgets: BudgetFile, *, link_gbps: float | None = None) -> dict[str, float]:
    """Return the link's bandwidth of every check that needs one, by its ``where``.

    The entry's ``link_gbps`` wins, then ``link_gbps`` (``--link-gbps``), then the file's top-level
    ``link_gbps``. Call it before loading a run to stop at once on a missing link.

    Raises
    ------
    BudgetError
        A link utilisation metric with no link from any of the three.
    """
    links: dict[str, float] = {}
    checks: tuple[Budget | Regression, ...] = (*budgets.budgets, *budgets.regressions)
    for check in checks:
        if not check.metric.needs_link:
            continue
        link = next((g for g in (check.link_gbps, link_gbps, budgets.link_gbps) if g is not None), None)
        if link is None:
            msg = (
                f"{check.where}: {check.metric.name} needs the link's bandwidth; set link_gbps = ... "
                f"(Gbit/s or a preset such as '100gbe') in the entry or at the top of {budgets.path}, "
                "or pass --link-gbps"
            )
            raise BudgetError(msg)
        links[check.where] = link
    return links
