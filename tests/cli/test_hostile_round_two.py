"""Hostile input, round two (#42): what a careful user and an unkind one give the command line.

One section per item of the issue (item 6, signals, is ``test_signals.py``; item 11, the library's
boundary, ``tests/test_arguments.py``; items 12-13 ``tests/importers/test_parquet_changed.py``;
item 14 ``tests/report/test_server_load.py``):

1. every option that writes a file refuses an input, the budget or baseline file, a file inside a
   dataset read, through links too;
4. file names that are not UTF-8 are read, and printed escaped;
5. a name over 255 bytes or a path over 4,096: one ``error:`` line;
7. a glob over folders holding links to themselves ends;
8. a budget file, baseline or manifest that is a FIFO, a device or too large: one ``error:`` line;
9. a full disk, a read-only file system, a stdout that cannot be written: one ``error:`` line, exit
   code 2, and no file (not even an empty one) under the output's name;
10. Ctrl-C while ``convert`` writes leaves no hidden partial file.

Every refusal is checked for its exit code (2), its one line, and that what the user gave is
unchanged, byte for byte.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import cli.main
from tests.builders import PARAM, REPO, SAMPLES, timeline_command

GLOO = SAMPLES / "ddp_gloo"
PASS_BUDGET = REPO / "tests" / "cli" / "golden" / "budget-pass.toml"
REGRESSION = "[regression]\nstep_ns = { relative = 0.5 }\n"
"""A budget file with a regression check: --baseline is read."""
BOUND_S = 120
"""The longest a command here may run: only a hang reaches it."""


def _invoke(*args: str | Path) -> Any:
    return CliRunner().invoke(cli.main.app, [str(a) for a in args], prog_name="timeline")


def _run(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the installed command, bounded in time (a hang fails the test, it does not stall it)."""
    return subprocess.run(
        [*timeline_command(), *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
        timeout=BOUND_S,
        env=None if env is None else {**os.environ, **env},
    )


def _one_error_line(result: Any) -> str:
    code = result.exit_code if hasattr(result, "exit_code") else result.returncode
    assert code == 2, (code, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    line: str = lines[0]
    return line


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """A copy of the two-rank sample run, and a budget file beside it."""
    copy = tmp_path / "run"
    shutil.copytree(GLOO, copy)
    shutil.copy(PASS_BUDGET, tmp_path / "budget.toml")
    return copy


def _traces(run: Path) -> list[Path]:
    return sorted(run.glob("*.json.gz"))


# --- 1. outputs never touch inputs ---------------------------------------------------------------


def _writers(run: Path) -> dict[str, tuple[list[str | Path], str]]:
    """Each option that writes a file: the command line up to the option, and the option."""
    budget = run.parent / "budget.toml"
    return {
        "check --junit": (["check", run, "--budget", budget, "--junit"], "--junit"),
        "check --markdown": (["check", run, "--budget", budget, "--markdown"], "--markdown"),
        "diff --markdown": (["diff", run, run, "--markdown"], "--markdown"),
        "convert -o": (["convert", run, "-o"], "-o"),
        "convert --to perfetto -o": (["convert", run, "--to", "perfetto", "--force", "-o"], "-o"),
        "report -o": (["report", run, "-o"], "-o"),
    }


@pytest.mark.parametrize(
    "writer",
    [
        "check --junit",
        "check --markdown",
        "diff --markdown",
        "convert -o",
        "convert --to perfetto -o",
        "report -o",
    ],
)
def test_no_writer_replaces_an_input_trace(writer: str, run: Path) -> None:
    args, _ = _writers(run)[writer]
    trace = _traces(run)[0]
    before = _digest(trace)
    line = _one_error_line(_invoke(*args, trace))
    assert (
        line
        == f"error: {trace}: is one of the inputs; choose another output file (inputs are never modified)"
    )
    assert _digest(trace) == before


@pytest.mark.parametrize("option", ["--junit", "--markdown"])
def test_check_never_replaces_its_budget_or_baseline_file(option: str, run: Path) -> None:
    budget = run.parent / "budget.toml"
    baseline = run.parent / "baseline"
    shutil.copytree(run, baseline)
    for target in (budget, _traces(baseline)[1]):
        before = _digest(target)
        result = _invoke("check", run, "--budget", budget, "--baseline", baseline, option, target)
        assert "is one of the inputs" in _one_error_line(result)
        assert _digest(target) == before


def test_links_to_an_input_are_refused(run: Path) -> None:
    trace = _traces(run)[1]
    before = _digest(trace)
    (run.parent / "soft.xml").symlink_to(trace)
    os.link(trace, run.parent / "hard.xml")
    for name in ("soft.xml", "hard.xml"):
        result = _invoke("check", run, "--budget", run.parent / "budget.toml", "--junit", run.parent / name)
        assert "is one of the inputs" in _one_error_line(result)
    assert _digest(trace) == before
    assert (run.parent / "soft.xml").is_symlink()


def test_a_file_inside_a_dataset_read_is_refused(run: Path) -> None:
    dataset = run.parent / "run.d"
    assert _invoke("convert", run, "-o", dataset, "--partition-by-rank").exit_code == 0
    before = sorted((p.relative_to(dataset), _digest(p)) for p in dataset.rglob("*.parquet"))
    for inside in (dataset / "summary.md", dataset / "rank=0" / "part-0.parquet"):
        result = _invoke("diff", dataset, run, "--markdown", inside)
        assert "which is read" in _one_error_line(result) or "is one of the inputs" in result.stderr
    line = _one_error_line(_invoke("convert", dataset, "-o", dataset, "--force"))
    assert "is one of the inputs" in line
    assert sorted((p.relative_to(dataset), _digest(p)) for p in dataset.rglob("*.parquet")) == before


def test_writers_still_write_where_they_may(run: Path) -> None:
    out = run.parent / "out"
    out.mkdir()
    budget = run.parent / "budget.toml"
    result = _invoke("check", run, "--budget", budget, "--junit", out / "j.xml", "--markdown", out / "s.md")
    assert result.exit_code == 0, result.stderr
    assert (out / "j.xml").read_text().startswith("<?xml")
    assert (out / "s.md").read_text().startswith("#")
    assert _invoke("check", run, "--budget", budget, "--junit", out / "j.xml").exit_code == 0  # replaced
    assert sorted(p.name for p in out.iterdir()) == ["j.xml", "s.md"]  # no partial file


@pytest.mark.parametrize("target", ["/dev/null", "fifo", "folder"])
def test_an_output_that_is_not_a_regular_file_is_refused(target: str, run: Path) -> None:
    place = Path(target) if target.startswith("/") else run.parent / target
    if target == "fifo":
        os.mkfifo(place)
    elif target == "folder":
        place.mkdir()
    result = _invoke("check", run, "--budget", run.parent / "budget.toml", "--junit", place)
    line = _one_error_line(result)
    assert "--junit writes a file: choose another --junit" in line


# --- 4. file names that are not UTF-8 -----------------------------------------------------------

STRICT = {"PYTHONIOENCODING": "utf-8:strict", "LC_ALL": "C.UTF-8"}
"""A terminal that takes UTF-8 only (Python's ``strict`` errors: a lone surrogate cannot be printed)."""


@pytest.fixture
def odd_name(tmp_path: Path) -> Path:
    """The sample's rank 1 under a name holding the byte 0xff (not UTF-8)."""
    folder = tmp_path / os.fsdecode(b"runs\xfe")
    folder.mkdir()
    path = folder / os.fsdecode(b"rank1\xff.json.gz")
    shutil.copy(GLOO / "rank1.2-4.pt.trace.json.gz", path)
    return path


@pytest.mark.parametrize(
    "command",
    [
        ["analyze"],
        ["analyze", "--json"],
        ["collectives"],
        ["whatif"],
        ["check", "--budget", str(PASS_BUDGET)],
        ["diff", "{trace}"],
        ["convert", "-o", "{out}/o.parquet"],
        ["report", "-o", "{out}/r.html"],
    ],
)
def test_a_name_that_is_not_utf8_is_read_and_printed_escaped(
    command: list[str], odd_name: Path, tmp_path: Path
) -> None:
    args = [a.format(trace=odd_name, out=tmp_path) for a in command]
    result = _run(args[0], odd_name, *args[1:], env=STRICT)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    printed = result.stdout + result.stderr
    assert "\udcff" not in printed
    if "--json" in command:
        assert "runs\\\\xfe/rank1\\\\xff.json.gz" in result.stdout  # JSON escapes the backslash


@pytest.mark.parametrize("output", ["o\udcff.parquet", "o\udcff.d", "o\udcff.json", "o\udcff.html"])
def test_an_output_name_that_is_not_utf8_is_written_and_read_back(
    output: str, odd_name: Path, tmp_path: Path
) -> None:
    target = tmp_path / output
    command = {".parquet": ["convert"], ".d": ["convert", "--partition-by-rank"], ".html": ["report"]}
    args = command.get(target.suffix, ["convert", "--to", "perfetto"])
    written = _run(*args, odd_name, "-o", target, env=STRICT)
    assert written.returncode == 0, written.stderr
    assert "o\\xff" in written.stdout + written.stderr  # the name as written, escaped
    assert target.exists()
    if target.suffix in (".parquet", ".d"):
        read = _run("analyze", "--json", target, env=STRICT)
        assert read.returncode == 0, read.stderr


def test_a_missing_name_that_is_not_utf8_is_one_error_line(tmp_path: Path) -> None:
    missing = tmp_path / os.fsdecode(b"gone\xff.json")
    line = _one_error_line(_run("analyze", missing, env=STRICT))
    assert line.endswith("/gone\\xff.json: no such file or directory")


# --- 5. names and paths too long ----------------------------------------------------------------


def _too_long(tmp_path: Path) -> dict[str, str]:
    return {"name": str(tmp_path / ("n" * 300)), "path": str(tmp_path) + "/d" * 2100}


@pytest.mark.parametrize("which", ["name", "path"])
@pytest.mark.parametrize(
    "command",
    [
        ["analyze", "{long}"],
        ["collectives", "{long}/*.json"],
        ["check", str(GLOO), "--budget", "{long}"],
        ["check", str(GLOO), "--budget", str(PASS_BUDGET), "--junit", "{long}"],
        ["check", str(GLOO), "--budget", "{regression}", "--baseline", "{long}"],
        ["convert", str(GLOO), "-o", "{long}"],
        ["report", str(GLOO), "-o", "{long}"],
        ["diff", "{long}", str(GLOO)],
    ],
)
def test_a_name_or_path_too_long_is_one_error_line(which: str, command: list[str], tmp_path: Path) -> None:
    long = _too_long(tmp_path)[which]
    regression = tmp_path / "regression.toml"
    regression.write_text(REGRESSION)
    line = _one_error_line(_invoke(*[a.format(long=long, regression=regression) for a in command]))
    limit = "a file name has at most 255 (NAME_MAX)" if which == "name" else "takes at most 4,095 (PATH_MAX)"
    assert limit in line
    assert len(line) < 400  # the path is shortened, not printed whole


# --- 7. globs over folders that hold links to themselves ----------------------------------------


def test_a_glob_through_links_to_its_own_folder_ends(tmp_path: Path) -> None:
    folder = tmp_path / "d"
    folder.mkdir()
    shutil.copy(GLOO / "rank0.2-4.pt.trace.json.gz", folder / "rank0.json.gz")
    shutil.copy(GLOO / "rank1.2-4.pt.trace.json.gz", folder / "rank1.json.gz")
    (folder / "l1").symlink_to(".")
    (folder / "l2").symlink_to(".")
    (folder / "up").symlink_to("..")
    globbed = _run("analyze", "--json", f"{folder}/**/*.json.gz")
    direct = _run("analyze", "--json", folder)
    assert globbed.returncode == direct.returncode == 0, globbed.stderr
    assert globbed.stdout == direct.stdout  # each trace once


# --- 8. file options that are not regular files --------------------------------------------------


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "link to /dev/urandom", "too large"])
def test_a_budget_file_that_is_not_a_small_regular_file_is_refused(kind: str, tmp_path: Path) -> None:
    budget = tmp_path / "budget.toml"
    if kind == "fifo":
        os.mkfifo(budget)
    elif kind == "/dev/zero":
        budget = Path("/dev/zero")
    elif kind == "link to /dev/urandom":
        budget.symlink_to("/dev/urandom")
    else:
        with budget.open("wb") as handle:
            handle.truncate(5 << 20)  # sparse: 5 MiB of zeros, nothing on the disk
    line = _one_error_line(_run("check", GLOO, "--budget", budget))
    if kind == "too large":
        assert line.endswith(
            "larger than 4,194,304 bytes, the most a budget file may hold; is it the right file?"
        )
    else:
        what = "a FIFO" if kind == "fifo" else "a device"
        assert line == f"error: {budget}: is {what}, not a regular file; pass the budget file itself"


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_a_baseline_that_is_not_a_regular_file_is_refused(kind: str, tmp_path: Path) -> None:
    baseline = Path("/dev/zero") if kind == "/dev/zero" else tmp_path / "base.json"
    if kind == "fifo":
        os.mkfifo(baseline)
    regression = tmp_path / "budget.toml"
    regression.write_text(REGRESSION)
    line = _one_error_line(_run("check", GLOO, "--budget", regression, "--baseline", baseline))
    assert line == f"error: {baseline}: not a regular file or directory"


def test_a_manifest_that_is_a_fifo_is_not_waited_for(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    for trace in _traces(GLOO):
        shutil.copy(trace, folder / trace.name)
    os.mkfifo(folder / "manifest.json")  # read only as a hint: a FIFO is no manifest
    result = _run("analyze", "--json", folder)
    assert result.returncode == 0, result.stderr


# --- 9. full disks, read-only places, stdout that cannot be written -----------------------------


@contextlib.contextmanager
def _tmpfs(place: Path, *options: str) -> Iterator[Path]:
    """Mount a 64 KiB tmpfs at ``place`` (root only); unmount it on leaving."""
    place.mkdir()
    if os.geteuid() != 0:
        pytest.skip("a full disk is a 64 KiB tmpfs, which only root can mount")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", ",".join(["size=64k", *options]), "tmpfs", str(place)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (running as root): {mounted.stderr.strip()}")
    try:
        yield place
    finally:
        subprocess.run(["umount", str(place)], check=True, capture_output=True)


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A file system with no space left: a 64 KiB tmpfs filled up."""
    with _tmpfs(tmp_path / "full") as place:
        with (place / "filler").open("wb", buffering=0) as filler:
            try:
                while True:
                    filler.write(b"\0" * 4096)
            except OSError:
                pass  # full
        yield place


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Path]:
    with _tmpfs(tmp_path / "ro", "ro") as place:
        yield place


@pytest.mark.parametrize(
    "command",
    [
        ["convert", str(PARAM), "-o", "{out}/o.parquet"],
        ["convert", str(PARAM), "-o", "{out}/o.d", "--partition-by-rank"],
        ["convert", str(GLOO), "--to", "perfetto", "-o", "{out}/o.json"],
        ["report", str(GLOO), "-o", "{out}/r.html"],
        ["check", str(GLOO), "--budget", str(PASS_BUDGET), "--junit", "{out}/j.xml"],
        ["check", str(GLOO), "--budget", str(PASS_BUDGET), "--markdown", "{out}/s.md"],
        ["diff", str(GLOO), str(GLOO), "--markdown", "{out}/d.md"],
        ["init", str(GLOO), "-o", "{out}/timeline.toml"],
    ],
)
@pytest.mark.parametrize("place", ["full_disk", "read_only"])
def test_a_full_or_read_only_file_system_is_one_error_line_and_no_file(
    command: list[str], place: str, request: pytest.FixtureRequest
) -> None:
    out: Path = request.getfixturevalue(place)
    before = sorted(p.name for p in out.iterdir())
    line = _one_error_line(_run(*[a.format(out=out) for a in command]))
    reason = "No space left on device" if place == "full_disk" else "Read-only file system"
    assert f": cannot write ({reason}" in line
    assert sorted(p.name for p in out.iterdir()) == before  # nothing under the final name, no partial


@pytest.mark.parametrize("args", [["analyze"], ["analyze", "--json"], ["collectives"]])
def test_a_stdout_that_cannot_be_written_is_one_error_line(args: list[str]) -> None:
    with Path("/dev/full").open("w") as full:
        result = subprocess.run(
            [*timeline_command(), *args, str(GLOO)],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
            timeout=BOUND_S,
        )
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == "error: cannot write to stdout (No space left on device)"
    assert "Traceback" not in result.stderr


def test_a_closed_stdout_stays_exit_code_141() -> None:
    command = subprocess.Popen(
        [*timeline_command(), "analyze", str(GLOO)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert command.stdout is not None
    command.stdout.close()  # the reader is gone before anything was written
    _, stderr = command.communicate(timeout=BOUND_S)
    assert command.returncode == 141
    assert stderr == b""


# --- 10. Ctrl-C while convert writes -------------------------------------------------------------


def test_ctrl_c_while_convert_writes_leaves_no_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from timeline.importers.parquet import write_parquet

    def interrupted_half_way(handle: Any, **kwargs: Any) -> None:
        write_parquet(handle, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr("timeline.execution.dataset.write_parquet", interrupted_half_way)
    result = _invoke("convert", GLOO / "rank0.2-4.pt.trace.json.gz", "-o", tmp_path / "o.parquet")
    assert result.exit_code == 130
    assert result.stderr == "interrupted\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == []


# --- slow but correct: a key 100,000 deep, 5,000 tiny rank files ---------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "a" + ".a" * 100_000 + " = 1\n",  # 18 s in Python's TOML reader (quadratic in the parts)
        "[" + ".".join(["t"] * 100_000) + "]\nmax = 1\n",
        '"q".' * 40 + "k = 1\n",
    ],
)
def test_a_budget_key_of_too_many_parts_is_refused_before_toml_reads_it(text: str, tmp_path: Path) -> None:
    from timeline.budgets.budget_file import read_budget_file
    from timeline.errors import BudgetError

    budget = tmp_path / "deep.toml"
    budget.write_text("# a comment\n" + text)
    with pytest.raises(BudgetError) as raised:
        read_budget_file(budget)
    assert str(raised.value) == (
        f"{budget}:2: a key of more than 32 dotted parts; a budget file needs no more than a few levels "
        "(see docs/ci.md)"
    )


def test_a_key_of_a_few_parts_is_still_read(tmp_path: Path) -> None:
    from timeline.budgets.budget_file import read_budget_file

    budget = tmp_path / "pyproject.toml"
    budget.write_text('[tool.timeline]\n[[tool.timeline.budgets]]\nmetric = "step_ns"\nmax = 1\n')
    assert [b.metric.name for b in read_budget_file(budget).budgets] == ["step_ns"]


def test_many_small_files_are_parsed_in_worker_processes(tmp_path: Path) -> None:
    # 5,000 one-kernel traces took 92 s parsed in one process (about 18 ms of polars queries each)
    from timeline import policy

    files = [tmp_path / f"rank{r}.json" for r in range(policy.PARALLEL_MIN_FILES)]
    for path in files:
        path.write_text("{}")
    assert policy.parses_in_parallel(files, workers=2)
    assert not policy.parses_in_parallel(files[:-1], workers=2)  # a few bytes each: one process
    assert not policy.parses_in_parallel(files, workers=1)
