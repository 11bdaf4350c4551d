"""Network namespaces joined by a rate-limited veth pair: the link the real-job experiments train over.

Takes a name prefix and ``tc`` rates; gives two namespaces (one per rank), each with one end of a
veth pair (``10.213.<k>.1/24`` and ``.2/24``, only inside the namespaces), whose egress is shaped
with ``tc qdisc … tbf rate R`` (burst: 2 ms at the rate, at least 32 KiB; queue: 50 ms). Needs
Linux, root, and ``ip``/``tc`` from Debian's ``iproute2`` package; it never installs anything:
without them it says what to install. Used by :mod:`experiments.netns_whatif` and
:mod:`experiments.diagnosis_validation`.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator

__all__ = [
    "Link",
    "MissingToolError",
    "experiment_unavailable",
    "missing_tools",
    "rate_bps",
    "require_tools",
    "terminate_cleanly",
]

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


def experiment_unavailable() -> str | None:
    """Return why a namespace experiment cannot run here (not root, no ``ip``/``tc``, no torch), or None."""
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

    def __enter__(self) -> Link:
        try:
            for ns in self.namespaces:
                _run("ip", "netns", "add", ns)
            a, b = self.devices
            _run("ip", "link", "add", a, "type", "veth", "peer", "name", b)
            for ns, dev, address in zip(self.namespaces, self.devices, self.addresses, strict=True):
                _run("ip", "link", "set", dev, "netns", ns)
                _run("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", dev)
                _run("ip", "-n", ns, "link", "set", dev, "up")
                _run("ip", "-n", ns, "link", "set", "lo", "up")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Delete both namespaces (the veth pair goes with them)."""
        for ns in self.namespaces:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)

    def shape(self, rate: str) -> None:
        """Limit both directions to ``rate`` with a token bucket filter."""
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
