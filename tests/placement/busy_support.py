"""The lab's exchange program with compute that needs a core (``programs/spin_compute.c``), and the closed loop
that checks predictions of it on the testbed when ranks outnumber the machine's cores (the tests and
``benchmarks/bench_closed_loop.py``)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import xarray as xr

from perfkit.collect.build import cache_dir, compiler, wrapper_configuration
from perfkit.collect.lab.build import PROGRAMS
from perfkit.collect.testbed import Testbed
from perfkit.collect.testbed.loop import mpi_launch, profiled_run
from perfkit.model import CPU_TIME
from perfkit.placement.network import Network
from perfkit.placement.predict import predict_placement
from perfkit.placement.strategies import place
from perfkit.placement.topology import Topology

SOURCES = (PROGRAMS / "exchange.c", Path(__file__).with_name("programs") / "spin_compute.c")


def busy_exchange_binary(late_factor: float = 1.0) -> Path:
    """``exchange`` whose ``step=S`` is S seconds of CPU work per step (a spin; rank 0's ``late_factor`` times
    more), built with ``$MPICC`` (else mpicc) once per source, factor and compiler version."""
    cc = compiler("c")
    flags = ["-O2", f"-DPK_LATE_FACTOR={late_factor!r}"]
    digest = hashlib.sha256(repr((cc, flags, wrapper_configuration(cc))).encode())
    for source in SOURCES:
        digest.update(source.read_bytes())
    target = cache_dir() / "lab" / digest.hexdigest()[:20] / "busy_exchange"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        out = Path(tmp) / target.name
        done = subprocess.run([*cc, *flags, "-o", str(out), *map(str, SOURCES)], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"building {target.name} failed:\n{done.stdout}{done.stderr}")
        os.replace(out, target)  # atomic: concurrent builders leave one complete file
    return target


def without_cpu(ds: xr.Dataset) -> xr.Dataset:
    """The profile as a collector without CPU measurement would have written it."""
    return ds.drop_vars("rank_cpu").sel(metric=[m for m in ds["metric"].values if m != CPU_TIME])


def alternated_runs(tb: Testbed, launches: dict[str, list[str]], work: Path, repeats: int = 3) -> dict[str, dict]:
    """Each launch profiled ``repeats`` times, in turn with the others (load that comes and goes on a shared
    machine falls on all alike); per launch the run of median elapsed time, with ``elapsed_all`` [s]."""
    runs: dict[str, list[dict]] = {name: [] for name in launches}
    for i in range(repeats):
        for name, launch in launches.items():
            runs[name].append(profiled_run(tb, launch, work / f"{name}-{i}.mpinside", 600))
    return {name: sorted(done, key=lambda r: r["elapsed"])[(repeats - 1) // 2] | {
        "elapsed_all": [r["elapsed"] for r in done]} for name, done in runs.items()}


def busy_loop(program: list[str], pattern: np.ndarray, *, nodes: int, cores: int, bandwidth: float,
              strategies: tuple[str, ...], work: Path, repeats: int = 3, dilation: float | str = 1.0) -> list[dict]:
    """The closed loop of ``perfkit.collect.testbed.loop.place_and_rerun`` for a program that computes: block
    placement profiled, each of ``strategies`` predicted (with the CPU evidence, and without it as the model
    did before) and re-run, every launch by rankfile (so that all bind ranks to cores alike) and alternated
    (``alternated_runs``). One row per strategy: predicted against measured, both predictions, the runs."""
    topology = Topology(nodes=nodes, cores=cores)
    placed = {s: place(pattern, topology, strategy=s) for s in ("block", *strategies)}
    for strategy, placement in placed.items():
        placement.write("rankfile", work / f"{strategy}.rankfile", overwrite=True)
    launches = {s: mpi_launch("openmpi", nodes * cores, program, ("--rankfile", str(work / f"{s}.rankfile")))
                for s in placed}
    with Testbed(nodes, cores, bandwidth=bandwidth, dilation=dilation) as tb:
        runs = alternated_runs(tb, launches, work, repeats)
        network, k = Network.described(tb.spec.link_rate), tb.dilation
    before = runs["block"]
    rows = []
    for strategy in strategies:
        after = runs[strategy]
        p = predict_placement(before["profile"], placed[strategy], network)
        old = predict_placement(without_cpu(before["profile"]), placed[strategy], network)
        rows.append({"nodes": nodes, "cores": cores, "bandwidth_bit_s": bandwidth, "dilation": k, "strategy": strategy,
                     "elapsed_before_measured": before["elapsed"], "elapsed_before_all": before["elapsed_all"],
                     "elapsed_after_all": after["elapsed_all"], **p.compare(after["elapsed"], after["payload_bytes"]),
                     "without_cpu_predicted": old.elapsed_after, "without_cpu_low": old.elapsed_after_low,
                     "without_cpu_high": old.elapsed_after_high,
                     "without_cpu_error_pct": 100 * (old.elapsed_after / after["elapsed"] - 1),
                     "prediction": p, "prediction_without_cpu": old, "runs": runs})
    return rows
