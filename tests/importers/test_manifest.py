"""The one reader of a capture run's manifest.json: typed, validated, errors naming the file."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import msgspec
import pytest

from tests.builders import REPO
from timeline.errors import ManifestError, TimelineError
from timeline.importers.manifest import MANIFEST_FORMAT, MANIFEST_NAME, Manifest, load_manifest, read_manifest
from timeline.inputs import manifest_windows

SAMPLE = REPO / "sample_traces" / "ddp_gloo"


def test_reads_the_sample_manifest() -> None:
    manifest = load_manifest(SAMPLE / MANIFEST_NAME)
    assert isinstance(manifest, Manifest)
    assert manifest.format == MANIFEST_FORMAT
    assert manifest.world_size == 2
    assert [e.rank for e in manifest.ranks] == [0, 1]
    assert manifest.files == ["rank0.2-4.pt.trace.json.gz", "rank1.2-4.pt.trace.json.gz"]
    assert read_manifest(SAMPLE / MANIFEST_NAME) == manifest
    with pytest.raises(AttributeError):
        manifest.world_size = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such manifest"),
        (b"{not json", "not a timeline.capture manifest"),
        (b"[1, 2]", "not a timeline.capture manifest"),
        (b'{"format": "someone-else/3"}', "manifest format 'someone-else/3', expected 'timeline.capture/1'"),
        (b"{}", "manifest format None, expected 'timeline.capture/1'"),
        (b'{"format": "timeline.capture/1", "world_size": "two"}', "invalid timeline.capture/1 manifest"),
    ],
)
def test_errors_name_the_file(tmp_path: Path, content: bytes | None, message: str) -> None:
    path = tmp_path / MANIFEST_NAME
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ManifestError, match=f"^{re.escape(str(path))}: .*{re.escape(message)}"):
        load_manifest(path)
    assert issubclass(ManifestError, TimelineError)
    assert read_manifest(path) is None  # a hint only: the lenient reader gives None
    assert manifest_windows(tmp_path) == {}


def test_windows_come_from_the_reader(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(SAMPLE, run)
    assert manifest_windows(run) == {
        (run / "rank0.2-4.pt.trace.json.gz").resolve(): 0,
        (run / "rank1.2-4.pt.trace.json.gz").resolve(): 1,
    }
    content = msgspec.json.decode((run / MANIFEST_NAME).read_bytes())
    content["ranks"][1]["files"].append("../elsewhere.json")  # outside the run folder: not a window
    (run / MANIFEST_NAME).write_bytes(msgspec.json.encode(content))
    assert sorted(manifest_windows(run).values()) == [0, 1]
