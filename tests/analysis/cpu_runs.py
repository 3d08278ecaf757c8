"""Runs with CPU measurements built with ``perfkit.model.make_run``, as ``perfkit collect`` writes them.

Each rank does compute then sends a ring message (``MPI_Send``, its late-sender wait ``w_MPI_Recv``
measured, the rest of ``MPI_Recv`` transfer), with ``cpu_time`` beside ``time`` and the per-rank
``rank_cpu`` statistics. The numbers follow the scheduler's arithmetic: a rank sharing a core
waits ``run_delay`` for it in compute and in busy-polling MPI calls.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import xarray as xr

from perfkit.analysis.cpu import CPU_METRIC
from perfkit.model import CPU_STATS, METRICS, make_run

FUNCTIONS = ["Compute", "MPI_Init", "MPI_Finalize", "MPI_Send", "MPI_Recv", "w_MPI_Recv"]
CALLS = ["Compute", "MPI_Init", "MPI_Finalize", "MPI_Send", "MPI_Recv", "MPI_Recv"]
KINDS = ["compute", "other", "other", "transfer", "transfer", "wait_late_sender"]


def cpu_run(*, compute: float, compute_cpu: float, send: float, send_cpu: float, recv: float = 0.01,
            wait: float = 0.0, run_delay: float, hosts: Sequence[str], cores: int, allowed: int | None = None,
            node_allowed: int | None = None,
            involuntary: float = 0.0, label: str = "run", nbytes: float = 1e8, cpu: bool = True,
            jitter: float = 0.0) -> xr.Dataset:
    """One run of ``len(hosts)`` ranks, per rank [s]: compute wall and CPU time, ``MPI_Send`` wall and CPU time,
    the receive's transfer and wait, ``run_delay`` and involuntary switches; ``cores`` online per host,
    ``allowed`` in each rank's mask and ``node_allowed`` in the union of a node's masks (default all).
    ``jitter`` adds that share of spread over the ranks (so that no finding rests on exact equality);
    ``cpu=False`` leaves the CPU measurements out (another profiler).
    """
    n = len(hosts)
    spread = 1 + jitter * np.linspace(-1, 1, n)
    time = np.zeros((n, len(FUNCTIONS)))
    used = np.zeros_like(time)
    time[:, 0], used[:, 0] = compute * spread, compute_cpu * spread
    time[:, 1:3], used[:, 1:3] = 0.05, 0.04
    time[:, 3], used[:, 3] = send, send_cpu
    time[:, 4], used[:, 4] = recv, recv
    time[:, 5], used[:, 5] = wait, np.nan
    calls = np.tile([np.nan, 1, 1, 100, 100, 100], (n, 1))
    sent = np.tile([np.nan, 0, 0, nbytes, 0, 0], (n, 1))
    received = np.tile([np.nan, 0, 0, 0, nbytes, 0], (n, 1))
    metrics = [*METRICS]
    values = {"time": time, "calls": calls, "bytes_sent": sent, "calls_sent": calls * (sent > 0),
              "bytes_recv": received, "calls_recv": calls * (received > 0)}
    if cpu:
        metrics.append(CPU_METRIC)
        values[CPU_METRIC] = used
    profile = np.stack([values[m] for m in metrics], axis=-1)
    elapsed = float(time.sum(axis=1).max())
    rank_cpu = None
    if cpu:
        stats = {"cores_allowed": np.full(n, float(allowed or cores)), "cores_online": np.full(n, float(cores)),
                 "node_cores_allowed": np.full(n, float(node_allowed or cores)), "cpu_quota": np.full(n, np.nan),
                 "run_delay": np.full(n, run_delay), "voluntary_switches": np.full(n, 200.0),
                 "involuntary_switches": np.full(n, involuntary), "process_cpu_time": used[:, [0, 3, 4]].sum(axis=1)}
        rank_cpu = np.stack([stats.get(name, np.full(n, np.nan)) for name in CPU_STATS], axis=-1)
    return make_run(profile, ranks=range(n), functions=FUNCTIONS, calls=CALLS, kinds=KINDS, metrics=metrics,
                    hosts=list(hosts), rank_cpu=rank_cpu,
                    run={"label": label, "nprocs": n, "elapsed": elapsed, "mode": "slt", "format": "mpinside"})


def oversubscribed(**kw: object) -> xr.Dataset:
    """4 busy ranks on one host of 2 cores (the issue's MD code): each waits for a core half of the time, in
    compute and while spinning in ``MPI_Send`` for a receiver that has no core; transfer looks like the loss."""
    args = {"compute": 2.0, "compute_cpu": 1.0, "send": 1.6, "send_cpu": 0.8, "wait": 0.05, "run_delay": 1.8,
            "hosts": ["node0"] * 4, "cores": 2, "involuntary": 900.0, "label": "oversubscribed", "jitter": 0.02}
    return cpu_run(**{**args, **kw})  # type: ignore[arg-type]


def own_cores(**kw: object) -> xr.Dataset:
    """2 ranks on 2 cores: a core each, a quiet machine's run delay (0.5 % of the region)."""
    args = {"compute": 1.0, "compute_cpu": 0.995, "send": 0.2, "send_cpu": 0.2, "wait": 0.05, "run_delay": 0.006,
            "hosts": ["node0"] * 2, "cores": 2, "involuntary": 3.0, "label": "own_cores", "jitter": 0.02}
    return cpu_run(**{**args, **kw})  # type: ignore[arg-type]


def interfered(**kw: object) -> xr.Dataset:
    """4 ranks, one per core of an 8-core node, sharing their cores with another job: 30 % of the time without one."""
    args = {"compute": 1.4, "compute_cpu": 1.0, "send": 0.6, "send_cpu": 0.4, "wait": 0.05, "run_delay": 0.6,
            "hosts": ["node0"] * 4, "cores": 8, "involuntary": 400.0, "label": "interfered", "jitter": 0.02}
    return cpu_run(**{**args, **kw})  # type: ignore[arg-type]
