"""One standalone HTML file of the report: bokeh's JavaScript inlined, so it opens offline.

Takes :class:`~timeline.report.data.ReportData` and gives the HTML text (or writes it): the same
dashboard as ``timeline serve``, with every iteration's Gantt bars embedded at a few resolutions
and JavaScript callbacks for the selector, the rank filter and the refinement on zoom (see
:mod:`timeline.report.dashboard`). For attaching to a CI run or an issue.
"""

from __future__ import annotations

from pathlib import Path

from bokeh.embed import file_html
from bokeh.resources import Component, ResourceAttr, Resources

from timeline.errors import UsageError
from timeline.outputs import write_output
from timeline.report.dashboard import build_dashboard
from timeline.report.data import ReportData

__all__ = ["offline_resources", "render_report_html", "write_html", "write_report"]


class _OfflineResources(Resources):
    """Bokeh's resources inlined, without other packages' external scripts.

    Bokeh lists the ``__javascript__``/``__css__`` URLs of every model class imported in the
    process, used or not; importing holoviews registers panel's, whose relative URLs cannot load
    from a file. The report uses bokeh's own models only.
    """

    def _collect_external_resources(self, resource_attr: ResourceAttr) -> list[str]:
        return []

    def clone(self, *, components: list[Component] | None = None) -> Resources:
        return _OfflineResources(mode="inline", components=components or list(self.components))


def offline_resources() -> Resources:
    """Return bokeh's resources to inline in a standalone file (no external scripts)."""
    return _OfflineResources(mode="inline")


def render_report_html(data: ReportData, *, title: str = "timeline report", files: int | None = None) -> str:
    """Return the report as one standalone HTML document (bokeh resources inlined).

    Parameters
    ----------
    data
        The prepared report data.
    title
        The page title.
    files
        How many trace files the data came from (shown in the header).
    """
    dashboard = build_dashboard(data, mode="standalone", files=files)
    return str(file_html(dashboard.document(), resources=offline_resources(), title=title))


def write_report(
    data: ReportData, path: str | Path, *, title: str = "timeline report", files: int | None = None
) -> Path:
    """Write the standalone HTML report to ``path`` (through a temporary file, then renamed).

    Raises
    ------
    UsageError
        If the folder of ``path`` does not exist or cannot be written.
    """
    target = _writable(path)  # before the report is drawn: a mistyped -o fails fast
    return write_html(render_report_html(data, title=title, files=files), target)


def _writable(path: str | Path) -> Path:
    """Return ``path`` as a Path; raise :class:`UsageError` if its folder does not exist."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path()
    if not folder.is_dir():
        msg = f"{target}: folder {folder} does not exist; create it or pick another -o"
        raise UsageError(msg)
    return target


def write_html(text: str, path: str | Path) -> Path:
    """Write a standalone HTML page to ``path`` whole (:func:`timeline.outputs.write_output`).

    Raises
    ------
    UsageError
        If the folder of ``path`` does not exist or cannot be written.
    """
    target = _writable(path)
    return write_output(target, text)
