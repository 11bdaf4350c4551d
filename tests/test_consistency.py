"""One run, one answer: the same quantity read through every door is equal (issue #36).

On every run of ``../shared/traces`` and ``sample_traces/`` the test reads one reference, the run's
facts in memory (:func:`timeline.analyze`: its overlap, its one matching of the collectives, its
stragglers, its diagnosis), and compares with what each door gives:

- per rank and iteration exposure: ``analyze`` (its text table and ``--json``), ``check`` (a budget
  on the worst iteration), ``diff`` (a run against itself), the report's data, the notebook view;
  read in memory, rank by rank, from the Parquet file ``convert`` writes and from a dataset by rank;
- the collectives matched across ranks (count, groups, expected ranks, completeness, bus bandwidth,
  last rank): ``collectives --json``, ``check`` (budgets on the skew and the bus bandwidth), the
  report's data, ``diff`` (collectives per kind) and the diagnosis' straggler;
- the verdict and the findings: the CLI, the library, the notebook view and the report, in memory
  and rank by rank.

Every door's output is read as a user reads it (JSON decoded, the text table parsed), never through
the objects the doors share.
"""

from __future__ import annotations

import json
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

import msgspec
import polars as pl
import pytest
from typer.testing import CliRunner

import timeline
from cli.main import app
from tests.builders import REPO, TRACES
from timeline.units import format_ns

SAMPLES = REPO / "sample_traces"
HOROVOD = TRACES / "horovod"
REFUSED = "smdebug__horovod_timeline_small"  # nothing to measure: refused by every door (its own test)


def _runs() -> dict[str, list[Path]]:
    """Every run: a sample folder, a shared Kineto folder (or file of one), a Horovod timeline."""
    runs: dict[str, list[Path]] = {}
    for folder in sorted(SAMPLES.iterdir()):
        if folder.is_dir() and folder.name != "horovod":
            runs[f"sample.{folder.name}"] = [folder]
    for path in sorted((SAMPLES / "horovod").glob("*.json")):
        if path.stem != "horovod_empty":  # no events: refused by every door alike (tests/cli)
            runs[f"sample.horovod.{path.stem}"] = [path]
    for folder in sorted((TRACES / "kineto").iterdir()):
        if folder.name == "hta_trace_diff":  # two runs of other jobs side by side
            for path in sorted(folder.iterdir()):
                runs[f"kineto.hta_trace_diff.{path.name.split('.')[0]}"] = [path]
        else:
            runs[f"kineto.{folder.name}"] = [folder]
    for path in sorted(HOROVOD.rglob("*.json")):
        if path.stem != REFUSED:
            runs[f"horovod.{path.stem}"] = [path]
    for path in sorted((TRACES / "nsys").glob("*.sqlite")):  # Nsight Systems exports
        runs[f"nsys.{path.stem}"] = [path]
    return runs


RUNS = _runs()
SLOW = {"kineto.hta_df_index_resolver"}  # the 54 MB trace: every door costs seconds


def _params() -> list[Any]:
    return [pytest.param(name, marks=pytest.mark.slow) if name in SLOW else name for name in sorted(RUNS)]


def _invoke(*args: str | Path) -> Any:
    result = CliRunner().invoke(app, [str(a) for a in args], prog_name="timeline", catch_exceptions=False)
    assert result.exit_code in (0, 1), f"{args}: exit {result.exit_code}\n{result.stderr}"
    return result


def _json(*args: str | Path) -> dict[str, Any]:
    decoded: dict[str, Any] = json.loads(_invoke(*args, "--json").stdout)
    return decoded


def _plain(result: Any) -> Any:
    """Any result (typed or plain data) as the JSON ``--json`` would print, decoded."""
    data = result.to_dict() if hasattr(result, "to_dict") else result
    return msgspec.json.decode(msgspec.json.encode(data))


@cache
def _reference(name: str) -> timeline.Run:
    return timeline.analyze([str(p) for p in RUNS[name]])


@cache
def _by_rank(name: str) -> timeline.Run:
    return timeline.analyze([str(p) for p in RUNS[name]], executor="local")


def _paths(name: str) -> list[str]:
    return [str(p) for p in RUNS[name]]


# --- per rank and iteration exposure --------------------------------------------------------------


def _exposure(rows: list[dict[str, Any]]) -> dict[tuple[int, int | None], tuple[Any, Any, Any]]:
    return {
        (row["rank"], row["iteration"]): (row["exposed_comm_ns"], row["hidden_comm_ns"], row["step_ns"])
        for row in rows
    }


def _reference_exposure(run: timeline.Run) -> dict[tuple[int, int | None], tuple[Any, Any, Any]]:
    return _exposure(run.overlap.iterations.to_dicts())


@pytest.mark.parametrize("name", _params())
def test_exposure_is_the_same_through_every_door(name: str, tmp_path: Path) -> None:
    run = _reference(name)
    expected = _reference_exposure(run)  # none: a timeline without a rank (every door says so alike)
    assert _exposure(_json("analyze", *_paths(name))["iterations"]) == expected
    assert _exposure(_plain(run.summary())["iterations"]) == expected  # the notebook view
    assert _reference_exposure(_by_rank(name)) == expected
    assert _exposure(_json("analyze", "--executor", "local", *_paths(name))["iterations"]) == expected
    parquet = tmp_path / "run.parquet"
    _invoke("convert", *_paths(name), "-o", parquet)
    assert _exposure(_json("analyze", parquet)["iterations"]) == expected
    dataset = tmp_path / "run.d"
    _invoke("convert", *_paths(name), "--partition-by-rank", "-o", dataset)
    assert _exposure(_json("analyze", dataset)["iterations"]) == expected


@pytest.mark.parametrize("name", _params())
def test_the_text_table_shows_the_same_exposure(name: str) -> None:
    run = _reference(name)
    text = _invoke("analyze", "--no-findings", *_paths(name)).stdout
    exposure = _reference_exposure(run)
    if all(exposed is None for exposed, _, _ in exposure.values()):
        assert "Per iteration" not in text  # a Horovod timeline alone: no compute to hide under
        return
    shown = _iteration_table(text)
    for (rank, iteration), (exposed, _, _) in exposure.items():
        cell = shown[(str(rank), "-" if iteration is None else str(iteration))]
        assert cell == ("-" if exposed is None else format_ns(exposed)), (rank, iteration)


def _iteration_table(text: str) -> dict[tuple[str, str], str]:
    """The ``Per iteration`` table of ``timeline analyze``: (rank, iteration) → its ``exposed`` cell.

    Ranks whose traces hold no iteration (one whole-trace window each) are shown in the ``Per rank``
    table alone: their iteration is ``-``.
    """
    lines = text.splitlines()
    title = "Per iteration" if any(line.startswith("Per iteration") for line in lines) else "Per rank"
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    header = [cell.strip() for cell in lines[start + 2].strip("┃").split("┃")]
    cells: dict[tuple[str, str], str] = {}
    for line in lines[start + 4 :]:
        if not line.startswith("│"):
            break
        row = dict(zip(header, (cell.strip() for cell in line.strip("│").split("│")), strict=True))
        cells[(row["rank"], row.get("iteration", "-"))] = row["exposed"]
    return cells


def _budget(tmp_path: Path, *entries: tuple[str, str]) -> Path:
    text = "".join(
        f'[[budgets]]\nname = "{metric}-{aggregate}"\nmetric = "{metric}"\naggregate = "{aggregate}"\n'
        f"max = 1e30\nskip_iterations = 0\n"
        for metric, aggregate in entries
    )
    path = tmp_path / "timeline.toml"
    path.write_text(text, encoding="utf-8")
    return path


def _verdicts(report: dict[str, Any]) -> dict[str, Any]:
    return {verdict["name"]: verdict["value"] for verdict in report["verdicts"]}


@pytest.mark.parametrize("name", _params())
def test_check_reads_the_same_exposure(name: str, tmp_path: Path) -> None:
    exposed = [e for e, _, _ in _reference_exposure(_reference(name)).values() if e is not None]
    budget = _budget(tmp_path, ("exposed_comm_ns", "max"), ("exposed_comm_ns", "min"))
    verdicts = _verdicts(_json("check", *_paths(name), "--budget", budget))
    if not exposed:
        assert verdicts == {"exposed_comm_ns-max": None, "exposed_comm_ns-min": None}
        return
    assert verdicts == {"exposed_comm_ns-max": max(exposed), "exposed_comm_ns-min": min(exposed)}


@pytest.mark.parametrize("name", _params())
def test_the_report_draws_the_same_exposure(name: str) -> None:
    from timeline.report.data import prepare_report_data

    run = _reference(name)
    data = prepare_report_data(run)
    views = dict(zip(data.views.get_column("view"), data.views.get_column("iteration"), strict=True))
    strip = data.lanes.filter(pl.col("role") == "exposed").select("lane_id")  # the exposed comm lane
    drawn = (
        data.segments.join(strip, on="lane_id")
        .group_by("view", "rank")
        .agg((pl.col("end_ns") - pl.col("start_ns")).sum())
        .iter_rows()
    )
    totals = {(rank, views[view]): int(total) for view, rank, total in drawn}
    for (rank, iteration), (exposed, _, _) in _reference_exposure(run).items():
        if exposed is not None:
            assert totals.get((rank, iteration), 0) == exposed, (rank, iteration)


# --- collectives matched across ranks -------------------------------------------------------------

_COLLECTIVE_KEYS = ("group", "collective", "ranks", "expected_ranks", "complete", "busbw_gbps", "last_rank")


def _collective_rows(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """The compared keys of each row (the frames' ``"*"``, no group known, every result prints as null)."""
    return [
        tuple(None if key == "group" and row[key] == "*" else row[key] for key in _COLLECTIVE_KEYS)
        for row in rows
    ]


def _matched(name: str) -> list[dict[str, Any]]:
    run = _reference(name)
    if not run.kineto_communication:
        return []
    rows: list[dict[str, Any]] = run.matched.collectives.with_columns(
        pl.col(pl.Enum).cast(pl.String)
    ).to_dicts()
    return rows


@pytest.mark.parametrize("name", _params())
def test_collectives_are_the_same_through_every_door(name: str, tmp_path: Path) -> None:
    expected = _matched(name)
    report = _json("collectives", *_paths(name)) if expected or _has_horovod(name) else None
    if report is not None:
        assert _collective_rows(report["collectives"]) == _collective_rows(expected)
    by_rank = _by_rank(name)
    if expected:
        got = by_rank.matched.collectives.with_columns(pl.col(pl.Enum).cast(pl.String)).to_dicts()
        assert _collective_rows(got) == _collective_rows(expected)

    from timeline.report.data import build_report_data

    drawn = build_report_data(_reference(name)).collectives_report
    if drawn is not None:
        assert _collective_rows(_plain(drawn.collectives)) == _collective_rows(expected)
    budget = _budget(
        tmp_path,
        ("collective_start_skew_ns", "max"),
        ("collective_busbw_gbps", "min"),
        ("collective_busbw_gbps", "max"),
    )
    verdicts = _verdicts(_json("check", *_paths(name), "--budget", budget))
    skews = [row["start_skew_ns"] for row in expected if row["start_skew_ns"] is not None]
    busbw = [row["busbw_gbps"] for row in expected if row["busbw_gbps"] is not None]
    assert verdicts["collective_start_skew_ns-max"] == (max(skews) if skews else None)
    assert verdicts["collective_busbw_gbps-min"] == (min(busbw) if busbw else None)
    assert verdicts["collective_busbw_gbps-max"] == (max(busbw) if busbw else None)


def _has_horovod(name: str) -> bool:
    return "horovod" in name


@pytest.mark.parametrize("name", _params())
def test_diff_compares_the_same_collectives(name: str) -> None:
    expected = Counter(row["collective"] or "unknown" for row in _matched(name))
    (path,) = _paths(name)  # every run is one folder or one file
    diff = _json("diff", path, path)
    counts = {row["collective"]: row["base_collectives"] for row in diff["collectives"]}
    assert {kind: n for kind, n in counts.items() if n} == dict(expected)


@pytest.mark.parametrize("name", _params())
def test_the_diagnosis_blames_the_rank_collectives_names(name: str) -> None:
    run = _reference(name)
    if not run.kineto_communication:
        return
    stragglers = run.stragglers.ranks
    for finding in run.diagnosis.findings:
        if finding.cause == "straggler":
            top = stragglers.filter(pl.col("position") == 1).row(0, named=True)
            # the slow rank is collectives' first straggler; ranks nearly as late are named with it
            evidence = dict(finding.evidence or {})
            assert evidence["rank"] == top["rank"]
            together = evidence["late_together_ranks"]
            assert isinstance(together, list)
            assert list(finding.ranks or ()) == sorted({top["rank"], *together})
    report = _json("collectives", *_paths(name))
    assert report["stragglers"]["ranks"] == _plain(stragglers.to_dicts())


# --- the verdict and the findings -----------------------------------------------------------------


def _diagnosis_of(data: dict[str, Any]) -> tuple[Any, Any]:
    return data["verdict"], data["findings"]


@pytest.mark.parametrize("name", _params())
def test_the_verdict_and_findings_are_the_same_through_every_door(name: str) -> None:
    from timeline.report.data import build_report_data
    from timeline.results.diagnosis import build_diagnosis

    run = _reference(name)
    expected = _diagnosis_of(_plain(build_diagnosis(run.diagnosis)))
    assert _diagnosis_of(_json("analyze", *_paths(name))) == expected
    assert _diagnosis_of(_plain(run.summary())) == expected  # the notebook view
    assert _diagnosis_of(_plain(build_diagnosis(_by_rank(name).diagnosis))) == expected
    assert _diagnosis_of(_json("analyze", "--executor", "local", *_paths(name))) == expected
    report = build_report_data(run)
    assert _diagnosis_of(_plain(report.diagnosis)) == expected


def test_every_run_is_covered() -> None:
    """The runs read here are every folder of sample traces and every shared trace."""
    samples = {p.name for p in SAMPLES.iterdir() if p.is_dir() and p.name != "horovod"}
    assert {name.removeprefix("sample.") for name in RUNS if name.startswith("sample.")} >= samples
    shared = {p.name for p in (TRACES / "kineto").iterdir()}
    assert {name.split(".")[1] for name in RUNS if name.startswith("kineto.")} == shared
    horovod = [p for p in HOROVOD.rglob("*.json") if p.stem != REFUSED]
    assert sum(name.startswith("horovod.") for name in RUNS) == len(horovod)
    assert sum(name.startswith("nsys.") for name in RUNS) == len(list((TRACES / "nsys").glob("*.sqlite")))
