"""Reading trace files and recognising their format by content.

Reads one file into bytes (gzip recognised by its magic number, not by its name; a gzip stream cut
off mid-way gives what it holds plus a warning) and names its format: Kineto JSON, Horovod JSON, or
a Parquet file written by ``timeline convert``.
"""

from __future__ import annotations

import zlib
from pathlib import Path

from timeline.errors import TraceFormatError, UsageError
from timeline.importers.result import TraceFormat

__all__ = ["read_trace_bytes", "sniff_format"]

_GZIP_MAGIC = b"\x1f\x8b"
_PARQUET_MAGIC = b"PAR1"


def _gunzip(raw: bytes, source: str, warnings: list[str]) -> bytes:
    """Decompress a gzip stream (all members); keep what a stream cut off mid-way holds."""
    try:
        from isal import igzip  # ISA-L: about 1.5x faster than zlib on large traces

        return bytes(igzip.decompress(raw))  # type: ignore[no-untyped-call]
    except ImportError:  # pragma: no cover - isal is a dependency; zlib is the fallback
        pass
    except (EOFError, OSError, ValueError):
        pass
    # Cut-off or damaged stream: decompress as far as it goes.
    out = bytearray()
    data = raw
    try:
        while data:
            d = zlib.decompressobj(wbits=31)
            out += d.decompress(data)
            if not d.eof:
                warnings.append(f"{source}: gzip stream cut off; read the {len(out):,} bytes it holds")
                break
            data = d.unused_data
    except zlib.error as exc:
        if not out:
            raise TraceFormatError(
                f"{source}:1:1: damaged gzip file ({exc}); re-copy or re-export it"
            ) from exc
        warnings.append(f"{source}: damaged gzip stream; read the {len(out):,} bytes before the damage")
    return bytes(out)


def read_trace_bytes(path: Path, warnings: list[str]) -> bytes:
    """Return the content of ``path``, decompressed if it is gzip (recognised by content).

    Raises
    ------
    UsageError
        The file cannot be read.
    """
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    if raw[:2] == _GZIP_MAGIC:
        return _gunzip(raw, str(path), warnings)
    return raw


def sniff_format(data: bytes, source: str) -> TraceFormat:
    """Return the format of a file from its first bytes.

    Raises
    ------
    TraceFormatError
        Empty files and content that is not a trace.
    """
    if data[:4] == _PARQUET_MAGIC:
        return "parquet"
    head = data[:65536].lstrip(b"\xef\xbb\xbf \t\r\n")
    if not head:
        raise TraceFormatError(
            f"{source}:1:1: empty file; expected a PyTorch profiler trace or a Horovod timeline"
        )
    if head[:1] == b"[":
        return "horovod"
    if head[:1] == b"{":
        return "kineto"
    offset = len(data) - len(data.lstrip(b"\xef\xbb\xbf \t\r\n"))
    line = data.count(b"\n", 0, offset) + 1
    col = offset - data.rfind(b"\n", 0, offset)
    msg = (
        f"{source}:{line}:{col}: not a trace: expected JSON (a PyTorch profiler trace or a Horovod "
        "timeline, optionally gzipped) or a Parquet file from timeline convert"
    )
    raise TraceFormatError(msg)
