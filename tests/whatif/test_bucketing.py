"""Bucketing policies: DDP caps, Horovod-style fusion, and their command-line spelling."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from timeline.errors import UsageError
from timeline.whatif.bucketing import (
    MEASURED,
    DDPBuckets,
    FusionBuckets,
    GradientReady,
    ddp_buckets,
    fusion_buckets,
    parse_bucket_policy,
)

MIB = 1024 * 1024


def test_ddp_reproduces_the_demo_jobs_buckets() -> None:
    # The demo MLP's gradients in backward order (bias, weight per layer); bucket_cap_mb=1.
    sizes = [40, 20480, 2048, 1048576, 2048, 1048576, 2048, 1048576, 2048, 524288]
    grads = [GradientReady(10 * k, size) for k, size in enumerate(sizes)]
    buckets = ddp_buckets(grads, cap_bytes=MIB, first_cap_bytes=MIB)
    assert [b.nbytes for b in buckets] == [1071144, 1050624, 1050624, 526336]  # what gloo all-reduced
    assert [b.members for b in buckets] == [(0, 1, 2, 3), (4, 5), (6, 7), (8, 9)]
    assert [b.ready_ns for b in buckets] == [30, 50, 70, 90]


def test_ddp_first_bucket_has_its_own_cap_and_buckets_leave_in_order() -> None:
    grads = [GradientReady(t, 600) for t in (40, 20, 30, 10)]
    buckets = ddp_buckets(grads, cap_bytes=1000, first_cap_bytes=500)
    assert [(b.nbytes, b.members) for b in buckets] == [(600, (0,)), (1200, (1, 2)), (600, (3,))]
    assert [b.ready_ns for b in buckets] == [40, 40, 40]  # never before the previous bucket


def test_fusion_closes_on_cycle_or_size() -> None:
    grads = [GradientReady(t, 10) for t in (1, 2, 6, 7, 8, 20)]
    by_cycle = fusion_buckets(grads, fusion_bytes=1000, cycle_ns=5, start_ns=0)
    assert [(b.ready_ns, b.nbytes, b.members) for b in by_cycle] == [(6, 30, (0, 1, 2)), (20, 30, (3, 4, 5))]
    by_size = fusion_buckets(grads, fusion_bytes=20, cycle_ns=1000, start_ns=0)
    assert [b.nbytes for b in by_size] == [20, 20, 20]
    assert fusion_buckets([], fusion_bytes=1, cycle_ns=1) == []


sizes = st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 5_000)), min_size=0, max_size=40)


@given(sizes, st.integers(1, 20_000), st.integers(1, 20_000))
def test_bucketings_partition_the_gradients(items: list[tuple[int, int]], cap: int, cycle: int) -> None:
    grads = [GradientReady(t, b) for t, b in sorted(items)]
    for buckets in (
        ddp_buckets(grads, cap_bytes=cap, first_cap_bytes=max(1, cap // 2)),
        fusion_buckets(grads, fusion_bytes=cap, cycle_ns=cycle),
    ):
        members = [m for b in buckets for m in b.members]
        assert members == list(range(len(grads)))
        assert sum(b.nbytes for b in buckets) == sum(g.nbytes for g in grads)
        for b in buckets:
            assert b.ready_ns >= max(grads[m].ready_ns for m in b.members)
        assert [b.ready_ns for b in buckets] == sorted(b.ready_ns for b in buckets)


@pytest.mark.parametrize(
    ("text", "policy", "label"),
    [
        ("measured", MEASURED, "measured"),
        ("ddp:25", DDPBuckets(25 * MIB, MIB), "ddp:25"),
        ("DDP:4:0.5", DDPBuckets(4 * MIB, MIB // 2), "ddp:4:0.5"),
        ("fusion:64", FusionBuckets(64 * MIB, 5_000_000), "fusion:64:5"),
        ("horovod:32:1", FusionBuckets(32 * MIB, 1_000_000), "fusion:32:1"),
    ],
)
def test_parse_bucket_policy(text: str, policy: object, label: str) -> None:
    parsed = parse_bucket_policy(text)
    assert parsed == policy
    assert parsed.label == label
    assert parse_bucket_policy(parsed.label) == parsed


@pytest.mark.parametrize("text", ["ddp", "ddp:x", "fusion", "buckets:3", "ddp:0"])
def test_parse_bucket_policy_errors(text: str) -> None:
    with pytest.raises(UsageError, match=repr(text)):
        parse_bucket_policy(text)


def test_bucket_sizes_must_be_positive() -> None:
    with pytest.raises(UsageError, match="must be positive"):
        ddp_buckets([], cap_bytes=0)
    with pytest.raises(UsageError, match="must be positive"):
        fusion_buckets([], fusion_bytes=1, cycle_ns=0)
