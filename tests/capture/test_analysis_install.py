"""An analysis-only install pulls no torch, and `timeline analyze` works in it."""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tests.builders import REPO


@pytest.mark.slow
def test_install_without_extras_has_no_torch_and_analyses(tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, system_site_packages=False).create(env_dir)
    python = env_dir / "bin" / "python"
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(REPO)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert install.returncode == 0, install.stderr[-2000:]
    probe = subprocess.run(
        [str(python), "-c", "import importlib.util as u; print(u.find_spec('torch') is None)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.strip() == "True", "an analysis-only install must not pull torch"
    run = subprocess.run(
        [str(env_dir / "bin" / "timeline"), "analyze", str(REPO / "sample_traces" / "ddp_gloo")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert "Per rank" in run.stdout
    assert sys.executable != str(python)
