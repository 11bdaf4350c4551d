"""The ``timeline`` application: registers each command; heavy imports stay inside the commands.

Importing this module imports typer and the command modules only (no polars, no rich, no library
module but :mod:`timeline.errors`), so ``timeline --help`` starts fast.
"""

from __future__ import annotations

import typer

from cli.analyze import analyze_command
from cli.capture import capture_command
from cli.check import check_command
from cli.collectives import collectives_command
from cli.convert import convert_command
from cli.report import report_command, serve_command
from cli.whatif import whatif_command

__all__ = ["app", "main"]

app = typer.Typer(
    name="timeline",
    help="Is communication the bottleneck of your distributed training job? "
    "Exposed vs hidden communication from PyTorch profiler traces and Horovod timelines.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # click's plain help: typer's rich help formatter costs 0.1-0.2 s of imports (markdown, pygments)
    rich_markup_mode=None,
)
app.command("analyze")(analyze_command)
app.command("convert")(convert_command)
# serve/report import bokeh and holoviews inside the command functions, never at registration.
app.command("serve")(serve_command)
app.command("report")(report_command)
app.command("check")(check_command)
app.command("collectives")(collectives_command)
app.command("capture")(capture_command)
app.command("whatif")(whatif_command)


def main() -> None:
    """Run the command line."""
    app()
