"""Golden outputs: the commands print byte for byte what they printed at commit bf369bb, whose
outputs #37-#42 changed on purpose (the typed results' ``--json``: layout 4 with its kind and
timeline's version, an unmeasured latency null; the words span, exposed/span and idle/span; the
diagnosis' costs and its basis words; tables and prose fitted to the width, a column left out named;
notes folded unless --verbose; the NCCL sample's new cases), and the ``report-data`` cases at
22fe156 (a whole-trace view's label says span, not step). Before it: 66ccaa8 (the run object of
#36), b607444 and fb33636 (#20 and #21). Regenerated here, nothing skipped.

Each file of ``tests/cli/golden/cases/`` is one case, made by ``tests/cli/golden/regenerate.py``
(see its docstring; never run by the tests) from the CLI of a git revision run in a subprocess: the
arguments of ``timeline analyze``, ``collectives``, ``check`` (budgets in
``tests/cli/golden/budget.toml``, also with ``--markdown``/``--junit`` files, and
``budget-pass.toml``) or ``whatif`` on one input (the real traces of ``../shared/traces/kineto``
and ``../shared/traces/horovod``, and ``sample_traces/``), its exit code, stdout, stderr and the
files it wrote. ``report-data`` cases hold :func:`report_digest` of the same input: what
``timeline serve``/``report`` draw.

The test runs the current code in-process (typer's ``CliRunner`` on ``cli.main.app``, whose output
is the subprocess' byte for byte) with the project root as working directory and the environment
the goldens were made with (``COLUMNS=120``, no colour variables, no terminal: no progress bar), and
compares the exit code, stdout, stderr and written files exactly, with one normalisation: some
outputs name inputs by their resolved absolute path (JSON ``files[].path``, load warnings, errors),
and the goldens were made in a checkout at ``/work/main`` with the traces at ``/work/shared``
(:data:`MADE_IN`). Both sides have those two folders written as ``<REPO>`` and ``<SHARED>`` before
they are compared, so the test holds wherever the checkout and ``../shared`` are (CI clones
elsewhere).

When a change alters an output on purpose, regenerate the goldens from the commit that makes it
and name the change in that commit; :data:`CHANGED_BY_ISSUE` (a skip while working) must be empty
when it lands (:func:`test_no_golden_case_is_skipped`).
"""

from __future__ import annotations

import difflib
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from cli.main import app
from tests.builders import run_of
from tests.cli.golden import regenerate
from timeline.errors import TimelineError
from timeline.report.data import prepare_report_data
from timeline.trace import load

ROOT = Path(__file__).resolve().parents[2]
SHARED = (ROOT.parent / "shared").resolve()
MADE_IN = {"<REPO>": "/work/main", "<SHARED>": "/work/shared"}
"""Where the goldens were made: the checkout and the shared folder beside it."""
CASES = Path(__file__).resolve().parent / "golden" / "cases"
OUT = "{out}"  # placeholder, in a case's arguments, of the folder it writes its files into


CHANGED_BY_ISSUE: dict[str, str] = {}
"""Case id → the issue that changes its output on purpose, while the goldens are regenerated.

Empty on every commit that lands: the goldens are regenerated in the change that names why
(:func:`test_no_golden_case_is_skipped` fails otherwise), so every case is checked."""


def test_no_golden_case_is_skipped() -> None:
    assert CHANGED_BY_ISSUE == {}, "regenerate the goldens (tests/cli/golden/regenerate.py) in this change"


# The environment the goldens were made with (regenerate.py); None removes a variable.
ENV: dict[str, str | None] = {**regenerate.ENV, **dict.fromkeys(regenerate.UNSET)}

_FULL_CSV_CHARS = 100_000  # a frame's CSV up to this long is written out; a longer one is hashed
_HEAD_ROWS = 20


def frame_digest(name: str, frame: pl.DataFrame) -> str:
    """Return a frame as text: its shape and schema, and its rows as CSV (hashed, with a head, if long)."""
    lines = [f"## {name}: {frame.height} rows x {frame.width} columns"]
    lines += [f"#   {column}: {dtype}" for column, dtype in frame.schema.items()]
    csv = frame.write_csv()
    if len(csv) <= _FULL_CSV_CHARS:
        return "\n".join([*lines, csv])
    lines.append(f"# csv sha256 {hashlib.sha256(csv.encode()).hexdigest()} ({len(csv)} chars); first rows:")
    return "\n".join([*lines, frame.head(_HEAD_ROWS).write_csv()])


def report_digest(path: str) -> str:
    """Return what the report draws from one input (``prepare_report_data``) as deterministic text.

    Loads the input as ``timeline serve`` does (``timeline.trace.load``, ``compute_overlap``,
    ``timeline.report.data.prepare_report_data``); reads only public attributes of the result. A
    bad input gives its ``error:`` line.
    """
    try:
        trace = load([Path(path)])
        data = prepare_report_data(run_of(trace))
    except TimelineError as exc:
        return f"error: {exc}\n"
    parts = [f"# report data of {path}", *(f"# load warning: {w}" for w in trace.warnings)]
    frames = {
        "lanes": data.lanes,
        "views": data.views,
        "segments": data.segments,
        "breakdown": data.breakdown,
        "omitted": data.omitted,
        "overlap.ranks": data.overlap.ranks,
        "overlap.iterations": data.overlap.iterations,
        "overlap.collectives": data.overlap.collectives,
        "overlap.windows": data.overlap.windows,
    }
    if data.collectives is None:
        parts.append("# collectives: None")
    else:
        frames |= {
            "collectives.collectives": data.collectives.collectives,
            "collectives.ranks": data.collectives.ranks,
            "collectives.mismatches": data.collectives.mismatches,
        }
        parts += [f"# collectives warning: {w}" for w in data.collectives.warnings]
    parts += [frame_digest(name, frame) for name, frame in frames.items()]
    return "\n".join(parts)


@dataclass(frozen=True)
class Golden:
    """One case file: what ran and what it printed and wrote."""

    id: str
    kind: str  # "cli": args of timeline; "report": args is the input of report_digest
    args: list[str]
    exit_code: int
    sections: dict[str, str]  # "stdout", "stderr", "file NAME"


def read_golden(path: Path) -> Golden:
    """Read a case file written by ``regenerate.write_case``."""
    text = path.read_text(encoding="utf-8")
    _, meta_line, rest = text.split("\n", 2)
    meta = json.loads(meta_line)
    sections: dict[str, str] = {}
    at = 0
    for name, length in meta["sections"]:
        marker = f"=== {name} ===\n"
        assert rest.startswith(marker, at), f"{path}: section {name} not where expected"
        at += len(marker)
        sections[name] = rest[at : at + length]
        at += length + 1
    return Golden(meta["id"], meta["kind"], meta["args"], meta["exit_code"], sections)


def _diff(name: str, want: str, got: str) -> str:
    lines = difflib.unified_diff(
        want.splitlines(keepends=True), got.splitlines(keepends=True), "golden", "now", n=1
    )
    shown = "".join(line if len(line) <= 300 else f"{line[:300]}…\n" for line in list(lines)[:80])
    return f"{name} differs:\n{shown}"


def _placeholders(text: str, folders: dict[str, str]) -> str:
    """Write the checkout's and the shared folder's absolute paths as ``<REPO>`` and ``<SHARED>``."""
    for placeholder, folder in folders.items():
        text = text.replace(folder + "/", placeholder + "/")
    return text


def _run(golden: Golden, tmp_path: Path) -> tuple[int, dict[str, str]]:
    if golden.kind == "report":
        return 0, {"stdout": report_digest(golden.args[0]), "stderr": ""}
    args = [arg.replace(OUT, str(tmp_path)) for arg in golden.args]
    result = CliRunner(env=ENV).invoke(app, args, prog_name="timeline", catch_exceptions=False)
    got = {"stdout": result.stdout, "stderr": result.stderr}
    for name in golden.sections:
        if name.startswith("file "):
            written = tmp_path / name.removeprefix("file ")
            got[name] = written.read_text(encoding="utf-8") if written.exists() else ""
    return result.exit_code, got


@pytest.mark.parametrize("path", sorted(CASES.glob("*.txt")), ids=lambda path: path.stem)
def test_golden(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    golden = read_golden(path)
    if golden.id in CHANGED_BY_ISSUE:
        pytest.skip(f"changed on purpose: {CHANGED_BY_ISSUE[golden.id]}")
    monkeypatch.chdir(ROOT)
    exit_code, got = _run(golden, tmp_path)
    here = {"<REPO>": str(ROOT), "<SHARED>": str(SHARED)}
    wanted = {name: _placeholders(text, MADE_IN) for name, text in golden.sections.items()}
    now = {name: _placeholders(text, here) for name, text in got.items()}
    differences = [_diff(name, want, now[name]) for name, want in wanted.items() if now[name] != want]
    if exit_code != golden.exit_code:
        differences.insert(0, f"exit code {exit_code}, golden {golden.exit_code}")
    if differences:
        pytest.fail(
            f"{golden.id}: timeline {' '.join(golden.args)}\n" + "\n".join(differences), pytrace=False
        )
