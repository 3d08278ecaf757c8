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
import pandas as pd

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
    """Indices (send, receive) of the matched messages.

    MPI does not overtake on a (sender, receiver, communicator, tag) channel, so the k-th send on a
    channel, in the sender's order, is the k-th receive on it, in the receiver's posting order.
    """
    keys = ["sender", "receiver", "comm", "tag"]
    sends = pd.DataFrame({"sender": rec.send_rank, "receiver": rec.send_peer, "comm": rec.send_comm,
                          "tag": rec.send_tag, "send": np.arange(rec.send_rank.size)})
    sends["k"] = sends.groupby(keys, sort=False).cumcount()
    order = np.lexsort((rec.recv_seq, rec.recv_rank))
    recvs = pd.DataFrame({"sender": rec.recv_peer[order], "receiver": rec.recv_rank[order],
                          "comm": rec.recv_comm[order], "tag": rec.recv_tag[order], "recv": order})
    recvs["k"] = recvs.groupby(keys, sort=False).cumcount()
    pairs = sends.merge(recvs, on=[*keys, "k"], how="inner")
    return pairs["send"].to_numpy(np.int64), pairs["recv"].to_numpy(np.int64)


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
    ls = np.where(both & (lr > ls), 0, ls)
    lr = np.where(both & (ls > 0), 0, lr)
    wrong = np.where(ls > 0, wrong, 0)
    coll, pattern = _collective(rec, comm_ranks, n_inst, warnings)
    states = np.zeros((nranks, len(STATES)), dtype=np.int64)
    for j, values in enumerate((ls, wrong, lr)):
        states[:, j] = np.bincount(rec.inst_rank, weights=values, minlength=nranks)[:nranks].astype(np.int64)
    for j in range(3, len(STATES)):
        values = np.where(pattern == j, coll, 0)
        states[:, j] = np.bincount(rec.inst_rank, weights=values, minlength=nranks)[:nranks].astype(np.int64)
    return Waits(ls, lr, coll, states, send_i, recv_i, warnings)


def _late_sender(rec: Records, send_i: np.ndarray, recv_i: np.ndarray, n_inst: int) -> tuple[np.ndarray, np.ndarray]:
    """Late-sender ticks per instance, and the wrong-order part of it."""
    r_inst = rec.recv_inst[recv_i]
    recv_enter, recv_leave = rec.inst_enter[r_inst], rec.inst_leave[r_inst]
    send_enter = rec.inst_enter[rec.send_inst[send_i]]
    wait = np.clip(np.minimum(send_enter, recv_leave) - recv_enter, 0, None)
    per_inst = np.zeros(n_inst, dtype=np.int64)
    np.maximum.at(per_inst, r_inst, wait)
    # wrong order: a message to the same receiver, received later, was sent (entered) earlier
    order = np.lexsort((-rec.recv_seq[recv_i], rec.recv_rank[recv_i]))  # per receiver, last received first
    receiver = rec.recv_rank[recv_i][order]
    so_far = pd.Series(send_enter[order]).groupby(receiver, sort=False).cummin()
    earliest_later = np.empty_like(send_enter)
    earliest_later[order] = so_far.groupby(receiver, sort=False).shift(1, fill_value=np.iinfo(np.int64).max)
    wrong_msg = (wait > 0) & (earliest_later < send_enter)
    wrong = np.zeros(n_inst, dtype=bool)
    wrong[r_inst[wrong_msg]] = True
    return per_inst, np.where(wrong, per_inst, 0)


def _late_receiver(rec: Records, send_i: np.ndarray, recv_i: np.ndarray, region_names: dict[int, str],
                   n_inst: int) -> np.ndarray:
    """Late-receiver ticks per instance: blocking sends that left after their receive was posted."""
    s_inst = rec.send_inst[send_i]
    region = rec.inst_region[s_inst]
    blocking_regions = [ref for ref, name in region_names.items() if name in BLOCKING_SENDS]
    blocking = np.isin(region, blocking_regions) & (rec.send_nonblocking[send_i] == 0)
    send_enter, send_leave = rec.inst_enter[s_inst], rec.inst_leave[s_inst]
    post = rec.recv_post[recv_i]
    wait = np.where(blocking & (post > send_enter) & (send_leave > post), post - send_enter, 0)
    per_inst = np.zeros(n_inst, dtype=np.int64)
    np.maximum.at(per_inst, s_inst, wait)
    return per_inst


def _collective(rec: Records, comm_ranks: dict[int, np.ndarray], n_inst: int,
                warnings: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Collective wait ticks per instance and the instance's wait pattern (its index in ``STATES``, -1: none)."""
    wait = np.zeros(n_inst, dtype=np.int64)
    pattern = np.full(n_inst, -1, dtype=np.int64)
    if not rec.coll_rank.size:
        return wait, pattern
    enter, leave = rec.inst_enter[rec.coll_inst], rec.inst_leave[rec.coll_inst]
    table = pd.DataFrame({"rank": rec.coll_rank, "comm": rec.coll_comm, "enter": enter})
    table["k"] = table.groupby(["rank", "comm"], sort=False).cumcount()
    group = table.groupby(["comm", "k"], sort=False)
    big = np.iinfo(np.int64).max
    last = group["enter"].transform("max").to_numpy(np.int64)
    is_root = rec.coll_rank == rec.coll_root
    table["root_enter"] = np.where(is_root, enter, -1)
    table["other_enter"] = np.where(is_root, big, enter)
    root_enter = group["root_enter"].transform("max").to_numpy(np.int64)
    first_other = group["other_enter"].transform("min").to_numpy(np.int64)
    table["local"] = _local_ranks(comm_ranks, rec.coll_comm, rec.coll_rank)
    ordered = table.sort_values(["comm", "k", "local"], kind="stable")
    scan_last = np.empty(len(table), dtype=np.int64)
    scan_last[ordered.index.to_numpy()] = ordered.groupby(["comm", "k"], sort=False)["enter"].cummax().to_numpy()
    sizes = group["rank"].transform("size").to_numpy()
    members = {c: max(m.size, 1) for c, m in comm_ranks.items()}
    expected = pd.Series(rec.coll_comm).map(members).fillna(1).to_numpy()
    if (sizes < expected).any():
        warnings.append(f"{int((sizes < expected).sum())} collective records have members missing from the trace; "
                        "their waits count only the ranks present")
    op = rec.coll_op
    until = np.select(
        [np.isin(op, list(BARRIER | NXN)), np.isin(op, list(ONE_TO_N)) & ~is_root & (root_enter >= 0),
         np.isin(op, list(N_TO_ONE)) & is_root & (first_other < big), np.isin(op, list(SCAN))],
        [last, root_enter, first_other, scan_last], default=enter)
    names = np.select([np.isin(op, list(BARRIER)), np.isin(op, list(NXN)), np.isin(op, list(ONE_TO_N)),
                       np.isin(op, list(N_TO_ONE)), np.isin(op, list(SCAN))],
                      [STATES.index(name) for name in STATES[3:]], default=-1)
    waited = np.clip(np.minimum(until, leave) - enter, 0, None)
    np.maximum.at(wait, rec.coll_inst, waited)
    pattern[rec.coll_inst] = names
    return wait, pattern


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
