"""IPM regions (issue 12): listed in the Dataset, selected by full path, ambiguity refused, a
region's elapsed is its own (and scaling uses it)."""

from __future__ import annotations

from pathlib import Path

import pytest

import perfkit
from perfkit.io import ipm
from tests.io.test_ipm import task, write_ipm

DATA = Path(__file__).resolve().parents[1] / "data" / "ipm"


def _region(label: str, rid: int, wtime: float, mtime: float, body: str = "") -> str:
    return f'<region label="{label}" wtime="{wtime}" mtime="{mtime}" id="{rid}">{body}</region>'


def _send(count: int, seconds: float) -> str:
    return f'<func name="MPI_Send" count="{count}" bytes="{8 * count}" > {seconds:.4e} </func>'


@pytest.fixture
def nested(tmp_path: Path) -> Path:
    """The shape of IPM's region test: foo inside bar1 and inside bar2; the run lasts 1.46 s.
    (IPM's region values include their sub-regions.)"""
    bar1 = _region("bar1", 1, 0.010, 0.001, _send(3, 0.0009) + '<regions n="1">'
                   + _region("foo", 2, 0.0047, 0.0004, _send(2, 0.0004)) + "</regions>")
    bar2 = _region("bar2", 3, 0.020, 0.002, _send(4, 0.002) + '<regions n="1">'
                   + _region("foo", 4, 0.0080, 0.0010, _send(3, 0.001)) + "</regions>")
    rest = _region("ipm_noregion", 0, 1.43, 0.1, _send(1, 0.1))
    t0 = dict(rank=0, wtime=1.46, mtime=0.103, funcs=[], hents=[],
              regions=f'<regions n="3">{bar1}{bar2}{rest}</regions>')
    return write_ipm(tmp_path / "regions.xml", [t0, task(1, [])])


def test_regions_are_listed_with_their_paths(nested: Path):
    ds = ipm.read(nested)
    assert ds["region"].values.tolist() == ["bar1", "bar1/foo", "bar2", "bar2/foo", "ipm_noregion"]
    assert ds["region_time"].sel(region="bar1/foo").item() == pytest.approx(0.0047)
    assert "selected_region" not in ds.coords  # the whole run


def test_a_bare_label_naming_two_paths_is_an_error_naming_them(nested: Path):
    with pytest.raises(ValueError, match=r"'foo' is ambiguous: it names \['bar1/foo', 'bar2/foo'\]"):
        ipm.read(nested, region="foo")


def test_a_full_path_selects_one_region_with_its_own_elapsed(nested: Path):
    ds = ipm.read(nested, region="bar1/foo", label="foo1")
    assert float(ds["elapsed"][0]) == pytest.approx(0.0047)  # not the run's 1.46 s
    assert ds["selected_region"].values.tolist() == ["bar1/foo"]
    assert ds["profile"].sel(rank=0, function="MPI_Send", metric="calls").item() == 2
    assert float(perfkit.scaling(ds)["elapsed"].iloc[0]) == pytest.approx(0.0047)
    assert ipm.read(nested, region="bar2")["profile"].sel(rank=0, function="MPI_Send", metric="calls").item() == 4
    with pytest.raises(ValueError, match="no IPM region 'bar3/foo'"):
        ipm.read(nested, region="bar3/foo")


def test_real_runs_list_their_one_region():
    ds = perfkit.open_profile(next((DATA / "real" / "HPCCG-strong" / "2").glob("*.ipm.xml")))
    assert ds["region_time"].sizes["region"] >= 1
    one = ipm.read(next((DATA / "real" / "HPCCG-strong" / "2").glob("*.ipm.xml")), region="ipm_noregion")
    assert float(one["elapsed"][0]) <= float(ds["elapsed"][0]) + 1e-9
