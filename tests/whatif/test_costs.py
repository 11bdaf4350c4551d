"""Cost models: bits on the wire, latency steps, collective time, durations."""

from __future__ import annotations

from typing import Any

import pytest

from timeline.errors import UsageError
from timeline.whatif.costs import bandwidth_bits, collective_time_s, latency_steps, parse_duration_s


@pytest.mark.parametrize(
    ("collective", "n", "algorithm", "bits"),
    [
        ("all_reduce", 2, "ring", 8000.0),  # 2(n-1)/n = 1
        ("all_reduce", 4, "ring", 12000.0),  # 1.5
        ("all_reduce", 64, "ring", 2 * 63 / 64 * 8000),
        ("all_reduce", 64, "tree", 16000.0),
        ("all_gather", 4, "ring", 6000.0),
        ("reduce_scatter", 8, "ring", 7000.0),
        ("all_to_all", 2, "ring", 4000.0),
        ("broadcast", 16, "ring", 8000.0),
        ("send", 2, "ring", 8000.0),
        ("barrier", 8, "ring", 0.0),
        (None, 8, "ring", 0.0),
        ("all_reduce", 1, "ring", 0.0),
    ],
)
def test_bandwidth_bits(collective: str | None, n: int, algorithm: str, bits: float) -> None:
    assert bandwidth_bits(collective, 1000, n, algorithm=algorithm) == pytest.approx(bits)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("collective", "n", "algorithm", "steps"),
    [
        ("all_reduce", 64, "ring", 126),
        ("all_reduce", 64, "tree", 12),
        ("all_reduce", 5, "tree", 6),
        ("all_gather", 8, "ring", 7),
        ("all_gather", 8, "tree", 3),
        ("broadcast", 4, "ring", 3),
        ("recv", 64, "ring", 1),
        ("barrier", 9, "ring", 4),
        ("all_reduce", 1, "ring", 0),
    ],
)
def test_latency_steps(collective: str, n: int, algorithm: str, steps: int) -> None:
    assert latency_steps(collective, n, algorithm=algorithm) == steps  # type: ignore[arg-type]


def test_collective_time_is_latency_plus_bandwidth_term() -> None:
    # 100 MB ring all-reduce over 64 ranks on 100 Gbit/s at 80 %, 5 µs per step, compressed 2x.
    bits = 2 * 63 / 64 * 8e8
    expected = 126 * 5e-6 + bits / 2 / (100e9 * 0.8)
    got = collective_time_s(
        "all_reduce", 100e6, 64, link_bps=100e9, efficiency=0.8, latency_s=5e-6, compression=2
    )
    assert got == pytest.approx(expected)


@pytest.mark.parametrize(
    "bad", [{"link_bps": 0}, {"link_bps": 1e9, "efficiency": 0}, {"link_bps": 1e9, "compression": -1}]
)
def test_collective_time_rejects_non_positive_settings(bad: dict[str, Any]) -> None:
    with pytest.raises(UsageError, match="must all be positive"):
        collective_time_s("all_reduce", 1000, 2, **bad)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("5us", 5e-6),
        ("5µs", 5e-6),
        ("0.2 ms", 2e-4),
        ("100ns", 1e-7),
        ("1s", 1.0),
        ("0", 0.0),
        ("1e-3s", 1e-3),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration_s(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("text", "message"), [("5", "needs a unit"), ("fast", "not a duration"), ("-1us", "not a duration")]
)
def test_parse_duration_errors(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_duration_s(text)
