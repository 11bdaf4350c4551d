"""Glob patterns expanded as Python's ``glob`` does, but bounded and never looping through links.

Takes a pattern a user gives (``runs/*/rank*.json``, ``'d/**/*.json.gz'``) and gives the paths it
matches (:func:`glob_paths`). ``glob.glob(recursive=True)`` follows every link to a directory, so a
folder holding a link to itself (or to a parent) is walked forever: two links to ``.`` gave a walk
that never ended and grew by 3 MB/s. Here ``**`` enters each directory once, by identity (device and
inode, links followed), and a walk stops with an error after :data:`MAX_GLOB_ENTRIES` directory
entries.

The rest is ``glob``'s behaviour: ``*``, ``?`` and ``[...]`` match within one name
(case-sensitively), names starting with ``.`` match only a pattern part starting with ``.``, ``**``
matches zero or more directories, a relative pattern gives relative paths.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterator
from pathlib import Path

from timeline.errors import UsageError, shown

__all__ = ["MAX_GLOB_ENTRIES", "glob_paths", "has_magic"]

MAX_GLOB_ENTRIES = 1_000_000
"""The most directory entries one pattern may examine (a run of 100,000 ranks in 10 folders holds
about 100,000)."""

_MAGIC = re.compile(r"[*?[]")


def has_magic(part: str) -> bool:
    """Whether a pattern (or one of its parts) has a wildcard: ``*``, ``?`` or ``[``."""
    return _MAGIC.search(part) is not None


class _Budget:
    """Counts the directory entries a pattern examines; raises past :data:`MAX_GLOB_ENTRIES`."""

    def __init__(self, pattern: str, limit: int) -> None:
        self.pattern = pattern
        self.limit = limit
        self.seen = 0

    def spend(self, count: int) -> None:
        self.seen += count
        if self.seen > self.limit:
            msg = (
                f"{shown(self.pattern)}: the pattern examined more than {self.limit:,} directory entries; "
                "narrow it (name the folders the traces are in)"
            )
            raise UsageError(msg)


def glob_paths(pattern: str, *, limit: int = MAX_GLOB_ENTRIES) -> list[str]:
    """Return the paths (files and directories) a glob pattern matches, sorted.

    Parameters
    ----------
    pattern
        The pattern, ``**`` for any number of directories.
    limit
        The most directory entries examined.

    Raises
    ------
    UsageError
        The pattern examined more than ``limit`` entries.
    """
    budget = _Budget(pattern, limit)
    root = "/" if pattern.startswith("/") else ""
    parts = [part for part in pattern.split("/") if part]
    if not parts:
        return [root] if root else []
    current = [root]
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if part == "**":
            found = [walked for base in current for walked in _walk(base, budget, files=last)]
        elif has_magic(part):
            found = [match for base in current for match in _matches(base, part, budget, dirs=not last)]
        else:
            found = [joined for base in current if _exists(joined := _join(base, part))]
        current = list(dict.fromkeys(found))
    return sorted(p for p in current if p)


def _join(base: str, name: str) -> str:
    if not base:
        return name
    return f"{base}{name}" if base.endswith("/") else f"{base}/{name}"


def _exists(path: str) -> bool:
    return os.path.lexists(path)


def _entries(directory: str, budget: _Budget) -> list[os.DirEntry[str]]:
    """Return a directory's entries (none when it cannot be read), counted against the budget."""
    try:
        with os.scandir(directory or os.curdir) as scan:
            entries = list(scan)
    except OSError:
        return []
    budget.spend(len(entries))
    return sorted(entries, key=lambda entry: entry.name)  # the same walk, whatever the directory's order


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False


def _matches(base: str, part: str, budget: _Budget, *, dirs: bool) -> Iterator[str]:
    """Yield the names in ``base`` that ``part`` matches (only directories when ``dirs``)."""
    hidden = part.startswith(".")
    for entry in _entries(base, budget):
        if entry.name.startswith(".") and not hidden:
            continue
        if fnmatch.fnmatchcase(entry.name, part) and (not dirs or _is_dir(entry)):
            yield _join(base, entry.name)


def _identity(path: str) -> tuple[int, int] | None:
    try:
        info = Path(path or os.curdir).stat()
    except OSError:
        return None
    return info.st_dev, info.st_ino


def _walk(base: str, budget: _Budget, *, files: bool) -> Iterator[str]:
    """Yield ``base`` and every directory below it, each once (links followed, never into one seen).

    With ``files``: also every file below it (``**`` ending a pattern).
    """
    start = _identity(base)
    if start is None:
        return
    seen = {start}
    stack = [base]
    while stack:
        directory = stack.pop()
        yield directory
        for entry in _entries(directory, budget):
            if entry.name.startswith("."):
                continue
            path = _join(directory, entry.name)
            if not _is_dir(entry):
                if files:
                    yield path
                continue
            identity = _identity(path)
            if identity is None or identity in seen:
                continue  # a link into a folder already walked
            seen.add(identity)
            stack.append(path)
