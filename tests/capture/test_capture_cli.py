"""``timeline capture``: the error paths, and one real demo run."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from cli.capture import capture_command
from timeline.capture import MANIFEST_NAME, read_manifest


def _app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """Stand-in for the main app, which registers the command the same way."""

    app.command("capture")(capture_command)
    return app


def _invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(_app(), ["capture", *args])
    return result.exit_code, result.stdout, result.stderr


def test_without_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    code, out, err = _invoke("--demo", "--out", str(tmp_path / "run"))
    assert code == 2
    assert out == ""
    assert err == "error: timeline capture needs torch: pip install 'timeline-comm[torch]'\n"
    assert not (tmp_path / "run").exists()


def test_without_demo() -> None:
    code, out, err = _invoke()
    assert code == 2
    assert out == ""
    assert err.startswith("error: timeline capture runs only the built-in demo job: pass --demo;")
    assert err.count("\n") == 1


def test_refuses_to_mix_runs(tmp_path: Path) -> None:
    (tmp_path / "rank0.2-4.pt.trace.json.gz").write_bytes(b"")
    code, _, err = _invoke("--demo", "--out", str(tmp_path))
    assert code == 2
    assert err == (
        f"error: {tmp_path}: already holds a captured run (rank0.2-4.pt.trace.json.gz); "
        "pass --force to replace it\n"
    )


def test_out_is_a_file(tmp_path: Path) -> None:
    path = tmp_path / "run"
    path.write_text("")
    code, _, err = _invoke("--demo", "--out", str(path))
    assert code == 2
    assert err == f"error: {path}: exists and is not a directory; choose another --out\n"


def test_too_few_steps(tmp_path: Path) -> None:
    code, _, err = _invoke("--demo", "--out", str(tmp_path), "--steps", "4")
    assert code == 2
    assert "--steps" in err


def test_unknown_demo_job(tmp_path: Path) -> None:
    earlier = tmp_path / "rank0.2-4.pt.trace.json.gz"
    earlier.write_bytes(b"")
    code, out, err = _invoke("--demo", "--demo-job", "zero3", "--out", str(tmp_path), "--force")
    assert (code, out) == (2, "")
    assert err == "error: demo job 'zero3': unknown; choose one of ddp, fsdp2_tp, pipeline, expert\n"
    assert earlier.exists()  # refused before --force removed anything


def test_mesh_job_with_an_odd_rank_count(tmp_path: Path) -> None:
    code, out, err = _invoke("--demo", "--demo-job", "fsdp2_tp", "-n", "3", "--out", str(tmp_path / "r"))
    assert (code, out) == (2, "")
    assert err == (
        "error: ranks=3: the fsdp2_tp demo job runs on a device mesh with a dimension of 2; pass an even "
        "number of ranks, at least 4\n"
    )
    assert not (tmp_path / "r").exists()


def test_grad_ready_markers_need_the_ddp_job(tmp_path: Path) -> None:
    code, _, err = _invoke("--demo", "--demo-job", "pipeline", "--grad-ready-markers", "--out", str(tmp_path))
    assert code == 2
    assert err.startswith("error: grad_ready_markers: only the ddp demo job records them, not pipeline;")


@pytest.mark.slow  # a real 4-rank run of a mesh job through the command line (10-20 s on 2 cores)
def test_demo_job_runs_on_four_ranks_by_default(tmp_path: Path) -> None:
    if importlib.util.find_spec("torch") is None:
        pytest.skip("needs torch")
    code, out, err = _invoke("--demo", "--demo-job", "expert", "--out", str(tmp_path), "--steps", "5")
    assert (code, err) == (0, "")
    assert out.splitlines()[0].startswith("wrote 4 traces (")
    manifest = read_manifest(tmp_path / MANIFEST_NAME)
    assert manifest is not None
    assert manifest.world_size == 4
    assert manifest.files == [f"rank{rank}.2-4.pt.trace.json.gz" for rank in range(4)]


@pytest.mark.slow  # a real 2-rank run, as in test_capture_ddp.py, through the command line
def test_demo_replaces_an_earlier_run(tmp_path: Path) -> None:
    if importlib.util.find_spec("torch") is None:
        pytest.skip("needs torch")
    stale = tmp_path / "rank3.7-9.pt.trace.json.gz"
    stale.write_bytes(b"")
    (tmp_path / MANIFEST_NAME).write_text("{}")
    code, out, err = _invoke("--demo", "--out", str(tmp_path), "--steps", "5", "--force")
    assert (code, err) == (0, "")
    assert not stale.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        MANIFEST_NAME,
        "rank0.2-4.pt.trace.json.gz",
        "rank1.2-4.pt.trace.json.gz",
    ]
    lines = out.splitlines()
    assert lines[0].startswith("wrote 2 traces (")
    assert lines[0].endswith(f"and manifest.json to {tmp_path}")
    assert lines[-1] == f"next: timeline analyze {tmp_path}"
    manifest = read_manifest(tmp_path / MANIFEST_NAME)
    assert manifest is not None
    assert manifest.world_size == 2
