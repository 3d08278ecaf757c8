"""Traffic-matrix statistics: hand-made matrices, dense = sparse, a 50,000-rank stencil, properties."""

from __future__ import annotations

import time
import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sps
import sparse
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import perfkit
from perfkit.analysis.traffic import (
    aggregate,
    distance_bins,
    inter_group_share,
    locality,
    partners,
    rank_totals,
    self_traffic,
    symmetry,
    traffic_matrix,
)
from perfkit.model import make_run

# 4 ranks: 0 -> 1 (10), 1 -> 0 (10), 1 -> 2 (5), 3 -> 0 (7), 2 self-sends 4.
HAND = np.array(
    [
        [0, 10, 0, 0],
        [10, 0, 5, 0],
        [0, 0, 4, 0],
        [7, 0, 0, 0],
    ],
    dtype=float,
)


def dataset(matrix: np.ndarray, label: str = "r") -> xr.Dataset:
    """A one-run canonical Dataset whose traffic bytes are ``matrix`` (counts and times 0)."""
    n = matrix.shape[0]
    cube = np.zeros((n, n, 3))
    cube[..., 0] = matrix
    return make_run(np.zeros((n, 0, 6)), ranks=range(n), functions=[], run={"label": label, "nprocs": n}, traffic=cube)


def forms(matrix: np.ndarray) -> list:
    """The same matrix as numpy, scipy CSR, pydata COO, a DataArray and a one-run Dataset."""
    return [
        matrix,
        sps.csr_matrix(matrix),
        sparse.COO.from_numpy(matrix),
        xr.DataArray(matrix.T, dims=("receiver", "sender")),
        dataset(matrix),
    ]


@pytest.mark.parametrize("form", range(5))
def test_hand_made_answers_in_every_form(form):
    w = forms(HAND)[form]
    totals = rank_totals(w)
    assert totals["sent"].tolist() == [10, 15, 4, 7]
    assert totals["received"].tolist() == [17, 10, 9, 0]
    assert partners(w).to_dict("list") == {"sent_to": [1, 2, 0, 1], "received_from": [2, 1, 1, 0]}
    own = self_traffic(w)
    assert own.total == 4 and own.fraction == pytest.approx(4 / 36) and own.ranks.tolist() == [2]
    sym = symmetry(w, top=2)
    # off-diagonal: |W - W^T| = 2 * (5 + 7) = 24 over 32 bytes
    assert sym.asymmetry == pytest.approx(24 / 32)
    assert sym.pairs[["rank_a", "rank_b"]].values.tolist() == [[0, 3], [1, 2]]
    assert sym.pairs[["a_to_b", "b_to_a", "difference"]].values.tolist() == [[0, 7, 7], [5, 0, 5]]
    loc = locality(w, k=1)
    assert loc.histogram.index.tolist() == ["0", "1", "2-3"]
    assert loc.histogram["value"].tolist() == [4, 25, 7]
    assert loc.share_within_k == pytest.approx(29 / 36)
    assert loc.mean_distance == pytest.approx((25 * 1 + 7 * 3) / 36)
    node = aggregate(w, np.array([0, 0, 1, 1]))
    assert node.dims == ("sender_node", "receiver_node")
    assert node.values.tolist() == [[20, 5], [7, 4]]
    assert inter_group_share(node) == pytest.approx(12 / 36)


def test_distance_bins_and_custom_bins():
    assert distance_bins(64).tolist() == [0, 1, 2, 4, 8, 16, 32, 64]
    assert distance_bins(1).tolist() == [0, 1]
    hist = locality(HAND, bins=[1, 3]).histogram  # distances 1-2 only
    assert hist.index.tolist() == ["1-2"] and hist["value"].tolist() == [25]
    with pytest.raises(ValueError, match="increasing"):
        locality(HAND, bins=[3, 1])


def test_empty_and_invalid_inputs():
    zero = np.zeros((3, 3))
    assert symmetry(zero).asymmetry == 0 and symmetry(zero).pairs.empty
    assert locality(zero).share_within_k == 0 and self_traffic(zero).fraction == 0
    with pytest.raises(ValueError, match="square"):
        rank_totals(np.ones((2, 3)))
    with pytest.raises(ValueError, match="non-negative"):
        rank_totals(-np.eye(2))
    with pytest.raises(ValueError, match="covers 3 ranks"):
        aggregate(HAND, np.array([0, 1, 1]))
    with pytest.raises(ValueError, match="level"):
        aggregate(HAND, np.array([0, 0, 1, 1]), level="rack")


def test_dataset_run_quantity_and_padding():
    """A combined Dataset: pick the run and quantity; ranks beyond the run's nprocs are dropped."""
    both = perfkit.combine_runs([dataset(HAND), dataset(np.ones((6, 6)), "big")])
    assert traffic_matrix(both, run="r").shape == (4, 4)
    assert rank_totals(both, run="big")["sent"].tolist() == [6] * 6
    assert rank_totals(both, run="r", quantity="count")["sent"].sum() == 0
    with pytest.raises(ValueError, match="choose one"):
        rank_totals(both)
    with pytest.raises(ValueError, match="quantity"):
        rank_totals(both, run=0, quantity="flops")


def test_aggregate_under_a_placement_matches_placement_cost():
    w = perfkit.open_matrix("data/real/matrices/MapLib_lulesh_64_p2p.size.csv")
    topo = perfkit.Topology(nodes=4, cores=16, sockets=2, switch_size=2)
    placement = perfkit.place(w.sel(quantity="bytes"), topo, strategy="round_robin")
    cost = placement.cost()
    nodes = aggregate(w, placement)
    assert nodes.shape == (4, 4)
    assert float(nodes.sum()) - np.trace(nodes.values) == pytest.approx(cost.inter_node_bytes)
    sockets = aggregate(w, placement, level="socket")
    assert sockets.shape == (8, 8) and np.trace(sockets.values) == pytest.approx(cost.bytes_socket)
    switches = aggregate(w, placement, level="switch")
    assert switches.shape == (2, 2)
    assert float(switches.sum()) - np.trace(switches.values) == pytest.approx(cost.bytes_network)


def stencil(shape: tuple[int, int, int]) -> sps.csr_matrix:
    """7-point stencil on a 3D grid of ranks, 1 byte to each neighbour (no wrap)."""
    n = int(np.prod(shape))
    ranks = np.arange(n)
    coords = np.unravel_index(ranks, shape)
    rows, cols = [], []
    for axis, size in enumerate(shape):
        for step in (-1, 1):
            moved = coords[axis] + step
            ok = (moved >= 0) & (moved < size)
            neighbour = list(coords)
            neighbour[axis] = moved
            rows.append(ranks[ok])
            cols.append(np.ravel_multi_index([c[ok] for c in neighbour], shape))
    rows, cols = np.concatenate(rows), np.concatenate(cols)
    return sps.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(n, n))


def test_50000_rank_stencil_stays_sparse_and_fast():
    """A dense 50,000^2 float64 matrix would be 20 GB: the peak allocation must stay far below."""
    shape = (50, 40, 25)
    w = sparse.COO.from_scipy_sparse(stencil(shape))
    tracemalloc.start()
    start = time.perf_counter()
    totals = rank_totals(w)
    count = partners(w)
    sym = symmetry(w)
    loc = locality(w, k=1)
    nodes = aggregate(w, np.arange(50_000) // 48)
    elapsed = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 100e6
    edges = 2 * (49 * 40 * 25 + 50 * 39 * 25 + 50 * 40 * 24)
    assert totals["sent"].sum() == edges and count["sent_to"].max() == 6 and count["sent_to"].min() == 3
    assert sym.asymmetry == 0
    assert loc.share_within_k == pytest.approx(2 * 50 * 40 * 24 / edges)
    assert float(nodes.sum()) == edges and nodes.shape == (1042, 1042)
    assert elapsed < 5


def test_large_group_count_is_returned_sparse():
    w = stencil((20, 20, 20))
    out = aggregate(w, np.arange(8000))
    assert isinstance(out.data, sparse.COO) and float(out.data.sum()) == w.sum()
    assert inter_group_share(out) == 1.0


# --- properties ----------------------------------------------------------------------------------

matrices = st.integers(1, 12).flatmap(
    lambda n: arrays(np.float64, (n, n), elements=st.sampled_from([0.0, 0.0, 1.0, 2.5, 1e6, 3.0]))
)


@settings(max_examples=60, deadline=None)
@given(matrices, st.data())
def test_aggregate_preserves_the_total(w, data):
    groups = data.draw(arrays(np.int64, w.shape[0], elements=st.integers(0, 4)))
    assert float(aggregate(w, groups).sum()) == pytest.approx(w.sum())


@settings(max_examples=60, deadline=None)
@given(matrices)
def test_symmetrised_matrix_has_zero_asymmetry(w):
    assert symmetry(w + w.T).asymmetry == pytest.approx(0, abs=1e-12)
    assert 0 <= symmetry(w).asymmetry <= 2 + 1e-12


@settings(max_examples=60, deadline=None)
@given(matrices, st.randoms(use_true_random=False))
def test_totals_and_partners_follow_a_relabelling(w, rng):
    n = w.shape[0]
    perm = np.array(rng.sample(range(n), n))  # new label of old rank r is perm[r]
    relabelled = np.empty_like(w)
    relabelled[np.ix_(perm, perm)] = w
    for measure in (rank_totals, partners):
        before, after = measure(w), measure(relabelled)
        assert np.array_equal(after.values[perm], before.values)
    assert self_traffic(relabelled).total == pytest.approx(self_traffic(w).total)
    assert symmetry(relabelled).asymmetry == pytest.approx(symmetry(w).asymmetry)


@settings(max_examples=40, deadline=None)
@given(matrices)
def test_dense_and_sparse_agree(w):
    coo = sparse.COO.from_numpy(w)
    assert rank_totals(w).equals(rank_totals(coo))
    assert partners(w).equals(partners(coo))
    assert locality(w, k=2).histogram.equals(locality(coo, k=2).histogram)
    assert symmetry(w).asymmetry == symmetry(coo).asymmetry
    assert locality(w).histogram["value"].sum() == pytest.approx(w.sum())


# --- plots ----------------------------------------------------------------------------------------


@pytest.fixture
def tplots():
    import holoviews as hv

    from perfkit.plots import traffic

    hv.extension("bokeh")
    return traffic


def test_heatmap_orientation_zoom_and_rasterised_large_matrix(tplots):
    image = tplots.heatmap(HAND)
    assert image[3, 0] != image[3, 0] and image[0, 3] == 7  # x = receiver, y = sender; zero is blank
    zoom = tplots.heatmap(HAND, ranks=(1, 3))
    assert zoom[2, 1] == 5 and zoom.bounds.lbrt() == (0.5, 0.5, 2.5, 2.5)
    big = tplots.heatmap(stencil((20, 20, 20)), pixels=100)
    assert big.vdims[0].name == "bytes" and big.data["bytes"].shape == (100, 100)
    assert float(np.nansum(big.data["bytes"].values)) == pytest.approx(stencil((20, 20, 20)).sum())
    with pytest.raises(ValueError, match="contiguous"):
        tplots.heatmap(HAND, ranks=(3, 1))
    with pytest.raises(ValueError, match="no bytes between ranks 0-3 in the matrix to draw"):
        tplots.heatmap(np.zeros((4, 4)))  # a run without a matrix: said, not a TypeError from the colour range


def test_before_after_titles_and_locality_bars(tplots):
    together, apart = aggregate(HAND, np.array([0, 0, 1, 1])), aggregate(HAND, np.array([0, 1, 0, 1]))
    layout = tplots.before_after([together, apart], ["a", "b"])
    assert [p.opts.get().kwargs["title"] for p in layout] == ["a: 33.3% between nodes", "b: 88.9% between nodes"]
    bars = tplots.locality_bars(locality(HAND, k=1))
    assert list(bars.data["share"]) == pytest.approx([4 / 36, 25 / 36, 7 / 36])


def test_summaries_of_a_lazily_loaded_sparse_store_equal_in_memory(tmp_path):
    """Traffic stored as pair tables, loaded lazily (dask of sparse.COO blocks): the same numbers, one run's block."""
    from perfkit import synthetic
    from perfkit.analysis.traffic import aggregate, locality, rank_totals

    run, _ = synthetic.generate_run(1000, "slt", steps=2)
    lazy = perfkit.load(perfkit.save(run, tmp_path / "run.zarr"), chunks={})
    assert hasattr(lazy["traffic"].data, "dask") and isinstance(lazy["traffic"].data._meta, sparse.COO)
    for quantity in ("bytes", "count", "time"):
        assert (traffic_matrix(lazy, quantity=quantity) != traffic_matrix(run, quantity=quantity)).nnz == 0
    pd_equal = lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b))  # noqa: E731
    pd_equal(rank_totals(lazy), rank_totals(run))
    pd_equal(locality(lazy).histogram["value"], locality(run).histogram["value"])
    nodes = np.arange(1000) // 24
    np.testing.assert_array_equal(aggregate(lazy, nodes).values, aggregate(run, nodes).values)
