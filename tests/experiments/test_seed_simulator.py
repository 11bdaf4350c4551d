"""The seed paper's simulator (``timeline.whatif.seed``) on its data reproduces its 64-GPU scaling factors.

The command's side (``timeline seed PROFILE.bk.log``) is tested in ``tests/whatif/test_seed_cli.py``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from experiments.seed_simulator import SEED_BANDWIDTHS_GBPS, SEED_EXPECTED_SCALING, reproduce_seed
from tests.builders import TRACES
from timeline.errors import TraceFormatError, UsageError
from timeline.whatif.seed import (
    FREE_ADDS,
    BackwardProfile,
    VectorAddCost,
    find_vector_add_cost,
    read_backward_profile,
    read_vector_add_cost,
    simulate_seed,
)

SEED = TRACES / "seed"


def test_reproduces_every_published_scaling_factor_within_002() -> None:
    table = reproduce_seed(SEED)
    assert table.height == 12
    for row in table.iter_rows(named=True):
        expected = SEED_EXPECTED_SCALING[row["model"]][SEED_BANDWIDTHS_GBPS.index(row["bandwidth_gbps"])]
        assert row["expected"] == expected
        assert row["scaling_factor"] == pytest.approx(expected, abs=0.02), row
        assert row["scaling_factor"] == pytest.approx(expected, abs=0.001)  # in fact, to the third digit


def test_profile_and_table_readers() -> None:
    profile = read_backward_profile(SEED / "bk_time_logs" / "resnet50.bk.log")
    assert profile.name == "resnet50"
    assert len(profile.batches) == 1
    assert len(profile.batches[0]) == 161
    assert profile.batches[0][0] == pytest.approx((552.6383717854818e-6, 4000))
    assert sum(w for w, _ in profile.batches[0]) == pytest.approx(0.0648, abs=1e-4)  # backward ≈ 65 ms
    cost = read_vector_add_cost(SEED / "cuda_vec_add.log")
    assert cost(40) == pytest.approx(1.04448e-05, rel=1e-6)
    assert cost(1) == cost(40)  # held constant outside the table
    assert cost(15728640) == pytest.approx((4.82224e-05 + 8.5256e-05) / 2, rel=1e-5)  # halfway


def test_compression_and_world_size_move_the_scaling_factor_as_expected() -> None:
    table = reproduce_seed(SEED, world_sizes=(16, 64), bandwidths_gbps=(10.0,), compressions=(1.0, 2.0, 5.0))
    for model in ("resnet50", "resnet101", "vgg16"):
        rows = table.filter(table["model"] == model)
        at64 = rows.filter(rows["world_size"] == 64).get_column("scaling_factor").to_list()
        assert at64 == sorted(at64)  # more compression, better scaling
    # The paper's point: at 10 Gbit/s a 2-5x compression suffices for the ResNets.
    resnets = table.filter((table["world_size"] == 64) & (table["compression"] == 5.0))
    assert resnets.filter(resnets["model"] != "vgg16").get_column("scaling_factor").min() > 0.99  # type: ignore[operator]


def test_simulator_hand_case() -> None:
    # Two 4 MB gradients 1 ms apart; 8 Gbit/s, 2 GPUs, free adds: each bucket 2 · 4 ms (no fusion
    # within 5 ms... both fit one bucket sent at 2 ms: 8 MB → 2 · 4 ms = 8 ms, ends at 10 ms).
    profile = BackwardProfile("toy", (((0.001, 4_000_000), (0.001, 4_000_000)),))
    result = simulate_seed(
        profile, world_size=2, bandwidth_gbps=8, add_cost=VectorAddCost((1.0, 2.0), (0.0, 0.0)), single_s=0.01
    )
    assert result.buckets == 1
    assert result.comm_end_s == pytest.approx(0.010)
    assert result.overhead_s == pytest.approx(0.008)
    assert result.scaling_factor == pytest.approx(0.01 / 0.018)
    assert result.comm_s == pytest.approx(0.008)
    free = simulate_seed(profile, world_size=2, bandwidth_gbps=8, add_cost=FREE_ADDS, single_s=0.01)
    assert free == result


def test_simulator_settings_out_of_range() -> None:
    profile = BackwardProfile("toy", (((0.001, 4_000_000),),))
    good = {"world_size": 2, "bandwidth_gbps": 8.0, "single_s": 0.01, "compression": 1.0}
    for key, value, message in [
        ("world_size", 0, "world size 0: must be at least 1"),
        ("bandwidth_gbps", 0.0, "bandwidth 0 Gbit/s"),
        ("bandwidth_gbps", math.inf, "bandwidth inf Gbit/s"),
        ("single_s", -1.0, "single-GPU iteration -1 s"),
        ("compression", 0.5, "compression 0.5"),
        ("single_s", 1e300, "predicted iteration lasts more than"),
    ]:
        settings: dict[str, Any] = {**good, key: value}
        with pytest.raises(UsageError, match=message):
            simulate_seed(profile, add_cost=FREE_ADDS, **settings)


def test_cost_table_is_found_where_the_paper_keeps_it(tmp_path: Path) -> None:
    found = find_vector_add_cost(SEED / "bk_time_logs" / "vgg16.bk.log")
    assert found is not None
    assert found.samefile(SEED / "cuda_vec_add.log")
    (tmp_path / "logs").mkdir()
    assert find_vector_add_cost(tmp_path / "logs" / "x.bk.log") is None
    (tmp_path / "logs" / "cuda_vec_add.log").write_text("1,1\n")  # beside the profile: not where it is kept
    assert find_vector_add_cost(tmp_path / "logs" / "x.bk.log") is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("explanation\nx\n3\n", "number of batches"),
        ("explanation\n1\n2\n1.0,10\n", "2 rows announced"),
        ("explanation\n1\n1\n1.0;10\n", "expected 'µs waited,bytes'"),
        ("explanation\n1\n1\n-1.0,10\n", r"bad\.bk\.log:4: expected 'µs waited,bytes'"),
        ("explanation\n1\n1\nnan,10\n", r"bad\.bk\.log:4: expected 'µs waited,bytes'"),
        ("explanation\n1\n1\n1.0,-10\n", r"bad\.bk\.log:4: expected 'µs waited,bytes'"),
        ("explanation\n1\n1\n1.0,1.5\n", r"bad\.bk\.log:4: expected 'µs waited,bytes'"),
        ("explanation\n0\n1\n", r"bad\.bk\.log:2: expected the number of batches \(a positive"),
        ("explanation\n1\n0\n", r"bad\.bk\.log:3: expected the number of gradients per batch"),
        (
            "explanation\n1\n",
            r"bad\.bk\.log:3: expected the number of gradients per batch \(a positive integer\), got nothing",
        ),
        ("explanation\n1\n1\n1.0,10\n2.0,10\n", r"bad\.bk\.log:5: a row after the 1 announced"),
    ],
)
def test_profile_errors(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.bk.log"
    path.write_text(text)
    with pytest.raises(TraceFormatError, match=message):
        read_backward_profile(path)


def test_profile_not_text_and_missing(tmp_path: Path) -> None:
    path = tmp_path / "bad.bk.log"
    path.write_bytes(b"x\n1\n1\n\xff,1\n")
    with pytest.raises(TraceFormatError, match=r"bad\.bk\.log: not text \(byte 6 is not UTF-8\)"):
        read_backward_profile(path)
    with pytest.raises(UsageError, match=r"missing\.bk\.log: cannot read: "):
        read_backward_profile(tmp_path / "missing.bk.log")
    path.write_text("x\n1\n1\n1.0,10\n\n\n")  # trailing blank lines are fine
    assert read_backward_profile(path).batches == (((1e-6, 10),),)


def test_table_errors(tmp_path: Path) -> None:
    path = tmp_path / "add.log"
    path.write_text("40,1e-5\nabc\n")
    with pytest.raises(TraceFormatError, match=r"add\.log:2"):
        read_vector_add_cost(path)
    path.write_text("")
    with pytest.raises(TraceFormatError, match="no rows"):
        read_vector_add_cost(path)
    for text, line in [("40,1e-5\n40,2e-5\n", 2), ("40,1e-5\n80,-1\n", 2), ("1e39,1\n", 1), ("inf,1\n", 1)]:
        path.write_text(text)
        with pytest.raises(TraceFormatError, match=rf"add\.log:{line}: "):
            read_vector_add_cost(path)
