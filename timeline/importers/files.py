"""Finding trace files, reading them, and recognising their format by content.

Takes what a user typed (files, directories, glob patterns) and gives the list of files to load;
reads one file into bytes (gzip recognised by its magic number, not by its name; a gzip stream cut
off mid-way gives what it holds plus a warning) and names its format: Kineto JSON, Horovod JSON, or
a Parquet file written by ``timeline convert``.
"""

from __future__ import annotations

import glob
import re
import zlib
from collections.abc import Sequence
from pathlib import Path

import msgspec

from timeline.errors import RankError, TraceFormatError, UsageError
from timeline.importers.result import TraceFormat

__all__ = ["expand_paths", "manifest_windows", "rank_from_name", "read_trace_bytes", "sniff_format"]

_GZIP_MAGIC = b"\x1f\x8b"
_PARQUET_MAGIC = b"PAR1"
_TRACE_SUFFIXES = (".json", ".json.gz", ".parquet", ".json.tmp")
_NOT_TRACES = ("manifest.json",)  # the run manifest written by timeline.capture
# rank3, rank-3, rank_3, worker3, worker-3 (worker<N> is torch-tb-profiler's convention); not the
# digits of a larger word or number.
_RANK_IN_NAME = re.compile(r"(?<![a-z0-9])(?:rank|worker)[-_]?(\d+)(?![0-9])", re.IGNORECASE)


def expand_paths(paths: Sequence[str | Path]) -> list[Path]:
    """Return the trace files named by ``paths``: files, directories and glob patterns.

    A directory gives its ``*.json``, ``*.json.gz`` and ``*.parquet`` files (not the capture
    ``manifest.json``); a pattern gives its matches. The result is sorted and has no duplicates.

    Raises
    ------
    UsageError
        A path that does not exist, a pattern that matches nothing, a directory with no traces.
    """
    if not paths:
        raise UsageError("no trace given; pass one or more files, a directory or a glob pattern")
    found: list[Path] = []
    for raw in paths:
        text = str(raw)
        path = Path(text)
        if path.is_dir():
            listed = manifest_windows(path)
            members = sorted(
                p
                for p in path.iterdir()
                if p.is_file() and p.name.lower().endswith(_TRACE_SUFFIXES) and p.name not in _NOT_TRACES
            )
            if listed:
                # A capture run folder: exactly the files its manifest lists (stale traces of an
                # earlier run in the same folder are not mixed in).
                members = sorted(listed)
                missing = [p for p in members if not p.is_file()]
                if missing:
                    manifest = path / "manifest.json"
                    msg = f"{missing[0]}: listed in {manifest} but missing; re-copy the run folder"
                    raise UsageError(msg)
            if not members:
                msg = f"{text}: directory holds no trace files (*.json, *.json.gz, *.parquet)"
                raise UsageError(msg)
            found.extend(members)
        elif path.is_file():
            found.append(path)
        elif any(ch in text for ch in "*?["):
            # glob.glob, not Path.glob: users pass absolute patterns too
            matches = sorted(Path(m) for m in glob.glob(text, recursive=True) if Path(m).is_file())  # noqa: PTH207
            if not matches:
                raise UsageError(f"{text}: pattern matches no file")
            found.extend(matches)
        elif path.exists():
            raise UsageError(f"{text}: not a regular file or directory")
        else:
            raise UsageError(f"{text}: no such file or directory")
    return sorted({p.resolve() for p in found})


def manifest_windows(directory: Path) -> dict[Path, int]:
    """Return the trace files a ``timeline.capture`` manifest in ``directory`` lists, with their rank.

    A capture with ``repeat > 1`` writes several windows per rank (``rank0.2-4``, ``rank0.7-9``):
    they are one rank's successive windows, not two ranks. Empty when there is no such manifest.
    """
    manifest = directory / "manifest.json"
    if not manifest.is_file():
        return {}
    try:
        content = msgspec.json.decode(manifest.read_bytes())
    except (msgspec.DecodeError, OSError, UnicodeDecodeError):
        return {}
    if not isinstance(content, dict) or not str(content.get("format", "")).startswith("timeline.capture/"):
        return {}
    windows: dict[Path, int] = {}
    for entry in content.get("ranks") or []:
        if isinstance(entry, dict) and isinstance(entry.get("rank"), int):
            for name in entry.get("files") or []:
                if isinstance(name, str) and "/" not in name and "\\" not in name:
                    windows[(directory / name).resolve()] = entry["rank"]
    return windows


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


def rank_from_name(path: Path, rank_regex: str | None = None) -> int | None:
    """Return the rank a file name states (``rank3``, ``rank-3``, ``worker3`` or a user regex).

    Parameters
    ----------
    path
        The file.
    rank_regex
        A regex with one capturing group of digits, searched in the file name.

    Raises
    ------
    RankError
        A user regex that does not compile or has no group.
    """
    if rank_regex is not None:
        try:
            pattern = re.compile(rank_regex)
        except re.error as exc:
            raise RankError(f"--rank-regex {rank_regex!r}: not a valid regex ({exc})") from exc
        if pattern.groups < 1:
            raise RankError(f"--rank-regex {rank_regex!r}: needs one capturing group around the rank digits")
        match = pattern.search(path.name)
        if match is None or not match.group(1).isdigit():
            return None
        return int(match.group(1))
    match = _RANK_IN_NAME.search(path.name)
    return int(match.group(1)) if match else None
