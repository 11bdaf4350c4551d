"""The links the real-job experiments train over (``experiments.netns``): the delayed link's forwarder.

The forwarder of :class:`~experiments.netns.DelayLink` runs here between two socket pairs in place of
the tap devices (a tap needs root and ``/dev/net/tun``): what it delivers and in which order, with
no timing asserted; when it delivers is :func:`~experiments.netns.delivery_ns`, checked by hand.
"""

from __future__ import annotations

import os
import socket

import pytest

from experiments.netns import DelayLink, delivery_ns, experiment_unavailable


def test_delivery_by_hand() -> None:
    # 1 Gbit/s: 8 ns a byte; a 0.5 ms delay
    first = delivery_ns(0, 1000, 0, 500_000, 8.0)
    assert first == 500_000 + 8_000
    # arriving 1 µs later, it waits for the first to be sent: [508 µs, 516 µs)
    second = delivery_ns(1_000, 1000, first, 500_000, 8.0)
    assert second == first + 8_000
    # arriving after the link is free again: only its own delay and size
    assert delivery_ns(2_000_000, 500, second, 500_000, 8.0) == 2_000_000 + 500_000 + 4_000
    # no delay, no rate limit: at once
    assert delivery_ns(7, 1000, 0, 0, 0.0) == 7


def test_the_forwarder_delivers_every_frame_in_order_both_ways() -> None:
    link = DelayLink("tltest")  # no namespaces: __enter__ is not called
    a_outer, a_inner = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    b_outer, b_inner = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    for inner in (a_inner, b_inner):
        inner.setblocking(False)
    link.shape("10gbit", delay_ms=0.01)
    link.forward_between([os.dup(a_inner.fileno()), os.dup(b_inner.fileno())])  # close() closes them
    thread = link._thread
    assert thread is not None
    try:
        frames = [bytes([k]) * (1 + 97 * k) for k in range(20)]
        for frame in frames:
            a_outer.send(frame)
            b_outer.send(frame[::-1])
        a_outer.settimeout(30)
        b_outer.settimeout(30)
        assert [b_outer.recv(4096) for _ in frames] == frames
        assert [a_outer.recv(4096) for _ in frames] == [f[::-1] for f in frames]
    finally:
        link.close()  # stops the forwarder (its pipe), joins it, closes the copies; no namespace
        for s in (a_outer, a_inner, b_outer, b_inner):
            s.close()
    assert not thread.is_alive()
    assert link.frames == 2 * len(frames)
    assert link.dropped == 0


def test_a_delayed_link_needs_the_tun_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    why = experiment_unavailable()
    if why is not None:
        pytest.skip(f"namespace experiments {why}")
    monkeypatch.setattr("experiments.netns._TUN", "/nonexistent/tun")
    assert experiment_unavailable() is None
    refused = experiment_unavailable(delay=True)
    assert refused is not None
    assert refused.startswith("needs /nonexistent/tun (the kernel's TUN/TAP driver) for a delayed link")
