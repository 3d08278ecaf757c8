"""Score-P CUBE4 reader: values against the reference CSVs shipped with the BLAST profile."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from xml.etree import ElementTree as ET

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import perfkit
from perfkit.errors import PerfkitFormatError
from perfkit.io import cube
from perfkit.io.registry import sniff_format
from perfkit.model import read_warnings, validate

DATA = Path(__file__).parents[1] / "data" / "cube"
BLAST = DATA / "pycubexr_blast.p64.r1.profile.cubex"
KRIPKE = DATA / "pycubexr_kripke.p8.d2.g32.r1.profile.cubex"
LULESH = {p: DATA / f"extrap_perftaint_lulesh.p{p}.size30.r1.profile.cubex" for p in (27, 64, 125)}
ALL = [BLAST, KRIPKE, *LULESH.values()]
#: The reference CSVs print 6 significant digits.
RTOL = 1e-5


def _members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}


def _write_tar(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _cnode_labels(path: Path) -> dict[int, str]:
    """Call-tree node id -> function label, from anchor.xml read without pycubexr."""
    root = ET.fromstring(_members(path)["anchor.xml"])
    regions = {int(r.get("id")): r.findtext("name") for r in root.iter("region")}
    return {int(c.get("id")): regions[int(c.get("calleeId"))] for c in root.iter("cnode")}


def _reference(kind: str) -> pd.DataFrame:
    table = pd.read_csv(DATA / f"pycubexr_blast.p64.r1.{kind}.csv", skipinitialspace=True)
    return table.rename(columns=lambda c: c.strip())


def _reference_by_function(metric: str) -> pd.DataFrame:
    """excl.csv summed per (function label, location): MPI_* by name, everything else Compute."""
    table = _reference("excl")
    labels = _cnode_labels(BLAST)
    table["function"] = [labels[c] if labels[c].startswith("MPI_") else "Compute" for c in table["Cnode ID"]]
    return table.groupby(["function", "Thread ID"])[metric].sum().unstack("Thread ID")


@pytest.fixture(scope="module")
def blast() -> xr.Dataset:
    return cube.read(BLAST)


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_fixtures_read_and_validate(path: Path) -> None:
    ds = validate(cube.read(path))
    assert ds["format"].item() == "cube"
    assert ds["function"].values[0] == "Compute"
    assert all(f.startswith("MPI_") for f in ds["function"].values[1:])
    assert ds.attrs["reader"] == "perfkit.io.cube"


@pytest.mark.parametrize(("metric", "column"), [("time", "time"), ("calls", "visits"),
                                                ("bytes_sent", "bytes_sent"), ("bytes_recv", "bytes_received")])
def test_blast_matches_excl_csv(blast: xr.Dataset, metric: str, column: str) -> None:
    expected = _reference_by_function(column)
    got = blast["profile"].isel(run=0).sel(metric=metric).to_pandas().T  # function x rank
    if metric != "time":  # Compute has no calls or bytes of its own
        assert got.loc["Compute"].isna().all()
        expected, got = expected.drop(index="Compute"), got.drop(index="Compute")
    assert sorted(got.index) == sorted(expected.index)
    got = got.loc[expected.index, expected.columns]
    if metric == "time":
        np.testing.assert_allclose(got.to_numpy(), expected.to_numpy(), rtol=RTOL, atol=1e-5)
    else:
        np.testing.assert_array_equal(got.to_numpy(), expected.to_numpy())


def test_blast_rank_totals_match_root_inclusive_time(blast: xr.Dataset) -> None:
    incl = _reference("incl")
    root = incl[incl["Cnode ID"] == 0].set_index("Thread ID")["time"].sort_index()
    per_rank = blast["profile"].isel(run=0).sel(metric="time").sum("function")
    np.testing.assert_allclose(per_rank.values, root.to_numpy(), rtol=RTOL)
    assert blast["elapsed"].item() == pytest.approx(root.max(), rel=RTOL)


@pytest.mark.parametrize("path", [*LULESH.values(), KRIPKE], ids=lambda p: p.name)
def test_compute_plus_mpi_is_root_inclusive(path: Path) -> None:
    from pycubexr import CubexParser

    with CubexParser(path) as parser:
        root = parser.get_root_cnodes()[0]
        inclusive = np.asarray(parser.get_metric_values(parser.get_metric_by_name("time")).cnode_values(root))
    ds = cube.read(path)
    per_rank = ds["profile"].isel(run=0).sel(metric="time").sum("function").values
    np.testing.assert_allclose(per_rank, inclusive, rtol=1e-12)
    assert ds["elapsed"].item() == pytest.approx(inclusive.max(), rel=1e-12)


def test_blast_metadata_and_kinds(blast: xr.Dataset) -> None:
    assert blast["nprocs"].item() == 64
    assert blast["threads"].item() == 1
    assert np.isnan(blast["nodes"].item())  # Blue Gene/Q tree: nodecards, no "node" level
    assert blast["system"].item() == "Blue Gene/Q"
    kinds = dict(zip(blast["function"].values, blast["kind"].values, strict=True))
    assert kinds["Compute"] == "compute"
    assert kinds["MPI_Allreduce"] == "transfer"
    assert kinds["MPI_Init"] == "other"
    assert "PARALLEL" not in blast["function"].values  # artificial region -> Compute
    assert blast["profile"].sel(metric=["calls_sent", "calls_recv"]).isnull().all()


def test_lulesh_weak_scaling_combines() -> None:
    runs = [cube.read(LULESH[p], label=f"p{p}") for p in (27, 64, 125)]
    ds = perfkit.combine_runs(runs)
    assert list(ds["nprocs"].values) == [27, 64, 125]
    assert list(ds["nodes"].values) == [1, 2, 4]
    np.testing.assert_array_equal(ds["ppn"].values, [27, 32, np.nan])  # 125 ranks on 4 nodes: 32+32+32+29
    assert ds.sizes["rank"] == 125
    assert ds["profile"].sel(run="p27", rank=slice(27, None)).isnull().all()
    assert not ds["profile"].sel(run="p125", metric="time").isnull().any()
    elapsed = ds["elapsed"].values
    assert np.all(np.diff(elapsed) > 0)  # weak scaling of LULESH gets slower with more ranks
    assert "bytes_sent" in " ".join(read_warnings(ds))  # stripped profiles: bytes not stored


def test_metadata_precedence_file_first() -> None:
    ds = cube.read(LULESH[64], nodes=8, mode="basic")
    assert ds["nodes"].item() == 2
    assert ds["mode"].item() == "basic"
    assert any("nodes=8" in w for w in read_warnings(ds))
    assert cube.read(BLAST, nodes=2)["nodes"].item() == 2  # the file is silent about nodes


def _threaded_copy(tmp_path: Path, threads: int) -> Path:
    """BLAST with every ``threads`` consecutive locations regrouped as threads of one process."""
    members = _members(BLAST)
    root = ET.fromstring(members["anchor.xml"])
    parent = next(p for p in root.iter("systemtreenode") if p.find("locationgroup") is not None)
    groups = parent.findall("locationgroup")
    for g in groups:
        parent.remove(g)
    for k in range(len(groups) // threads):
        group = ET.SubElement(parent, "locationgroup", Id=str(k))
        ET.SubElement(group, "name").text = f"MPI Rank {k}"
        ET.SubElement(group, "rank").text = str(k)
        ET.SubElement(group, "type").text = "process"
        for g in groups[k * threads:(k + 1) * threads]:
            group.append(g.find("location"))
    members["anchor.xml"] = b'<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root)
    return _write_tar(tmp_path / "threaded.cubex", members)


def test_threads_are_summed_per_process(tmp_path: Path, blast: xr.Dataset) -> None:
    ds = validate(cube.read(_threaded_copy(tmp_path, threads=2)))
    assert ds["nprocs"].item() == 32
    assert ds["threads"].item() == 2
    assert any("sums over the threads" in w for w in read_warnings(ds))
    single = blast["profile"].isel(run=0).values
    expected = single[0::2] + single[1::2]
    np.testing.assert_allclose(ds["profile"].isel(run=0).values, expected, rtol=1e-12)
    assert ds["elapsed"].item() == pytest.approx(blast["elapsed"].item())  # longest thread, not a sum


@pytest.mark.parametrize(("name", "expected"), [("MPI_Allreduce", "MPI_Allreduce"), ("MPI_ALLREDUCE", "MPI_Allreduce"),
                                                ("MPI_COMM_RANK", "MPI_Comm_rank"), ("main", None),
                                                ("PARALLEL", None), ("MPI", None)])
def test_mpi_name(name: str, expected: str | None) -> None:
    assert cube.mpi_name(name) == expected


# --- sniffing and the xarray engine --------------------------------------------------------------


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_sniff_fixtures(path: Path) -> None:
    assert cube.sniff(path, path.read_bytes()[:65536])
    assert sniff_format(path) == "cube"


def test_sniff_rejects_other_content(tmp_path: Path) -> None:
    other = _write_tar(tmp_path / "other.tar", {"hello.txt": b"hi"})
    matrix = DATA.parent / "matrices" / "MapLib_cg_64_p2p.size.csv"
    for path in (other, matrix, DATA / "pycubexr_blast.p64.r1.excl.csv"):
        assert not cube.sniff(path, path.read_bytes()[:65536])
    assert not cube.sniff(tmp_path, b"")


def test_xarray_engine() -> None:
    ds = xr.open_dataset(KRIPKE, engine="cube")
    assert ds["nprocs"].item() == 8
    assert ds["label"].item() == KRIPKE.stem
    validate(ds)


# --- bad inputs -----------------------------------------------------------------------------------


def _assert_format_error(path: Path, *words: str, line: int | None = None) -> PerfkitFormatError:
    with pytest.raises(PerfkitFormatError) as info:
        cube.read(path)
    err = info.value
    assert err.path == str(path)
    assert err.line == line
    for word in words:
        assert word in str(err), str(err)
    return err


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.cubex"
    path.write_bytes(b"")
    _assert_format_error(path, "empty", "anchor.xml")


def test_not_a_tar(tmp_path: Path) -> None:
    path = tmp_path / "garbage.cubex"
    path.write_bytes(b"this is not a cube file\n" * 100)
    _assert_format_error(path, "not a tar archive", "anchor.xml")


def _data_offsets(path: Path) -> dict[str, tuple[int, int]]:
    with tarfile.open(path) as tar:
        return {m.name: (m.offset_data, m.size) for m in tar.getmembers()}


@pytest.mark.parametrize("cut", ["header", "first header block", "half", "inside anchor.xml", "inside 1.data"])
def test_truncated(tmp_path: Path, cut: str) -> None:
    data = BLAST.read_bytes()
    offsets = _data_offsets(BLAST)
    n = {
        "header": 100,
        "first header block": 600,
        "half": len(data) // 2,
        "inside anchor.xml": offsets["anchor.xml"][0] + offsets["anchor.xml"][1] // 2,
        "inside 1.data": offsets["1.data"][0] + 100,
    }[cut]
    path = tmp_path / "truncated.cubex"
    path.write_bytes(data[:n])
    _assert_format_error(path)


def test_missing_anchor(tmp_path: Path) -> None:
    members = {k: v for k, v in _members(BLAST).items() if k != "anchor.xml"}
    _assert_format_error(_write_tar(tmp_path / "noanchor.cubex", members), "no member anchor.xml")


def test_anchor_not_xml(tmp_path: Path) -> None:
    members = {**_members(BLAST), "anchor.xml": b"<cube><program>"}
    err = _assert_format_error(_write_tar(tmp_path / "badxml.cubex", members), "anchor.xml", "not valid XML", line=1)
    assert err.member == "anchor.xml"


def test_anchor_without_system_tree(tmp_path: Path) -> None:
    members = {**_members(BLAST), "anchor.xml": b"<cube><program/></cube>"}
    _assert_format_error(_write_tar(tmp_path / "nosystem.cubex", members), "<system>")


def test_garbage_metric_data(tmp_path: Path) -> None:
    members = {**_members(BLAST), "1.data": b"\x00garbage" * 50}
    err = _assert_format_error(_write_tar(tmp_path / "baddata.cubex", members), "pycubexr")
    assert not isinstance(err.__cause__, PerfkitFormatError)  # the pycubexr error is chained, not leaked


def test_missing_time_values(tmp_path: Path) -> None:
    members = {k: v for k, v in _members(BLAST).items() if k not in ("1.index", "1.data")}
    _assert_format_error(_write_tar(tmp_path / "notime.cubex", members), "'time'")


def test_directory_and_missing_file(tmp_path: Path) -> None:
    _assert_format_error(tmp_path, "directory")
    with pytest.raises(FileNotFoundError):
        cube.read(tmp_path / "absent.cubex")


def test_warnings_are_json(blast: xr.Dataset) -> None:
    assert isinstance(json.loads(blast.attrs["warnings"]), list)


@pytest.mark.parametrize("value", [float("nan"), -0.168, float("inf"), -float("inf"), 1e308])
def test_a_stored_time_no_profiler_measures_is_refused(value: float, tmp_path: Path) -> None:
    """NaN, negative, infinite or too large: refused naming member, metric, entry, location and the value."""
    import struct

    members = _members(BLAST)
    data = members["1.data"]  # metric 'time': a header, then big-endian doubles
    members["1.data"] = data[:10] + struct.pack(">d", value) + data[18:]
    err = _assert_format_error(_write_tar(tmp_path / "bad.cubex", members), "metric 'time', call-tree entry 0, "
                               f"location 0: expected a non-negative time, found the stored value {value!r}")
    assert err.member == "1.data"
