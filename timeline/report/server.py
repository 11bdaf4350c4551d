"""The live report: a bokeh server app on localhost, one dashboard document per browser session.

Takes :class:`~timeline.report.data.ReportData` (prepared once) and serves the ``live`` dashboard
of :mod:`timeline.report.dashboard`, whose zoom and selection callbacks re-query the polars frames
in this process. Binds ``127.0.0.1`` unless told otherwise: the page shows kernel names, sizes and
timings of the job. Ctrl-C (SIGINT) or SIGTERM stops the server cleanly and returns.

The server is bokeh's own (``BokehTornado`` on a tornado ``HTTPServer``, run by ``BaseServer``),
with one change: its page loads only the bokeh scripts the report needs (core, widgets, and tables
for the panel bundle holoviews registers), not the WebGL and MathJax bundles bokeh's server page
otherwise loads for any document.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable

from bokeh.application import Application
from bokeh.application.handlers.function import FunctionHandler
from bokeh.document import Document
from bokeh.resources import Component, ResourceAttr, Resources
from bokeh.server.server import BaseServer
from bokeh.server.tornado import BokehTornado
from bokeh.server.util import bind_sockets, create_hosts_allowlist
from bokeh.server.views.static_handler import StaticHandler
from tornado.httpserver import HTTPServer
from tornado.ioloop import IOLoop
from tornado.platform.asyncio import BaseAsyncIOLoop

from timeline.errors import UsageError
from timeline.report.dashboard import build_dashboard
from timeline.report.data import ReportData

__all__ = ["make_application", "serve_report"]

_LOOPBACK = ("127.0.0.1", "localhost")
# bokeh-tables: the panel bundle that holoviews registers (and bokeh lists for every page) needs it.
_COMPONENTS: list[Component] = ["bokeh", "bokeh-widgets", "bokeh-tables"]


class _PageResources(Resources):
    """Bokeh's served scripts, limited to the components the report uses, no external scripts."""

    def _collect_external_resources(self, resource_attr: ResourceAttr) -> list[str]:
        return []

    def clone(self, *, components: list[Component] | None = None) -> Resources:
        return _PageResources(
            mode=self.mode,
            root_url=self.root_url,
            path_versioner=self.path_versioner,
            components=components or list(self.components),
        )


class _ReportTornado(BokehTornado):
    def resources(self, absolute_url: str | bool | None = None) -> Resources:
        base = super().resources(absolute_url)
        if base.mode not in ("server", "server-dev"):
            return base
        return _PageResources(
            mode=base.mode,
            root_url=base.root_url,
            path_versioner=StaticHandler.append_version,
            components=_COMPONENTS,
        )


def make_application(
    data: ReportData, *, files: int | None = None, title: str = "timeline report"
) -> Application:
    """Return the bokeh application: each session gets its own live dashboard document."""

    def make_document(doc: Document) -> None:
        dashboard = build_dashboard(data, mode="live", files=files)
        doc.add_root(dashboard.layout)
        doc.title = title

    return Application(FunctionHandler(make_document))


def serve_report(
    data: ReportData,
    *,
    host: str = "127.0.0.1",
    port: int = 5006,
    files: int | None = None,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Serve the report until SIGINT or SIGTERM, then stop cleanly and return.

    Parameters
    ----------
    data
        The prepared report data.
    host
        The address to listen on (``127.0.0.1``: this machine only).
    port
        The port (0: any free port).
    files
        How many trace files the data came from (for the header).
    on_ready
        Called with the URL once the server listens.

    Raises
    ------
    UsageError
        If the address cannot be bound (port in use, unknown host).
    """
    try:
        sockets, bound = bind_sockets(host, port)
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        msg = f"cannot listen on {host}:{port} ({reason}); pass another --port or --host"
        raise UsageError(msg) from exc
    # Build one dashboard now: the first page then opens without waiting for imports, and a bug
    # shows before the URL is printed.
    try:
        build_dashboard(data, mode="live", files=files)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    # The page opens a websocket back to the server: accept the names the URL is opened with.
    origins = [f"{name}:{bound}" for name in _LOOPBACK] if host in _LOOPBACK else ["*"]
    app = _ReportTornado(
        {"/": make_application(data, files=files)},
        extra_websocket_origins=create_hosts_allowlist(origins, bound),
    )
    http = HTTPServer(app)
    http.add_sockets(sockets)
    loop = IOLoop.current()
    server = BaseServer(loop, app, http)
    # Ctrl-C and SIGTERM stop the event loop from inside it (no KeyboardInterrupt mid-callback).
    events = loop.asyncio_loop if isinstance(loop, BaseAsyncIOLoop) else asyncio.get_event_loop()
    signals = (signal.SIGINT, signal.SIGTERM)
    for sig in signals:
        events.add_signal_handler(sig, loop.stop)
    try:
        server.start()
        if on_ready is not None:
            on_ready(f"http://{_url_host(host)}:{bound}/")
        loop.start()
    finally:
        for sig in signals:
            events.remove_signal_handler(sig)
        server.stop()


def _url_host(host: str) -> str:
    if host in ("0.0.0.0", "::", ""):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host
