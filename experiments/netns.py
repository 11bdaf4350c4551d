"""Network namespaces joined by a rate-limited veth pair: the link the real-job experiments train over.

Takes a name prefix and ``tc`` rates; gives two namespaces (one per rank), each with one end of a
veth pair (``10.213.<k>.1/24`` and ``.2/24``, only inside the namespaces), whose egress is shaped
with ``tc qdisc … tbf rate R`` (burst: 2 ms at the rate, at least 32 KiB; queue: 50 ms). Needs
Linux, root, and ``ip``/``tc`` from Debian's ``iproute2`` package; it never installs anything:
without them it says what to install. Used by :mod:`experiments.netns_whatif` and
:mod:`experiments.diagnosis_validation`.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import os
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Self

__all__ = [
    "DelayLink",
    "Link",
    "MissingToolError",
    "delivery_ns",
    "experiment_unavailable",
    "missing_tools",
    "rate_bps",
    "require_tools",
    "terminate_cleanly",
]

_TUN = "/dev/net/tun"
"""The TUN/TAP driver's device: :class:`DelayLink` opens a tap device through it."""
_TOOLS = {"ip": "iproute2", "tc": "iproute2"}
"""The commands the experiments run, and the Debian package that provides each."""
_RATE = re.compile(r"(?P<value>[0-9]*\.?[0-9]+)\s*(?P<unit>kbit|mbit|gbit)", re.IGNORECASE)
_SCALE = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}


def rate_bps(rate: str) -> float:
    """Return bit/s of a tc rate such as ``1gbit``, ``200mbit``, ``500kbit``."""
    match = _RATE.fullmatch(rate.strip())
    if match is None:
        raise ValueError(f"{rate!r}: write a tc rate such as 1gbit, 200mbit or 500kbit")
    return float(match["value"]) * _SCALE[match["unit"].lower()]


class MissingToolError(RuntimeError):
    """A command the experiment needs is not installed; the message names the Debian package."""


def missing_tools() -> dict[str, str]:
    """Return the commands the experiment needs that are not on ``PATH``, with their Debian package."""
    return {tool: package for tool, package in _TOOLS.items() if shutil.which(tool) is None}


def _missing_message(missing: dict[str, str]) -> str:
    packages = " ".join(sorted(set(missing.values())))
    return f"needs {', '.join(sorted(missing))} (not on PATH): install the Debian package {packages}"


def require_tools() -> None:
    """Check that the commands the experiment runs exist; it never installs them.

    Raises
    ------
    MissingToolError
        One is missing; the message says which Debian package to install (``apt-get install iproute2``).
    """
    missing = missing_tools()
    if missing:
        raise MissingToolError(f"experiment: {_missing_message(missing)}")


def experiment_unavailable(*, delay: bool = False) -> str | None:
    """Return why a namespace experiment cannot run here (not root, no ``ip``/``tc``, no torch), or None.

    With ``delay``, also when ``/dev/net/tun`` cannot be opened (:class:`DelayLink` needs it).
    """
    if sys.platform != "linux":
        return "needs Linux network namespaces"
    missing = missing_tools()
    if missing:
        return _missing_message(missing)
    if os.geteuid() != 0:
        return "needs root (ip netns, tc)"
    try:
        import torch  # noqa: F401
    except ImportError:
        return "needs torch: pip install 'timeline[torch]'"
    probe = f"tlwiprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, check=False)
    if made.returncode != 0:
        return f"ip netns add fails here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, check=False)
    if delay:
        try:
            os.close(os.open(_TUN, os.O_RDWR))
        except OSError as exc:
            return f"needs {_TUN} (the kernel's TUN/TAP driver) for a delayed link: {exc.strerror}"
    return None


def _run(*args: str) -> None:
    done = subprocess.run(list(args), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {done.stderr.strip()}")


class Link:
    """Two namespaces joined by a veth pair; deleted on exit.

    Parameters
    ----------
    prefix
        The start of the namespace and device names (``<prefix><pid>a`` and ``…b``): each
        experiment uses its own, so that one never mistakes another's namespaces for its own.
    """

    def __init__(self, prefix: str = "tlwi") -> None:
        tag = os.getpid() % 100_000
        self.namespaces = (f"{prefix}{tag}a", f"{prefix}{tag}b")
        self.devices = self.namespaces
        subnet = 1 + tag % 250
        self.addresses = (f"10.213.{subnet}.1", f"10.213.{subnet}.2")

    _mtu: int | None = None
    """The devices' MTU, when not the kernel's default."""

    def __enter__(self) -> Self:
        try:
            for ns in self.namespaces:
                _run("ip", "netns", "add", ns)
            self._make_devices()
            for ns, dev, address in zip(self.namespaces, self.devices, self.addresses, strict=True):
                _run("ip", "link", "set", dev, "netns", ns)
                if self._mtu is not None:
                    _run("ip", "-n", ns, "link", "set", dev, "mtu", str(self._mtu))
                _run("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", dev)
                _run("ip", "-n", ns, "link", "set", dev, "up")
                _run("ip", "-n", ns, "link", "set", "lo", "up")
            self._connect()
        except BaseException:
            self.close()
            raise
        return self

    def _make_devices(self) -> None:
        """Create the two devices (here a veth pair) in this namespace; ``__enter__`` moves them."""
        a, b = self.devices
        _run("ip", "link", "add", a, "type", "veth", "peer", "name", b)

    def _connect(self) -> None:
        """Join the two devices, once each is up in its namespace (a veth pair already is)."""

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Delete both namespaces (the veth pair goes with them)."""
        for ns in self.namespaces:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)

    def shape(self, rate: str, *, delay_ms: float = 0.0) -> None:
        """Limit both directions to ``rate`` with a token bucket filter (no delay: see :class:`DelayLink`)."""
        if delay_ms > 0:
            raise ValueError("a veth link adds no delay: use DelayLink")
        burst = max(32 * 1024, int(rate_bps(rate) / 8 * 0.002))
        for ns, dev in zip(self.namespaces, self.devices, strict=True):
            _run(
                "ip",
                "netns",
                "exec",
                ns,
                "tc",
                "qdisc",
                "replace",
                "dev",
                dev,
                "root",
                "tbf",
                "rate",
                rate,
                "burst",
                str(burst),
                "latency",
                "50ms",
            )


_TUNSETIFF = 0x400454CA
_IFF_TAP, _IFF_NO_PI = 0x0002, 0x1000
_TAP_MTU = 65000
"""The tap devices' MTU: large frames keep the forwarder's per-frame work small (64 KiB a read)."""


class DelayLink(Link):
    """Two namespaces joined through this process: each packet is delayed, then sent at the rate.

    Each namespace holds a tap device; a thread of this process (:meth:`forward_between`) reads the
    frames one namespace sends and writes them into the other's tap once ``delay_ms`` have passed
    and the link, at ``rate``, has sent the frames before them (first in, first out; a frame the
    receiving tap refuses is counted in :attr:`dropped`, as lost on a wire): the one-way delay and
    the rate of a long link, which the kernel's ``netem`` gives where it is built
    in. Its timing is the thread's: a few tens of µs of jitter on an idle core.
    """

    def __init__(self, prefix: str = "tlwi") -> None:
        super().__init__(prefix)
        self._taps: list[int] = []
        self._delay_ns, self._ns_per_byte = 0, 0.0
        self._stop: tuple[int, ...] = os.pipe()
        self._thread: threading.Thread | None = None
        self.frames = 0
        """Frames forwarded so far (both directions)."""
        self.dropped = 0
        """Frames the receiving tap refused (none expected: TCP would resend them)."""

    _mtu = _TAP_MTU

    def _make_devices(self) -> None:
        """Create a tap device for each namespace, this process holding both."""
        for dev in self.devices:
            self._taps.append(_open_tap(dev))

    def _connect(self) -> None:
        self.forward_between(self._taps)

    def close(self) -> None:
        """Stop the forwarder, close the taps and delete both namespaces."""
        if self._thread is not None:
            os.write(self._stop[1], b"x")
            self._thread.join()
            self._thread = None
        for fd in (*self._taps, *self._stop):
            os.close(fd)
        self._taps, self._stop = [], ()
        super().close()

    def shape(self, rate: str, *, delay_ms: float = 0.0) -> None:
        """Delay each packet by ``delay_ms`` and send at ``rate``, from the next frame on."""
        self._delay_ns = round(delay_ms * 1e6)
        self._ns_per_byte = 8e9 / rate_bps(rate)

    def forward_between(self, fds: list[int]) -> None:
        """Start the forwarder between two non-blocking descriptors of frames (the taps).

        :meth:`close` stops it and closes them.
        """
        self._taps = fds
        self._thread = threading.Thread(target=self._forward, name="delay-link", daemon=True)
        self._thread.start()

    def _forward(self) -> None:
        """Move frames between the taps until :meth:`close`: the link itself."""
        taps, stop = self._taps, self._stop[0]
        queues: list[collections.deque[tuple[int, bytes]]] = [collections.deque(), collections.deque()]
        free = [0, 0]  # when each direction's sender is free again
        while True:
            now = time.monotonic_ns()
            wait: int | None = None
            for d, queue in enumerate(queues):
                while queue and queue[0][0] <= now:
                    try:
                        os.write(taps[1 - d], queue.popleft()[1])
                        self.frames += 1
                    except OSError:  # the peer's queue is full, or its device going: lost, as on a wire
                        self.dropped += 1
                if queue:
                    wait = queue[0][0] - now if wait is None else min(wait, queue[0][0] - now)
            ready, _, _ = select.select([*taps, stop], [], [], None if wait is None else wait / 1e9)
            if stop in ready:
                return
            now = time.monotonic_ns()
            for d, tap in enumerate(taps):
                if tap not in ready:
                    continue
                while True:
                    try:
                        frame = os.read(tap, _TAP_MTU + 64)
                    except OSError:  # nothing more to read now (or the device is going)
                        break
                    free[d] = delivery_ns(now, len(frame), free[d], self._delay_ns, self._ns_per_byte)
                    queues[d].append((free[d], frame))


def delivery_ns(arrival_ns: int, nbytes: int, free_ns: int, delay_ns: int, ns_per_byte: float) -> int:
    """Return when a frame leaves a :class:`DelayLink`: delayed, then sent once the frames before it are.

    ``free_ns`` is when the link finished sending the frame before it (the value this returned for
    it). The result is the next frame's ``free_ns``.

    >>> delivery_ns(0, 1000, 0, 500_000, 8.0)  # 0.5 ms, then 1,000 bytes at 1 Gbit/s
    508000
    >>> delivery_ns(1_000, 1000, 508_000, 500_000, 8.0)  # behind it: sent after it
    516000
    """
    return max(arrival_ns + delay_ns, free_ns) + round(nbytes * ns_per_byte)


def _open_tap(name: str) -> int:
    """Create the tap device ``name`` and return its file descriptor (non-blocking)."""
    fd = os.open(_TUN, os.O_RDWR | os.O_NONBLOCK)
    try:
        fcntl.ioctl(fd, _TUNSETIFF, struct.pack("16sH", name.encode(), _IFF_TAP | _IFF_NO_PI))
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def terminate_cleanly() -> Iterator[None]:
    """Turn SIGTERM into an exception while namespaces exist, so that they are always deleted."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
