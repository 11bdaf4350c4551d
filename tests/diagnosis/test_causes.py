"""Each cause of the diagnosis on a small run built here, its finding and gain worked out by hand.

Times in µs below. Every expected step is the hand-computed step of the run with the fix applied
(what the replay must give on these simple runs): a late rank removed, a stall removed, collectives
launched when their gradients were ready, another bucket cap, a faster or fully used link, the launch
gaps removed; every evidence number is recomputed from the frames or the rows written here.
"""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest

from tests.builders import (
    after_backward_rank,
    cpu,
    cpu_all_reduce_call,
    gloo_all_reduce,
    gpu,
    make_events,
    run_of,
    step,
)
from timeline.analysis.overlap import compute_overlap
from timeline.diagnosis import Diagnosis, diagnose
from timeline.results.findings import Finding
from timeline.schema import FILES_SCHEMA
from timeline.trace import Trace

US = 1_000
MIB = 2**20


def trace_of(rows: list[dict[str, Any]], *, world: int = 2, backend: str = "gloo") -> Trace:
    events = make_events(rows)
    ranks = sorted(set(events.get_column("rank").to_list()))
    files = pl.DataFrame(
        {
            "rank": ranks,
            "path": [f"rank{r}.json" for r in ranks],
            "format": ["kineto"] * len(ranks),
            "rank_from": ["distributedInfo"] * len(ranks),
            "world_size": [world] * len(ranks),
            "backend": [backend] * len(ranks),
            "host": [None] * len(ranks),
            "clock": [None] * len(ranks),
            "events": [1] * len(ranks),
        },
        schema=FILES_SCHEMA,
    )
    return Trace(events=events, files=files)


def diagnosed(trace: Trace, **options: Any) -> Diagnosis:
    """The run's diagnosis (``options``: :class:`~timeline.run.RunOptions` fields)."""
    return run_of(trace, **options).diagnosis


def only(diagnosis: Diagnosis, cause: str) -> Finding:
    found = [f for f in diagnosis.findings if f.cause == cause]
    assert len(found) == 1, [f.cause for f in diagnosis.findings]
    return found[0]


def blocking_rank(rank: int, *, idle: int, compute: int = 40, comm_end: int, update: int = 10, t0: int = 0,
                  n: int = 1, nbytes: int = 4000) -> list[dict[str, Any]]:  # fmt: skip
    """One step: idle, compute, a blocking all-reduce called when compute ends, then the update."""
    call = t0 + idle + compute
    end = comm_end + update
    return [
        step(n, t0 * US, end * US, rank=rank),
        cpu("cpu_op", (t0 + idle) * US, call * US, rank=rank, name="backward"),
        *cpu_all_reduce_call(call * US, (call * US, comm_end * US), rank=rank, nbytes=nbytes),
        cpu("cpu_op", comm_end * US, end * US, rank=rank, name="update"),
    ]


# --- straggler: the case -------------------------------------------------------------------


def test_a_rank_waiting_for_its_data_is_the_straggler_not_the_network() -> None:
    # rank 1 idles 50 µs (waiting for its data) before a 40 µs backward; rank 0 computes at once and
    # waits in the all-reduce [40, 100) for rank 1, whose transfer takes [90, 100); both update [100, 110).
    trace = trace_of(blocking_rank(0, idle=0, comm_end=100) + blocking_rank(1, idle=50, comm_end=100))
    diagnosis = diagnosed(trace)
    overlap = compute_overlap(trace.events)
    rank0 = overlap.iterations.filter(pl.col("rank") == 0).row(0, named=True)
    assert rank0["exposed_comm_ns"] / rank0["step_ns"] > 0.5  # rank 0: most of its step exposed

    top = diagnosis.findings[0]
    assert top.cause == "straggler"
    assert top.ranks == (1,)
    assert not diagnosis.communication_bound
    # Without the 50 µs: both compute [0, 40), transfer [40, 50), update [50, 60).
    assert top.predicted_step_ns == 60 * US
    assert top.predicted_gain_ratio == pytest.approx(1 - 60 / 110)
    assert top.basis == "replay"
    evidence = top.evidence
    assert evidence["caused_wait_ns"] == 50 * US  # rank 0's 60 µs in the collective minus the 10 µs transfer
    assert evidence["late_ns"] == 50 * US  # rank 1 started the all-reduce at 90, rank 0 at 40
    assert evidence["idle_ns"] == overlap.iterations.filter(pl.col("rank") == 1).item(0, "idle_ns") == 50 * US
    assert evidence["others_exposed_comm_ns"] == rank0["exposed_comm_ns"]
    assert evidence["excess_idle_ns"] == 50 * US
    assert evidence["excess_compute_ns"] == 0
    assert "straggler" in diagnosis.summary
    assert "rank 1" in diagnosis.summary
    assert diagnosis.step_ns == 110 * US


def test_without_a_graph_the_straggler_gain_is_the_stated_bound() -> None:
    trace = trace_of(blocking_rank(0, idle=0, comm_end=100) + blocking_rank(1, idle=50, comm_end=100))
    run = run_of(trace)
    diagnosis = diagnose(trace, run.overlap, match=run.matched, complete=False)
    top = only(diagnosis, "straggler")
    # the step minus what rank 0 waited for rank 1 (at most its exposed communication)
    assert top.basis == "bound"
    assert top.predicted_step_ns == 110 * US - 50 * US
    assert any("rank by rank" in note for note in diagnosis.notes)


def _sharded_rank(rank: int, *, extra: int) -> list[dict[str, Any]]:
    """One CPU step of an FSDP2-like rank: ``extra`` µs of work, two synchronous all-gathers, no wait op.

    Copy-in [e, e+10); 10 µs of Python; the all-gather called at e+20 (1 µs) and gathered over gloo
    until 10 µs after the last rank's start (81 when rank 1 is 50 µs late); the main thread resumes
    100 µs after each end (the Python between the calls): forward [181, 221), a second all-gather
    called at 231, gathered [232, 242), the loss [342, 362).
    """

    def gather(call: int, end: int) -> list[dict[str, Any]]:
        return [
            cpu("cpu_op", call * US, (call + 1) * US, rank=rank, name="c10d::_allgather_base_"),
            cpu("communication", (call + 1) * US, end * US, rank=rank, tid=2, name="gloo:all_gather",
                cat="user_annotation", collective="all_gather", in_bytes=4000, group_size=2),
        ]  # fmt: skip

    rows = [
        step(1, 0, 362 * US, rank=rank),
        cpu("cpu_op", extra * US, (extra + 10) * US, rank=rank, name="copy_in"),
    ]
    if extra:
        rows.append(cpu("cpu_op", 0, extra * US, rank=rank, name="late_work"))
    rows += gather(extra + 20, 81)
    rows += [cpu("cpu_op", 181 * US, 221 * US, rank=rank, name="forward")]
    rows += gather(231, 242)
    rows += [cpu("cpu_op", 342 * US, 362 * US, rank=rank, name="loss")]
    return rows


def test_a_straggler_before_a_synchronous_all_gather_without_a_wait_op() -> None:
    # FSDP2 on gloo: the main thread calls the all-gather 10 µs after its last op, blocks with no wait op
    # and resumes 100 µs after the gather's end. Rank 1's 50 µs of extra work before the first all-gather
    # makes rank 0 wait 50 µs there; without it both gather [21, 31), resume at 131 and the step is
    # 312 µs (rank 0's resumption follows the all-gather: a wait point; rank 1's excess comes out of
    # its compute before the all-gather it was late for).
    trace = trace_of(_sharded_rank(0, extra=0) + _sharded_rank(1, extra=50))
    finding = only(diagnosed(trace), "straggler")
    assert finding.ranks == (1,)
    assert finding.evidence["excess_compute_ns"] == 50 * US
    assert finding.predicted_step_ns == 312 * US
    assert finding.predicted_gain_ratio == pytest.approx(50 / 362)


# --- imbalance: lateness rotates --------------------------------------------------------------------


def _rotating() -> Trace:
    rows = []
    for n in range(3):  # iteration n: rank n idles 20 µs first; all others start at once (3 ranks)
        t0 = 80 * n
        for rank in range(3):
            idle = 20 if rank == n else 0
            rows += [
                step(n + 1, t0 * US, (t0 + 80) * US, rank=rank),
                cpu("cpu_op", (t0 + idle) * US, (t0 + idle + 40) * US, rank=rank, name="backward"),
                *cpu_all_reduce_call(
                    (t0 + idle + 40) * US, ((t0 + idle + 40) * US, (t0 + 70) * US), rank=rank
                ),
                cpu("cpu_op", (t0 + 70) * US, (t0 + 80) * US, rank=rank, name="update"),
            ]
    return trace_of(rows, world=3)


def test_lateness_that_rotates_among_ranks_is_imbalance() -> None:
    events = _rotating().events.with_columns(pl.lit(3, dtype=pl.Int32).alias("group_size"))
    trace = Trace(events=events, files=_rotating().files)
    diagnosis = diagnosed(trace)
    finding = only(diagnosis, "imbalance")
    assert not [f for f in diagnosis.findings if f.cause == "straggler"]
    assert finding.evidence["late_ranks"] == [0, 1, 2]
    # each iteration without its 20 µs late start: compute [0, 40), transfer 10, update 10
    assert finding.predicted_step_ns == 60 * US
    assert finding.predicted_gain_ratio == pytest.approx(0.25)


# --- input_stall --------------------------------------------------------------------------------------


def test_every_rank_idling_before_its_step_is_an_input_stall() -> None:
    trace = trace_of(blocking_rank(0, idle=30, comm_end=80) + blocking_rank(1, idle=30, comm_end=80))
    diagnosis = diagnosed(trace)
    assert diagnosis.findings[0].cause == "input_stall"
    finding = diagnosis.findings[0]
    assert finding.ranks is None
    # without the 30 µs: compute [0, 40), transfer [40, 50), update [50, 60)
    assert finding.predicted_step_ns == 60 * US
    assert finding.predicted_gain_ratio == pytest.approx(1 - 60 / 90)
    assert finding.evidence["common_idle_ns"] == 30 * US
    assert not [f for f in diagnosis.findings if f.cause == "straggler"]


def _python_between_ops(rank: int, *, lead: int, gap: int) -> list[dict[str, Any]]:
    """One CPU step: `lead` µs idle, 8 ops of 1 ms `gap` µs apart, an all-reduce, the update."""
    rows = [step(1, 0, (lead + 8 * 1000 + 7 * gap + 2000) * US, rank=rank)]
    at = lead
    for k in range(8):
        rows.append(cpu("cpu_op", at * US, (at + 1000) * US, rank=rank, name=f"layer{k}"))
        at += 1000 + (gap if k < 7 else 0)
    rows += cpu_all_reduce_call(at * US, (at * US, (at + 1000) * US), rank=rank)
    rows.append(cpu("cpu_op", (at + 1000) * US, (at + 2000) * US, rank=rank, name="update"))
    return rows


def test_the_python_between_a_cpu_ranks_ops_is_not_an_input_stall() -> None:
    # 7 gaps of 400 µs between ops (18 % of the step) are the interpreter, not a stall: no finding
    trace = trace_of(_python_between_ops(0, lead=0, gap=400) + _python_between_ops(1, lead=0, gap=400))
    idle = compute_overlap(trace.events).iterations.get_column("idle_ns").to_list()
    assert idle == [7 * 400 * US] * 2
    assert not [f for f in diagnosed(trace).findings if f.cause == "input_stall"]


def test_a_cpu_ranks_stall_before_its_step_counts_without_its_dispatch_gaps() -> None:
    # 3 ms before the first op, then 7 gaps of 400 µs: the stall is the 3 ms; the replay removes them alone
    trace = trace_of(_python_between_ops(0, lead=3000, gap=400) + _python_between_ops(1, lead=3000, gap=400))
    finding = only(diagnosed(trace), "input_stall")
    step_ns = (3000 + 8000 + 7 * 400 + 2000) * US
    assert finding.evidence["idle_ns"] == (3000 + 7 * 400) * US
    assert finding.evidence["common_idle_ns"] == 3000 * US
    assert finding.evidence["dispatch_gap_ns"] == 7 * 400 * US
    assert finding.predicted_step_ns == step_ns - 3000 * US
    # gaps over DISPATCH_GAP_MAX_NS (1 ms) between ops are idle: 7 × 1.5 ms more
    longer = trace_of(
        _python_between_ops(0, lead=3000, gap=1500) + _python_between_ops(1, lead=3000, gap=1500)
    )
    finding = only(diagnosed(longer), "input_stall")
    assert finding.evidence["common_idle_ns"] == (3000 + 7 * 1500) * US
    assert finding.evidence["dispatch_gap_ns"] == 0


# --- no_overlap ---------------------------------------------------------------------------------------


def test_collectives_issued_after_the_backward_pass_are_no_overlap() -> None:
    diagnosis = diagnosed(trace_of(after_backward_rank(0) + after_backward_rank(1)))
    finding = only(diagnosis, "no_overlap")
    # each collective ready with its gradient (30, 45, 60): they end at 40, 55, 70; the main thread no
    # longer waits after 60 (it resumes at 61 and 62, then at 70 for the third), update [70, 80)
    assert finding.predicted_step_ns == 80 * US
    assert finding.predicted_gain_ratio == pytest.approx(0.2)
    assert finding.evidence["launched_late"] == 2 * 3  # every collective of both ranks moved earlier
    # 30 µs of all-reduce, all exposed: the c10d:: call of each is not compute (docs/metrics.md)
    assert finding.evidence["exposed_gradient_comm_ns"] == 30 * US


# --- bucketing ----------------------------------------------------------------------------------------


def _one_big_bucket(rank: int) -> list[dict[str, Any]]:
    """Four 2 MiB gradients ready at 30, 40, 50, 60 µs, all in one 8 MiB all-reduce [60, 100)."""
    rows = [
        step(1, 0, 110 * US, rank=rank),
        cpu("cpu_op", 0, 60 * US, rank=rank, name="backward"),
        cpu("cpu_op", 100 * US, 110 * US, rank=rank, name="update"),
        *cpu_all_reduce_call(60 * US, (60 * US, 100 * US), rank=rank, nbytes=8 * MIB),
    ]
    for k, at in enumerate((30, 40, 50, 60)):
        rows.append(
            cpu("cpu_op", at * US, at * US + 10, rank=rank, name=f"timeline.grad_ready:p{k}:{2 * MIB}")
        )
    return rows


def test_one_bucket_at_the_end_of_backward_is_bucketing() -> None:
    diagnosis = diagnosed(trace_of(_one_big_bucket(0) + _one_big_bucket(1)))
    assert not [f for f in diagnosis.findings if f.cause == "no_overlap"]  # launched when its inputs were
    finding = only(diagnosis, "bucketing")
    # 1 MiB caps: one 2 MiB bucket per gradient, each 10 µs on the link (40 µs for 8 MiB), ready at
    # 30, 40, 50, 60: they end at 70; the update [70, 80)
    assert finding.evidence["best_cap_mib"] == 1
    assert finding.predicted_step_ns == 80 * US
    assert finding.predicted_gain_ratio == pytest.approx(1 - 80 / 110)
    assert finding.evidence["buckets_per_iteration"] == 1
    assert finding.evidence["median_bucket_bytes"] == 8 * MIB
    assert finding.evidence["first_bucket_delay_ns"] == 30 * US  # first gradient at 30, collective at 60


def _latency_bound_buckets(rank: int) -> list[dict[str, Any]]:
    """Four gradients of 1,000, 2,000, 4,000, 8,000 bytes ready at 50, 52, 54, 56 µs at the end of the
    backward pass [0, 56), each all-reduced alone (launched at once, run one after the other on gloo's
    thread), each taking
    10 µs + 0.1 ns per bit sent (8 bits per byte on 2 ranks): [50, 60.8), [60.8, 72.4), [72.4, 85.6),
    [85.6, 102); the update [102, 112)."""
    rows = [
        step(1, 0, 112 * US, rank=rank),
        cpu("cpu_op", 0, 56 * US, rank=rank, name="backward"),
        cpu("cpu_op", 102 * US, 112 * US, rank=rank, name="update"),
    ]
    start = 50 * US
    for k, nbytes in enumerate((1000, 2000, 4000, 8000)):
        at = (50 + 2 * k) * US
        rows.append(cpu("cpu_op", at - 10, at, rank=rank, name=f"timeline.grad_ready:p{k}:{nbytes}"))
        rows.append(cpu("cpu_op", at, at + 10, rank=rank, name="c10d::allreduce_"))  # launched at once
        end = start + 10 * US + round(0.1 * 8 * nbytes)
        rows.append(gloo_all_reduce(start, end, rank=rank, nbytes=nbytes))
        start = end
    return rows


def test_many_latency_bound_collectives_are_bucketing_with_the_fitted_fixed_cost() -> None:
    diagnosis = diagnosed(trace_of(_latency_bound_buckets(0) + _latency_bound_buckets(1)))
    finding = only(diagnosis, "bucketing")
    # the fitted line of time on bus bytes: exactly 10 µs + 0.8 ns/byte (the points lie on it)
    assert finding.evidence["alpha_ns"] == pytest.approx(10 * US)
    assert finding.evidence["beta_ns_per_byte"] == pytest.approx(0.8)
    assert finding.evidence["cost_basis"] == "fit"
    # every cap makes one bucket of 15,000 bytes, ready with its last gradient (its marker ends at
    # 55.99 µs): 10 µs + 0.1 × 120,000 bits = 22 µs, [55.99, 77.99); the update [77.99, 87.99). Without
    # the fixed cost the bucket would cost the 52 µs measured for these bits: no gain, no finding.
    assert finding.predicted_step_ns == 87_990
    assert finding.predicted_gain_ratio == pytest.approx(1 - 87_990 / 112_000)
    assert finding.evidence["buckets_per_iteration"] == 4


def test_latency_bound_collectives_below_the_link_keep_their_fixed_cost_in_link_underused() -> None:
    diagnosis = diagnosed(trace_of(_latency_bound_buckets(0) + _latency_bound_buckets(1)), link_gbps=100)
    # 15,000 bytes × 8 bits (2 ranks: bus factor 1) over the 52 µs the link was busy: 2.3 % of it
    underused = only(diagnosis, "link_underused")
    assert underused.evidence["link_utilisation_ratio"] == pytest.approx(15_000 * 8 / (52 * US) / 100)
    assert underused.evidence["alpha_ns"] == pytest.approx(10 * US)
    # the full link keeps the fitted 10 µs of each collective (2 latency steps of 5 µs on 2 ranks):
    # 4 × 10 µs + 120,000 bits × 0.01 ns = 41.2 µs from 50 µs, [50, 91.2); the update [91.2, 101.2).
    # Without the fixed cost it would be 1.2 µs, and link_underused (to 66.64 µs) would hide the fix
    assert underused.predicted_step_ns == 101_200
    bucketing = only(diagnosis, "bucketing")
    assert bucketing.predicted_step_ns == 87_990  # as without the link: 10 µs + 0.1 ns/bit
    assert diagnosis.findings[0] is bucketing


# --- slow_link and link_underused ----------------------------------------------------------------------


def _transfer_bound() -> Trace:
    # 400,000 bytes in 40 µs on both ranks: algbw = busbw (2 ranks) = 1e10 B/s = 80 Gbit/s
    return trace_of(
        blocking_rank(0, idle=0, comm_end=80, nbytes=400_000)
        + blocking_rank(1, idle=0, comm_end=80, nbytes=400_000)
    )


def test_transfers_at_the_link_are_slow_link() -> None:
    diagnosis = diagnosed(_transfer_bound(), link_gbps=100)
    finding = only(diagnosis, "slow_link")
    assert finding.evidence["busbw_gbps"] == pytest.approx(80)
    assert finding.evidence["link_utilisation_ratio"] == pytest.approx(0.8)
    # the fix: the link from which it no longer limits the step, at the same 80 % efficiency. On an
    # infinite link the step is 40 + 0 + 10 µs; within 1 % of it (0.5 µs left for the transfer of
    # 8 × 400,000 bits at 80 %) from 3.2e6 / (0.8 × 500 ns) = 8,000 Gbit/s; the search bisects a decade
    # on a log scale to 25 %, so the link found is at most 25 % above that
    faster = finding.evidence["faster_link_gbps"]
    assert isinstance(faster, float)
    assert 8_000 <= faster <= 8_000 * 1.25
    transfer_ns = 3.2e6 / (0.8 * faster)  # bits / (Gbit/s) = ns
    assert finding.predicted_step_ns == round(50 * US + transfer_ns)
    assert 50 * US <= round(50 * US + transfer_ns) <= 50.5 * US
    assert diagnosis.communication_bound


def _two_in_flight(rank: int) -> list[dict[str, Any]]:
    """Compute [0, 40); two 200,000-byte all-reduces in flight together on gloo's two threads over
    [40, 80), the main thread waiting for them; the update [80, 90)."""
    return [
        step(1, 0, 90 * US, rank=rank),
        cpu("cpu_op", 0, 40 * US, rank=rank, name="backward"),
        gloo_all_reduce(40 * US, 80 * US, rank=rank, nbytes=200_000, tid=2),
        gloo_all_reduce(40 * US, 80 * US, rank=rank, nbytes=200_000, tid=3),
        cpu("sync", 40 * US, 80 * US, rank=rank, name="c10d::wait"),
        cpu("cpu_op", 80 * US, 90 * US, rank=rank, name="update"),
    ]


def test_collectives_in_flight_together_share_the_link() -> None:
    diagnosis = diagnosed(trace_of(_two_in_flight(0) + _two_in_flight(1)), link_gbps=100)
    finding = only(diagnosis, "slow_link")
    # 2 × 200,000 bytes × 8 bits (bus factor 1 on 2 ranks) while the link was busy 40 µs: 80 Gbit/s,
    # 80 % of the link; each transfer counted alone (40 µs each) would make it 40 Gbit/s, link_underused
    assert finding.evidence["busbw_gbps"] == pytest.approx(2 * 200_000 * 8 / (40 * US))
    assert finding.evidence["link_utilisation_ratio"] == pytest.approx(0.8)


def test_transfers_far_below_the_link_are_link_underused() -> None:
    diagnosis = diagnosed(_transfer_bound(), link_gbps=1000)
    finding = only(diagnosis, "link_underused")
    assert finding.evidence["link_utilisation_ratio"] == pytest.approx(0.08)
    # the whole 1,000 Gbit/s link: 8 × 400,000 bits (2 ranks: 2(n−1)/n = 1) take 3.2 µs
    assert finding.predicted_step_ns == round(40 * US + 3_200 + 10 * US)


def test_without_a_link_slow_link_is_not_examined_and_the_notes_say_so() -> None:
    diagnosis = diagnosed(_transfer_bound())
    assert not [f for f in diagnosis.findings if f.cause in ("slow_link", "link_underused")]
    assert "slow_link" not in diagnosis.examined
    assert any("--link-gbps" in note for note in diagnosis.notes)


# --- compression (MLSys'22, codec cost included) ---------------------------------------------------------


def test_compression_counts_the_codec_and_states_its_break_even() -> None:
    trace = trace_of(_one_big_bucket(0) + _one_big_bucket(1))
    # 4x: the 40 µs transfer takes 10 µs; a 10 GB/s codec encodes 8 MiB in 838.9 µs before it and
    # decodes as long after it: compression costs more than it saves here, and is not listed
    slow = diagnosed(trace, codec_gbps=80)
    assert not [f for f in slow.findings if f.cause == "compression"]
    assert "compression" in slow.examined
    # a 1 TB/s codec: encode 8 MiB in 8.39 µs when the bucket is ready (60), 10 µs on the link,
    # decode 8.39 µs: the update waits until 86.78, ends 10 µs later
    finding = only(diagnosed(trace, codec_gbps=8000), "compression")
    assert finding.basis == "replay"  # the codec's speed was given
    assert finding.evidence["codec_gbps"] == 8000
    assert finding.evidence["codec_assumed"] is False
    assert finding.predicted_step_ns == pytest.approx(80 * US + 2 * 8 * MIB / 1e12 * 1e9, abs=1)
    assert finding.evidence["free_codec_step_ns"] == 80 * US  # free codec: 30 µs saved
    # break-even: encode + decode of the gradient bytes (8 MiB) must take less than the 30 µs saved
    assert finding.evidence["break_even_codec_gbps"] == pytest.approx(2 * 8 * MIB * 8 / (30 * US))


def _stall_then_one_gradient(rank: int) -> list[dict[str, Any]]:
    """10 µs idle, backward [10, 70), one 8 MiB gradient ready at 70 in one all-reduce [70, 110), the
    update [110, 120): the bucket cannot start earlier (one gradient), only compression shortens it."""
    return [
        step(1, 0, 120 * US, rank=rank),
        cpu("cpu_op", 10 * US, 70 * US, rank=rank, name="backward"),
        cpu("cpu_op", 70 * US - 10, 70 * US, rank=rank, name=f"timeline.grad_ready:p0:{8 * MIB}"),
        *cpu_all_reduce_call(70 * US, (70 * US, 110 * US), rank=rank, nbytes=8 * MIB),
        cpu("cpu_op", 110 * US, 120 * US, rank=rank, name="update"),
    ]


def test_an_assumed_codec_ranks_after_measured_findings_and_never_makes_the_verdict(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from timeline.diagnosis import thresholds

    # an assumed codec as fast as free: 4x leaves 10 of the 40 µs transfer, 90 µs of 120 (25 %)
    monkeypatch.setitem(thresholds.CODEC_GBPS, "cpu", 1e9)
    trace = trace_of(_stall_then_one_gradient(0) + _stall_then_one_gradient(1))
    assumed = diagnosed(trace)
    causes = [f.cause for f in assumed.findings]
    assert causes == ["input_stall", "compression"]  # 10 µs of stall (8 %) first, measured
    compression = assumed.findings[1]
    assert compression.basis == "assumption"
    assert compression.predicted_step_ns == pytest.approx(90 * US, abs=2)
    first_gain = assumed.findings[0].predicted_gain_ratio
    assert compression.predicted_gain_ratio is not None
    assert first_gain is not None
    assert compression.predicted_gain_ratio > first_gain  # yet second
    assert not assumed.communication_bound
    assert "assumed" in assumed.summary
    # given by the user, the codec's gain is measured like any other: compression comes first
    given = diagnosed(trace, codec_gbps=1e9)
    assert [f.cause for f in given.findings] == ["compression", "input_stall"]
    assert given.findings[0].basis == "replay"
    assert given.communication_bound


# --- launch_bound (GPU) --------------------------------------------------------------------------------


def _launch_bound_gpu() -> Trace:
    """Five 10 µs kernels [5, 15), [20, 30) … [65, 75), each launched 1 µs before it starts (2 µs calls)."""
    rows = [step(1, 0, 75 * US)]
    for k in range(5):
        start = 5 + 15 * k
        launch = cpu(
            "runtime", (start - 3) * US, (start - 1) * US, name="cudaLaunchKernel", cat="cuda_runtime"
        )
        rows.append({**launch, "correlation": k + 1})
        rows.append(gpu("compute", start * US, (start + 10) * US, correlation=k + 1, name=f"k{k}"))
    return trace_of(rows, world=1)


def test_a_device_waiting_for_launches_is_launch_bound() -> None:
    diagnosis = diagnosed(_launch_bound_gpu())
    finding = only(diagnosis, "launch_bound")
    # four 5 µs gaps, each ended by a kernel whose launch ended after the gap began
    assert finding.evidence["launch_gap_ns"] == 20 * US
    assert finding.predicted_step_ns == 55 * US
    assert finding.predicted_gain_ratio == pytest.approx(20 / 75)


# --- exposed_dimension (events with pg_desc) ------------------------------------------------------------


def test_one_dimension_holding_the_exposed_communication_is_exposed_dimension() -> None:
    rows = []
    for rank in (0, 1):
        rows += [
            step(1, 0, 100 * US, rank=rank),
            cpu("cpu_op", 0, 60 * US, rank=rank, name="compute"),
            # tensor parallel: under compute; data parallel: 30 µs after it (exposed)
            {**gloo_all_reduce(10 * US, 20 * US, rank=rank, nbytes=1000), "pg_name": "0"},
            {**gloo_all_reduce(60 * US, 90 * US, rank=rank, nbytes=1000, tid=3), "pg_name": "1"},
            cpu("cpu_op", 90 * US, 100 * US, rank=rank, name="update"),
        ]  # fmt: skip
    trace = trace_of(rows)
    described = trace.events.with_columns(
        pg_desc=pl.when(pl.col("pg_name") == "0").then(pl.lit("mesh_tp")).when(pl.col("pg_name") == "1")
        .then(pl.lit("mesh_dp"))
    )  # fmt: skip
    trace = Trace(events=described, files=trace.files)
    finding = only(diagnosed(trace), "exposed_dimension")
    assert finding.evidence["dimension"] == "dp"
    assert finding.evidence["dimensions"] == ["dp", "tp"]
    assert finding.evidence["exposed_ns_by_dimension"] == [30 * US, 0]
    assert finding.basis == "bound"
    assert finding.predicted_step_ns == 70 * US


def test_without_pg_desc_exposed_dimension_is_not_examined() -> None:
    diagnosis = diagnosed(_transfer_bound())
    assert "exposed_dimension" not in diagnosis.examined
