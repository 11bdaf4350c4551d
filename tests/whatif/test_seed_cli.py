"""``timeline seed PROFILE.bk.log``: the seed paper's backward profiles through their own command.

The paper's table (RESEARCH.md) is read back from the command's ``--json``; every other number is
checked against a computation written out here, on profiles and cost tables the tests build.
``timeline whatif`` refuses a backward profile and names this command.
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
from typer.testing import CliRunner, Result

import cli.main
from tests.builders import REPO, TRACES
from timeline import __version__
from timeline.results.whatif import SeedReport, WhatIfReport

SEED = TRACES / "seed"
PROFILES = SEED / "bk_time_logs"

# The paper's one-GPU iteration times (its sim_with_compression_*.py), in ms.
SINGLE_MS = {"resnet50": 128.08580219559176, "resnet101": 192.00599479476405, "vgg16": 194.52352295080985}
# RESEARCH.md: scaling factors at 64 GPUs, no compression, at 100/40/25/10 Gbit/s.
PAPER = {
    "resnet50": (0.995, 0.994, 0.910, 0.540),
    "resnet101": (0.997, 0.997, 0.890, 0.500),
    "vgg16": (0.993, 0.622, 0.439, 0.201),
}


def seed(*args: str | Path, columns: int | None = None) -> Result:
    """``timeline seed ARGS`` (``columns``: the terminal's width, else rich's default without one)."""
    env = None if columns is None else {"COLUMNS": str(columns)}
    return CliRunner().invoke(cli.main.app, ["seed", *map(str, args)], prog_name="timeline", env=env)


def report_of(result: Result) -> SeedReport:
    assert result.exit_code == 0, result.stderr
    return msgspec.json.decode(result.stdout, type=SeedReport)


@pytest.mark.parametrize("model", sorted(PAPER))
def test_the_papers_table_through_the_command(model: str) -> None:
    result = seed(
        PROFILES / f"{model}.bk.log",
        "--single-step-ms",
        repr(SINGLE_MS[model]),
        "--world-size",
        "64",
        "--bandwidth",
        "100,40,25,10Gbps",
        "--json",
    )
    report = report_of(result)
    assert result.stderr == ""  # the cost table beside bk_time_logs/ was found: no note
    assert report.vector_add_cost == str(PROFILES / ".." / "cuda_vec_add.log")
    rows = report.scenarios
    assert [(r.bandwidth_gbps, r.world_size, r.compression) for r in rows] == [
        (100.0, 64, 1.0),
        (40.0, 64, 1.0),
        (25.0, 64, 1.0),
        (10.0, 64, 1.0),
    ]
    for row, expected in zip(rows, PAPER[model], strict=True):
        assert row.scaling_factor == pytest.approx(expected, abs=0.02), row
        assert row.buckets == "fusion:64:5"  # Horovod's policy by default


def test_the_issues_command_and_the_keys_of_the_trace_road() -> None:
    result = seed(
        PROFILES / "resnet50.bk.log",
        "--single-step-ms",
        "128.1",
        "--world-size",
        "16,32,64",
        "--bandwidth",
        "1,10,25,40,100Gbps",
        "--compression",
        "1,2,5,10",
        "--json",
    )
    report = report_of(result)
    assert (report.version, report.timeline) == (3, __version__)
    assert list(json.loads(result.stdout))[:3] == ["kind", "version", "timeline"]
    rows = report.scenarios
    assert len(rows) == 5 * 3 * 4
    assert {(r.bandwidth_gbps, r.world_size, r.compression) for r in rows} == {
        (b, n, c) for b in (1.0, 10.0, 25.0, 40.0, 100.0) for n in (16, 32, 64) for c in (1.0, 2.0, 5.0, 10.0)
    }
    on_trace = CliRunner().invoke(
        cli.main.app, ["whatif", str(REPO / "sample_traces" / "ddp_gloo"), "--bandwidth", "10", "--json"]
    )
    trace = msgspec.json.decode(on_trace.stdout, type=WhatIfReport)
    assert set(trace.scenarios[0].__struct_fields__) <= set(rows[0].__struct_fields__)
    # More compression or bandwidth never lowers the scaling factor.
    by = {(r.bandwidth_gbps, r.world_size, r.compression): r.scaling_factor for r in rows}
    for (b, n, c), sf in by.items():
        if c < 10:
            assert by[(b, n, {1.0: 2.0, 2.0: 5.0, 5.0: 10.0}[c])] >= sf
        if b < 100:
            assert by[({1.0: 10.0, 10.0: 25.0, 25.0: 40.0, 40.0: 100.0}[b], n, c)] >= sf


def _write_profile(folder: Path, batches: list[list[tuple[float, int]]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "toy.bk.log"
    rows = [f"{wait_us!r},{size}" for batch in batches for wait_us, size in batch]
    path.write_text("explanation\n" + f"{len(batches)}\n{len(batches[0])}\n" + "\n".join(rows) + "\n")
    return path


def test_numbers_against_a_hand_computation(tmp_path: Path) -> None:
    # Two batches. Gradients (µs since the previous one, bytes); fusion 64 MiB / 5 ms from backward's start:
    # batch 1: 1000 µs, 6000 µs (→ bucket at 7 ms, 4e6+2e6 B), 2000 µs (→ last bucket at 9 ms, 1e6 B)
    # batch 2: 6000 µs (→ bucket at 6 ms, 3e6 B), 1000 µs, 1000 µs (→ last at 8 ms, 3e6 B)
    profile = _write_profile(
        tmp_path / "bk_time_logs",
        [
            [(1000.0, 4_000_000), (6000.0, 2_000_000), (2000.0, 1_000_000)],
            [(6000.0, 3_000_000), (1000.0, 1_000_000), (1000.0, 2_000_000)],
        ],
    )
    (tmp_path / "cuda_vec_add.log").write_text("0,0.0001\n1000000,0.0002\n")  # 0.1 ms + 0.1 ms per MB
    result = seed(profile, "--single-step-ms", "20", "--world-size", "4", "--bandwidth", "8", "--json")
    report = report_of(result)
    (row,) = report.scenarios

    def allreduce_s(nbytes: float) -> float:  # 2 (N-1)/N 8 S / B + (N-1) add(S/N), N = 4, B = 8e9
        per_rank = nbytes / 4
        add = 0.0002 if per_rank >= 1e6 else 0.0001 + 0.0001 * per_rank / 1e6
        return 2 * 0.75 * 8 * nbytes / 8e9 + 3 * add

    end1 = max(0.007 + allreduce_s(6e6), 0.009) + allreduce_s(1e6)
    end2 = max(0.006 + allreduce_s(3e6), 0.008) + allreduce_s(3e6)
    overhead = (max(0.0, end1 - 0.009) + max(0.0, end2 - 0.008)) / 2
    comm = (allreduce_s(6e6) + allreduce_s(1e6) + allreduce_s(3e6) * 2) / 2
    assert row.fused_buckets == 2
    assert row.backward_ns == 8_500_000
    assert row.single_ns == row.measured_ns == row.perfect_overlap_ns == 20_000_000
    assert row.exposed_comm_ns == pytest.approx(overhead * 1e9, abs=1)
    assert row.iteration_ns == pytest.approx((0.02 + overhead) * 1e9, abs=1)
    assert row.scaling_factor == pytest.approx(0.02 / (0.02 + overhead), rel=1e-9)
    assert row.no_overlap_ns == pytest.approx((0.02 + comm) * 1e9, abs=1)
    assert row.no_overlap_scaling_factor == pytest.approx(0.02 / (0.02 + comm), rel=1e-9)
    assert row.perfect_overlap_scaling_factor == 1.0
    assert msgspec.to_builtins(report.backward_profile) == {
        "path": str(profile),
        "model": "toy",
        "batches": 2,
        "gradients": 3,
        "gradient_bytes": 7_000_000,
        "backward_ns": 8_500_000,
    }
    assert report.single_ns == 20_000_000
    assert report.notes == []

    # The same numbers in the table.
    # wide enough for every column of the table (a narrower one leaves some out, and says so)
    text = seed(profile, "--single-step-ms", "20", "--world-size", "4", "--bandwidth", "8", columns=250)
    assert text.exit_code == 0, text.stderr
    # Prose wraps at spaces, and folds a word longer than a line (a long temporary path): compare
    # without the whitespace.
    letters = "".join(text.stdout.split())

    def squeezed(expected: str) -> str:
        return "".join(expected.split())

    profile_line = f"backward profile toy ({profile}): 2 batch(es), 3 gradients, 6.7 MiB, backward 8.50 ms"
    assert squeezed(profile_line) in letters
    table = profile.parent / ".." / "cuda_vec_add.log"
    assert squeezed(f"T_single 20.00 ms (--single-step-ms); vector-add cost {table}") in letters
    line = next(line for line in text.stdout.splitlines() if "fusion:64:5" in line)
    cells = [cell.strip() for cell in line.strip("│ ").split("│")]
    assert cells == [
        "8 Gbit/s",
        "4",
        "1×",
        "fusion:64:5",
        "2",
        f"{round((0.02 + overhead) * 1e9) / 1e6:.2f} ms",
        f"{round(overhead * 1e9) / 1e6:.2f} ms",
        f"{0.02 / (0.02 + overhead):.3f}",
        f"{round((0.02 + comm) * 1e9) / 1e6:.2f} ms",
        f"{0.02 / (0.02 + comm):.3f}",
    ]


def test_without_a_cost_table_reductions_are_free_and_said_so(tmp_path: Path) -> None:
    profile = _write_profile(tmp_path / "logs", [[(1000.0, 8_000_000)]])
    args = ("--single-step-ms", "10", "--world-size", "2", "--bandwidth", "8", "--json")
    report = report_of(result := seed(profile, *args))
    note = (
        "note: no vector-add cost table (cuda_vec_add.log beside the profiles' folder, or --vector-add-cost "
        "FILE): the reductions of each all-reduce are counted as free"
    )
    assert result.stderr.splitlines() == [note]
    assert report.notes == [note.removeprefix("note: ")]
    assert report.vector_add_cost is None
    (row,) = report.scenarios
    assert row.exposed_comm_ns == 8_000_000  # 2 · 1/2 · 64e6 bit / 8e9 bit/s, nothing else
    # Given with --vector-add-cost: 1 ms per addition, one addition (N - 1 = 1).
    table = tmp_path / "adds.csv"
    table.write_text("1,0.001\n")
    report = report_of(result := seed(profile, *args, "--vector-add-cost", table))
    assert result.stderr == ""
    assert report.vector_add_cost == str(table)
    assert report.scenarios[0].exposed_comm_ns == 9_000_000


def test_other_bucket_policies(tmp_path: Path) -> None:
    profile = _write_profile(tmp_path / "logs", [[(1000.0, 2 * 2**20), (1000.0, 2 * 2**20)]])
    args = ("--single-step-ms", "10", "--world-size", "2", "--bandwidth", "8", "--json")
    report = report_of(seed(profile, *args, "--buckets", "fusion:1:5,fusion:64:1,ddp:3"))
    counts = {row.buckets: row.fused_buckets for row in report.scenarios}
    assert counts == {"fusion:1:5": 2, "fusion:64:1": 2, "ddp:3": 2}
    one = report_of(seed(profile, *args, "--buckets", "fusion:64:5")).scenarios[0]
    assert one.fused_buckets == 1
    assert one.exposed_comm_ns == round(2 * 0.5 * 4 * 2**20 * 8 / 8e9 * 1e9)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--world-size", "64", "--bandwidth", "10"),
            "error: --single-step-ms missing: a backward profile needs",
        ),
        (("--single-step-ms", "0", "--world-size", "64", "--bandwidth", "10"), "error: --single-step-ms 0:"),
        (
            ("--single-step-ms", "nan", "--world-size", "64", "--bandwidth", "10"),
            "error: --single-step-ms nan:",
        ),
        (("--single-step-ms", "10", "--world-size", "64"), "error: --bandwidth: a backward profile has no"),
        (("--single-step-ms", "10", "--bandwidth", "10"), "error: --world-size: a backward profile has no"),
        (
            ("--single-step-ms", "10", "-n", "4", "-b", "10", "--buckets", "measured"),
            "error: --buckets measured",
        ),
        # the options of traces, and those outside the paper's model, are not the command's
        (
            ("--single-step-ms", "10", "-n", "4", "-b", "10", "--rank", "0"),
            "error: no such option: --rank; see 'timeline seed --help'",
        ),
        (
            ("--single-step-ms", "10", "-n", "4", "-b", "10", "--latency", "5us"),
            "error: no such option: --latency; see 'timeline seed --help'",
        ),
        (
            ("--single-step-ms", "10", "-n", "4", "-b", "10", "--target-sf", "0.9"),
            "error: no such option: --target-sf; see 'timeline seed --help'",
        ),
        (
            ("--single-step-ms", "10", "-n", "4", "-b", "tp=10"),
            "error: --bandwidth tp=…: per-dimension settings apply to traces",
        ),
        (("--single-step-ms", "10", "-n", "0", "-b", "10"), "error: --world-size 0: must be at least 1"),
        (("--single-step-ms", "10", "-n", "4", "-b", "10", "-c", "0.5"), "error: "),
        (("--single-step-ms", "1e300", "-n", "4", "-b", "10"), "error: what-if: this scenario's predicted"),
    ],
)
def test_bad_settings_are_one_error_line(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    profile = _write_profile(tmp_path / "logs", [[(1000.0, 8_000_000)]])
    result = seed(profile, *args)
    assert result.exit_code == 2, result.stdout
    assert result.stderr.startswith(message), result.stderr
    assert len(result.stderr.splitlines()) == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("explanation\n1\n2\n1.0,10\n", "toy.bk.log: 1 batch(es) × 2 gradients = 2 rows announced"),
        ("explanation\nx\n1\n1.0,10\n", "toy.bk.log:2: expected the number of batches"),
        ("explanation\n1\n1\n1.0;10\n", "toy.bk.log:4: expected 'µs waited,bytes'"),
        ("explanation\n1\n1\n-1.0,10\n", "toy.bk.log:4: expected 'µs waited,bytes'"),
        ("", "toy.bk.log:2: expected the number of batches"),
    ],
)
def test_malformed_profile_is_one_error_line(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "logs").mkdir()
    profile = tmp_path / "logs" / "toy.bk.log"
    profile.write_text(text)
    result = seed(profile, "--single-step-ms", "10", "-n", "4", "-b", "10")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ")
    assert message in result.stderr, result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert profile.read_text() == text  # nothing the user gave is modified


def test_other_bad_inputs(tmp_path: Path) -> None:
    profile = _write_profile(tmp_path / "logs", [[(1000.0, 8_000_000)]])
    args = ("--single-step-ms", "10", "-n", "4", "-b", "10")
    bad_table = tmp_path / "cuda_vec_add.log"
    bad_table.write_text("40,1e-5\n20,1e-5\n")  # found beside logs/, sizes going down
    result = seed(profile, *args)
    assert result.exit_code == 2
    assert bad_table.samefile(profile.parent / ".." / "cuda_vec_add.log")
    found = profile.parent / ".." / "cuda_vec_add.log"
    assert result.stderr == f"error: {found}:2: sizes must increase from row to row (20 after 40)\n"
    result = seed(profile, *args, "--vector-add-cost", tmp_path / "missing.log")
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {tmp_path / 'missing.log'}: cannot read:")
    result = seed(tmp_path / "missing.bk.log", *args)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {tmp_path / 'missing.bk.log'}: cannot read:")
    result = seed(profile, profile, *args)
    assert result.exit_code == 2
    assert (
        result.stderr == f"error: got unexpected extra argument(s) ({profile}); see 'timeline seed --help'\n"
    )
    trace = REPO / "sample_traces" / "ddp_gloo"
    result = seed(trace, *args)
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: {trace}: not a seed backward profile (PROFILE.bk.log); for traces use timeline whatif\n"
    )
    result = CliRunner().invoke(cli.main.app, ["whatif", str(trace), "--single-step-ms", "10"])
    assert result.exit_code == 2
    assert result.stderr == ("error: no such option: --single-step-ms; see 'timeline whatif --help'\n")


@pytest.mark.parametrize("paths", [["PROFILE"], ["TRACE", "PROFILE"]])
def test_whatif_names_the_seed_command_for_a_backward_profile(tmp_path: Path, paths: list[str]) -> None:
    profile = _write_profile(tmp_path / "logs", [[(1000.0, 8_000_000)]])
    given = {"PROFILE": str(profile), "TRACE": str(REPO / "sample_traces" / "ddp_gloo")}
    result = CliRunner().invoke(cli.main.app, ["whatif", *(given[p] for p in paths), "-b", "10"])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == (
        f"error: {profile}: a seed backward profile, not a trace; use timeline seed {profile} "
        "--single-step-ms MS --bandwidth LIST --world-size LIST (see 'timeline seed --help')\n"
    )
