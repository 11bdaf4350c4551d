"""Where ``timeline report`` draws its page: in a helper process that imported bokeh during the read.

Takes the prepared :class:`~timeline.report.data.ReportData` and a started helper
(:class:`~timeline.executors.LocalExecutor`, its process preloading :data:`PRELOAD`, bokeh and the
dashboard); gives the written file. Importing bokeh costs about as much as reading a small run; a
helper started before the traces are read imports it meanwhile, and the page is drawn there from the
data this process prepared (a few MB pickled: 8 MB for the 54 MB trace). Without a started helper the
page is drawn here. Importing this module imports no bokeh.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from timeline.executors import LocalExecutor
    from timeline.report.data import ReportData

__all__ = ["PRELOAD", "draw_report", "write_report_task"]

PRELOAD = "timeline.report.export"
"""The module a drawing helper imports first (bokeh, the dashboard and the export)."""


def draw_report(
    data: ReportData,
    path: str | Path,
    *,
    files: int | None = None,
    title: str = "timeline report",
    helper: LocalExecutor | None = None,
) -> Path:
    """Write the standalone HTML report to ``path``, drawn in ``helper`` when one was started.

    The report's what-if sweep is waited for first (:func:`~timeline.report.data.whatif_of`): the
    helper gets the finished data.

    Raises
    ------
    UsageError
        If the folder of ``path`` does not exist or cannot be written (raised here or by the helper).
    """
    from timeline.report.data import whatif_of
    from timeline.report.output import writable

    writable(path)  # before waiting for anything: a mistyped -o fails fast
    finished = replace(data, whatif=whatif_of(data), bars_cache={})
    item = (finished, str(path), files, title)
    if helper is None or not helper.started:
        return write_report_task(item)
    return helper.submit(write_report_task, item).result()


def write_report_task(item: tuple[ReportData, str, int | None, str]) -> Path:
    """Write the report of ``item`` (data, path, files, title): a function a helper process can run."""
    from timeline.report.export import write_report

    data, path, files, title = item
    return write_report(data, path, title=title, files=files)
