"""Time dilation in numbers: does a program that computes keep its time on an emulated cluster?

1. Scaling: ``spin`` (tests/collect/testbed/spin.c: the same CPU work on every rank) on 1, 2, 4 and 8
   nodes × 2 cores, with dilation auto and without (k = 1). ``stretch``: a rank's compute time in
   cluster time (wall / k) over its CPU time (what it takes on a core of its own); 1 is faithful.
2. Transfers: 20 MB between two nodes at 200 Mbit/s (2 and 8 nodes) and 1 Gbit/s (4 nodes), dilated,
   alone and with every other emulated core busy (spin ranks on the other cores of both nodes and on
   every core of the other nodes); the rate
   the receiver saw as a share of the dilated link rate (at most 99.3%: Ethernet, IP and TCP headers
   of 9000-byte frames).
3. Headroom: the full-load case of 2. on 4 nodes × 2 cores with k = 8 / (2 − headroom), 0 to 0.5 cores,
   the spin ranks' stretch and the transfer's share beside the kernel's soft-interrupt time
   (``/proc/stat``), which runs outside every quota.
4. Kernel: soft-interrupt time of 100 MB transfers between two undilated nodes at 0.2, 1 and 4 Gbit/s
   (less an idle spell's), per Gbit/s: what the headroom must hold at the links' dilated rates.

Each case is run ``--repeats`` times (3) and the median kept; the load average is recorded with it,
as this machine may be shared. Writes ``results/dilation.json`` (docs/testbed.md quotes it); ``--parts``
measures some parts again and keeps the others' results.
Needs root (the testbed), Open MPI and cgroup's cpu controller. Run: ``python benchmarks/bench_dilation.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from perfkit.collect.testbed import Testbed, cpu, why_unavailable  # noqa: E402
from perfkit.collect.testbed.cluster import machine_cores  # noqa: E402
from perfkit.collect.testbed.spec import HEADROOM_CORES, NETWORK_CORES_PER_BIT_S  # noqa: E402
from tests.collect.testbed.testbed_support import build_spin, spin_times, transfer  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "dilation.json"
SPIN_STEP, SPIN_STEPS = 30_000_000, 4  # about 0.25 s of CPU a rank
TRANSFER_BYTES = 20_000_000
PARTS = ["scaling", "transfer", "headroom", "kernel"]


def _softirq_s() -> float:
    """The machine's time in soft interrupts since boot, all cores [s]."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()
    return int(fields[7]) / os.sysconf("SC_CLK_TCK")


def _spin(tb: Testbed, exe: Path, nranks: int, log: Path) -> dict:
    """``spin`` on ``nranks`` ranks (block placement): per-rank stretch and the nodes' throttling."""
    with open(log, "w") as fh:
        report = tb.run(["mpirun", "-np", str(nranks), str(exe), str(SPIN_STEP), str(SPIN_STEPS)], stdout=fh,
                        timeout=600)
    if report["exit_status"] != 0:
        raise RuntimeError(f"spin failed (status {report['exit_status']}): {log.read_text()[-2000:]}")
    return {**_stretch(log.read_text(), nranks, report["dilation"]), "wall_s": report["wall_s"],
            "throttled": [n["throttled"] for n in report["cpu"]]}


def _stretch(stdout: str, nranks: int, dilation: float, first: int = 0) -> dict:
    """Mean and largest stretch of ranks ``first``... (compute time / k over CPU time) and their mean CPU
    time [s]."""
    times = spin_times(stdout)
    if len(times) != nranks:
        raise RuntimeError(f"spin reported {len(times)} of {nranks} ranks: {stdout[-2000:]}")
    times = times[first:]
    stretch = [w / dilation / c for w, c in times]
    return {"stretch": statistics.mean(stretch), "stretch_max": max(stretch),
            "cpu_s": statistics.mean(c for _, c in times)}


def scaling(exe: Path, work: Path, repeats: int) -> list[dict]:
    """Spin on 1, 2, 4, 8 nodes × 2 cores, dilation auto and 1: median stretch of ``repeats`` runs."""
    rows = []
    for nodes in (1, 2, 4, 8):
        for dilation in ("auto", 1):
            runs = []
            for _ in range(repeats):
                with Testbed(nodes, 2, dilation=dilation) as tb:
                    runs.append({**_spin(tb, exe, 2 * nodes, work / "spin.out"),
                                 "load": os.getloadavg()[0]})
            best = sorted(runs, key=lambda r: r["stretch"])[(repeats - 1) // 2]
            rows.append({"nodes": nodes, "cores": 2, "dilation": tb.dilation, **best,
                         "stretch_all": [round(r["stretch"], 3) for r in runs]})
            print(f"scaling {nodes} x 2, k {tb.dilation:5.2f}: stretch {best['stretch']:.3f} "
                  f"(all {rows[-1]['stretch_all']}), load {best['load']:.1f}", flush=True)
    return rows


def loaded_transfer(exe: Path, work: Path, nodes: int, dilation: float | str, busy: bool,
                    bandwidth: float = 200e6) -> dict:
    """20 MB node000 -> node001 on ``nodes`` × 2 cores at ``bandwidth`` [bit/s] and ``dilation``; with
    ``busy``, spin ranks on every other emulated core meanwhile (the stretch of those on nodes 2... reported too)."""
    with Testbed(nodes, 2, bandwidth=bandwidth, dilation=dilation) as tb:
        soft, start = _softirq_s(), time.monotonic()
        if busy:
            hosts = ",".join(["node000:1", "node001:1", *(f"{n}:2" for n in tb.spec.node_names[2:])])
            lead = 1.0 + 0.3 * tb.dilation  # [s] until the ranks compute
            # steps (about 0.06 s of CPU each) to compute through the transfer and as long again after it
            steps = round((TRANSFER_BYTES * 8 / tb.spec.link_rate * 2 + lead) / tb.dilation / 0.06)
            log = work / "loaded.out"
            with open(log, "w") as fh:
                spinner = subprocess.Popen(tb.command_on("node000", [
                    "mpirun", "-np", str(2 * nodes - 2), "--host", hosts, str(exe), str(SPIN_STEP), str(steps)]),
                    env={**os.environ, **tb.environment}, stdout=fh)
                time.sleep(lead)
                rate = transfer(tb, TRANSFER_BYTES)
                spinner.wait(timeout=600)
            # ranks 0 and 1 share node000 and node001 with the transfer (and its waits): the others fill their
            # nodes (with 2 nodes there are no others)
            spun = _stretch(log.read_text(), 2 * nodes - 2, tb.dilation, first=2 if nodes > 2 else 0)
        else:
            rate, spun = transfer(tb, TRANSFER_BYTES), {}
        soft_cores = (_softirq_s() - soft) / (time.monotonic() - start)
    return {"nodes": nodes, "cores": 2, "dilation": tb.dilation, "busy": busy, "bandwidth_bit_s": bandwidth,
            "link_bit_s": tb.spec.link_rate,
            "rate_bit_s": rate, "share": rate / tb.spec.link_rate, "softirq_cores": soft_cores,
            "spin_stretch": spun.get("stretch"), "spin_stretch_max": spun.get("stretch_max"),
            "load": os.getloadavg()[0]}


def kernel_cost(rate: float) -> dict:
    """Soft-interrupt time [cores] during a 100 MB transfer between two undilated nodes at ``rate``
    [bit/s], less that of as long a spell without it just after: the links' work outside every quota."""
    with Testbed(2, 1, bandwidth=rate, dilation=1) as tb:
        transfer(tb, 1_000_000)  # the sender and receiver's files read, once
        soft, start = _softirq_s(), time.monotonic()
        measured = transfer(tb, 100_000_000)
        spell = time.monotonic() - start
        during = (_softirq_s() - soft) / spell
        soft = _softirq_s()
        time.sleep(spell)
        idle = (_softirq_s() - soft) / spell
    return {"link_bit_s": rate, "rate_bit_s": measured, "softirq_cores": during, "softirq_idle_cores": idle,
            "softirq_cores_per_gbit_s": (during - idle) / (measured / 1e9), "load": os.getloadavg()[0]}


def _median_by(runs: list[dict], key: str) -> dict:
    return {**sorted(runs, key=lambda r: r[key])[(len(runs) - 1) // 2], f"{key}_all": [round(r[key], 4) for r in runs]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=PARTS, help="what to measure (default all)")
    args = parser.parse_args()
    why = why_unavailable() or cpu.why_no_quota(cpu.controller())
    if why:
        sys.exit(f"bench_dilation: {why}")
    work = Path(tempfile.mkdtemp(prefix="perfkit-bench-dilation-"))
    exe = build_spin(work)
    # parts measured at different times are kept side by side: a run replaces only the parts it measures
    result = json.loads(args.out.read_text()) if args.out.exists() else {}
    result.update(machine_cores=machine_cores(), headroom_cores=HEADROOM_CORES, period_s=cpu.PERIOD_S,
                  network_cores_per_bit_s=NETWORK_CORES_PER_BIT_S)
    result.setdefault("runs", []).append({"parts": args.parts, "load_before": os.getloadavg()[0],
                                          "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())})
    for part in args.parts:
        result.pop(part, None)
    if "scaling" in args.parts:
        result["scaling"] = scaling(exe, work, args.repeats)
    for nodes, bandwidth in ((2, 200e6), (8, 200e6), (4, 1e9)) if "transfer" in args.parts else ():
        for busy in (False, True):
            row = _median_by([loaded_transfer(exe, work, nodes, "auto", busy, bandwidth)
                              for _ in range(args.repeats)], "share")
            result.setdefault("transfer", []).append(row)
            print(f"transfer {nodes} x 2, k {row['dilation']:.2f}, busy {busy}: {row['share']:.3f} of "
                  f"{row['link_bit_s'] / 1e6:.1f} Mbit/s, spin stretch {row['spin_stretch']}, load {row['load']:.1f}",
                  flush=True)
    for headroom in (0.0, 0.1, 0.25, 0.5) if "headroom" in args.parts else ():
        k = round(4 * 2 / (machine_cores() - headroom), 2)  # the ranks' cores only, the rest kept for the kernel
        row = _median_by([loaded_transfer(exe, work, 4, k, True) for _ in range(args.repeats)], "spin_stretch")
        result.setdefault("headroom", []).append({"headroom_cores": headroom, **row})
        print(f"headroom {headroom:.2f} (k {k:.2f}): spin stretch {row['spin_stretch']:.3f} (max "
              f"{row['spin_stretch_max']:.3f}), transfer {row['share']:.3f}, softirq {row['softirq_cores']:.3f} cores, "
              f"load {row['load']:.1f}", flush=True)
    for rate in (200e6, 1e9, 4e9) if "kernel" in args.parts else ():
        row = _median_by([kernel_cost(rate) for _ in range(args.repeats)], "softirq_cores_per_gbit_s")
        result.setdefault("kernel", []).append(row)
        print(f"kernel at {rate / 1e6:g} Mbit/s: {row['rate_bit_s'] / 1e6:.0f} Mbit/s, softirq "
              f"{row['softirq_cores']:.3f} cores (idle {row['softirq_idle_cores']:.3f}), "
              f"{row['softirq_cores_per_gbit_s']:.3f} cores per Gbit/s, load {row['load']:.1f}", flush=True)
    result["runs"][-1]["load_after"] = os.getloadavg()[0]
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
