"""A 2,048-rank mpiP report built from a real 16-rank one: the per-rank values read from it are
the real report's numbers (taken from its text here, independently of the reader), and bad rows
deep in it are named by their line."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from perfkit.errors import PerfkitFormatError
from perfkit.io import mpip
from perfkit.io.mpip import reader, tables
from perfkit.model import read_warnings, validate

DATA = Path(__file__).resolve().parents[1] / "data" / "mpip" / "real"
HPCCG_16 = next((DATA / "HPCCG-strong" / "16").glob("*.mpiP"))
CLOVER_16 = next((DATA / "CloverLeaf-strong" / "16").glob("*.mpiP"))
COPIES = 128  # 16 ranks -> 2,048


def grow(path: Path, copies: int) -> list[str]:
    """The lines of the report at ``path`` with rank r of copy k renumbered r + 16 k: rank rows
    repeated in each per-rank section, ``*`` rows counting ``copies`` times the calls and bytes,
    the MPI Time ``*`` row the sum of the ranks; the top-twenty tables are left empty."""
    lines, out, section, rows = path.read_text().splitlines(), [], "", []
    per_rank = ("@--- MPI Time", "@--- Callsite Time statistics (all,", "@--- Callsite Message Sent statistics (all,")

    def flush() -> None:
        at = 0 if section.startswith(per_rank[0]) else 2  # field holding the rank
        out.extend(" ".join([*f[:at], str(int(f[at]) + 16 * k), *f[at + 1:]]) for k in range(copies) for f in rows)
        rows.clear()

    for line in lines:
        f = line.split()
        if line.startswith("@ MPI Task Assignment"):
            out.extend(f"@ MPI Task Assignment : {int(f[-2]) + 16 * k} {f[-1]}" for k in range(copies))
            continue
        if line.startswith("@---"):
            section = line
        elif section.startswith("@--- Aggregate") and not line.startswith("-----"):
            continue
        is_row = section.startswith(per_rank) and len(f) > 3 and not f[0].startswith(("@", "Name", "Task", "-"))
        if is_row and "*" not in f:
            rows.append(f)
            continue
        if is_row and f[0] == "*":  # MPI Time: AppTime, MPITime of all the ranks
            f[1:3] = [f"{copies * sum(float(row[c]) for row in rows):.6g}" for c in (1, 2)]
        elif is_row:
            f[3] = str(copies * int(f[3]))
            if len(f) == 8:  # bytes: Sum
                f[7] = f"{copies * float(f[7]):.6g}"
        flush()
        out.append(" ".join(f) if is_row else line)
    return out


def original(path: Path, title: str) -> list[list[str]]:
    """Whitespace-split per-rank rows of a section of the original report (no ``*`` rows)."""
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title)) + 3
    stop = next(i for i in range(start, len(lines)) if lines[i].startswith("-----"))
    return [f for f in map(str.split, lines[start:stop]) if f and "*" not in f]


def truth(path: Path) -> dict[tuple[int, str, str], float]:
    """(rank, function, metric) -> value, summed over call sites from the report's text."""
    out: dict[tuple[int, str, str], float] = {}

    def add(key: tuple[int, str, str], value: float, how=lambda a, b: a + b) -> None:
        out[key] = how(out[key], value) if key in out else value

    for name, _site, rank, count, high, mean, low, *_ in original(path, "@--- Callsite Time statistics"):
        r, f = int(rank), "MPI_" + name
        add((r, f, "time"), int(count) * float(mean) / 1e3)
        add((r, f, "calls"), float(count))
        add((r, f, "time_max"), float(high) / 1e3, max)
        add((r, f, "time_min"), float(low) / 1e3, min)
    for name, _site, rank, count, *_, total in original(path, "@--- Callsite Message Sent statistics"):
        add((int(rank), "MPI_" + name, "bytes_sent"), float(total))
        add((int(rank), "MPI_" + name, "calls_sent"), float(count))
    for task, app, mpi, _pct in original(path, "@--- MPI Time"):
        out[(int(task), "Compute", "time")] = float(app) - float(mpi)
    return out


@pytest.fixture(scope="module", params=[HPCCG_16, CLOVER_16], ids=["HPCCG-16", "CloverLeaf-16"])
def large(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    path = tmp_path_factory.mktemp("large") / "large.mpiP"
    path.write_text("\n".join(grow(request.param, COPIES)) + "\n")
    return request.param, path


def test_every_rank_reads_the_real_reports_numbers(large: tuple[Path, Path]) -> None:
    source, path = large
    ds = validate(mpip.read(path, label="big"))
    assert read_warnings(ds) == []  # the grown report agrees with itself like the real one
    assert int(ds["nprocs"][0]) == 16 * COPIES and list(ds["rank"].values) == list(range(16 * COPIES))
    profile = ds["profile"].sel(run="big")
    checked = 0
    for (rank, function, metric), value in truth(source).items():
        cells = profile.sel(function=function, metric=metric).values[rank::16]  # the rank in every copy
        assert cells.shape == (COPIES,)
        assert np.all(cells == value), (rank, function, metric, value, cells[:3])
        checked += 1
    assert checked > 16 * 5
    small = mpip.read(source, label="small")["profile"].sel(run="small")
    np.testing.assert_array_equal(profile.values, np.tile(small.values, (COPIES, 1, 1)))


def test_callsite_table_repeats_the_real_rows(large: tuple[Path, Path]) -> None:
    source, path = large
    small, big = mpip.callsites(source), mpip.callsites(path)
    ranks = big[~big["aggregate"]]
    assert len(ranks) == COPIES * (~small["aggregate"]).sum()
    copy = ranks[ranks["rank"] % 16 == ranks["rank"]].reset_index(drop=True)  # copy 0: ranks 0-15
    mine = small[~small["aggregate"]].reset_index(drop=True)
    for column in ("site", "function", "rank", "count", "time", "time_max", "bytes_sent", "stack"):
        pd.testing.assert_series_equal(copy[column], mine[column])


def _line(lines: list[str], pattern: str, nth: int = 0) -> int:
    """Index (0-based) of the ``nth`` line matching ``pattern``."""
    return [i for i, line in enumerate(lines) if re.search(pattern, line)][nth]


@pytest.mark.parametrize(("edit", "words"), [
    (lambda f: [*f[:5], "fast", *f[6:]], "Mean"),
    (lambda f: [*f[:2], "3.5", *f[3:]], "integer"),
    (lambda f: f[:8], "expected 9 columns"),
    (lambda f: [*f[:2], "99999", *f[3:]], "rank absent"),
    (lambda f: [*f[:5], "-0.168", *f[6:]], "column 'Mean': expected a non-negative number, found '-0.168'"),
    (lambda f: [*f[:5], "inf", *f[6:]], "column 'Mean': expected a non-negative number, found 'inf'"),
    (lambda f: [*f[:5], "1e308", *f[6:]], "column 'Mean': expected a non-negative number, found '1e308'"),
])
def test_a_bad_row_deep_in_a_large_report_is_named_by_its_line(tmp_path: Path, edit, words: str) -> None:
    lines = grow(HPCCG_16, COPIES)
    i = _line(lines, r"^Allreduce \d+ 1777 ")  # rank 1777 (copy 111) of the first Allreduce site
    lines[i] = " ".join(edit(lines[i].split()))
    path = tmp_path / "bad.mpiP"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(PerfkitFormatError) as info:
        mpip.read(path)
    assert info.value.line == i + 1 and words in str(info.value)


def test_a_repeated_row_deep_in_a_large_report_is_named_by_its_line(tmp_path: Path) -> None:
    lines = grow(HPCCG_16, COPIES)
    i = _line(lines, r"^Send \d+ 1500 ", 1)
    lines.insert(i + 5, lines[i])
    path = tmp_path / "twice.mpiP"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(PerfkitFormatError, match="rank 1500 appears twice") as info:
        mpip.read(path)
    assert info.value.line == i + 6


def test_a_note_line_in_a_large_table_is_read_as_before(tmp_path: Path, large: tuple[Path, Path]) -> None:
    """A line the fast reading does not take (a threshold note) sends the table to the line reading: same values."""
    _source, path = large
    lines = path.read_text().splitlines()
    i = _line(lines, r"^@--- Callsite Time statistics") + 3
    lines.insert(i, "Total send/collective operation calls shown: 10 of 12")
    noted = tmp_path / "noted.mpiP"
    noted.write_text("\n".join(lines) + "\n")
    ds = mpip.read(noted, label="big")
    assert any("not read" in w for w in read_warnings(ds))
    np.testing.assert_array_equal(ds["profile"].values, mpip.read(path, label="big")["profile"].values)


def test_the_grown_tables_take_the_fast_reading(large: tuple[Path, Path]) -> None:
    """(So that the value tests above check the pandas reading, not the line-by-line one.)"""
    report = reader.scan(large[1])
    for key, columns in (("cs_time", reader._TIME_COLUMNS), ("cs_sent", reader._BYTES_COLUMNS)):
        rows = reader._site_arrays(report, key, columns)
        assert rows is not None and "line_no" not in rows and len(rows["rank"]) > 16 * COPIES


REAL = sorted(DATA.glob("*/*/*.mpiP"))


@pytest.mark.parametrize("path", REAL, ids=lambda p: "/".join(p.parts[-3:-1]))
def test_fast_and_line_readings_agree_on_the_real_reports(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Small tables are read line by line; forced through pandas they give the identical Dataset and table."""
    by_line, table = mpip.read(path, label="r"), mpip.callsites(path)
    monkeypatch.setattr(tables, "FAST_FROM", 0)
    report = reader.scan(path)
    assert "line_no" not in reader._site_arrays(report, "cs_time", reader._TIME_COLUMNS)
    assert "line" not in reader._task_times(report)
    xr.testing.assert_identical(mpip.read(path, label="r"), by_line)
    pd.testing.assert_frame_equal(mpip.callsites(path), table)


@pytest.mark.parametrize("row", [0, 1])
def test_a_row_too_long_is_named_first_or_not(tmp_path: Path, row: int) -> None:
    lines = grow(HPCCG_16, COPIES)
    i = _line(lines, r"^@--- Callsite Time statistics") + 3 + row
    lines[i] += " 7"
    path = tmp_path / "long.mpiP"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(PerfkitFormatError, match="expected 9 columns") as info:
        mpip.read(path)
    assert info.value.line == i + 1
