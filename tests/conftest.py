"""What every test of the suite gets: a cache folder of its own, never the user's.

Every command, :func:`timeline.analyze` and :class:`timeline.run.Inputs` built by the command line
read and write trace frames in the cache (:mod:`timeline.importers.cache`), whose folder is
``$TIMELINE_CACHE_DIR`` when set. It is set for the whole session first (fixtures of a module or
the session read traces too), then, for each test, to an empty folder of that test's own
(subprocesses inherit it): the suite never writes to ``~/.cache``, and no test reads another's
entries.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from timeline.importers.cache import CACHE_DIR_ENV, CACHE_LIMIT_ENV


def _use(patch: pytest.MonkeyPatch, folder: Path) -> None:
    patch.setenv(CACHE_DIR_ENV, str(folder))
    patch.delenv(CACHE_LIMIT_ENV, raising=False)
    patch.delenv("XDG_CACHE_HOME", raising=False)


@pytest.fixture(autouse=True, scope="session")
def session_cache_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The cache folder of the session's fixtures of wider scope, set before any of them runs."""
    folder = tmp_path_factory.mktemp("session-cache") / "timeline"
    with pytest.MonkeyPatch.context() as patch:
        _use(patch, folder)
        yield folder


@pytest.fixture(autouse=True)
def cache_folder(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Return this test's cache folder (``$TIMELINE_CACHE_DIR``), empty and not yet made."""
    folder = tmp_path_factory.mktemp("cache") / "timeline"
    _use(monkeypatch, folder)
    return folder
