"""--ranks and --iterations (timeline/selection.py): what a run keeps, the same in memory and rank by rank."""

from __future__ import annotations

import json
from functools import cache

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from typer.testing import CliRunner

import timeline
from cli.main import app
from tests.builders import REPO
from timeline.errors import UsageError
from timeline.run import Run
from timeline.selection import describe_numbers, parse_numbers

FOUR = str(REPO / "sample_traces" / "ddp_gloo_4rank")
RANKS, ITERATIONS = [1, 2], [3]


@pytest.mark.parametrize(
    ("text", "numbers"),
    [("0-3,7", (0, 1, 2, 3, 7)), ("5", (5,)), (" 2 , 2-3 ", (2, 3)), ("7,0-1", (0, 1, 7))],
)
def test_parse_numbers(text: str, numbers: tuple[int, ...]) -> None:
    assert parse_numbers(text, "--ranks") == numbers
    assert describe_numbers(numbers) == describe_numbers(sorted(set(numbers)))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("3-1", "--ranks '3-1': the range 3-1 runs backwards; write it 1-3"),
        (
            "a",
            "--ranks 'a': 'a' is not a number or a range; give numbers and ranges separated by commas, "
            "e.g. --ranks 0-3,7",
        ),
        ("-1", "--ranks '-1': '-1' is not a number or a range"),
        ("0-99999999", "--ranks '0-99999999': 0-99999999 is out of range"),
    ],
)
def test_parse_numbers_refuses_with_the_option_and_a_value_that_works(text: str, message: str) -> None:
    with pytest.raises(UsageError) as refused:
        parse_numbers(text, "--ranks")
    assert str(refused.value).startswith(message)


@cache
def runs() -> tuple[Run, Run, Run]:
    """The whole run, and the selection in memory and rank by rank."""
    whole = timeline.analyze(FOUR)
    memory = timeline.analyze(FOUR, ranks=RANKS, iterations=ITERATIONS)
    by_rank = timeline.analyze(FOUR, ranks=RANKS, iterations=ITERATIONS, executor="local")
    return whole, memory, by_rank


def test_the_selection_is_the_same_in_memory_and_rank_by_rank() -> None:
    _, memory, by_rank = runs()
    assert not memory.rank_by_rank
    assert by_rank.rank_by_rank
    for view in ("ranks", "iterations", "collectives", "windows", "comm"):
        assert_frame_equal(getattr(memory.overlap, view), getattr(by_rank.overlap, view))
    assert_frame_equal(memory.matched.collectives, by_rank.matched.collectives)
    one, other = memory.summary_data(), by_rank.summary_data()
    assert one.verdict == other.verdict
    assert one.findings == other.findings


def test_the_selected_iterations_are_those_of_the_whole_run() -> None:
    whole, memory, _ = runs()
    chosen = pl.col("rank").is_in(RANKS) & pl.col("iteration").is_in(ITERATIONS)
    assert_frame_equal(memory.overlap.iterations, whole.overlap.iterations.filter(chosen))
    assert_frame_equal(memory.overlap.windows, whole.overlap.windows.filter(chosen))
    assert set(memory.trace.events.get_column("rank").unique().to_list()) <= set(RANKS)


def test_a_rank_over_its_selected_iterations_is_their_sum() -> None:
    whole, memory, _ = runs()
    rows = whole.overlap.iterations.filter(
        pl.col("rank").is_in(RANKS) & pl.col("iteration").is_in(ITERATIONS)
    ).to_dicts()
    for rank_row in memory.overlap.ranks.to_dicts():
        mine = [r for r in rows if r["rank"] == rank_row["rank"]]
        for name in ("step_ns", "comm_ns", "compute_ns", "hidden_comm_ns", "exposed_comm_ns", "idle_ns"):
            assert rank_row[name] == sum(r[name] for r in mine)
        assert rank_row["exposed_comm_ratio"] == pytest.approx(
            sum(r["exposed_comm_ns"] for r in mine) / sum(r["step_ns"] for r in mine)
        )


def test_the_output_says_what_was_selected() -> None:
    result = CliRunner().invoke(app, ["analyze", FOUR, "--ranks", "1-2", "--iterations", "3", "--json"])
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert sorted(r["rank"] for r in summary["ranks"]) == RANKS
    assert {r["iteration"] for r in summary["iterations"]} == set(ITERATIONS)
    said = (
        "warning: ranks 1-2 and iteration 3 selected (--ranks, --iterations): every figure is of the "
        "selection only"
    )
    assert said in result.stderr.splitlines()
    assert said.removeprefix("warning: ") in summary["warnings"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--ranks", "9"],
            "error: --ranks 9: the traces hold no such rank; they hold ranks 0-3 (e.g. --ranks 0)",
        ),
        (
            ["--iterations", "99"],
            "error: --iterations 99: no selected rank has such an iteration (ProfilerStep#N); 'timeline "
            "analyze' without --iterations lists the iterations",
        ),
    ],
)
def test_a_selection_of_nothing_is_refused(args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["analyze", FOUR, *args])
    assert result.exit_code == 2
    assert message in result.stderr.splitlines()


def test_a_summary_json_is_not_selected_from(tmp_path: object) -> None:
    from pathlib import Path

    summary = Path(str(tmp_path)) / "summary.json"
    written = CliRunner().invoke(app, ["analyze", FOUR, "--json"])
    summary.write_text(written.stdout)
    result = CliRunner().invoke(app, ["diff", str(summary), FOUR, "--ranks", "0"])
    assert result.exit_code == 2
    assert "a summary JSON holds the figures it was written with; --ranks and --iterations select" in (
        result.stderr
    )
