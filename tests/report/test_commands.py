"""``timeline report`` and ``timeline serve`` through the console script: output, errors, imports."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.builders import BAD_INPUTS, PARAM, file_digests, run_timeline

pytest.importorskip("bokeh", reason="the report needs the 'report' extra: pip install -e '.[report]'")


def test_report_writes_a_standalone_html_file(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    result = run_timeline("report", PARAM, "-o", out, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"wrote {out}\n"
    text = out.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    assert "gantt_levels_0" in text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]  # no partial file left


@pytest.mark.parametrize("command", ["serve", "report"])
@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_gives_the_same_one_line_error_as_analyze(tmp_path: Path, case: str, command: str) -> None:
    inputs = tmp_path / "in"
    inputs.mkdir()
    args, start, contains = BAD_INPUTS[case](inputs)
    before = file_digests(inputs)
    extra = ["-o", str(tmp_path / "out.html")] if command == "report" else ["--port", "0"]
    result = run_timeline(command, *args, *extra, cwd=tmp_path)

    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {start}"), lines[0]
    for text in contains:
        assert text in lines[0]
    assert file_digests(inputs) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]


def test_report_never_overwrites_an_input(tmp_path: Path) -> None:
    trace = tmp_path / "rank0.json"
    trace.write_bytes(b'{"traceEvents": [{"ph": "X", "name": "k", "ts": 1, "dur": 1, "pid": 0, "tid": 7}]}')
    before = trace.read_bytes()
    result = run_timeline("report", trace, "-o", trace, cwd=tmp_path)
    assert result.returncode == 2
    assert (
        result.stderr
        == f"error: {trace}: is one of the inputs; choose another output file (inputs are never modified)\n"
    )
    assert trace.read_bytes() == before


def test_report_into_a_missing_folder_is_an_error(tmp_path: Path) -> None:
    out = tmp_path / "nowhere" / "report.html"
    result = run_timeline("report", PARAM, "-o", out, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: {out}: folder {out.parent} does not exist")
    assert len(result.stderr.splitlines()) == 1


def test_serve_on_a_port_in_use_is_an_error(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run_timeline("serve", PARAM, "--port", str(port), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith(f"error: cannot listen on 127.0.0.1:{port} (")
    assert result.stderr.endswith("; pass another --port or --host\n")


def test_serve_help_says_why_it_binds_localhost() -> None:
    result = run_timeline("serve", "--help")
    assert result.returncode == 0
    text = " ".join(result.stdout.replace("│", " ").split())  # rich draws the help in a box
    assert "127.0.0.1" in text
    assert "reachable from this machine only" in text


def test_registering_the_commands_imports_no_report_library() -> None:
    code = """
import sys
from typer.testing import CliRunner
from cli.main import app
result = CliRunner().invoke(app, ["report", "--help"])
assert result.exit_code == 0, result.output
result = CliRunner().invoke(app, ["serve", "--help"])
assert result.exit_code == 0, result.output
print(sorted(m for m in sys.modules if m.split(".")[0] in ("bokeh", "holoviews", "panel")))
"""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
