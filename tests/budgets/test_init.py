"""``timeline init``: starter budgets derived from a run, written as a budget file the run passes.

The limits are checked against the rule of docs/ci.md ("Starter budgets") recomputed here from the
per-iteration values: on a synthetic run from the values its builder puts in (exposed ``a`` ns of a
1000 ns step, ``100`` ns hidden: ratio ``a / 1000``, hidden ratio ``100 / (100 + a)``), and on the
sample traces from the iteration rows with the statistics module.
"""

from __future__ import annotations

import math
import os
import statistics
import tomllib
from pathlib import Path

import msgspec
import polars as pl
import pytest

from tests.budgets.runs import iteration_frames, run_frames, write_run
from tests.builders import REPO, frames_of, run_timeline
from timeline import compute_overlap, load
from timeline.budgets import BudgetFile, format_value, parse_budgets, read_budget_file
from timeline.budgets.starter import (
    EARLIER_MARKERS,
    MARGIN_FLOOR,
    MARGIN_K,
    MARKER,
    check_starter_target,
    render_starter,
    starter_budgets,
    write_starter,
)
from timeline.errors import TraceContentError, UsageError

SAMPLE = REPO / "sample_traces" / "ddp_gloo"
# exposed ns per iteration of each rank; the first iteration of each is the slow warm-up
BASE = {0: [250, 100, 120, 90, 140], 1: [260, 110, 95, 130, 105]}
WORSE = {rank: [a + 100 for a in values] for rank, values in BASE.items()}
STEP = 1000
HIDDEN = 100


def expected_limit(values: list[float], *, better: str, unit: str, floor: float) -> float:
    """The documented rule, from the values alone: worst ± max(1.5 × IQR, floor), rounded, never inside."""
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")  # numpy's linear percentiles
    margin = max(1.5 * (q3 - q1), floor)
    digits = 4 if unit == "ratio" else 0
    scale = 10_000.0 if unit == "ratio" else 1.0
    if better == "lower":
        worst = max(values)
        return max(float(round(worst + margin, digits)), math.ceil(worst * scale) / scale)
    worst = min(values)
    return min(float(round(worst - margin, digits)), math.floor(worst * scale) / scale)


def after_warmup(per_rank: dict[int, list[int]]) -> list[int]:
    return [a for values in per_rank.values() for a in values[1:]]


def test_constants_are_the_documented_ones() -> None:
    doc = (REPO / "docs" / "ci.md").read_text(encoding="utf-8")
    assert (MARGIN_K, MARGIN_FLOOR) == (1.5, 0.02)
    assert "limit = worst + max(1.5 × IQR, floor)" in doc


def test_margins_equal_an_independent_computation_from_the_iterations() -> None:
    starter = starter_budgets(run_frames(BASE))
    exposed = after_warmup(BASE)
    values = {
        "exposed_comm_ns": [float(a) for a in exposed],
        "exposed_comm_ratio": [a / STEP for a in exposed],
        "hidden_comm_ratio": [HIDDEN / (HIDDEN + a) for a in exposed],
        "step_ns": [float(STEP)] * len(exposed),
    }
    assert starter.skip_iterations == 1
    assert (starter.ranks, starter.iterations) == (2, 10)
    assert starter.median_step_ns == STEP
    assert [b.metric.name for b in starter.budgets] == list(values)
    for budget in starter.budgets:
        samples = values[budget.metric.name]
        ratio = budget.metric.unit == "ratio"
        floor = 0.02 if ratio else 0.02 * STEP
        q1, _, q3 = statistics.quantiles(samples, n=4, method="inclusive")
        assert budget.samples == len(samples) == 8
        assert budget.worst == pytest.approx(max(samples) if budget.bound == "max" else min(samples))
        assert budget.iqr == pytest.approx(q3 - q1)
        assert budget.margin == pytest.approx(max(1.5 * (q3 - q1), floor))
        assert budget.left_out is None
        want = expected_limit(samples, better=budget.metric.better, unit=budget.metric.unit, floor=floor)
        assert budget.limit == pytest.approx(want, abs=1e-12)
    # by hand: exposed after warm-up 90..140, p25 98.75, p75 122.5, margin 1.5 × 23.75 = 35.625
    assert starter.budgets[0].limit == 176
    assert starter.budgets[1].limit == 0.1756  # 0.175625 to the nearest 4 decimals (half to even)
    assert starter.budgets[3].limit == STEP + 20  # no spread: the floor, 2 % of the step


def test_margins_on_the_sample_traces_equal_an_independent_computation() -> None:
    trace = load(SAMPLE)
    overlap = compute_overlap(trace.events)
    rows = overlap.iterations.sort("rank", "start_ns").to_dicts()
    per_rank: dict[int, list[dict[str, object]]] = {}
    for row in rows:
        per_rank.setdefault(int(str(row["rank"])), []).append(row)
    kept = [row for ranks_rows in per_rank.values() for row in ranks_rows[1:]]  # 3 steps each: skip 1
    median_step = statistics.median(float(str(row["step_ns"])) for row in kept)
    starter = starter_budgets(frames_of(trace, label=str(SAMPLE)))
    assert starter.skip_iterations == 1
    assert starter.median_step_ns == pytest.approx(median_step)
    for budget in starter.budgets:
        samples = [float(str(row[budget.metric.name])) for row in kept]
        floor = 0.02 if budget.metric.unit == "ratio" else 0.02 * median_step
        want = expected_limit(samples, better=budget.metric.better, unit=budget.metric.unit, floor=floor)
        assert budget.limit == pytest.approx(want, abs=1e-12), budget.metric.name


def test_the_written_file_parses_with_the_budget_parser_and_states_its_figures(tmp_path: Path) -> None:
    starter = starter_budgets(run_frames(BASE))
    path = tmp_path / "timeline.toml"
    write_starter(path, render_starter(starter, version="9.9"), force=False)
    text = path.read_text(encoding="utf-8")
    assert text.startswith(f"{MARKER} (timeline 9.9)")
    parsed = read_budget_file(path)
    assert [b.metric.name for b in parsed.budgets] == [b.metric.name for b in starter.budgets]
    assert parsed.regressions == ()
    for budget, written in zip(starter.budgets, parsed.budgets, strict=True):
        assert written.aggregate == budget.bound
        assert written.over == "all"
        assert written.scope.skip_iterations == 1
        assert (written.upper if budget.bound == "max" else written.lower) == budget.limit
        assert (written.lower if budget.bound == "max" else written.upper) is None
    exposed = after_warmup(BASE)
    q1, _, q3 = statistics.quantiles([float(a) for a in exposed], n=4, method="inclusive")
    worst = format_value(max(exposed), "ns")
    assert f"worst (largest) {worst} of 8 sample(s), IQR {format_value(q3 - q1, 'ns')};" in text
    margin = format_value(1.5 * (q3 - q1), "ns")
    assert f"# margin = max(1.5 × IQR, 2 % of the median step {format_value(STEP, 'ns')}) = {margin}." in text
    hidden = [HIDDEN / (HIDDEN + a) for a in exposed]
    assert f"worst (smallest) {format_value(min(hidden), 'ratio')} of 8 sample(s)" in text
    assert "#   2 rank(s), 10 rank-iteration(s); each rank's first iteration is left out as warm-up" in text


def test_check_after_init_passes_on_the_same_run_and_fails_on_a_worse_one(tmp_path: Path) -> None:
    base = write_run(tmp_path / "base.parquet", BASE)
    worse = write_run(tmp_path / "worse.parquet", WORSE)
    result = run_timeline("init", base, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert (
        result.stderr
        == "wrote 4 starter budgets to timeline.toml; check a run with: timeline check PATH...\n"
    )
    same = run_timeline("check", base, cwd=tmp_path)
    assert same.returncode == 0, same.stdout + same.stderr
    assert same.stdout.startswith("timeline check: 4 checks, all hold")
    worse_check = run_timeline("check", worse, "--json", cwd=tmp_path)
    assert worse_check.returncode == 1, worse_check.stdout + worse_check.stderr
    verdicts = {v["metric"]: v["status"] for v in msgspec.json.decode(worse_check.stdout)["verdicts"]}
    # more exposed communication, the step unchanged: the communication budgets catch it
    assert verdicts == {
        "exposed_comm_ns": "fail",
        "exposed_comm_ratio": "fail",
        "hidden_comm_ratio": "fail",
        "step_ns": "pass",
    }


def test_init_on_the_sample_traces_then_check_exits_0(tmp_path: Path) -> None:
    result = run_timeline("init", SAMPLE, "-o", "ci.toml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    # since #20 the sample's worst hidden share (15.77 %) leaves no room for a hidden_comm_ratio limit
    left_out = "wrote 3 starter budgets to ci.toml (1 left out: see the file's comments); check a run with: "
    assert result.stderr.startswith(left_out)
    assert result.stderr.endswith(" --budget ci.toml\n")
    check = run_timeline("check", SAMPLE, "--budget", "ci.toml", cwd=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr


def test_force_replaces_only_a_starter_file(tmp_path: Path) -> None:
    text = render_starter(starter_budgets(run_frames(BASE)), version="9.9")
    path = tmp_path / "timeline.toml"
    write_starter(path, f"{MARKER}\n# an earlier starter file\n", force=False)
    with pytest.raises(UsageError, match=r"timeline\.toml: exists; pass --force to overwrite it$"):
        write_starter(path, text, force=False)
    write_starter(path, text, force=True)
    assert path.read_text(encoding="utf-8") == text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["timeline.toml"]  # no partial file left


@pytest.mark.parametrize("kind", ["foreign file", "symbolic link", "directory", "fifo"])
def test_what_timeline_did_not_write_is_refused_even_with_force(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "timeline.toml"
    what = {
        "foreign file": "a file that timeline init did not write",
        "symbolic link": "a symbolic link",
        "directory": "a directory",
        "fifo": "a FIFO",
    }[kind]
    if kind == "foreign file":
        path.write_text("[[budgets]]\nmetric = 'step_ns'\nmax = 1\n", encoding="utf-8")
    elif kind == "symbolic link":
        starter = tmp_path / "starter.toml"
        starter.write_text(MARKER + "\n", encoding="utf-8")
        path.symlink_to(starter)
    elif kind == "directory":
        path.mkdir()
    else:
        os.mkfifo(path)
    before = sorted((p.name, p.is_symlink()) for p in tmp_path.iterdir())
    with pytest.raises(UsageError) as info:
        write_starter(path, "anything\n", force=True)
    assert str(info.value) == (
        f"{path}: exists and is {what}; --force replaces only a starter budget file written by timeline "
        "init; choose another file with -o FILE"
    )
    assert sorted((p.name, p.is_symlink()) for p in tmp_path.iterdir()) == before
    if kind == "foreign file":
        assert path.read_text(encoding="utf-8").startswith("[[budgets]]")


def test_other_places_are_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"^.*missing: no such directory; create it or choose another"):
        check_starter_target(tmp_path / "missing" / "timeline.toml", force=False)
    with pytest.raises(UsageError, match=r"not \[tool\.timeline\] of pyproject\.toml; pass -o timeline"):
        check_starter_target(tmp_path / "pyproject.toml", force=True)
    check_starter_target(tmp_path / "timeline.toml", force=False)  # a new file is fine


def test_cli_refuses_before_reading_the_run(tmp_path: Path) -> None:
    (tmp_path / "timeline.toml").write_text("mine\n", encoding="utf-8")
    missing = tmp_path / "no-such-run"
    result = run_timeline("init", missing, "--force", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("error: timeline.toml: exists and is a file that timeline init did not")
    assert (tmp_path / "timeline.toml").read_text(encoding="utf-8") == "mine\n"


def test_check_init_is_refused_naming_timeline_init(tmp_path: Path) -> None:
    # starter budgets are a command of their own: check --init writes nothing and names it
    for option in ("--init", "--force"):
        result = run_timeline("check", SAMPLE, option, cwd=tmp_path)
        assert (result.returncode, result.stdout, result.stderr) == (
            2,
            "",
            f"error: {option} moved: write starter budgets with 'timeline init PATH...'\n",
        )
    assert list(tmp_path.iterdir()) == []


def test_an_earlier_starter_file_is_replaced_with_force(tmp_path: Path) -> None:
    # written by timeline check --init, before timeline init: its first line is the earlier marker
    path = tmp_path / "timeline.toml"
    path.write_text(f"{EARLIER_MARKERS[0]} (timeline 0.1.0): edit freely.\n", encoding="utf-8")
    text = render_starter(starter_budgets(run_frames(BASE)), version="9.9")
    write_starter(path, text, force=True)
    assert path.read_text(encoding="utf-8") == text
    assert EARLIER_MARKERS == ("# Starter budgets written by timeline check --init",)
    assert MARKER == "# Starter budgets written by timeline init"


def test_init_help_names_its_options() -> None:
    result = run_timeline("init", "--help")
    assert result.returncode == 0, result.stderr
    for option in ("-o, --output", "--force", "--rank", "--executor"):
        assert option in result.stdout
    assert "Write starter budgets from a run" in result.stdout


def test_a_limit_every_run_holds_is_left_out_with_its_reason() -> None:
    frames = iteration_frames({0: [0.5, 0.97, 0.99], 1: [0.5, 0.98, 0.985]}, column="exposed_comm_ratio")
    starter = starter_budgets(frames)
    by_name = {b.metric.name: b for b in starter.budgets}
    ratio = by_name["exposed_comm_ratio"]
    assert ratio.worst == 0.99
    assert ratio.limit == 1.01  # 0.99 + the floor 0.02: a ratio is never above 1
    assert (
        ratio.left_out
        == "worst 99.00% with its margin gives a limit of 100% or beyond, which every run holds"
    )
    assert by_name["exposed_comm_ns"].left_out == "exposed_comm_ns is unknown on every selected row"
    assert [b.metric.name for b in starter.written] == ["step_ns"]
    text = render_starter(starter, version="9.9")
    assert (
        "# exposed_comm_ratio: left out: worst 99.00% with its margin gives a limit of 100% or beyond, "
        "which\n# every run holds.\n"
    ) in text
    assert text.count("[[budgets]]") == 1
    assert len(read_budget_file_text(text).budgets) == 1


def read_budget_file_text(text: str) -> BudgetFile:
    return parse_budgets(tomllib.loads(text), source="timeline.toml", text=text)


def test_a_run_with_nothing_to_derive_from_is_an_error() -> None:
    frames = iteration_frames({0: [0.1, 0.2]}, column="exposed_comm_ratio")
    frames = type(frames)(
        label="runs/empty",
        iterations=frames.iterations.with_columns(
            step_ns=pl.lit(None, pl.Int64), exposed_comm_ratio=pl.lit(None, pl.Float64)
        ),
        ranks=frames.ranks,
    )
    with pytest.raises(TraceContentError) as info:
        starter_budgets(frames)
    message = str(info.value)
    assert message.startswith("runs/empty: no budget can be derived from this run (exposed_comm_ns: ")
    assert message.endswith("; pass traces with compute and communication of a few profiled steps")


def test_a_horovod_timeline_alone_gets_the_step_budget_only(tmp_path: Path) -> None:
    run = REPO / "sample_traces" / "horovod" / "horovod_v021.json"
    result = run_timeline("init", run, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr == (
        "wrote 1 starter budget to timeline.toml (3 left out: see the file's comments); check a run "
        "with: timeline check PATH...\n"
    )
    text = (tmp_path / "timeline.toml").read_text(encoding="utf-8")
    assert "# exposed_comm_ns: left out: exposed_comm_ns is unknown on every selected row (a Horovod" in text
    assert [b.metric.name for b in read_budget_file(tmp_path / "timeline.toml").budgets] == ["step_ns"]
    assert run_timeline("check", run, cwd=tmp_path).returncode == 0
