"""The what-if and seed reports (:mod:`timeline.results.whatif`) as text and a table.

Takes a :class:`~timeline.results.whatif.WhatIfReport` or a :class:`~timeline.results.whatif.SeedReport`
and prints what it holds; computes nothing.
"""

from __future__ import annotations

from rich.console import Console

from timeline.render.terminal.layout import counted
from timeline.render.terminal.tables import Col, print_prose, print_table
from timeline.results.whatif import ScenarioRow, SeedReport, WhatIfReport
from timeline.units import format_ns, format_ratio

__all__ = ["render_seed_report", "render_whatif_report"]


def _gbps(value: float | None) -> str:
    return "-" if value is None else f"{value:g} Gbit/s"


def _link(row: ScenarioRow) -> str:
    """Return the link of a scenario: one for every collective, or per named dimension and the others'."""
    named = row.dimension_bandwidths
    if not named:
        return _gbps(row.bandwidth_gbps)
    parts = [f"{d.dimension}={d.bandwidth_gbps:g}" for d in named]
    others = f"{row.bandwidth_gbps:g}" if row.bandwidth_gbps is not None else "measured"
    return f"{', '.join(parts)}, others={others} Gbit/s"


def _latency(report: WhatIfReport) -> str:
    every = report.latency_s
    text = "latency as measured" if every is None else f"latency {every * 1e6:g} µs/step"
    return text + "".join(
        f"; {d.dimension} {d.latency_s * 1e6:g} µs/step" for d in report.dimension_latencies
    )


def _ranks(report: WhatIfReport) -> str:
    """Say which ranks were replayed, and whom they stand for (a Horovod timeline's writer: all)."""
    modes = ", ".join(report.modes)
    ranks = report.ranks
    if "horovod" in report.modes and len(ranks) == 1 and report.world_size > 1:
        return f"rank {ranks[0]} ({modes}: the timeline's writer, standing for all {report.world_size} ranks)"
    return f"{counted(len(ranks), 'rank')} ({modes})"


def _render_dimensions(report: WhatIfReport, console: Console) -> None:
    """Print the dimensions of the trace's collectives, when a setting names one."""
    if not report.names_dimensions:
        return
    described = [
        f"{d.dimension} ({len(d.groups)} group(s) of {'/'.join(map(str, d.group_sizes))} ranks, "
        f"{d.collectives} collectives)"
        for d in report.dimensions
    ]
    print_prose(
        console,
        f"dimensions: {', '.join(described) or 'none'}; the others keep the link of every collective",
        markup=False,
    )


def _sf(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def fold_notes(notes: list[str] | tuple[str, ...], *, verbose: bool, about: str) -> list[str]:
    """Return the note lines to print: each note with ``verbose`` or when there is one, else one line.

    ``about``: what the notes are about, for the folded line (``how the replay was built``).
    """
    if verbose or len(notes) <= 1:
        return [f"note: {note}" for note in notes]
    return [f"notes: {len(notes)} on {about} (--verbose shows them)"]


def render_whatif_report(report: WhatIfReport, console: Console, *, verbose: bool = False) -> None:
    """Print the report as text and tables; the notes folded into one line unless ``verbose``."""
    check = report.self_replay
    link = _gbps(report.link_gbps) if report.link_gbps is not None else "unknown"
    print_prose(
        console,
        f"what-if: {_ranks(report)}, "
        f"{counted(len(report.iterations), 'iteration') if report.iterations else 'no iteration'}, "
        f"{counted(report.collectives, 'collective')}; "
        f"world size {report.world_size}; measured link {link} ({report.link_source}); "
        f"gradient-ready times from {report.gradient_source}",
        markup=False,
    )
    for line in fold_notes(report.notes, verbose=verbose, about="how the replay was built"):
        print_prose(console, line, hang=6, markup=False)
    max_error = check.max_error_ratio
    print_prose(
        console,
        f"measured {format_ns(check.measured_ns)}/iteration; "
        f"self-replay {format_ns(check.predicted_ns)} "
        f"(error {format_ratio(check.error_ratio)}, worst iteration "
        f"{format_ratio(max_error) if max_error is not None else '-'}); "
        f"T_single {format_ns(check.single_ns)} (scaling factor {_sf(check.scaling_factor)}); "
        f"exposed communication {format_ns(check.exposed_comm_ns)}",
        markup=False,
    )
    _render_dimensions(report, console)
    _render_predictions(report, console)
    _render_targets(report, console)


_PREDICTION_COLUMNS = [
    Col("link", justify="left", wrap=True),
    Col("world", drop=11),
    Col("compression", drop=12),
    Col("buckets", justify="left", drop=13),
    Col("iteration"),
    Col("exposed", drop=3),
    Col("T_single", drop=7),
    Col("scaling factor"),
    Col("no-overlap iteration", drop=9),
    Col("no-overlap scaling factor", drop=2),
    Col("perfect-overlap iteration", drop=10),
    Col("perfect-overlap scaling factor", drop=8),
]
"""The columns of the predictions: each scenario's predicted iteration and scaling factor, then its
bounds (every collective after compute: no overlap; every collective hidden: perfect overlap). The
settings a sweep varies (world, compression, buckets) are always shown; those it keeps are left out
first when the table is too wide."""


def _settings_shown(columns: list[Col], rows: list[list[str]]) -> list[Col]:
    """Return the columns with the settings that differ between scenarios never left out.

    The link wraps only between the links of named dimensions (``tp=…, dp=…``), never inside one.
    """
    from dataclasses import replace

    shown = [
        replace(column, drop=0) if 1 <= i <= 3 and len({r[i] for r in rows}) > 1 else column
        for i, column in enumerate(columns)
    ]
    return [replace(shown[0], wrap=any(", " in r[0] for r in rows)), *shown[1:]]


def _render_predictions(report: WhatIfReport, console: Console) -> None:
    """Print the table of predictions, one row per scenario.

    The perfect-overlap bound, when the same in every scenario (communication hides completely
    under compute at every setting), is said once below the table instead of in two columns.
    """
    title = (
        f"predictions (efficiency {report.efficiency}, {report.algorithm}, "
        f"{_latency(report)}, codec {_gbps(report.codec_gbps) if report.codec_gbps else 'free'})"
    )
    rows = [
        [
            _link(row),
            str(row.world_size),
            f"{row.compression:g}×",
            row.buckets,
            format_ns(row.iteration_ns),
            format_ns(row.exposed_comm_ns),
            format_ns(row.single_ns),
            _sf(row.scaling_factor),
            format_ns(row.no_overlap_ns),
            _sf(row.no_overlap_scaling_factor),
            format_ns(row.perfect_overlap_ns),
            _sf(row.perfect_overlap_scaling_factor),
        ]
        for row in report.scenarios
    ]
    columns = _settings_shown(_PREDICTION_COLUMNS, rows)
    constant = len(rows) > 1 and len({(r[10], r[11]) for r in rows}) == 1
    if constant:
        columns, rows = columns[:10], [r[:10] for r in rows]
    print_table(console, title, columns, rows)
    if constant:
        first = report.scenarios[0]
        print_prose(
            console,
            f"perfect overlap (every collective hidden under compute): "
            f"{format_ns(first.perfect_overlap_ns)}, scaling factor "
            f"{_sf(first.perfect_overlap_scaling_factor)}, in every scenario",
            markup=False,
        )


def _render_targets(report: WhatIfReport, console: Console) -> None:
    """Print what reaches the target scaling factor, one line per search."""
    for target in report.targets:
        goal = f"scaling factor {target.target_scaling_factor:g} at world size {target.world_size}"
        if target.solve == "bandwidth":
            needed = target.bandwidth_gbps
            answer = (
                f"bandwidth ≥ {needed:.3g} Gbit/s" if needed is not None else "out of reach at any bandwidth"
            )
            print_prose(console, f"{goal}: {answer} (no compression)", markup=False)
        else:
            ratio = target.compression
            if ratio is None:
                answer = "out of reach by compression"
            elif ratio <= 1:
                answer = "reached without compression"
            else:
                answer = f"compression ≥ {ratio:.3g}×"
            print_prose(console, f"{goal} on {_gbps(target.bandwidth_gbps)}: {answer}", markup=False)


def render_seed_report(report: SeedReport, console: Console) -> None:
    """Print the report of a seed backward profile (:func:`timeline.results.whatif.build_seed_report`)."""
    profile = report.backward_profile
    table_source = report.vector_add_cost or "none: reductions free"
    print_prose(
        console,
        f"what-if: backward profile {profile.model} ({profile.path}): {profile.batches} batch(es), "
        f"{profile.gradients} gradients, {profile.gradient_bytes / 2**20:.1f} MiB, backward "
        f"{format_ns(profile.backward_ns)}",
        markup=False,
    )
    print_prose(
        console,
        f"T_single {format_ns(report.single_ns)} (--single-step-ms); vector-add cost {table_source}",
        markup=False,
    )
    columns = [
        Col("link"),
        Col("world", drop=11),
        Col("compression", drop=12),
        Col("buckets", justify="left", drop=13),
        Col("all-reduces", drop=7),
        Col("iteration"),
        Col("exposed", drop=3),
        Col("scaling factor"),
        Col("no-overlap iteration", drop=8),
        Col("no-overlap scaling factor", drop=2),
    ]
    rows = [
        [
            _gbps(row.bandwidth_gbps),
            str(row.world_size),
            f"{row.compression:g}×",
            row.buckets,
            str(row.fused_buckets),
            format_ns(row.iteration_ns),
            format_ns(row.exposed_comm_ns),
            _sf(row.scaling_factor),
            format_ns(row.no_overlap_ns),
            _sf(row.no_overlap_scaling_factor),
        ]
        for row in report.scenarios
    ]
    title = "predictions (the seed paper's simulator: ring all-reduce on the full link, in order)"
    print_table(console, title, _settings_shown(columns, rows), rows)
