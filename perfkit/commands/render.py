"""Tables of the analysis commands, rendered as aligned text, markdown, JSON or CSV.

Text and markdown show numbers as a reader wants them: times with a unit that fits (``61 µs``,
``1.93 s``, ``19.9 min``), bytes with SI prefixes (``39.5 MB``), counts as integers, ratios to two
decimals, and a missing value in words (``not measured`` unless the column says otherwise).
JSON and CSV keep the numbers as computed, in SI base units (the unit is in the column name),
with a missing value as ``null`` (JSON) or an empty field (CSV); an infinite value is never printed
(JSON has no Infinity): it is missing too, and the row's ``note`` field says which value was
infinite. The numbers in words come from ``perfkit.text``.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from perfkit.text import count, missing, nbytes, percent, ratio, seconds

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
        return count(value, signed)
    if unit == "ratio":
        return ratio(value, signed)
    if unit == "percent":
        return percent(value, signed)
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


def _infinite(value: Any) -> bool:
    return isinstance(value, float) and math.isinf(value)


def _noted(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with its infinite values as None, said in its ``note`` field (after any note it has)."""
    infinite = [key for key, value in record.items() if _infinite(value)]
    if not infinite:
        return record
    said = [f"{key} is {'-' if record[key] < 0 else ''}infinite (not a number JSON or CSV can hold)"
            for key in infinite]
    notes = [record["note"]] if record.get("note") else []
    return {**record, **dict.fromkeys(infinite), "note": "; ".join(notes + said)}


def records(table: Table) -> list[dict[str, Any]]:
    """The rows with their data columns, values as plain Python (NaN as None, counts as integers,
    an infinite value as None with a ``note`` saying so)."""
    columns = [c for c in table.columns if c.shown != "text"]
    out = []
    for row in table.rows:
        record = {}
        for column in columns:
            value = _plain(row.get(column.key))
            if column.unit == "count" and isinstance(value, float) and value.is_integer():
                value = int(value)
            record[column.key] = value
        out.append(_noted(record))
    return out


def finite(data: Any) -> Any:
    """``data`` (dicts and lists of values) with every NaN or infinite float as None; a dict that held an
    infinite value gets a ``note`` saying which (as ``records`` does)."""
    if isinstance(data, dict):
        kept = _noted({key: value if isinstance(value, float) else finite(value) for key, value in data.items()})
        return {key: None if isinstance(value, float) and math.isnan(value) else value for key, value in kept.items()}
    if isinstance(data, (list, tuple)):
        return [None if isinstance(value, float) and not math.isfinite(value) else finite(value) for value in data]
    return data


def json_text(data: Any) -> str:
    """``data`` as indented JSON; a NaN or infinity in it is an error (``records`` and ``finite`` remove them)."""
    return json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def render(tables: Sequence[Table], fmt: str) -> str:
    """``tables`` in ``fmt`` (``FORMATS``). JSON: an object mapping each table's name to its rows;
    CSV: one table as is, several with a leading ``table`` column and the union of their columns."""
    if fmt == "text":
        return "\n".join(render_text(t) for t in tables)
    if fmt == "markdown":
        return "\n".join(render_markdown(t) for t in tables)
    if fmt == "json":
        return json_text({t.name: records(t) for t in tables})
    if fmt == "csv":
        return _csv(tables)
    raise ValueError(f"unknown output format {fmt!r}; choose one of {', '.join(FORMATS)}")


def _csv(tables: Sequence[Table]) -> str:
    """One table as is, several with a leading ``table`` column and the union of their columns (and of the
    ``note`` fields ``records`` adds)."""
    several = len(tables) > 1
    rows = [({"table": t.name} if several else {}) | record for t in tables for record in records(t)]
    keys = (["table"] if several else []) + list(dict.fromkeys(
        [c.key for t in tables for c in t.columns if c.shown != "text"] + [key for row in rows for key in row]))
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=keys, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()
