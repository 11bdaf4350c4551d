"""``timeline init PATH...``: write starter budgets derived from a run, for ``timeline check``.

Exit codes: 0 written, 2 bad input or usage (a file in the way, a run with nothing to bound), 3 a
bug in timeline, 130 interrupted. The rule of the limits is in ``docs/ci.md`` ("Starter budgets").
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cli.common import RunFlags, inputs_of, loading, user_errors
from cli.options import (
    CacheDirOption,
    CommKernelOption,
    ExecutorOption,
    IncludePythonOption,
    IterationRangeOption,
    NoCacheOption,
    PathsArgument,
    RankOption,
    RankRegexOption,
    RayAddressOption,
)
from timeline.errors import shown

__all__ = ["init_command"]

OutputOption = Annotated[
    Path | None,
    typer.Option(
        "-o",
        "--output",
        help="The budget file to write. Default: ./timeline.toml.",
        show_default=False,
    ),
]
ForceOption = Annotated[
    bool,
    typer.Option(
        "--force", help="Replace a budget file an earlier 'timeline init' wrote (nothing else is replaced)."
    ),
]


def init_command(
    paths: PathsArgument,
    output: OutputOption = None,
    force: ForceOption = False,
    rank: RankOption = None,
    rank_regex: RankRegexOption = None,
    comm_kernel: CommKernelOption = None,
    include_python: IncludePythonOption = False,
    iteration_range: IterationRangeOption = None,
    executor: ExecutorOption = None,
    ray_address: RayAddressOption = None,
    no_cache: NoCacheOption = False,
    cache_dir: CacheDirOption = None,
) -> None:
    """Write starter budgets from a run you are happy with: limits at its worst iteration plus a margin.

    Writes ./timeline.toml (or -o FILE) for 'timeline check'; the run itself passes every budget.
    It writes a budget file, not a result to print: no --json or --markdown; the budgets hold for
    every rank and iteration, so no --ranks or --iterations.
    Exit codes: 0 written, 2 bad input or usage (one 'error:' line on stderr), 3 a bug in timeline,
    130 interrupted. See docs/ci.md.
    """
    target = output if output is not None else Path("timeline.toml")
    with user_errors():
        from timeline import __version__
        from timeline.budgets.runs import read_run
        from timeline.budgets.starter import check_starter_target
        from timeline.run import RunOptions

        check_starter_target(target, force=force)  # before the run is read: fail at once
        flags = RunFlags(
            rank=rank,
            rank_regex=rank_regex,
            comm_kernels=comm_kernel,
            include_python=include_python,
            executor=executor,
            ray_address=ray_address,
            iteration_range=iteration_range,
            no_cache=no_cache,
            cache_dir=cache_dir,
        )
        inputs = inputs_of(paths, flags)
        from timeline.outputs import check_output

        check_output(target, reads=inputs.paths, option="-o", any_kind=True)
        with loading() as (progress, warn):
            run = read_run(inputs, RunOptions(), match=False, progress=progress, warn=warn)
        from timeline.budgets.starter import render_starter, starter_budgets, write_starter

        starter = starter_budgets(run)
        write_starter(target, render_starter(starter, version=__version__), force=force)
    left_out = len(starter.budgets) - len(starter.written)
    note = f" ({left_out} left out: see the file's comments)" if left_out else ""
    count = len(starter.written)
    budgets = f"{count} starter budget{'s' if count != 1 else ''}"
    typer.echo(
        f"wrote {budgets} to {shown(target)}{note}; check a run with: "
        f"timeline check PATH...{'' if output is None else ' --budget ' + shown(target)}",
        err=True,
    )
