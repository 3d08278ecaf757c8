"""Pair tables of sparse traffic: what is kept, and the way back."""

from __future__ import annotations

import numpy as np
import pytest
import sparse
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from perfkit import sparse_traffic

CELL = st.sampled_from([0.0, 0.0, 0.0, 1.0, 2.5, 1e9, np.nan])


@settings(max_examples=60, deadline=None)
@given(arrays(np.float64, st.tuples(st.integers(1, 3), st.integers(1, 5), st.just(5), st.just(3)), elements=CELL))
def test_pairs_round_trip_from_dense_and_sparse(dense):
    """A pair is kept when one quantity is finite and non-zero, with its NaN; every other pair reads 0."""
    kept = (np.isfinite(dense) & (dense != 0)).any(axis=3, keepdims=True)
    expected = np.where(kept, dense, 0.0)
    for source in (dense, sparse.COO.from_numpy(dense)):
        run, sender, receiver, value = sparse_traffic.pairs(source)
        assert np.all(np.diff((run * 5 + sender) * 5 + receiver) > 0)  # sorted, one entry a pair
        back = sparse_traffic.coo(run, sender, receiver, value, dense.shape)
        assert back.fill_value == 0 and not (back.data == 0).any()
        np.testing.assert_array_equal(back.todense(), expected)


def test_a_sparse_array_with_another_fill_value_is_refused():
    coo = sparse.COO.from_numpy(np.full((1, 2, 2, 3), np.nan), fill_value=np.nan)
    with pytest.raises(ValueError, match="fill value 0"):
        sparse_traffic.pairs(coo)
