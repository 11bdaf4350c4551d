"""Where a report is written: the output path checked before anything is drawn, and the file written whole.

Takes the path the user gave (``-o``) and the page's HTML text; gives the written file. A page is
written to a temporary file beside the target, then renamed over it, so that a reader never sees
half a page. No bokeh here: ``timeline report`` checks its ``-o`` before it reads the traces.
"""

from __future__ import annotations

from pathlib import Path

from timeline.errors import UsageError

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
    """Write a standalone HTML page to ``path`` (through a temporary file beside it, then renamed).

    Raises
    ------
    UsageError
        If the folder of ``path`` does not exist or cannot be written.
    """
    target = writable(path)
    partial = target.with_name(f".{target.name}.partial")
    try:
        partial.write_text(text, encoding="utf-8")
        partial.replace(target)
    except OSError as exc:
        msg = f"{target}: cannot write the report ({exc.strerror or exc}); pick another -o"
        raise UsageError(msg) from exc
    finally:
        partial.unlink(missing_ok=True)
    return target
