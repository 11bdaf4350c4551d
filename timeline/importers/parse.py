"""One file of any supported format → its :class:`~timeline.importers.result.FileResult`.

Recognises gzip and the format by content (:mod:`timeline.importers.files`), and picks the reader:
a large Kineto trace is decoded in chunks (:mod:`timeline.importers.stream`, in parallel worker
processes from :data:`timeline.policy.STREAM_MIN_BYTES`), the rest whole (Kineto, Horovod, Parquet),
within the limits of :mod:`timeline.importers.files`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from timeline import policy
from timeline.errors import TraceFormatError
from timeline.importers.files import ReadLimitError, TextTooLargeError, read_trace_bytes, sniff_path
from timeline.importers.result import FileResult, ImportOptions
from timeline.paths import path_text

if TYPE_CHECKING:
    from timeline.executors import LocalExecutor

__all__ = ["parse_file", "parse_one"]


def parse_file(
    path: Path, options: ImportOptions, *, workers: int = 1, helper: LocalExecutor | None = None
) -> FileResult:
    """Read and parse one file of any supported format.

    ``workers``: processes that may decode a large trace's chunks in parallel. ``helper``: an
    executor whose helper process is started, to decode a trace read in chunks in two halves
    (:func:`timeline.importers.stream.parse_kineto_stream`).

    Raises
    ------
    TimelineError
        Bad input, with the file and position in the message.
    """
    source = path_text(path)
    fmt = sniff_path(path, source=source)
    if fmt == "flight_recorder":
        msg = (
            f"{source}: a PyTorch Flight Recorder dump, not a profiler trace: timeline analyze, "
            "collectives and report read dumps (alone or beside the traces of the same job)"
        )
        raise TraceFormatError(msg)
    if fmt == "parquet":
        from timeline.importers.parquet import read_parquet

        return read_parquet(path)
    if fmt == "kineto":
        return _parse_kineto_file(path, source, options, workers, helper)
    from timeline.importers.horovod import parse_horovod

    warnings: list[str] = []
    data = read_trace_bytes(path, warnings)
    return _warned(parse_horovod(data, source=source, options=options), warnings)


def _parse_kineto_file(
    path: Path, source: str, options: ImportOptions, workers: int, helper: LocalExecutor | None
) -> FileResult:
    """Parse a Kineto trace whole, or in chunks from :data:`timeline.policy.STREAM_SERIAL_MIN_BYTES`.

    The size is known once the text is read: a gzip trailer (:func:`timeline.policy.text_size`) may
    say anything. A text found longer than the trailer said while being read whole is read in chunks.
    """
    from timeline.importers.kineto import parse_kineto

    decoding = policy.decoding_of(policy.text_size(path))
    warnings: list[str] = []
    if decoding == "whole":
        try:
            data = read_trace_bytes(path, warnings, limit=policy.STREAM_SERIAL_MIN_BYTES)
        except TextTooLargeError:
            decoding, warnings = "chunks", []  # the gzip trailer said less than the file holds
        else:
            return _warned(parse_kineto(data, source=source, options=options), warnings)
    # Large traces: decompress and decode in chunks, never holding the whole text in memory
    # (faster too: the polars work of a chunk overlaps the decoding of the next one).
    from timeline.importers.stream import parse_kineto_stream

    parallel = workers if decoding == "parallel_chunks" else 1
    try:
        # workers == 1: every core runs a file's parse (or a rank's task); no spare core
        return parse_kineto_stream(
            path,
            source=source,
            options=options,
            workers=parallel,
            spare_core=workers > 1,
            helper=helper if decoding == "chunks" else None,
        )
    except ReadLimitError:
        raise  # past a limit: no other reader would hold it
    except TraceFormatError as exc:
        if decoding == "parallel_chunks":
            raise
        streamed = exc
    # damaged JSON small enough to hold: the whole-file reader repairs what is safe
    try:
        data = read_trace_bytes(path, warnings, limit=policy.STREAM_MIN_BYTES)
    except TextTooLargeError:
        raise streamed from None
    return _warned(parse_kineto(data, source=source, options=options), warnings)


def _warned(result: FileResult, warnings: list[str]) -> FileResult:
    """Put the warnings of reading the file before those of parsing it."""
    result.warnings[:0] = warnings
    return result


def parse_one(item: tuple[Path, ImportOptions]) -> FileResult:
    """:func:`parse_file` of ``(path, options)``: the task of a parallel load (one worker per file)."""
    path, options = item
    return parse_file(path, options)
