"""``timeline convert``: write the canonical events of traces as Parquet, or as Trace Event Format JSON.

What is written is what the output's name says (:func:`output_form`): ``NAME.parquet`` one Parquet
file; a directory name (``DIR/``, an existing directory, a name without a suffix, ``NAME.d``) or
``--dataset`` a Parquet dataset by rank, which every command reads rank by rank; with ``--to
perfetto``, ``NAME.json`` a Trace Event Format file that Perfetto UI and chrome://tracing open. Any
other name is refused with the list of these forms.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from cli.common import RunFlags, be_quiet, fail, inputs_of, load, loading, user_errors
from cli.options import (
    CacheDirOption,
    CommKernelOption,
    IncludePythonOption,
    IterationRangeOption,
    NoCacheOption,
    PathsArgument,
    QuietOption,
    RankOption,
    RankRegexOption,
)

if TYPE_CHECKING:
    from timeline.run import Inputs

__all__ = ["FORMS", "convert_command", "output_form"]

FORMS = (
    "-o NAME.parquet (one Parquet file), -o DIR/ or --dataset (a Parquet dataset by rank: DIR/rank=N/), "
    "--to perfetto -o NAME.json (Trace Event Format for Perfetto UI and chrome://tracing)"
)
"""What ``timeline convert`` writes, named as an error lists them."""

_DIRECTORY_SUFFIXES = ("", ".d")

OutputOption = Annotated[
    str,
    typer.Option(
        "-o",
        "--output",
        metavar="OUT",
        help="What to write, as its name says: NAME.parquet (one Parquet file), DIR/ or a name without "
        "a suffix (a Parquet dataset by rank), NAME.json with --to perfetto. Other names are refused.",
    ),
]
ToOption = Annotated[
    Literal["parquet", "perfetto", "chrome"],
    typer.Option(
        "--to",
        help="What to write: 'parquet' (the canonical events), or 'perfetto' (a synonym: 'chrome'): one "
        "Trace Event Format JSON file that Perfetto UI and chrome://tracing open, with tracks of the "
        "iterations and of the exposed and hidden communication of each rank.",
    ),
]
ForceOption = Annotated[
    bool,
    typer.Option(
        "--force",
        help="Replace OUTPUT if it exists and timeline wrote it (a Parquet file or dataset from timeline "
        "convert); anything else is never replaced.",
    ),
]
DatasetOption = Annotated[
    bool,
    typer.Option(
        "--dataset",
        help="Write a Parquet dataset by rank, OUT/rank=N/part-0.parquet, one rank per task, whatever "
        "OUT's name (the default for DIR/, an existing directory, or a name without a suffix).",
    ),
]
PartitionByRankOption = Annotated[
    bool, typer.Option("--partition-by-rank", hidden=True, help="The old name of --dataset.")
]


def output_form(
    output: str, *, to: str, dataset: bool, dataset_option: str = "--dataset"
) -> Literal["file", "dataset", "json"]:
    """Return what an output's name asks for: one Parquet ``file``, a ``dataset`` by rank, or ``json``.

    Raises
    ------
    UsageError
        A name that is none of them (``x.csv``), ``--dataset`` with ``--to perfetto``, or a Parquet
        name with ``--to perfetto``; the message lists the forms (:data:`FORMS`).
    """
    from timeline.errors import UsageError, shown

    path = Path(output)
    directory = output.endswith(("/", "\\")) or path.is_dir() or path.suffix.lower() in _DIRECTORY_SUFFIXES
    if to != "parquet":
        if dataset:
            msg = f"{dataset_option}: writes Parquet only, not --to {to}; drop one of the two options"
            raise UsageError(msg)
        if path.suffix.lower() == ".json" and not directory:
            return "json"
        msg = f"{shown(output)}: --to {to} writes one JSON file: name it NAME.json; convert writes {FORMS}"
        raise UsageError(msg)
    if dataset or directory:
        return "dataset"
    if path.suffix.lower() == ".parquet":
        return "file"
    msg = f"{shown(output)}: convert does not write {path.suffix} files; it writes {FORMS}"
    raise UsageError(msg)


def convert_command(
    paths: PathsArgument,
    output: OutputOption,
    to: ToOption = "parquet",
    force: ForceOption = False,
    dataset: DatasetOption = False,
    partition_by_rank: PartitionByRankOption = False,
    quiet: QuietOption = False,
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
    It writes files, not a result to print: no --ranks, --iterations, --json or --markdown.

    Exit codes: 0 success, 2 bad input.
    """
    flags = RunFlags(
        rank=rank,
        rank_regex=rank_regex,
        comm_kernels=comm_kernel,
        include_python=include_python,
        iteration_range=iteration_range,
        no_cache=no_cache,
        cache_dir=cache_dir,
    )
    _convert(
        paths,
        flags,
        output=output,
        to=to,
        force=force,
        dataset=dataset,
        old_dataset=partition_by_rank,
        quiet=quiet,
    )


def _convert(
    paths: list[str],
    flags: RunFlags,
    *,
    output: str,
    to: str,
    force: bool,
    dataset: bool,
    old_dataset: bool,
    quiet: bool,
) -> None:
    """Write the events of the run of ``paths`` to ``output`` in the form its name asks for.

    ``old_dataset``: ``--partition-by-rank``, the old name of ``--dataset``.
    """
    be_quiet(quiet)
    with user_errors():
        from timeline.execution.dataset import check_output, write_parquet_file
        from timeline.inputs import expand_datasets, expand_paths
        from timeline.outputs import check_output as check_not_read

        read = inputs_of(paths, flags)
        expand_paths(expand_datasets(paths))  # a missing input is named before the output
        target = Path(output)
        check_not_read(target, reads=paths, option="-o", any_kind=True)
        form = output_form(
            output,
            to=to,
            dataset=dataset or old_dataset,
            dataset_option="--dataset" if dataset else "--partition-by-rank",
        )
        if form == "json":
            if not target.parent.exists():
                fail(f"{target.parent}: no such directory")
            _write_perfetto(read, target, force=force, quiet=quiet)
            return
        # before loading: an output that cannot be written fails at once
        check_output(target, dataset=form == "dataset", force=force)
        if not target.parent.exists():
            fail(f"{target.parent}: no such directory")
        if form == "dataset":
            _write_dataset(read, target, force=force, quiet=quiet)
            return
        trace = load(read)
        write_parquet_file(trace, target, force=force)
    if not quiet:
        typer.echo(
            f"wrote {trace.events.height:,} events of {len(trace.ranks)} rank(s) to {output}", err=True
        )


def _write_dataset(inputs: Inputs, output: Path, *, force: bool, quiet: bool) -> None:
    """Write a Parquet dataset partitioned by rank (``--dataset``)."""
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
    if not quiet:
        typer.echo(
            f"wrote {written.events:,} events of {len(written.ranks)} rank(s) to {output} "
            f"(a Parquet dataset partitioned by rank)",
            err=True,
        )


def _write_perfetto(inputs: Inputs, output: Path, *, force: bool, quiet: bool) -> None:
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
    if quiet:
        return
    typer.echo(
        f"wrote {events.height:,} events of {len(trace.ranks)} rank(s) and timeline's tracks to {output} "
        "(Trace Event Format JSON: open it in Perfetto UI or chrome://tracing)",
        err=True,
    )
