"""Rebuild the golden outputs of ``tests/cli/test_golden.py`` from a git revision.

Usage, from the project root (the traces are read as ``../shared/traces/...``)::

    python tests/cli/golden/regenerate.py fb33636            # rebuild tests/cli/golden/cases/
    python tests/cli/golden/regenerate.py fb33636 --out /tmp/g2 --keep-tree /tmp/golden-base

The revision is checked out with ``git worktree add --detach`` into a temporary folder (or
``--tree PATH``: an existing checkout of it, which is reused and kept), and every case runs that
tree's code in a subprocess with the project root as working directory, exactly as a user runs the
CLI: ``PYTHONSAFEPATH=1`` keeps the working directory (this checkout) off ``sys.path`` and
``PYTHONPATH`` puts the revision's tree first, ahead of the virtualenv's editable install of this
checkout (the script checks which ``cli`` and ``timeline`` are imported before it starts). The
environment is fixed: ``COLUMNS=120`` (the tables are ``max(width, 120)`` or 150 wide), no colour
variables, stdin and stderr not a terminal (no progress bar).

Report cases print :func:`tests.cli.test_golden.report_digest` of the revision's
``prepare_report_data``: the test module is loaded by its file path inside the subprocess, so the
digest is the one the test computes, run on the revision's code.

Each case is written to ``cases/<case id>.txt``: a header line, a JSON line (arguments, exit code,
the length in characters of each section) and the sections (stdout, stderr, files the command wrote)
verbatim. Files of cases that no longer exist are removed. Not run by the tests.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
GOLDEN = Path(__file__).resolve().parent
CASES = GOLDEN / "cases"
TEST_MODULE = ROOT / "tests" / "cli" / "test_golden.py"
BUDGET = "tests/cli/golden/budget.toml"
BUDGET_PASS = "tests/cli/golden/budget-pass.toml"  # budgets that hold: exit code 0
OUT = "{out}"  # placeholder of the folder the check cases write their markdown and JUnit files into
HEADER = "# timeline golden case (tests/cli/golden/regenerate.py); sections follow verbatim\n"

KINETO = "../shared/traces/kineto"
HOROVOD = "../shared/traces/horovod"
DEXHUNTER = f"{HOROVOD}/dexhunter_allreduce-experiments"

# Variables that change what rich or click print; removed from the environment of every case.
UNSET = (
    "FORCE_COLOR",
    "NO_COLOR",
    "TTY_COMPATIBLE",
    "TTY_INTERACTIVE",
    "CLICOLOR",
    "CLICOLOR_FORCE",
    "COLORTERM",
    "JUPYTER_COLUMNS",
    "JUPYTER_LINES",
    "RAY_ADDRESS",
)
ENV = {"COLUMNS": "120", "LINES": "50", "TERM": "dumb"}

RUN_CLI = "import sys\nfrom cli.main import main\nsys.argv[0] = 'timeline'\nmain()\n"
RUN_REPORT = (
    "import importlib.util, sys\n"
    "spec = importlib.util.spec_from_file_location('golden_test_module', sys.argv[1])\n"
    "module = sys.modules['golden_test_module'] = importlib.util.module_from_spec(spec)\n"
    "spec.loader.exec_module(module)\n"
    "sys.stdout.write(module.report_digest(sys.argv[2]))\n"
)


@dataclass(frozen=True)
class Case:
    """One golden case: ``kind`` is ``cli`` (args of ``timeline``) or ``report`` (args: the input)."""

    id: str
    kind: str
    args: tuple[str, ...]
    files: tuple[str, ...] = ()  # files the command writes under {out}, recorded as sections


def inputs() -> list[tuple[str, str]]:
    """Return ``(input id, path as the user passes it)`` of every golden input."""
    out: list[tuple[str, str]] = []
    for folder in sorted((ROOT / KINETO).iterdir()):
        if folder.name == "hta_trace_diff":  # two different runs: one input each
            out += [
                (
                    f"kineto.{folder.name}.{f.name.removesuffix('.json.gz')}",
                    f"{KINETO}/{folder.name}/{f.name}",
                )
                for f in sorted(folder.iterdir())
            ]
        else:
            out.append((f"kineto.{folder.name}", f"{KINETO}/{folder.name}"))
    for entry in sorted((ROOT / HOROVOD).iterdir()):
        if entry.is_file():
            out.append((f"horovod.{entry.name.removesuffix('.json')}", f"{HOROVOD}/{entry.name}"))
    out.append(("horovod.dexhunter", DEXHUNTER))
    for f in sorted((ROOT / DEXHUNTER).iterdir()):
        name = f.name.removesuffix(".json").removeprefix("horovod-results__")
        out.append((f"horovod.dexhunter.{name}", f"{DEXHUNTER}/{f.name}"))
    for entry in sorted((ROOT / "sample_traces").iterdir()):
        if entry.is_dir():
            out.append((f"sample.{entry.name}", f"sample_traces/{entry.name}"))
            if entry.name == "horovod":  # timelines of different Horovod versions: one input each
                out += [
                    (f"sample.horovod.{f.name.removesuffix('.json')}", f"sample_traces/horovod/{f.name}")
                    for f in sorted(entry.iterdir())
                ]
    return out


def cases() -> list[Case]:
    """Return every golden case: the commands below on every input."""
    out: list[Case] = []
    for input_id, path in inputs():
        commands: list[tuple[str, tuple[str, ...], tuple[str, ...]]] = [
            ("analyze", ("analyze", path), ()),
            ("analyze-json", ("analyze", path, "--json"), ()),
            ("collectives", ("collectives", path), ()),
            ("collectives-json", ("collectives", path, "--json"), ()),
            ("check", ("check", path, "--budget", BUDGET), ()),
            ("check-json", ("check", path, "--budget", BUDGET, "--json"), ()),
            ("check-pass", ("check", path, "--budget", BUDGET_PASS), ()),
            (
                "check-files",
                (
                    "check",
                    path,
                    "--budget",
                    BUDGET,
                    "--markdown",
                    f"{OUT}/summary.md",
                    "--junit",
                    f"{OUT}/junit.xml",
                ),
                ("summary.md", "junit.xml"),
            ),
            ("whatif", ("whatif", path), ()),
            ("whatif-json", ("whatif", path, "--json"), ()),
            ("whatif-bandwidth", ("whatif", path, "--bandwidth", "10,100Gbps"), ()),
            ("whatif-bandwidth-json", ("whatif", path, "--bandwidth", "10,100Gbps", "--json"), ()),
        ]
        out += [Case(f"{name}--{input_id}", "cli", args, files) for name, args, files in commands]
        out.append(Case(f"report-data--{input_id}", "report", (path,)))
    return out


def environment(tree: Path) -> dict[str, str]:
    """Return the environment of a case: the revision's tree first on the path, fixed width, no colour."""
    env = {k: v for k, v in os.environ.items() if k not in UNSET}
    env.update(ENV, PYTHONSAFEPATH="1", PYTHONPATH=str(tree))
    return env


def check_imports(tree: Path) -> None:
    """Stop unless the subprocesses import ``cli`` and ``timeline`` from ``tree``."""
    code = "import cli, timeline; print(cli.__file__); print(timeline.__file__)"
    found = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=environment(tree),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    if not all(Path(f).resolve().is_relative_to(tree.resolve()) for f in found):
        sys.exit(f"the subprocesses import {found}, not the code of {tree}")


def run_case(case: Case, tree: Path) -> dict[str, object]:
    """Run one case on the revision's code; return its record."""
    with tempfile.TemporaryDirectory(prefix="timeline-golden-") as out:
        if case.kind == "cli":
            argv = [sys.executable, "-c", RUN_CLI, *(a.replace(OUT, out) for a in case.args)]
        else:
            argv = [sys.executable, "-c", RUN_REPORT, str(TEST_MODULE), *case.args]
        done = subprocess.run(
            argv, cwd=ROOT, env=environment(tree), capture_output=True, stdin=subprocess.DEVNULL, check=False
        )
        sections = {"stdout": done.stdout.decode(), "stderr": done.stderr.decode()}
        for name in case.files:
            written = Path(out) / name
            sections[f"file {name}"] = written.read_text(encoding="utf-8") if written.exists() else ""
    if out in "".join(sections.values()):
        sys.exit(f"{case.id}: the output names the temporary folder {out}")
    if case.kind == "report" and done.returncode != 0:
        sys.exit(f"{case.id}: the report digest failed:\n{sections['stderr']}")
    return {
        "id": case.id,
        "kind": case.kind,
        "args": list(case.args),
        "exit_code": done.returncode,
        **sections,
    }


def write_case(record: dict[str, object], folder: Path) -> None:
    """Write one case file: the header, a JSON line, then each section verbatim."""
    names = [k for k in record if k in ("stdout", "stderr") or k.startswith("file ")]
    meta = {k: record[k] for k in ("id", "kind", "args", "exit_code")}
    meta["sections"] = [[name, len(str(record[name]))] for name in names]
    parts = [HEADER, json.dumps(meta), "\n"]
    for name in names:
        parts += [f"=== {name} ===\n", str(record[name]), "\n"]
    (folder / f"{record['id']}.txt").write_text("".join(parts), encoding="utf-8", newline="")


@dataclass
class Tree:
    """The checkout of the revision: made with ``git worktree add`` unless given."""

    path: Path
    made: bool


@contextmanager
def checkout(revision: str, given: Path | None, keep: Path | None) -> Iterator[Tree]:
    """Yield the revision's tree; remove the worktree afterwards unless it was given or kept."""
    if given is not None:
        yield Tree(given, made=False)
        return
    path = keep if keep is not None else Path(tempfile.mkdtemp(prefix="timeline-golden-tree-")) / "tree"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), revision], check=True)
    try:
        yield Tree(path, made=True)
    finally:
        if keep is None:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)], check=True)
            shutil.rmtree(path.parent, ignore_errors=True)


def main() -> None:
    """Rebuild the golden cases."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("revision", help="the git revision whose code makes the goldens (e.g. fb33636)")
    parser.add_argument("--tree", type=Path, help="an existing checkout of the revision (used as is)")
    parser.add_argument("--keep-tree", type=Path, help="make the worktree here and keep it")
    parser.add_argument("--out", type=Path, default=CASES, help="the folder of case files (default: cases/)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="cases run at once")
    parser.add_argument("--only", help="only the cases whose id contains this")
    args = parser.parse_args()
    todo = [c for c in cases() if args.only is None or args.only in c.id]
    with checkout(args.revision, args.tree, args.keep_tree) as tree:
        check_imports(tree.path)
        args.out.mkdir(parents=True, exist_ok=True)
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            for record in pool.map(lambda case: run_case(case, tree.path), todo):
                write_case(record, args.out)
                print(record["id"], record["exit_code"], flush=True)
    if args.only is None:
        wanted = {f"{c.id}.txt" for c in todo}
        for stale in args.out.glob("*.txt"):
            if stale.name not in wanted:
                stale.unlink()


if __name__ == "__main__":
    main()
