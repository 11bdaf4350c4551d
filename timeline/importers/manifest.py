"""Reading the run manifest: ``manifest.json`` next to the traces of one captured run.

The one reader of the file that :mod:`timeline.capture` writes (:mod:`timeline.capture.manifest`
merges each rank's entry into it): it lists every rank and every trace file of the run, and the
run's settings. Importers read it to know which files are the run and which windows share a rank
(:func:`timeline.importers.files.manifest_windows`); the what-if graph reads the link it records.

Layout (``format`` = ``timeline.capture/1``)::

    {
      "format": "timeline.capture/1",
      "world_size": 2,
      "backend": "gloo",
      "link_gbps": null,
      "schedule": {"wait": 1, "warmup": 1, "active": 3, "repeat": 1, "skip_first": 0},
      "record_shapes": true,
      "with_stack": false,
      "grad_ready_markers": false,
      "versions": {"timeline": "0.1.0", "torch": "2.13.0+cpu", "nccl": null, "python": "3.11.9"},
      "horovod_timeline": null,
      "ranks": [{"rank": 0, "host": "node1", "pid": 4242, "device": "cpu",
                 "started_unix_ns": 1760000000000000000, "files": ["rank0.2-4.pt.trace.json.gz"]}, …],
      "files": ["rank0.2-4.pt.trace.json.gz", "rank1.2-4.pt.trace.json.gz"]
    }

File names are relative to the run folder. Unknown fields are ignored.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from timeline.errors import ManifestError, UsageError
from timeline.paths import read_regular_file

__all__ = [
    "MANIFEST_FORMAT",
    "MANIFEST_NAME",
    "MAX_MANIFEST_BYTES",
    "Manifest",
    "RankEntry",
    "Schedule",
    "Versions",
    "load_manifest",
    "read_manifest",
]

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = "timeline.capture/1"
MAX_MANIFEST_BYTES = 64 << 20
"""The largest manifest read, 64 MiB (one of 1,024 ranks, each with its windows, holds under 1 MB)."""


class Schedule(msgspec.Struct, frozen=True, forbid_unknown_fields=False):
    """The profiler schedule (``torch.profiler.schedule`` arguments)."""

    wait: int
    warmup: int
    active: int
    repeat: int
    skip_first: int = 0


class Versions(msgspec.Struct, frozen=True, forbid_unknown_fields=False):
    """Versions of the software that wrote the traces; None where not applicable."""

    timeline: str
    torch: str | None
    nccl: str | None
    python: str


class RankEntry(msgspec.Struct, frozen=True, forbid_unknown_fields=False):
    """What one rank wrote."""

    rank: int
    host: str
    pid: int
    device: str
    started_unix_ns: int
    files: list[str] = msgspec.field(default_factory=list)


class Manifest(msgspec.Struct, frozen=True, forbid_unknown_fields=False):
    """The content of ``manifest.json``."""

    format: str
    world_size: int
    backend: str | None
    link_gbps: float | None
    schedule: Schedule
    record_shapes: bool
    with_stack: bool
    grad_ready_markers: bool
    versions: Versions
    horovod_timeline: str | None = None
    ranks: list[RankEntry] = msgspec.field(default_factory=list)
    files: list[str] = msgspec.field(default_factory=list)


class _Format(msgspec.Struct, forbid_unknown_fields=False):
    """The one field every manifest version has: read first, so another format is named as such."""

    format: str | None = None


def load_manifest(path: Path) -> Manifest:
    """Read and validate the manifest at ``path``.

    Parameters
    ----------
    path
        The ``manifest.json`` file.

    Returns
    -------
    Manifest
        Its content.

    Raises
    ------
    ManifestError
        The file cannot be read, is not a JSON object, is of another format than
        ``timeline.capture/1``, or has a field of the wrong type; the message names the file.
    """
    try:
        data = read_regular_file(path, limit=MAX_MANIFEST_BYTES, error=ManifestError, what="manifest")
    except UsageError as exc:  # a path the system cannot name
        raise ManifestError(str(exc)) from None
    try:
        found = msgspec.json.decode(data, type=_Format).format
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ManifestError(f"{path}: not a timeline.capture manifest ({exc})") from exc
    if found != MANIFEST_FORMAT:
        msg = f"{path}: manifest format {found!r}, expected {MANIFEST_FORMAT!r}"
        raise ManifestError(msg)
    try:
        return msgspec.json.decode(data, type=Manifest)
    except msgspec.ValidationError as exc:
        raise ManifestError(f"{path}: invalid {MANIFEST_FORMAT} manifest: {exc}") from exc


def read_manifest(path: Path) -> Manifest | None:
    """Return the manifest at ``path``, or None when it is absent, unreadable or of another format.

    :func:`load_manifest` for callers to whom a manifest is only a hint: what it would raise
    gives None.

    Parameters
    ----------
    path
        The ``manifest.json`` file.

    Returns
    -------
    Manifest | None
        Its content.
    """
    try:
        return load_manifest(path)
    except ManifestError:
        return None
