"""Synthetic MPInside data: a seeded model of an explicit crash code, written as MPInside files.

No real MPInside data set is public, so this module *simulates* one. A fixed 3D mesh is cut into
blocks, one per rank (strong scaling). Every time step each rank computes (cost proportional to its
elements, plus extra cost for elements inside moving *contact regions*, a slower node and OS
noise), exchanges halos with its 26 neighbours (``MPI_Irecv``/``MPI_Isend``/``MPI_Waitall``),
exchanges contact data with its 6 face neighbours (``MPI_Send``/``MPI_Recv``), then joins an
``MPI_Bcast`` and an 8-byte ``MPI_Allreduce``. The steps are simulated explicitly, vectorised over
ranks: a receive completes when the partner's send is posted plus the network's transfer time, and
a collective completes when the slowest rank has arrived. Because the truth is known (who is slow,
how much of each call is transfer and how much is waiting), analyses can be tested against it.

The model is described in prose and formulas in ``docs/synthetic.md``. Every output says
*synthetic*: the ``system`` run coordinate, the sidecar and ``truth.json``.
"""

from __future__ import annotations

import argparse
import itertools
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from perfkit.model import dense_traffic, make_run

SYSTEM = "synthetic crash model"
MODES = ("basic", "slt", "collective_wait", "perfect")
#: Size-histogram bins [B]: 0 holds messages below 32 B, bin 2**k holds [2**k, 2**(k+1)).
MIN_BIN = 32
#: Point-to-point and collective calls that carry data, in column order.
SIZED = ("MPI_Irecv", "MPI_Isend", "MPI_Send", "MPI_Recv", "MPI_Bcast", "MPI_Allreduce")


@dataclass(frozen=True)
class ContactRegion:
    """A box of contact work moving linearly through the domain (coordinates in [0, 1])."""

    start: tuple[float, float, float]
    end: tuple[float, float, float]
    half_width: tuple[float, float, float]


@dataclass(frozen=True)
class Network:
    """Latency [s] and bandwidth [B/s] per level: 0 same node, 1 same leaf switch, 2 across switches."""

    latency: tuple[float, float, float] = (0.3e-6, 1.2e-6, 2.2e-6)
    bandwidth: tuple[float, float, float] = (10e9, 6e9, 5e9)
    nodes_per_switch: int = 18


@dataclass(frozen=True)
class Overheads:
    """Software cost of one MPI call [s]; it remains under a perfect interconnect."""

    irecv: float = 0.2e-6
    isend: float = 0.4e-6
    waitall: float = 0.3e-6
    send: float = 0.5e-6
    recv: float = 0.3e-6
    collective: float = 1.0e-6


def _default_regions() -> tuple[ContactRegion, ...]:
    return (
        ContactRegion(start=(0.12, 0.50, 0.50), end=(0.42, 0.50, 0.45), half_width=(0.04, 0.22, 0.30)),
        ContactRegion(start=(0.88, 0.35, 0.40), end=(0.62, 0.45, 0.55), half_width=(0.04, 0.15, 0.25)),
    )


@dataclass(frozen=True)
class CrashModel:
    """Parameters of the synthetic explicit crash code (times in s, sizes in bytes)."""

    mesh: tuple[int, int, int] = (256, 128, 64)
    element_cost: float = 1.0e-6
    #: Share of the per-element cost in the force phase, the contact phase and the time-step phase.
    phase_split: tuple[float, float, float] = (0.7, 0.2, 0.1)
    regions: tuple[ContactRegion, ...] = field(default_factory=_default_regions)
    #: Extra compute per element inside a contact region, as a multiple of ``element_cost``.
    contact_cost: float = 1.2
    halo_bytes_per_element: int = 24
    contact_header_bytes: int = 16
    contact_bytes_per_element: int = 32
    bcast_bytes: int = 48
    allreduce_bytes: int = 8
    #: Work only rank 0 does each step, before the broadcast (the Amdahl serial part).
    serial_per_step: float = 20e-6
    #: Compute slowdown of one node chosen by the seed (1.0: no slow node).
    slow_node_factor: float = 1.10
    #: Sigma of the log-normal per-phase compute jitter.
    noise_sigma: float = 0.02
    #: Probability per rank and step of an OS detour, and its length.
    detour_probability: float = 1e-3
    detour: float = 200e-6
    #: MPI_Init time: base plus uniform jitter up to ``init_jitter``.
    init_time: float = 0.02
    init_jitter: float = 0.004
    network: Network = field(default_factory=Network)
    overheads: Overheads = field(default_factory=Overheads)
    #: Ranks whose noise-free compute exceeds the mean by this fraction are listed as slow in the truth.
    slow_threshold: float = 0.10


@dataclass
class Layout:
    """Static decomposition: process grid, blocks, neighbours, link levels and halo sizes."""

    nprocs: int
    ppn: int
    grid: tuple[int, int, int]
    lo: np.ndarray          # (rank, 3) first element index of each block
    hi: np.ndarray          # (rank, 3) one past the last
    elements: np.ndarray    # (rank,)
    nb: np.ndarray          # (rank, 26) neighbour rank, -1 if none
    opp: np.ndarray         # (26,) index of the opposite direction
    faces: np.ndarray       # (6,) indices of the face directions
    level: np.ndarray       # (rank, 26) network level of the link
    halo: np.ndarray        # (rank, 26) halo message bytes (0 where no neighbour)
    node_of: np.ndarray     # (rank,) node each rank runs on

    @property
    def nodes(self) -> int:
        """Number of nodes: one past the highest node used (with block placement the last may be partly filled)."""
        return int(self.node_of.max()) + 1


@dataclass
class Timing:
    """Per-rank totals of one simulation [s]; ``*_wait`` is the part spent waiting for others."""

    elapsed: float
    compute: np.ndarray
    init: np.ndarray
    irecv: np.ndarray
    isend: np.ndarray
    waitall: np.ndarray
    waitall_wait: np.ndarray
    send: np.ndarray
    recv: np.ndarray
    recv_wait: np.ndarray
    bcast: np.ndarray
    bcast_wait: np.ndarray
    allreduce: np.ndarray
    allreduce_wait: np.ndarray
    halo_time: np.ndarray        # (rank, 26) Waitall time charged to the last-arriving neighbour
    contact_time: np.ndarray     # (rank, 6) Recv time per face neighbour (receiver side)
    contact_bytes: np.ndarray    # (rank, 6) contact bytes sent per face direction
    send_hist: np.ndarray        # (rank, bin, 2) MPI_Send count and time
    recv_hist: np.ndarray        # (rank, bin, 3) MPI_Recv count, time, wait time


@dataclass
class Simulation:
    """One synthetic run: its layout, injected compute, and the measured and perfect timings."""

    model: CrashModel
    layout: Layout
    seed: int
    steps: int
    contact: np.ndarray          # (step, rank) contact elements
    compute: np.ndarray          # (step, 3, rank) compute per phase [s]
    slow_node: int | None
    measured: Timing
    perfect: Timing
    bins: np.ndarray


# ---------------------------------------------------------------- decomposition


def process_grid(nprocs: int, mesh: Sequence[int]) -> tuple[int, int, int]:
    """The 3D process grid of ``nprocs`` ranks that minimises the halo surface of ``mesh`` blocks."""
    best: tuple[float, tuple[int, int, int]] | None = None
    for px in range(1, nprocs + 1):
        if nprocs % px:
            continue
        for py in range(1, nprocs // px + 1):
            if (nprocs // px) % py:
                continue
            pz = nprocs // (px * py)
            ext = np.asarray(mesh, dtype=float) / (px, py, pz)
            if np.any(ext < 1):
                continue
            surface = ext[1] * ext[2] + ext[0] * ext[2] + ext[0] * ext[1]
            if best is None or surface < best[0] - 1e-9:
                best = (surface, (px, py, pz))
    if best is None:
        raise ValueError(f"cannot cut a {tuple(mesh)} mesh into {nprocs} blocks")
    return best[1]


def block_placement(nprocs: int, ppn: int) -> np.ndarray:
    """Default rank-to-node map: rank r on node ``r // ppn``."""
    return np.arange(nprocs) // ppn


def check_placement(node_of: Any, nprocs: int, ppn: int) -> np.ndarray:
    """``node_of`` as an int64 array after checking it: ``nprocs`` integers >= 0, at most ``ppn`` per node."""
    arr = np.asarray(node_of)
    if arr.shape != (nprocs,):
        raise ValueError(f"node_of must be a 1D array of {nprocs} node numbers, got shape {arr.shape}")
    if arr.dtype.kind not in "iu" or arr.min() < 0:
        raise ValueError("node_of must hold integers >= 0")
    busiest = int(np.bincount(arr).max())
    if busiest > ppn:
        raise ValueError(f"node_of puts {busiest} ranks on one node; at most ppn={ppn} fit")
    return arr.astype(np.int64)


def build_layout(nprocs: int, ppn: int, model: CrashModel, node_of: np.ndarray | None = None) -> Layout:
    """Blocks, 26-neighbourhood, link levels and halo sizes of ``nprocs`` ranks (x fastest).

    ``node_of`` maps rank to node (default: ``block_placement``); it sets the link levels.
    """
    node_of = block_placement(nprocs, ppn) if node_of is None else check_placement(node_of, nprocs, ppn)
    grid = process_grid(nprocs, model.mesh)
    ranks = np.arange(nprocs)
    coord = np.stack([ranks % grid[0], (ranks // grid[0]) % grid[1], ranks // (grid[0] * grid[1])], axis=1)
    bounds = [(np.arange(p + 1) * g) // p for p, g in zip(grid, model.mesh)]
    lo = np.stack([bounds[d][coord[:, d]] for d in range(3)], axis=1)
    hi = np.stack([bounds[d][coord[:, d] + 1] for d in range(3)], axis=1)
    ext = hi - lo
    dirs = np.array([d for d in itertools.product((-1, 0, 1), repeat=3) if any(d)])
    opp = np.array([int(np.flatnonzero(np.all(dirs == -d, axis=1))[0]) for d in dirs])
    faces = np.flatnonzero(np.abs(dirs).sum(axis=1) == 1)
    other = coord[:, None, :] + dirs[None, :, :]
    valid = np.all((other >= 0) & (other < np.asarray(grid)), axis=2)
    nb = np.where(valid, other[..., 0] + grid[0] * (other[..., 1] + grid[1] * other[..., 2]), -1)
    shared = np.prod(np.where(dirs[None, :, :] == 0, ext[:, None, :], 1), axis=2)
    halo = np.where(valid, shared * model.halo_bytes_per_element, 0)
    level = link_level(ranks[:, None], np.where(valid, nb, ranks[:, None]), node_of, model.network)
    return Layout(nprocs, ppn, grid, lo, hi, np.prod(ext, axis=1), nb, opp, faces, level, halo, node_of)


def link_level(a: np.ndarray, b: np.ndarray, node_of: np.ndarray, network: Network) -> np.ndarray:
    """Network level between ranks ``a`` and ``b`` placed by ``node_of``: 0 same node, 1 same leaf switch, 2 otherwise.

    Leaf switch s holds nodes ``s * nodes_per_switch`` .. ``(s + 1) * nodes_per_switch - 1``.
    """
    node_a, node_b = node_of[a], node_of[b]
    same_switch = node_a // network.nodes_per_switch == node_b // network.nodes_per_switch
    return np.where(node_a == node_b, 0, np.where(same_switch, 1, 2))


def transfer_time(nbytes: np.ndarray, level: np.ndarray, network: Network) -> np.ndarray:
    """Latency plus bytes over bandwidth [s] of messages of ``nbytes`` over links at ``level``."""
    return np.asarray(network.latency)[level] + nbytes / np.asarray(network.bandwidth)[level]


def collective_time(nbytes: int, node_of: np.ndarray, network: Network) -> float:
    """Tree collective [s]: ceil(log2 P) rounds, round k at the level between ranks 0 and 2**k under ``node_of``.

    Every round is charged the link of rank 0's partner, a simple stand-in for the slowest pair of
    the round (with block placement all pairs 2**k apart share that level up to node-boundary effects).
    """
    rounds = int(np.ceil(np.log2(node_of.size)))
    distance = 2 ** np.arange(rounds)
    return float(np.sum(transfer_time(np.full(rounds, float(nbytes)), link_level(0, distance, node_of, network),
                                      network)))


# ---------------------------------------------------------------- injected compute


def contact_elements(layout: Layout, model: CrashModel, steps: int) -> np.ndarray:
    """(step, rank) number of a block's elements inside the contact regions (fractional)."""
    mesh = np.asarray(model.mesh, dtype=float)
    frac = np.arange(steps) / max(steps - 1, 1)
    out = np.zeros((steps, layout.nprocs))
    for region in model.regions:
        centre = np.asarray(region.start) + np.outer(frac, np.subtract(region.end, region.start))
        a = (centre - region.half_width) * mesh
        b = (centre + region.half_width) * mesh
        overlap = np.minimum(layout.hi[None], b[:, None]) - np.maximum(layout.lo[None], a[:, None])
        out += np.prod(np.clip(overlap, 0, None), axis=2)
    return out


def rank_speed(layout: Layout, model: CrashModel, slow_node: int | None) -> np.ndarray:
    """Per-rank slowdown factor (1 everywhere but on the ranks placed on the slow node)."""
    slow = np.ones(layout.nprocs)
    if slow_node is not None:
        slow[layout.node_of == slow_node] = model.slow_node_factor
    return slow


def expected_compute(layout: Layout, model: CrashModel, contact: np.ndarray, slow: np.ndarray) -> np.ndarray:
    """(step, 3, rank) noise-free compute per phase [s]; rank 0's serial work is not included."""
    base = layout.elements * model.element_cost * slow
    split = np.asarray(model.phase_split)[None, :, None]
    out = np.broadcast_to(base * split, (contact.shape[0], 3, layout.nprocs)).copy()
    out[:, 1] += contact * model.element_cost * model.contact_cost * slow
    return out


def noisy_compute(expected: np.ndarray, model: CrashModel, rng: np.random.Generator) -> np.ndarray:
    """Apply log-normal jitter per phase and OS detours (added to the force phase)."""
    jitter = rng.lognormal(0.0, model.noise_sigma, size=expected.shape)
    out = expected * jitter
    detours = rng.random((expected.shape[0], expected.shape[2])) < model.detour_probability
    out[:, 0] += detours * model.detour
    return out


# ---------------------------------------------------------------- time stepping


def size_bin(nbytes: np.ndarray) -> np.ndarray:
    """Histogram bin index of message sizes: 0 below 32 B, then one per power of two."""
    nbytes = np.asarray(nbytes)
    k = np.floor(np.log2(np.maximum(nbytes, MIN_BIN))).astype(np.int64)
    return np.where(nbytes < MIN_BIN, 0, k - int(np.log2(MIN_BIN)) + 1)


def bin_labels(nbins: int) -> np.ndarray:
    """Bin labels [B] of ``nbins`` bins: 0, 32, 64, ..."""
    return np.concatenate([[0], MIN_BIN * 2 ** np.arange(nbins - 1)]).astype(np.float64)


def contact_sizes(layout: Layout, model: CrashModel, contact: np.ndarray) -> np.ndarray:
    """(step, rank, 6) contact message bytes per face direction (0 where no neighbour)."""
    face = layout.halo[:, layout.faces] / model.halo_bytes_per_element
    share = contact / layout.elements
    size = model.contact_header_bytes + np.round(share[:, :, None] * face[None] * model.contact_bytes_per_element)
    return np.where(layout.nb[None, :, layout.faces] >= 0, size, 0.0)


def simulate_steps(layout: Layout, model: CrashModel, compute: np.ndarray, sizes: np.ndarray, init: np.ndarray,
                   nbins: int, scale: float) -> Timing:
    """Run the bulk-synchronous steps; ``scale`` multiplies every transfer time (0: perfect interconnect)."""
    n, net, ovh = layout.nprocs, model.network, model.overheads
    ranks = np.arange(n)
    valid = layout.nb >= 0
    src = np.where(valid, layout.nb, 0)
    n_nb = valid.sum(axis=1)
    t_halo = scale * transfer_time(layout.halo, layout.level, net)
    f_nb, f_opp, f_level = layout.nb[:, layout.faces], layout.opp[layout.faces], layout.level[:, layout.faces]
    f_valid = f_nb >= 0
    f_src = np.where(f_valid, f_nb, 0)
    face_pos = np.searchsorted(layout.faces, f_opp)
    t_bcast = scale * collective_time(model.bcast_bytes, layout.node_of, net) + ovh.collective
    t_allreduce = scale * collective_time(model.allreduce_bytes, layout.node_of, net) + ovh.collective
    acc = {k: np.zeros(n) for k in ("compute", "waitall", "waitall_wait", "send", "recv", "recv_wait",
                                    "bcast", "bcast_wait", "allreduce", "allreduce_wait")}
    halo_time = np.zeros((n, 26))
    contact_time = np.zeros((n, 6))
    contact_bytes = np.zeros((n, 6))
    send_hist = np.zeros((n, nbins, 2))
    recv_hist = np.zeros((n, nbins, 3))
    t = init.copy()
    for step in range(compute.shape[0]):
        c_force, c_contact, c_dt = compute[step]
        t = t + c_force + n_nb * (ovh.irecv + ovh.isend)
        acc["compute"] += c_force
        arrival = np.where(valid, t[src] + t_halo, -np.inf)
        late = np.clip(np.max(np.where(valid, t[src], -np.inf), axis=1) - t, 0, None)
        done = np.maximum(t, arrival.max(axis=1)) + ovh.waitall
        halo_time[ranks, np.argmax(arrival, axis=1)] += done - t
        acc["waitall"] += done - t
        acc["waitall_wait"] += late
        t = done + c_contact
        acc["compute"] += c_contact
        size = sizes[step]
        send_dur = np.where(f_valid, ovh.send + scale * size / np.asarray(net.bandwidth)[f_level], 0.0)
        posted = t[:, None] + np.cumsum(send_dur, axis=1)
        contact_bytes += size
        bins = size_bin(size)
        for f in range(6):  # ranks distinct within a face: indexed += adds as np.add.at would, faster
            send_hist[ranks, bins[:, f], 0] += f_valid[:, f]
            send_hist[ranks, bins[:, f], 1] += send_dur[:, f]
        acc["send"] += send_dur.sum(axis=1)
        t = posted[:, -1]
        for f in range(6):
            ok = f_valid[:, f]
            sent_at = posted[f_src[:, f], face_pos[f]]
            nbytes = size[f_src[:, f], face_pos[f]]
            arrive = sent_at + scale * transfer_time(nbytes, f_level[:, f], net)
            dur = np.where(ok, np.maximum(t, arrive) + ovh.recv - t, 0.0)
            wait = np.where(ok, np.clip(sent_at - t, 0, None), 0.0)
            b = size_bin(nbytes)
            recv_hist[ranks, b, 0] += ok
            recv_hist[ranks, b, 1] += dur
            recv_hist[ranks, b, 2] += wait
            contact_time[:, f] += dur
            acc["recv"] += dur
            acc["recv_wait"] += wait
            t = t + dur
        t[0] += model.serial_per_step
        acc["compute"][0] += model.serial_per_step
        t = _collective(t, t_bcast, acc["bcast"], acc["bcast_wait"])
        t = t + c_dt
        acc["compute"] += c_dt
        t = _collective(t, t_allreduce, acc["allreduce"], acc["allreduce_wait"])
    steps = compute.shape[0]
    return Timing(elapsed=float(t[0]), init=init, irecv=steps * n_nb * ovh.irecv, isend=steps * n_nb * ovh.isend,
                  halo_time=halo_time, contact_time=contact_time, contact_bytes=contact_bytes,
                  send_hist=send_hist, recv_hist=recv_hist, **acc)


def _collective(t: np.ndarray, cost: float, total: np.ndarray, wait: np.ndarray) -> np.ndarray:
    """All ranks leave when the last has arrived plus ``cost``; accumulate call and wait time."""
    last = t.max()
    total += last + cost - t
    wait += last - t
    return np.full_like(t, last + cost)


def simulate(nprocs: int, *, ppn: int = 24, seed: int = 0, steps: int = 300, model: CrashModel | None = None,
             node_of: np.ndarray | None = None) -> Simulation:
    """Simulate ``steps`` steps on ``nprocs`` ranks, measured and with a perfect interconnect.

    ``node_of`` places rank r on node ``node_of[r]`` (default: block, ``r // ppn``; at most ``ppn``
    ranks per node). The slow node is a physical node (drawn from 0 .. max(node_of)): the ranks placed
    on it compute slower. The seed draws the same noise for every placement with the same number of nodes.
    """
    if nprocs < 2:
        raise ValueError("the synthetic model needs at least 2 ranks")
    model = model or CrashModel()
    rng = np.random.default_rng([seed, nprocs])
    layout = build_layout(nprocs, ppn, model, node_of)
    slow_node = int(rng.integers(layout.nodes)) if model.slow_node_factor != 1.0 else None
    contact = contact_elements(layout, model, steps)
    compute = noisy_compute(expected_compute(layout, model, contact, rank_speed(layout, model, slow_node)),
                            model, rng)
    init = model.init_time + model.init_jitter * rng.random(nprocs)
    sizes = contact_sizes(layout, model, contact)
    largest = max(float(layout.halo.max()), float(sizes.max()), model.bcast_bytes, model.allreduce_bytes)
    nbins = int(size_bin(np.array([largest]))[0]) + 1
    measured = simulate_steps(layout, model, compute, sizes, init, nbins, 1.0)
    perfect = simulate_steps(layout, model, compute, sizes, init, nbins, 0.0)
    return Simulation(model, layout, seed, steps, contact, compute, slow_node, measured, perfect, bin_labels(nbins))


# ---------------------------------------------------------------- Dataset per mode


def _columns(mode: str) -> list[tuple[str, str, str]]:
    """(function, call, kind) columns of ``mode`` in MPInside order."""
    cols = [("Compute", "Compute", "compute"), ("MPI_Init", "MPI_Init", "other"),
            ("MPI_Irecv", "MPI_Irecv", "transfer"), ("MPI_Isend", "MPI_Isend", "transfer")]
    for call, wait_kind in (("MPI_Waitall", "slt"), ("MPI_Send", None), ("MPI_Recv", "slt"),
                            ("MPI_Bcast", "collective_wait"), ("MPI_Allreduce", "collective_wait")):
        if wait_kind == mode == "slt":
            cols.append(("w_" + call, call, "wait_late_sender"))
        if wait_kind == mode == "collective_wait":
            cols.append(("b_" + call, call, "wait_collective"))
        cols.append((call, call, "transfer"))
    return cols


def _profile(sim: Simulation, timing: Timing, mode: str) -> tuple[np.ndarray, list[tuple[str, str, str]]]:
    """(rank, function, metric) array in ``perfkit.model.METRICS`` order, and the columns."""
    lay, m, steps = sim.layout, sim.model, sim.steps
    n = lay.nprocs
    n_nb = (lay.nb >= 0).sum(axis=1)
    n_faces = (lay.nb[:, lay.faces] >= 0).sum(axis=1)
    split = mode in ("slt", "collective_wait")
    waits = {"MPI_Waitall": timing.waitall_wait, "MPI_Recv": timing.recv_wait,
             "MPI_Bcast": timing.bcast_wait, "MPI_Allreduce": timing.allreduce_wait}
    totals = {"Compute": timing.compute, "MPI_Init": timing.init, "MPI_Irecv": timing.irecv,
              "MPI_Isend": timing.isend, "MPI_Waitall": timing.waitall, "MPI_Send": timing.send,
              "MPI_Recv": timing.recv, "MPI_Bcast": timing.bcast, "MPI_Allreduce": timing.allreduce}
    halo_bytes = steps * lay.halo.sum(axis=1)
    root = np.arange(n) == 0
    # metric order: time, calls, bytes_sent, calls_sent, bytes_recv, calls_recv
    traffic = {
        "MPI_Init": (1, 0, 0, 0, 0),
        "MPI_Irecv": (steps * n_nb, 0, 0, halo_bytes, steps * n_nb),
        "MPI_Isend": (steps * n_nb, halo_bytes, steps * n_nb, 0, 0),
        "MPI_Waitall": (steps, 0, 0, 0, 0),
        "MPI_Send": (steps * n_faces, timing.contact_bytes.sum(axis=1), steps * n_faces, 0, 0),
        "MPI_Recv": (steps * n_faces, 0, 0, _contact_received(sim, timing), steps * n_faces),
    }
    for call, nbytes in (("MPI_Bcast", m.bcast_bytes), ("MPI_Allreduce", m.allreduce_bytes)):
        traffic[call] = (steps, root * steps * nbytes * (n - 1), root * steps, ~root * steps * nbytes,
                         ~root * steps)
    columns = _columns(mode)
    out = np.full((n, len(columns), 6), np.nan)
    for k, (func, call, kind) in enumerate(columns):
        if kind in ("wait_late_sender", "wait_collective"):
            out[:, k] = 0.0
            out[:, k, 0] = waits[call]
            continue
        out[:, k, 0] = totals[call] - (waits[call] if split and _split_in(call, mode) else 0.0)
        if func != "Compute":
            out[:, k, 1:] = np.column_stack([np.broadcast_to(v, n) for v in traffic[call]])
    return out, columns


def _split_in(call: str, mode: str) -> bool:
    """True if ``mode`` moves the wait part of ``call`` into a w_/b_ column."""
    return (mode == "slt" and call in ("MPI_Waitall", "MPI_Recv")) or (
        mode == "collective_wait" and call in ("MPI_Bcast", "MPI_Allreduce"))


def _contact_received(sim: Simulation, timing: Timing) -> np.ndarray:
    """Contact bytes each rank received over the run."""
    lay = sim.layout
    f_nb = lay.nb[:, lay.faces]
    ok = f_nb >= 0
    pos = np.searchsorted(lay.faces, lay.opp[lay.faces])
    return np.where(ok, timing.contact_bytes[np.where(ok, f_nb, 0), pos[None, :]], 0.0).sum(axis=1)


def traffic_matrix(sim: Simulation, timing: Timing) -> Any:
    """(sender, receiver, quantity) bytes, count and receive time of point-to-point messages, a ``sparse.COO``.

    Built from the stencil's partner pairs alone (at most 26 halo and 6 contact partners per
    rank), never as an N x N array: a 100,000-rank run's matrix holds a few million values. Each
    value is the sum of its contributions in the order the model lists them (halo, then contact).
    """
    import sparse

    lay, steps = sim.layout, sim.steps
    n = lay.nprocs
    rows, dirs = np.nonzero(lay.nb >= 0)
    nbr = lay.nb[rows, dirs]
    f_rows, faces = np.nonzero(lay.nb[:, lay.faces] >= 0)
    f_nbr = lay.nb[f_rows, lay.faces[faces]]
    ones = np.ones(rows.size)
    parts = [  # (sender, receiver, quantity, value) of every contribution
        (rows, nbr, 0, steps * lay.halo[rows, dirs]), (rows, nbr, 1, steps * ones),
        (nbr, rows, 2, timing.halo_time[rows, dirs]),
        (f_rows, f_nbr, 0, timing.contact_bytes[f_rows, faces]), (f_rows, f_nbr, 1, np.full(f_rows.size, steps * 1.0)),
        (f_nbr, f_rows, 2, timing.contact_time[f_rows, faces]),
    ]
    cell = np.concatenate([(sender * n + receiver) * 3 + quantity for sender, receiver, quantity, _ in parts])
    order = np.argsort(cell, kind="stable")  # a cell's contributions keep their order: summed as listed
    cell = cell[order]
    first = np.flatnonzero(np.r_[True, cell[1:] != cell[:-1]])
    cells = cell[first]
    values = np.add.reduceat(np.concatenate([value for *_, value in parts])[order], first) if cell.size else cell * 0.0
    kept = values != 0  # e.g. contact faces that exchanged nothing
    cells, values = cells[kept], values[kept]
    coords = np.stack([cells // (3 * n), cells // 3 % n, cells % 3])
    return sparse.COO(coords, values, shape=(n, n, 3), has_duplicates=False, sorted=True)


def _traffic(sim: Simulation, timing: Timing) -> Any:
    """``traffic_matrix``, dense (numpy) where ``perfkit.model.dense_traffic`` keeps a matrix of its size dense."""
    matrix = traffic_matrix(sim, timing)
    return matrix.todense() if dense_traffic(sim.layout.nprocs, matrix.nnz) else matrix


def _sizes(sim: Simulation, timing: Timing, mode: str, functions: list[str]) -> np.ndarray:
    """(rank, function, size_bin, stat) histograms; NaN for functions without message sizes."""
    lay, m, steps = sim.layout, sim.model, sim.steps
    n, nbins = lay.nprocs, sim.bins.size
    out = np.full((n, len(functions), nbins, 2), np.nan)
    hist = {f: np.zeros((n, nbins, 2)) for f in SIZED}
    ok = lay.nb >= 0
    rows, dirs = np.nonzero(ok)
    b = size_bin(lay.halo[rows, dirs])
    for call, cost in (("MPI_Irecv", m.overheads.irecv), ("MPI_Isend", m.overheads.isend)):
        np.add.at(hist[call], (rows, b, 0), steps)
        np.add.at(hist[call], (rows, b, 1), steps * cost)
    hist["MPI_Send"] = timing.send_hist.copy()
    hist["MPI_Recv"][..., 0] = timing.recv_hist[..., 0]
    hist["MPI_Recv"][..., 1] = timing.recv_hist[..., 1] - (timing.recv_hist[..., 2] if mode == "slt" else 0.0)
    for call, nbytes, total, wait in (("MPI_Bcast", m.bcast_bytes, timing.bcast, timing.bcast_wait),
                                      ("MPI_Allreduce", m.allreduce_bytes, timing.allreduce, timing.allreduce_wait)):
        k = int(size_bin(np.array([nbytes]))[0])
        hist[call][:, k, 0] = steps
        hist[call][:, k, 1] = total - (wait if mode == "collective_wait" else 0.0)
    for call, values in hist.items():
        out[:, functions.index(call)] = values
    return out


def to_dataset(sim: Simulation, mode: str, *, matrices: bool = True, sizes: bool = True) -> xr.Dataset:
    """The canonical one-run Dataset of ``sim`` as MPInside would report it in ``mode``."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r} is not one of {MODES}")
    timing = sim.perfect if mode == "perfect" else sim.measured
    profile, columns = _profile(sim, timing, mode)
    functions = [c[0] for c in columns]
    lay = sim.layout
    run = {"label": run_label(lay.nprocs, mode), "nprocs": lay.nprocs, "nodes": lay.nodes, "ppn": lay.ppn,
           "threads": 1, "system": SYSTEM, "mode": mode, "elapsed": timing.elapsed,
           "source": f"perfkit.synthetic seed={sim.seed} steps={sim.steps}"}
    return make_run(profile, ranks=np.arange(lay.nprocs), functions=functions, calls=[c[1] for c in columns],
                    kinds=[c[2] for c in columns], run=run,
                    traffic=_traffic(sim, timing) if matrices else None,
                    sizes=_sizes(sim, timing, mode, functions) if sizes else None,
                    size_bins=sim.bins if sizes else None, reader="perfkit.synthetic")


def run_label(nprocs: int, mode: str) -> str:
    """Run label of a synthetic run, e.g. ``synthetic-96-slt``."""
    return f"synthetic-{nprocs}-{mode}"


# ---------------------------------------------------------------- ground truth


def truth(sim: Simulation) -> dict[str, Any]:
    """Ground truth of ``sim`` as plain JSON-ready data (times in s, rounded to 1 µs)."""
    lay, m = sim.layout, sim.model
    slow = rank_speed(lay, m, sim.slow_node)
    expected = expected_compute(lay, m, sim.contact, slow).sum(axis=(0, 1))
    expected[0] += sim.steps * m.serial_per_step
    excess = expected / expected.mean() - 1.0
    order = np.argsort(-excess, kind="stable")
    slow_ranks = [int(r) for r in order if excess[r] > m.slow_threshold]
    t1 = one_rank_time(sim)
    serial = sim.steps * m.serial_per_step
    return {
        "synthetic": True,
        "description": "Ground truth of a synthetic MPInside run generated by perfkit.synthetic (not measured).",
        "seed": sim.seed, "nprocs": lay.nprocs, "ppn": lay.ppn, "nodes": lay.nodes, "steps": sim.steps,
        "process_grid": list(lay.grid), "elements_per_rank": lay.elements.tolist(),
        "imbalance": {
            "threshold": m.slow_threshold,
            "slow_ranks": slow_ranks,
            "slow_excess_over_mean": [_r(excess[r]) for r in slow_ranks],
            "expected_compute": _r(expected),
            "max_over_mean": _r(expected.max() / expected.mean()),
        },
        "slow_node": None if sim.slow_node is None else {
            "node": sim.slow_node, "factor": m.slow_node_factor,
            "ranks": [int(r) for r in np.flatnonzero(lay.node_of == sim.slow_node)]},
        "contact": _contact_truth(sim),
        "compute": _r(sim.measured.compute),
        "split": {"measured": _split(sim.measured), "perfect": _split(sim.perfect)},
        "elapsed": {mode: _r((sim.perfect if mode == "perfect" else sim.measured).elapsed) for mode in MODES},
        "scaling": {"one_rank_time": _r(t1), "serial_time": _r(serial), "parallel_fraction": 1.0 - serial / t1},
        "model": asdict(m),
    }


def one_rank_time(sim: Simulation) -> float:
    """Noise-free time [s] of the whole mesh on one rank without communication (T(1) of the series)."""
    m = sim.model
    work = sim.steps * np.prod(m.mesh) + sim.contact.sum() * m.contact_cost
    return float(work * m.element_cost + sim.steps * m.serial_per_step)


def _contact_truth(sim: Simulation) -> dict[str, Any]:
    """Ranks carrying contact work at the first, middle and last step (the work moves)."""
    picks = {"first": 0, "middle": sim.steps // 2, "last": sim.steps - 1}
    return {name: [int(r) for r in np.flatnonzero(sim.contact[s] > 0)] for name, s in picks.items()}


def _split(t: Timing) -> dict[str, dict[str, list[float]]]:
    """Per-rank transfer and wait time of every call that can wait."""
    return {call: {"transfer": _r(total - wait), "wait": _r(wait)}
            for call, total, wait in (("MPI_Waitall", t.waitall, t.waitall_wait), ("MPI_Recv", t.recv, t.recv_wait),
                                      ("MPI_Bcast", t.bcast, t.bcast_wait),
                                      ("MPI_Allreduce", t.allreduce, t.allreduce_wait))}


def _r(x: Any) -> Any:
    """Round seconds to 1 µs for JSON (lists for arrays)."""
    arr = np.round(np.asarray(x, dtype=float), 6)
    return arr.tolist() if arr.ndim else float(arr)


# ---------------------------------------------------------------- public entry points


def generate_run(nprocs: int, mode: str, *, ppn: int = 24, seed: int = 0, steps: int = 300,
                 model: CrashModel | None = None, matrices: bool = True, sizes: bool = True,
                 node_of: np.ndarray | None = None) -> tuple[xr.Dataset, dict[str, Any]]:
    """One synthetic run in MPInside ``mode`` and its ground truth (see ``truth``); ``node_of`` as in ``simulate``."""
    sim = simulate(nprocs, ppn=ppn, seed=seed, steps=steps, model=model, node_of=node_of)
    return to_dataset(sim, mode, matrices=matrices, sizes=sizes), truth(sim)


def write_series(out_dir: str | Path, nprocs: Sequence[int] = (48, 96, 192, 384), modes: Sequence[str] = MODES,
                 *, ppn: int = 24, seed: int = 0, steps: int = 300, model: CrashModel | None = None,
                 matrices_up_to: int | None = None, sizes_up_to: int | None = None) -> list[Path]:
    """Write ``out_dir/<nprocs>/<mode>.mpinside`` with sidecars and ``truth.json``; return the files.

    Transfer matrices and size histograms are written for runs of at most ``matrices_up_to`` and
    ``sizes_up_to`` ranks (``None``: always).
    """
    from perfkit.io.mpinside import write

    out_dir = Path(out_dir)
    written: list[Path] = []
    for n in nprocs:
        sim = simulate(n, ppn=ppn, seed=seed, steps=steps, model=model)
        folder = out_dir / str(n)
        folder.mkdir(parents=True, exist_ok=True)
        for mode in modes:
            ds = to_dataset(sim, mode, matrices=matrices_up_to is None or n <= matrices_up_to,
                            sizes=sizes_up_to is None or n <= sizes_up_to)
            path = write(ds, folder / f"{mode}.mpinside")
            written += [path, _write_json(path.with_name(path.name + ".perfkit.json"), sidecar(ds))]
        written.append(_write_json(folder / "truth.json", truth(sim)))
    return written


def sidecar(ds: xr.Dataset) -> dict[str, Any]:
    """Run metadata for ``<file>.perfkit.json`` (elapsed rounded to 1 µs)."""
    one = ds.isel(run=0)
    return {"label": str(one["label"].values), "nprocs": int(one["nprocs"]), "nodes": int(one["nodes"]),
            "ppn": int(one["ppn"]), "threads": 1, "system": SYSTEM, "mode": str(one["mode"].values),
            "elapsed": _r(float(one["elapsed"]))}


def _write_json(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return path


def main(argv: Sequence[str] | None = None) -> None:
    """Command line: ``python -m perfkit.synthetic --out DIR --nprocs 48 96 --seed 0``."""
    parser = argparse.ArgumentParser(prog="python -m perfkit.synthetic", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="output folder")
    parser.add_argument("--nprocs", nargs="+", type=int, default=[48, 96, 192, 384], help="rank counts")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--ppn", type=int, default=24, help="ranks per node")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=300, help="simulated time steps")
    parser.add_argument("--matrices-up-to", type=int, default=None, help="largest run with transfer matrices")
    parser.add_argument("--sizes-up-to", type=int, default=None, help="largest run with size histograms")
    args = parser.parse_args(argv)
    files = write_series(args.out, args.nprocs, args.modes, ppn=args.ppn, seed=args.seed, steps=args.steps,
                         matrices_up_to=args.matrices_up_to, sizes_up_to=args.sizes_up_to)
    print(f"wrote {len(files)} files under {args.out}")


if __name__ == "__main__":
    main()
