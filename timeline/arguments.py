"""The public functions' arguments, checked where a caller hands them over: a clear error, not an engine's.

Takes what a notebook or script passes to :func:`timeline.load`, :func:`timeline.analyze`,
:func:`timeline.compute_overlap`, :func:`timeline.build_summary` and the other functions of
:mod:`timeline` (``docs/notebooks.md``); gives them back checked, or raises

- :class:`TypeError` naming the argument for a value of the wrong type (``analyze(b"run/")``, a
  ``str`` where a list of patterns is expected, a pandas frame or a ``LazyFrame`` where the events
  frame is expected), with what to pass instead;
- a :class:`~timeline.errors.TimelineError` naming the argument for a value of the right type that
  cannot be used (:class:`~timeline.errors.RankError`: a rank beyond the ``Int32`` rank column;
  :class:`~timeline.errors.UsageError`: an events frame without the columns of
  :data:`timeline.schema.EVENTS_SCHEMA` or with another type in one of them).

Without these checks a misuse surfaced deep inside polars (``ColumnNotFoundError`` with a query
plan, ``SchemaError``, ``ComputeError``) or as an ``AttributeError``, and a string of patterns was
read character by character (``comm_kernels="gemm"``: the patterns ``g``, ``e``, ``m``, ``m``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from timeline.errors import RankError, UsageError

if TYPE_CHECKING:
    import polars as pl

__all__ = [
    "RANK_MAX",
    "check_events",
    "check_flag",
    "check_instance",
    "check_optional_int",
    "check_optional_text",
    "check_paths",
    "check_patterns",
    "check_rank",
    "check_run",
]

RANK_MAX = 2**31 - 1
"""The largest rank (the ``rank`` column is ``Int32``)."""


def _named(value: object) -> str:
    """Return a value as a message shows it: its repr when short and plain, else its type (``a X``)."""
    if value is None or isinstance(value, (bool, int, float, str, bytes, bytearray)):
        text = repr(value)
        return text if len(text) <= 60 else text[:57] + "..."
    kind = type(value)
    module = kind.__module__
    return f"a {kind.__qualname__}" if module == "builtins" else f"a {module}.{kind.__qualname__}"


def check_paths(paths: object, *, argument: str = "paths") -> list[str | Path]:
    """Return ``paths`` as a list: one path (``str`` or :class:`os.PathLike`) or a sequence of them.

    Raises
    ------
    TypeError
        ``bytes`` (decode the name with :func:`os.fsdecode`), ``None``, or anything but paths.
    """
    if isinstance(paths, (str, os.PathLike)):
        return [_one_path(paths, argument)]
    if isinstance(paths, (bytes, bytearray)):
        msg = (
            f"{argument}: bytes ({_named(paths)}) are not a path; pass a str or pathlib.Path "
            f"(os.fsdecode({bytes(paths)!r}) gives one)"
        )
        raise TypeError(msg)
    if not isinstance(paths, Sequence) and not isinstance(paths, (set, frozenset)):
        raise TypeError(f"{argument}: {_named(paths)} is not a path; pass a path or a list of paths")
    return [_one_path(path, f"{argument}[{i}]") for i, path in enumerate(paths)]


def _one_path(path: object, argument: str) -> str | Path:
    if isinstance(path, str):
        return path
    if isinstance(path, os.PathLike):
        name = path.__fspath__()
        if isinstance(name, str):
            return Path(name)
        raise TypeError(f"{argument}: {_named(path)} names bytes; pass a str or pathlib.Path")
    if isinstance(path, (bytes, bytearray)):
        raise TypeError(f"{argument}: bytes ({_named(path)}) are not a path; pass a str or pathlib.Path")
    raise TypeError(f"{argument}: {_named(path)} is not a path; pass a str or pathlib.Path")


def check_patterns(patterns: object, *, argument: str) -> tuple[str, ...]:
    """Return a sequence of regex patterns as a tuple; refuse one string (read letter by letter).

    Raises
    ------
    TypeError
        A ``str`` (``comm_kernels="gemm"`` would be the patterns g, e, m, m: pass ``["gemm"]``), or
        an item that is not a ``str``.
    """
    if patterns is None:
        return ()
    if isinstance(patterns, str):
        msg = (
            f"{argument}: a str ({patterns!r}) where a list of patterns is expected; pass "
            f"[{patterns!r}] (a str would be read as one pattern per character)"
        )
        raise TypeError(msg)
    if not isinstance(patterns, (Sequence, set, frozenset)) or isinstance(patterns, (bytes, bytearray)):
        raise TypeError(f"{argument}: {_named(patterns)} is not a list of patterns (str)")
    items = tuple(patterns)
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise TypeError(f"{argument}[{i}]: {_named(item)} is not a pattern; patterns are str")
    return items


def check_rank(rank: object, *, argument: str = "rank") -> int | None:
    """Return a rank (or None): an ``int`` of at most :data:`RANK_MAX`.

    A negative rank is refused later, with the files' world size in the message.

    Raises
    ------
    TypeError
        Not an ``int`` (a ``bool`` or a ``float`` neither).
    RankError
        Above the largest rank the ``rank`` column holds (polars failed on it with ``ComputeError``).
    """
    value = check_optional_int(rank, argument=argument)
    if value is not None and value > RANK_MAX:
        raise RankError(f"{argument}: {value} is not a rank; a rank is an integer from 0 to {RANK_MAX:,}")
    return value


def check_optional_int(value: object, *, argument: str) -> int | None:
    """Return an ``int`` or None; refuse a ``bool``, a ``float`` or anything else with a TypeError."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{argument}: {_named(value)} is not an int")
    return value


def check_optional_text(value: object, *, argument: str) -> str | None:
    """Return a ``str`` or None; anything else is a TypeError naming the argument."""
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{argument}: {_named(value)} is not a str")
    return value


def check_flag(value: object, *, argument: str) -> bool:
    """Return a ``bool``; anything else (``"no"``, which is true) is a TypeError naming the argument."""
    if not isinstance(value, bool):
        raise TypeError(f"{argument}: {_named(value)} is not a bool (True or False)")
    return value


def check_instance(value: object, kind: type[Any], *, argument: str, fix: str) -> Any:
    """Return ``value`` if it is a ``kind``; else raise a TypeError naming the argument and ``fix``."""
    if not isinstance(value, kind):
        raise TypeError(f"{argument}: {_named(value)} is not a {kind.__qualname__}; {fix}")
    return value


def check_run(value: object, *, argument: str = "run") -> Any:
    """Return ``value`` if it is a :class:`timeline.run.Run`; else a TypeError naming the argument.

    The results' builders sit below :mod:`timeline.run` (they never import it): a value can only be
    a Run once that module is loaded, so an unloaded module means it is not one.
    """
    module = sys.modules.get("timeline.run")
    if module is None or not isinstance(value, module.Run):
        raise TypeError(f"{argument}: {_named(value)} is not a timeline.run.Run; pass timeline.analyze(...)")
    return value


def check_events(events: object, *, argument: str = "events") -> pl.DataFrame:
    """Return the canonical events frame (:data:`timeline.schema.EVENTS_SCHEMA`), checked by its schema.

    The frame timeline builds is returned as it is, its schema only read (no pass over the rows).

    Raises
    ------
    TypeError
        Not a polars ``DataFrame`` (a ``LazyFrame``: collect it; a pandas frame: build the events
        with :func:`timeline.load`).
    UsageError
        A column of the schema missing, or of a type that does not hold its values (a ``str`` rank);
        integers of another width and text for a category are cast (strictly: a value that does
        not fit is this error too).
    """
    import polars as pl

    from timeline.schema import EVENTS_SCHEMA

    if isinstance(events, pl.LazyFrame):
        raise TypeError(f"{argument}: a polars LazyFrame; pass a DataFrame (call .collect() on it)")
    if not isinstance(events, pl.DataFrame):
        fix = "pass the events frame of timeline.load(...) (Trace.events)"
        if type(events).__module__.split(".")[0] == "pandas":
            fix = "timeline reads polars frames: pass the events frame of timeline.load(...) (Trace.events)"
        raise TypeError(f"{argument}: {_named(events)} is not a polars DataFrame; {fix}")
    schema = events.schema
    missing = [name for name in EVENTS_SCHEMA.names() if name not in schema]
    if missing:
        shown = ", ".join(missing[:6]) + (f" and {len(missing) - 6} more" if len(missing) > 6 else "")
        msg = (
            f"{argument}: not the events frame (missing columns {shown}); pass Trace.events of "
            "timeline.load(...), or a frame of timeline.schema.EVENTS_SCHEMA"
        )
        raise UsageError(msg)
    differ = {name: dtype for name, dtype in EVENTS_SCHEMA.items() if schema[name] != dtype}
    if not differ:
        return events  # the frame timeline builds: nothing to do
    for name, dtype in differ.items():
        if not _castable(schema[name], dtype):
            msg = (
                f"{argument}.{name}: {schema[name]}, where the events frame has {dtype}; cast it "
                "(frame.cast(timeline.schema.EVENTS_SCHEMA)) or pass Trace.events"
            )
            raise UsageError(msg)
    try:
        return events.with_columns(pl.col(name).cast(dtype, strict=True) for name, dtype in differ.items())
    except (pl.exceptions.PolarsError, pl.exceptions.PanicException) as exc:
        names = ", ".join(differ)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        msg = f"{argument}: the columns {names} cannot be read as the events frame's types ({first})"
        raise UsageError(msg) from None


def _castable(actual: pl.DataType, expected: pl.DataType) -> bool:
    """Whether a column of ``actual`` type holds what one of ``expected`` type does, told apart by its values.

    Integers of another width (a value out of range then fails the strict cast), and text as a
    category or enum (a word outside an enum fails it); never text as a number or the reverse.
    """
    import polars as pl

    if expected.is_integer():
        return actual.is_integer()
    text = (pl.String, pl.Categorical, pl.Enum)
    return isinstance(expected, text) and (isinstance(actual, text) or actual == pl.String)
