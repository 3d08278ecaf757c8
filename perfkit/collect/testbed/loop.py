"""The closed loop on the testbed: profile a run, predict what a change buys, make the change, re-run
it and measure. Predictions are claims about a re-run; this checks them.

Two changes: another placement (``place_and_rerun``: profile under block placement, place with a
strategy, write the launch file, re-run with it) and a faster network (``faster_network``: profile at
a link rate, predict ``k`` times the rate, re-run on a testbed at that rate). Elapsed time is the
profile's own (from the end of ``MPI_Init`` to the start of ``MPI_Finalize``, the collector on every
rank in both runs), inter-node bytes the kernel's
counters of the nodes' links less the frames' headers (``payload_bytes``).

On a dilated testbed (``dilation`` k > 1) the profile, the prediction and the re-run are all in the
testbed's time, k times the cluster's: the prediction's network is described at the rate the links
run at (``bandwidth / k``, ``TestbedSpec.link_rate``), and every row states ``dilation`` and
``link_bit_s``; cluster times are the row's times / k.
"""

from __future__ import annotations

import re
import shutil
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from perfkit.collect.testbed.cluster import Testbed
from perfkit.io.open import open_profile
from perfkit.placement.network import REPEATABILITY, Network, parse_rate
from perfkit.placement.predict import predict_network, predict_placement, run_seconds
from perfkit.placement.strategies import place
from perfkit.placement.topology import Topology

#: Ethernet (14), IPv4 (20) and TCP with timestamps (32) header bytes of every frame on the links
HEADER_BYTES = 66
LAUNCH_FILE = {"openmpi": ("rankfile", "--rankfile"), "mpich": ("machinefile", "-f")}


def mpi_launch(mpi: str, nprocs: int, program: Sequence[str], extra: Sequence[str] = ()) -> list[str]:
    """``mpirun`` (``"openmpi"``) or ``mpiexec.hydra`` (``"mpich"``) of ``program`` on ``nprocs`` ranks."""
    if mpi == "openmpi":
        return ["mpirun", "-np", str(nprocs), *extra, *program]
    if mpi == "mpich":
        return ["mpiexec.hydra", "-n", str(nprocs), *extra, *program]
    raise ValueError(f"mpi {mpi!r}: expected 'openmpi' or 'mpich'")


def profiled_run(tb: Testbed, launch: list[str], output: Path, timeout: float) -> dict[str, Any]:
    """Run ``launch`` on the testbed under the collector (with matrices); the profile and link counters."""
    perfkit = str(Path(sys.executable).with_name("perfkit"))
    log = output.with_suffix(".out")
    with open(log, "w") as fh:
        report = tb.run([perfkit, "collect", "--matrices", "--force", "-o", str(output), "--", *launch],
                        timeout=timeout, stdout=fh)
    text = log.read_text()
    if report["exit_status"] != 0 or not output.exists():
        raise RuntimeError(f"the run on the testbed failed (status {report['exit_status']}): {' '.join(launch)}\n"
                           f"{text[-2000:]}")
    loop = re.search(r"^exchange: loop_s ([0-9.]+)$", text, re.M)
    ds = open_profile(output)
    return {"profile": ds, "report": report, "elapsed": run_seconds(ds, str(ds["run"].values[0]))[0],
            "loop_s": float(loop.group(1)) if loop else None,
            "wire_bytes": float(sum(n["tx_bytes"] for n in report["nodes"])),
            "payload_bytes": payload_bytes(report)}


def repeated_run(tb: Testbed, launch: list[str], output: Path, timeout: float, repeats: int = 1) -> dict[str, Any]:
    """``profiled_run`` ``repeats`` times (``output`` with ``-1``, ``-2``, ... before its suffix); the run
    whose elapsed time is the median (the lower one of an even count) is copied to ``output`` and
    returned, with ``elapsed_all`` [s] of every repeat: one noisy run neither sets a prediction's
    baseline nor decides whether it came true."""
    if repeats < 1:
        raise ValueError(f"repeats = {repeats!r}: expected at least 1")
    if repeats == 1:
        return {**profiled_run(tb, launch, output, timeout), "elapsed_all": None}
    runs = []
    for i in range(1, repeats + 1):
        path = output.with_name(f"{output.stem}-{i}{output.suffix}")
        runs.append((profiled_run(tb, launch, path, timeout), path))
    order = sorted(range(repeats), key=lambda i: runs[i][0]["elapsed"])
    chosen, path = runs[order[(repeats - 1) // 2]]
    shutil.copyfile(path, output)
    shutil.copyfile(path.with_suffix(".out"), output.with_suffix(".out"))
    return {**chosen, "elapsed_all": [r["elapsed"] for r, _ in runs]}


def _spread(runs: list[float] | None) -> float | None:
    """Largest deviation of the repeats from their median [fraction], or None for one run."""
    if not runs:
        return None
    median = statistics.median(runs)
    return max(abs(t / median - 1) for t in runs)


def payload_bytes(report: dict[str, Any]) -> float:
    """Bytes the nodes' links carried above their Ethernet, IP and TCP headers [B]: the kernel's
    counters less ``HEADER_BYTES`` per frame (a frame without payload, an acknowledgement, counts 0)."""
    return float(sum(n["tx_bytes"] - HEADER_BYTES * n["tx_packets"] for n in report["nodes"]))


def place_and_rerun(program: Sequence[str], *, nodes: int, cores: int, bandwidth: str | float,
                    strategies: Sequence[str] = ("scotch",), switch_size: int | None = None,
                    uplink: str | float | None = None, nprocs: int | None = None, mpi: str = "openmpi",
                    workdir: str | Path | None = None, seed: int = 0, timeout: float = 600,
                    repeats: int = 1, dilation: float | str | None = None) -> list[dict[str, Any]]:
    """Profile ``program`` under block placement on a testbed; for each of ``strategies`` place it,
    predict (``perfkit.placement.predict.predict_placement`` with the testbed's links described as they
    run: dilated), re-run it with the launch file ``perfkit place`` writes; one row of predicted against
    measured each. With ``repeats`` > 1 the profile and each re-run are repeated and the median run of
    each is used (``repeated_run``). ``dilation``: the testbed's (``Testbed``)."""
    nprocs = nprocs or nodes * cores
    work = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="perfkit-loop-"))
    work.mkdir(parents=True, exist_ok=True)
    rate = parse_rate(bandwidth)
    up = parse_rate(uplink) if uplink is not None else None
    testbed = Testbed(nodes, cores, bandwidth=rate, switch_size=switch_size, uplink=up, dilation=dilation)
    network = _links(testbed)
    topology = Topology(nodes=nodes, cores=cores, switch_size=switch_size)
    fmt, flag = LAUNCH_FILE[mpi]
    rows = []
    with testbed as tb:
        before = repeated_run(tb, mpi_launch(mpi, nprocs, program), work / "before.mpinside", timeout, repeats)
        for strategy in strategies:
            placement = place(before["profile"], topology, strategy=strategy, seed=seed)
            prediction = predict_placement(before["profile"], placement, network)
            launch_file = work / f"{strategy}.{fmt}"
            placement.write(fmt, launch_file, overwrite=True)  # a re-used work folder holds the last loop's
            after = repeated_run(tb, mpi_launch(mpi, nprocs, program, (flag, str(launch_file))),
                                 work / f"{strategy}.mpinside", timeout, repeats)
            rows.append({"nodes": nodes, "cores": cores, "bandwidth_bit_s": rate, "switch_size": switch_size,
                         **_dilated(tb), "strategy": strategy, "mpi": mpi, "elapsed_before_measured": before["elapsed"],
                         "wire_bytes_before": before["wire_bytes"], "loop_before_s": before["loop_s"],
                         "loop_after_s": after["loop_s"], "kept_block": bool(placement.info.get("kept_block", False)),
                         **_repeats(before, after),
                         **prediction.compare(after["elapsed"], after["payload_bytes"]),
                         "prediction": prediction.as_dict(), "profiles": [str(work / "before.mpinside"),
                                                                          str(work / f"{strategy}.mpinside")]})
    return rows


def faster_network(program: Sequence[str], *, nodes: int, cores: int, bandwidth: str | float, k: float,
                   switch_size: int | None = None, nprocs: int | None = None, mpi: str = "openmpi",
                   workdir: str | Path | None = None, timeout: float = 600, repeats: int = 1,
                   dilation: float | str | None = None) -> dict[str, Any]:
    """Profile ``program`` on links at ``bandwidth``, predict its run on links ``k`` times faster
    (``predict_network``), re-run it on such a testbed (the same ``dilation``) and return predicted
    against measured (median runs of ``repeats`` each, as ``place_and_rerun``)."""
    nprocs = nprocs or nodes * cores
    work = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="perfkit-loop-"))
    work.mkdir(parents=True, exist_ok=True)
    rate = parse_rate(bandwidth)
    testbed = Testbed(nodes, cores, bandwidth=rate, switch_size=switch_size, dilation=dilation)
    network = _links(testbed)
    topology = Topology(nodes=nodes, cores=cores, switch_size=switch_size)
    with testbed as tb:
        before = repeated_run(tb, mpi_launch(mpi, nprocs, program), work / "before.mpinside", timeout, repeats)
    prediction = predict_network(before["profile"], k, network, topology)
    with Testbed(nodes, cores, bandwidth=rate * k, switch_size=switch_size, dilation=testbed.dilation) as tb:
        after = repeated_run(tb, mpi_launch(mpi, nprocs, program), work / "after.mpinside", timeout, repeats)
    return {"nodes": nodes, "cores": cores, "bandwidth_bit_s": rate, "k": k, "switch_size": switch_size,
            **_dilated(testbed),
            "mpi": mpi, "elapsed_before_measured": before["elapsed"], "loop_before_s": before["loop_s"],
            **_repeats(before, after),
            "loop_after_s": after["loop_s"], **prediction.compare(after["elapsed"], after["payload_bytes"]),
            "prediction": prediction.as_dict(), "profiles": [str(work / "before.mpinside"),
                                                             str(work / "after.mpinside")]}


def _links(tb: Testbed) -> Network:
    """The testbed's links as a prediction must see them: at the rates they run at (dilated) [bit/s]."""
    spec = tb.spec
    return Network.described(spec.link_rate, uplink_bit_s=spec.uplink_rate if spec.switch_size else None)


def _dilated(tb: Testbed) -> dict[str, float]:
    """A row's ``dilation`` k and ``link_bit_s`` (the rate the links ran at: bandwidth / k) [bit/s]."""
    return {"dilation": tb.dilation, "link_bit_s": tb.spec.link_rate}


def _repeats(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The repeats' elapsed times [s] and spreads of a row (None with one run each)."""
    return {"elapsed_before_all": before["elapsed_all"], "elapsed_after_all": after["elapsed_all"],
            "spread_before": _spread(before["elapsed_all"]), "spread_after": _spread(after["elapsed_all"])}


def balance(*, nodes: int, cores: int, bandwidth: str | float = "200mbit", steps: int = 20, step_s: float = 0.02,
            extra_s: float = 0.02, late_rank: int = 0, workdir: str | Path | None = None,
            timeout: float = 600, repeats: int = 1, dilation: float | str | None = None) -> dict[str, Any]:
    """The lab's static imbalance (``late_rank`` computes ``extra_s`` more each step) profiled on a testbed,
    ``whatif(profile, "balance")`` predicted, and the same total compute run balanced (every rank
    ``step_s + extra_s / nprocs``) measured. Elapsed is compared as the saving: measured run time
    (``run_seconds``) before minus the predicted saving, its interval from the prediction's widened by
    the re-runs' spread (``REPEATABILITY``)."""
    from perfkit.analysis.whatif import whatif
    from perfkit.collect.lab import launch_command

    nprocs = nodes * cores
    work = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="perfkit-loop-"))
    work.mkdir(parents=True, exist_ok=True)
    common = {"steps": steps, "bytes": 1024}
    with Testbed(nodes, cores, bandwidth=bandwidth, dilation=dilation) as tb:
        skewed = launch_command("static_imbalance", nprocs, step_seconds=step_s, extra_seconds=extra_s,
                                late_rank=late_rank, **common)
        before = repeated_run(tb, skewed, work / "before.mpinside", timeout, repeats)
        even = launch_command("balanced", nprocs, step_seconds=step_s + extra_s / nprocs, **common)
        after = repeated_run(tb, even, work / "after.mpinside", timeout, repeats)
    result = whatif(before["profile"], "balance").isel(run=0)
    whole = float(result["elapsed_before"])
    savings = [whole - whole / float(result[name]) for name in ("speedup", "speedup_low", "speedup_high")]
    point, low, high = (before["elapsed"] - s for s in savings)
    low, high = min(low, high) * (1 - REPEATABILITY), max(low, high) * (1 + REPEATABILITY)
    measured = after["elapsed"]
    return {"nodes": nodes, "cores": cores, "bandwidth_bit_s": parse_rate(bandwidth), **_dilated(tb),
            "strategy": "balance",
            "elapsed_before_measured": before["elapsed"], "elapsed_predicted": point, "elapsed_low": low,
            "elapsed_high": high, "elapsed_measured": measured, "elapsed_error_pct": 100 * (point / measured - 1),
            "in_interval": bool(low <= measured <= high), "bytes_predicted": before["payload_bytes"],
            "bytes_measured": after["payload_bytes"],
            "bytes_error_pct": 100 * (before["payload_bytes"] / after["payload_bytes"] - 1), **_repeats(before, after),
            "profiles": [str(work / "before.mpinside"), str(work / "after.mpinside")]}
