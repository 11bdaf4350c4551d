"""``timeline convert``: write the canonical events of traces as Parquet, or as Trace Event Format JSON.

Parquet: one file, or a dataset by rank. JSON (``--to perfetto``): one file that Perfetto UI and
chrome://tracing open.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from cli.common import fail, inputs_of, load, loading, user_errors
from cli.options import (
    CacheDirOption,
    CommKernelOption,
    IncludePythonOption,
    IterationRangeOption,
    NoCacheOption,
    PathsArgument,
    RankOption,
    RankRegexOption,
)

if TYPE_CHECKING:
    from timeline.run import Inputs

__all__ = ["convert_command"]


def convert_command(
    paths: PathsArgument,
    output: Annotated[
        Path,
        typer.Option(
            "-o",
            "--output",
            help="The Parquet file to write, the dataset directory, or the JSON file (--to perfetto).",
        ),
    ],
    to: Annotated[
        Literal["parquet", "perfetto", "chrome"],
        typer.Option(
            "--to",
            help="What to write: 'parquet' (the canonical events), or 'perfetto' (a synonym: 'chrome'): one "
            "Trace Event Format JSON file that Perfetto UI and chrome://tracing open, with tracks of the "
            "iterations and of the exposed and hidden communication of each rank.",
        ),
    ] = "parquet",
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Replace OUTPUT if it exists and timeline wrote it (a Parquet file or dataset from timeline "
            "convert); anything else is never replaced.",
        ),
    ] = False,
    partition_by_rank: Annotated[
        bool,
        typer.Option(
            "--partition-by-rank",
            help="Write a Parquet dataset, OUTPUT/rank=N/part-0.parquet, one rank per task (the default when "
            "OUTPUT has no suffix or is a directory).",
        ),
    ] = False,
    rank: RankOption = None,
    rank_regex: RankRegexOption = None,
    comm_kernel: CommKernelOption = None,
    include_python: IncludePythonOption = False,
    iteration_range: IterationRangeOption = None,
    no_cache: NoCacheOption = False,
    cache_dir: CacheDirOption = None,
) -> None:
    """Write the canonical events frame of traces as Parquet; every command reads it back.

    With --to perfetto: a Trace Event Format JSON file for Perfetto UI and chrome://tracing.

    Exit codes: 0 success, 2 bad input.
    """
    with user_errors():
        from timeline.execution.dataset import check_output, write_parquet_file
        from timeline.inputs import expand_datasets, expand_paths
        from timeline.outputs import check_output as check_not_read

        read = inputs_of(
            paths,
            rank=rank,
            rank_regex=rank_regex,
            comm_kernels=comm_kernel,
            include_python=include_python,
            iteration_range=iteration_range,
            no_cache=no_cache,
            cache_dir=cache_dir,
        )
        expand_paths(expand_datasets(paths))  # a missing input is named before the output
        check_not_read(output, reads=paths, option="-o", any_kind=True)
        if to != "parquet":
            if partition_by_rank:
                fail(f"--partition-by-rank: writes Parquet only, not --to {to}; drop one of the two options")
            if not output.parent.exists():
                fail(f"{output.parent}: no such directory")
            _write_perfetto(read, output, force=force)
            return
        dataset = partition_by_rank or output.suffix == "" or output.is_dir()
        # before loading: an output that cannot be written fails at once
        check_output(output, dataset=dataset, force=force)
        if not output.parent.exists():
            fail(f"{output.parent}: no such directory")
        if dataset:
            _write_dataset(read, output, force=force)
            return
        trace = load(read)
        write_parquet_file(trace, output, force=force)
    typer.echo(f"wrote {trace.events.height:,} events of {len(trace.ranks)} rank(s) to {output}", err=True)


def _write_dataset(inputs: Inputs, output: Path, *, force: bool) -> None:
    """Write a Parquet dataset partitioned by rank (``--partition-by-rank``)."""
    from timeline.execution.dataset import write_dataset
    from timeline.inputs import input_paths

    with loading() as (progress, warn):
        written = write_dataset(
            input_paths(inputs.paths),
            output,
            options=inputs.options,
            rank=inputs.rank,
            rank_regex=inputs.rank_regex,
            force=force,
            progress=progress,
        )
        warn(written.warnings)
    typer.echo(
        f"wrote {written.events:,} events of {len(written.ranks)} rank(s) to {output} "
        f"(a Parquet dataset partitioned by rank)",
        err=True,
    )


def _write_perfetto(inputs: Inputs, output: Path, *, force: bool) -> None:
    """Write the events, iterations and exposed and hidden communication as Trace Event Format JSON."""
    from timeline.analysis.iterations import assign_iterations
    from timeline.analysis.overlap import comm_intervals
    from timeline.execution.dataset import check_file_output, write_file
    from timeline.render.perfetto import is_perfetto_export, render_perfetto

    kind = "a trace written by timeline convert --to perfetto"
    check_file_output(output, force=force, recognise=is_perfetto_export, kind=kind)
    trace = load(inputs)
    events = trace.events
    document = render_perfetto(events, windows=assign_iterations(events), comm=comm_intervals(events))
    write_file(document, output, force=force, recognise=is_perfetto_export, kind=kind)
    typer.echo(
        f"wrote {events.height:,} events of {len(trace.ranks)} rank(s) and timeline's tracks to {output} "
        "(Trace Event Format JSON: open it in Perfetto UI or chrome://tracing)",
        err=True,
    )
