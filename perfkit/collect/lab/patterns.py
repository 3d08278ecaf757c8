"""Communication patterns for the exchange program: bytes each rank sends each rank per step.

A pattern is an (n, n) int64 array, sender x receiver [B per step]; ``write_pattern`` puts it in the
text form ``programs/exchange.c`` reads. Patterns are for runs on the testbed, whose interface counters
and the program's own clock measure what they cost.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np


def _grid_neighbours(dims: tuple[int, ...], periodic: bool) -> np.ndarray:
    """(n, n) bool: which ranks of a row-major grid are face neighbours."""
    n = int(np.prod(dims))
    coords = np.array(np.unravel_index(np.arange(n), dims)).T
    adjacent = np.zeros((n, n), bool)
    for axis, extent in enumerate(dims):
        for shift in (-1, 1):
            other = coords.copy()
            other[:, axis] += shift
            if periodic:
                other[:, axis] %= extent
            ok = (other[:, axis] >= 0) & (other[:, axis] < extent)
            target = np.ravel_multi_index(other[ok].T, dims)
            adjacent[np.arange(n)[ok], target] = True
    np.fill_diagonal(adjacent, False)
    return adjacent


def stencil(dims: tuple[int, ...], nbytes: int, *, periodic: bool = False) -> np.ndarray:
    """A face-neighbour halo exchange on a grid of ``dims`` ranks (2-D or 3-D), ``nbytes`` per face."""
    return _grid_neighbours(tuple(int(d) for d in dims), periodic).astype(np.int64) * int(nbytes)


def ring(n: int, nbytes: int) -> np.ndarray:
    """Each rank sends ``nbytes`` to its right and its left neighbour on a ring of ``n``."""
    return stencil((n,), nbytes, periodic=True)


def sparse_random(n: int, degree: int, nbytes: int, *, seed: int = 0) -> np.ndarray:
    """Each rank sends ``nbytes`` to ``degree`` random others (a fixed seed: the same pattern each time)."""
    rng = np.random.default_rng(seed)
    out = np.zeros((n, n), np.int64)
    for r in range(n):
        peers = rng.choice(np.delete(np.arange(n), r), size=min(degree, n - 1), replace=False)
        out[r, peers] = nbytes
    return out


def alltoall(n: int, nbytes: int) -> np.ndarray:
    """Every rank sends ``nbytes`` to every other."""
    out = np.full((n, n), int(nbytes), np.int64)
    np.fill_diagonal(out, 0)
    return out


def shuffled(pattern: np.ndarray, *, seed: int = 0) -> np.ndarray:
    """The same pattern with the ranks renumbered at random (``seed``): block placement loses locality."""
    perm = np.random.default_rng(seed).permutation(pattern.shape[0])
    return pattern[np.ix_(perm, perm)]


def write_pattern(pattern: np.ndarray, path: str | os.PathLike) -> Path:
    """Write ``pattern`` as ``sender receiver bytes`` lines (non-zero entries only)."""
    senders, receivers = np.nonzero(pattern)
    rows = np.column_stack([senders, receivers, pattern[senders, receivers]])
    path = Path(path)
    np.savetxt(path, rows, fmt="%d")
    return path
