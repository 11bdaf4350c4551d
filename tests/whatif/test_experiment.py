"""The two-namespace experiment: predict a rate-limited DDP run from a faster one (needs root)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from timeline.whatif.experiment import ExperimentConfig, experiment_unavailable, rate_bps, run_experiment


def test_rates() -> None:
    assert rate_bps("1gbit") == 1e9
    assert rate_bps("200mbit") == 2e8
    assert rate_bps("512kbit") == 512e3
    with pytest.raises(ValueError, match="tc rate"):
        rate_bps("1 Gbps")


@pytest.mark.slow
def test_slow_run_predicted_from_fast_run_within_15_percent(tmp_path: Path) -> None:
    from timeline.whatif.experiment import ensure_iproute2

    ensure_iproute2()
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
