"""``timeline serve`` and the websocket's Origin (#19): no web page of another site may read the report.

A browser lets any page open a websocket to any address, and bokeh's session ids are not secret; the
``Origin`` header is the only guard. The server accepts exactly the origins of the names it is opened
with, never ``*``, whatever ``--host`` is; ``--allow-origin`` adds others by name. Servers here listen
on loopback addresses only, and every wait is bounded.
"""

from __future__ import annotations

import base64
import os
import queue
import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.builders import SAMPLES
from tests.report.builders import served
from timeline.errors import UsageError

pytest.importorskip("bokeh", reason="the report needs the 'report' extra: pip install -e '.[report]'")

GLOO = SAMPLES / "ddp_gloo"
FOREIGN = "http://evil.example"


def _bindable(address: str) -> bool:
    try:
        with socket.socket() as probe:
            probe.bind((address, 0))
    except OSError:
        return False
    return True


@contextmanager
def _serving(*args: str) -> Iterator[tuple[str, queue.Queue[str]]]:
    """Run ``timeline serve GLOO ARGS --port 0``; yield its URL line and stderr lines; then Ctrl-C."""
    with served(str(GLOO), "--port", "0", *args) as server:
        yield server.lines.get(timeout=180), server.errors


def _handshake(address: str, port: int, origin: str) -> int:
    """Open the report's websocket as a browser page of ``origin`` would; return the HTTP status."""
    from bokeh.util.token import generate_jwt_token, generate_session_id

    token = generate_jwt_token(generate_session_id())  # made up, as a hostile page can
    key = base64.b64encode(os.urandom(16)).decode()
    request = (
        f"GET /ws HTTP/1.1\r\nHost: {address}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
        f"Sec-WebSocket-Protocol: bokeh, {token}\r\nOrigin: {origin}\r\n\r\n"
    )
    with socket.create_connection((address, port), timeout=60) as conn:
        conn.sendall(request.encode())
        status = conn.makefile("rb").readline().decode()
    return int(status.split()[1])


def _port(url_line: str) -> int:
    url = url_line.removeprefix("serving the timeline report at ").split()[0]
    return int(url.rstrip("/").rsplit(":", 1)[1])


@pytest.mark.skipif(not _bindable("127.0.0.2"), reason="127.0.0.2 is not a loopback address here")
def test_another_host_accepts_only_its_own_origin() -> None:
    with _serving("--host", "127.0.0.2") as (url_line, errors):
        port = _port(url_line)
        assert url_line == f"serving the timeline report at http://127.0.0.2:{port}/ (Ctrl-C to stop)\n"
        assert _handshake("127.0.0.2", port, FOREIGN) == 403
        assert _handshake("127.0.0.2", port, f"{FOREIGN}:{port}") == 403
        assert _handshake("127.0.0.2", port, f"http://localhost:{port}") == 403  # not what it listens on
        assert _handshake("127.0.0.2", port, f"http://127.0.0.2:{port}") == 101
    stderr = list(errors.queue)
    assert stderr[0] == (
        f"note: only pages from http://127.0.0.2:{port} may open the report (websocket origins); pass "
        "--allow-origin HOST[:PORT] for another name it is opened with\n"
    )
    refusals = [line for line in stderr if "refused" in line]
    assert refusals[0].endswith(
        "refused the websocket of a page from http://evil.example (not an origin of this report); if it is "
        "yours, pass --allow-origin evil.example\n"
    )
    assert "Traceback" not in "".join(stderr)
    assert stderr[-1] == "stopped\n"


def test_allow_origin_adds_a_name_and_nothing_else() -> None:
    # a tunnel: the browser opens http://localhost:8080, forwarded to the report's port
    with _serving("--allow-origin", "localhost:8080", "--allow-origin", "report.example") as (url_line, _):
        port = _port(url_line)
        assert url_line == f"serving the timeline report at http://127.0.0.1:{port}/ (Ctrl-C to stop)\n"
        assert _handshake("127.0.0.1", port, "http://localhost:8080") == 101
        assert _handshake("127.0.0.1", port, f"http://report.example:{port}") == 101  # a host alone: --port
        assert _handshake("127.0.0.1", port, f"http://127.0.0.1:{port}") == 101
        assert _handshake("127.0.0.1", port, "http://evil.example:8080") == 403
        assert _handshake("127.0.0.1", port, "http://report.example:8080") == 403
        assert _handshake("127.0.0.1", port, "null") == 403  # a sandboxed page or a local file


# --- where it listens, without listening -------------------------------------------------------------


def test_every_address_accepts_the_names_of_this_machine_and_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    from timeline.report import server

    monkeypatch.setattr(socket, "gethostname", lambda: "Build-Host")
    listening = server.listening_of("0.0.0.0", ["0.0.0.0"], 5006)
    assert listening.url == "http://build-host:5006/"
    assert listening.network
    assert listening.addresses == ("0.0.0.0:5006",)
    assert listening.origins == ("localhost:5006", "127.0.0.1:5006", "[::1]:5006", "build-host:5006")
    ipv6 = server.listening_of("::", ["::"], 80, allow_origins=["Proxy.Example:443"])
    assert ipv6.addresses == ("[::]:80",)
    assert ipv6.origins[-1] == "proxy.example:443"
    assert "*" not in "".join(listening.origins + ipv6.origins)


@pytest.mark.parametrize(
    ("host", "bound", "url", "origins", "network"),
    [
        ("127.0.0.1", ["127.0.0.1"], "http://127.0.0.1:5006/", ("localhost:5006", "127.0.0.1:5006"), False),
        ("localhost", ["127.0.0.1"], "http://localhost:5006/", ("localhost:5006", "127.0.0.1:5006"), False),
        ("127.0.0.2", ["127.0.0.2"], "http://127.0.0.2:5006/", ("127.0.0.2:5006",), False),
        ("::1", ["::1"], "http://[::1]:5006/", ("localhost:5006", "[::1]:5006"), False),
        ("10.1.2.3", ["10.1.2.3"], "http://10.1.2.3:5006/", ("10.1.2.3:5006",), True),
        ("gpu-node-3", ["10.1.2.3"], "http://gpu-node-3:5006/", ("10.1.2.3:5006", "gpu-node-3:5006"), True),
    ],
)
def test_a_named_address_accepts_its_own_names(
    host: str, bound: list[str], url: str, origins: tuple[str, ...], network: bool
) -> None:
    from timeline.report.server import listening_of

    listening = listening_of(host, bound, 5006)
    assert (listening.url, listening.origins, listening.network) == (url, origins, network)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("*", "--allow-origin '*': wildcards are refused (any web page could then read the report)"),
        ("*.example.com", "--allow-origin '*.example.com': wildcards are refused"),
        ("my host", "--allow-origin 'my host': not HOST[:PORT]; e.g. myhost:5006 or 10.0.0.5"),
        ("host:99999", "--allow-origin 'host:99999': the port must be 1 to 65535"),
        ("", "--allow-origin '': not HOST[:PORT]"),
    ],
)
def test_a_bad_allowed_origin_is_refused(text: str, message: str) -> None:
    from timeline.report.server import parse_origins

    with pytest.raises(UsageError, match=re.escape(message)):
        parse_origins([text])


def test_a_wildcard_origin_stops_serve_before_the_traces_are_read() -> None:
    from cli.main import app

    result = CliRunner().invoke(app, ["serve", str(SAMPLES / "missing"), "--allow-origin", "*"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --allow-origin '*': wildcards are refused")


def test_serve_on_every_address_warns_and_prints_the_real_url(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from cli.main import app
    from timeline.report import server

    def listens(
        data: object, *, host: str, port: int, allow_origins: list[str], on_ready: Any, **_: Any
    ) -> None:
        on_ready(server.listening_of(host, ["0.0.0.0"], 5006, allow_origins=allow_origins))

    monkeypatch.setattr(server, "serve_report", listens)
    monkeypatch.setattr(socket, "gethostname", lambda: "build-host")
    result = CliRunner().invoke(app, ["serve", str(GLOO), "--host", "0.0.0.0"])
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "serving the timeline report at http://build-host:5006/ (Ctrl-C to stop)\n"
    assert result.stderr.splitlines() == [
        "warning: listening on 0.0.0.0:5006 (--host 0.0.0.0): any machine that reaches it can read the "
        "report (your job's kernel names, message sizes and timings); the default --host 127.0.0.1 keeps "
        "it on this machine",
        "note: only pages from http://localhost:5006, http://127.0.0.1:5006, http://[::1]:5006, "
        "http://build-host:5006 may open the report (websocket origins); pass --allow-origin HOST[:PORT] "
        "for another name it is opened with",
        "stopped",
    ]
