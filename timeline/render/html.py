"""The results as HTML tables: what a Jupyter notebook shows (``_repr_html_``).

Takes the plain results of :mod:`timeline.results` (the summary of ``timeline analyze`` with its
verdict and findings, the collectives report, the what-if report, a diagnosis) and gives an HTML
fragment: a heading line, the warnings,
then tables. Every text is escaped (:func:`html.escape`): trace, kernel and group names are the
user's data. Every number cell carries the exact value in ``data-value`` (nanoseconds, ratios,
counts as the result holds them) and shows it formatted for people, as the terminal tables do.

:class:`Result` wraps a result so that a notebook displays it: the dict stays the data
(:meth:`Result.to_dict`, ``result["worst"]``), the wrapper only adds the display.
"""

from __future__ import annotations

import html
from collections.abc import Iterator, Mapping
from typing import Any, Literal

from timeline.errors import UsageError
from timeline.units import format_ns, format_ratio

__all__ = [
    "ROWS_SHOWN",
    "Result",
    "kind_of",
    "render_collectives_html",
    "render_diagnosis_html",
    "render_html",
    "render_summary_html",
    "render_whatif_html",
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


def _table(caption: str, columns: list[Column], rows: list[dict[str, Any]], *, name: str) -> str:
    """Return an HTML table of the first :data:`ROWS_SHOWN` rows, saying how many were left out."""
    shown = rows[:ROWS_SHOWN]
    if len(rows) > len(shown):
        caption += f" (the first {len(shown)} of {len(rows)}; to_dict() holds every row)"
    head = "".join(
        f'<th class="{"text" if fmt == "text" else "number"}">{html.escape(header)}</th>'
        for header, _, fmt in columns
    )
    body = "".join(
        "<tr>" + "".join(_cell(row.get(key), fmt) for _, key, fmt in columns) + "</tr>" for row in shown
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


def render_summary_html(summary: Mapping[str, Any]) -> str:
    """Return the analysis summary (:func:`timeline.results.summary.build_summary`) as HTML tables.

    Per rank (whole trace), the worst iteration, per iteration (the most exposed first), the top
    exposed collectives; the clock offsets and the link utilisation where the summary holds them.
    """
    ranks = summary["ranks"]
    modes = sorted({str(row["mode"]) for row in ranks})
    heading = (
        f"timeline: {len({f['path'] for f in summary['files']})} file(s), {len(ranks)} rank(s), "
        f"measured on {', '.join(modes) or 'nothing'}"
    )
    parts = []
    if summary.get("verdict") is not None:
        parts.append(_findings_part(summary["verdict"], summary.get("findings") or []))
    parts.append(
        _table("Per rank (whole trace)", [("rank", "rank", "int"), *_OVERLAP_COLUMNS], ranks, name="ranks")
    )
    worst = summary["worst"]
    if worst is not None:
        parts.append(
            _table(
                "Worst iteration (most exposed communication)",
                [("rank", "rank", "int"), ("iteration", "iteration", "int"), *_OVERLAP_COLUMNS[1:]],
                [worst],
                name="worst",
            )
        )
    iterations = sorted(
        summary["iterations"],
        key=lambda r: (
            r["exposed_comm_ns"] is None,
            -(r["exposed_comm_ns"] or 0),
            r["rank"],
            r["iteration"] or 0,
        ),
    )
    parts.append(
        _table(
            "Per iteration (most exposed communication first)",
            [("rank", "rank", "int"), ("iteration", "iteration", "int"), *_OVERLAP_COLUMNS[1:]],
            iterations,
            name="iterations",
        )
    )
    parts.append(
        _table(
            "Top exposed collectives (all ranks)",
            [
                ("collective", "collective", "text"),
                ("group", "pg_name", "text"),
                ("bytes", "in_bytes", "bytes"),
                ("calls", "calls", "int"),
                ("ranks", "ranks", "int"),
                ("time", "dur_ns", "ns"),
                ("exposed", "exposed_ns", "ns"),
                ("exposed/time", "exposed_ratio", "ratio"),
            ],
            summary["top_collectives"],
            name="top_collectives",
        )
    )
    parts += _summary_extras(summary)
    return _page(heading, list(summary["warnings"]), parts)


_FINDING_COLUMNS: list[Column] = [
    ("cause", "cause", "text"),
    ("ranks", "ranks_text", "text"),
    ("predicted gain", "predicted_gain_ratio", "ratio"),
    ("predicted step", "predicted_step_ns", "ns"),
    ("basis", "basis", "text"),
    ("finding", "summary", "text"),
    ("fix", "fix", "text"),
]


def _findings_part(verdict: Mapping[str, Any], findings: list[Mapping[str, Any]]) -> str:
    """Return the verdict (a paragraph), the findings table and the notes."""
    rows = [
        {**f, "ranks_text": "all" if not f.get("ranks") else ", ".join(map(str, f["ranks"]))}
        for f in findings
    ]
    from timeline.render.terminal.findings import describe_verdict_figures

    figures = describe_verdict_figures(verdict)
    notes = "".join(f"<li>note: {html.escape(n)}</li>" for n in verdict.get("notes") or [])
    state = "communication_bound" if verdict["communication_bound"] else "not_communication_bound"
    return (
        f'<p data-verdict="{state}">'
        f"<b>verdict</b>: {html.escape(verdict['summary'])}</p>"
        + _table("Findings (largest predicted gain first)", _FINDING_COLUMNS, rows, name="findings")
        + (f"<p>{html.escape(figures)}</p>" if figures else "")
        + (f"<ul>{notes}</ul>" if notes else "")
    )


def render_diagnosis_html(diagnosis: Mapping[str, Any]) -> str:
    """Return a diagnosis (:func:`timeline.results.diagnosis.build_diagnosis`) as HTML: verdict, findings."""
    verdict = diagnosis["verdict"]
    heading = "timeline diagnosis: " + (
        "communication-bound" if verdict["communication_bound"] else "not communication-bound"
    )
    return _page(heading, [], [_findings_part(verdict, list(diagnosis["findings"]))])


def _summary_extras(summary: Mapping[str, Any]) -> list[str]:
    """Return the clock offsets (``--align``) and the link utilisation (``--link-gbps``) tables."""
    parts = []
    if summary.get("clock_offsets") is not None:
        parts.append(_offsets_table(summary["clock_offsets"]))
    if summary.get("utilisation") is not None:
        parts.append(_utilisation_table(summary["utilisation"]["iterations"]))
    return parts


def _offsets_table(rows: list[dict[str, Any]]) -> str:
    columns: list[Column] = [
        ("rank", "rank", "int"),
        ("offset", "offset_ns", "ns"),
        ("collectives", "collectives", "int"),
        ("spread (MAD)", "mad_ns", "ns"),
    ]
    return _table("Clock offsets (to rank 0's clock)", columns, rows, name="clock_offsets")


def _utilisation_table(rows: list[dict[str, Any]]) -> str:
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


_RENDERERS = {
    "summary": render_summary_html,
    "collectives": render_collectives_html,
    "whatif": render_whatif_html,
    "diagnosis": render_diagnosis_html,
}

_SIGNATURES: tuple[tuple[Kind, tuple[str, ...]], ...] = (
    ("whatif", ("self_replay", "scenarios")),
    ("collectives", ("collectives", "stragglers", "mismatches")),
    ("summary", ("ranks", "iterations", "top_collectives")),
    ("diagnosis", ("verdict", "findings")),
)


def kind_of(result: Mapping[str, Any]) -> Kind:
    """Return which result this is, from the keys its layout has.

    Raises
    ------
    UsageError
        A mapping that is none of the summary, the collectives report, the what-if report.
    """
    for kind, keys in _SIGNATURES:
        if all(key in result for key in keys):
            return kind
    msg = (
        "not a timeline result (a summary, collectives or what-if report, a diagnosis): pass what "
        "build_summary, build_collectives_report, build_whatif_report or build_diagnosis returns"
    )
    raise UsageError(msg)


def render_html(result: Mapping[str, Any]) -> str:
    """Return any result (summary, collectives, what-if) as HTML, by its layout (:func:`kind_of`)."""
    return _RENDERERS[kind_of(result)](result)


class Result(Mapping[str, Any]):
    """A result that a notebook shows as HTML tables; read as the dict it wraps.

    Parameters
    ----------
    data
        What :func:`~timeline.results.summary.build_summary`,
        :func:`~timeline.results.collectives.build_collectives_report` or
        :func:`~timeline.results.whatif.build_whatif_report` returns.

    Raises
    ------
    UsageError
        ``data`` is none of them.

    Examples
    --------
    >>> from timeline.render.html import Result  # doctest: +SKIP
    >>> Result(timeline.build_summary(trace, overlap))  # doctest: +SKIP
    """

    def __init__(self, data: Mapping[str, Any]) -> None:
        self._data = dict(data)
        self.kind: Kind = kind_of(self._data)

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
        return render_html(self._data)
