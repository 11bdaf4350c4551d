"""Command-line tests: they run the installed ``timeline`` console script in a subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

__all__ = ["PARAM", "TRACES", "run_timeline"]

TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "traces"
PARAM = TRACES / "kineto" / "param_dlrm_8rank"


def _timeline_command() -> list[str]:
    """The console script installed beside this interpreter, else its entry point through ``-c``."""
    script = Path(sys.executable).with_name("timeline")
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-c", "from cli.main import main; main()"]


def run_timeline(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``timeline ARGS`` and return its exit code, stdout and stderr (never raises on failure)."""
    return subprocess.run(
        [*_timeline_command(), *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
        timeout=300,
    )
