"""Tables of the analysis commands, rendered as aligned text, markdown, JSON or CSV.

Text and markdown show numbers as a reader wants them: times with a unit that fits (``61 µs``,
``1.93 s``, ``19.9 min``), bytes with SI prefixes (``39.5 MB``), counts as integers, ratios to two
decimals, and a missing value in words (``not measured`` unless the column says otherwise).
JSON and CSV keep the numbers as computed, in SI base units (the unit is in the column name),
with a missing value as ``null`` (JSON) or an empty field (CSV).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

FORMATS = ("text", "json", "markdown", "csv")
SHOWN = ("all", "text", "data")  #: where a column appears: everywhere, text and markdown only, JSON and CSV only


@dataclass(frozen=True)
class Column:
    """One column: ``key`` (JSON/CSV name), ``header`` (text/markdown), ``unit`` and where it is shown.

    ``unit`` is ``s`` (seconds), ``B`` (bytes), ``count``, ``ratio``, ``percent`` (a fraction 0-1
    shown as a percentage), ``text``, or ``row`` (the row's ``unit`` field says which). ``signed``
    shows a plus sign on differences; ``mark`` returns a suffix for a row's text cell (e.g. ``*``).
    """

    key: str
    header: str
    unit: str = "text"
    signed: bool = False
    missing: str = "not measured"
    shown: str = "all"
    mark: Callable[[dict[str, Any]], str] | None = None


@dataclass
class Table:
    """A named table: ``rows`` are dicts keyed by column key; ``notes`` follow it in text and markdown."""

    name: str
    title: str
    columns: list[Column]
    rows: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)


def plural(count: int, word: str, words: str | None = None) -> str:
    """``1 rank``, ``4 ranks`` (``words`` for an irregular plural)."""
    return f"{count:,} {word if count == 1 else (words or word + 's')}"


def missing(value: Any) -> bool:
    """Whether ``value`` is absent: None, NaN or an empty string."""
    return value is None or (isinstance(value, float) and math.isnan(value)) or value == ""


def significant(value: float, digits: int = 3, signed: bool = False) -> str:
    """``value`` to ``digits`` significant digits in fixed-point notation (never ``1e+03``); 0 unsigned."""
    if value == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    return f"{value:{'+' if signed else ''}.{decimals}f}"


def seconds(value: float, signed: bool = False) -> str:
    """A time [s] with a unit that fits: ``61 µs``, ``12.3 ms``, ``1.93 s``, ``19.9 min``, ``2.5 h``."""
    size = abs(value)
    if size == 0:
        return "0 s"
    for floor, scale, unit in ((7200.0, 3600.0, "h"), (120.0, 60.0, "min"), (1.0, 1.0, "s"), (1e-3, 1e-3, "ms")):
        if size >= floor:
            return f"{significant(value / scale, signed=signed)} {unit}"
    return f"{significant(value / 1e-6, signed=signed)} µs"


def nbytes(value: float, signed: bool = False) -> str:
    """Bytes with an SI prefix: ``512 B``, ``39.5 MB``, ``1.2 TB``."""
    size = abs(value)
    for scale, unit in ((1e15, "PB"), (1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if size >= scale:
            return f"{significant(value / scale, signed=signed)} {unit}"
    return f"{value:{'+' if signed else ''},.0f} B"


def cell(value: Any, unit: str, signed: bool = False, absent: str = "not measured") -> str:
    """One value as text (see the module docstring)."""
    if missing(value):
        return absent
    signed = signed and value != 0
    if isinstance(value, bool):
        return "yes" if value else "no"
    if unit == "s":
        return seconds(float(value), signed)
    if unit == "B":
        return nbytes(float(value), signed)
    if unit == "count":
        return f"{float(value):{'+' if signed else ''},.0f}"
    if unit == "ratio":
        return f"{float(value):{'+' if signed else ''}.2f}"
    if unit == "percent":
        percent = 100 * float(value)
        if abs(percent) < 10:
            return f"{significant(percent, 2, signed)}%"
        return f"{percent:{'+' if signed else ''}.0f}%"
    return str(value)


def _text_cells(table: Table, columns: Sequence[Column]) -> list[list[str]]:
    rows = []
    for row in table.rows:
        cells = []
        for column in columns:
            unit = row.get("unit", "text") if column.unit == "row" else column.unit
            text = cell(row.get(column.key), unit, column.signed, column.missing)
            cells.append(text + (column.mark(row) if column.mark and not missing(row.get(column.key)) else ""))
        rows.append(cells)
    return rows


def _right(column: Column) -> bool:
    return column.unit != "text"


def render_text(table: Table) -> str:
    """The table aligned in columns (numbers right, text left) under its title, then its notes."""
    columns = [c for c in table.columns if c.shown != "data"]
    cells = _text_cells(table, columns)
    widths = [max([len(c.header), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if _right(c) else v.ljust(w) for v, w, c in zip(values, widths, columns)]
        return "  ".join(parts).rstrip()

    lines = [table.title, line([c.header for c in columns]), *(line(r) for r in cells)]
    return "\n".join(lines + table.notes) + "\n"


def render_markdown(table: Table) -> str:
    """The table as a GitHub markdown table under a bold title, then its notes."""
    columns = [c for c in table.columns if c.shown != "data"]

    def line(values: Sequence[str]) -> str:
        return "| " + " | ".join(_escape(v) for v in values) + " |"

    lines = [f"**{table.title}**", "", line([c.header for c in columns]),
             "|" + "|".join("---:" if _right(c) else "---" for c in columns) + "|",
             *(line(r) for r in _text_cells(table, columns))]
    for note in table.notes:
        lines += ["", _escape(note)]
    return "\n".join(lines) + "\n"


def _escape(text: str) -> str:
    """``text`` with the characters markdown would read as markup escaped."""
    return text.replace("|", "\\|").replace("*", "\\*").replace("_", "\\_")


def _plain(value: Any) -> Any:
    """A JSON/CSV value: numpy scalars as Python numbers, NaN as None."""
    if hasattr(value, "item"):
        value = value.item()
    return None if missing(value) else value


def records(table: Table) -> list[dict[str, Any]]:
    """The rows with their data columns, values as plain Python (NaN as None, counts as integers)."""
    columns = [c for c in table.columns if c.shown != "text"]
    out = []
    for row in table.rows:
        record = {}
        for column in columns:
            value = _plain(row.get(column.key))
            if column.unit == "count" and isinstance(value, float) and value.is_integer():
                value = int(value)
            record[column.key] = value
        out.append(record)
    return out


def render(tables: Sequence[Table], fmt: str) -> str:
    """``tables`` in ``fmt`` (``FORMATS``). JSON: an object mapping each table's name to its rows;
    CSV: one table as is, several with a leading ``table`` column and the union of their columns."""
    if fmt == "text":
        return "\n".join(render_text(t) for t in tables)
    if fmt == "markdown":
        return "\n".join(render_markdown(t) for t in tables)
    if fmt == "json":
        return json.dumps({t.name: records(t) for t in tables}, indent=2, ensure_ascii=False) + "\n"
    if fmt == "csv":
        several = len(tables) > 1
        keys = (["table"] if several else []) + list(dict.fromkeys(
            c.key for t in tables for c in t.columns if c.shown != "text"))
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=keys, lineterminator="\n")
        writer.writeheader()
        for t in tables:
            for record in records(t):
                writer.writerow({**({"table": t.name} if several else {}), **record})
        return out.getvalue()
    raise ValueError(f"unknown output format {fmt!r}; choose one of {', '.join(FORMATS)}")
