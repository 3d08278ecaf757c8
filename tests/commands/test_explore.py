"""perfkit explore: the explorer dashboard of the files given, served on a loopback port."""

from __future__ import annotations

import os
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from perfkit.cli import main
from tests.browser.helpers import BIN, free_port, start_server, stop_server
from tests.helpers import ROOT

pytestmark = pytest.mark.timeout(300)


def test_explore_serves_the_dashboard_of_the_files(tmp_path: Path) -> None:
    port = free_port()
    files = sorted(map(str, (ROOT / "data" / "lab").glob("*.mpinside")))
    log = tmp_path / "explore.log"
    proc = start_server([str(BIN / "perfkit"), "explore", *files, "--port", str(port)], port, dict(os.environ), log)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=180) as response:
            page = response.read().decode()
        assert response.status == 200 and "perfkit explorer" in page
        assert "perfkit explore: 2 runs at http://127.0.0.1:" in log.read_text()
    finally:
        stop_server(proc)
    assert proc.poll() is not None


def test_explore_refuses_a_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explore", str(tmp_path / "absent.mpinside")]) == 1
    assert "absent.mpinside" in capsys.readouterr().err


def test_a_store_is_explored_lazily_beside_files(tmp_path: Path) -> None:
    """A store perfkit convert wrote is opened lazily (dask), its runs beside those of the files given."""
    import perfkit
    from perfkit.widgets import explorer_app

    lab = sorted((ROOT / "data" / "lab").glob("*.mpinside"))
    store = tmp_path / "lab.zarr"
    perfkit.convert(lab[:1], store)
    runs = explorer_app.load((str(store), str(lab[1])))
    assert runs.sizes["run"] == 2
    assert [str(r) for r in runs["run"].values] == [str(perfkit.open_profile(p)["run"].values[0]) for p in lab[:2]]
    alone = explorer_app.load((str(store),))
    assert hasattr(alone["profile"].data, "dask")
    expected = perfkit.open_profile(lab[0])
    xr_equal = alone["profile"].sel(run=str(expected["run"].values[0])).load()
    np.testing.assert_array_equal(xr_equal.transpose(*expected["profile"].isel(run=0).dims).values,
                                  expected["profile"].isel(run=0).values)
