"""The report inline in a Jupyter notebook: :func:`show`.

The same dashboard as ``timeline report`` (standalone: every iteration's bars embedded, JavaScript
callbacks for the selector, the rank filter and the refinement on zoom), shown with bokeh's
notebook output (:func:`bokeh.io.output_notebook`, :func:`bokeh.io.show`). bokeh draws a model in a
notebook in a document of its own, without the dashboard's ``DocumentReady`` callback that draws
the first bars of a standalone file: the first iteration's bars are put in the Gantt here instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from bokeh.io import output_notebook
from bokeh.io import show as bokeh_show

from timeline.report.dashboard import Dashboard, build_dashboard
from timeline.report.data import ReportData, prepare_report_data, view_bars
from timeline.report.gantt import PIXELS, gantt_columns
from timeline.trace import Trace

if TYPE_CHECKING:
    from timeline.run import Run

__all__ = ["notebook_dashboard", "show"]


def _report_data(run: Run | Trace) -> tuple[ReportData, int]:
    """Return the report data of a run or a trace, and how many files it came from."""
    from timeline.run import Run

    chosen = Run.from_trace(run) if isinstance(run, Trace) else run
    return prepare_report_data(chosen), chosen.trace.files.get_column("path").n_unique()


def notebook_dashboard(
    run: Run | Trace, *, view: int | None = None, ranks: Sequence[int] | None = None
) -> Dashboard:
    """Return the dashboard :func:`show` draws: standalone, its first iteration's bars already in the Gantt.

    Parameters
    ----------
    run
        What :func:`timeline.analyze` or :func:`timeline.load` returns.
    view, ranks
        The iteration (view id) and the ranks shown first (default: the slowest, all).
    """
    data, files = _report_data(run)
    dashboard = build_dashboard(data, mode="standalone", files=files, view=view, ranks=ranks)
    if data.views.height:
        first = int(dashboard.select.value)
        shown = [int(rank) for rank in dashboard.ranks.value]
        origin = data.views.item(first, "start_ns")
        bars = view_bars(data, first, ranks=shown, pixels=PIXELS)
        dashboard.gantt.source.data = gantt_columns(bars, data, origin_ns=origin)
    return dashboard


def show(run: Run | Trace, *, view: int | None = None, ranks: Sequence[int] | None = None) -> None:
    """Show the report inline in a Jupyter notebook (bokeh's notebook output).

    Parameters
    ----------
    run
        What :func:`timeline.analyze` or :func:`timeline.load` returns.
    view, ranks
        The iteration (view id) and the ranks shown first (default: the slowest, all).

    Examples
    --------
    >>> import timeline, timeline.report  # doctest: +SKIP
    >>> timeline.report.show(timeline.analyze("sample_traces/ddp_gloo"))  # doctest: +SKIP
    """
    dashboard = notebook_dashboard(run, view=view, ranks=ranks)
    output_notebook(hide_banner=True)
    bokeh_show(dashboard.layout)
