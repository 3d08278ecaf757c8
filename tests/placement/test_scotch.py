"""Scotch adapter: input checks before the library, deterministic mapping, errors, repair."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sps

from perfkit.placement import scotch, scotch_worker
from perfkit.placement.repair import repair
from perfkit.placement.scotch import ArchSpec, ScotchError, ScotchGraph, ScotchTimeout, graph_from_matrix, map_graph
from perfkit.placement.synthetic import renumber, stencil_3d
from perfkit.placement.topology import Topology
from perfkit.placement.worker import WorkerError, run_isolated
from tests.placement.placement_data import maplib


@pytest.fixture
def no_scotch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if anything reaches the worker that runs libscotch."""

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("Scotch was called with invalid input")

    monkeypatch.setattr(scotch, "run_isolated", forbidden)


def test_graph_is_symmetrised_without_diagonal() -> None:
    graph = graph_from_matrix(np.array([[5.0, 2.0, 0.0], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0]]))
    adjacency = sps.csr_matrix((graph.edlotab, graph.edgetab, graph.verttab)).toarray()
    assert np.array_equal(adjacency, adjacency.T)
    assert not adjacency.diagonal().any()
    assert adjacency[0, 1] == scotch.LOAD_MAX and adjacency[0, 2] == scotch.LOAD_MAX // 2
    assert all(a.dtype == np.int64 and a.flags.c_contiguous for a in graph)


@pytest.mark.parametrize(
    ("matrix", "message"),
    [
        (np.array([[0.0, -1.0], [1.0, 0.0]]), "negative"),
        (np.array([[0.0, np.nan], [1.0, 0.0]]), "NaN"),
        (np.array([[0.0, np.inf], [1.0, 0.0]]), "NaN or infinite"),
        (np.ones((2, 3)), "square"),
        (np.ones(4), "2D"),
        (np.array([["a", "b"], ["c", "d"]]), "numbers"),
        (np.zeros((0, 0)), "non-empty"),
    ],
)
def test_bad_matrices_rejected_before_scotch(no_scotch: None, matrix: np.ndarray, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        graph_from_matrix(matrix)


def test_bad_graph_arrays_rejected_before_scotch(no_scotch: None) -> None:
    good = graph_from_matrix(np.array([[0.0, 1.0], [1.0, 0.0]]))
    arch = ArchSpec("tleaf", (2,), (1,))
    strided = np.arange(6, dtype=np.int64)[::2]
    cases = [
        (ScotchGraph(strided, good.edgetab, good.edlotab), "C-contiguous"),
        (ScotchGraph(good.verttab.astype(np.int32), good.edgetab, good.edlotab), "int64"),
        (ScotchGraph(good.verttab, np.array([1, 5], dtype=np.int64), good.edlotab), "outside"),
        (ScotchGraph(good.verttab, good.edgetab, np.array([1, 0], dtype=np.int64)), "loads"),
        (ScotchGraph(good.verttab, np.array([0, 1], dtype=np.int64), good.edlotab), "self loops|symmetric"),
        (ScotchGraph(good.verttab, good.edgetab, np.array([1, 2], dtype=np.int64)), "symmetric"),
        (ScotchGraph(np.array([0, 1, 3], dtype=np.int64), good.edgetab, good.edlotab), "end at the edge count"),
    ]
    for graph, message in cases:
        with pytest.raises(ValueError, match=message):
            map_graph(graph, arch)


@pytest.mark.parametrize(
    ("arch", "message"),
    [
        (ArchSpec("mesh", (2,)), "unknown architecture"),
        (ArchSpec("tleaf", (2, 2), (1,)), "one link cost"),
        (ArchSpec("tleaf", (0,), (1,)), "positive"),
        (ArchSpec("tleaf", (4,), (1,), np.array([0, 0], dtype=np.int64)), "distinct"),
        (ArchSpec("tleaf", (4,), (1,), np.array([3, 4], dtype=np.int64)), r"in \[0, 4\)"),
        (ArchSpec("tleaf", (4,), (1,), np.array([1, 2], dtype=np.int32)), "int64"),
    ],
)
def test_bad_architectures_rejected_before_scotch(no_scotch: None, arch: ArchSpec, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        map_graph(graph_from_matrix(np.ones((2, 2))), arch)


def test_bad_seed_and_balance(no_scotch: None) -> None:
    graph, arch = graph_from_matrix(np.ones((2, 2))), ArchSpec("tleaf", (2,), (1,))
    with pytest.raises(ValueError, match="seed"):
        map_graph(graph, arch, seed=-1)
    with pytest.raises(ValueError, match="balance"):
        map_graph(graph, arch, balance=1.5)


def test_mapping_is_deterministic_and_seed_matters() -> None:
    graph = graph_from_matrix(renumber(stencil_3d((8, 8, 4)), seed=3))
    arch = Topology(nodes=4, cores=64).scotch_arch(256)
    first, again, other = (map_graph(graph, arch, seed=s).terminal for s in (1, 1, 2))
    assert np.array_equal(first, again)
    assert not np.array_equal(first, other)


def test_maplib_mapping_fills_every_core() -> None:
    result = map_graph(graph_from_matrix(maplib("lulesh")), Topology(nodes=4, cores=16).scotch_arch(64))
    assert result.terminal.shape == (64,) and result.seconds >= 0
    assert np.bincount(result.terminal, minlength=64).max() <= 2  # Scotch may double-book; repair fixes it


def test_library_error_in_worker_becomes_exception() -> None:
    # Arrays that skip the adapter's checks: libscotch's own graph check rejects them in the worker.
    verttab, edgetab, loads = (np.array(a, dtype=np.int64) for a in ([0, 2, 3], [1, 5, 0], [1, 1, 1]))
    with pytest.raises(WorkerError, match="graphCheck"):
        run_isolated(scotch_worker.map_arrays, verttab, edgetab, loads, ("tleaf", (2,), (1,), None), 2, 0, 0.0, 0)


def test_worker_crash_and_timeout_become_scotch_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.placement import placement_faults

    graph, arch = graph_from_matrix(np.ones((2, 2))), ArchSpec("tleaf", (2,), (1,))
    monkeypatch.setattr(scotch_worker, "map_arrays", placement_faults.segfault)
    with pytest.raises(ScotchError, match="SIGSEGV"):
        map_graph(graph, arch)
    monkeypatch.setattr(scotch_worker, "map_arrays", placement_faults.hang)
    with pytest.raises(ScotchTimeout, match="timed out"):
        map_graph(graph, arch, timeout=0.5)


def test_real_mapping_times_out() -> None:
    graph = graph_from_matrix(stencil_3d((32, 32, 16)))
    with pytest.raises(ScotchTimeout):
        map_graph(graph, Topology(nodes=342, cores=48).scotch_arch(16384), timeout=0.05)


def test_repair_moves_only_the_excess() -> None:
    weights = sps.csr_matrix(np.array([[0, 5, 1, 0], [5, 0, 0, 0], [1, 0, 0, 9], [0, 0, 9, 0]], dtype=float))
    target = np.array([0, 0, 0, 2])  # three ranks on target 0 (capacity 1 each), targets 1 and 3 free
    topo = Topology(nodes=2, cores=2)
    fixed, moved = repair(target, np.ones(4, dtype=np.int64), weights, topo.node_of(np.arange(4)), topo.hops)
    assert moved == 2
    assert np.bincount(fixed, minlength=4).max() == 1
    assert fixed[3] == 2
    assert fixed[2] == 3  # rank 2 talks to rank 3 on node 1: it moves next to it


def test_repair_rejects_overfull_machine() -> None:
    with pytest.raises(ValueError, match="do not fit"):
        repair(np.zeros(3, dtype=np.int64), np.ones(2, dtype=np.int64), sps.csr_matrix((3, 3)), np.arange(2), min)
