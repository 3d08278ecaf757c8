"""Synthetic traffic matrices for tests, benchmarks and lessons: 3D halo-exchange stencils."""

from __future__ import annotations

import itertools

import numpy as np
import scipy.sparse as sps


def stencil_3d(shape: tuple[int, int, int], points: int = 26, subdomain: int = 32, word: int = 8) -> sps.csr_matrix:
    """Bytes per halo exchange of a non-periodic 3D domain decomposition on ``shape`` ranks.

    Rank (i, j, k) has number ``(i * ny + j) * nz + k``. Each rank owns a ``subdomain``^3 block of
    ``word``-byte values and sends a face (subdomain^2 values) to its 6 face neighbours and, with
    ``points=26``, an edge (subdomain values) to 12 edge and one value to 8 corner neighbours.
    """
    if points not in (6, 26):
        raise ValueError(f"points must be 6 or 26, got {points}")
    shape = tuple(int(s) for s in shape)
    index = np.arange(int(np.prod(shape))).reshape(shape)
    rows, cols, vals = [], [], []
    for offset in itertools.product((-1, 0, 1), repeat=3):
        touched = sum(o != 0 for o in offset)
        if touched == 0 or (points == 6 and touched > 1):
            continue
        src = tuple(slice(max(0, -o), n - max(0, o)) for o, n in zip(offset, shape))
        dst = tuple(slice(max(0, o), n - max(0, -o)) for o, n in zip(offset, shape))
        rows.append(index[src].ravel())
        cols.append(index[dst].ravel())
        vals.append(np.full(rows[-1].size, float(word * subdomain ** (3 - touched))))
    n = index.size
    return sps.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(n, n))


def renumber(matrix: sps.spmatrix, seed: int = 0) -> sps.csr_matrix:
    """The same traffic with ranks numbered by a random permutation (``seed``)."""
    perm = np.random.default_rng(seed).permutation(matrix.shape[0])
    coo = sps.coo_matrix(matrix)
    return sps.csr_matrix((coo.data, (perm[coo.row], perm[coo.col])), shape=coo.shape)
