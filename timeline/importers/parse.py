"""One file of any supported format → its :class:`~timeline.importers.result.FileResult`.

Recognises gzip and the format by content (:mod:`timeline.importers.files`), and picks the reader:
a large Kineto trace is decoded in chunks (:mod:`timeline.importers.stream`, in parallel worker
processes from :data:`timeline.policy.STREAM_MIN_BYTES`), the rest whole (Kineto, Horovod, Parquet).
"""

from __future__ import annotations

from pathlib import Path

from timeline import policy
from timeline.errors import TraceFormatError
from timeline.importers.files import read_trace_bytes, sniff_format
from timeline.importers.result import FileResult, ImportOptions

__all__ = ["parse_file", "parse_one"]


def parse_file(path: Path, options: ImportOptions, *, workers: int = 1) -> FileResult:
    """Read and parse one file of any supported format.

    ``workers``: processes that may decode a large trace's chunks in parallel.

    Raises
    ------
    TimelineError
        Bad input, with the file and position in the message.
    """
    source = str(path)
    decoding = policy.decoding_of(policy.text_size(path))
    if decoding != "whole":
        # Large traces: decompress and decode in chunks, never holding the whole text in memory
        # (faster too: the polars work of a chunk overlaps the decoding of the next one).
        from timeline.importers.stream import parse_kineto_stream, read_head

        if read_head(path).lstrip(b"\xef\xbb\xbf \t\r\n")[:1] == b"{":  # Kineto: a JSON object
            parallel = workers if decoding == "parallel_chunks" else 1
            try:
                # workers == 1: every core runs a file's parse (or a rank's task); no spare core
                return parse_kineto_stream(
                    path, source=source, options=options, workers=parallel, spare_core=workers > 1
                )
            except TraceFormatError:
                if decoding == "parallel_chunks":
                    raise
                # damaged JSON small enough to hold: the whole-file reader repairs what is safe
    warnings: list[str] = []
    data = read_trace_bytes(path, warnings)
    fmt = sniff_format(data, source)
    if fmt == "parquet":
        from timeline.importers.parquet import read_parquet

        result = read_parquet(path)
    elif fmt == "kineto":
        from timeline.importers.kineto import parse_kineto

        result = parse_kineto(data, source=source, options=options)
    else:
        from timeline.importers.horovod import parse_horovod

        result = parse_horovod(data, source=source, options=options)
    result.warnings[:0] = warnings
    return result


def parse_one(item: tuple[Path, ImportOptions]) -> FileResult:
    """:func:`parse_file` of ``(path, options)``: the task of a parallel load (one worker per file)."""
    path, options = item
    return parse_file(path, options)
