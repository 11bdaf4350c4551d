"""Importers: trace files (Kineto / PyTorch profiler JSON, Horovod timelines) → the canonical events frame.

Each format module offers ``parse_<format>(data, *, source, options) -> FileResult`` over the raw,
already decompressed bytes of one file; :mod:`timeline.importers.files` reads files, recognises
gzip and the format by content, and :func:`timeline.trace.load` resolves ranks and combines files.
:mod:`timeline.importers.manifest` reads the ``manifest.json`` of a captured run (which files are
the run, which windows share a rank, the link it recorded).
"""
