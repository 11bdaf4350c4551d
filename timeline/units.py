"""Formatting of durations and ratios for people (terminal tables, the report)."""

from __future__ import annotations

__all__ = ["format_ns", "format_ratio", "format_value"]


def format_ns(value: int | float | None) -> str:
    """Format nanoseconds for people: ``12.35 ms``, ``840.0 µs``, ``1.204 s``; ``-`` when unknown."""
    if value is None:
        return "-"
    magnitude = abs(value)
    if magnitude >= 1_000_000_000:
        return f"{value / 1e9:.3f} s"
    if magnitude >= 1_000_000:
        return f"{value / 1e6:.2f} ms"
    if magnitude >= 1_000:
        return f"{value / 1e3:.1f} µs"
    return f"{value:.0f} ns"


def format_ratio(value: float | None) -> str:
    """Format a ratio in [0, 1] as a percentage; ``-`` when unknown."""
    return "-" if value is None else f"{100 * value:.1f}%"


def format_value(value: float | None, unit: str) -> str:
    """Format a value of a metric for people: ``12.35 ms``, ``25.00%``, ``1.20 GB/s``; ``-`` when unknown.

    Ratios are stored as fractions and shown as percentages (rendering only).
    """
    if value is None:
        return "-"
    if unit == "ns":  # as format_ns, but a fraction of a nanosecond kept (a mean, a percentile)
        return format_ns(value) if abs(value) >= 1e3 else f"{round(value, 1):g} ns"
    if unit == "ratio":
        return f"{100 * value:.2f}%"
    if unit in ("bytes", "B/s"):
        suffix = "B" if unit == "bytes" else "B/s"
        for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
            if abs(value) >= scale:
                return f"{value / scale:.2f} {prefix}{suffix}"
        return f"{value:.0f} {suffix}"
    if unit == "Gbit/s":
        return f"{value:.2f} Gbit/s"
    if unit == "count":
        return f"{value:g}"
    return f"{value:.4g} {unit}"
