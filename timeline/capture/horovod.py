"""Horovod timeline settings that put the timeline next to the PyTorch traces of the same run.

Takes a run folder; gives (and by default sets) the environment Horovod reads at ``hvd.init()``:
``HOROVOD_TIMELINE`` (the file rank 0 writes) and ``HOROVOD_TIMELINE_MARK_CYCLES``. The Horovod
timeline (v0.20.1+) starts with ``start_time_since_epoch_in_micros`` and the Kineto traces carry
``baseTimeNanoseconds``, so both can be merged later on the wall clock. Horovod is not needed to
call this.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["HOROVOD_TIMELINE_NAME", "horovod_timeline_env"]

HOROVOD_TIMELINE_NAME = "horovod_timeline.json"


def horovod_timeline_env(
    run_dir: str | os.PathLike[str], *, mark_cycles: bool = True, apply: bool = True
) -> dict[str, str]:
    """Return the Horovod timeline environment for a run, and set it in ``os.environ``.

    Call it on every rank before ``hvd.init()`` (only rank 0 writes the timeline; the variables
    are harmless elsewhere), or pass the returned variables to ``horovodrun`` / your launcher.

    Parameters
    ----------
    run_dir
        The run folder (the one given to :func:`timeline.capture.capture`); created if missing.
    mark_cycles
        Also mark Horovod's background-loop cycles (``CYCLE_START``), which shows how tensors were
        grouped into fusion cycles.
    apply
        Set the variables in ``os.environ`` of this process; False only returns them.

    Returns
    -------
    dict[str, str]
        ``HOROVOD_TIMELINE``: the absolute path of ``run_dir/horovod_timeline.json`` (absolute
        because workers may start in another directory); ``HOROVOD_TIMELINE_MARK_CYCLES``: ``"1"``
        or ``"0"``.

    Examples
    --------
    >>> env = horovod_timeline_env("runs/exp1", apply=False)  # doctest: +SKIP
    >>> sorted(env)  # doctest: +SKIP
    ['HOROVOD_TIMELINE', 'HOROVOD_TIMELINE_MARK_CYCLES']
    """
    folder = Path(run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    env = {
        "HOROVOD_TIMELINE": str((folder / HOROVOD_TIMELINE_NAME).resolve()),
        "HOROVOD_TIMELINE_MARK_CYCLES": "1" if mark_cycles else "0",
    }
    if apply:
        os.environ.update(env)
    return env
