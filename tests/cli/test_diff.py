"""``timeline diff BASE NEW`` on real runs: every figure against each run's own analyze and collectives.

The expected figures are computed here from ``timeline analyze --json`` and ``timeline collectives
--json`` of each run with :mod:`statistics`: an iteration's figure is the median over ranks, the
summary the median over iterations; the noise of a change is its standard error (a median's
``1.2533 s / √n``, one value's ``s``, ``s`` the sample standard deviation), combined over both runs.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tests.builders import PARAM, REPO, SAMPLES, TRACES, run_timeline
from timeline.results.base import TIMELINE_VERSION
from timeline.results.diff import Diff
from timeline.stats import NOISE_K

GOLDEN = Path(__file__).parent / "diff_golden"
CONTROL = TRACES / "kineto" / "hta_trace_diff" / "control.json.gz"  # rank 3 of 8, A100
TEST = TRACES / "kineto" / "hta_trace_diff" / "test.json.gz"  # rank 1 of 2, V100
GLOO = SAMPLES / "ddp_gloo"
GLOO_MARKERS = SAMPLES / "ddp_gloo_markers"
TIMES = ("step_ns", "compute_ns", "exposed_comm_ns", "hidden_comm_ns")
K = 3.0


def run_json(*args: object) -> dict[str, Any]:
    result = run_timeline(*map(str, args), "--json")
    assert result.returncode == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def noise_of(a: list[float], b: list[float], statistic: str) -> float | None:
    """The change's standard error: √(se_a² + se_b²); None below 3 values in either run."""
    if len(a) < 3 or len(b) < 3:
        return None

    def se(values: list[float]) -> float:
        s = statistics.stdev(values)
        return math.sqrt(math.pi / 2) * s / math.sqrt(len(values)) if statistic == "median" else s

    return math.sqrt(se(a) ** 2 + se(b) ** 2)


def per_iteration(path: Path) -> list[dict[str, Any]]:
    """Each iteration of a run, in order: the median over ranks of its times, and its busbw."""
    analysed = run_json("analyze", path)
    busbw = {row["iteration"]: row["busbw_gbps"] for row in run_json("collectives", path)["utilisation"]}
    out = []
    for iteration in sorted({row["iteration"] for row in analysed["iterations"]}):
        rows = [row for row in analysed["iterations"] if row["iteration"] == iteration]
        figures = {m: statistics.median(row[m] for row in rows) for m in TIMES}
        out.append({"iteration": iteration, **figures, "busbw_gbps": busbw.get(iteration)})
    return out


def expect(base: float | None, new: float | None, spread: float | None) -> dict[str, Any]:
    delta = None if base is None or new is None else new - base
    return {
        "base": base,
        "new": new,
        "delta": delta,
        "relative": None if delta is None or not base else delta / base,
        "noise": spread,
        "significant": None if delta is None or spread is None else abs(delta) > K * spread,
    }


def assert_figure(actual: dict[str, Any], expected: dict[str, Any]) -> None:
    assert actual["significant"] == expected["significant"]
    for key in ("base", "new", "delta", "relative", "noise"):
        if expected[key] is None:
            assert actual[key] is None, key
        else:
            assert actual[key] == pytest.approx(expected[key], rel=1e-9, abs=1e-9), key


def check_against_each_run(diff: dict[str, Any], base: Path, new: Path) -> None:
    """Every figure of ``diff`` recomputed from each run's ``analyze --json`` and ``collectives --json``."""
    left, right = per_iteration(base), per_iteration(new)
    for metric in (*TIMES, "busbw_gbps"):
        a = [row[metric] for row in left if row[metric] is not None]
        b = [row[metric] for row in right if row[metric] is not None]
        spread = noise_of(a, b, "median")
        assert_figure(diff["summary"][metric], expect(statistics.median(a), statistics.median(b), spread))
        assert len(diff["iterations"]) == max(len(left), len(right))
        one = noise_of(a, b, "value")
        for position, row in enumerate(diff["iterations"]):
            assert row["base_iteration"] == left[position]["iteration"]
            assert row["new_iteration"] == right[position]["iteration"]
            expected = expect(left[position][metric], right[position][metric], one)
            assert_figure(row["metrics"][metric], expected)
    base_rows, new_rows = run_json("analyze", base)["iterations"], run_json("analyze", new)["iterations"]
    ranks = sorted({row["rank"] for row in base_rows} | {row["rank"] for row in new_rows})
    assert [row["rank"] for row in diff["ranks"]] == ranks
    for rank_row in diff["ranks"]:
        for metric in TIMES:
            a = [row[metric] for row in base_rows if row["rank"] == rank_row["rank"]]
            b = [row[metric] for row in new_rows if row["rank"] == rank_row["rank"]]
            median_a = statistics.median(a) if a else None
            median_b = statistics.median(b) if b else None
            assert_figure(rank_row["metrics"][metric], expect(median_a, median_b, noise_of(a, b, "median")))
    collectives = [run_json("collectives", path)["collectives"] for path in (base, new)]
    kinds = sorted({row["collective"] for rows in collectives for row in rows})
    assert [row["collective"] for row in diff["collectives"]] == kinds
    for row in diff["collectives"]:
        of_kind = [[c for c in rows if c["collective"] == row["collective"]] for rows in collectives]
        assert (row["base_collectives"], row["new_collectives"]) == tuple(len(c) for c in of_kind)
        a, b = (
            [c["busbw_gbps"] for c in rows if c["busbw_gbps"] is not None and not c["implausible"]]
            for rows in of_kind
        )
        median_a = statistics.median(a) if a else None
        median_b = statistics.median(b) if b else None
        assert_figure(row["busbw_gbps"], expect(median_a, median_b, noise_of(a, b, "median")))


def test_two_gloo_runs_match_each_runs_own_analysis() -> None:
    diff = run_json("diff", GLOO, GLOO_MARKERS)
    assert (diff["kind"], diff["version"], diff["timeline"]) == ("diff", 2, TIMELINE_VERSION)
    assert (diff["base"], diff["new"], diff["noise_k"], diff["warnings"]) == (
        str(GLOO),
        str(GLOO_MARKERS),
        K,
        [],
    )
    check_against_each_run(diff, GLOO, GLOO_MARKERS)
    assert [row["rank"] for row in diff["ranks"]] == [0, 1]
    # three iterations of each run: no median moved beyond three of its standard errors
    assert diff["summary"]["busbw_gbps"]["significant"] is False
    assert diff["summary"]["step_ns"]["significant"] is False
    assert (diff["paired"], diff["beyond_noise"]) == (3, [])


def test_json_decodes_back_into_the_type() -> None:
    result = run_timeline("diff", GLOO, GLOO_MARKERS, "--json")
    assert result.returncode == 0, result.stderr
    diff = msgspec.json.decode(result.stdout, type=Diff)
    assert (diff.version, diff.timeline) == (2, TIMELINE_VERSION)
    assert result.stdout.startswith('{"kind":"diff","version":2,"timeline":')
    assert diff.summary.step_ns == msgspec.convert(
        json.loads(result.stdout)["summary"]["step_ns"], type(diff.summary.step_ns)
    )


def test_median_over_iterations_is_the_step_analyze_measures() -> None:
    # issue #36: on PARAM's one iteration of 8 ranks, the mean over ranks is 16.01 ms, the median (the
    # step the diagnosis measures, as timeline analyze prints it) 16.13 ms
    diff = run_json("diff", PARAM, PARAM)
    analysed = run_json("analyze", PARAM)
    steps = [row["step_ns"] for row in analysed["iterations"]]
    assert len(steps) == 8
    assert diff["summary"]["step_ns"]["base"] == statistics.median(steps) == 16_126_000
    assert analysed["verdict"]["step_ns"] == 16_126_000
    assert round(statistics.fmean(steps) / 1e6, 2) == 16.01  # what layout 1 reported
    assert diff["iterations"][0]["metrics"]["step_ns"]["base"] == 16_126_000


def test_two_hta_runs_of_one_job_match_each_runs_own_analysis() -> None:
    result = run_timeline("diff", CONTROL, TEST, "--json")
    assert result.returncode == 0, result.stderr
    diff = json.loads(result.stdout)
    check_against_each_run(diff, CONTROL, TEST)
    # 6 steps each, numbered 1009..1014 in both; the V100 run is slower
    assert [row["base_iteration"] for row in diff["iterations"]] == list(range(1009, 1015))
    assert diff["summary"]["step_ns"]["significant"] is True
    assert diff["summary"]["step_ns"]["delta"] > 0
    # rank 3 of one run against rank 1 of the other: ranks are matched by number
    assert diff["warnings"] == [
        f"{TEST}: ranks are matched by number: BASE only has rank(s) 3, NEW only 1; "
        "their rows compare nothing"
    ]
    assert f"warning: {diff['warnings'][0]}" in result.stderr.splitlines()
    assert [(r["rank"], r["base_iterations"], r["new_iterations"]) for r in diff["ranks"]] == [
        (1, 0, 6),
        (3, 6, 0),
    ]


def test_tables() -> None:
    result = run_timeline("diff", GLOO, GLOO_MARKERS)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for title in (
        "Median over iterations",
        "Per iteration (paired by position; median over ranks; change NEW - BASE)",
        "Per rank (median over its iterations; change NEW - BASE)",
        "Per collective (median busbw of the matched collectives)",
    ):
        assert title in out
    # step time: medians 41.37 ms and 40.94 ms, noise 2.68 ms (test_two_gloo_runs_match_each_runs_own_analysis
    # recomputes it), not beyond it; nor is busbw with three iterations of each run (layout 1 said yes)
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in out.splitlines()]
    assert ["step time", "41.37 ms", "40.94 ms", "-428.3 µs", "-1.0%", "2.68 ms", "no"] in rows, out
    assert ["busbw", "1.60 Gbit/s", "3.25 Gbit/s", "+1.66 Gbit/s", "+103.8%", "0.98 Gbit/s", "no"] in rows
    # the headline names the paths, so where it wraps depends on the checkout's folder
    headline = "3 iteration(s) paired by position; no change beyond the noise"
    assert headline in " ".join(out.split())
    assert "+2.64 Gbit/s" in out  # all_reduce's median busbw 2.28 → 4.91 Gbit/s


def test_markdown_is_the_golden_file() -> None:
    # relative paths from the project root: the file names in the markdown are the same everywhere
    result = run_timeline(
        "diff", "sample_traces/ddp_gloo", "sample_traces/ddp_gloo_markers", "--markdown", "-", cwd=REPO
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == (GOLDEN / "ddp_gloo_vs_markers.md").read_text(encoding="utf-8")


def test_markdown_marks_the_changes_beyond_the_noise() -> None:
    result = run_timeline(
        "diff", "sample_traces/ddp_gloo", "sample_traces/ddp_gloo_markers", "--markdown", "-",
        "--noise-k", "0", cwd=REPO,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == (
        "### timeline diff: 3 iteration(s) paired by position; beyond the noise: step time, compute, "
        "exposed comm, hidden comm, busbw"
    )
    assert "| all_reduce | 12 → 12 | 2.28 Gbit/s | 4.91 Gbit/s | +2.64 Gbit/s (+116.0%)\\* | yes |" in lines
    assert lines[-3].startswith("\\*: beyond the noise: |change| > 0 × its standard error")


def test_markdown_file_is_written_beside_the_tables(tmp_path: Path) -> None:
    target = tmp_path / "comment.md"
    result = run_timeline(
        "diff", "sample_traces/ddp_gloo", "sample_traces/ddp_gloo_markers", "--markdown", target, cwd=REPO
    )
    assert result.returncode == 0, result.stderr
    assert "Median over iterations" in result.stdout
    assert target.read_text(encoding="utf-8") == (GOLDEN / "ddp_gloo_vs_markers.md").read_text(
        encoding="utf-8"
    )


def test_a_summary_json_is_a_run(tmp_path: Path) -> None:
    summary = tmp_path / "base.json"
    analysed = run_timeline("analyze", GLOO, "--json")
    assert analysed.returncode == 0, analysed.stderr
    summary.write_text(analysed.stdout)
    from_summary = run_timeline("diff", summary, GLOO_MARKERS, "--json")
    assert from_summary.returncode == 0, from_summary.stderr
    diff = json.loads(from_summary.stdout)
    traces = run_json("diff", GLOO, GLOO_MARKERS)
    for metric in TIMES:
        assert diff["summary"][metric] == traces["summary"][metric]
        assert [r["metrics"][metric] for r in diff["ranks"]] == [
            r["metrics"][metric] for r in traces["ranks"]
        ]
    assert diff["collectives"] is None
    assert diff["summary"]["busbw_gbps"]["base"] is None
    warning = (
        f"{summary}: a summary JSON keeps no collectives: no bus bandwidth is compared; "
        "give the run's traces to compare it"
    )
    assert diff["warnings"] == [warning]
    assert f"warning: {warning}" in from_summary.stderr.splitlines()


def test_a_parquet_file_is_a_run(tmp_path: Path) -> None:
    parquet = tmp_path / "gloo.parquet"
    converted = run_timeline("convert", GLOO, "-o", parquet)
    assert converted.returncode == 0, converted.stderr
    from_parquet = run_json("diff", parquet, GLOO_MARKERS)
    traces = run_json("diff", GLOO, GLOO_MARKERS)
    assert from_parquet["base"] == str(parquet)
    for key in ("summary", "iterations", "ranks", "collectives", "warnings"):
        assert from_parquet[key] == traces[key], key


def test_the_default_noise_k_is_the_noise_rules() -> None:
    assert run_json("diff", GLOO, GLOO_MARKERS)["noise_k"] == NOISE_K == 3.0


def test_noise_k_decides_what_is_significant() -> None:
    strict = run_json("diff", GLOO, GLOO_MARKERS, "--noise-k", "0")
    assert all(strict["summary"][m]["significant"] for m in (*TIMES, "busbw_gbps"))
    assert strict["noise_k"] == 0.0
    loose = run_json("diff", GLOO, GLOO_MARKERS, "--noise-k", "1000")
    assert not any(loose["summary"][m]["significant"] for m in (*TIMES, "busbw_gbps"))


def bad(*args: object) -> str:
    result = run_timeline("diff", *map(str, args))
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


def test_bad_input_is_one_error_line_and_exit_code_2(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    assert missing.name in bad(missing, GLOO)
    old = tmp_path / "old.json"
    old.write_text('{"version": 0, "iterations": [], "ranks": []}')
    assert "summary layout version 0" in bad(GLOO, old)
    assert "--json prints JSON on stdout" in bad(GLOO, GLOO_MARKERS, "--json", "--markdown", "-")
    assert "cannot write" in bad(GLOO, GLOO_MARKERS, "--markdown", tmp_path / "no" / "such" / "dir.md")
    assert "--noise-k" in bad(GLOO, GLOO_MARKERS, "--noise-k", "-1")
    assert not (tmp_path / "no").exists()
