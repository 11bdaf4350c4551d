"""``timeline convert``: write the canonical events frame of traces as one Parquet file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cli.common import (
    CommKernelOption,
    IncludePythonOption,
    PathsArgument,
    RankOption,
    RankRegexOption,
    fail,
    load_trace,
    user_errors,
)
from timeline.importers.files import expand_paths

__all__ = ["convert_command"]


def convert_command(
    paths: PathsArgument,
    output: Annotated[Path, typer.Option("-o", "--output", help="The Parquet file to write.")],
    force: Annotated[bool, typer.Option("--force", help="Overwrite OUTPUT if it exists.")] = False,
    rank: RankOption = None,
    rank_regex: RankRegexOption = None,
    comm_kernel: CommKernelOption = None,
    include_python: IncludePythonOption = False,
) -> None:
    """Write the canonical events frame of traces as Parquet; every command reads it back.

    Exit codes: 0 success, 2 bad input.
    """
    with user_errors():
        inputs = expand_paths(paths)
        target = output.resolve()
        if target in inputs:
            fail(f"{output}: is one of the inputs; choose another output file (inputs are never modified)")
        if output.exists() and not force:
            fail(f"{output}: exists; pass --force to overwrite it")
        if not output.parent.exists():
            fail(f"{output.parent}: no such directory")
        trace = load_trace(
            paths, rank=rank, rank_regex=rank_regex, comm_kernels=comm_kernel, include_python=include_python
        )
        partial = output.with_name(f".{output.name}.partial")
        try:
            trace.write_parquet(partial)
            partial.replace(output)
        finally:
            partial.unlink(missing_ok=True)
    typer.echo(f"wrote {trace.events.height:,} events of {len(trace.ranks)} rank(s) to {output}", err=True)
