"""The tables of a result, as CSV (``--csv``) and as markdown (``--markdown``).

Takes a result (a typed :class:`~timeline.results.base.Result` or the plain summary dict) and gives
its tables: the lists of rows its ``--json`` holds (:data:`TABLES` names them per kind of result),
each row flattened (a nested object's fields as ``outer.inner`` columns, a list of numbers as one
``0,1,2`` cell). :func:`render_csv` writes them all as one CSV: a ``table`` column names each row's
table, the other columns are the rows' fields as ``--json`` holds them (integer nanoseconds, ratios
as fractions: the CSV is for programs). :func:`render_tables_markdown` writes them as markdown tables
for people (the values formatted with their units, the first ``top`` rows of each), after the verdict
and findings where the result has them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from timeline.units import format_ns, format_ratio

__all__ = ["TABLES", "render_csv", "render_tables_markdown", "result_tables"]

TABLES: Mapping[str, tuple[str, ...]] = {
    "summary": (
        "ranks",
        "iterations",
        "top_collectives",
        "dimensions.totals",
        "dimensions.rows",
        "clock_offsets",
        "utilisation.iterations",
        "findings",
    ),
    "collectives": (
        "collectives",
        "point_to_point",
        "groups",
        "ambiguity",
        "stragglers.ranks",
        "stragglers.iterations",
        "utilisation",
        "clock_offsets",
        "horovod.batches",
        "horovod.tensors",
        "horovod.negotiation",
        "horovod.attribution.iterations",
    ),
    "diff": ("iterations", "ranks", "collectives"),
    "whatif": ("scenarios", "self_replay.iterations", "targets"),
    "seed": ("scenarios",),
    "flight_recorder": ("roots", "groups", "progress"),
}
"""The tables of each kind of result: the paths of its lists of rows in its ``--json`` layout."""

Row = dict[str, Any]


def _plain(result: Mapping[str, Any] | msgspec.Struct) -> dict[str, Any]:
    data = msgspec.to_builtins(result)
    if not isinstance(data, dict):  # pragma: no cover - every result is an object
        raise TypeError(f"not a result: {type(result).__name__}")
    return data


def _at(data: Mapping[str, Any], path: str) -> Any:
    value: Any = data
    for key in path.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _flat(row: Mapping[str, Any], prefix: str = "") -> Row:
    """Return a row with nested objects' fields as ``outer.inner`` and lists of numbers as one cell."""
    flat: Row = {}
    for key, value in row.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flat(value, f"{name}."))
        elif isinstance(value, (list, tuple)):  # msgspec.to_builtins keeps a Struct's tuples
            scalars = all(not isinstance(v, (Mapping, list, tuple)) for v in value)
            flat[name] = (
                ",".join("" if v is None else str(v) for v in value)
                if scalars
                else msgspec.json.encode(value).decode()
            )
        else:
            flat[name] = value
    return flat


def result_tables(result: Mapping[str, Any] | msgspec.Struct) -> list[tuple[str, list[Row]]]:
    """Return a result's tables: ``(name, rows)``, the rows flattened, the empty tables left out."""
    data = _plain(result)
    kind = str(data.get("kind", "summary"))
    tables = []
    for path in TABLES.get(kind, ()):
        rows = _at(data, path)
        if isinstance(rows, list) and rows and all(isinstance(r, Mapping) for r in rows):
            tables.append((path, [_flat(r) for r in rows]))
    return tables


def render_csv(result: Mapping[str, Any] | msgspec.Struct) -> str:
    """Return a result's tables as one CSV: ``table``, then the union of the tables' columns."""
    import polars as pl

    frames = [
        pl.DataFrame(rows, infer_schema_length=None).select(pl.lit(name).alias("table"), pl.all())
        for name, rows in result_tables(result)
    ]
    if not frames:
        return "table\n"
    return pl.concat(frames, how="diagonal_relaxed").write_csv()


def _cell(name: str, value: Any) -> str:
    """Format a value for people by its field's unit (``_ns``, ``_ratio``, ``_gbps``); ``-`` when unknown."""
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    leaf = name.rsplit(".", 1)[-1]
    if isinstance(value, (int, float)):
        if leaf.endswith("_ns") or name.endswith("_ns.base") or name.endswith("_ns.new"):
            return format_ns(value)
        if leaf.endswith("_ratio"):
            return format_ratio(value)
        if leaf.endswith("_gbps"):
            return f"{value:.2f} Gbit/s"
        if isinstance(value, float):
            return f"{value:.4g}"
        return f"{value:,}" if "bytes" in leaf else str(value)
    return str(value).replace("|", "\\|").replace("\n", " ")


def _markdown_table(name: str, rows: list[Row], top: int) -> list[str]:
    columns: list[str] = []
    for row in rows:
        columns += [c for c in row if c not in columns]
    shown = rows[:top]
    title = f"### {name}"
    if len(rows) > len(shown):
        title += f" (the first {len(shown)} of {len(rows)}; --json or --csv has all)"
    lines = [title, "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(c, row.get(c)) for c in columns) + " |" for row in shown]
    return [*lines, ""]


def _verdict_lines(data: Mapping[str, Any]) -> list[str]:
    verdict, findings = data.get("verdict"), data.get("findings")
    lines: list[str] = []
    if isinstance(verdict, Mapping) and verdict.get("summary"):
        lines += [f"**verdict**: {verdict.get('summary')}", ""]
    for k, finding in enumerate(findings if isinstance(findings, list) else [], start=1):
        lines.append(f"{k}. **{finding.get('cause')}**: {finding.get('summary')}")
        if finding.get("fix"):
            lines.append(f"   fix: {finding.get('fix')}")
    return [*lines, ""] if lines else []


def render_tables_markdown(
    result: Mapping[str, Any] | msgspec.Struct, *, title: str, top: int = 20, notes: Sequence[str] = ()
) -> str:
    """Return a result as markdown: a heading, the verdict and findings, notes, then its tables."""
    data = _plain(result)
    lines = [f"## {title}", "", *_verdict_lines(data)]
    lines += [f"- {note}" for note in notes]
    if notes:
        lines.append("")
    warnings = data.get("warnings") or []
    lines += [f"- warning: {w}" for w in warnings]
    if warnings:
        lines.append("")
    for name, rows in result_tables(result):
        lines += _markdown_table(name, rows, top)
    return "\n".join(lines).rstrip("\n") + "\n"
