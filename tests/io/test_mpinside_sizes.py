"""MPInside size tables read together (``perfkit.io.mpinside.sizes``) against the tables read one by one."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import perfkit
from perfkit.errors import PerfkitFormatError
from perfkit.io.mpinside import read, sizes, write
from perfkit.io.mpinside.tables import iter_blocks
from perfkit.model import make_run

FUNCTIONS = ["MPI_Send", "MPI_Recv", "MPI_Isend", "MPI_Bcast", "MPI_Allreduce"]
BINS = np.array([0, 64, 4096, 65536])


def sized_run(used: np.ndarray, seed: int = 0):
    """A run whose rank ``r`` has size histograms for the functions ``used[r]`` (NaN for the others)."""
    rng = np.random.default_rng(seed)
    n = used.shape[0]
    profile = rng.integers(0, 1000, (n, len(FUNCTIONS), 5)).astype(float)
    hist = np.stack([rng.integers(0, 500, (n, len(FUNCTIONS), BINS.size)).astype(float),
                     np.round(rng.uniform(0, 2, (n, len(FUNCTIONS), BINS.size)), 6)], axis=-1)
    hist[~used] = np.nan
    return make_run(profile, ranks=range(n), functions=FUNCTIONS, metrics=["time", "bytes_sent", "calls_sent",
                    "bytes_recv", "calls_recv"], run={"label": "sized"}, sizes=hist, size_bins=BINS)


def one_by_one(path: Path) -> dict[tuple[int, str], tuple[list[str], np.ndarray, np.ndarray]]:
    """Every size table of ``path`` read on its own: (rank, stat) -> (functions, bins, values)."""
    out = {}
    with open(path, "rb") as fh:
        for block in iter_blocks(path, fh, 0):
            match = re.match(r"^rank\s+(\d+)\s+size(s)?\s+distribution(\s+times)?$", block.title, re.I)
            if match:
                table = sizes.read_table(block, match, path)
                out[table.rank, table.stat] = (table.functions, table.bins, table.values)
    return out


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(used=st.integers(1, 300).flatmap(lambda n: st.lists(
    st.lists(st.booleans(), min_size=len(FUNCTIONS), max_size=len(FUNCTIONS)), min_size=n, max_size=n)),
       batch=st.sampled_from([300, 4096, sizes.BATCH]), seed=st.integers(0, 5))
def test_tables_read_together_equal_the_tables_read_one_by_one(tmp_path: Path, monkeypatch, used, batch,
                                                               seed) -> None:
    """Ranks using different functions (tables of different columns, interleaved), batches of any size."""
    monkeypatch.setattr(sizes, "BATCH", batch)
    used = np.array(used, dtype=bool)
    used[[0, -1], 0] = True  # no size table: no sizes; the last rank without one: the file reads as cut
    run = sized_run(used, seed)
    path = write(run, tmp_path / "sized.mpinside")
    got = read(path)["sizes"].isel(run=0)
    tables = one_by_one(path)
    assert len(tables) == 2 * int(used.any(axis=1).sum())
    for (rank, stat), (functions, bins, values) in tables.items():
        expected = got.sel(rank=rank, stat=stat, function=functions, size_bin=bins).values.T
        np.testing.assert_array_equal(values, expected)
    np.testing.assert_array_equal(np.isnan(got.sel(stat="count").values).all(axis=-1), ~used)
    np.testing.assert_allclose(got.values, run["sizes"].isel(run=0).values, atol=5e-7)


def test_well_formed_tables_are_never_read_one_by_one(tmp_path: Path, monkeypatch) -> None:
    """The joined parse holds for blank lines and CRLF too; ``read_table`` is only the error path."""
    used = np.ones((40, len(FUNCTIONS)), dtype=bool)
    used[::3, 1] = False
    text = write(sized_run(used), tmp_path / "a.mpinside").read_text()
    text = text.replace("Sizes distribution <<<<\n", "Sizes distribution <<<<\n\n")  # blank before the columns
    text = re.sub(r"(?m)^(4096 .*)$", r"\1\n  ", text)  # blank lines between rows
    path = tmp_path / "b.mpinside"
    path.write_bytes(text.replace("\n", "\r\n").encode())
    expected = read(path)
    monkeypatch.setattr(sizes, "read_table", lambda *args: pytest.fail("a well-formed table was read alone"))
    got = read(path)
    np.testing.assert_array_equal(got["sizes"].values, expected["sizes"].values)
    np.testing.assert_array_equal(got["sizes"].isel(run=0).values, read(tmp_path / "a.mpinside")["sizes"].isel(
        run=0).values)


def _line_of(lines: list[str], pattern: str) -> int:
    """1-based number of the first line of ``lines`` matching ``pattern``."""
    return next(k for k, text in enumerate(lines) if re.search(pattern, text)) + 1


BROKEN = {  # what is done to rank 150's count table: (edit of its lines from the header on, message, line offset)
    "short row": (lambda t: [t[0], t[1], t[2].rsplit(" ", 1)[0], *t[3:]], "expected 6 columns as in its header", 2),
    "negative": (lambda t: [t[0], t[1], t[2], "64 1 2 -3 4 5", *t[4:]],
                 "column 4: expected a non-negative number, found '-3'", 3),
    "text": (lambda t: [t[0], t[1], t[2], "64 1 2 x 4 5", *t[4:]], "expected a number or '-----', found 'x'", 3),
    "bin twice": (lambda t: [t[0], t[1], t[2], t[2], *t[4:]], "a size bin appears twice", 2),
    "first column": (lambda t: [t[0], t[1].replace("Sizes", "Bins"), *t[2:]], "expected first column 'Sizes'", 1),
    "column name": (lambda t: [t[0], t[1].replace("Send", "Se;nd"), *t[2:]], "is not a function name", 1),
    "no rows": (lambda t: [t[0], t[1]], "expected rows of 6 columns, found none", 2),
    "binary": (lambda t: [t[0], t[1], t[2], "64 1 2 \x01 4 5", *t[4:]], "binary data where numbers were expected", 3),
}


@pytest.mark.parametrize("batch", [2048, sizes.BATCH])
@pytest.mark.parametrize("fault", sorted(BROKEN))
def test_a_malformed_table_among_many_is_named_by_its_line(tmp_path: Path, monkeypatch, fault: str,
                                                           batch: int) -> None:
    monkeypatch.setattr(sizes, "BATCH", batch)
    lines = write(sized_run(np.ones((300, len(FUNCTIONS)), dtype=bool)), tmp_path / "ok.mpinside").read_text() \
        .split("\n")
    at = _line_of(lines, r"^>>>> Rank 150 Sizes distribution") - 1
    edit, message, offset = BROKEN[fault]
    table = lines[at:at + 2 + BINS.size]
    lines[at:at + 2 + BINS.size] = edit(table)
    path = tmp_path / "bad.mpinside"
    path.write_text("\n".join(lines))
    with pytest.raises(PerfkitFormatError, match=re.escape(message)) as err:
        perfkit.open_profile(path, format="mpinside")
    assert err.value.line == at + 1 + offset and "table 'Rank 150 Sizes distribution'" in str(err.value)


@pytest.mark.parametrize("case, message", [
    ("rank twice", "size distribution (count) of rank 7 appears twice"),
    ("unknown rank", "size distribution for rank 99999999999999999999, which is not in the tables"),
])
def test_tables_that_name_ranks_wrongly_are_refused(tmp_path: Path, case: str, message: str) -> None:
    text = write(sized_run(np.ones((20, len(FUNCTIONS)), dtype=bool)), tmp_path / "ok.mpinside").read_text()
    new = "Rank 7 Sizes" if case == "rank twice" else "Rank 99999999999999999999 Sizes"
    path = tmp_path / "bad.mpinside"
    path.write_text(text.replace("Rank 12 Sizes", new) + ">>>> Something new <<<<\nA B\n1 2\n")
    with pytest.raises(PerfkitFormatError, match=re.escape(message)):
        read(path)


def test_a_file_cut_after_a_batch_is_named_truncated(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(sizes, "BATCH", 1000)
    run = sized_run(np.ones((200, len(FUNCTIONS)), dtype=bool))
    lines = write(run, tmp_path / "ok.mpinside").read_text().split("\n")
    cut = _line_of(lines, r"^>>>> Rank 120 Size distribution times") - 1
    path = tmp_path / "cut.mpinside"
    path.write_text("\n".join(lines[:cut]) + "\n")
    with pytest.raises(PerfkitFormatError, match=r"truncated at line \d+: the file ends inside the size "
                                                 r"distributions \(after rank 120's; 121 of 200 ranks") as err:
        read(path)
    assert err.value.line == cut
