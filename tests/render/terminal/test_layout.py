"""The fitting of tables and prose to a width (timeline/render/terminal/layout.py and tables.py)."""

from __future__ import annotations

import pytest
from rich.console import Console

from timeline.render.terminal.layout import (
    ABBREVIATED_MIN,
    Col,
    abbreviate,
    counted,
    fit_columns,
    plain_table,
    wrap_plain,
)
from timeline.render.terminal.tables import print_prose, print_table

COLUMNS = [
    Col("rank"),
    Col("mode", justify="left", drop=3),
    Col("step time"),
    Col("idle/step", drop=1),
    Col("hidden", drop=2),
]
ROWS = [["0", "gpu", "122.28 ms", "21.6%", "19.68 ms"], ["12", "cpu", "1.204 s", "3.0%", "840.0 µs"]]


def boxed_width(widths: list[int]) -> int:
    # rich's boxed table: a rule left of each column and at the right end, one space each side of a cell
    return sum(w + 2 for w in widths) + len(widths) + 1


def test_a_table_that_fits_keeps_every_column_at_its_natural_width() -> None:
    shown, widths = fit_columns(COLUMNS, ROWS, 200)
    assert shown == [0, 1, 2, 3, 4]
    assert widths == [4, 4, 9, 9, 8]  # the longest of each column's header and cells


def test_the_column_that_matters_least_goes_first_then_the_next() -> None:
    # natural: 4+4+9+9+8 = 34, + 3 per column + 1 = 50; "mode" (drop 3) goes first
    shown, widths = fit_columns(COLUMNS, ROWS, 49)
    assert shown == [0, 2, 3, 4]
    assert boxed_width(widths) <= 49
    # then "hidden" (drop 2): 4 + 9 + 9 + 3*3 + 1 = 32 columns
    shown, widths = fit_columns(COLUMNS, ROWS, 32)
    assert shown == [0, 2, 3]
    assert widths == [4, 9, 9]
    # one column fewer: "idle/step" (drop 1) goes; "step time" stays 9 wide ("122.28 ms" is never cut)
    shown, widths = fit_columns(COLUMNS, ROWS, 31)
    assert shown == [0, 2]
    assert widths == [4, 9]


def test_a_number_is_never_narrowed_below_its_width() -> None:
    shown, widths = fit_columns(COLUMNS, ROWS, 20)
    for i, w in zip(shown, widths, strict=True):
        assert w >= max(len(row[i]) for row in ROWS)


def test_names_wrap_at_spaces_before_they_are_abbreviated_and_only_when_nothing_else_can_go() -> None:
    columns = [Col("group", justify="left", wrap=True), Col("tensor", justify="left", abbreviate=True)]
    rows = [["tp dp", "tower_0/v0/HorovodAllreduce_gradients_AddN_1_0"]]
    shown, widths = fit_columns(columns, rows, 60)
    assert widths == [5, 46]  # fits whole
    shown, widths = fit_columns(columns, rows, 40)
    assert shown == [0, 1]
    assert widths[0] == 5  # the wrap column keeps its width when the names can be shortened instead
    assert widths[1] == 40 - 5 - 3 * 2 - 1
    shown, widths = fit_columns(columns, rows, 24)  # 5 + 12 + 3*2 + 1: the names at their shortest
    assert shown == [0, 1]
    assert widths == [5, ABBREVIATED_MIN]


def test_abbreviate_keeps_the_start_and_the_end() -> None:
    name = "tower_0/v0/HorovodAllreduce_gradients_AddN_1_0"
    short = abbreviate(name, 20)
    assert len(short) == 20
    head, mark, tail = short.partition("…")
    assert mark == "…"
    assert name.startswith(head)
    assert name.endswith(tail)
    assert abbreviate("short", 20) == "short"


@pytest.mark.parametrize("width", [60, 80, 120])
def test_print_table_fits_and_names_the_columns_left_out(width: int) -> None:
    console = Console(width=width, record=True, color_system=None)
    columns = [Col(f"column {k}", drop=k) for k in range(12)]
    rows = [[f"v{k:02d}x" for k in range(12)]]
    print_table(
        console, "A table with a long title that has to wrap at a narrow width, at its spaces", columns, rows
    )
    text = console.export_text()
    assert all(len(line) <= width for line in text.splitlines())
    shown = [k for k in range(12) if f"v{k:02d}x" in text]
    left = [k for k in range(12) if k not in shown]
    assert shown[0] == 0
    if left:
        assert "(not shown at this width: " + ", ".join(f"column {k}" for k in left) in " ".join(text.split())
        # the columns left out are those that matter least: every one left out has a higher drop
        assert min(left) > max(shown)


def test_prose_wraps_with_a_hanging_indent_and_keeps_a_number_with_its_unit() -> None:
    console = Console(width=60, record=True, color_system=None)
    text = "note: " + "the replay of the run predicts 10.90 ms of exposed communication " * 3
    print_prose(console, text, hang=6, markup=False)
    lines = console.export_text().splitlines()
    assert len(lines) > 1
    assert all(len(line) <= 60 for line in lines)
    assert all(line.startswith("      ") and not line.startswith("       ") for line in lines[1:])
    assert not any(line.rstrip().endswith("10.90") for line in lines)
    assert " ".join(" ".join(lines).split()) == " ".join(text.split())


def test_plain_table_and_wrap_plain() -> None:
    lines = plain_table(COLUMNS, ROWS, 30)
    assert all(len(line) <= 30 for line in lines)
    assert lines[0].split()[0] == "rank"
    assert "(not shown at this width: mode, hidden; --json has them)" in " ".join(" ".join(lines).split())
    assert plain_table(COLUMNS, ROWS, None)[0].split() == [
        "rank",
        "mode",
        "step",
        "time",
        "idle/step",
        "hidden",
    ]
    wrapped = wrap_plain("FAIL exposed comm per step: " + "word " * 30, 40)
    assert all(len(line) <= 40 for line in wrapped)
    assert all(line.startswith("  ") for line in wrapped[1:])


def test_counted() -> None:
    assert counted(1, "rank") == "1 rank"
    assert counted(0, "rank") == "0 ranks"
    assert counted(1234, "event") == "1,234 events"


def test_a_column_of_unknowns_goes_before_any_other() -> None:
    columns = [Col("rank"), Col("step"), Col("compute"), Col("comm", drop=1)]
    rows = [["0", "183.872 s", "-", "47.559 s"]]
    # 4 + 9 + 7 + 8 + 3*4 + 1 = 41: one column must go; "compute" (never dropped, but unknown) goes
    shown, _ = fit_columns(columns, rows, 40)
    assert shown == [0, 1, 3]
