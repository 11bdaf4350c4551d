"""Every terminal renderer fits the terminal's width (#41): analyze, collectives, whatif, check and the
Flight Recorder verdict at 60, 80, 120 and 200 columns.

Each case is run once at 1,000 columns (nothing wraps, no column is left out) and at each width.
At a width: no line is longer than it; nothing is cut; and no word or number is split: every word
of the narrow output, stripped of the table rules and of punctuation, is a word of the wide output
(a number cut to ``3.5 M…`` or a name split into ``tensor_model_parall`` / ``el`` would not be),
except the words of the line that names the columns left out, and names abbreviated in their
middle (``tower_…AddN_1_0``: its start and its end are those of a name of the wide output; never a
number).
"""

from __future__ import annotations

import re
from functools import cache

import pytest
from typer.testing import CliRunner

from cli.main import app
from tests.builders import WIDTH_CASES as CASES

WIDTHS = (60, 80, 120, 200)

_RULES = re.compile(r"[┏┓┗┛┡┩┃━╇┳┻╋│─┼└┘┌┐├┤┬┴]")
_EDGES = "()[]{},;:."


@cache
def rendered(case: str, width: int) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(CASES[case]), env={"COLUMNS": str(width), "NO_COLOR": "1"})
    return result.exit_code, result.stdout


def words(text: str) -> set[str]:
    """Return the words of a rendered text: its table rules removed, each word stripped of punctuation."""
    return {w.strip(_EDGES) for w in _RULES.sub(" ", text).split()} - {""}


def _abbreviates(word: str, wide: set[str]) -> bool:
    """Whether ``word`` is a wide word shortened in its middle: ``start…end`` of one word."""
    head, mark, tail = word.partition("…")
    return (
        bool(mark)
        and len(head) + len(tail) >= 8
        and any(w.startswith(head) and w.endswith(tail) and len(w) > len(word) for w in wide)
    )


def _left_out_lines(text: str) -> str:
    """Return the lines that name the columns a table left out (a paragraph starting ``(not shown``)."""
    kept, inside = [], False
    for line in text.splitlines():
        inside = line.startswith("(not shown at this width") or (inside and line.startswith(" "))
        if inside:
            kept.append(line)
    return "\n".join(kept)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_output_fits_the_width_and_cuts_nothing(case: str, width: int) -> None:
    code, wide = rendered(case, 1000)
    assert code in (0, 1), wide  # check exits 1: a budget of budget.toml is exceeded on purpose
    narrow_code, narrow = rendered(case, width)
    assert narrow_code == code
    lines = narrow.splitlines()
    assert lines, "nothing printed"
    too_long = [line for line in lines if len(line) > width]
    assert not too_long, f"{len(too_long)} line(s) over {width} columns, e.g. {too_long[0]!r}"
    wide_words = words(wide)
    split = {w for w in words(narrow) - wide_words - words(_left_out_lines(narrow)) if w != "…"}
    abbreviations = {w for w in split if _abbreviates(w, wide_words)}
    assert not split - abbreviations, f"words split or cut at {width} columns: {sorted(split)[:10]}"
    assert not any(re.fullmatch(r"[\d.,…]+", w) for w in abbreviations), "a number abbreviated"


@pytest.mark.parametrize("case", sorted(CASES))
def test_nothing_is_left_out_at_200_columns_that_120_shows(case: str) -> None:
    # a wider terminal shows at least the words a narrower one does (but its abbreviations, longer)
    narrow = rendered(case, 120)[1]
    shown = {w for w in words(narrow) - words(_left_out_lines(narrow)) if "…" not in w}
    assert shown <= words(rendered(case, 200)[1])


def test_a_narrow_table_names_what_it_left_out() -> None:
    _, narrow = rendered("analyze", 60)
    assert "(not shown at this width: mode, compute, comm, hidden," in narrow
    _, wide = rendered("analyze", 1000)
    assert "not shown" not in wide
    header = next(line for line in wide.splitlines() if "┃ rank ┃" in line)
    for column in ("mode", "compute", "comm", "hidden", "hidden/comm"):
        assert f" {column} " in header
