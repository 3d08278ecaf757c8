"""Array libraries kept off the first read's path: nothing imported that a small profile does not need, and dask
and xarray tell the libraries' arrays apart exactly as they do on their own."""

from __future__ import annotations

import json
import subprocess
import sys
from types import ModuleType

import pytest

from perfkit.imports import imported_types
from tests.helpers import ROOT

HEAVY = ("numba", "sparse", "scipy.sparse", "scipy.fftpack", "scipy.special", "numpy.f2py")

#: In a fresh process: how dask and xarray classify the arrays of sparse and scipy.sparse, once both are imported.
CLASSIFY = """
import numpy as np, sparse, scipy, scipy.sparse
import dask.array as da, dask.array.fft
from dask.array.chunk_types import is_valid_array_chunk, is_valid_chunk_type
from xarray.namedarray.pycompat import array_type
arrays = {"coo": sparse.COO.from_numpy(np.eye(3)), "gcxs": sparse.GCXS.from_numpy(np.eye(3)),
          "csr_matrix": scipy.sparse.csr_matrix(np.eye(3)), "csr_array": scipy.sparse.csr_array(np.eye(3)),
          "numpy": np.eye(3), "list": [1, 2]}
print(json.dumps({
    "chunk_type": {k: is_valid_chunk_type(type(v)) for k, v in arrays.items()},
    "array_chunk": {k: is_valid_array_chunk(v) for k, v in arrays.items()},
    "xarray_sparse": {k: isinstance(v, array_type("sparse")) for k, v in arrays.items()},
    "fft_scipy": dask.array.fft.scipy is scipy,
    "sum": float((da.from_array(np.eye(3), chunks=2) * 2).sum().compute()),
}))
"""


def run(script: str) -> str:
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout


@pytest.mark.parametrize("profile", ["data/synthetic/48/slt.mpinside", "data/seed/mpinside_seed_tables.txt"])
def test_reading_a_small_profile_imports_no_sparse_numba_or_scipy_sparse(profile: str) -> None:
    out = run(f"import sys, json, perfkit\nds = perfkit.open_profile({profile!r})\nrepr(ds)\n"
              f"print(json.dumps([[m for m in {HEAVY!r} if m in sys.modules], "
              "type(ds['traffic'].data).__name__ if 'traffic' in ds else None]))")
    imported, traffic = json.loads(out)
    assert imported == []
    assert traffic in ("ndarray", None)


def test_the_48_rank_profile_has_dense_traffic_to_read() -> None:
    """The guard above reads a matrix: the 48-rank run has one, kept dense."""
    out = run("import perfkit\nprint(type(perfkit.open_profile('data/synthetic/48/slt.mpinside')['traffic'].data))")
    assert "ndarray" in out


def test_dask_and_xarray_classify_sparse_arrays_as_without_perfkit() -> None:
    """The reference is a process where dask.array and xarray imported sparse and scipy themselves."""
    theirs = json.loads(run("import json, xarray\n" + CLASSIFY))
    ours = json.loads(run("import json, perfkit\nperfkit.open_profile('data/synthetic/48/slt.mpinside')\n" + CLASSIFY))
    assert ours == theirs
    assert theirs["chunk_type"]["coo"] and theirs["xarray_sparse"]["coo"] and not theirs["xarray_sparse"]["numpy"]


def test_a_sparse_traffic_read_after_the_stand_ins_is_a_sparse_array_to_xarray() -> None:
    out = run("import perfkit, perfkit.model\nperfkit.model.DENSE_TRAFFIC_BYTES = 0\n"
              "ds = perfkit.open_profile('data/synthetic/48/slt.mpinside')\n"
              "from xarray.namedarray.pycompat import array_type\n"
              "print(type(ds['traffic'].data).__name__, isinstance(ds['traffic'].data, array_type('sparse')), "
              "ds['traffic'].data.todense().sum() > 0)")
    assert out.split() == ["COO", "True", "True"]


def test_a_stand_in_checks_against_its_type_once_the_module_is_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    stand_in = imported_types("Stand", ("perfkit_test_module", "Base"))
    module = ModuleType("perfkit_test_module")

    class Base:
        pass

    class Derived(Base):
        pass

    module.Base = Base
    assert not isinstance(Derived(), stand_in) and not issubclass(Derived, stand_in)
    monkeypatch.setitem(sys.modules, "perfkit_test_module", module)
    assert isinstance(Derived(), stand_in) and issubclass(Derived, stand_in) and issubclass(Base, stand_in)
    assert not isinstance(object(), stand_in) and not issubclass(int, stand_in)
