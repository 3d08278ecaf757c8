"""Scalasca's wait states from per-message and per-collective records of a trace.

All times are integer ticks. A wait belongs to one *instance* (one Enter..Leave of an MPI region
on one rank) and never exceeds it. The definitions (Scalasca's, computed on region enter and
leave times):

* **Late Sender**: a receive (``MPI_Recv``, or the ``MPI_Wait*`` completing an ``MPI_Irecv``)
  entered before its message's send region was entered waits ``min(send enter, receive leave) -
  receive enter``; per instance, the largest over the messages it completes. *Wrong order* is the
  part where a message to the same receiver that was sent earlier is received later.
* **Late Receiver**: a blocking send (``MPI_Send``, ``MPI_Ssend``, ``MPI_Rsend``, ``MPI_Sendrecv``)
  that really blocked, i.e. left after the receive was posted (the enter of ``MPI_Recv`` or
  ``MPI_Irecv``), waits ``receive post - send enter`` when positive. A send that returned before
  the receive was posted (buffered, eager) did not wait.
* **Wait at Barrier** (``MPI_Barrier``) and **Wait at N x N** (all-to-all and all-reduce
  families): ``last enter of the instance - own enter``.
* **Late Broadcast** (broadcast, scatter): a non-root rank waits ``root enter - own enter``.
* **Early Reduce** (reduce, gather): the root waits ``first enter of a non-root rank - root enter``.
* **Early Scan** (scan, exscan): a rank waits for the latest enter among itself and lower ranks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numba import njit

#: Sends that block until the receiver takes the message (when the library does not buffer it).
BLOCKING_SENDS = frozenset({"MPI_Send", "MPI_Ssend", "MPI_Rsend", "MPI_Sendrecv", "MPI_Sendrecv_replace"})
#: OTF2 collective operation codes per wait pattern.
BARRIER = frozenset({0})
NXN = frozenset({6, 7, 8, 9, 10, 11, 13, 16})
ONE_TO_N = frozenset({1, 4, 5})
N_TO_ONE = frozenset({2, 3, 12})
SCAN = frozenset({14, 15})
#: Scalasca wait states reported per rank, in this order.
STATES = ("late_sender", "late_sender_wrong_order", "late_receiver", "wait_barrier", "wait_nxn",
          "late_broadcast", "early_reduce", "early_scan")


@dataclass
class Records:
    """Every rank's records, concatenated; instance ids are global (row of ``inst_*``).

    ``inst_compute``: the rank's compute ticks before each instance's enter. ``send_*``: one row per
    sent message (``rank`` the sender, ``peer`` the receiver, world ranks); ``recv_*``: one per
    received message (``rank`` the receiver, ``peer`` the sender, ``post`` the tick the receive was
    posted, ``seq`` its posting order on the rank); ``coll_*``: one per rank and collective
    (``root`` a world rank or -1).
    """

    inst_rank: np.ndarray
    inst_region: np.ndarray
    inst_enter: np.ndarray
    inst_leave: np.ndarray
    inst_compute: np.ndarray
    send_rank: np.ndarray
    send_peer: np.ndarray
    send_comm: np.ndarray
    send_tag: np.ndarray
    send_bytes: np.ndarray
    send_inst: np.ndarray
    send_nonblocking: np.ndarray
    recv_rank: np.ndarray
    recv_peer: np.ndarray
    recv_comm: np.ndarray
    recv_tag: np.ndarray
    recv_bytes: np.ndarray
    recv_inst: np.ndarray
    recv_post: np.ndarray
    recv_seq: np.ndarray
    coll_rank: np.ndarray
    coll_comm: np.ndarray
    coll_op: np.ndarray
    coll_root: np.ndarray
    coll_inst: np.ndarray


@dataclass
class Waits:
    """Wait ticks per instance (``late_sender``, ``late_receiver``, ``collective``), the per-rank totals
    per Scalasca state (``states``, ranks x ``STATES``), and the matched messages (indices into
    the send and receive records).
    """

    late_sender: np.ndarray
    late_receiver: np.ndarray
    collective: np.ndarray
    states: np.ndarray
    send_index: np.ndarray
    recv_index: np.ndarray
    warnings: list[str] = field(default_factory=list)


def match_messages(rec: Records) -> tuple[np.ndarray, np.ndarray]:
    """Indices (send, receive) of the matched messages, in send order.

    MPI does not overtake on a (sender, receiver, communicator, tag) channel, so the k-th send on a
    channel, in the sender's order, is the k-th receive on it, in the receiver's posting order.
    """
    send_key, recv_key = channel_codes([(rec.send_rank, rec.recv_peer), (rec.send_peer, rec.recv_rank),
                                        (rec.send_comm, rec.recv_comm), (rec.send_tag, rec.recv_tag)])
    s_order = np.argsort(send_key, kind="stable")  # per channel, in the sender's order
    s_key = send_key[s_order]
    del send_key
    posted = recv_key * (int(rec.recv_seq.max(initial=0)) + 1) + rec.recv_seq if _fits(recv_key, rec.recv_seq) \
        else None
    r_order = np.argsort(posted, kind="stable") if posted is not None else np.lexsort((rec.recv_seq, recv_key))
    del posted
    r_key = recv_key[r_order]
    del recv_key
    k = np.arange(s_key.size) - np.searchsorted(s_key, s_key, side="left")  # the send's place on its channel
    lo = np.searchsorted(r_key, s_key, side="left")
    hit = k < np.searchsorted(r_key, s_key, side="right") - lo
    recv_of_send = np.full(s_key.size, -1, dtype=np.int64)
    recv_of_send[s_order[hit]] = r_order[(lo + k)[hit]]
    send_i = np.flatnonzero(recv_of_send >= 0)
    return send_i, recv_of_send[send_i]


def channel_codes(columns: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """One int64 code per row of two tables, equal where every column (a pair: the column in each
    table) is equal. Codes are combined column by column; a code or column too wide to combine
    without overflow is first replaced by its rank among the values of both tables."""
    left = right = None
    for a, b in columns:
        low = min(int(a.min(initial=0)), int(b.min(initial=0)))
        a, b = a - low, b - low
        width = max(int(a.max(initial=0)), int(b.max(initial=0))) + 1
        if left is None:
            left, right = a, b
            continue
        top = max(int(left.max(initial=0)), int(right.max(initial=0))) + 1
        if top * width >= 2**62:
            left, right = _dense(left, right)
            top = max(int(left.max(initial=0)), int(right.max(initial=0))) + 1
        if top * width >= 2**62:
            a, b = _dense(a, b)
            width = max(int(a.max(initial=0)), int(b.max(initial=0))) + 1
        left, right = left * width + a, right * width + b
    return left, right


def _dense(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rank of each value among the distinct values of ``a`` and ``b`` together."""
    _, codes = np.unique(np.concatenate([a, b]), return_inverse=True)
    codes = codes.ravel().astype(np.int64)
    return codes[:a.size], codes[a.size:]


def _fits(key: np.ndarray, seq: np.ndarray) -> bool:
    """True when ``key * (max seq + 1) + seq`` cannot overflow int64."""
    return (int(key.max(initial=0)) + 1) * (int(seq.max(initial=0)) + 1) < 2**62


def compute_waits(rec: Records, region_names: dict[int, str], comm_ranks: dict[int, np.ndarray],
                  nranks: int) -> Waits:
    """Every wait state of the trace (see the module docstring)."""
    warnings: list[str] = []
    n_inst = rec.inst_rank.size
    send_i, recv_i = match_messages(rec)
    unmatched = rec.send_rank.size - send_i.size, rec.recv_rank.size - recv_i.size
    if any(unmatched):
        warnings.append(f"{unmatched[0]} sends and {unmatched[1]} receives have no partner in the trace; "
                        "they count in bytes and calls but in no wait state")
    ls, wrong = _late_sender(rec, send_i, recv_i, n_inst)
    lr = _late_receiver(rec, send_i, recv_i, region_names, n_inst)
    both = (ls > 0) & (lr > 0)  # e.g. MPI_Sendrecv: the instance waited once, for the later partner
    ls[both & (lr > ls)] = 0
    lr[both & (ls > 0)] = 0
    del both
    wrong[ls <= 0] = 0
    coll, pattern = _collective(rec, comm_ranks, n_inst, warnings)
    states = np.zeros((nranks, len(STATES)), dtype=np.int64)
    for j, values in enumerate((ls, wrong, lr)):
        _rank_sums(states[:, j], rec.inst_rank, values, np.flatnonzero(values))
    for j in range(3, len(STATES)):
        _rank_sums(states[:, j], rec.inst_rank, coll, np.flatnonzero(pattern == j))
    return Waits(ls, lr, coll, states, send_i, recv_i, warnings)


def _rank_sums(out: np.ndarray, rank: np.ndarray, values: np.ndarray, rows: np.ndarray) -> None:
    """Add ``values`` of the instances ``rows`` to ``out`` at their rank (ranks outside ``out`` dropped)."""
    rank = rank[rows]
    keep = rank < out.size
    np.add.at(out, rank[keep], values[rows][keep])


def _late_sender(rec: Records, send_i: np.ndarray, recv_i: np.ndarray, n_inst: int) -> tuple[np.ndarray, np.ndarray]:
    """Late-sender ticks per instance, and the wrong-order part of it."""
    seq = rec.recv_seq[recv_i]
    top = int(seq.max(initial=0)) + 1
    key = rec.recv_rank[recv_i] * top + (top - 1 - seq)  # per receiver, last received first
    del seq
    order = np.argsort(key, kind="stable")
    del key
    per_inst = np.zeros(n_inst, dtype=np.int64)
    wrong = np.zeros(n_inst, dtype=np.bool_)
    _late_sender_scan(order, send_i, recv_i, rec.send_inst, rec.recv_inst, rec.recv_rank, rec.inst_enter,
                      rec.inst_leave, per_inst, wrong)
    return per_inst, np.where(wrong, per_inst, 0)


@njit(cache=True)
def _late_sender_scan(order: np.ndarray, send_i: np.ndarray, recv_i: np.ndarray, send_inst: np.ndarray,
                      recv_inst: np.ndarray, recv_rank: np.ndarray, enter: np.ndarray, leave: np.ndarray,
                      per_inst: np.ndarray, wrong: np.ndarray) -> None:
    """Per matched message (in ``order``: per receiver, last received first): its late-sender wait
    ``min(send enter, receive leave) - receive enter``, the largest per receive instance into
    ``per_inst``; ``wrong`` marks the instances of waiting messages sent after one received later."""
    big = np.iinfo(np.int64).max
    rank, earliest_later = -1, big
    for j in range(order.size):
        m = order[j]
        r_inst = recv_inst[recv_i[m]]
        sent = enter[send_inst[send_i[m]]]
        wait = max(min(sent, leave[r_inst]) - enter[r_inst], 0)
        per_inst[r_inst] = max(per_inst[r_inst], wait)
        if recv_rank[recv_i[m]] != rank:
            rank, earliest_later = recv_rank[recv_i[m]], big
        if wait > 0 and earliest_later < sent:
            wrong[r_inst] = True
        earliest_later = min(earliest_later, sent)


def _late_receiver(rec: Records, send_i: np.ndarray, recv_i: np.ndarray, region_names: dict[int, str],
                   n_inst: int) -> np.ndarray:
    """Late-receiver ticks per instance: blocking sends that left after their receive was posted."""
    blocking = np.zeros(max([0, *region_names, int(rec.inst_region.max(initial=0))]) + 2, dtype=np.bool_)
    blocking[[ref for ref, name in region_names.items() if name in BLOCKING_SENDS]] = True
    blocking[-1] = False  # an instance outside any region (-1)
    per_inst = np.zeros(n_inst, dtype=np.int64)
    _late_receiver_scan(send_i, recv_i, rec.send_inst, rec.send_nonblocking, rec.recv_post, rec.inst_region,
                        rec.inst_enter, rec.inst_leave, blocking, per_inst)
    return per_inst


@njit(cache=True)
def _late_receiver_scan(send_i: np.ndarray, recv_i: np.ndarray, send_inst: np.ndarray, nonblocking: np.ndarray,
                        post: np.ndarray, region: np.ndarray, enter: np.ndarray, leave: np.ndarray,
                        blocking: np.ndarray, per_inst: np.ndarray) -> None:
    """Per matched message sent by a blocking send that left after the receive was posted: ``post -
    send enter``, the largest per send instance into ``per_inst``."""
    for m in range(send_i.size):
        s = send_inst[send_i[m]]
        p = post[recv_i[m]]
        if blocking[region[s]] and nonblocking[send_i[m]] == 0 and p > enter[s] and leave[s] > p:
            per_inst[s] = max(per_inst[s], p - enter[s])


def _collective(rec: Records, comm_ranks: dict[int, np.ndarray], n_inst: int,
                warnings: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Collective wait ticks per instance and the instance's wait pattern (its index in ``STATES``, -1: none)."""
    wait = np.zeros(n_inst, dtype=np.int64)
    pattern = np.full(n_inst, -1, dtype=np.int8)
    if not rec.coll_rank.size:
        return wait, pattern
    group, group_comm = collective_groups(rec)
    ngroups = group_comm.size
    members = np.bincount(group, minlength=ngroups)
    sizes = {c: max(m.size, 1) for c, m in comm_ranks.items()}
    expected = np.array([sizes.get(c, 1) for c in group_comm.tolist()], dtype=np.int64)
    short = int(members[members < expected].sum())
    if short:
        warnings.append(f"{short} collective records have members missing from the trace; "
                        "their waits count only the ranks present")
    pattern_of = np.full(256, -1, dtype=np.int8)
    for ops, state in ((BARRIER, "wait_barrier"), (NXN, "wait_nxn"), (ONE_TO_N, "late_broadcast"),
                       (N_TO_ONE, "early_reduce"), (SCAN, "early_scan")):
        pattern_of[list(ops)] = STATES.index(state)
    kind = pattern_of[np.clip(rec.coll_op, 0, 255)]
    scan_last = np.zeros(0, dtype=np.int64)
    scan = np.flatnonzero(kind == STATES.index("early_scan"))
    if scan.size:  # the latest enter among the lower communicator ranks and itself
        local = _local_ranks(comm_ranks, rec.coll_comm[scan], rec.coll_rank[scan])
        chain = np.lexsort((local, group[scan]))
        scan_last = np.zeros(group.size, dtype=np.int64)
        scan_last[scan[chain]] = _chain_max(group[scan[chain]], rec.inst_enter[rec.coll_inst[scan[chain]]])
    _collective_scan(group, ngroups, kind, rec.coll_rank == rec.coll_root, rec.coll_inst, rec.inst_enter,
                     rec.inst_leave, scan_last, STATES.index("wait_barrier"), STATES.index("wait_nxn"),
                     STATES.index("late_broadcast"), STATES.index("early_reduce"), wait, pattern)
    return wait, pattern


def collective_groups(rec: Records) -> tuple[np.ndarray, np.ndarray]:
    """The collective each record belongs to (0..n-1), and the communicator of each collective: the
    k-th record of a communicator on a rank is its k-th collective there."""
    code = rec.coll_rank * (int(rec.coll_comm.max(initial=0)) + 1) + rec.coll_comm
    order = np.argsort(code, kind="stable")
    code = code[order]
    k = np.empty(code.size, dtype=np.int64)
    k[order] = np.arange(code.size) - np.searchsorted(code, code, side="left")
    del code, order
    comms, comm_code = np.unique(rec.coll_comm, return_inverse=True)
    comm_code = comm_code.ravel()
    count = np.zeros(comms.size, dtype=np.int64)
    np.maximum.at(count, comm_code, k + 1)
    first = np.concatenate([[0], np.cumsum(count)[:-1]])
    return first[comm_code] + k, np.repeat(comms, count)


@njit(cache=True)
def _chain_max(group: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Running maximum of ``values`` within each run of equal ``group``."""
    out = np.empty(values.size, dtype=np.int64)
    for i in range(values.size):
        out[i] = values[i] if i == 0 or group[i] != group[i - 1] else max(out[i - 1], values[i])
    return out


@njit(cache=True)
def _collective_scan(group: np.ndarray, ngroups: int, kind: np.ndarray, is_root: np.ndarray, inst: np.ndarray,
                     enter: np.ndarray, leave: np.ndarray, scan_last: np.ndarray, barrier: int, nxn: int,
                     one_to_n: int, n_to_one: int, wait: np.ndarray, pattern: np.ndarray) -> None:
    """Each record's wait until what its pattern waits for (``kind``: the pattern's state index):
    the last enter of its collective (barrier, N x N), the root's enter (1 to N, non-root), the
    first non-root enter (N to 1, root), ``scan_last`` (scan); the largest per instance."""
    big = np.iinfo(np.int64).max
    last = np.full(ngroups, -big, dtype=np.int64)
    root = np.full(ngroups, -1, dtype=np.int64)
    first_other = np.full(ngroups, big, dtype=np.int64)
    for i in range(group.size):
        g, e = group[i], enter[inst[i]]
        last[g] = max(last[g], e)
        if is_root[i]:
            root[g] = max(root[g], e)
        else:
            first_other[g] = min(first_other[g], e)
    for i in range(group.size):
        g, e, k = group[i], enter[inst[i]], kind[i]
        until = e
        if k == barrier or k == nxn:
            until = last[g]
        elif k == one_to_n and not is_root[i] and root[g] >= 0:
            until = root[g]
        elif k == n_to_one and is_root[i] and first_other[g] < big:
            until = first_other[g]
        elif k >= 0 and k != one_to_n and k != n_to_one:
            until = scan_last[i]
        wait[inst[i]] = max(wait[inst[i]], max(min(until, leave[inst[i]]) - e, 0))
        pattern[inst[i]] = k


def _local_ranks(comm_ranks: dict[int, np.ndarray], comms: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """Communicator-local rank of each (communicator, world rank) pair (0 for MPI_COMM_SELF, -1 if not a member)."""
    local = np.zeros(ranks.size, dtype=np.int64)
    for comm in np.unique(comms).tolist():
        sel = comms == comm
        members = comm_ranks.get(comm)
        if members is None or not members.size:
            continue
        inverse = np.full(max(int(members.max()), int(ranks.max())) + 1, -1, dtype=np.int64)
        inverse[members[members >= 0]] = np.flatnonzero(members >= 0)
        local[sel] = inverse[ranks[sel]]
    return local
