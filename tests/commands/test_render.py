"""Tables of the analysis commands: numbers as a reader wants them, data formats that parse."""

from __future__ import annotations

import csv
import io
import json
import math

import pytest

from perfkit.commands.render import Column, Table, cell, render
from perfkit.text import nbytes, plural, seconds, significant


@pytest.mark.parametrize(("value", "text"), [
    (0.0, "0 s"), (6.07e-05, "60.7 µs"), (0.0123, "12.3 ms"), (1.93, "1.93 s"), (2.0, "2.00 s"), (61.0, "61.0 s"),
    (1191.285548, "19.9 min"), (9000.0, "2.50 h"), (-0.77, "-770 ms"),
])
def test_seconds_take_a_unit_that_fits(value: float, text: str) -> None:
    assert seconds(value) == text


def test_bytes_take_si_prefixes_and_signs() -> None:
    assert [nbytes(v) for v in (0, 512, 39.5e6, 1.2e12)] == ["0 B", "512 B", "39.5 MB", "1.20 TB"]
    assert nbytes(-1234, signed=True) == "-1.23 kB"
    assert cell(2048.0, "B", signed=True) == "+2.05 kB"


def test_cells_never_show_nan_exponents_or_floats_for_counts() -> None:
    assert cell(float("nan"), "s") == "not measured"
    assert cell(None, "ratio", absent="unknown") == "unknown"
    assert cell(48.0, "count") == "48"
    assert cell(2048.0, "count") == "2,048"
    assert cell(0.0, "count", signed=True) == "0"
    assert cell(0.6471, "percent") == "65%"
    assert cell(0.000507, "percent") == "0.051%"
    assert cell(-0.3, "percent", signed=True) == "-30%"
    assert cell(0.62059, "ratio") == "0.62"
    assert significant(1234.6) == "1235" and significant(1e-9) == "0.00000000100"
    assert "e" not in significant(3.2e-12)


def test_plural_agrees_with_the_count() -> None:
    assert (plural(1, "rank"), plural(4, "rank"), plural(2048, "run")) == ("1 rank", "4 ranks", "2,048 runs")


def _tables() -> list[Table]:
    columns = [Column("name", "name"), Column("time", "time", "s"), Column("ranks", "ranks", "count"),
               Column("note", "note", shown="data"), Column("mark", "mark", shown="text")]
    rows = [{"name": "a|b", "time": 0.5, "ranks": 4.0, "note": "x", "mark": "*"},
            {"name": "c", "time": math.nan, "ranks": 1.0, "note": "", "mark": ""}]
    other = Table("other", "Other", [Column("name", "name"), Column("bytes", "bytes", "B")],
                  [{"name": "d", "bytes": 1e6}])
    return [Table("first", "First", columns, rows, ["* a note"]), other]


def test_text_is_aligned_and_hides_data_only_columns() -> None:
    text = render(_tables()[:1], "text")
    lines = text.splitlines()
    assert lines[0] == "First" and lines[-1] == "* a note"
    assert "not measured" in text and "note" not in lines[1] and "500 ms" in text
    assert lines[2].index("500 ms") + len("500 ms") == lines[1].index("time") + len("time")  # numbers right-aligned


def test_json_csv_and_markdown_parse() -> None:
    tables = _tables()
    data = json.loads(render(tables, "json"))
    assert data["first"][1] == {"name": "c", "time": None, "ranks": 1, "note": None}
    assert data["other"] == [{"name": "d", "bytes": 1e6}]
    rows = list(csv.DictReader(io.StringIO(render(tables, "csv"))))
    assert [r["table"] for r in rows] == ["first", "first", "other"]
    assert rows[0]["ranks"] == "4" and rows[1]["time"] == "" and rows[2]["bytes"] == "1000000.0"
    single = list(csv.DictReader(io.StringIO(render(tables[:1], "csv"))))
    assert list(single[0]) == ["name", "time", "ranks", "note"]
    markdown = render(tables[:1], "markdown").splitlines()
    assert markdown[0] == "**First**" and markdown[3] == "|---|---:|---:|---|"
    assert markdown[4] == "| a\\|b | 500 ms | 4 | \\* |" and markdown[-1] == "\\* a note"
    with pytest.raises(ValueError, match="unknown output format"):
        render(tables, "yaml")


def test_an_infinite_value_is_null_in_json_and_empty_in_csv_with_a_note() -> None:
    table = Table("t", "T", [Column("run", "run"), Column("speedup", "speed-up", "ratio")],
                  [{"run": "a", "speedup": math.inf}, {"run": "b", "speedup": 2.0}])
    rows = json.loads(render([table], "json"))["t"]  # strict JSON: Infinity would not parse in every reader
    assert "Infinity" not in render([table], "json")
    assert rows[0] == {"run": "a", "speedup": None, "note": "speedup is infinite (not a number JSON or CSV can hold)"}
    assert rows[1] == {"run": "b", "speedup": 2.0}
    text = render([table], "csv")
    assert "inf" not in text.replace("infinite", "")
    assert next(csv.DictReader(io.StringIO(text))) == {"run": "a", "speedup": "", "note": rows[0]["note"]}
