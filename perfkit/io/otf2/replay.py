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

The same graph replays the trace on other networks and with other compute (``replay_runtimes``). A
call's *own* time is its duration less its waits (late sender, late receiver, at a collective): the
transfer and the library's work. On a network ``k`` times faster every call ends ``own / k`` after
the last thing it waits for (its enter, its matched message's send, the collective's last arrival);
``k = 1`` replays the run as measured (a check of the replay against the trace's own runtime),
``k = inf`` is the ideal network. The runtime is the longest path, a maximum of functions linear in
``1 / k``: convex in ``1 / k``, which ``perfkit.analysis.whatif`` uses to bound ``k`` between replayed
ones. With ``compute`` factors per rank (e.g. ``mean C / C_r``: balanced) each rank's compute
between calls is scaled by its factor.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numba import njit

from perfkit.io.otf2.waits import (
    BARRIER,
    N_TO_ONE,
    NXN,
    ONE_TO_N,
    SCAN,
    Records,
    Waits,
    _local_ranks,
    collective_groups,
)

#: Scales of every call's own time the reader replays a trace at: as measured, networks 2, 4 and 8 times
#: faster, the ideal network.
TRANSFER_SCALES = (1.0, 0.5, 0.25, 0.125, 0.0)


def balanced(computed: np.ndarray) -> np.ndarray:
    """Per rank, the factor that makes its compute the mean of the ranks' (1 for a rank without compute)."""
    computed = np.asarray(computed, dtype=float)
    mean = computed.mean() if computed.size else 0.0
    return np.divide(mean, computed, out=np.ones_like(computed), where=computed > 0)


def replay_runtimes(rec: Records, waits: Waits, computed: np.ndarray, comm_ranks: dict[int, np.ndarray],
                    cases: Sequence[tuple[float, np.ndarray | None]]) -> np.ndarray:
    """Runtime [ticks] of the trace replayed in each case (``scale``, ``compute``): every call's own
    time scaled by ``scale`` (``1 / k`` on a network ``k`` times faster; 0: the ideal network, 1: as
    measured), each rank's compute by its factor in ``compute`` (None: as measured)."""
    n = rec.inst_rank.size
    after = _next_instances(rec) if n else np.zeros(0, dtype=np.int64)
    graph = None
    if n:
        # node ids: the enter of instance i is i, its end n + i, then the collectives' nodes
        edges = [(rec.send_inst[waits.send_index], n + rec.recv_inst[waits.recv_index]),
                 _late_receivers(rec, waits, n)]
        coll_edges, extra = _collectives(rec, comm_ranks, n)
        edges += coll_edges
        graph = _graph(n, extra, after, edges)
        del edges
        own = np.clip(rec.inst_leave - rec.inst_enter - waits.late_sender - waits.late_receiver - waits.collective,
                      0, None)
        last = np.flatnonzero(after < 0)  # each rank's last instance
        r = rec.inst_rank[last]
    out = np.empty(len(cases), dtype=np.int64)
    for i, (scale, compute) in enumerate(cases):
        factor = np.ones(len(computed)) if compute is None else np.asarray(compute, dtype=float)
        total = np.rint(np.asarray(computed, dtype=np.int64) * factor).astype(np.int64)
        if graph is None:  # no call waits for anything: each rank computes alone
            out[i] = total.max(initial=0)
            continue
        before = rec.inst_compute if compute is None else \
            np.rint(rec.inst_compute * factor[rec.inst_rank]).astype(np.int64)
        value, done = _longest_paths(n, extra, before, after, graph, np.rint(own * scale).astype(np.int64))
        if done < 2 * n + extra:
            raise ValueError("the trace's calls wait for each other in a cycle; it cannot be replayed")
        finish = total.copy()  # ranks without a call: their computation
        finish[r] = value[n + last] + (finish[r] - before[last])
        out[i] = finish.max(initial=0)
    return out


def _next_instances(rec: Records) -> np.ndarray:
    """The rank's next instance in time of every instance (-1: its last). The records hold each
    rank's instances together, usually already in time order (then no sort is made)."""
    rank, enter = rec.inst_rank, rec.inst_enter
    index = np.int32 if rank.size < 2**31 else np.int64
    if _in_time_order(rank, enter):
        return _successors(np.zeros(0, dtype=index), rank, index(0))
    return _successors(np.lexsort((np.arange(rank.size), enter, rank)).astype(index), rank, index(0))


@njit(cache=True)
def _in_time_order(rank: np.ndarray, enter: np.ndarray) -> bool:
    for i in range(1, rank.size):
        if rank[i] < rank[i - 1] or (rank[i] == rank[i - 1] and enter[i] < enter[i - 1]):
            return False
    return True


@njit(cache=True)
def _successors(order: np.ndarray, rank: np.ndarray, like: np.integer) -> np.ndarray:
    """``after`` of the instances in ``order`` (empty: the records' own order), typed as ``like``."""
    n = rank.size
    after = np.full(n, -1, dtype=type(like))
    for j in range(n - 1):
        a, b = (order[j], order[j + 1]) if order.size else (j, j + 1)
        if rank[b] == rank[a]:
            after[a] = b
    return after


def _late_receivers(rec: Records, waits: Waits, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Edges: a blocking send that waited for its receiver ends when the receive was posted (the
    receiving rank's instance entered at the post tick)."""
    s_inst = rec.send_inst[waits.send_index]
    waited = waits.late_receiver[s_inst] > 0
    r = waits.recv_index[waited]
    if not r.size:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    rank, post = rec.recv_rank[r], rec.recv_post[r]
    keys = np.lexsort((rec.inst_enter, rec.inst_rank))
    sorted_rank, sorted_enter = rec.inst_rank[keys], rec.inst_enter[keys]
    span = int(max(sorted_enter.max(initial=0), post.max(initial=0))) + 1
    at = np.searchsorted(sorted_rank * span + sorted_enter, rank * span + post)
    at = np.minimum(at, max(keys.size - 1, 0))
    found = (keys.size > 0) & (sorted_rank[at] == rank) & (sorted_enter[at] == post)
    return keys[at[found]], n + s_inst[waited][found]


def _collectives(rec: Records, comm_ranks: dict[int, np.ndarray],
                 n: int) -> tuple[list[tuple[np.ndarray, np.ndarray]], int]:
    """Edges through one extra node per collective (per member for scans), and the extra node count."""
    if not rec.coll_rank.size:
        return [], 0
    group, group_comm = collective_groups(rec)
    node = 2 * n + group
    inst, op = rec.coll_inst, rec.coll_op
    is_root = rec.coll_rank == rec.coll_root
    all_in = np.isin(op, list(BARRIER | NXN))
    into = all_in | (np.isin(op, list(N_TO_ONE))) | (np.isin(op, list(ONE_TO_N)) & is_root)
    out_of = all_in | (np.isin(op, list(N_TO_ONE)) & is_root) | (np.isin(op, list(ONE_TO_N)) & ~is_root)
    edges = [(inst[into], node[into]), (node[out_of], n + inst[out_of])]
    extra = group_comm.size
    scan = np.flatnonzero(np.isin(op, list(SCAN)))
    if scan.size:  # a chain in communicator-rank order: node j = max(node j-1, enter j)
        local = _local_ranks(comm_ranks, rec.coll_comm[scan], rec.coll_rank[scan])
        chain = scan[np.lexsort((local, group[scan]))]
        links = 2 * n + extra + np.arange(chain.size)
        same = group[chain][1:] == group[chain][:-1]
        edges += [(inst[chain], links), (links[:-1][same], links[1:][same]), (links, n + inst[chain])]
        extra += chain.size
    return edges, extra


@njit(cache=True)
def _count(nodes: np.ndarray, counts: np.ndarray) -> None:
    """Add 1 to ``counts`` at each of ``nodes``."""
    for v in nodes:
        counts[v] += 1


@njit(cache=True)
def _place(src: np.ndarray, dst: np.ndarray, offsets: np.ndarray, targets: np.ndarray) -> None:
    """Write the edges ``src`` -> ``dst`` into ``targets``: each just before ``offsets[src + 1]``,
    which moves back one (from the end of the source's edges to, once all are placed, their start)."""
    for e in range(src.size):
        offsets[src[e] + 1] -= 1
        targets[offsets[src[e] + 1]] = dst[e]


@njit(cache=True)
def _within_ranks(n: int, compute: np.ndarray, after: np.ndarray, indegree: np.ndarray, value: np.ndarray) -> None:
    """The edges within ranks: each instance's end follows its enter, its rank's next instance its
    end; a rank's first instance starts at the compute before it."""
    for i in range(n):
        indegree[n + i] += 1
        value[i] = compute[i]
    for i in range(n):
        if after[i] >= 0:
            indegree[after[i]] += 1
            value[after[i]] = 0


@njit(cache=True)
def _kahn(n: int, total: int, compute: np.ndarray, after: np.ndarray, offsets: np.ndarray, targets: np.ndarray,
          indegree: np.ndarray, value: np.ndarray, own: np.ndarray) -> int:
    queue = np.empty(total, dtype=targets.dtype)
    head = tail = 0
    for v in range(total):
        if indegree[v] == 0:
            queue[tail] = v
            tail += 1
    while head < tail:
        u = queue[head]
        head += 1
        if u < n:  # an enter: its end follows after the call's own time
            nxt, weight = n + u, own[u]
        elif u < 2 * n and after[u - n] >= 0:  # an end: the rank computes, then enters its next call
            nxt = after[u - n]
            weight = compute[nxt] - compute[u - n]
        else:
            nxt, weight = -1, 0
        if nxt >= 0:
            if value[u] + weight > value[nxt]:
                value[nxt] = value[u] + weight
            indegree[nxt] -= 1
            if indegree[nxt] == 0:
                queue[tail] = nxt
                tail += 1
        for e in range(offsets[u + 1], offsets[u + 2]):
            v = targets[e]
            reach = value[u] + (own[v - n] if n <= v < 2 * n else 0)  # a call ends its own time after what it waits for
            if reach > value[v]:
                value[v] = reach
            indegree[v] -= 1
            if indegree[v] == 0:
                queue[tail] = v
                tail += 1
    return head


def _graph(n: int, extra: int, after: np.ndarray,
           edges: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The waits between ranks (``edges``, source -> target) as compressed rows (offsets, targets) and
    every node's in-degree, the rank's own chain included (an end after its enter, a rank's next
    instance, ``after``, after its end)."""
    total = 2 * n + extra
    small = np.int32 if total < 2**31 else np.int64
    # offsets[u + 1] counts, then ends, then (placing each edge at its end, less one) starts the edges of u
    offsets = np.zeros(total + 2, dtype=np.int64)
    indegree = np.zeros(total, dtype=small)
    for src, dst in edges:
        _count(src, offsets[1:])
        _count(dst, indegree)
    np.cumsum(offsets, out=offsets)
    targets = np.empty(int(offsets[-1]), dtype=small)
    for src, dst in edges:
        _place(src, dst, offsets, targets)
    indegree[n:2 * n] += 1  # from the instance's enter
    indegree[after[after >= 0]] += 1  # from the rank's previous instance
    return offsets, targets, indegree


def _longest_paths(n: int, extra: int, compute: np.ndarray, after: np.ndarray,
                   graph: tuple[np.ndarray, np.ndarray, np.ndarray], own: np.ndarray) -> tuple[np.ndarray, int]:
    """Longest-path value [ticks] of every node (the enters, the ends of the ``n`` instances, then
    ``extra`` collective nodes) in topological order (Kahn's algorithm), and how many nodes were
    reached (fewer than all: a cycle). Each instance's end follows its enter by its ``own`` ticks and
    whatever it waits for (``graph``, from ``_graph``) by the same, and its rank's next instance
    (``after``) is entered after the compute between them (``compute``: the rank's compute ticks
    before each instance's enter). A rank's first instance is entered after the compute before it."""
    offsets, targets, indegree = graph
    total = 2 * n + extra
    value = np.zeros(total, dtype=np.int64)
    value[:n] = compute  # a rank's first instance: the compute before it (others are raised from their previous)
    value[after[after >= 0]] = 0
    done = _kahn(n, total, compute, after, offsets, targets, indegree.copy(), value, own)
    return value, int(done)
