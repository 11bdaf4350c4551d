"""The Horovod timeline environment helper (Horovod itself is not needed)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from timeline.capture import HOROVOD_TIMELINE_NAME, horovod_timeline_env


def test_sets_and_returns_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HOROVOD_TIMELINE", raising=False)
    monkeypatch.delenv("HOROVOD_TIMELINE_MARK_CYCLES", raising=False)
    run_dir = tmp_path / "runs" / "exp1"
    env = horovod_timeline_env(run_dir)
    assert env == {
        "HOROVOD_TIMELINE": str((run_dir / HOROVOD_TIMELINE_NAME).resolve()),
        "HOROVOD_TIMELINE_MARK_CYCLES": "1",
    }
    assert Path(env["HOROVOD_TIMELINE"]).is_absolute()
    assert run_dir.is_dir()
    assert os.environ["HOROVOD_TIMELINE"] == env["HOROVOD_TIMELINE"]
    assert os.environ["HOROVOD_TIMELINE_MARK_CYCLES"] == "1"


def test_apply_false_leaves_the_environment_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HOROVOD_TIMELINE", raising=False)
    monkeypatch.delenv("HOROVOD_TIMELINE_MARK_CYCLES", raising=False)
    env = horovod_timeline_env(str(tmp_path), mark_cycles=False, apply=False)
    assert env["HOROVOD_TIMELINE_MARK_CYCLES"] == "0"
    assert env["HOROVOD_TIMELINE"].endswith(HOROVOD_TIMELINE_NAME)
    assert "HOROVOD_TIMELINE" not in os.environ
    assert "HOROVOD_TIMELINE_MARK_CYCLES" not in os.environ
