"""Every command, whole process, this checkout against a base revision, side by side in one run.

Usage::

    python benchmarks/bench_commands.py [--base 8d850dd] [--runs 5] [--cases sample single r8]
        [--commands analyze collectives whatif check diff report] [--wait-quiet CORES]
        [--out docs/performance.md] [--json benchmarks/out/bench_commands.json]

What a user waits for after a change: each measurement is one fresh process of the command line
(``cli.main.run``, as the ``timeline`` console script starts it) on one input, its output discarded,
timed from ``fork`` to ``wait4`` (:func:`benchmarks.bench_startup.measure`). The base revision is
checked out with ``git worktree add --detach`` into a temporary folder (or ``--base-tree PATH``, an
existing checkout of it, reused) and run with ``PYTHONSAFEPATH=1`` and ``PYTHONPATH`` set to its tree,
so that it imports its own ``timeline`` and ``cli`` beside this checkout's installed environment
(the same interpreter and libraries). The two alternate ABBA (the order flips every round) after one
untimed run of each. Cases:

- ``help``: ``timeline --help`` (target: at most 0.15 s);
- ``sample``: the commands on ``sample_traces/ddp_gloo``;
- ``single``: the commands on the directory of the 54 MB ``hta_df_index_resolver`` trace;
- ``r8``: the commands on 8 ranks of that trace (``benchmarks/generate.py``'s rank-rewritten copies, made
  into ``--workdir``/``r8`` as ``bench_scale.py`` makes them).

Commands: ``analyze``, ``collectives``, ``whatif``, ``check``
(``tests/cli/golden/budget-pass.toml``: budgets that hold, exit 0), ``diff`` (the input against
itself) and ``report`` (``-o`` into a temporary folder). Reported per case and command: both medians
with their min-max, the ratio this / base, and whether it stays within the target (at most 1.10).
The Markdown goes to stdout; ``--out`` rewrites the section of that file between ``<!--
bench_commands:start -->`` and ``<!-- bench_commands:end -->``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.bench_scale import machine_facts, write_section  # noqa: E402
from benchmarks.bench_startup import QUIET, Run, measure  # noqa: E402
from benchmarks.generate import DEFAULT_SOURCE, make_rank_set  # noqa: E402
from benchmarks.quiet import versions  # noqa: E402

MARK_START = "<!-- bench_commands:start -->"
MARK_END = "<!-- bench_commands:end -->"
HEADING = "## Every command, this checkout against its base (whole processes, side by side)"
ALL_CASES = ("help", "sample", "single", "r8")
ALL_COMMANDS = ("analyze", "collectives", "whatif", "check", "diff", "report")
BUDGET = REPO / "tests" / "cli" / "golden" / "budget-pass.toml"  # budgets that hold: exit 0
SAMPLE = REPO / "sample_traces" / "ddp_gloo"
TARGET_RATIO = 1.10
TARGET_HELP_S = 0.15
LAUNCH = "from cli.main import run; run()"


@dataclass
class Pair:
    """The runs of one command line, on the base tree and on this checkout."""

    case: str
    command: str
    args: list[str]
    base: list[Run] = field(default_factory=list)
    new: list[Run] = field(default_factory=list)

    @staticmethod
    def median(runs: Sequence[Run]) -> float | None:
        walls = [r.wall_s for r in runs if r.error is None]
        return statistics.median(walls) if walls else None

    def ratio(self) -> float | None:
        base, new = self.median(self.base), self.median(self.new)
        return None if base is None or new is None or base <= 0 else new / base


def _env(tree: Path) -> dict[str, str]:
    """The environment that makes ``python -c`` import ``timeline`` and ``cli`` from ``tree``."""
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "COLUMNS")}
    env.update(PYTHONSAFEPATH="1", PYTHONPATH=str(tree), COLUMNS="120")
    return env


@contextlib.contextmanager
def base_tree(revision: str, given: Path | None) -> Iterator[Path]:
    """Yield a checkout of ``revision``: ``given`` as it is, or a temporary detached worktree."""
    if given is not None:
        yield given
        return
    folder = Path(tempfile.mkdtemp(prefix="timeline-base-"))
    tree = folder / "tree"
    subprocess.run(["git", "worktree", "add", "--detach", str(tree), revision], cwd=REPO, check=True)
    try:
        yield tree
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPO, check=False)
        shutil.rmtree(folder, ignore_errors=True)


def _command_args(command: str, path: Path, out: Path) -> list[str]:
    """The arguments of ``command`` on ``path`` (``out``: a folder for the files it writes)."""
    if command == "check":
        return ["check", str(path), "--budget", str(BUDGET)]
    if command == "diff":
        return ["diff", str(path), str(path)]
    if command == "report":
        return ["report", str(path), "-o", str(out / "report.html")]
    return [command, str(path)]


def _inputs(cases: Sequence[str], workdir: Path) -> dict[str, Path]:
    inputs = {"sample": SAMPLE, "single": DEFAULT_SOURCE.parent}
    if "r8" in cases:
        inputs["r8"] = workdir / "r8"
        if not inputs["r8"].exists():
            make_rank_set(DEFAULT_SOURCE, inputs["r8"], ranks=8)
    return inputs


def _once(args: list[str], tree: Path, scratch: Path, timeout: float) -> Run:
    """One measured process of ``args`` on ``tree`` (the files it writes go to a fresh ``scratch``)."""
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    concrete = [a.replace("{scratch}", str(scratch)) for a in args]
    return measure([sys.executable, "-c", LAUNCH, *concrete], _env(tree), timeout=timeout)


def run_pairs(pairs: Sequence[Pair], base: Path, runs: int, timeout: float) -> None:
    """Measure every pair: one untimed run of each side, then ``runs`` rounds alternating ABBA."""
    with tempfile.TemporaryDirectory() as folder:
        scratch = Path(folder) / "out"
        for pair in pairs:
            sides = [("base", base), ("new", REPO)]
            for _, tree in sides:
                _once(pair.args, tree, scratch, timeout)  # warm-up: page cache, bytecode
            for round_ in range(runs):
                for label, tree in sides if round_ % 2 == 0 else sides[::-1]:
                    getattr(pair, label).append(_once(pair.args, tree, scratch, timeout))
            print(f"{pair.case} {pair.command}: {_cell(pair.base)} -> {_cell(pair.new)}", file=sys.stderr)


def _cell(runs: Sequence[Run]) -> str:
    walls = [r.wall_s for r in runs if r.error is None]
    if not walls:
        return next((r.error for r in runs if r.error), None) or "not run"
    return f"{statistics.median(walls):.3f} ({min(walls):.3f}–{max(walls):.3f})"


def markdown(pairs: Sequence[Pair], *, base: str, runs: int, command: str) -> str:
    """The section of docs/performance.md: one row per case and command."""
    cpu, memory_kib = machine_facts()
    lines = [
        HEADING,
        "",
        f"Measured {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC on {cpu} ({memory_kib // 1024**2} GiB); "
        f"{versions('polars')}.",
        f"Command: `{command}`. Base: `{base}`. {runs} runs of each, alternating; seconds, median (min–max).",
        "",
        "| case | command | base | this checkout | this / base | target |",
        "|---|---|---|---|---|---|",
    ]
    for pair in pairs:
        ratio = pair.ratio()
        new = Pair.median(pair.new)
        if pair.command == "--help":
            held = new is not None and new <= TARGET_HELP_S
            target = f"≤ {TARGET_HELP_S} s: {'met' if held else 'not met'}"
        else:
            held = ratio is not None and ratio <= TARGET_RATIO
            target = f"≤ {TARGET_RATIO:.2f}×: {'met' if held else 'not met'}"
        shown = "-" if ratio is None else f"{ratio:.2f}×"
        cells = (pair.case, f"`{pair.command}`", _cell(pair.base), _cell(pair.new), shown, target)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Measure, print the Markdown, and write it into ``--out`` and ``--json`` when given."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="8d850dd", help="the revision compared with (default 8d850dd)")
    parser.add_argument("--base-tree", type=Path, help="an existing checkout of --base (kept)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--cases", nargs="+", choices=ALL_CASES, default=list(ALL_CASES))
    parser.add_argument("--commands", nargs="+", choices=ALL_COMMANDS, default=list(ALL_COMMANDS))
    parser.add_argument("--workdir", type=Path, default=REPO / "benchmarks" / "out" / "scale")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--wait-quiet", type=float, default=0.0, help="wait for other work under CORES")
    parser.add_argument("--out", type=Path, help="rewrite this Markdown file's section")
    parser.add_argument("--json", type=Path, help="write every run here")
    args = parser.parse_args(argv)
    QUIET["cores"] = args.wait_quiet
    args.workdir.mkdir(parents=True, exist_ok=True)
    inputs = _inputs(args.cases, args.workdir)
    pairs = [Pair("help", "--help", ["--help"])] if "help" in args.cases else []
    pairs += [
        Pair(case, command, _command_args(command, inputs[case], Path("{scratch}")))
        for case in args.cases
        if case != "help"
        for command in args.commands
    ]
    with base_tree(args.base, args.base_tree) as tree:
        run_pairs(pairs, tree, args.runs, args.timeout)
    text = markdown(pairs, base=args.base, runs=args.runs, command=" ".join(["python", *sys.argv]))
    print(text)
    if args.out is not None:
        # the markers hold the table, under the heading (written once, when the section is new)
        section = f"{MARK_START}\n{text.removeprefix(HEADING + chr(10) * 2)}{MARK_END}"
        write_section(args.out, section, start=MARK_START, end=MARK_END, heading=HEADING)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        rows = [
            {
                "case": p.case,
                "command": p.command,
                "base": [r.wall_s for r in p.base],
                "new": [r.wall_s for r in p.new],
            }
            for p in pairs
        ]
        args.json.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
