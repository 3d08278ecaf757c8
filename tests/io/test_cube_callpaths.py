"""CUBE call paths: one row per call-tree node, against the reference CSVs of the BLAST profile, against the
reader's per-function values for every bundled profile, and against the call tree read from anchor.xml directly."""

from __future__ import annotations

from pathlib import Path
from xml.etree import ElementTree as ET

import numpy as np
import pytest

from perfkit.errors import PerfkitFormatError
from perfkit.io import cube
from tests.io.test_cube import ALL, BLAST, DATA, RTOL, _members, _reference

PROFILES = [*ALL, DATA.parent / "otf2" / "casita-10-mpi-tags" / "profile.cubex"]


@pytest.fixture(scope="module")
def blast() -> cube.CallTree:
    return cube.read_call_tree(BLAST)


def anchor_paths(path: Path) -> dict[int, str]:
    """Call-tree node id -> region names from the root, read from anchor.xml's nesting without pycubexr."""
    root = ET.fromstring(_members(path)["anchor.xml"])
    regions = {int(r.get("id")): r.findtext("name") for r in root.iter("region")}
    out: dict[int, str] = {}

    def walk(node: ET.Element, above: str) -> None:
        here = f"{above}{cube.PATH_SEPARATOR}{regions[int(node.get('calleeId'))]}" if above else \
            regions[int(node.get("calleeId"))]
        out[int(node.get("id"))] = here
        for child in node.findall("cnode"):
            walk(child, here)

    for top in root.find("program").findall("cnode"):
        walk(top, "")
    return out


@pytest.mark.parametrize(("metric", "column"), [("time", "time"), ("calls", "visits"),
                                                ("bytes_sent", "bytes_sent"), ("bytes_recv", "bytes_received")])
def test_blast_every_path_and_rank_matches_excl_csv(blast: cube.CallTree, metric: str, column: str) -> None:
    expected = _reference("excl").pivot(index="Cnode ID", columns="Thread ID", values=column)
    got = blast.values[metric]
    assert got.shape == (len(blast.paths), 64) and blast.ranks.tolist() == list(range(64))
    expected = expected.reindex(index=blast.paths["cnode"], columns=blast.ranks).fillna(0.0).to_numpy()
    np.testing.assert_allclose(got, expected, rtol=RTOL, atol=1e-5 if metric == "time" else 0)


def test_blast_inclusive_time_of_each_path_is_its_subtree(blast: cube.CallTree) -> None:
    incl = _reference("incl").pivot(index="Cnode ID", columns="Thread ID", values="time")
    paths = blast.paths.set_index("cnode")["path"]
    for cnode in (0, *incl.index[1::25]):
        below = paths.map(lambda p, top=paths[cnode]: p == top or p.startswith(top + cube.PATH_SEPARATOR))
        subtree = blast.values["time"][below.to_numpy()].sum(axis=0)
        np.testing.assert_allclose(subtree, incl.loc[cnode].to_numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.name if p.name != "profile.cubex" else p.parent.name)
def test_paths_sum_to_the_readers_functions(path: Path) -> None:
    tree = cube.read_call_tree(path)
    profile = cube.read(path)["profile"].isel(run=0)
    assert len(tree.paths) == len(anchor_paths(path)) and tree.paths["cnode"].is_unique
    assert dict(zip(tree.paths["cnode"], tree.paths["path"], strict=True)) == anchor_paths(path)
    assert set(tree.values) >= {"time", "calls"}
    for metric, values in tree.values.items():
        per_function = {f: values[rows].sum(axis=0) for f, rows in tree.paths.groupby("function").indices.items()}
        for function in map(str, profile["function"].values):
            want = profile.sel(function=function, metric=metric).values
            got = per_function.get(function, np.zeros_like(want))
            if function == "Compute" and metric != "time":  # the reader gives Compute no calls or bytes
                assert np.isnan(want).all()
                continue
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    table = tree.table()
    totals = table.groupby("function")["time"].sum()
    reader = profile.sel(metric="time").sum("rank").to_series()
    np.testing.assert_allclose(totals.reindex(reader.index).to_numpy(), reader.to_numpy(), rtol=1e-12)


def test_table_statistics_over_all_ranks_and_a_subset(blast: cube.CallTree) -> None:
    table = cube.callpaths(BLAST)
    time = blast.values["time"]
    np.testing.assert_allclose(table["time"], time.sum(axis=1))
    np.testing.assert_allclose(table["time_max"], time.max(axis=1))
    np.testing.assert_allclose(table["time_mean"], time.mean(axis=1))
    np.testing.assert_allclose(table["time_min"], time.min(axis=1))
    assert (table["rank_of_max"].to_numpy() == blast.ranks[time.argmax(axis=1)]).all()
    some = [3, 17, 40]
    part = blast.table(some)
    np.testing.assert_allclose(part["time"], time[:, some].sum(axis=1))
    np.testing.assert_allclose(part["time_min"], time[:, some].min(axis=1))
    assert set(part["rank_of_max"].dropna()) <= set(some)
    assert part["calls"].sum() < table["calls"].sum()
    mpi = table[table["function"] != "Compute"]
    assert (mpi["function"].str.startswith("MPI_")).all() and len(mpi) > 0
    assert (mpi["path"].str.split(cube.PATH_SEPARATOR).str[-1].str.upper() == mpi["function"].str.upper()).all()
    assert (table["depth"] == table["path"].str.count(cube.PATH_SEPARATOR)).all()
    assert all(p.endswith(f"{cube.PATH_SEPARATOR}{r}") or d == 0
               for p, r, d in zip(table["path"], table["region"], table["depth"], strict=True))


def test_bad_files(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        cube.callpaths(tmp_path / "absent.cubex")
    cut = tmp_path / "cut.cubex"
    cut.write_bytes(BLAST.read_bytes()[:20_000])
    with pytest.raises(PerfkitFormatError, match=r"cut\.cubex"):
        cube.callpaths(cut)
