"""MPInside reader: the seed's tables, the format's corners, bad input, writer round trip."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import perfkit
from perfkit.io.mpinside import host_runs, reader, tables, write
from perfkit.model import make_run, read_warnings

DATA = Path(__file__).resolve().parents[2] / "data" / "seed"
SEED = DATA / "mpinside_seed_tables.txt"

TABLES = """>>>> Communication time totals (s) <<<<
CPU Compute MPI_Init b_Bcast Bcast Recv
0 10.5 0.1 2.0 0.02 1.0
1 11.0 0.1 1.5 0.02 1.5
2 12.5 0.1 0.0 0.02 0.5
>>>> Bytes sent <<<<
CPU Compute MPI_Init b_Bcast Bcast Recv
0 ----- 0 0 800 0
1 ----- 0 0 0 0
2 ----- 0 0 0 0
>>>> Calls sending data <<<<
CPU Compute MPI_Init b_Bcast Bcast Recv
0 ----- 0 0 10 0
1 ----- 0 0 0 0
2 ----- 0 0 0 0
>>>> Bytes received <<<<
CPU Compute MPI_Init b_Bcast Bcast Recv
0 ----- 0 0 0 64
1 ----- 0 0 400 32
2 ----- 0 0 400 0
>>>> Calls receiving data <<<<
CPU Compute MPI_Init b_Bcast Bcast Recv
0 ----- 0 0 0 2
1 ----- 0 0 10 1
2 ----- 0 0 10 0
"""


def write_text(tmp_path: Path, text: str, name: str = "run.txt") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_seed_tables_numbers_as_printed():
    ds = perfkit.open_profile(SEED)
    prof = ds["profile"].isel(run=0)
    assert prof.sel(rank=0, function="Compute", metric="time") == 868.484133
    assert prof.sel(rank=1, function="MPI_Waitall", metric="time") == 0.348279
    assert prof.sel(rank=3, function="MPI_Recv", metric="time") == 339.249457
    assert prof.sel(rank=0, function="MPI_Recv", metric="bytes_recv") == 28953401700
    assert prof.sel(rank=3, function="MPI_Recv", metric="calls_recv") == 17384042
    assert prof.sel(rank=1, function="MPI_Waitall", metric="calls_sent") == 239981
    # "-----" is not measured, not zero
    assert np.isnan(prof.sel(rank=0, function="Compute", metric="bytes_sent"))
    # rank 5 is only in the time table: NaN elsewhere, and said so
    assert np.isnan(prof.sel(rank=5, function="MPI_Recv", metric="bytes_recv"))
    assert any("no rows for 1 ranks" in w for w in read_warnings(ds))
    assert ds["mode"].item() == "slt"
    assert ds["nprocs"].item() == 6
    # MPInside: elapsed is Compute + all MPI columns; the slowest rank sets it
    assert ds["elapsed"].item() == pytest.approx(868.484133 + 0.000232 + 322.801183)
    assert np.isnan(ds["nodes"].item())


def test_seed_function_vocabulary():
    ds = perfkit.open_profile(SEED)
    calls = dict(zip(ds["function"].values, ds["call"].values))
    kinds = dict(zip(ds["function"].values, ds["kind"].values))
    assert calls["w_MPI_Recv"] == calls["MPI_Recv"] == "MPI_Recv"
    assert kinds["w_MPI_Recv"] == "wait_late_sender"
    assert kinds["MPI_Recv"] == "transfer"
    assert kinds["Compute"] == "compute"
    assert kinds["MPI_Init"] == "other"
    by_call = ds["profile"].sel(metric="time").groupby("call").sum()
    assert by_call.sel(call="MPI_Recv", rank=0).item() == pytest.approx(322.801183)


def test_seed_size_distribution_times():
    ds = perfkit.open_profile(SEED)
    sizes = ds["sizes"].isel(run=0)
    assert sizes.sel(rank=0, function="MPI_Irecv", size_bin=65536, stat="time") == 30.856745
    assert sizes.sel(rank=0, function="MPI_Recv", size_bin=8192, stat="time") == 16.060919
    assert np.isnan(sizes.sel(rank=0, function="MPI_Recv", size_bin=8192, stat="count"))
    assert np.isnan(sizes.sel(rank=1, function="MPI_Recv", size_bin=8192, stat="time"))


def test_collective_wait_columns(tmp_path):
    ds = perfkit.open_profile(write_text(tmp_path, TABLES))
    assert ds["mode"].item() == "collective_wait"
    kinds = dict(zip(ds["function"].values, ds["kind"].values))
    assert kinds["b_MPI_Bcast"] == "wait_collective"
    assert ds["call"].sel(function="b_MPI_Bcast").item() == "MPI_Bcast"
    total = ds["profile"].sel(metric="time", function=["b_MPI_Bcast", "MPI_Bcast"]).sum("function")
    np.testing.assert_allclose(total.isel(run=0).values, [2.02, 1.52, 0.02])


def test_metadata_precedence_and_mode_conflicts(tmp_path):
    path = write_text(tmp_path, TABLES)
    ds = perfkit.open_profile(path, nodes=1, ppn=3, system="test", mode="collective_wait", elapsed=99.0)
    assert (ds["nodes"].item(), ds["ppn"].item(), ds["system"].item(), ds["elapsed"].item()) == (1, 3, "test", 99)
    with pytest.raises(perfkit.PerfkitFormatError, match="mode 'basic'"):
        perfkit.open_profile(path, mode="basic")
    with pytest.raises(perfkit.PerfkitFormatError, match="nprocs=2"):
        perfkit.open_profile(path, nprocs=2)
    (tmp_path / "run.txt.perfkit.json").write_text('{"nodes": 2, "system": "sidecar"}')
    ds = perfkit.open_profile(path, system="given")
    assert ds["nodes"].item() == 2 and ds["system"].item() == "given"


def test_perfect_mode_only_from_metadata(tmp_path):
    ds = perfkit.open_profile(write_text(tmp_path, TABLES.replace("b_Bcast", "Barrier")), mode="perfect")
    assert ds["mode"].item() == "perfect"


MATRICES = """>>>> SIZE(i,j) <<<<
i j value
0 1 100
2 0 7
>>>> TIME(i,j) <<<<
CPU 0 1 2
0 0 0 0.5
1 0.25 0 0
2 0 0 0
>>>> REQUEST(i,j) <<<<
i j value
0 1 4
"""


def test_matrices_are_oriented_sender_to_receiver(tmp_path):
    ds = perfkit.open_profile(write_text(tmp_path, TABLES + MATRICES))
    traffic = ds["traffic"].isel(run=0)
    assert traffic.sel(sender=0, receiver=1, quantity="bytes") == 100
    assert traffic.sel(sender=2, receiver=0, quantity="bytes") == 7
    # TIME(0,2) = 0.5: rank 0 spent 0.5 s receiving from rank 2, so 2 -> 0
    assert traffic.sel(sender=2, receiver=0, quantity="time") == 0.5
    assert traffic.sel(sender=0, receiver=1, quantity="time") == 0.25
    assert traffic.sel(sender=0, receiver=1, quantity="count") == 4
    assert traffic.sel(quantity="bytes").sum() == 107


def test_missing_matrix_is_nan_and_said(tmp_path):
    text = TABLES + MATRICES.split(">>>> REQUEST")[0]
    ds = perfkit.open_profile(write_text(tmp_path, text))
    assert np.isnan(ds["traffic"].sel(quantity="count")).all()
    assert any("REQUEST" in w for w in read_warnings(ds))


def test_tolerant_spacing_and_header_variants(tmp_path):
    text = "# a comment\n\n" + TABLES.replace("<<<<\n", "<<<<<   \n").replace(" ", "   ").replace("\n", "\r\n")
    ds = perfkit.open_profile(write_text(tmp_path, text))
    assert ds["profile"].sel(rank=2, function="Compute", metric="time").item() == 12.5


def test_backend_entry_point_and_sniffing(tmp_path):
    path = write_text(tmp_path, TABLES)
    via_xr = xr.open_dataset(path, engine="mpinside")
    direct = perfkit.open_profile(path, format="mpinside")
    xr.testing.assert_identical(via_xr, direct)
    assert perfkit.io.registry.sniff_format(path) == "mpinside"


def test_unknown_block_is_reported_not_dropped(tmp_path):
    ds = perfkit.open_profile(write_text(tmp_path, TABLES + ">>>> Something new <<<<\nA B\n1 2\n"))
    assert any("Something new" in w and "line 26" in w for w in read_warnings(ds))


BAD = {
    "truncated": (TABLES[: TABLES.index("2 12.5") + 8], 5, "expected 6 columns"),
    "wrong column count": (TABLES.replace("1 11.0 0.1 1.5 0.02 1.5", "1 11.0 0.1 1.5 0.02"), 4, "expected 6 columns"),
    "text in number": (TABLES.replace("1 11.0 0.1 1.5", "1 11.0 abc 1.5"), 4, "found 'abc'"),
    "duplicated rank": (TABLES.replace("2 12.5", "1 12.5"), 5, "rank 1 appears twice"),
    "missing CPU header": (TABLES.replace("CPU Compute MPI_Init b_Bcast Bcast Recv\n0 10.5", "0 10.5", 1), 2,
                           "expected first column 'CPU'"),
    "junk before tables": ("hello world\n" + TABLES, 1, "expected a '>>>> title <<<<' table header"),
    "table twice": (TABLES + TABLES.split(">>>> Bytes sent")[0], 26, "appears twice"),
    "no rows": (">>>> Communication time totals (s) <<<<\nCPU Compute\n", 3, "found none"),
    "fractional rank": (TABLES.replace("2 12.5", "2.5 12.5"), 5, "rank number"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_names_file_and_line(tmp_path, case):
    text, line, message = BAD[case]
    path = write_text(tmp_path, text)
    with pytest.raises(perfkit.PerfkitFormatError, match=message) as err:
        perfkit.open_profile(path, format="mpinside")
    assert err.value.path == str(path)
    assert err.value.line == line
    assert isinstance(err.value, ValueError)


def test_empty_and_binary_files(tmp_path):
    empty = write_text(tmp_path, "", "empty.txt")
    with pytest.raises(perfkit.PerfkitFormatError, match="empty"):
        perfkit.open_profile(empty)
    with pytest.raises(perfkit.PerfkitFormatError, match="empty"):
        perfkit.open_profile(empty, format="mpinside")
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(bytes(np.random.default_rng(0).integers(0, 256, 10000, dtype=np.uint8)))
    with pytest.raises(perfkit.PerfkitFormatError, match="binary"):
        perfkit.open_profile(garbage, format="mpinside")
    with pytest.raises(perfkit.PerfkitFormatError, match="tried: mpinside"):
        perfkit.open_profile(garbage)


def test_huge_junk_file_fails_at_once(tmp_path):
    """A 2 GB file (sparse on disk) is refused from its first line, without reading it all."""
    huge = tmp_path / "huge.dat"
    with open(huge, "wb") as fh:
        fh.write(b"junk " * 100 + b"\n")
        fh.truncate(2 * 1024**3)
    with pytest.raises(perfkit.PerfkitFormatError) as err:
        perfkit.open_profile(huge, format="mpinside")
    assert err.value.line == 1


def test_binary_inside_a_table(tmp_path):
    path = tmp_path / "run.txt"
    path.write_bytes(TABLES.encode().replace(b"10.5", b"1\xff5"))
    with pytest.raises(perfkit.PerfkitFormatError, match="binary") as err:
        perfkit.open_profile(path, format="mpinside")
    assert err.value.line == 3


def test_control_byte_inside_a_table(tmp_path):
    path = tmp_path / "run.txt"
    path.write_bytes(TABLES.encode().replace(b"2 12.5 0.1", b"2 12.5\x01 0.1"))
    with pytest.raises(perfkit.PerfkitFormatError, match="binary") as err:
        perfkit.open_profile(path, format="mpinside")
    assert err.value.line == 5


def test_short_row_among_placeholders_in_the_last_column(tmp_path):
    """A short row is padded with NaN by pandas: it must not pass for a '-----'."""
    text = TABLES.replace("0 ----- 0 0 800 0", "0 ----- 0 0 800 -----")
    text = text.replace("1 ----- 0 0 0 0\n", "1 ----- 0 0 0\n", 1)
    with pytest.raises(perfkit.PerfkitFormatError, match="expected 6 columns") as err:
        perfkit.open_profile(write_text(tmp_path, text), format="mpinside")
    assert err.value.line == 9


@pytest.mark.parametrize("chunk", [5, 16, 61, 1 << 22])
def test_tables_found_whatever_the_read_size(tmp_path, monkeypatch, chunk):
    """Headers split across reads, blank lines and a CRLF header: same Dataset, same line numbers."""
    crlf_header = "\n  >>>> Bytes sent <<<<\r\n\n"
    text = '# perfkit-run: {"system": "x"}\n' + TABLES.replace(">>>> Bytes sent <<<<\n", crlf_header)
    text += ">>>> Something new <<<<\nA B\n1 2\n>>>> SIZE(i,j) <<<<\ni j value\n0 1 8\n"
    path = write_text(tmp_path, text)
    expected = perfkit.open_profile(path, format="mpinside")
    monkeypatch.setattr(tables, "CHUNK", chunk)
    ds = perfkit.open_profile(path, format="mpinside")
    xr.testing.assert_identical(ds, expected)
    assert ds["system"].item() == "x"
    assert any("Something new" in w and "line 29" in w for w in read_warnings(ds))
    bad = write_text(tmp_path, text.replace("2 ----- 0 0 400 0", "2 ----- 0 0 400"), "bad.txt")
    with pytest.raises(perfkit.PerfkitFormatError, match="expected 6 columns") as err:
        perfkit.open_profile(bad, format="mpinside")
    assert err.value.line == 23


def test_matrix_naming_unknown_rank(tmp_path):
    with pytest.raises(perfkit.PerfkitFormatError, match="not in the tables"):
        perfkit.open_profile(write_text(tmp_path, TABLES + ">>>> SIZE(i,j) <<<<\ni j value\n0 9 1\n"))


# -- writer -> reader round trip over generated tables ------------------------------------------

functions = st.lists(st.sampled_from(["Recv", "Send", "Bcast", "Allreduce", "Waitall", "Isend", "Irecv",
                                      "MPI_Init", "Barrier", "Alltoall"]), min_size=1, max_size=6, unique=True)


@st.composite
def runs(draw):
    names = draw(functions)
    waits = draw(st.sampled_from(["", "w", "b"]))
    labels = ["Compute", *(f"MPI_{n}" if not n.startswith("MPI_") else n for n in names)]
    calls = list(labels)
    kinds = ["compute", *(perfkit.model.default_kind(c) for c in labels[1:])]
    if waits:
        call = labels[1]
        labels.append(f"{waits}_{call}")
        calls.append(call)
        kinds.append("wait_late_sender" if waits == "w" else "wait_collective")
    nranks = draw(st.integers(1, 12))
    ranks = np.sort(draw(st.lists(st.integers(0, 5000), min_size=nranks, max_size=nranks, unique=True)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    shape = (nranks, len(labels))
    time = np.round(rng.uniform(0, 1e4, shape), 6)
    counts = rng.integers(0, 2**40, (4, *shape)).astype(np.float64)
    profile = np.stack([time, *counts], axis=2)
    profile[rng.random(profile.shape) < 0.1] = np.nan
    profile[:, 0, 1:] = np.nan  # Compute has no bytes or calls
    traffic = None
    if draw(st.booleans()):
        traffic = np.zeros((nranks, nranks, 3))
        mask = rng.random((nranks, nranks)) < 0.3
        traffic[..., 0] = np.where(mask, rng.integers(1, 2**30, (nranks, nranks)), 0)
        traffic[..., 1] = np.where(mask, rng.integers(1, 1000, (nranks, nranks)), 0)
        traffic[..., 2] = np.where(mask, np.round(rng.uniform(0, 100, (nranks, nranks)), 6), 0)
    return make_run(profile, ranks=ranks, functions=labels, calls=calls, kinds=kinds,
                    metrics=["time", "bytes_sent", "calls_sent", "bytes_recv", "calls_recv"],
                    run={"label": "gen", "source": "gen"}, traffic=traffic)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ds=runs(), layout=st.sampled_from(["sparse", "dense"]))
def test_writer_reader_round_trip(tmp_path, ds, layout):
    path = write(ds, tmp_path / "gen.txt", matrix_layout=layout)
    back = perfkit.open_profile(path, label="gen", source="gen")
    measured = ~np.all(np.isnan(ds["profile"].values), axis=(0, 1, 3))
    expected = ds.isel(function=measured)
    assert list(back["function"].values) == list(expected["function"].values)
    assert list(back["kind"].values) == list(expected["kind"].values)
    np.testing.assert_allclose(back["profile"].sel(metric=expected["metric"]).values, expected["profile"].values,
                               rtol=0, atol=5e-7)
    if "traffic" in ds:
        np.testing.assert_allclose(back["traffic"].values, ds["traffic"].values, atol=5e-7)


def hosts_run(hosts: list[str]) -> xr.Dataset:
    """A run of ``len(hosts)`` ranks on ``hosts``."""
    n = len(hosts)
    return make_run(np.ones((n, 1, 6)), ranks=np.arange(n), functions=["Compute"], run={"label": "h"}, hosts=hosts)


host_names = st.sampled_from(["", "n1", "n2", "node-0042.cluster", "é-host", "a b"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(blocks=st.lists(st.tuples(host_names, st.integers(1, 40)), min_size=1, max_size=12))
def test_hosts_round_trip_compactly(tmp_path, blocks):
    """Consecutive ranks on one host are one [host, count] pair, a lone rank its name alone."""
    hosts = [name for name, count in blocks for _ in range(count)]
    encoded = host_runs(hosts)
    changes = sum(a != b for a, b in pairwise(hosts))
    assert len(encoded) == changes + 1
    assert all(isinstance(item, str) or item[1] > 1 for item in encoded)
    path = write(hosts_run(hosts), tmp_path / "hosts.txt")
    back = perfkit.open_profile(path, format="mpinside")
    if any(hosts):
        assert back["host"].isel(run=0).values.tolist() == hosts
    else:
        assert "host" not in back  # nothing known: nothing written


def test_hosts_beyond_the_first_64_kib(tmp_path):
    """Round-robin placement lists every rank's host: a long comment line, read on and sniffed past."""
    hosts = [f"node{r % 97:04d}.cluster.example" for r in range(5000)]
    path = write(hosts_run(hosts), tmp_path / "rr.mpinside", run_metadata={"nodes": 97})
    assert path.read_text().index(">>>>") > 65536
    back = perfkit.open_profile(path)
    assert back["host"].isel(run=0).values.tolist() == hosts and back["nodes"].item() == 97


def test_comments_before_the_tables_are_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(reader, "MAX_PREAMBLE", 100_000)
    path = write_text(tmp_path, "# x\n" + "#" * 200_000 + "\n" + TABLES)
    with pytest.raises(perfkit.PerfkitFormatError, match="more than 100000 bytes of comments") as err:
        perfkit.open_profile(path, format="mpinside")
    assert err.value.line == 2
    junk = write_text(tmp_path, "# " + "x" * 70000 + "\njunk\n" + TABLES, "junk.txt")
    with pytest.raises(perfkit.PerfkitFormatError, match="found 'junk'") as err:
        perfkit.open_profile(junk, format="mpinside")
    assert err.value.line == 2


BAD_HOSTS = {
    "not a list": ('"n1"', "found \"n1\""),
    "zero count": ('[["n1", 0]]', 'item 0 is \\["n1", 0\\]'),
    "fractional count": ('["n0", ["n1", 1.5]]', "item 1 is"),
    "boolean count": ('[["n1", true]]', "item 0 is"),
    "number for a name": ('[["n1", 2], 7]', "item 1 is 7"),
    "pair too short": ('[["n1"]]', "item 0 is"),
    "control character": ('["n1\\u0007", "n2", "n3"]', "item 0 is"),
    "name too long": (f'[["{"x" * 256}", 3]]', "item 0 is"),
    "too few ranks": ('[["n1", 2]]', "hosts name 2 ranks, expected one per rank of the tables \\(3\\)"),
    "too many ranks": ('[["n1", 2], ["n2", 4294967296]]', "more than 2147483648 ranks"),
}


@pytest.mark.parametrize("case", sorted(BAD_HOSTS))
def test_bad_hosts_name_file_line_and_what_was_expected(tmp_path, case):
    entry, message = BAD_HOSTS[case]
    path = write_text(tmp_path, f'# collected by hand\n# perfkit-run: {{"nodes": 2, "hosts": {entry}}}\n' + TABLES)
    with pytest.raises(perfkit.PerfkitFormatError, match=message) as err:
        perfkit.open_profile(path)
    assert err.value.path == str(path) and err.value.line == 2
    if "item" in message or case == "not a list":
        assert "expected a list of host names" in str(err.value)


@pytest.mark.parametrize(("row", "token", "said"), [
    ("1 nan 0.1 1.5 0.02 1.5", "nan", ""), ("1 NaN 0.1 1.5 0.02 1.5", "NaN", ""),
    ("1 11.0 -0.168 1.5 0.02 1.5", "-0.168", ""), ("1 inf 0.1 1.5 0.02 1.5", "inf", ""),
    ("1 -inf 0.1 1.5 0.02 1.5", "-inf", ""), ("1 1e308 0.1 1.5 0.02 1.5", "1e308", " (beyond 2**63: corrupt)"),
    ("1 1.0E+400 0.1 1.5 0.02 1.5", "1.0E+400", ""),
])
def test_a_time_no_clock_measures_is_refused_naming_line_column_and_token(row, token, said, tmp_path, recwarn):
    text = TABLES.replace("1 11.0 0.1 1.5 0.02 1.5", row)
    path = write_text(tmp_path, text)
    with pytest.raises(perfkit.PerfkitFormatError) as err:
        perfkit.open_profile(path, format="mpinside")
    column = 3 if token == "-0.168" else 2
    assert str(err.value) == (f"{path}, line 4: table 'Communication time totals (s)': column {column}: expected a "
                              f"non-negative time, found {token!r}{said}")
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]  # no numpy overflow warning


def test_times_that_overflow_a_sum_are_refused_before_any_sum(tmp_path):
    """1e308 twice in a row sums to inf: refused at the line, no numpy warning and no 'elapsed is [inf]'."""
    path = write_text(tmp_path, TABLES.replace("0 10.5 0.1 2.0", "0 1e308 1e308 2.0"))
    with np.errstate(all="raise"), pytest.raises(perfkit.PerfkitFormatError, match=r"line 3: .* found '1e308'"):
        perfkit.open_profile(path, format="mpinside")


@pytest.mark.parametrize("token", ["1_0", "0x1F", "1,5", "12abc", "1.2.3", "_1"])
def test_the_token_quoted_is_the_token_read(token, tmp_path):
    path = write_text(tmp_path, TABLES.replace("2 12.5 0.1", f"2 {token} 0.1"))
    with pytest.raises(perfkit.PerfkitFormatError) as err:
        perfkit.open_profile(path, format="mpinside")
    assert str(err.value).endswith(f"line 5: table 'Communication time totals (s)': expected a number or '-----', "
                                   f"found {token!r}")
