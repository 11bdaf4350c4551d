"""Every command on an Nsight Systems export: the same per-rank exposure as ``analyze``, and the
exposure itself equal to an independent reading of the export's kernel table.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.builders import TRACES, nsys_kernel_exposure, run_timeline, timeline_command

EXPORT = TRACES / "nsys" / "nsysai_2xh100_nccl_before.sqlite"


def _json(*args: str | Path) -> dict[str, Any]:
    result = run_timeline(*args, "--json")
    assert result.returncode == 0, result.stderr
    out: dict[str, Any] = json.loads(result.stdout)
    return out


@pytest.fixture(scope="module")
def analyzed() -> dict[str, Any]:
    return _json("analyze", EXPORT)


def _exposure(summary: dict[str, Any]) -> dict[int, tuple[int, int, int]]:
    return {r["rank"]: (r["comm_ns"], r["hidden_comm_ns"], r["exposed_comm_ns"]) for r in summary["ranks"]}


def test_analyze_gives_the_exposure_of_the_kernel_table(analyzed: dict[str, Any]) -> None:
    expected = nsys_kernel_exposure(EXPORT)
    assert _exposure(analyzed) == {0: expected[(144, 0)], 1: expected[(145, 1)]}
    assert [f["rank_from"] for f in analyzed["files"]] == ["(host, device) order"] * 2
    assert {f["path"] for f in analyzed["files"]} == {str(EXPORT.resolve())}


def test_collectives_match_the_sendrecv_kernels_as_all_to_all(analyzed: dict[str, Any]) -> None:
    report = _json("collectives", EXPORT)
    collectives = report["collectives"]
    assert len(collectives) == 33
    assert all(c["ranks"] == 2 and c["complete"] for c in collectives)
    assert [c["collective"] for c in collectives[1:]] == ["all_to_all"] * 32
    assert report["mismatches"] == []
    # the per-rank durations of the matched collectives add up to analyze's communication (no two
    # SendRecv kernels of one rank overlap)
    per_rank: dict[int, int] = {}
    for row in report["collective_ranks"]:
        per_rank[row["rank"]] = per_rank.get(row["rank"], 0) + row["dur_ns"]
    assert per_rank == {r: comm for r, (comm, _, _) in _exposure(analyzed).items()}


def test_whatif_replays_the_measured_exposure(analyzed: dict[str, Any]) -> None:
    report = _json("whatif", EXPORT)
    replay = report["self_replay"]
    exposed = [e for _, _, e in _exposure(analyzed).values()]
    steps = [r["step_ns"] for r in analyzed["iterations"]]  # one iteration per rank: the capture
    assert report["ranks"] == [0, 1]
    assert replay["exposed_comm_ns"] == sum(exposed) // len(exposed)  # the mean over the ranks
    assert abs(replay["measured_ns"] - sum(steps) / len(steps)) <= 1
    assert replay["error_ratio"] == 0.0


def test_check_measures_what_analyze_measures(tmp_path: Path, analyzed: dict[str, Any]) -> None:
    worst = max(e for _, _, e in _exposure(analyzed).values())
    for limit, code in ((worst + 1, 0), (worst - 1, 1)):
        budget = tmp_path / f"b{code}.toml"
        budget.write_text(
            '[[budgets]]\nname = "exposed"\nmetric = "exposed_comm_ns"\naggregate = "max"\nover = "rank"\n'
            f"max = {limit}\n"
        )
        result = run_timeline("check", EXPORT, "--budget", budget, "--json")
        assert result.returncode == code, result.stderr
        verdict = json.loads(result.stdout)["verdicts"][0]
        assert verdict["value"] == worst
        assert verdict["worst"]["rank"] == 0


def test_report_writes_a_page_of_both_ranks(tmp_path: Path) -> None:
    page = tmp_path / "x.html"
    result = run_timeline("report", EXPORT, "-o", page)
    assert result.returncode == 0, result.stderr
    text = page.read_text()
    assert "1 file(s), 2 rank(s)" in text


def test_convert_keeps_every_answer(tmp_path: Path, analyzed: dict[str, Any]) -> None:
    target = tmp_path / "x.parquet"
    result = run_timeline("convert", EXPORT, "-o", target)
    assert result.returncode == 0, result.stderr
    again = _json("analyze", target)
    for key in ("ranks", "iterations", "top_collectives", "windows", "files"):
        assert again[key] == analyzed[key], key


def test_iteration_range_option(tmp_path: Path) -> None:
    from benchmarks.generate_nsys import write_export

    path = write_export(tmp_path / "g.sqlite", processes=2, kernels=9 * 4, steps="none")
    summary = _json("analyze", path, "--iteration-range", r"^nccl:all_reduce")
    assert summary["windows"] == {"0": "profiler_step", "1": "profiler_step"}
    assert sorted({row["iteration"] for row in summary["iterations"]}) == [0, 1, 2, 3]
    bad = run_timeline("analyze", path, "--iteration-range", "(?<=x)")
    assert bad.returncode == 2
    assert bad.stderr.startswith("error: --iteration-range '(?<=x)': not a regex timeline can match with")


def test_bad_export_is_one_error_line_and_nothing_is_written(tmp_path: Path) -> None:
    bad = tmp_path / "cut.sqlite"
    bad.write_bytes(EXPORT.read_bytes()[:500_000])
    before = sorted(p.name for p in tmp_path.iterdir())
    result = run_timeline("analyze", bad)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"error: {bad}: damaged or truncated SQLite file (database disk image is malformed); re-copy the "
        "export or export it again with nsys export --type sqlite"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == before


# --- .nsys-rep: exported with nsys when it is on the PATH ------------------------------------------


def _run(args: list[str | Path], path: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": path}
    return subprocess.run(
        [*timeline_command(), *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        timeout=300,
    )


def test_report_without_nsys_gives_the_command(tmp_path: Path) -> None:
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"not read")
    empty = tmp_path / "bin"
    empty.mkdir()
    result = _run(["analyze", report], f"{empty}:{Path(sys.executable).parent}")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"error: {report}: an Nsight Systems report, which only Nsight Systems reads, and nsys is not on the "
        f"PATH; export it with `nsys export --type sqlite --output {tmp_path / 'run.sqlite'} {report}` "
        f"and pass {tmp_path / 'run.sqlite'}"
    ]


def test_report_is_exported_into_timelines_own_folder(tmp_path: Path, analyzed: dict[str, Any]) -> None:
    folder = tmp_path / "runs"
    folder.mkdir()
    report = folder / "run.nsys-rep"
    report.write_bytes(b"an nsys report")
    calls = tmp_path / "calls.txt"
    fake = tmp_path / "bin" / "nsys"
    fake.parent.mkdir()
    # a stand-in for Nsight Systems: `export --help` lists --include-blobs; an export copies the real one
    fake.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> {calls}\n'
        'if [ "$2" = "--help" ]; then echo "  --include-blobs=<true|false>"; exit 0; fi\n'
        'while [ "$#" -gt 0 ]; do if [ "$1" = "--output" ]; then out="$2"; fi; shift; done\n'
        f'cp {EXPORT} "$out"\n'
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    before = sorted(p.name for p in folder.iterdir())
    result = _run(["analyze", folder, "--json"], f"{fake.parent}:{Path(sys.executable).parent}:/usr/bin:/bin")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert _exposure(summary) == _exposure(analyzed)
    assert {f["path"] for f in summary["files"]} == {str(report)}
    assert sorted(p.name for p in folder.iterdir()) == before  # nothing written beside the report
    export_call = calls.read_text().splitlines()[-1].split()
    assert export_call[:4] == ["export", "--type", "sqlite", "--include-blobs=true"]
    assert export_call[-1] == str(report)
    assert not Path(export_call[-2]).exists()  # the temporary export was removed


def test_rank_by_rank_gives_the_same_answers(analyzed: dict[str, Any]) -> None:
    by_rank = _json("analyze", EXPORT, "--executor", "local")
    for key in ("ranks", "iterations", "top_collectives", "windows", "files", "warnings"):
        assert by_rank[key] == analyzed[key], key
    in_memory = _json("collectives", EXPORT)
    split = _json("collectives", EXPORT, "--executor", "local")
    assert split["collectives"] == in_memory["collectives"]
