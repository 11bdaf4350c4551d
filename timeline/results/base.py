"""What every result has in common: typed, tagged, versioned data, and how rows become typed.

Every answer timeline gives (the analysis summary, the collectives report, the what-if report, the
budget verdicts, the diff, the diagnosis, the Flight Recorder report) is a msgspec Struct deriving
from :class:`Result`: its ``kind`` (the tag, so that no renderer guesses what it holds), its layout
``version`` and the ``timeline`` version that wrote it come first in its JSON. Rows are
:class:`Row` Structs built from a polars frame with :func:`rows_of`. ``--json`` prints
:func:`encode`'s bytes; :func:`json_schema` gives the JSON Schema of a result type (kept in
``docs/schemas/`` and checked against the code by a test).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

if TYPE_CHECKING:
    import polars as pl

__all__ = ["TIMELINE_VERSION", "Result", "Row", "encode", "json_schema", "rows_of"]

TIMELINE_VERSION = "0.1.0"
"""timeline's version (``pyproject.toml``'s; a test checks they agree), written in every result."""


class Result(msgspec.Struct, kw_only=True, tag_field="kind"):
    """A result: its kind (the tag, ``kind`` in JSON), its layout version and timeline's version.

    Attributes
    ----------
    version
        The layout version of this kind of result (a key added, removed or changed bumps it).
    timeline
        The version of timeline that computed it.
    """

    version: int
    timeline: str = TIMELINE_VERSION

    def __repr__(self) -> str:
        """Return a short description: the kind, the layout version, each field's size, not its rows.

        ``msgspec.to_builtins(result)`` and ``--json`` give every value.
        """
        parts = [f"kind={type(self).__struct_config__.tag!r}"]
        parts += [f"{name}={_short(getattr(self, name))}" for name in self.__struct_fields__]
        text = f"{type(self).__name__}({', '.join(parts)})"
        return text if len(text) <= _REPR_MAX else text[: _REPR_MAX - 2] + "…)"


_REPR_MAX = 400
"""The longest ``repr()`` of a result."""


def _short(value: Any) -> str:
    """Return a value briefly: a number or short text as it is, a list by its length, a Struct by its type."""
    if isinstance(value, (list, tuple)):
        return f"[{len(value)} item{'s' if len(value) != 1 else ''}]"
    if isinstance(value, dict):
        return f"{{{len(value)} key{'s' if len(value) != 1 else ''}}}"
    if isinstance(value, msgspec.Struct):
        return f"{type(value).__name__}(…)"
    text = repr(value)
    return text if len(text) <= 40 else text[:38] + "…" + text[-1]


class Row(msgspec.Struct, kw_only=True, frozen=True):
    """One row of a result's table: plain typed fields, as its frame's columns."""


R = TypeVar("R", bound=msgspec.Struct)


def rows_of(frame: pl.DataFrame, row: type[R], *, columns: tuple[str, ...] | None = None) -> list[R]:
    """Return the rows of a frame as ``row`` Structs (enums and categoricals as strings).

    ``columns``: the frame's columns to read (default: the Struct's fields, in their order).
    """
    import polars as pl

    names = columns if columns is not None else row.__struct_fields__
    plain = frame.select(names).with_columns(pl.col(pl.Enum, pl.Categorical).cast(pl.String))
    converted: list[R] = msgspec.convert(plain.to_dicts(), list[row], strict=False)  # type: ignore[valid-type]
    return converted


def encode(result: msgspec.Struct | Any) -> bytes:
    """Return a result (or any plain data) as one line of JSON."""
    return msgspec.json.encode(result)


def json_schema(result: type[Result]) -> dict[str, Any]:
    """Return the JSON Schema of a result type (what its ``--json`` holds)."""
    return msgspec.json.schema(result)
