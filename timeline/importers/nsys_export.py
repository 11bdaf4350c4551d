"""Nsight Systems reports (``.nsys-rep``, ``.qdrep``) → their SQLite export, made in timeline's own folder.

A report is Nsight Systems' own format; only ``nsys export --type sqlite`` reads it. When ``nsys``
is on the PATH, :func:`exported` runs it into a temporary folder of timeline's (never beside the
user's file; removed once the export is read), adding ``--include-blobs=true`` when this ``nsys``
offers it (NCCL's payloads: ranks, communicators, sizes). Without ``nsys``, the error gives the
exact command to run.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from timeline.errors import TraceFormatError, UsageError

__all__ = ["REPORT_SUFFIXES", "export_command", "exported", "is_report"]

REPORT_SUFFIXES = (".nsys-rep", ".qdrep")
"""The names of Nsight Systems reports (``.qdrep`` before 2021.4)."""
_EXPORT_TIMEOUT_S = 3600


def is_report(path: Path) -> bool:
    """Whether ``path`` is named as an Nsight Systems report."""
    return path.name.lower().endswith(REPORT_SUFFIXES)


def export_command(report: Path, output: Path, *, nsys: str = "nsys", blobs: bool = False) -> list[str]:
    """Return the ``nsys export`` command that writes the SQLite export of ``report`` to ``output``."""
    extra = ["--include-blobs=true"] if blobs else []
    return [nsys, "export", "--type", "sqlite", *extra, "--output", str(output), str(report)]


def _offers_blobs(nsys: str) -> bool:
    """Whether this ``nsys export`` has ``--include-blobs`` (Nsight Systems 2025 and later)."""
    try:
        shown = subprocess.run(
            [nsys, "export", "--help"], capture_output=True, text=True, check=False, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--include-blobs" in shown.stdout + shown.stderr


@contextmanager
def exported(report: Path, *, source: str) -> Iterator[Path]:
    """Yield the SQLite export of ``report``, written by ``nsys export`` into a temporary folder.

    Raises
    ------
    UsageError
        ``nsys`` is not on the PATH: the message gives the command to run.
    TraceFormatError
        ``nsys export`` failed (its last line of output is in the message).
    """
    nsys = shutil.which("nsys")
    if nsys is None:
        suggested = report.with_name(report.name.rsplit(".", 1)[0] + ".sqlite")
        msg = (
            f"{source}: an Nsight Systems report, which only Nsight Systems reads, and nsys is not on the "
            f"PATH; export it with `{shlex.join(export_command(report, suggested))}` and pass {suggested}"
        )
        raise UsageError(msg)
    with tempfile.TemporaryDirectory(prefix="timeline-nsys-") as folder:
        output = Path(folder) / "export.sqlite"
        command = export_command(report, output, nsys=nsys, blobs=_offers_blobs(nsys))
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, check=False, timeout=_EXPORT_TIMEOUT_S
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise TraceFormatError(f"{source}: nsys export did not run ({exc})") from exc
        if done.returncode != 0 or not output.is_file():
            said = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
            msg = (
                f"{source}: nsys export failed (exit code {done.returncode}: {said}); run "
                f"`{shlex.join(export_command(report, Path('report.sqlite')))}` to see why"
            )
            raise TraceFormatError(msg)
        yield output
