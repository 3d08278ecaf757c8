"""The lab's scenarios: parameters, command line, and the MPI call sequence of each rank.

Each scenario's ``program`` mirrors ``programs/lab.c`` (or ``programs/lab.F90``) call for call;
``simulate.simulate`` turns it into event times. Parameters (all optional, defaults in
``Scenario.defaults``): ``steps``; ``step_seconds`` compute per step [s]; ``extra_seconds`` the late
rank's extra compute [s]; ``root_extra_seconds`` [s]; ``bytes`` message size [B]; ``late_rank``;
``ppn`` and ``late_node`` (static_imbalance: the ranks ``r // ppn == late_node`` are late when
``ppn > 0``); ``work`` busy-loop iterations per step; ``fail_rank``, ``fail_step``; ``interface``
(Fortran: ``"use_mpi"`` or ``"mpif_h"``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from perfkit.collect.lab.simulate import (
    ANY_SOURCE,
    Call,
    Collective,
    Compute,
    Irecv,
    Isend,
    Op,
    Recv,
    Send,
    Waitall,
)

TAG_RIGHTWARD, TAG_LEFTWARD, TAG_TOKEN, TAG_GATHER, TAG_RELEASE = 1, 2, 3, 4, 5
#: Bytes of the collective_imbalance scenario's MPI_Allreduce (one double).
ALLREDUCE_BYTES = 8

Params = dict[str, Any]

COMMON = {"steps": 10, "step_seconds": 0.01, "bytes": 1024}


@dataclass(frozen=True)
class Scenario:
    """One lab program configuration and its known cause."""

    name: str
    description: str
    cause: str
    language: str  # "c" or "fortran"
    defaults: Mapping[str, Any]
    ops: Callable[[int, int, Params], list[Op]]  # (rank, nprocs, params) -> the rank's steps
    explain: Callable[[int, Params], str]
    wall_time_prescribed: bool = True
    fails: bool = False

    def params(self, **given: Any) -> Params:
        """Defaults overridden by ``given``; unknown names are an error."""
        unknown = sorted(set(given) - set(self.defaults))
        if unknown:
            raise TypeError(f"scenario {self.name!r} has no parameter(s) {unknown}; it takes {sorted(self.defaults)}")
        p = {**self.defaults, **{k: v for k, v in given.items() if v is not None}}
        if int(p["steps"]) < 0 or int(p["bytes"]) < 0:
            raise ValueError("steps and bytes must be >= 0")
        if p.get("interface", "use_mpi") not in ("use_mpi", "mpif_h"):
            raise ValueError(f"interface must be 'use_mpi' or 'mpif_h', got {p['interface']!r}")
        return p

    def program(self, nprocs: int, params: Params) -> list[list[Op]]:
        """Every rank's MPI call sequence, start-up and shut-down included."""
        if nprocs < 2:
            raise ValueError(f"scenario {self.name!r} needs at least 2 ranks, got {nprocs}")
        start = [Call("MPI_Init"), Call("MPI_Comm_rank"), Call("MPI_Comm_size"),
                 Collective("MPI_Barrier", prescribed=False)]
        return [[*start, *self.ops(r, nprocs, params), Call("MPI_Finalize")] for r in range(nprocs)]

    def argv(self, params: Params, record: str | None = None) -> list[str]:
        """The program's arguments (after the executable); ``record``: where the ranks write their
        realised compute intervals (``<record>.<rank>``)."""
        if self.language == "fortran":
            return [str(int(params["steps"])), repr(float(params["step_seconds"])),
                    repr(float(params["extra_seconds"])), str(int(params["bytes"])), str(int(params["late_rank"])),
                    *([record] if record else [])]
        keys = {"steps": "steps", "step_seconds": "step", "extra_seconds": "extra",
                "root_extra_seconds": "root_extra", "bytes": "bytes", "late_rank": "late_rank", "ppn": "ppn",
                "late_node": "late_node", "work": "work", "fail_rank": "fail_rank", "fail_step": "fail_step"}
        args = [self.name] + [f"{keys[k]}={v}" for k, v in sorted(params.items()) if k in keys]
        return args + ([f"record={record}"] if record else [])


def _halo(rank: int, n: int, nbytes: int) -> list[Op]:
    left, right = (rank - 1) % n, (rank + 1) % n
    return [Irecv(left, TAG_RIGHTWARD, nbytes), Irecv(right, TAG_LEFTWARD, nbytes),
            Isend(right, TAG_RIGHTWARD, nbytes), Isend(left, TAG_LEFTWARD, nbytes), Waitall()]


def _halo_steps(late: Callable[[int, int], bool]) -> Callable[[int, int, Params], list[Op]]:
    """Compute (plus extra when ``late(rank, step)``) then a halo exchange, every step."""

    def ops(rank: int, n: int, p: Params) -> list[Op]:
        out: list[Op] = []
        for k in range(int(p["steps"])):
            extra = float(p.get("extra_seconds", 0.0)) if late(rank, k) else 0.0
            out += [Compute(float(p["step_seconds"]) + extra), *_halo(rank, n, int(p["bytes"]))]
        return out

    return ops


def _static_late(p: Params, rank: int) -> bool:
    ppn = int(p["ppn"])
    return rank // ppn == int(p["late_node"]) if ppn > 0 else rank == int(p["late_rank"])


def _static_ops(rank: int, n: int, p: Params) -> list[Op]:
    return _halo_steps(lambda r, k: _static_late(p, r))(rank, n, p)


def _dynamic_ops(rank: int, n: int, p: Params) -> list[Op]:
    return _halo_steps(lambda r, k: r == k % n)(rank, n, p)


def _oversubscribed_ops(rank: int, n: int, p: Params) -> list[Op]:
    out: list[Op] = []
    for _ in range(int(p["steps"])):
        out += [Compute(math.nan), *_halo(rank, n, int(p["bytes"]))]
    return out


def _failing_ops(rank: int, n: int, p: Params) -> list[Op]:
    """The steps every rank completes before the failing rank fails (the rest is not modelled)."""
    steps = min(int(p["steps"]), int(p["fail_step"]))
    return _halo_steps(lambda r, k: False)(rank, n, {**p, "steps": steps})


def _pipeline_ops(rank: int, n: int, p: Params) -> list[Op]:
    c, b = float(p["step_seconds"]), int(p["bytes"])
    out: list[Op] = []
    for _ in range(int(p["steps"])):
        if rank == 0:
            out += [Compute(c), Send(1, TAG_TOKEN, b), Recv(n - 1, TAG_TOKEN, b)]
        else:
            out += [Recv(rank - 1, TAG_TOKEN, b), Compute(c), Send((rank + 1) % n, TAG_TOKEN, b)]
    return out


def _collective_ops(rank: int, n: int, p: Params) -> list[Op]:
    c, d, e = float(p["step_seconds"]), float(p["extra_seconds"]), float(p["root_extra_seconds"])
    out: list[Op] = []
    for _ in range(int(p["steps"])):
        out += [Compute(c + d * rank / (n - 1)), Collective("MPI_Allreduce")]
        if rank == 0:
            out.append(Compute(e))
        out.append(Collective("MPI_Bcast"))
    return out


def _any_source_ops(rank: int, n: int, p: Params) -> list[Op]:
    c, d, b = float(p["step_seconds"]), float(p["extra_seconds"]), int(p["bytes"])
    out: list[Op] = []
    for _ in range(int(p["steps"])):
        if rank == 0:
            out += [Compute(c), *(Recv(ANY_SOURCE, TAG_GATHER, b) for _ in range(1, n)),
                    *(Send(i, TAG_RELEASE, b) for i in range(1, n))]
        else:
            out += [Compute(c + d * (n - rank) / (n - 1)), Send(0, TAG_GATHER, b), Recv(0, TAG_RELEASE, b)]
    return out


def _fortran_ops(rank: int, n: int, p: Params) -> list[Op]:
    out: list[Op] = []
    for _ in range(int(p["steps"])):
        extra = float(p["extra_seconds"]) if rank == int(p["late_rank"]) else 0.0
        out += [Compute(float(p["step_seconds"]) + extra), *_halo(rank, n, int(p["bytes"])),
                Collective("MPI_Allreduce")]
    return out


def _ms(s: float) -> str:
    return f"{float(s) * 1e3:g} ms"


def _late_set(n: int, p: Params) -> str:
    if int(p["ppn"]) > 0:
        ranks = [r for r in range(n) if _static_late(p, r)]
        return f"the ranks of node {int(p['late_node'])} ({ranks}, {int(p['ppn'])} per node)"
    return f"rank {int(p['late_rank'])}"


SCENARIOS: dict[str, Scenario] = {s.name: s for s in [
    Scenario(
        "balanced", "ring halo exchange, every rank computes the same", "balanced", "c", {**COMMON},
        _halo_steps(lambda r, k: False),
        lambda n, p: f"All {n} ranks compute {_ms(p['step_seconds'])} per step then exchange halos with both "
                     "ring neighbours: no rank waits for another."),
    Scenario(
        "static_imbalance", "ring halo exchange, one rank (or one node's ranks) computes more every step",
        "static_imbalance", "c", {**COMMON, "extra_seconds": 0.01, "late_rank": 0, "ppn": 0, "late_node": 0},
        _static_ops,
        lambda n, p: f"{_late_set(n, p).capitalize()} computes {_ms(p['extra_seconds'])} more than the others "
                     f"({_ms(p['step_seconds'])}) every step: its neighbours wait for it as a late sender, and "
                     "the wait spreads along the ring."),
    Scenario(
        "dynamic_imbalance", "ring halo exchange, a different rank is late each step (rank = step % nprocs)",
        "dynamic_imbalance", "c", {**COMMON, "extra_seconds": 0.01}, _dynamic_ops,
        lambda n, p: f"At step k rank k % {n} computes {_ms(p['extra_seconds'])} more: every rank is late "
                     "equally often (exactly when steps is a multiple of nprocs), yet every step waits for "
                     "one late rank."),
    Scenario(
        "pipeline", "token ring: each rank waits for its predecessor's MPI_Send before computing",
        "serialisation", "c", {**COMMON}, _pipeline_ops,
        lambda n, p: f"Rank i receives the token from rank i-1, computes {_ms(p['step_seconds'])} and passes it "
                     f"on; rank 0 waits for it to come back. The computation is serialised: each rank waits "
                     f"{n - 1} x {_ms(p['step_seconds'])} per step in MPI_Recv."),
    Scenario(
        "collective_imbalance", "rank-dependent compute before an MPI_Allreduce, root late before MPI_Bcast",
        "collective_imbalance", "c", {**COMMON, "extra_seconds": 0.01, "root_extra_seconds": 0.005},
        _collective_ops,
        lambda n, p: f"Rank r computes {_ms(p['step_seconds'])} + r/{n - 1} x {_ms(p['extra_seconds'])} before an "
                     f"MPI_Allreduce, then rank 0 computes {_ms(p['root_extra_seconds'])} before an MPI_Bcast: "
                     "early ranks wait in the collectives."),
    Scenario(
        "oversubscribed", "balanced ring halo exchange with busy-loop compute, more ranks than cores",
        "oversubscribed", "c", {**COMMON, "work": 1_000_000}, _oversubscribed_ops,
        lambda n, p: f"Every rank runs the same busy loop ({int(p['work'])} iterations per step) then exchanges "
                     f"halos; with {n} ranks on fewer cores, ranks wait for each other's CPU share.",
        wall_time_prescribed=False),
    Scenario(
        "abort", "ring halo exchange; one rank calls MPI_Abort", "abort", "c",
        {**COMMON, "fail_rank": 0, "fail_step": 2}, _failing_ops,
        lambda n, p: f"Rank {int(p['fail_rank'])} calls MPI_Abort (error code 3) at step {int(p['fail_step'])}; "
                     "the program never reaches MPI_Finalize.",
        fails=True),
    Scenario(
        "segfault", "ring halo exchange; one rank dies of SIGSEGV", "segfault", "c",
        {**COMMON, "fail_rank": 0, "fail_step": 2}, _failing_ops,
        lambda n, p: f"Rank {int(p['fail_rank'])} raises SIGSEGV at step {int(p['fail_step'])}; the program "
                     "never reaches MPI_Finalize.",
        fails=True),
    Scenario(
        "any_source", "rank 0 gathers with MPI_ANY_SOURCE receives from senders late by known amounts",
        "static_imbalance", "c", {**COMMON, "extra_seconds": 0.01}, _any_source_ops,
        lambda n, p: f"Rank r > 0 computes {_ms(p['step_seconds'])} + (nprocs - r)/(nprocs - 1) x "
                     f"{_ms(p['extra_seconds'])} and sends to rank 0, which receives with MPI_ANY_SOURCE (the "
                     "highest rank arrives first) and then releases every sender."),
    Scenario(
        "fortran_halo", "Fortran: ring halo exchange then MPI_ALLREDUCE every step, one rank computes more",
        "static_imbalance", "fortran",
        {**COMMON, "extra_seconds": 0.01, "late_rank": 0, "interface": "use_mpi"}, _fortran_ops,
        lambda n, p: f"Fortran ({'use mpi' if p['interface'] == 'use_mpi' else 'include mpif.h'}): rank "
                     f"{int(p['late_rank'])} computes {_ms(p['extra_seconds'])} more than the others "
                     f"({_ms(p['step_seconds'])}) before a halo exchange and an MPI_ALLREDUCE; its neighbours "
                     "wait in MPI_WAITALL, everyone else in the MPI_ALLREDUCE."),
]}


def cause_of(scenario: Scenario, params: Params) -> str:
    """The known cause label; a scenario whose imbalance parameter is zero is ``balanced``."""
    if scenario.cause in ("static_imbalance", "dynamic_imbalance", "collective_imbalance") and (
        float(params.get("extra_seconds", 0.0)) == 0.0 and float(params.get("root_extra_seconds", 0.0)) == 0.0
    ):
        return "balanced"
    return scenario.cause
