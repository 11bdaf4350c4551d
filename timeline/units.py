"""Formatting of durations and ratios for people (terminal tables, the report)."""

from __future__ import annotations

__all__ = ["format_ns", "format_ratio"]


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
