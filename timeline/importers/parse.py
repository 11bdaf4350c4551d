"""One file of any supported format → its :class:`~timeline.importers.result.FileResult`.

Recognises gzip and the format by content (:mod:`timeline.importers.files`), and picks the reader:
a Kineto trace, of any size, is decoded in chunks (:mod:`timeline.importers.stream`: the one
decoder of Kineto JSON), and read whole only when it is damaged, to repair what is safe
(:func:`timeline.importers.kineto.parse_kineto`, up to :data:`REPAIR_MAX_BYTES` of text); a
Horovod timeline is read whole, a Parquet file from ``timeline convert`` as Parquet; all within the
limits of :mod:`timeline.importers.files`. With :attr:`ImportOptions.cache
<timeline.importers.result.ImportOptions.cache>`, a Kineto or Horovod file's result is read from
the cache when it is there and written to it after its parse (:mod:`timeline.importers.cache`).
"""

from __future__ import annotations

from pathlib import Path

from timeline.errors import TraceFormatError
from timeline.importers.files import ReadLimitError, TextTooLargeError, read_trace_bytes, sniff_path
from timeline.importers.result import FileResult, ImportOptions
from timeline.paths import path_text

__all__ = ["REPAIR_MAX_BYTES", "parse_file", "parse_one"]

REPAIR_MAX_BYTES = 128 * 1024 * 1024
"""The most text of a damaged Kineto trace read whole to be repaired (the repairs of malformed JSON
need the whole text); a larger damaged trace is an error at the line and column of the damage."""


def parse_file(path: Path, options: ImportOptions, *, workers: int = 1) -> FileResult:
    """Read and parse one file of any supported format (through the cache when ``options`` has one).

    ``workers``: the cores this parse may use; from two, the chunked decoder finishes the columns
    of a batch on a thread while it decodes the next chunks.

    Raises
    ------
    TimelineError
        Bad input, with the file and position in the message.
    """
    if options.cache is None:
        return _parse(path, options, workers)
    from timeline.importers.cache import read_through

    # looked up first: a frame in the cache needs no sniffing of the file's text either
    return read_through(path, options, lambda: _parse(path, options, workers))


def _parse(path: Path, options: ImportOptions, workers: int) -> FileResult:
    """Recognise the file's format and parse it."""
    source = path_text(path)
    from timeline.importers.nsys_export import is_report

    if is_report(path):
        return _parse_report(path, source, options)
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
    if fmt == "nsys":
        from timeline.importers.nsys import parse_nsys

        return parse_nsys(path, source=source, options=options)
    if fmt == "kineto":
        return _parse_kineto_file(path, source, options, workers)
    from timeline.importers.horovod import parse_horovod

    warnings: list[str] = []
    data = read_trace_bytes(path, warnings)
    return _warned(parse_horovod(data, source=source, options=options), warnings)


def _parse_report(path: Path, source: str, options: ImportOptions) -> FileResult:
    """Parse an Nsight Systems report through its SQLite export, made in a temporary folder of timeline's.

    Raises
    ------
    TimelineError
        No ``nsys`` to export it (the message gives the command), a failed export, a bad export.
    """
    from timeline.importers.files import open_file
    from timeline.importers.nsys import parse_nsys
    from timeline.importers.nsys_export import exported

    open_file(path).close()  # a missing or unreadable report: the usual error, before looking for nsys
    with exported(path, source=source) as database:
        return parse_nsys(database, source=source, options=options)


def _parse_kineto_file(path: Path, source: str, options: ImportOptions, workers: int) -> FileResult:
    """Decode a Kineto trace in chunks; a damaged one up to :data:`REPAIR_MAX_BYTES` whole, repaired.

    In a larger one, damage at the end (cut off by a job killed while writing, a log line appended)
    is repaired by the chunked decoder itself; other damage is an error at its line and column.
    """
    from timeline.importers.stream import DamagedEndError, parse_kineto_stream

    def stream(repair_end: bool) -> FileResult:
        # workers == 1: every core runs a file's parse (or a rank's task); no spare core
        return parse_kineto_stream(
            path, source=source, options=options, spare_core=workers > 1, repair_end=repair_end
        )

    try:
        return stream(repair_end=False)
    except ReadLimitError:
        raise  # past a limit: no other reader would hold it
    except TraceFormatError as exc:
        streamed = exc
    # damaged JSON small enough to hold: the whole-file reader repairs what is safe
    from timeline.importers.kineto import parse_kineto

    warnings: list[str] = []
    try:
        data = read_trace_bytes(path, warnings, limit=REPAIR_MAX_BYTES)
    except TextTooLargeError:
        if isinstance(streamed, DamagedEndError):
            return stream(repair_end=True)
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
