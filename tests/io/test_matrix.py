"""Stand-alone communication matrices: MapLib fixtures, orientation, formats, round trips, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import scipy.sparse
import sparse
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import perfkit
from perfkit.errors import PerfkitFormatError
from perfkit.io import matrix as mx
from perfkit.model import TRAFFIC_QUANTITIES, make_run, validate

DATA = Path(__file__).parents[1] / "data" / "matrices"


def _fixture(app: str, what: str = "size") -> Path:
    return DATA / f"MapLib_{app}_64_p2p.{what}.csv"


def _loaded(app: str, what: str = "size") -> np.ndarray:
    return np.loadtxt(_fixture(app, what), delimiter=",")


def _warnings(da: xr.DataArray) -> list[str]:
    return json.loads(da.attrs["warnings"])


# --- the MapLib fixtures ----------------------------------------------------------------------------


@pytest.mark.parametrize("app", ["amg", "btmz", "cg", "lulesh"])
def test_maplib_bytes_and_counts(app: str) -> None:
    m = perfkit.open_matrix(_fixture(app), count_path=_fixture(app, "count"))
    assert m.dims == ("sender", "receiver", "quantity")
    assert list(m["quantity"].values) == list(TRAFFIC_QUANTITIES)
    assert m.shape == (64, 64, 3)
    assert isinstance(m.data, np.ndarray)
    np.testing.assert_array_equal(m.sel(quantity="bytes").values, _loaded(app))
    np.testing.assert_array_equal(m.sel(quantity="count").values, _loaded(app, "count"))
    time = m.sel(quantity="time").values
    traffic = (_loaded(app) > 0) | (_loaded(app, "count") > 0)
    assert np.isnan(time[traffic]).all() and (time[~traffic] == 0).all()
    assert m.attrs["quantities_read"] == "bytes,count"


def test_receiver_sender_transposes() -> None:
    as_is = mx.open_matrix(_fixture("lulesh"))
    flipped = mx.open_matrix(_fixture("lulesh"), orientation="receiver_sender")
    np.testing.assert_array_equal(flipped.sel(quantity="bytes").values, _loaded("lulesh").T)
    np.testing.assert_array_equal(flipped.values, as_is.transpose("receiver", "sender", "quantity").values)
    assert flipped.attrs["file_orientation"] == "receiver_sender"


def test_cg_diagonal_kept_and_reported() -> None:
    m = mx.open_matrix(_fixture("cg"))
    diag = np.diagonal(_loaded("cg"))
    assert np.count_nonzero(diag) == 8
    np.testing.assert_array_equal(np.diagonal(m.sel(quantity="bytes").values), diag)
    assert m.attrs["self_traffic"] == diag.sum()
    (note,) = _warnings(m)
    assert "self-traffic on 8 ranks" in note and "kept" in note


@pytest.mark.parametrize("app", ["lulesh", "amg"])
def test_asymmetric_kept_as_is(app: str) -> None:
    m = mx.open_matrix(_fixture(app))
    values = m.sel(quantity="bytes").values
    assert not np.array_equal(values, values.T)
    np.testing.assert_array_equal(values, _loaded(app))
    assert m.attrs["symmetric"] == 0


def test_symmetric_reported() -> None:
    assert mx.open_matrix(_fixture("btmz")).attrs["symmetric"] == 1
    assert _warnings(mx.open_matrix(_fixture("btmz"))) == []


def test_composes_with_make_run_and_dataset() -> None:
    m = mx.open_matrix(_fixture("amg"), count_path=_fixture("amg", "count"))
    ds = validate(mx.matrix_to_dataset(m, label="amg64"))
    assert ds["nprocs"].item() == 64 and ds["format"].item() == "matrix"
    assert ds.sizes["function"] == 0
    np.testing.assert_array_equal(ds["traffic"].isel(run=0).values, m.values)
    assert "self-traffic" in ds.attrs["warnings"]
    profile = np.zeros((64, 1, 6))
    run = validate(make_run(profile, ranks=range(64), functions=["Compute"], traffic=m.data))
    np.testing.assert_array_equal(run["traffic"].sel(quantity="bytes").isel(run=0).values, _loaded("amg"))


def test_quantity_argument_places_the_slab() -> None:
    m = mx.open_matrix(_fixture("cg", "count"), quantity="count")
    np.testing.assert_array_equal(m.sel(quantity="count").values, _loaded("cg", "count"))
    assert np.isnan(m.sel(quantity="bytes").values[_loaded("cg", "count") > 0]).all()


# --- formats and backing ----------------------------------------------------------------------------------


def test_whitespace_csv_and_comments(tmp_path: Path) -> None:
    path = tmp_path / "m.txt"
    path.write_text("# bytes\n0 5\t1e3\n\n2   0 0\n0 0 7\n")
    m = mx.open_matrix(path)
    np.testing.assert_array_equal(m.sel(quantity="bytes").values, [[0, 5, 1e3], [2, 0, 0], [0, 0, 7]])


def test_matrix_market_coordinate_is_sparse(tmp_path: Path) -> None:
    dense = _loaded("lulesh")
    path = tmp_path / "lulesh.mtx"
    scipy.io.mmwrite(path, scipy.sparse.coo_matrix(dense))
    m = mx.open_matrix(path)
    assert isinstance(m.data, sparse.COO)
    np.testing.assert_array_equal(m.data.todense()[:, :, 0], dense)
    validate(mx.matrix_to_dataset(m))


def test_large_dense_becomes_sparse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mx, "SPARSE_ABOVE", 32)
    path = tmp_path / "cg.npy"
    np.save(path, _loaded("cg"))
    m = mx.open_matrix(path, count_path=_fixture("cg", "count"))
    assert isinstance(m.data, sparse.COO)
    dense = m.data.todense()
    np.testing.assert_array_equal(dense[:, :, 0], _loaded("cg"))
    np.testing.assert_array_equal(dense[:, :, 1], _loaded("cg", "count"))
    assert m.attrs["self_traffic"] == np.trace(_loaded("cg"))


def test_scipy_npz_and_named_npz(tmp_path: Path) -> None:
    dense = _loaded("amg")
    scipy_path = tmp_path / "amg_sparse.npz"
    scipy.sparse.save_npz(scipy_path, scipy.sparse.csr_matrix(dense))
    assert isinstance(mx.read_matrix(scipy_path), sparse.COO)
    named = tmp_path / "amg_named.npz"
    np.savez(named, bytes=dense, count=_loaded("amg", "count"))
    np.testing.assert_array_equal(mx.read_matrix(named, quantity="count"), _loaded("amg", "count"))


def test_format_from_content(tmp_path: Path) -> None:
    path = tmp_path / "matrix_without_suffix"
    np.save(tmp_path / "m.npy", _loaded("cg"))
    path.write_bytes((tmp_path / "m.npy").read_bytes())
    np.testing.assert_array_equal(mx.read_matrix(path), _loaded("cg"))


nonneg = st.floats(min_value=0, max_value=1e15, allow_nan=False, allow_infinity=False)
square = st.integers(1, 12).flatmap(lambda n: arrays(np.float64, (n, n), elements=nonneg))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=square, fmt=st.sampled_from(["csv", "tsv", "npy", "npz", "mtx", "mtx-coo"]))
def test_round_trip(tmp_path: Path, values: np.ndarray, fmt: str) -> None:
    path = tmp_path / f"m.{fmt.split('-')[0]}"
    if fmt in ("csv", "tsv"):
        sep = "," if fmt == "csv" else "\t"
        path.write_text("\n".join(sep.join(repr(float(v)) for v in row) for row in values) + "\n")
    elif fmt == "npy":
        np.save(path, values)
    elif fmt == "npz":
        np.savez(path, values)
    else:
        stored = scipy.sparse.coo_matrix(values) if fmt == "mtx-coo" else values
        scipy.io.mmwrite(path, stored, precision=17)
    for orientation, expected in (("sender_receiver", values), ("receiver_sender", values.T)):
        m = mx.open_matrix(path, orientation=orientation)
        got = m.data.todense() if isinstance(m.data, sparse.COO) else m.values
        np.testing.assert_array_equal(got[:, :, 0], expected)


# --- bad inputs ---------------------------------------------------------------------------------------------


def _error(tmp_path: Path, text: str, name: str = "m.csv") -> PerfkitFormatError:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(PerfkitFormatError) as info:
        mx.open_matrix(path)
    assert info.value.path == str(path)
    return info.value


def test_ragged_row_names_line(tmp_path: Path) -> None:
    err = _error(tmp_path, "1,2,3\n4,5,6\n7,8\n")
    assert err.line == 3 and "2 columns" in str(err) and "line 1" in str(err)


def test_not_a_number_names_line_and_column(tmp_path: Path) -> None:
    err = _error(tmp_path, "1,2\n3,x\n")
    assert err.line == 2 and "column 2" in str(err) and "'x'" in str(err)


def test_header_is_rejected(tmp_path: Path) -> None:
    err = _error(tmp_path, "r0,r1\n1,2\n3,4\n")
    assert err.line == 1 and "no header" in str(err)


def test_empty_cell(tmp_path: Path) -> None:
    err = _error(tmp_path, "1,,2\n3,4,5\n6,7,8\n")
    assert err.line == 1 and "empty cell" in str(err)


@pytest.mark.parametrize(("text", "line", "word"), [("0,1\n-2,0\n", 2, "negative"), ("0,1\nnan,0\n", 2, "not finite"),
                                                    ("0,inf\n1,0\n", 1, "not finite")])
def test_bad_values_name_line(tmp_path: Path, text: str, line: int, word: str) -> None:
    err = _error(tmp_path, text)
    assert err.line == line and word in str(err)


def test_not_square(tmp_path: Path) -> None:
    err = _error(tmp_path, "1,2,3\n4,5,6\n")
    assert err.line is None and "2 rows x 3 columns" in str(err)


def test_empty_and_blank(tmp_path: Path) -> None:
    assert "empty" in str(_error(tmp_path, ""))
    assert "no matrix rows" in str(_error(tmp_path, "\n# nothing\n", "blank.csv"))


def test_binary_garbage(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(PerfkitFormatError):
        mx.open_matrix(path)
    for name in ("m.npy", "m.npz", "m.mtx"):
        _error(tmp_path, "garbage\n", name)


def test_npy_not_2d_and_npz_ambiguous(tmp_path: Path) -> None:
    np.save(tmp_path / "cube.npy", np.zeros((2, 2, 2)))
    with pytest.raises(PerfkitFormatError, match="3 dimensions"):
        mx.open_matrix(tmp_path / "cube.npy")
    np.savez(tmp_path / "two.npz", a=np.zeros((2, 2)), b=np.zeros((2, 2)))
    with pytest.raises(PerfkitFormatError, match="one array"):
        mx.open_matrix(tmp_path / "two.npz")


def test_sparse_negative_names_cell(tmp_path: Path) -> None:
    path = tmp_path / "neg.mtx"
    scipy.io.mmwrite(path, scipy.sparse.coo_matrix(([1.0, -2.0], ([0, 2], [1, 0])), shape=(3, 3)))
    with pytest.raises(PerfkitFormatError, match="row 3, column 1"):
        mx.open_matrix(path)


def test_count_shape_mismatch(tmp_path: Path) -> None:
    (tmp_path / "c.csv").write_text("1,2\n3,4\n")
    with pytest.raises(PerfkitFormatError, match="count matrix"):
        mx.open_matrix(_fixture("cg"), count_path=tmp_path / "c.csv")


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="orientation"):
        mx.open_matrix(_fixture("cg"), orientation="rows")
    with pytest.raises(ValueError, match="quantity"):
        mx.open_matrix(_fixture("cg"), quantity="volume")
    with pytest.raises(ValueError, match="fmt"):
        mx.open_matrix(_fixture("cg"), fmt="xlsx")
    with pytest.raises(FileNotFoundError):
        mx.open_matrix(DATA / "absent.csv")


# --- the fast paths agree with what the files say ------------------------------------------------------


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(1, 12), seed=st.integers(0, 2**32 - 1), symmetric=st.booleans(), integer=st.booleans())
def test_matrix_market_unsorted_with_repeats_sums_them(tmp_path: Path, n: int, seed: int, symmetric: bool,
                                                       integer: bool) -> None:
    """Entries in any order, some (i, j) listed twice: the matrix is their sum, as accumulated by hand."""
    rng = np.random.default_rng(seed)
    k = int(rng.integers(1, 3 * n * n + 1))
    i, j = rng.integers(1, n + 1, k), rng.integers(1, n + 1, k)
    if symmetric:
        i, j = np.maximum(i, j), np.minimum(i, j)
    values = rng.integers(0, 10**6, k) if integer else np.round(rng.uniform(0, 1e6, k), 3)
    expected = np.zeros((n, n))
    np.add.at(expected, (i - 1, j - 1), values)
    if symmetric:
        expected = expected + np.tril(expected, -1).T
    header = f"%%MatrixMarket matrix coordinate {'integer' if integer else 'real'} " \
             f"{'symmetric' if symmetric else 'general'}\n% shuffled\n{n} {n} {k}\n"
    path = tmp_path / "m.mtx"
    path.write_text(header + "".join(f"{a} {b} {v}\n" for a, b, v in zip(i, j, values)))
    got = mx.read_matrix(path)
    assert isinstance(got, sparse.COO)
    np.testing.assert_allclose(got.todense(), expected, rtol=1e-12)
    linear = got.coords[0] * n + got.coords[1]
    assert np.all(np.diff(linear) > 0)  # row-major, no repeats


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=arrays(np.int64, st.tuples(st.integers(1, 9), st.integers(1, 9)).map(lambda s: (s[0], s[0])),
                     elements=st.integers(0, 10**12)),
       layout=st.sampled_from(["comma", "spaces", "tabs", "comments"]))
def test_csv_layouts_read_exactly(tmp_path: Path, values: np.ndarray, layout: str) -> None:
    rows = [",".join(map(str, r)) if layout == "comma" else ("\t" if layout == "tabs" else "  ").join(map(str, r))
            for r in values]
    if layout == "comments":
        rows = ["# sender x receiver [B]", *[" ".join(map(str, r)) for r in values], "# end", ""]
    path = tmp_path / "m.csv"
    path.write_text("\n".join(rows) + "\n")
    np.testing.assert_array_equal(mx.read_matrix(path), values.astype(np.float64))


def test_hash_inside_a_row_is_refused(tmp_path: Path) -> None:
    """'#' opens comment lines only: after numbers it is not a comment but a bad cell, named with its line."""
    path = tmp_path / "m.csv"
    path.write_text("# comment\n1,2\n3,4 # note\n")
    with pytest.raises(PerfkitFormatError, match="not a number") as err:
        mx.read_matrix(path)
    assert err.value.line == 3
