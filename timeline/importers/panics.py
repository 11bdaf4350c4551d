"""Rust panic notices of polars, kept off the user's terminal while a damaged file is decoded.

polars turns a panic of its Rust code into a Python ``PanicException``, which the importers report
as one ``error:`` line (a damaged file); but Rust's panic hook has already written its notice
(``thread '...' panicked at crates/...``, the assertion, ``note: run with RUST_BACKTRACE=1``,
and a backtrace when ``RUST_BACKTRACE`` is set) straight to the process's stderr, above that line.

:func:`panic_notices_dropped` points file descriptor 2 at a temporary file while polars decodes,
then writes back what was captured, panic notices left out: everything else (a progress bar drawn
meanwhile, a warning) reaches stderr unchanged and in order. One thread at a time captures; another
decoding meanwhile writes straight to stderr.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress

__all__ = ["panic_notices_dropped", "without_panic_notices"]

_CAPTURING = threading.Lock()
_HEADER = re.compile(rb"^thread '[^'\n]*'(?: \(\d+\))? panicked at ")
"""The first line of a notice of Rust's default panic hook (Rust >= 1.80 adds the thread id)."""
_LAST = (b"note: run with `RUST_BACKTRACE", b"note: Some details are omitted")
"""The note that ends the first notice of a process (the later ones have none)."""
_FRAME = re.compile(rb"^(?:stack backtrace:|\s+\d+: |\s+at )")
"""The lines of a backtrace, after a notice's message."""


def without_panic_notices(text: bytes) -> bytes:
    r"""Return stderr output with the notices of Rust's panic hook (and their backtraces) left out.

    Examples
    --------
    >>> notice = b"thread 'x' panicked at a.rs:1:2:\nboom\nnote: run with `RUST_BACKTRACE=1`\n"
    >>> without_panic_notices(b"a\n" + notice + b"b\n")
    b'a\nb\n'
    """
    kept: list[bytes] = []
    expected = ""  # in a notice: "message", then "more" (backtrace frames, its closing note)
    for line in _lines(text):
        if _HEADER.match(line):
            if kept and kept[-1].strip() == b"":
                kept.pop()  # the blank line before the notice
            expected = "message"
        elif expected == "message":
            expected = "more"
        elif expected == "more" and (_FRAME.match(line) or line.startswith(_LAST)):
            expected = "" if line.startswith(_LAST) else "more"
        else:
            expected = ""
            kept.append(line)
    return b"".join(kept)


def _lines(text: bytes) -> list[bytes]:
    """Split on newlines only (a progress bar's carriage return stays inside its line), keeping them."""
    parts = text.split(b"\n")
    lines = [part + b"\n" for part in parts[:-1]]
    return [*lines, parts[-1]] if parts[-1] else lines


@contextmanager
def panic_notices_dropped() -> Iterator[None]:
    """Capture file descriptor 2 while the block runs; write it back without Rust's panic notices.

    What was captured is written back however the block ends (an exception too). Nothing is
    captured when another thread is capturing, or when descriptor 2 cannot be duplicated.
    """
    if not _CAPTURING.acquire(blocking=False):
        yield
        return
    captured: list[bytes] = []
    try:
        with _captured_fd2(captured):
            yield
    finally:
        try:
            if captured:
                _write_back(without_panic_notices(captured[0]))
        finally:
            _CAPTURING.release()


@contextmanager
def _captured_fd2(captured: list[bytes]) -> Iterator[None]:
    """Point descriptor 2 at a temporary file for the block; then append its bytes to ``captured``."""
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    with tempfile.TemporaryFile() as sink:
        with suppress(OSError, ValueError):
            sys.stderr.flush()
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            with suppress(OSError, ValueError):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            captured.append(sink.read())


def _write_back(data: bytes) -> None:
    """Write what was captured to descriptor 2 (stderr as it was), whole."""
    view = memoryview(data)
    with suppress(OSError):
        while view:
            written = os.write(2, view)
            view = view[written:]
