"""Record lab runs traced across the testbed's nodes into data/lab/traces/ for the course (root only).

Usage: python tools/bundle_lab_traces.py

Each scenario runs on 8 ranks of an emulated 4-node cluster (2 cores per node, 200 Mbit/s links)
whose nodes' monotonic clocks read 2 s apart (``Testbed(clock_skew=2)``), under ``perfkit collect
--slt --collective-wait --matrices --trace``. Kept per scenario: the profile (MPInside text), its OTF2
archive, the ranks' compute intervals as the program recorded them (``.compute.<rank>``: start and end
[s], put on one clock with the injected offsets), and the lab's truth of that very run
(``.realised.truth.nc``) and of its parameters (``.truth.nc``).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import numpy as np

from perfkit.collect import lab
from perfkit.collect.testbed import Testbed
from perfkit.collect.testbed.collector import collect_on

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "data" / "lab" / "traces"
NODES, CORES, SKEW, NPROCS = 4, 2, 2, 8
#: scenario -> parameters: steps long enough that a late rank stands out of the machine's noise
SCENARIOS = {
    "dynamic_imbalance": {"steps": 8, "step_seconds": 0.04, "extra_seconds": 0.04},
    "pipeline": {"steps": 4, "step_seconds": 0.02},
    "collective_imbalance": {"steps": 8, "step_seconds": 0.02, "extra_seconds": 0.04, "root_extra_seconds": 0.02},
}


def main() -> None:
    TARGET.mkdir(parents=True, exist_ok=True)
    recorded = {}
    with tempfile.TemporaryDirectory() as tmp, Testbed(NODES, CORES, clock_skew=SKEW) as tb:
        for scenario, params in SCENARIOS.items():
            run = lab.run(scenario, NPROCS, workdir=tmp, timeout=300, trace=True, collector=collect_on(tb),
                          clock_offsets=tb.clock_offsets(), **params)
            if run.path is None or run.trace is None:
                raise SystemExit(f"{scenario}: {run.message}")
            name = run.path.name
            for suffix in ("", ".truth.nc", ".realised.truth.nc"):
                shutil.copy(run.path.with_name(name + suffix), TARGET / (name + suffix))
            offsets = tb.clock_offsets()  # the recorded compute intervals, on one clock
            hosts = [str(h) for h in run.profile["host"].isel(run=0).values]
            record = run.path.with_suffix(".compute")
            for rank, host in enumerate(hosts):
                rows = np.loadtxt(f"{record}.{rank}", ndmin=2) - offsets[host]
                np.savetxt(TARGET / f"{record.name}.{rank}", rows, fmt="%.9f")
            if (TARGET / (name + ".otf2")).exists():
                shutil.rmtree(TARGET / (name + ".otf2"))
            shutil.copytree(run.trace, TARGET / (name + ".otf2"))
            recorded[name] = {"scenario": scenario, "parameters": dict(run.params), "nprocs": NPROCS,
                              "nodes": NODES, "cores": CORES, "clock_skew_s": SKEW}
            print(f"{name}: {run.message.splitlines()[0]}")
    (TARGET / "runs.json").write_text(json.dumps(recorded, indent=1) + "\n")


if __name__ == "__main__":
    main()
