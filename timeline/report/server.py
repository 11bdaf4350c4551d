"""The live report: a bokeh server app on localhost, one dashboard document per browser session.

Takes :class:`~timeline.report.data.ReportData` (prepared once) and serves the ``live`` dashboard
(or, given the Flight Recorder report of dumps, its page: :mod:`timeline.report.flight_view`)
of :mod:`timeline.report.dashboard`, whose zoom and selection callbacks re-query the polars frames
in this process. Binds ``127.0.0.1`` unless told otherwise: the page shows kernel names, sizes and
timings of the job. Ctrl-C (SIGINT), SIGTERM or SIGHUP stops the server cleanly and returns.

The page pulls its data through a websocket, and a browser lets any web page open a websocket to
any address (bokeh's session ids are not secret: a page can make one up). The only guard is the
``Origin`` the browser sends, so the server accepts exactly the origins of the names it is opened
with (:func:`listening_of`): never ``*``, whatever ``host`` is; others are added by name
(``allow_origins``, the ``--allow-origin`` option).

The server is bokeh's own (``BokehTornado`` on a tornado ``HTTPServer``, run by ``BaseServer``),
with one change: its page loads only the bokeh scripts the report needs (core, widgets, and tables
for the Compare tab's table), not the WebGL and MathJax bundles bokeh's server page otherwise loads
for any document.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
import signal
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bokeh.application import Application
from bokeh.application.handlers.function import FunctionHandler
from bokeh.document import Document
from bokeh.events import DocumentReady, Event
from bokeh.models.widgets import Div
from bokeh.resources import Component, ResourceAttr, Resources
from bokeh.server.server import BaseServer
from bokeh.server.tornado import BokehTornado
from bokeh.server.util import bind_sockets
from bokeh.server.views.static_handler import StaticHandler
from tornado.httpserver import HTTPServer
from tornado.ioloop import IOLoop
from tornado.platform.asyncio import BaseAsyncIOLoop
from tornado.web import HTTPError

from timeline.errors import UsageError
from timeline.report.dashboard import build_dashboard
from timeline.report.data import ReportData
from timeline.results.flight_recorder import FlightReport

__all__ = ["Listening", "listening_of", "make_application", "parse_origins", "serve_report"]

_ORIGIN = re.compile(
    r"(?:https?://)?(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?)"
    r"(?::(?P<port>[0-9]{1,5}))?/?"
)
# bokeh-tables: the Compare tab's DataTable (and any bundle another package registers) needs it.
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


class _ReportStaticHandler(StaticHandler):
    """bokeh's static files; a path no file can have (a NUL byte) is a 400, not a 500 with a traceback."""

    def parse_url_path(self, url_path: str) -> str:
        if "\0" in url_path:
            raise HTTPError(400, "not a file name")
        return str(super().parse_url_path(url_path))

    def validate_absolute_path(self, root: str, absolute_path: str) -> str | None:
        try:
            return super().validate_absolute_path(root, absolute_path)
        except ValueError:  # a name the system refuses (embedded null byte and the like)
            raise HTTPError(400, "not a file name") from None


class _ReportTornado(BokehTornado):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for rule in self.wildcard_router.rules:  # bokeh's static files, served by the careful handler
            if rule.target is StaticHandler:
                rule.target = _ReportStaticHandler

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


@dataclass(frozen=True)
class Listening:
    """Where a served report listens and who may open it (given to ``serve_report``'s ``on_ready``).

    Attributes
    ----------
    url
        The address to open the report at: the ``host`` as given, or this machine's name when the
        server listens on every address (``0.0.0.0``, ``::``).
    addresses
        The addresses the server listens on, ``HOST:PORT`` (``[::]:PORT`` for IPv6).
    origins
        The origins (``HOST:PORT``) whose pages may open the report's websocket; never ``*``.
    network
        Whether other machines can reach it (an address that is not loopback).
    """

    url: str
    addresses: tuple[str, ...]
    origins: tuple[str, ...]
    network: bool


class _OriginAdvice(logging.Filter):
    """Bokeh logs a refused origin with the advice of its own command line: give timeline's."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if str(record.msg).startswith("Refusing websocket connection") and isinstance(args, tuple) and args:
            record.msg = "refused the websocket of a page from %s (not an origin of this report)%s"
            host = str(args[1]) if len(args) > 1 else ""
            record.args = (args[0], f"; if it is yours, pass --allow-origin {host}" if host else "")
        return True


def parse_origins(texts: Sequence[str]) -> list[tuple[str, int | None]]:
    """Read ``--allow-origin`` values, ``HOST[:PORT]`` (``http://`` allowed): ``(host, port or None)``.

    Raises
    ------
    UsageError
        A wildcard (``*``: any web page could read the report), or not a host with an optional port.
    """
    out: list[tuple[str, int | None]] = []
    for text in texts:
        if "*" in text:
            msg = (
                f"--allow-origin {text!r}: wildcards are refused (any web page could then read the "
                "report); name each host the report is opened with, e.g. --allow-origin myhost:5006"
            )
            raise UsageError(msg)
        match = _ORIGIN.fullmatch(text.strip())
        if match is None:
            raise UsageError(f"--allow-origin {text!r}: not HOST[:PORT]; e.g. myhost:5006 or 10.0.0.5")
        port = int(match["port"]) if match["port"] else None
        if port is not None and not 1 <= port <= 65535:
            raise UsageError(f"--allow-origin {text!r}: the port must be 1 to 65535")
        out.append((match["host"].lower(), port))
    return out


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip("[]").split("%")[0])
    except ValueError:
        return None


def _named(address: str) -> str:
    return f"[{address}]" if ":" in address else address


def _bound_names(bound: Sequence[str]) -> tuple[list[str], bool]:
    """Return the origin names of the bound addresses, and whether one of them is every address."""
    names: list[str] = []
    wildcard = False
    for address in bound:
        ip = _ip(address)
        if ip is None:
            names.append(address.lower())
        elif ip.is_unspecified:
            wildcard = True
            names += ["localhost", "127.0.0.1", "[::1]"]
        elif ip in (ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")):
            names += ["localhost", _named(str(ip))]
        else:
            names.append(_named(str(ip)))
    return names, wildcard


def listening_of(
    host: str, bound: Sequence[str], port: int, *, allow_origins: Sequence[str] = ()
) -> Listening:
    """Return where a server listens and the websocket origins it accepts.

    Parameters
    ----------
    host
        The ``--host`` as given (an address, a name, or ``0.0.0.0``/``::``/empty for every address).
    bound
        The addresses of the listening sockets (``socket.getsockname()[0]``).
    port
        The port they listen on.
    allow_origins
        More origins, ``HOST[:PORT]`` (a host alone: on ``port``).

    Returns
    -------
    Listening
        The accepted origins: for a loopback address, ``localhost`` and the address; for any other
        address, the address; for every address (``0.0.0.0``), the loopback names and this
        machine's name; ``host`` itself when it is a name; then ``allow_origins``.

    Raises
    ------
    UsageError
        A bad ``allow_origins`` entry (:func:`parse_origins`).
    """
    names, wildcard = _bound_names(bound)
    machine = socket.gethostname().lower()
    if wildcard and _ORIGIN.fullmatch(machine):
        names.append(machine)
    if host and _ip(host) is None:
        names.append(host.lower())
    origins = [f"{name}:{port}" for name in names]
    origins += [f"{name}:{port if own is None else own}" for name, own in parse_origins(allow_origins)]
    if wildcard:
        url_host = machine if _ORIGIN.fullmatch(machine) else "localhost"
    elif host and _ip(host) is None:
        url_host = host
    else:
        url_host = _named(str(_ip(bound[0]) if bound else host))
    addresses = tuple(f"{_named(a)}:{port}" for a in bound)
    network = any((ip := _ip(a)) is None or not ip.is_loopback for a in bound)
    return Listening(
        url=f"http://{url_host}:{port}/",
        addresses=addresses,
        origins=tuple(dict.fromkeys(origins)),
        network=network,
    )


def _layout(data: ReportData | FlightReport, files: int | None) -> Any:
    """Return the page of one session: the live dashboard, or the page of Flight Recorder dumps."""
    if isinstance(data, FlightReport):
        from timeline.report.flight_view import build_flight_page

        return build_flight_page(data)
    return build_dashboard(data, mode="live", files=files).layout


_LOADING = "<i>timeline: drawing the report…</i>"


def make_application(
    data: ReportData | FlightReport, *, files: int | None = None, title: str = "timeline report"
) -> Application:
    """Return the bokeh application: each session gets its own live dashboard document.

    A session's dashboard is built once its page has loaded in a browser (``DocumentReady``, over
    the page's websocket), not when the page is asked for: building one takes 0.4-2 s of the one
    thread that serves every request, and a request that never opens the page (a crawler, a burst
    of 100 ``GET /``) got one built each, the server unresponsive for minutes and its memory
    tripled. The page itself holds a "drawing" line, replaced by the dashboard.
    """

    def make_document(doc: Document) -> None:
        waiting = Div(text=_LOADING, name="report_loading")
        doc.add_root(waiting)
        doc.title = title

        def draw(_event: Event) -> None:
            if waiting.document is not doc:
                return  # drawn already (the event comes once per page load)
            doc.remove_root(waiting)
            doc.add_root(_layout(data, files))

        doc.on_event(DocumentReady, draw)

    return Application(FunctionHandler(make_document))


def serve_report(
    data: ReportData | FlightReport,
    *,
    host: str = "127.0.0.1",
    port: int = 5006,
    files: int | None = None,
    allow_origins: Sequence[str] = (),
    on_ready: Callable[[Listening], None] | None = None,
) -> None:
    """Serve the report until SIGINT, SIGTERM or SIGHUP, then stop cleanly and return.

    Parameters
    ----------
    data
        The prepared report data, or the Flight Recorder report of dumps
        (:class:`timeline.results.flight_recorder.FlightReport`).
    host
        The address to listen on (``127.0.0.1``: this machine only).
    port
        The port (0: any free port).
    files
        How many trace files the data came from (for the header).
    allow_origins
        More origins whose pages may open the report, ``HOST[:PORT]`` (:func:`listening_of`).
    on_ready
        Called once the server listens, with where it listens and the origins it accepts.

    Raises
    ------
    UsageError
        If the address cannot be bound (port in use, unknown host), or an origin is not ``HOST[:PORT]``.
    """
    parse_origins(allow_origins)  # a bad one stops before anything listens
    sockets, bound = _bound_sockets(host, port)
    # Build one dashboard now: the first page then opens without waiting for imports, and a bug
    # shows before the URL is printed.
    try:
        _layout(data, files)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    # The page opens a websocket back to the server: accept the names it is opened with, only.
    addresses = [sock.getsockname()[0] for sock in sockets]
    listening = listening_of(host, addresses, bound, allow_origins=allow_origins)
    app = _ReportTornado(
        {"/": make_application(data, files=files)}, extra_websocket_origins=list(listening.origins)
    )
    http = HTTPServer(app)
    http.add_sockets(sockets)
    loop = IOLoop.current()
    server = BaseServer(loop, app, http)
    _serve_until_stopped(server, loop, listening=listening, on_ready=on_ready)


def _bound_sockets(host: str, port: int) -> tuple[list[socket.socket], int]:
    """Return the sockets listening on ``host:port`` and their port (UsageError: they cannot be bound)."""
    try:
        return bind_sockets(host, port)
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        msg = f"cannot listen on {host}:{port} ({reason}); pass another --port or --host"
        raise UsageError(msg) from exc


def _serve_until_stopped(
    server: BaseServer,
    loop: IOLoop,
    *,
    listening: Listening,
    on_ready: Callable[[Listening], None] | None,
) -> None:
    """Run ``server`` on ``loop`` until SIGINT, SIGTERM or SIGHUP stops the loop; then stop the server."""
    # Ctrl-C, SIGTERM and SIGHUP stop the event loop from inside it (no KeyboardInterrupt mid-callback).
    events = loop.asyncio_loop if isinstance(loop, BaseAsyncIOLoop) else asyncio.get_event_loop()
    signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    for sig in signals:
        events.add_signal_handler(sig, loop.stop)
    advice = _OriginAdvice()
    logging.getLogger("bokeh.server.views.ws").addFilter(advice)
    try:
        server.start()
        if on_ready is not None:
            on_ready(listening)
        loop.start()
    finally:
        for sig in signals:
            events.remove_signal_handler(sig)
        logging.getLogger("bokeh.server.views.ws").removeFilter(advice)
        server.stop()
