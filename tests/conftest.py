"""What every test of the suite gets: a cache folder of its own, never the user's.

Every command, :func:`timeline.analyze` and :class:`timeline.run.Inputs` built by the command line
read and write trace frames in the cache (:mod:`timeline.importers.cache`), whose folder is
``$TIMELINE_CACHE_DIR`` when set: each test sets it to an empty folder of its own (subprocesses
inherit it), so the suite never writes to ``~/.cache`` and no test reads another's entries.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from timeline.importers.cache import CACHE_DIR_ENV, CACHE_LIMIT_ENV


@pytest.fixture(autouse=True)
def cache_folder(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Return this test's cache folder (``$TIMELINE_CACHE_DIR``), empty and not yet made."""
    folder = tmp_path_factory.mktemp("cache") / "timeline"
    monkeypatch.setenv(CACHE_DIR_ENV, str(folder))
    monkeypatch.delenv(CACHE_LIMIT_ENV, raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    return folder
