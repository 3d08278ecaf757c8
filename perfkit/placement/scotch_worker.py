"""The part of the Scotch adapter that runs inside the worker process.

Loaded by file path in a fresh interpreter (see ``perfkit.placement.worker``), so it imports only
numpy and scotchpy. Its inputs were validated by ``perfkit.placement.scotch`` in the caller.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

#: SCOTCH_OPTIONNUMDETERMINISTIC and SCOTCH_OPTIONNUMRANDOMFIXEDSEED (scotch.h).
_OPTION_DETERMINISTIC = 0
_OPTION_FIXED_SEED = 1


def map_arrays(
    verttab: np.ndarray,
    edgetab: np.ndarray,
    edlotab: np.ndarray,
    arch: tuple[str, tuple[int, ...], tuple[int, ...], np.ndarray | None],
    terminals: int,
    seed: int,
    balance: float,
    flags: int,
) -> tuple[np.ndarray, float]:
    """Scotch static mapping of a CSR graph onto ``arch``; returns (terminal per vertex, seconds)."""
    import scotchpy
    from scotchpy import common

    graph = scotchpy.Graph()
    graph.build(baseval=0, verttab=verttab, edgetab=edgetab, edlotab=edlotab)
    target = _build_arch(scotchpy, *arch)
    context = scotchpy.Context()
    context.option_set_num(_OPTION_DETERMINISTIC, 1)
    context.option_set_num(_OPTION_FIXED_SEED, 1)
    context.random_clone()
    # SCOTCH_contextRandomSeed returns void and scotchpy's wrapper tests its undefined return
    # value, so the C routine is called directly.
    common.libscotch.SCOTCH_contextRandomSeed(context._contextptr, common.proper_int(seed))
    bound = scotchpy.Graph()
    context.bind_graph(graph, bound)
    bound._data(store=True)  # bind_graph does not fill the bound graph's Python-side sizes
    strat = scotchpy.Strat()
    strat.graph_map_build(flags, terminals, balance)
    terminal = np.zeros(len(verttab) - 1, dtype=np.int64)
    start = time.perf_counter()
    bound.map(target, strat, terminal)
    return terminal, time.perf_counter() - start


def _build_arch(scotchpy: Any, kind: str, sizes: tuple[int, ...], links: tuple[int, ...], sub: Any) -> Any:
    arch = scotchpy.Arch()
    if kind == "tleaf":
        arch.tleaf(np.array(sizes, dtype=np.int64), np.array(links, dtype=np.int64))
    elif kind == "hcub":
        arch.hcub(sizes[0])
    elif len(sizes) == 2:
        arch.torus2(*sizes)
    elif len(sizes) == 3:
        arch.torus3(*sizes)
    else:
        arch.torusX(np.array(sizes, dtype=np.int64))
    if sub is None:
        return arch
    restricted = scotchpy.Arch()
    restricted.sub(arch, np.ascontiguousarray(sub, dtype=np.int64))
    return restricted
