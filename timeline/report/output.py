"""Where a report is written: the output path checked before anything is drawn, and the file written whole.

Takes the path the user gave (``-o``) and the page's HTML text; gives the written file, written
whole by :func:`timeline.outputs.write_output` (the one writer of every file timeline writes: a
temporary file beside the target renamed over it, so that a reader never sees half a page). No
bokeh here: ``timeline report`` checks its ``-o`` before it reads the traces.
"""

from __future__ import annotations

from pathlib import Path

from timeline.errors import UsageError
from timeline.outputs import write_output

__all__ = ["writable", "write_html"]


def writable(path: str | Path) -> Path:
    """Return ``path`` as a Path; raise :class:`UsageError` if its folder does not exist."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path()
    if not folder.is_dir():
        msg = f"{target}: folder {folder} does not exist; create it or pick another -o"
        raise UsageError(msg)
    return target


def write_html(text: str, path: str | Path) -> Path:
    """Write a standalone HTML page to ``path`` whole (:func:`timeline.outputs.write_output`).

    Raises
    ------
    UsageError
        If the folder of ``path`` does not exist or cannot be written.
    """
    return write_output(writable(path), text)
