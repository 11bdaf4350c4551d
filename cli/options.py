"""The options the commands share, declared once (typer ``Annotated`` types).

Importing this module imports typer alone: every command's signature is built from it at start-up.
"""

from __future__ import annotations

from typing import Annotated

import typer

__all__ = [
    "RANK_MAX",
    "ROWS_MAX",
    "AlignOption",
    "CacheDirOption",
    "CodecOption",
    "CommKernelOption",
    "CsvOption",
    "DimensionOption",
    "ExecutorOption",
    "GpusPerNodeOption",
    "IncludePythonOption",
    "IterationRangeOption",
    "IterationsOption",
    "JsonOption",
    "LimitAlias",
    "LinkOption",
    "MarkdownOption",
    "NoCacheOption",
    "NoColorOption",
    "PathsArgument",
    "QuietOption",
    "RankOption",
    "RankRegexOption",
    "RanksOption",
    "RayAddressOption",
    "TopOption",
    "VerboseOption",
    "top_of",
]

ROWS_MAX = 1_000_000
"""The most rows a table option (``--top``, ``--limit``) takes: a bound that keeps counts in range."""
RANK_MAX = 2**31 - 1
"""The largest rank (ranks are ``Int32``)."""

PathsArgument = Annotated[
    list[str],
    typer.Argument(
        help="Trace files, directories or glob patterns: PyTorch profiler JSON (.json/.json.gz), a Horovod "
        "timeline, Nsight Systems exports (.sqlite, .nsys-rep), or Parquet from 'timeline convert'.",
        show_default=False,
    ),
]

RankOption = Annotated[
    int | None,
    typer.Option(
        "--rank",
        min=0,
        max=RANK_MAX,
        help="Rank of a single file that names none (no distributedInfo, no rank in its name).",
    ),
]

RankRegexOption = Annotated[
    str | None,
    typer.Option(
        "--rank-regex",
        help=r"Regex with one group of digits that finds the rank in file names, e.g. 'node\d+_gpu(\d+)'.",
    ),
]

CommKernelOption = Annotated[
    list[str] | None,
    typer.Option(
        "--comm-kernel",
        help="Extra regex for communication kernels (custom all-reduce kernels); repeatable. Syntax of "
        "Rust's regex crate (polars matches with it): no look-around, no backreferences.",
    ),
]

IterationRangeOption = Annotated[
    str | None,
    typer.Option(
        "--iteration-range",
        metavar="REGEX",
        help="Nsight Systems exports: the NVTX ranges whose names match this regex are the iterations "
        "(a group of digits, if any, numbers them). Default: ProfilerStep#N ranges, else ranges named like "
        "step, iteration or train_step; without any, the whole capture is one iteration.",
        show_default=False,
    ),
]

IncludePythonOption = Annotated[
    bool, typer.Option("--include-python", help="Keep python_function events (dropped by default).")
]

ExecutorOption = Annotated[
    str | None,
    typer.Option(
        "--executor",
        help="Analyse rank by rank in parallel tasks: 'local' (processes on this machine) or 'ray' (Ray "
        "tasks; needs timeline[ray]). Same results; memory bounded by one rank per worker. Default: local "
        "for a Parquet dataset, several files of 24 MiB or more, or one trace of 128 MiB of JSON or more; "
        "else in memory.",
        show_default=False,
    ),
]

RayAddressOption = Annotated[
    str | None,
    typer.Option(
        "--ray-address",
        help="The Ray cluster to run on (ray://HEAD:10001, HEAD:6379, or auto); implies --executor ray. "
        "Default: RAY_ADDRESS, else a Ray instance started on this machine.",
        show_default=False,
    ),
]

CodecOption = Annotated[
    float | None,
    typer.Option(
        "--codec-gbps",
        help="Your gradient codec's throughput, Gbit/s of gradient encoded (and decoded) per second: the "
        "compression finding then rests on it, and is ranked by its gain, instead of an assumed speed "
        "ranked after the findings measured from the trace (docs/diagnosis.md).",
        show_default=False,
    ),
]
LinkOption = Annotated[
    str | None,
    typer.Option(
        "--link-gbps",
        help="The link to measure utilisation against, one direction: Gbit/s (100, 25G, 12.5GB/s) or a "
        "preset (10gbe, 25gbe, 100gbe, 400gbe, ib-edr, ib-hdr, ib-ndr, nvlink3, nvlink4, pcie4 …).",
        show_default=False,
    ),
]

AlignOption = Annotated[
    bool,
    typer.Option(
        "--align",
        help="Estimate each rank's clock offset from the ends of synchronising collectives and shift its "
        "events onto rank 0's clock first (ranks on different hosts).",
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")]

DimensionOption = Annotated[
    list[str] | None,
    typer.Option(
        "--dimension",
        metavar="DESCRIPTION=LABEL",
        help="Name the dimension of the process groups a description names, instead of the one read from "
        "it (mesh_tp -> tp): --dimension mesh_dp_replicate=ddp. Repeatable.",
        show_default=False,
    ),
]

GpusPerNodeOption = Annotated[
    int | None,
    typer.Option(
        "--gpus-per-node",
        min=1,
        max=RANK_MAX,
        help="Ranks per node, numbered node by node (torchrun's layout): tells which process groups and "
        "sends cross nodes. Default: the host names the traces record, when every rank's is known.",
        show_default=False,
    ),
]

NoCacheOption = Annotated[
    bool,
    typer.Option(
        "--no-cache",
        help="Decode the traces without the cache: read no frame from it, write none to it. By default "
        "each trace file's events are kept as Parquet in the cache folder after its first read, and later "
        "commands on the same unchanged file read them from there (docs/cache.md).",
    ),
]

CacheDirOption = Annotated[
    str | None,
    typer.Option(
        "--cache-dir",
        metavar="DIR",
        help="The cache folder. Default: TIMELINE_CACHE_DIR, else $XDG_CACHE_HOME/timeline, else "
        "~/.cache/timeline.",
        show_default=False,
    ),
]
RanksOption = Annotated[
    str | None,
    typer.Option(
        "--ranks",
        metavar="LIST",
        help="Only these ranks: numbers and ranges, comma-separated (0-3,7). Every figure is of them "
        "only; the output says so.",
        show_default=False,
    ),
]

IterationsOption = Annotated[
    str | None,
    typer.Option(
        "--iterations",
        metavar="LIST",
        help="Only these iterations (ProfilerStep numbers): numbers and ranges, comma-separated (2-4,7). "
        "Per-iteration figures are those of the whole run; per-rank figures are sums over them.",
        show_default=False,
    ),
]

TopOption = Annotated[
    int | None,
    typer.Option(
        "--top",
        min=1,
        max=ROWS_MAX,
        metavar="N",
        help="Rows per table where a list is cut (the largest first); --json has all.",
        show_default=False,
    ),
]

LimitAlias = Annotated[
    int | None,
    typer.Option("--limit", min=1, max=ROWS_MAX, hidden=True, help="The old name of --top."),
]


def top_of(top: int | None, limit: int | None, default: int) -> int:
    """Return the rows ``--top`` asks for (``--limit``, its old name, also works); ``default`` without either.

    Raises
    ------
    typer.BadParameter
        Both given.
    """
    if top is not None and limit is not None:
        raise typer.BadParameter("--limit is the old name of --top; give --top alone", param_hint="--limit")
    return top if top is not None else limit if limit is not None else default


MarkdownOption = Annotated[
    str | None,
    typer.Option(
        "--markdown",
        metavar="FILE",
        help="Write the result as markdown (for a pull-request comment or $GITHUB_STEP_SUMMARY) to this "
        "file; '-' prints it instead of the tables.",
        show_default=False,
    ),
]

CsvOption = Annotated[
    str | None,
    typer.Option(
        "--csv",
        metavar="FILE",
        help="Also write the tables as one CSV file: a 'table' column names each row's table, the other "
        "columns are the --json rows' fields (nanoseconds, ratios as fractions); '-' prints it instead "
        "of the tables.",
        show_default=False,
    ),
]

NoColorOption = Annotated[
    bool,
    typer.Option(
        "--no-color",
        help="Plain text, no colour or bold (also when NO_COLOR is set; piped output never has any).",
    ),
]

QuietOption = Annotated[
    bool,
    typer.Option("--quiet", "-q", help="Print nothing on success but errors (the exit code says the rest)."),
]

VerboseOption = Annotated[
    bool,
    typer.Option("--verbose", "-v", help="Print every note, not one line counting them."),
]
