"""The results as HTML tables: what a Jupyter notebook shows (``_repr_html_``).

Takes a typed result of :mod:`timeline.results` (the summary of ``timeline analyze`` with its
verdict and findings, a diagnosis, the collectives report, the what-if report, the Flight Recorder
report) and gives an HTML fragment: a heading line, the warnings, then tables. Every text is escaped
(:func:`html.escape`): trace, kernel and group names are the user's data. Every number cell
carries the exact value in ``data-value`` (nanoseconds, ratios, counts as the result holds them) and
shows it formatted for people, as the terminal tables do.

:class:`Result` wraps a result so that a notebook displays it: the data stays the data
(:attr:`Result.data`, :meth:`Result.to_dict`, ``result["worst"]``), the wrapper only adds the
display. A result is rendered by its type (its ``kind`` tag); a plain mapping is read as the kind
its ``kind`` key names (``--json`` read back).
"""

from __future__ import annotations

import html
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from timeline.errors import UsageError
from timeline.results.whatif import WhatIfReport
from timeline.units import format_ns, format_ratio

if TYPE_CHECKING:
    from timeline.results.collectives import ClockOffset, CollectivesReport, IterationUtilisation
    from timeline.results.diagnosis import DiagnosisReport, Verdict
    from timeline.results.findings import Finding
    from timeline.results.flight_recorder import FlightReport
    from timeline.results.summary import Summary

__all__ = [
    "ROWS_SHOWN",
    "Result",
    "render_collectives_html",
    "render_diagnosis_html",
    "render_flight_recorder_html",
    "render_html",
    "render_summary_html",
    "render_whatif_html",
    "typed_result",
]

ROWS_SHOWN = 40
"""Rows shown per table (the longest first where an order matters); the result holds every row."""

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
        f"timeline: {len({f.path for f in summary.files})} file(s), {len(ranks)} rank(s), "
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


def _offsets_table(rows: Sequence[ClockOffset]) -> str:
    columns: list[Column] = [
        ("rank", "rank", "int"),
        ("offset", "offset_ns", "ns"),
        ("collectives", "collectives", "int"),
        ("spread (MAD)", "mad_ns", "ns"),
    ]
    return _table("Clock offsets (to rank 0's clock)", columns, rows, name="clock_offsets")


def _utilisation_table(rows: Sequence[IterationUtilisation]) -> str:
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


def render_collectives_html(report: CollectivesReport) -> str:
    """Return the collectives report (:class:`~timeline.results.collectives.CollectivesReport`) as HTML.

    The collectives matched across ranks (the most wait first: ``collectives_by_wait``), who
    everyone waits for, the stragglers per iteration, the link utilisation; for a Horovod timeline
    its totals.
    """
    collectives = [report.collectives[i] for i in report.collectives_by_wait]
    heading = (
        f"timeline collectives: {len(collectives)} logical collective(s) across {len(report.ranks)} rank(s)"
    )
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
    parts.append(_table("Who everyone waits for", stragglers, report.stragglers.ranks, name="stragglers"))
    if report.utilisation:
        parts.append(_utilisation_table(report.utilisation))
    if report.clock_offsets is not None:
        parts.append(_offsets_table(report.clock_offsets))
    if report.horovod is not None:
        totals = report.horovod.totals
        parts.append(
            _table(
                "Horovod timeline (totals)",
                [(key, key, "int") for key in totals.__struct_fields__],
                [totals],
                name="horovod_totals",
            )
        )
    return _page(heading, list(report.warnings), parts)


def render_whatif_html(report: WhatIfReport) -> str:
    """Return the what-if report (:func:`timeline.results.whatif.build_whatif_report`) as HTML tables."""
    import msgspec

    check = report.self_replay
    link = _gbps(report.link_gbps) if report.link_gbps is not None else "unknown"
    heading = (
        f"what-if: {len(report.ranks)} rank(s), {len(report.iterations)} iteration(s), "
        f"{report.collectives} collectives; world size {report.world_size}; measured link {link} "
        f"({report.link_source}); efficiency {report.efficiency}, {report.algorithm}"
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
    # the tables read rows by column name: the rows as plain data
    parts = [
        _table(
            "Self-replay: the measured conditions replayed",
            replay,
            [msgspec.to_builtins(check)],
            name="self_replay",
        ),
        _table("Predictions", scenarios, msgspec.to_builtins(report.scenarios), name="scenarios"),
    ]
    if report.targets:
        targets: list[Column] = [
            ("target scaling factor", "target_scaling_factor", "float"),
            ("world size", "world_size", "int"),
            ("solve", "solve", "text"),
            ("bandwidth", "bandwidth_gbps", "gbps"),
            ("compression", "compression", "float"),
        ]
        parts.append(
            _table("What reaches the target", targets, msgspec.to_builtins(report.targets), name="targets")
        )
    return _page(heading, list(report.warnings), parts)


def _ranks_text(ranks: list[int] | None) -> str:
    return "all" if ranks is None else ", ".join(map(str, ranks)) or "-"


_FLIGHT_FINDING_COLUMNS: list[Column] = [
    ("cause", "cause", "text"),
    ("ranks", "ranks", "text"),
    ("finding", "summary", "text"),
    ("fix", "fix", "text"),
]
_FLIGHT_ROOT_COLUMNS: list[Column] = [
    ("rank", "rank", "int"),
    ("stop", "kind", "text"),
    ("groups stopped in", "groups", "int"),
    ("ranks waiting on it", "waited_on_by", "int"),
    ("stopped at (ns since the epoch)", "stopped_at_ns", "int"),
]
_FLIGHT_GROUP_COLUMNS: list[Column] = [
    ("group", "group", "text"),
    ("dimension", "dimension", "text"),
    ("state", "state", "text"),
    ("at", "stop_seq", "int"),
    ("op", "stop_op", "text"),
    ("not entered", "not_entered", "text"),
    ("not completed", "not_completed", "text"),
    ("waiting", "waiting", "text"),
]


def render_flight_recorder_html(report: FlightReport) -> str:
    """Return the Flight Recorder report (:class:`~timeline.results.flight_recorder.FlightReport`) as HTML.

    The verdict, the findings, the ranks the others wait on and the groups that did not finish (in
    the report's ``order``), as ``timeline analyze DUMPS`` prints them.
    """
    verdict = report.verdict
    heading = "timeline Flight Recorder dumps: " + (
        "hang" if verdict.hang else "desync" if verdict.desync else "no hang"
    )
    findings = [
        {"cause": f.cause, "ranks": _ranks_text(f.ranks), "summary": f.summary, "fix": f.fix}
        for f in report.findings
    ]
    roots = [
        {"rank": r.rank, "kind": r.kind, "groups": r.groups, "waited_on_by": r.waited_on_by,
         "stopped_at_ns": r.stopped_at_ns}
        for r in report.roots
    ]  # fmt: skip
    groups = [
        {"group": g.group, "dimension": g.dimension, "state": g.state, "stop_seq": g.stop_seq,
         "stop_op": g.stop_op, "not_entered": _ranks_text(g.not_entered),
         "not_completed": _ranks_text(g.not_completed), "waiting": _ranks_text(g.waiting or g.stalled)}
        for g in sorted(report.groups, key=lambda g: g.order)
        if g.state in ("stopped", "stalled")
    ]  # fmt: skip
    parts = [
        f"<p><b>verdict</b>: {html.escape(verdict.summary)}</p>",
        _table("Findings", _FLIGHT_FINDING_COLUMNS, findings, name="findings"),
        _table("Ranks the others wait on", _FLIGHT_ROOT_COLUMNS, roots, name="roots"),
        _table("Groups that did not finish", _FLIGHT_GROUP_COLUMNS, groups, name="groups"),
    ]
    return _page(heading, list(report.warnings), parts)


def _typed_renderers() -> dict[type[msgspec.Struct], Callable[[Any], str]]:
    """Return the renderer of each typed result, by its type."""
    from timeline.results.collectives import CollectivesReport
    from timeline.results.diagnosis import DiagnosisReport
    from timeline.results.flight_recorder import FlightReport
    from timeline.results.summary import Summary

    return {
        Summary: render_summary_html,
        DiagnosisReport: render_diagnosis_html,
        CollectivesReport: render_collectives_html,
        FlightReport: render_flight_recorder_html,
        WhatIfReport: render_whatif_html,
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


def render_html(result: Mapping[str, Any] | msgspec.Struct) -> str:
    """Return any result (summary, diagnosis, collectives, what-if, Flight Recorder) as HTML, by its type.

    Raises
    ------
    UsageError
        Not a timeline result (a plain mapping without a result's ``kind``).
    """
    typed = _typed(result)
    renderer = _typed_renderers().get(type(typed))
    if renderer is None:
        raise UsageError(f"no HTML for a {type(typed).__name__}: not a result a notebook shows")
    return renderer(typed)


def _typed(result: Mapping[str, Any] | msgspec.Struct) -> msgspec.Struct:
    """Return the typed result :func:`typed_result` reads, or refuse what is none."""
    typed = typed_result(result)
    if typed is None:
        msg = (
            "not a timeline result: pass what build_summary, build_collectives_report, "
            "build_whatif_report, build_diagnosis or build_flight_report returns (or its --json read back)"
        )
        raise UsageError(msg)
    return typed


class Result(Mapping[str, Any]):
    """A result that a notebook shows as HTML tables; read as the data it wraps.

    :attr:`data` is the typed result (:class:`timeline.results.base.Result`), whose attributes the
    wrapper also gives (``report.collectives``); it also reads as a mapping of its ``--json`` layout
    (``report["collectives"]``, :meth:`to_dict`).

    Parameters
    ----------
    data
        A typed result (what :func:`~timeline.results.summary.build_summary`,
        :func:`~timeline.results.collectives.build_collectives_report`,
        :func:`~timeline.results.whatif.build_whatif_report`… return), or its ``--json`` read back.

    Raises
    ------
    UsageError
        ``data`` is none of them.

    Examples
    --------
    >>> from timeline.render.html import Result  # doctest: +SKIP
    >>> Result(timeline.analyze("runs/exp1").summary_data())  # doctest: +SKIP
    """

    def __init__(self, data: Mapping[str, Any] | msgspec.Struct) -> None:
        typed = _typed(data)
        self.data: msgspec.Struct = typed
        self._data: dict[str, Any] = msgspec.to_builtins(typed)
        self.kind: str = str(type(typed).__struct_config__.tag)

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
        return render_html(self.data)
