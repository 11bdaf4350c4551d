"""The results as HTML tables: what a Jupyter notebook shows (``_repr_html_``).

Takes the results of :mod:`timeline.results` (the typed summary of ``timeline analyze`` with its
verdict and findings, a typed diagnosis; the collectives and what-if reports as plain data) and
gives an HTML fragment: a heading line, the warnings, then tables. Every text is escaped
(:func:`html.escape`): trace, kernel and group names are the user's data. Every number cell
carries the exact value in ``data-value`` (nanoseconds, ratios, counts as the result holds them) and
shows it formatted for people, as the terminal tables do.

:class:`Result` wraps a result so that a notebook displays it: the data stays the data
(:attr:`Result.data`, :meth:`Result.to_dict`, ``result["worst"]``), the wrapper only adds the
display. A typed result (a msgspec Struct) is rendered by its type (its ``kind`` tag); a plain one
by its keys (:func:`kind_of`).
"""

from __future__ import annotations

import html
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from timeline.errors import UsageError
from timeline.units import format_ns, format_ratio

if TYPE_CHECKING:
    from timeline.results.diagnosis import DiagnosisReport, Verdict
    from timeline.results.findings import Finding
    from timeline.results.summary import ClockOffsetRow, Summary, UtilisationRow

__all__ = [
    "ROWS_SHOWN",
    "Result",
    "kind_of",
    "render_collectives_html",
    "render_diagnosis_html",
    "render_html",
    "render_summary_html",
    "render_whatif_html",
    "typed_result",
]

ROWS_SHOWN = 40
"""Rows shown per table (the longest first where an order matters); the result holds every row."""

Kind = Literal["summary", "collectives", "whatif", "diagnosis"]
Format = Literal["text", "int", "ns", "ratio", "gbps", "float", "bytes"]
Column = tuple[str, str, Format]
"""A table column: header, key of the row, how the value is shown."""

_STYLE = (
    "<style>.timeline-result table{border-collapse:collapse;margin:0.3em 0 0.8em 0}"
    ".timeline-result td,.timeline-result th{padding:2px 8px;text-align:right}"
    ".timeline-result td.text,.timeline-result th.text{text-align:left}"
    ".timeline-result caption{text-align:left;font-weight:bold}"
    ".timeline-result .warning{color:#a15c00}</style>"
)


def _gbps(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} Gbit/s"


def _bytes(value: float | None) -> str:
    if value is None:
        return "-"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(value) >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value:.0f} B"


def _shown(value: Any, fmt: Format) -> str:
    """Return a value formatted for people (``-`` when unknown)."""
    if value is None:
        return "-"
    if fmt == "ns":
        return format_ns(value)
    if fmt == "ratio":
        return format_ratio(value)
    if fmt == "gbps":
        return _gbps(value)
    if fmt == "bytes":
        return _bytes(value)
    if fmt == "float":
        return f"{value:.3f}"
    return str(value)


def _cell(value: Any, fmt: Format) -> str:
    """Return one ``<td>``: text left-aligned, numbers with their exact value in ``data-value``."""
    text = html.escape(_shown(value, fmt))
    if fmt == "text" or isinstance(value, str):
        return f'<td class="text">{text}</td>'
    if value is None:
        return f'<td data-value="">{text}</td>'
    return f'<td data-value="{html.escape(repr(value), quote=True)}">{text}</td>'


def _value(row: Mapping[str, Any] | msgspec.Struct, key: str) -> Any:
    """Return a row's value: a typed row's attribute, a plain row's key (None when absent)."""
    return row.get(key) if isinstance(row, Mapping) else getattr(row, key, None)


def _table(
    caption: str, columns: list[Column], rows: Sequence[Mapping[str, Any] | msgspec.Struct], *, name: str
) -> str:
    """Return an HTML table of the first :data:`ROWS_SHOWN` rows, saying how many were left out."""
    shown = rows[:ROWS_SHOWN]
    if len(rows) > len(shown):
        caption += f" (the first {len(shown)} of {len(rows)}; to_dict() holds every row)"
    head = "".join(
        f'<th class="{"text" if fmt == "text" else "number"}">{html.escape(header)}</th>'
        for header, _, fmt in columns
    )
    body = "".join(
        "<tr>" + "".join(_cell(_value(row, key), fmt) for _, key, fmt in columns) + "</tr>" for row in shown
    )
    return (
        f'<table data-table="{html.escape(name, quote=True)}"><caption>{html.escape(caption)}</caption>'
        f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    )


def _page(heading: str, warnings: list[str], parts: list[str]) -> str:
    """Return the fragment: heading, warnings (escaped), then the tables."""
    lines = "".join(f'<li class="warning">warning: {html.escape(w)}</li>' for w in warnings)
    listed = f"<ul>{lines}</ul>" if lines else ""
    body = "".join(parts)
    return f'{_STYLE}<div class="timeline-result"><p><b>{html.escape(heading)}</b></p>{listed}{body}</div>'


_OVERLAP_COLUMNS: list[Column] = [
    ("mode", "mode", "text"),
    ("step", "step_ns", "ns"),
    ("compute", "compute_ns", "ns"),
    ("comm", "comm_ns", "ns"),
    ("hidden", "hidden_comm_ns", "ns"),
    ("exposed", "exposed_comm_ns", "ns"),
    ("exposed/step", "exposed_comm_ratio", "ratio"),
    ("hidden/comm", "hidden_comm_ratio", "ratio"),
    ("idle/step", "idle_ratio", "ratio"),
]
_SPAN_COLUMNS: list[Column] = [
    ("mode", "mode", "text"),
    ("span", "span_ns", "ns"),
    *_OVERLAP_COLUMNS[2:6],
    ("exposed/span", "exposed_comm_ratio", "ratio"),
    ("hidden/comm", "hidden_comm_ratio", "ratio"),
    ("idle/span", "idle_ratio", "ratio"),
]
"""The per-rank table's columns: a rank's whole trace is a span of iterations, not a step."""


_ITERATION_COLUMNS: list[Column] = [
    ("rank", "rank", "int"),
    ("iteration", "iteration", "int"),
    *_OVERLAP_COLUMNS[1:],
]
_TOP_COLUMNS: list[Column] = [
    ("collective", "collective", "text"),
    ("group", "pg_name", "text"),
    ("bytes", "in_bytes", "bytes"),
    ("calls", "calls", "int"),
    ("ranks", "ranks", "int"),
    ("time", "dur_ns", "ns"),
    ("exposed", "exposed_ns", "ns"),
    ("exposed/time", "exposed_ratio", "ratio"),
]


def render_summary_html(summary: Summary) -> str:
    """Return the analysis summary (:class:`timeline.results.summary.Summary`) as HTML tables.

    Per rank (whole trace), the worst iteration, per iteration (the most exposed first: the
    summary's ``iterations_by_exposure``), the top exposed collectives; the clock offsets and the
    link utilisation where the summary holds them.
    """
    ranks = summary.ranks
    modes = sorted({row.mode for row in ranks})
    heading = (
        f"timeline: {len(summary.files)} file(s), {len(ranks)} rank(s), "
        f"measured on {', '.join(modes) or 'nothing'}"
    )
    parts = []
    if summary.verdict is not None:
        parts.append(_findings_part(summary.verdict, summary.findings or []))
    parts.append(
        _table("Per rank (whole trace)", [("rank", "rank", "int"), *_SPAN_COLUMNS], ranks, name="ranks")
    )
    if summary.worst is not None:
        worst = "Worst iteration (most exposed communication)"
        parts.append(_table(worst, _ITERATION_COLUMNS, [summary.worst], name="worst"))
    iterations = [summary.iterations[k] for k in summary.iterations_by_exposure]
    caption = "Per iteration (most exposed communication first)"
    parts.append(_table(caption, _ITERATION_COLUMNS, iterations, name="iterations"))
    top = "Top exposed collectives (all ranks)"
    parts.append(_table(top, _TOP_COLUMNS, summary.top_collectives, name="top_collectives"))
    if summary.clock_offsets is not None:
        parts.append(_offsets_table(summary.clock_offsets))
    if summary.utilisation is not None:
        parts.append(_utilisation_table(summary.utilisation.iterations))
    return _page(heading, list(summary.warnings), parts)


_FINDING_COLUMNS: list[Column] = [
    ("cause", "cause", "text"),
    ("ranks", "ranks_text", "text"),
    ("predicted gain", "predicted_gain_ratio", "ratio"),
    ("predicted step", "predicted_step_ns", "ns"),
    ("basis", "basis", "text"),
    ("finding", "summary", "text"),
    ("fix", "fix", "text"),
]


def _finding_row(finding: Finding) -> dict[str, Any]:
    """Return a finding's cells: its fields, its ranks as text (``all`` for None or none)."""
    return {
        "cause": finding.cause,
        "ranks_text": "all" if not finding.ranks else ", ".join(map(str, finding.ranks)),
        "predicted_gain_ratio": finding.predicted_gain_ratio,
        "predicted_step_ns": finding.predicted_step_ns,
        "basis": finding.basis,
        "summary": finding.summary,
        "fix": finding.fix,
    }


def _findings_part(verdict: Verdict, findings: Sequence[Finding]) -> str:
    """Return the verdict (a paragraph), the findings table and the notes."""
    from timeline.render.terminal.findings import describe_verdict_figures

    rows = [_finding_row(f) for f in findings]
    figures = describe_verdict_figures(verdict)
    notes = "".join(f"<li>note: {html.escape(n)}</li>" for n in verdict.notes)
    state = "communication_bound" if verdict.communication_bound else "not_communication_bound"
    return (
        f'<p data-verdict="{state}">'
        f"<b>verdict</b>: {html.escape(verdict.summary)}</p>"
        + _table("Findings (largest predicted gain first)", _FINDING_COLUMNS, rows, name="findings")
        + (f"<p>{html.escape(figures)}</p>" if figures else "")
        + (f"<ul>{notes}</ul>" if notes else "")
    )


def render_diagnosis_html(diagnosis: DiagnosisReport) -> str:
    """Return a diagnosis (:class:`timeline.results.diagnosis.DiagnosisReport`) as HTML: verdict, findings."""
    verdict = diagnosis.verdict
    heading = "timeline diagnosis: " + (
        "communication-bound" if verdict.communication_bound else "not communication-bound"
    )
    return _page(heading, [], [_findings_part(verdict, diagnosis.findings)])


def _offsets_table(rows: Sequence[ClockOffsetRow] | list[dict[str, Any]]) -> str:
    columns: list[Column] = [
        ("rank", "rank", "int"),
        ("offset", "offset_ns", "ns"),
        ("collectives", "collectives", "int"),
        ("spread (MAD)", "mad_ns", "ns"),
    ]
    return _table("Clock offsets (to rank 0's clock)", columns, rows, name="clock_offsets")


def _utilisation_table(rows: Sequence[UtilisationRow] | list[dict[str, Any]]) -> str:
    columns: list[Column] = [
        ("iteration", "iteration", "int"),
        ("collectives", "collectives", "int"),
        ("bytes", "bytes", "bytes"),
        ("transfer", "transfer_ns", "ns"),
        ("busbw", "busbw_gbps", "gbps"),
        ("busbw/link", "link_utilisation_ratio", "ratio"),
        ("exposed", "exposed_comm_ns", "ns"),
    ]
    return _table("Link utilisation per iteration", columns, rows, name="utilisation")


def render_collectives_html(report: Mapping[str, Any]) -> str:
    """Return the collectives report (:func:`timeline.results.collectives.build_collectives_report`) as HTML.

    The collectives matched across ranks (the most wait first), who everyone waits for, the
    stragglers per iteration, the link utilisation; for a Horovod timeline its totals and fused batches.
    """
    collectives = sorted(report["collectives"], key=lambda r: -(r["total_wait_ns"] or 0))
    ranks = len(report["ranks"])
    heading = f"timeline collectives: {len(collectives)} logical collective(s) across {ranks} rank(s)"
    columns: list[Column] = [
        ("#", "collective_id", "int"),
        ("group", "group", "text"),
        ("collective", "collective", "text"),
        ("iteration", "iteration", "int"),
        ("ranks", "ranks", "int"),
        ("bytes", "bytes", "bytes"),
        ("start skew", "start_skew_ns", "ns"),
        ("end skew", "end_skew_ns", "ns"),
        ("transfer", "transfer_ns", "ns"),
        ("max wait", "max_wait_ns", "ns"),
        ("total wait", "total_wait_ns", "ns"),
        ("last rank", "last_rank", "int"),
        ("busbw", "busbw_gbps", "gbps"),
    ]
    parts = [_table("Collectives across ranks (most wait first)", columns, collectives, name="collectives")]
    stragglers: list[Column] = [
        ("rank", "rank", "int"),
        ("times last", "times_last", "int"),
        ("wait caused", "caused_wait_ns", "ns"),
        ("share", "caused_wait_ratio", "ratio"),
        ("own wait", "waited_ns", "ns"),
        ("mean arrival lag", "mean_arrival_lag_ns", "ns"),
    ]
    parts.append(
        _table("Who everyone waits for", stragglers, report["stragglers"]["ranks"], name="stragglers")
    )
    if report["utilisation"]:
        parts.append(_utilisation_table(report["utilisation"]))
    if report.get("clock_offsets") is not None:
        parts.append(_offsets_table(report["clock_offsets"]))
    if report["horovod"] is not None:
        totals = report["horovod"]["totals"]
        parts.append(
            _table(
                "Horovod timeline (totals)",
                [(key, key, "text" if isinstance(value, str) else "int") for key, value in totals.items()],
                [totals],
                name="horovod_totals",
            )
        )
    return _page(heading, list(report["warnings"]), parts)


def render_whatif_html(report: Mapping[str, Any]) -> str:
    """Return the what-if report (:func:`timeline.results.whatif.build_whatif_report`) as HTML tables."""
    check = report["self_replay"]
    link = _gbps(report["link_gbps"]) if report["link_gbps"] is not None else "unknown"
    heading = (
        f"what-if: {len(report['ranks'])} rank(s), {len(report['iterations'])} iteration(s), "
        f"{report['collectives']} collectives; world size {report['world_size']}; measured link {link} "
        f"({report['link_source']}); efficiency {report['efficiency']}, {report['algorithm']}"
    )
    replay: list[Column] = [
        ("measured", "measured_ns", "ns"),
        ("replayed", "predicted_ns", "ns"),
        ("error", "error_ratio", "ratio"),
        ("worst iteration error", "max_error_ratio", "ratio"),
        ("exposed comm", "exposed_comm_ns", "ns"),
        ("scaling factor", "scaling_factor", "float"),
    ]
    scenarios: list[Column] = [
        ("bandwidth", "bandwidth_gbps", "gbps"),
        ("world size", "world_size", "int"),
        ("compression", "compression", "float"),
        ("buckets", "buckets", "text"),
        ("iteration", "iteration_ns", "ns"),
        ("exposed comm", "exposed_comm_ns", "ns"),
        ("single GPU", "single_ns", "ns"),
        ("scaling factor", "scaling_factor", "float"),
        ("no overlap", "no_overlap_ns", "ns"),
        ("perfect overlap", "perfect_overlap_ns", "ns"),
    ]
    parts = [
        _table("Self-replay: the measured conditions replayed", replay, [check], name="self_replay"),
        _table("Predictions", scenarios, report["scenarios"], name="scenarios"),
    ]
    if report["targets"]:
        targets: list[Column] = [
            ("target scaling factor", "target_scaling_factor", "float"),
            ("world size", "world_size", "int"),
            ("solve", "solve", "text"),
            ("bandwidth", "bandwidth_gbps", "gbps"),
            ("compression", "compression", "float"),
        ]
        parts.append(_table("What reaches the target", targets, report["targets"], name="targets"))
    return _page(heading, list(report["warnings"]), parts)


_RENDERERS: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "collectives": render_collectives_html,
    "whatif": render_whatif_html,
}
"""The renderers of the results still plain dicts, by the kind :func:`kind_of` reads from their keys."""

_SIGNATURES: tuple[tuple[Kind, tuple[str, ...]], ...] = (
    ("whatif", ("self_replay", "scenarios")),
    ("collectives", ("collectives", "stragglers", "mismatches")),
)


def _typed_renderers() -> dict[type[msgspec.Struct], Callable[[Any], str]]:
    """Return the renderer of each typed result, by its type."""
    from timeline.results.diagnosis import DiagnosisReport
    from timeline.results.summary import Summary

    return {
        DiagnosisReport: render_diagnosis_html,
        Summary: render_summary_html,
    }


def typed_result(result: Mapping[str, Any] | msgspec.Struct) -> msgspec.Struct | None:
    """Return a typed result as it is, a plain one that names a typed kind decoded into its type, else None.

    A plain mapping with a ``kind`` of :data:`timeline.results.schemas.SCHEMAS` (``--json`` read
    back) is converted into that kind's Struct.

    Raises
    ------
    UsageError
        A mapping whose ``kind`` is a typed result's but whose layout is not that result's.
    """
    if isinstance(result, msgspec.Struct):
        return result
    kind = result.get("kind")
    from timeline.results.schemas import SCHEMAS

    if not isinstance(kind, str) or kind not in SCHEMAS:
        return None
    try:
        return msgspec.convert(result, SCHEMAS[kind])
    except msgspec.ValidationError as exc:
        raise UsageError(f"not a timeline {kind} result of this version: {exc}") from exc


def kind_of(result: Mapping[str, Any]) -> Kind:
    """Return which plain-dict result this is, from the keys its layout has.

    Raises
    ------
    UsageError
        A mapping that is none of the collectives report, the what-if report.
    """
    for kind, keys in _SIGNATURES:
        if all(key in result for key in keys):
            return kind
    msg = (
        "not a timeline result (a summary, collectives or what-if report, a diagnosis): pass what "
        "build_summary, build_collectives_report, build_whatif_report or build_diagnosis returns"
    )
    raise UsageError(msg)


def render_html(result: Mapping[str, Any] | msgspec.Struct) -> str:
    """Return any result (summary, collectives, what-if, diagnosis) as HTML.

    A typed result by its type; a plain one by its layout (:func:`kind_of`).

    Raises
    ------
    UsageError
        Not a timeline result.
    """
    typed = typed_result(result)
    if typed is None:
        return _RENDERERS[kind_of(_plain(result))](_plain(result))
    renderer = _typed_renderers().get(type(typed))
    if renderer is None:
        raise UsageError(f"no HTML for a {type(typed).__name__}: not a result a notebook shows")
    return renderer(typed)


def _plain(result: Mapping[str, Any] | msgspec.Struct) -> Mapping[str, Any]:
    """Return a result that :func:`typed_result` left plain: a mapping (a Struct is always typed)."""
    if isinstance(result, Mapping):
        return result
    raise UsageError(f"not a timeline result: {type(result).__name__}")  # pragma: no cover


class Result(Mapping[str, Any]):
    """A result that a notebook shows as HTML tables; read as the data it wraps.

    A typed result (:class:`timeline.results.base.Result`) is :attr:`data`, whose attributes the
    wrapper also gives (``summary.worst``); a plain one is the dict it wraps. Either reads as a
    mapping of its ``--json`` layout (``summary["worst"]``, :meth:`to_dict`).

    Parameters
    ----------
    data
        What :func:`~timeline.results.summary.build_summary`,
        :func:`~timeline.results.diagnosis.build_diagnosis`,
        :func:`~timeline.results.collectives.build_collectives_report` or
        :func:`~timeline.results.whatif.build_whatif_report` returns.

    Raises
    ------
    UsageError
        ``data`` is none of them.

    Examples
    --------
    >>> from timeline.render.html import Result  # doctest: +SKIP
    >>> Result(timeline.build_summary(run))  # doctest: +SKIP
    """

    def __init__(self, data: Mapping[str, Any] | msgspec.Struct) -> None:
        typed = typed_result(data)
        self.data: msgspec.Struct | None = typed
        if typed is None:
            self._data: dict[str, Any] = dict(_plain(data))
            self.kind: str = kind_of(self._data)
        else:
            self._data = msgspec.to_builtins(typed)
            self.kind = str(type(typed).__struct_config__.tag)

    def __getattr__(self, name: str) -> Any:
        data = self.__dict__.get("data")
        if data is None or name.startswith("_"):
            raise AttributeError(name)
        return getattr(data, name)

    def to_dict(self) -> dict[str, Any]:
        """Return the result's plain data (the ``--json`` layout)."""
        return self._data

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"Result(kind={self.kind!r}, keys={list(self._data)!r})"

    def _repr_html_(self) -> str:
        return render_html(self.data if self.data is not None else self._data)
