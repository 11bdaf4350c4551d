"""Generate large, realistic PyTorch profiler traces from a real one, for the scale benchmarks.

Takes a real Kineto trace (by default the 54 MB ``hta_df_index_resolver`` trace of the shared test
traces: one rank, 5 ProfilerSteps, 2,020 NCCL all-reduce kernels) and writes traces of any size and
rank sets of any width, so that nobody commits big files:

- **grow** (``grow_trace``): the source's events, sorted by start, are repeated back to back until the
  output holds the requested number of bytes of JSON. Copy ``r`` is shifted by the span of the
  copies before it and stretched in time by a factor drawn in [0.97, 1.03] (every duration and gap
  of the copy scales alike, so nesting, launches inside their CPU ops and the GPU lag are kept);
  GPU kernels, memcpys and memsets also get their own duration jitter of up to ±2 %. ``correlation``,
  ``External id`` and flow ids are offset per copy so that links stay unique, and ``ProfilerStep#N``
  is renumbered so that iterations stay distinct. A target below the source's size keeps a prefix
  in time (what a shorter profiler window would have recorded). Copy 0 is the source unchanged.
- **ranks** (``rewrite_rank``, ``make_rank_set``): copies of one trace whose ``distributedInfo``
  (``rank``, ``world_size``) and file name (``rank<N>.json[.gz]``) are rewritten; the rest of the
  bytes are the source's own.

Everything is deterministic for a given seed (gzip output too: no time stamp in its header). Sizes
are decimal (``1G`` = 10⁹ bytes of JSON). Output goes where you say; ``benchmarks/out/`` is
git-ignored. Command line::

    python benchmarks/generate.py grow --size 1G -o benchmarks/out/big.json.gz
    python benchmarks/generate.py ranks --ranks 8 -o benchmarks/out/r8           # 8 × the 54 MB trace
    python benchmarks/generate.py ranks --ranks 256 --size 10M -o benchmarks/out/r256
"""

from __future__ import annotations

import argparse
import os
import random
import re
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import msgspec

TRACES = Path(os.environ.get("TIMELINE_TRACES", Path(__file__).resolve().parents[2] / "shared" / "traces"))
DEFAULT_SOURCE = TRACES / "kineto" / "hta_df_index_resolver" / "df_index_resolver.json.gz"

_STRETCH = 0.03  # per-copy time stretch: up to ±3 %
_GPU_JITTER = 0.02  # per-event duration jitter of GPU activities: up to ±2 %
_GAP_US = 1000.0  # between two copies
_GPU_CATS = frozenset({"kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset"})
_ID_ARGS = ("correlation", "External id", "external id", "Python id", "Python parent id")
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)b?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}


def parse_size(text: str) -> int:
    """Return a byte count from ``54M``, ``1G``, ``1.5GB``, ``250000`` (decimal units)."""
    match = _SIZE.match(text)
    if match is None:
        raise ValueError(f"{text!r}: not a size (examples: 54M, 1G, 250000)")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def read_json_bytes(path: Path) -> bytes:
    """Return the content of a trace file, decompressed when it is gzip."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        from isal import igzip

        return bytes(igzip.decompress(raw))  # type: ignore[no-untyped-call]
    return raw


class _Writer:
    """Writes bytes to a plain file or a deterministic gzip stream, counting the uncompressed bytes."""

    def __init__(self, path: Path, *, gzip: bool, level: int = 1) -> None:
        self.path = path
        self.handle: IO[bytes] = path.open("wb")
        self.compressor: Any = None
        if gzip:
            from isal import isal_zlib

            # wbits 31: a gzip member whose header has no time stamp, so equal input gives equal bytes
            self.compressor = isal_zlib.compressobj(level, isal_zlib.DEFLATED, 31)
        self.written = 0

    def write(self, data: bytes) -> None:
        self.written += len(data)
        self.handle.write(self.compressor.compress(data) if self.compressor else data)

    def close(self) -> None:
        if self.compressor is not None:
            self.handle.write(self.compressor.flush())
        self.handle.close()


def _value_end(data: bytes, start: int) -> int:
    """Return the index after the JSON object that starts at ``data[start] == '{'``."""
    depth = 0
    in_string = False
    i = start
    while i < len(data):
        c = data[i]
        if in_string:
            if c == 0x5C:  # backslash: skip the escaped character
                i += 1
            elif c == 0x22:
                in_string = False
        elif c == 0x22:
            in_string = True
        elif c == 0x7B:
            depth += 1
        elif c == 0x7D:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ValueError("unterminated distributedInfo object")


def _info_bytes(info: dict[str, Any]) -> bytes:
    # Spaces after colons as Kineto writes them: HTA finds a file's rank with the regex "rank":\s+(\d+).
    return msgspec.json.format(msgspec.json.encode(info), indent=0)


def rewrite_rank(data: bytes, rank: int, world_size: int) -> bytes:
    """Return the trace with ``distributedInfo.rank`` and ``world_size`` set; other bytes unchanged.

    A trace without ``distributedInfo`` gets one as its first key.
    """
    key = data.find(b'"distributedInfo"')
    events = data.find(b'"traceEvents"')
    if key < 0 or (events >= 0 and key > events and data.rfind(b'"distributedInfo"') != key):
        # none, or the first occurrence could be inside an event: insert one at the top
        brace = data.index(b"{")
        info = {"backend": "nccl", "rank": rank, "world_size": world_size}
        return data[: brace + 1] + b'"distributedInfo": ' + _info_bytes(info) + b", " + data[brace + 1 :]
    start = data.index(b"{", key)
    end = _value_end(data, start)
    info = msgspec.json.decode(data[start:end])
    info.update(rank=rank, world_size=world_size)
    return data[:start] + _info_bytes(info) + data[end:]


@dataclass(frozen=True)
class Generated:
    """What :func:`grow_trace` wrote."""

    path: Path
    json_bytes: int
    events: int
    copies: float


def _copies(events: list[dict[str, Any]], seed: int) -> Iterator[list[dict[str, Any]]]:
    """Yield copy 0 (the events unchanged), then endlessly the jittered, shifted copies 1, 2, …"""
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    t0 = min(e["ts"] for e in timed)
    t_end = max(e["ts"] + (e.get("dur") or 0) for e in timed)
    integral = all(isinstance(e["ts"], int) for e in timed)
    span = t_end - t0 + _GAP_US
    ids = [
        v
        for e in events
        for v in [e.get("id"), *((e.get("args") or {}).get(k) for k in _ID_ARGS)]
        if isinstance(v, int) and not isinstance(v, bool)
    ]
    id_stride = max(ids, default=0) + 1
    steps = [
        int(m.group(1)) for e in events if isinstance(e.get("name"), str) and (m := _STEP.match(e["name"]))
    ]
    step_stride = (max(steps) - min(steps) + 1) if steps else 0
    yield events
    origin = t0 + span
    copy = 1
    while True:
        rng = random.Random(seed * 1_000_003 + copy)
        stretch = 1.0 + rng.uniform(-_STRETCH, _STRETCH)
        id_offset = copy * id_stride
        out: list[dict[str, Any]] = []
        for e in events:
            n = dict(e)
            ts = e.get("ts")
            if isinstance(ts, (int, float)):
                t = origin + (ts - t0) * stretch
                n["ts"] = round(t) if integral else round(t, 3)
            dur = e.get("dur")
            if isinstance(dur, (int, float)):
                d = dur * stretch
                if e.get("cat") in _GPU_CATS:
                    d *= 1.0 + rng.uniform(-_GPU_JITTER, _GPU_JITTER)
                n["dur"] = round(d) if integral else round(d, 3)
            if isinstance(e.get("id"), int):
                n["id"] = e["id"] + id_offset
            args = e.get("args")
            if isinstance(args, dict) and any(k in args for k in _ID_ARGS):
                a = dict(args)
                for k in _ID_ARGS:
                    if isinstance(a.get(k), int) and not isinstance(a.get(k), bool):
                        a[k] = a[k] + id_offset
                n["args"] = a
            name = e.get("name")
            if step_stride and isinstance(name, str) and name.startswith("ProfilerStep#"):
                m = _STEP.match(name)
                if m:
                    n["name"] = f"ProfilerStep#{int(m.group(1)) + copy * step_stride}"
            out.append(n)
        yield out
        origin += span * stretch
        copy += 1


def _encode(events: list[dict[str, Any]]) -> bytes:
    """Encode events as the inside of a JSON array, with Kineto's spacing (``"ph": "X", …``)."""
    return msgspec.json.format(msgspec.json.encode(events), indent=0)[1:-1]


def grow_trace(
    source: Path,
    out: Path,
    *,
    target_bytes: int,
    seed: int = 0,
    rank: int | None = None,
    world_size: int | None = None,
    gzip: bool | None = None,
) -> Generated:
    """Write a trace of about ``target_bytes`` of JSON grown (or cut) from ``source``.

    Parameters
    ----------
    source
        A Kineto trace (``.json`` or ``.json.gz``).
    out
        The file to write; gzipped when its name ends in ``.gz`` (or as ``gzip`` says).
    target_bytes
        Bytes of JSON to write (the output stops at the last whole event that fits).
    seed
        Seed of the jitter.
    rank, world_size
        Written into ``distributedInfo`` when given.
    """
    doc = msgspec.json.decode(read_json_bytes(source))
    events: list[dict[str, Any]] = doc.pop("traceEvents")
    # Metadata events (process and thread names) once, then the timed events in order of start.
    meta = [e for e in events if not isinstance(e.get("ts"), (int, float))]
    timed = sorted((e for e in events if isinstance(e.get("ts"), (int, float))), key=lambda e: e["ts"])
    if rank is not None:
        info = dict(doc.get("distributedInfo") or {"backend": "nccl"})
        info["rank"] = rank
        if world_size is not None:
            info["world_size"] = world_size
        doc["distributedInfo"] = info
    trailer = {k: doc.pop(k) for k in list(doc) if k == "traceName"}
    head = msgspec.json.format(msgspec.json.encode(doc), indent=0)[:-1]
    head += (b", " if doc else b"") + b'"traceEvents": [\n'
    tail = b"\n]" + (
        b", " + msgspec.json.format(msgspec.json.encode(trailer), indent=0)[1:] if trailer else b"}"
    )
    tail += b"\n"
    writer = _Writer(out, gzip=out.name.endswith(".gz") if gzip is None else gzip)
    written_events = 0
    copies = 0.0
    try:
        writer.write(head)
        budget = target_bytes - len(head) - len(tail)
        first = True
        if meta:
            chunk = _encode(meta)
            writer.write(chunk)
            budget -= len(chunk)
            written_events += len(meta)
            first = False
        for block in _copies(timed, seed):
            chunk = _encode(block)
            if len(chunk) + 2 <= budget:
                writer.write(chunk if first else b",\n" + chunk)
                budget -= len(chunk) + (0 if first else 2)
                written_events += len(block)
                copies += 1
                first = False
                continue
            # the last, partial copy: as many events (in order of start) as fit
            lo, hi = 0, len(block)
            while lo < hi:  # the longest prefix that fits
                mid = (lo + hi + 1) // 2
                if len(_encode(block[:mid])) + 2 <= budget:
                    lo = mid
                else:
                    hi = mid - 1
            if lo:
                writer.write((b"" if first else b",\n") + _encode(block[:lo]))
                written_events += lo
                copies += lo / len(block)
            break
        writer.write(tail)
    finally:
        writer.close()
    return Generated(path=out, json_bytes=writer.written, events=written_events, copies=copies)


def make_rank_set(
    source: Path,
    out_dir: Path,
    *,
    ranks: int,
    target_bytes: int | None = None,
    seed: int = 0,
    gzip: bool = True,
) -> list[Path]:
    """Write ``ranks`` rank-rewritten copies of a trace as ``out_dir/rank<N>.json[.gz]``.

    With ``target_bytes`` the trace is first grown or cut to that size (:func:`grow_trace`);
    without, it is the source's own content.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    suffix = ".json.gz" if gzip else ".json"
    if target_bytes is None:
        data = read_json_bytes(source)
    else:
        scratch = out_dir / f".base{suffix}"
        grow_trace(source, scratch, target_bytes=target_bytes, seed=seed, gzip=False)
        data = scratch.read_bytes()
        scratch.unlink()
    paths = []
    for r in range(ranks):
        path = out_dir / f"rank{r}{suffix}"
        writer = _Writer(path, gzip=gzip)
        try:
            writer.write(rewrite_rank(data, r, ranks))
        finally:
            writer.close()
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True)
    grow = sub.add_parser("grow", help="one trace of a given size")
    grow.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    grow.add_argument("--size", type=parse_size, required=True, help="bytes of JSON: 250M, 1G …")
    grow.add_argument("-o", "--output", type=Path, required=True, help="FILE.json or FILE.json.gz")
    grow.add_argument("--seed", type=int, default=0)
    grow.add_argument("--rank", type=int, default=None)
    grow.add_argument("--world-size", type=int, default=None)
    ranks = sub.add_parser("ranks", help="a set of rank-rewritten copies")
    ranks.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    ranks.add_argument("--ranks", type=int, required=True)
    ranks.add_argument("--size", type=parse_size, default=None, help="grow or cut each rank to this size")
    ranks.add_argument("-o", "--output", type=Path, required=True, help="the directory to write")
    ranks.add_argument("--seed", type=int, default=0)
    ranks.add_argument("--plain", action="store_true", help="write .json, not .json.gz")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    if args.command == "grow":
        result = grow_trace(
            args.source,
            args.output,
            target_bytes=args.size,
            seed=args.seed,
            rank=args.rank,
            world_size=args.world_size,
        )
        print(
            f"wrote {result.path}: {result.json_bytes / 1e6:,.1f} MB of JSON, {result.events:,} events "
            f"({result.copies:.2f} × the source) in {time.perf_counter() - t0:.1f} s"
        )
    else:
        paths = make_rank_set(
            args.source,
            args.output,
            ranks=args.ranks,
            target_bytes=args.size,
            seed=args.seed,
            gzip=not args.plain,
        )
        print(f"wrote {len(paths)} ranks to {args.output} in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
