"""``timeline whatif``: predict iteration time and scaling on other links, world sizes, buckets, compression.

Wires :mod:`timeline.whatif` together: builds the run's dependency graph, checks it by replaying
the trace under its own conditions (the self-replay error), sweeps the requested settings and, with
``--target-sf``, searches the bandwidth or compression ratio that reaches a scaling factor.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

import msgspec
import typer
from rich.console import Console
from rich.table import Table

from cli.common import (
    CommKernelOption,
    IncludePythonOption,
    PathsArgument,
    RankOption,
    RankRegexOption,
    echo_warnings,
    format_ns,
    format_ratio,
    user_errors,
)
from cli.execution import ExecutorOption, RayAddressOption, graph_inputs, inputs_of
from timeline.analysis.links import parse_link_gbps
from timeline.errors import UsageError
from timeline.whatif.bucketing import BucketPolicy, parse_bucket_policy
from timeline.whatif.compression import Compression
from timeline.whatif.costs import ALGORITHMS, Algorithm, parse_duration_s
from timeline.whatif.graph import TraceGraph
from timeline.whatif.replay import Efficiency, Prediction, Scenario, self_replay
from timeline.whatif.sweep import solve_bandwidth, solve_compression, sweep

__all__ = [
    "REPORT_VERSION",
    "build_whatif_report",
    "parse_bandwidths",
    "render_whatif_report",
    "whatif_command",
]

REPORT_VERSION = 1

_UNIT = re.compile(r"^\s*[0-9]*\.?[0-9]+\s*(?P<unit>[A-Za-z/]+)\s*$")


def parse_bandwidths(text: str) -> list[float | None]:
    """Read ``10,25,40,100Gbps`` (a unit on the last item applies to the bare numbers), presets, ``measured``.

    Examples
    --------
    >>> parse_bandwidths("10,25,100Gbps"), parse_bandwidths("800Mbps,measured,ib-hdr")
    ([10.0, 25.0, 100.0], [0.8, None, 200.0])
    """
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise UsageError(f"--bandwidth {text!r}: give one or more bandwidths, e.g. 10,25,40,100Gbps")
    unit = ""
    last = _UNIT.match(items[-1])
    if last is not None:
        unit = last["unit"]
    out: list[float | None] = []
    for item in items:
        if item.lower() == "measured":
            out.append(None)
            continue
        bare = re.fullmatch(r"[0-9]*\.?[0-9]+", item) is not None
        try:
            out.append(parse_link_gbps(item + unit if bare else item))
        except UsageError:
            msg = f"--bandwidth {item!r}: not a bandwidth; give Gbit/s (10, 25G, 12.5GB/s) or a preset"
            raise UsageError(msg) from None
    return out


def _parse_list(text: str, option: str, kind: type[int] | type[float]) -> list[Any]:
    values: list[Any] = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        if item.lower() == "measured" and kind is int:
            values.append(None)
            continue
        try:
            values.append(kind(item))
        except ValueError:
            raise UsageError(f"{option} {text!r}: {item!r} is not a number") from None
    if not values:
        raise UsageError(f"{option} {text!r}: give at least one value")
    return values


def _parse_efficiency(text: str) -> Efficiency:
    spelled = text.strip().lower()
    if spelled in ("observed", "uniform", "full"):
        return spelled  # type: ignore[return-value]
    try:
        value = float(spelled.rstrip("%")) / (100 if spelled.endswith("%") else 1)
    except ValueError:
        raise UsageError(
            f"--efficiency {text!r}: use observed, uniform, full, or a fraction such as 0.8"
        ) from None
    if not 0 < value <= 1:
        raise UsageError(f"--efficiency {text!r}: a fraction must be in (0, 1]")
    return value


def _prediction_summary(prediction: Prediction) -> dict[str, Any]:
    iterations = prediction.iterations.to_dicts()
    errors = [row["error_ratio"] for row in iterations if row["error_ratio"] is not None]
    return {
        "measured_ns": round(prediction.measured_ns),
        "predicted_ns": round(prediction.iteration_ns),
        "error_ratio": prediction.error_ratio,
        "max_error_ratio": max(errors) if errors else None,
        "single_ns": round(prediction.single_ns),
        "scaling_factor": prediction.scaling_factor,
        "exposed_comm_ns": round(prediction.exposed_comm_ns),
        "iterations": iterations,
    }


def build_whatif_report(
    graph: TraceGraph,
    *,
    bandwidths: list[float | None],
    world_sizes: list[int | None],
    compressions: list[float],
    buckets: list[BucketPolicy],
    efficiency: Efficiency,
    latency_s: float,
    algorithm: Algorithm,
    codec_gbps: float | None,
    target_sf: float | None,
    iterations: list[int] | None,
    link_source: str,
) -> dict[str, Any]:
    """Return everything ``timeline whatif`` prints, as plain data (the ``--json`` layout)."""
    check = self_replay(graph)
    if iterations is not None:
        from timeline.whatif.replay import replay

        check = replay(graph, Scenario(), iterations=iterations)
    table = sweep(
        graph,
        bandwidths_gbps=bandwidths,
        world_sizes=world_sizes,
        compressions=compressions,
        buckets=buckets,
        efficiency=efficiency,
        latency_s=latency_s,
        algorithm=algorithm,
        codec_gbps=codec_gbps,
        iterations=iterations,
    )
    targets: list[dict[str, Any]] = []
    if target_sf is not None:
        codec = (
            Compression(codec_bytes_per_s=codec_gbps * 1e9 / 8) if codec_gbps is not None else Compression()
        )
        base = Scenario(efficiency=efficiency, latency_s=latency_s, algorithm=algorithm, compression=codec)
        for world in world_sizes:
            scenario = Scenario(
                world_size=world,
                efficiency=efficiency,
                latency_s=latency_s,
                algorithm=algorithm,
                buckets=buckets[0],
            )
            needed = solve_bandwidth(graph, target_sf, scenario=scenario, iterations=iterations)
            targets.append(
                {
                    "target_scaling_factor": target_sf,
                    "world_size": world if world is not None else graph.world_size,
                    "solve": "bandwidth",
                    "bandwidth_gbps": needed,
                    "compression": 1.0,
                }
            )
            for bandwidth in bandwidths:
                base_at = Scenario(
                    bandwidth_gbps=bandwidth,
                    world_size=world,
                    efficiency=base.efficiency,
                    latency_s=latency_s,
                    algorithm=algorithm,
                    buckets=buckets[0],
                    compression=base.compression,
                )
                ratio = solve_compression(graph, target_sf, scenario=base_at, iterations=iterations)
                targets.append(
                    {
                        "target_scaling_factor": target_sf,
                        "world_size": world if world is not None else graph.world_size,
                        "solve": "compression",
                        "bandwidth_gbps": bandwidth if bandwidth is not None else graph.link_gbps,
                        "compression": ratio,
                    }
                )
    warnings = list(graph.warnings) + list(check.warnings)
    iteration_numbers = graph.windows.get_column("iteration").drop_nulls().unique().sort().to_list()
    return {
        "version": REPORT_VERSION,
        "ranks": list(graph.ranks),
        "modes": sorted(set(graph.modes.values())),
        "iterations": iteration_numbers,
        "world_size": graph.world_size,
        "link_gbps": graph.link_gbps,
        "link_source": link_source,
        "gradient_source": graph.gradient_source,
        "collectives": len(graph.ops),
        "efficiency": efficiency,
        "latency_s": latency_s,
        "algorithm": algorithm,
        "codec_gbps": codec_gbps,
        "self_replay": _prediction_summary(check),
        "scenarios": table.to_dicts(),
        "targets": targets,
        "warnings": warnings,
    }


def _gbps(value: float | None) -> str:
    return "-" if value is None else f"{value:g} Gbit/s"


def _sf(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def render_whatif_report(report: dict[str, Any], console: Console) -> None:
    """Print the report as text and tables."""
    check = report["self_replay"]
    link = _gbps(report["link_gbps"]) if report["link_gbps"] is not None else "unknown"
    console.print(
        f"what-if: {len(report['ranks'])} rank(s) ({', '.join(report['modes'])}), "
        f"{len(report['iterations']) or 'no'} iteration(s), {report['collectives']} collectives; "
        f"world size {report['world_size']}; measured link {link} ({report['link_source']}); "
        f"gradient-ready times from {report['gradient_source']}"
    )
    max_error = check["max_error_ratio"]
    console.print(
        f"measured {format_ns(check['measured_ns'])}/iteration; "
        f"self-replay {format_ns(check['predicted_ns'])} "
        f"(error {format_ratio(check['error_ratio'])}, worst iteration "
        f"{format_ratio(max_error) if max_error is not None else '-'}); "
        f"T_single {format_ns(check['single_ns'])} (scaling factor {_sf(check['scaling_factor'])}); "
        f"exposed communication {format_ns(check['exposed_comm_ns'])}"
    )
    table = Table(
        title=f"predictions (efficiency {report['efficiency']}, {report['algorithm']}, "
        f"latency {report['latency_s'] * 1e6:g} µs/step, codec "
        f"{_gbps(report['codec_gbps']) if report['codec_gbps'] else 'free'})",
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
    for i, name in enumerate(columns):
        table.add_column(name, justify="left" if i == 3 else "right", no_wrap=True)
    for row in report["scenarios"]:
        table.add_row(
            _gbps(row["bandwidth_gbps"]),
            str(row["world_size"]),
            f"{row['compression']:g}×",
            row["buckets"],
            format_ns(row["iteration_ns"]),
            format_ns(row["exposed_comm_ns"]),
            format_ns(row["single_ns"]),
            _sf(row["scaling_factor"]),
            format_ns(row["no_overlap_ns"]),
            _sf(row["no_overlap_scaling_factor"]),
            format_ns(row["perfect_overlap_ns"]),
            _sf(row["perfect_overlap_scaling_factor"]),
        )
    console.print(table)
    for target in report["targets"]:
        goal = f"scaling factor {target['target_scaling_factor']:g} at world size {target['world_size']}"
        if target["solve"] == "bandwidth":
            needed = target["bandwidth_gbps"]
            answer = (
                f"bandwidth ≥ {needed:.3g} Gbit/s" if needed is not None else "out of reach at any bandwidth"
            )
            console.print(f"{goal}: {answer} (no compression)")
        else:
            ratio = target["compression"]
            if ratio is None:
                answer = "out of reach by compression"
            elif ratio <= 1:
                answer = "reached without compression"
            else:
                answer = f"compression ≥ {ratio:.3g}×"
            console.print(f"{goal} on {_gbps(target['bandwidth_gbps'])}: {answer}")


def whatif_command(
    paths: PathsArgument,
    bandwidth: Annotated[
        str | None,
        typer.Option(
            "--bandwidth",
            "-b",
            help="Link bandwidths to predict, one direction, comma-separated: 10,25,40,100Gbps (a unit on "
            "the "
            "last applies to all), presets (100gbe, ib-hdr), 'measured'. Default: the measured link.",
            show_default=False,
        ),
    ] = None,
    world_size: Annotated[
        str | None,
        typer.Option(
            "--world-size",
            "-n",
            help="World sizes to predict, comma-separated (8,64); collectives over the whole world scale, "
            "compute per rank stays (same batch per rank). Default: as measured.",
            show_default=False,
        ),
    ] = None,
    compression: Annotated[
        str,
        typer.Option("--compression", "-c", help="Gradient compression ratios, comma-separated (1,2,5)."),
    ] = "1",
    buckets: Annotated[
        str,
        typer.Option(
            "--buckets",
            help="Gradient bucketing, comma-separated: measured, ddp:<cap MiB>[:<first MiB>], "
            "fusion:<MiB>[:<cycle ms>] (Horovod). Rebuilt from the gradient-ready times.",
        ),
    ] = "measured",
    efficiency: Annotated[
        str | None,
        typer.Option(
            "--efficiency",
            help="Fraction of the link collectives achieve: observed (each as in the trace), uniform (one "
            "figure per collective kind), full, or a fraction (0.8). Default: observed when the measured "
            "link is known, else full.",
            show_default=False,
        ),
    ] = None,
    link_gbps: Annotated[
        str | None,
        typer.Option(
            "--link-gbps",
            help="The link the trace ran on (Gbit/s or a preset); default: the capture manifest's link_gbps.",
            show_default=False,
        ),
    ] = None,
    latency: Annotated[
        str,
        typer.Option("--latency", help="Latency of one step of a collective (α): 5us, 0.2ms."),
    ] = "0",
    algorithm: Annotated[
        str, typer.Option("--algorithm", help="Collective algorithm of the cost model: ring or tree.")
    ] = "ring",
    codec_gbps: Annotated[
        float | None,
        typer.Option(
            "--codec-gbps",
            min=0.0,
            help="Compression codec throughput, Gbit/s of gradient for encoding and for decoding; "
            "default: free (an upper bound on what compression gives).",
            show_default=False,
        ),
    ] = None,
    target_sf: Annotated[
        float | None,
        typer.Option(
            "--target-sf",
            min=0.0,
            max=1.0,
            help="Also search the bandwidth, and the compression ratio at each bandwidth, that reach this "
            "scaling factor.",
            show_default=False,
        ),
    ] = None,
    iteration: Annotated[
        list[int] | None,
        typer.Option(
            "--iteration", help="Average over these iterations only (ProfilerStep numbers); repeatable."
        ),
    ] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print one JSON object instead of tables.")
    ] = False,
    rank: RankOption = None,
    rank_regex: RankRegexOption = None,
    comm_kernel: CommKernelOption = None,
    include_python: IncludePythonOption = False,
    executor: ExecutorOption = None,
    ray_address: RayAddressOption = None,
) -> None:
    """Predict iteration time, exposed communication and scaling factor under other conditions.

    Replays the run's dependency graph (compute, gradient-ready times, collectives, waits) with
    other link bandwidths, world sizes, bucket sizes and compression ratios; first checks that the
    measured conditions reproduce the measured iteration time (self-replay error).

    Exit codes: 0 success, 2 bad input (one 'error:' line on stderr).
    """
    with user_errors():
        bandwidths: list[float | None] = parse_bandwidths(bandwidth) if bandwidth is not None else [None]
        worlds: list[int | None] = _parse_list(world_size, "--world-size", int) if world_size else [None]
        ratios = [float(r) for r in _parse_list(compression, "--compression", float)]
        for ratio in ratios:
            Compression(ratio=ratio)
        for world in worlds:
            if world is not None and world < 1:
                raise UsageError(f"--world-size {world}: must be at least 1")
        policies = [parse_bucket_policy(item) for item in buckets.split(",") if item.strip()]
        if not policies:
            raise UsageError("--buckets: give at least one policy (measured, ddp:25, fusion:64:5)")
        if algorithm not in ALGORITHMS:
            raise UsageError(f"--algorithm {algorithm!r}: use ring or tree")
        latency_s = parse_duration_s(latency)
        measured_link = parse_link_gbps(link_gbps) if link_gbps is not None else None
        inputs = inputs_of(paths, rank, rank_regex, comm_kernel, include_python, executor, ray_address)
        graph = graph_inputs(inputs, link_gbps=measured_link)
        link_source = (
            "--link-gbps"
            if measured_link is not None
            else ("capture manifest" if graph.link_gbps is not None else "not recorded")
        )
        chosen: Efficiency
        if efficiency is not None:
            chosen = _parse_efficiency(efficiency)
        elif graph.link_gbps is None and any(b is not None for b in bandwidths):
            chosen = "full"
            typer.echo(
                "note: the measured link is unknown (pass --link-gbps); predictions at other bandwidths "
                "assume "
                "the full link (--efficiency full)",
                err=True,
            )
        else:
            chosen = "observed"
        report = build_whatif_report(
            graph,
            bandwidths=bandwidths,
            world_sizes=worlds,
            compressions=ratios,
            buckets=policies,
            efficiency=chosen,
            latency_s=latency_s,
            algorithm="tree" if algorithm == "tree" else "ring",
            codec_gbps=codec_gbps if codec_gbps else None,
            target_sf=target_sf,
            iterations=iteration or None,
            link_source=link_source,
        )
    echo_warnings(report["warnings"])
    if json_output:
        typer.echo(msgspec.json.encode(report).decode())
        return
    console = Console(highlight=False, soft_wrap=False, width=max(Console().width, 150))
    render_whatif_report(report, console)
