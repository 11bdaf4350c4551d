"""The what-if and seed reports (:mod:`timeline.results.whatif`) as text and a table.

Takes a :class:`~timeline.results.whatif.WhatIfReport` or a :class:`~timeline.results.whatif.SeedReport`
and prints what it holds; computes nothing.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

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


def _render_dimensions(report: WhatIfReport, console: Console) -> None:
    """Print the dimensions of the trace's collectives, when a setting names one."""
    if not report.names_dimensions:
        return
    described = [
        f"{d.dimension} ({len(d.groups)} group(s) of {'/'.join(map(str, d.group_sizes))} ranks, "
        f"{d.collectives} collectives)"
        for d in report.dimensions
    ]
    console.print(
        f"dimensions: {', '.join(described) or 'none'}; the others keep the link of every collective"
    )


def _sf(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def render_whatif_report(report: WhatIfReport, console: Console) -> None:
    """Print the report as text and tables."""
    check = report.self_replay
    link = _gbps(report.link_gbps) if report.link_gbps is not None else "unknown"
    console.print(
        f"what-if: {len(report.ranks)} rank(s) ({', '.join(report.modes)}), "
        f"{len(report.iterations) or 'no'} iteration(s), {report.collectives} collectives; "
        f"world size {report.world_size}; measured link {link} ({report.link_source}); "
        f"gradient-ready times from {report.gradient_source}"
    )
    for note in report.notes:
        console.print(f"note: {note}", markup=False)
    max_error = check.max_error_ratio
    console.print(
        f"measured {format_ns(check.measured_ns)}/iteration; "
        f"self-replay {format_ns(check.predicted_ns)} "
        f"(error {format_ratio(check.error_ratio)}, worst iteration "
        f"{format_ratio(max_error) if max_error is not None else '-'}); "
        f"T_single {format_ns(check.single_ns)} (scaling factor {_sf(check.scaling_factor)}); "
        f"exposed communication {format_ns(check.exposed_comm_ns)}"
    )
    _render_dimensions(report, console)
    _render_predictions(report, console)
    _render_targets(report, console)


def _render_predictions(report: WhatIfReport, console: Console) -> None:
    """Print the table of predictions, one row per scenario."""
    table = Table(
        title=f"predictions (efficiency {report.efficiency}, {report.algorithm}, "
        f"{_latency(report)}, codec "
        f"{_gbps(report.codec_gbps) if report.codec_gbps else 'free'})",
        title_justify="left",
        title_style="bold",
        header_style="bold",
    )
    columns = [
        "link",
        "world",
        "compression",
        "buckets",
        "iteration",
        "exposed",
        "T_single",
        "scaling factor",
        "no overlap",
        "SF",
        "perfect overlap",
        "SF",
    ]
    for i, name in enumerate(columns):  # the link of per-dimension settings wraps, the numbers never
        table.add_column(
            name, justify="left" if i == 3 else "right", no_wrap=i > 0, max_width=24 if i == 0 else None
        )
    for row in report.scenarios:
        table.add_row(
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
        )
    console.print(table)


def _render_targets(report: WhatIfReport, console: Console) -> None:
    """Print what reaches the target scaling factor, one line per search."""
    for target in report.targets:
        goal = f"scaling factor {target.target_scaling_factor:g} at world size {target.world_size}"
        if target.solve == "bandwidth":
            needed = target.bandwidth_gbps
            answer = (
                f"bandwidth ≥ {needed:.3g} Gbit/s" if needed is not None else "out of reach at any bandwidth"
            )
            console.print(f"{goal}: {answer} (no compression)")
        else:
            ratio = target.compression
            if ratio is None:
                answer = "out of reach by compression"
            elif ratio <= 1:
                answer = "reached without compression"
            else:
                answer = f"compression ≥ {ratio:.3g}×"
            console.print(f"{goal} on {_gbps(target.bandwidth_gbps)}: {answer}")


def render_seed_report(report: SeedReport, console: Console) -> None:
    """Print the report of a seed backward profile (:func:`timeline.results.whatif.build_seed_report`)."""
    profile = report.backward_profile
    table_source = report.vector_add_cost or "none: reductions free"
    console.print(
        f"what-if: backward profile {profile.model} ({profile.path}): {profile.batches} batch(es), "
        f"{profile.gradients} gradients, {profile.gradient_bytes / 2**20:.1f} MiB, backward "
        f"{format_ns(profile.backward_ns)}"
    )
    console.print(
        f"T_single {format_ns(report.single_ns)} (--single-step-ms); vector-add cost {table_source}"
    )
    table = Table(
        title="predictions (the seed paper's simulator: ring all-reduce on the full link, in order)",
        title_justify="left",
        title_style="bold",
        header_style="bold",
    )
    columns = ["link", "world", "compression", "buckets", "all-reduces", "iteration", "exposed"]
    columns += ["scaling factor", "no overlap", "SF"]
    for i, name in enumerate(columns):
        table.add_column(name, justify="left" if i == 3 else "right", no_wrap=True)
    for row in report.scenarios:
        table.add_row(
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
        )
    console.print(table)
