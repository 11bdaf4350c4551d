"""The two-namespace experiment: predict a rate-limited DDP run from a faster one (needs root)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.netns_whatif import (
    ExperimentConfig,
    MissingToolError,
    experiment_unavailable,
    rate_bps,
    require_tools,
    run_experiment,
)


def test_rates() -> None:
    assert rate_bps("1gbit") == 1e9
    assert rate_bps("200mbit") == 2e8
    assert rate_bps("512kbit") == 512e3
    with pytest.raises(ValueError, match="tc rate"):
        rate_bps("1 Gbps")


def test_missing_tools_are_named_with_their_debian_package_never_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ran: list[object] = []
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: ran.append(a))
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: ran.append(a))
    message = "needs ip, tc (not on PATH): install the Debian package iproute2"
    with pytest.raises(MissingToolError, match=re.escape(message)):
        require_tools()
    with pytest.raises(MissingToolError, match="iproute2"):
        run_experiment(ExperimentConfig(), "unused")
    if sys.platform == "linux":
        assert experiment_unavailable() == message
    assert ran == []  # nothing was run: no apt-get, no ip


@pytest.mark.slow
@pytest.mark.machine
def test_slow_run_predicted_from_fast_run_within_15_percent(tmp_path: Path) -> None:
    why = experiment_unavailable()
    if why is not None:
        pytest.skip(f"the network-namespace experiment {why}")
    cores = os.cpu_count() or 1
    load = os.getloadavg()[0]
    if load > 2 * cores:
        pytest.skip(f"machine too busy to time a training job: load average {load:.1f} on {cores} cores")
    result = run_experiment(ExperimentConfig(), tmp_path / "runs")
    assert result.fast_self_replay_error_ratio < 0.05
    assert result.slow_self_replay_error_ratio < 0.05
    assert result.slow_measured_ms > 2 * result.fast_measured_ms  # communication matters at the slow rate
    assert result.error_ratio < 0.15, result
    # The namespaces are gone.
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    assert "tlwi" not in listed
