"""``timeline cache``: what the cache of trace frames holds (folder, entries, sizes, total), or clear it.

The cache itself is :mod:`timeline.importers.cache`; every command that reads traces uses it unless
given ``--no-cache`` (docs/cache.md).
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated

import typer

from cli.common import fail, user_errors
from cli.options import CacheDirOption

__all__ = ["cache_command"]

ActionArgument = Annotated[
    str,
    typer.Argument(
        help="'show' (the default): the cache folder, each entry (its size, when it was last used, the trace "
        "file it holds the frame of) and the total; 'clear': remove every entry.",
        metavar="[show|clear]",
        show_default=False,
    ),
]


def cache_command(action: ActionArgument = "show", cache_dir: CacheDirOption = None) -> None:
    """Show the cache of the traces' frames (folder, entries, sizes, total), or clear it.

    A trace file's events are kept there as Parquet after its first read; later commands on the same,
    unchanged file read them instead of decoding the JSON again. It shows a folder, not a result of
    a run: no --ranks, --iterations, --json or --markdown. See docs/cache.md.

    Exit codes: 0 done, 2 usage (an unknown action, a folder that cannot be cleared).
    """
    if action not in ("show", "clear"):
        fail(f"{action!r}: not an action of timeline cache; use show or clear")
    with user_errors():
        from timeline.importers.cache import cache_folder, clear_cache, limit_bytes, list_entries

        folder = cache_folder(cache_dir)
        if action == "clear":
            count, size = clear_cache(folder)
            typer.echo(f"removed {_entries(count)} ({_size(size)}) from {folder}")
            return
        entries = list_entries(folder)
        limit = limit_bytes()
    total = sum(e.size_bytes for e in entries)
    typer.echo(f"cache folder: {folder}")
    typer.echo(
        f"{len(entries)} entries, {_size(total)} of at most {_size(limit)} (least recently used go first)"
    )
    if entries:
        typer.echo("")
        typer.echo(f"{'size':>10}  {'last used (UTC)':<19}  trace")
    for entry in reversed(entries):  # most recently used first
        used = dt.datetime.fromtimestamp(entry.used, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
        source = entry.source or f"(unreadable entry {entry.path.name})"
        typer.echo(f"{_size(entry.size_bytes):>10}  {used:<19}  {source}")


def _entries(n: int) -> str:
    return f"{n} entry" if n == 1 else f"{n} entries"


def _size(n: int) -> str:
    """Return a byte count as people read it: ``512 B``, ``4.1 MiB``, ``3.2 GiB``."""
    value, unit = float(n), "B"
    for larger in ("KiB", "MiB", "GiB", "TiB"):
        if value < 1024:
            break
        value, unit = value / 1024, larger
    return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
