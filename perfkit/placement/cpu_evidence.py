"""What a prediction holds fixed because it waited for a core, not a link (profiles that measured CPU).

From ``perfkit.analysis.cpu.cpu_usage`` (``perfkit collect``: CPU time per function and each rank's run
delay), for the busiest rank b (the most MPI time ``M`` [s]) and the critical rank c (the longest compute,
wall ``K`` [s]). In a bulk-synchronous run b waits in MPI for c's compute, ``K - k_b`` (``k_b``: b's own
compute wall); of that wait

* ``peer_extra_cpu`` [s] is c's compute CPU beyond b's: more work, kept as compute is;
* ``peer_off_core`` [s] is c's run delay in compute beyond b's: a peer's lack of a core;
* the rest (a sleep, I/O, a late start) is left to the network model, as before.

b's own time off a core in MPI, ``own_off_core`` [s], is its run delay in MPI (``delay_mpi``: the run delay
split between compute and MPI in proportion to CPU time, each part within its wall - CPU time; modelled),
kept between ``own_off_core_low`` (the least the split allows in MPI) and ``own_off_core_high`` (MPI's whole
wall - CPU time, or the whole run delay).

A placement keeps the cores, not who shares them: the critical rank's share of a core while it computes
(``critical_compute_cpu / critical_compute_wall``) may move to the run's ``fair_share`` [1] (every rank's CPU
time over ranks x elapsed: the cores as the ranks used them, spread evenly); 8 ranks on 2 cores, the critical
rank got 0.40 of a core beside a rank polling shared memory and 0.25 beside one polling TCP. ``share_shift``
[s] is what its compute would then take longer (or shorter) off a core.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import xarray as xr

from perfkit.analysis.cpu import cpu_usage, has_cpu

NOT_MEASURED = "CPU not measured"


@dataclass(frozen=True)
class CpuEvidence:
    """The CPU measurements behind a prediction (module docstring): times [s], shares [1] and the ranks."""

    busiest_rank: int
    mpi_wall: float
    mpi_cpu: float
    run_delay: float
    own_off_core: float
    own_off_core_low: float
    own_off_core_high: float
    oversubscription: float
    critical_rank: int
    critical_compute_wall: float
    critical_compute_cpu: float
    peer_extra_cpu: float
    peer_off_core: float
    fair_share: float
    share_shift: float

    def as_dict(self) -> dict[str, float | int]:
        """JSON-ready, times in s (keys with ``_s``)."""
        ranks = ("busiest_rank", "critical_rank", "oversubscription", "fair_share")
        return {k if k in ranks else f"{k}_s": v for k, v in asdict(self).items()}


def cpu_evidence(ds: xr.Dataset, run: str, mpi: np.ndarray, elapsed: float) -> CpuEvidence | None:
    """The CPU evidence of ``run`` (``elapsed`` [s]) for the rank with the most of ``mpi`` (per-rank MPI time
    [s], the prediction's own), or None when the profile did not measure CPU (or not for that rank)."""
    if not has_cpu(ds):
        return None
    usage = cpu_usage(ds.sel(run=[run])).isel(run=0)
    b = int(np.nanargmax(mpi))
    get = {name: np.asarray(usage[name].values, dtype=float) for name in
           ("compute_wall", "compute_cpu", "mpi_wall", "mpi_cpu", "run_delay", "delay_compute", "delay_mpi",
            "oversubscription")}
    if np.isnan(get["run_delay"][b]) or np.isnan(get["mpi_cpu"][b]):
        return None
    wall, cpu, in_compute = get["compute_wall"], get["compute_cpu"], np.nan_to_num(get["delay_compute"])
    c = int(np.nanargmax(wall))
    gap = min(max(wall[c] - wall[b], 0.0), float(mpi[b]))
    extra = min(max(cpu[c] - cpu[b], 0.0), gap)
    off_core = min(max(in_compute[c] - in_compute[b], 0.0), gap - extra)
    delay, mpi_off = get["run_delay"][b], max(get["mpi_wall"][b] - get["mpi_cpu"][b], 0.0)
    compute_off = max(wall[b] - cpu[b], 0.0)
    used = np.nansum(cpu + np.nan_to_num(get["mpi_cpu"]))
    fair = min(1.0, used / (np.count_nonzero(~np.isnan(wall)) * elapsed)) if elapsed > 0 else 1.0
    shift = max(cpu[c] * (1 / fair - 1), 0.0) - in_compute[c] if fair > 0 else 0.0
    low, high = min(max(delay - compute_off, 0.0), mpi_off), min(delay, mpi_off)
    return CpuEvidence(
        busiest_rank=int(usage["rank"].values[b]), mpi_wall=float(get["mpi_wall"][b]), mpi_cpu=float(get["mpi_cpu"][b]),
        run_delay=float(delay), own_off_core=float(np.clip(np.nan_to_num(get["delay_mpi"][b]), low, high)),
        own_off_core_low=float(low), own_off_core_high=float(high), oversubscription=float(get["oversubscription"][b]),
        critical_rank=int(usage["rank"].values[c]), critical_compute_wall=float(wall[c]),
        critical_compute_cpu=float(cpu[c]), peer_extra_cpu=float(extra), peer_off_core=float(off_core),
        fair_share=float(fair), share_shift=float(shift))
