"""Grad-ready marker names: the format the what-if engine parses (no torch needed)."""

from __future__ import annotations

import pytest

from timeline.capture import GRAD_READY_PREFIX, format_grad_ready_name, parse_grad_ready_name


@pytest.mark.parametrize(
    ("param", "nbytes"),
    [("0.weight", 524288), ("encoder.layers.11.self_attn.in_proj_weight", 9437184), ("bias", 0)],
)
def test_round_trip(param: str, nbytes: int) -> None:
    name = format_grad_ready_name(param, nbytes)
    assert name == f"timeline.grad_ready:{param}:{nbytes}"
    assert name.startswith(GRAD_READY_PREFIX)
    assert parse_grad_ready_name(name) == (param, nbytes)


@pytest.mark.parametrize(
    "name",
    [
        "ProfilerStep#3",
        "gloo:all_reduce",
        "timeline.grad_ready:",
        "timeline.grad_ready:w",
        "timeline.grad_ready:w:",
        "timeline.grad_ready::12",
        "timeline.grad_ready:w:12kB",
        "timeline.grad_ready:a:b:12",
        "xtimeline.grad_ready:w:12",
    ],
)
def test_other_names_are_not_markers(name: str) -> None:
    assert parse_grad_ready_name(name) is None
