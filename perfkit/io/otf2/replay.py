"""Replay of a trace on an ideal network: the runtime POP's serialisation and transfer efficiencies need.

POP's definitions (POP Centre of Excellence, "POP Standard Metrics for Parallel Performance
Analysis"): communication efficiency ``max_r C_r / T`` (``C_r`` rank r's computation time, ``T``
the runtime) is the product of

* serialisation efficiency ``SerE = max_r C_r / T_ideal``, and
* transfer efficiency ``TrE = T_ideal / T``,

where ``T_ideal`` is the runtime of the same execution on an *ideal network*, one that moves every
message in no time (zero latency, infinite bandwidth).

The replay finds ``T_ideal`` from the trace. Every rank keeps its computation, in its order:
between two of its MPI call instances it computes as long as it did (the compute ticks between
their enters); an MPI call takes no time of its own and ends as soon as what it waits for allows:

* a receive (``MPI_Recv``, or the call completing an ``MPI_Irecv``) when its matched message was
  sent, i.e. when the send call was entered (the message arrives when sent);
* a blocking send that waited for its receiver (Scalasca's late receiver) when the receive was
  posted;
* a barrier or an N x N collective when its last member entered; a broadcast or scatter, on a
  non-root rank, when the root entered; a reduce or gather, on the root, when the last member
  entered; a scan when the last of the lower ranks and itself entered.

Calls without message or collective events take no time and wait for nothing. The ideal times are
the longest paths of that dependency graph (each call's enter and end a node, edges weighted by
the compute between them), computed in topological order. Each rank then computes what it had
left after its last call; ``T_ideal`` is the latest rank's end. Times are integer ticks.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from numba import njit

from perfkit.io.otf2.waits import BARRIER, N_TO_ONE, NXN, ONE_TO_N, SCAN, Records, Waits, _local_ranks


def ideal_runtime(rec: Records, waits: Waits, computed: np.ndarray, comm_ranks: dict[int, np.ndarray]) -> int:
    """``T_ideal`` [ticks] of the trace whose records are ``rec`` (``waits``: its matched messages and
    late receivers; ``computed``: each rank's total compute ticks; ``comm_ranks``: each
    communicator's world ranks)."""
    n = rec.inst_rank.size
    if not n:  # no call waits for anything: each rank computes alone
        return int(np.max(computed, initial=0))
    order = np.lexsort((np.arange(n), rec.inst_enter, rec.inst_rank))  # each rank's instances in time order
    rank = rec.inst_rank[order]
    first = np.ones(n, dtype=bool)
    first[1:] = rank[1:] != rank[:-1]
    gap = np.empty(n, dtype=np.int64)  # compute before each instance, since the rank's previous one
    gap[order] = np.where(first, rec.inst_compute[order], np.diff(rec.inst_compute[order], prepend=0))
    after = np.full(n, -1, dtype=np.int64)  # the rank's next instance
    after[order[:-1][~first[1:]]] = order[1:][~first[1:]]
    start, end = np.arange(n), n + np.arange(n)  # node ids: enter (start) and end of each instance
    send_inst, recv_inst = rec.send_inst[waits.send_index], rec.recv_inst[waits.recv_index]
    edges = [(start[send_inst], end[recv_inst]), _late_receivers(rec, waits, start, end)]
    coll_edges, extra = _collectives(rec, comm_ranks, start, end, 2 * n)
    edges += coll_edges
    src = np.concatenate([e[0] for e in edges]).astype(np.int64)
    dst = np.concatenate([e[1] for e in edges]).astype(np.int64)
    del edges
    is_first = np.empty(n, dtype=bool)
    is_first[order] = first
    value, done = _longest_paths(n, extra, gap, after, is_first, src, dst)
    if done < 2 * n + extra:
        raise ValueError("the trace's calls wait for each other in a cycle; it cannot be replayed")
    finish = np.asarray(computed, dtype=np.int64).copy()  # ranks without a call: their computation
    last = order[np.append(first[1:], True)]
    r = rec.inst_rank[last]
    finish[r] = value[end[last]] + (finish[r] - rec.inst_compute[last])
    return int(finish.max(initial=0))


def _late_receivers(rec: Records, waits: Waits, start: np.ndarray,
                    end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Edges: a blocking send that waited for its receiver ends when the receive was posted (the
    receiving rank's instance entered at the post tick)."""
    s_inst = rec.send_inst[waits.send_index]
    waited = waits.late_receiver[s_inst] > 0
    r = waits.recv_index[waited]
    rank, post = rec.recv_rank[r], rec.recv_post[r]
    keys = np.lexsort((rec.inst_enter, rec.inst_rank))
    sorted_rank, sorted_enter = rec.inst_rank[keys], rec.inst_enter[keys]
    span = int(max(sorted_enter.max(initial=0), post.max(initial=0))) + 1
    at = np.searchsorted(sorted_rank * span + sorted_enter, rank * span + post)
    at = np.minimum(at, max(keys.size - 1, 0))
    found = (keys.size > 0) & (sorted_rank[at] == rank) & (sorted_enter[at] == post)
    return start[keys[at[found]]], end[s_inst[waited][found]]


def _collectives(rec: Records, comm_ranks: dict[int, np.ndarray], start: np.ndarray, end: np.ndarray,
                 first_node: int) -> tuple[list[tuple[np.ndarray, np.ndarray]], int]:
    """Edges through one extra node per collective (per member for scans), and the extra node count."""
    if not rec.coll_rank.size:
        return [], 0
    table = pd.DataFrame({"rank": rec.coll_rank, "comm": rec.coll_comm})
    k = table.groupby(["rank", "comm"], sort=False).cumcount().to_numpy()
    _, group = np.unique(rec.coll_comm.astype(np.int64) * (int(k.max()) + 1) + k, return_inverse=True)
    group = group.ravel()
    node = first_node + group
    inst, op = rec.coll_inst, rec.coll_op
    is_root = rec.coll_rank == rec.coll_root
    all_in = np.isin(op, list(BARRIER | NXN))
    into = all_in | (np.isin(op, list(N_TO_ONE))) | (np.isin(op, list(ONE_TO_N)) & is_root)
    out_of = all_in | (np.isin(op, list(N_TO_ONE)) & is_root) | (np.isin(op, list(ONE_TO_N)) & ~is_root)
    edges = [(start[inst[into]], node[into]), (node[out_of], end[inst[out_of]])]
    extra = int(group.max()) + 1
    scan = np.flatnonzero(np.isin(op, list(SCAN)))
    if scan.size:  # a chain in communicator-rank order: node j = max(node j-1, enter j)
        local = _local_ranks(comm_ranks, rec.coll_comm[scan], rec.coll_rank[scan])
        chain = scan[np.lexsort((local, group[scan]))]
        links = first_node + extra + np.arange(chain.size)
        same = group[chain][1:] == group[chain][:-1]
        edges += [(start[inst[chain]], links), (links[:-1][same], links[1:][same]), (links, end[inst[chain]])]
        extra += chain.size
    return edges, extra


@njit(cache=True)
def _kahn(n: int, extra: int, gap: np.ndarray, after: np.ndarray, offsets: np.ndarray, targets: np.ndarray,
          indegree: np.ndarray, value: np.ndarray) -> int:
    total = 2 * n + extra
    queue = np.empty(total, dtype=np.int64)
    head = tail = 0
    for v in range(total):
        if indegree[v] == 0:
            queue[tail] = v
            tail += 1
    while head < tail:
        u = queue[head]
        head += 1
        if u < n:  # an enter: its end follows at once
            nxt, weight = n + u, 0
        elif u < 2 * n and after[u - n] >= 0:  # an end: the rank computes, then enters its next call
            nxt, weight = after[u - n], gap[after[u - n]]
        else:
            nxt, weight = -1, 0
        if nxt >= 0:
            if value[u] + weight > value[nxt]:
                value[nxt] = value[u] + weight
            indegree[nxt] -= 1
            if indegree[nxt] == 0:
                queue[tail] = nxt
                tail += 1
        for e in range(offsets[u], offsets[u + 1]):
            v = targets[e]
            if value[u] > value[v]:
                value[v] = value[u]
            indegree[v] -= 1
            if indegree[v] == 0:
                queue[tail] = v
                tail += 1
    return head


def _longest_paths(n: int, extra: int, gap: np.ndarray, after: np.ndarray, first: np.ndarray, src: np.ndarray,
                   dst: np.ndarray) -> tuple[np.ndarray, int]:
    """Longest-path value [ticks] of every node (the enters, the ends of the ``n`` instances, then
    ``extra`` collective nodes) in topological order (Kahn's algorithm), and how many nodes were
    reached (fewer than all: a cycle). Each instance's end follows its enter, and its rank's next
    instance (``after``) is entered ``gap`` ticks of compute after it; ``src`` -> ``dst`` are the
    waits between ranks. A rank's ``first`` instance is entered after the compute before it."""
    total = 2 * n + extra
    offsets = np.concatenate([[0], np.cumsum(np.bincount(src, minlength=total))]).astype(np.int64)
    targets = dst[np.argsort(src, kind="stable")].astype(np.int64)
    indegree = np.bincount(dst, minlength=total).astype(np.int64)
    indegree[n:2 * n] += 1  # from the instance's enter
    indegree[:n] += ~first  # from the rank's previous instance
    value = np.zeros(total, dtype=np.int64)
    value[:n] = np.where(first, gap, 0)
    done = _kahn(n, extra, gap, after, offsets, targets, indegree, value)
    return value, int(done)
