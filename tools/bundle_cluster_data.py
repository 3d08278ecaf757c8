"""Copy closed loops recorded by benchmarks/bench_closed_loop.py into data/cluster/ for the course.

Usage: python tools/bundle_cluster_data.py KEEP_DIR   (the bench's --keep folder; its results JSON
is benchmarks/results/closed_loop.json). Each chosen case becomes a folder with the profile of the
run before (block placement), each launch file, each re-run's profile, the exchange pattern, and
loop.json: what was predicted and measured (link counters, elapsed from MPI_Init to MPI_Finalize).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "closed_loop.json"
#: folder in the bench's --keep dir -> name in data/cluster
CHOSEN = {"p0": "stencil2d-shuffled", "p6": "stencil2d-shuffled-leaf-switches", "n0": "network-x4"}
KEYS = ("case", "nodes", "cores", "bandwidth_bit_s", "switch_size", "strategy", "k", "elapsed_before_measured",
        "elapsed_predicted", "elapsed_low", "elapsed_high", "elapsed_measured", "elapsed_error_pct", "in_interval",
        "bytes_predicted", "bytes_measured", "bytes_error_pct", "loop_before_s", "loop_after_s", "load_average",
        "elapsed_before_all", "elapsed_after_all")


def main(keep: Path) -> None:
    rows = json.loads(RESULTS.read_text())["rows"]
    table: list[str] = []
    for folder, name in CHOSEN.items():
        source, target = keep / folder, ROOT / "data" / "cluster" / name
        mine = [r for r in rows if Path(r["profiles"][0]).parent == source]
        if not mine:
            raise SystemExit(f"no rows of {source} in {RESULTS}")
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        shutil.copy(source / "before.mpinside", target / "before.mpinside")
        shutil.copy(keep / f"{folder}.txt", target / "pattern.txt")
        out = []
        for row in mine:
            after = Path(row["profiles"][1])
            shutil.copy(after, target / after.name)
            entry = {k: row[k] for k in KEYS if k in row}
            entry["after"] = after.name
            launch = source / f"{row['strategy']}.rankfile"
            if launch.exists():
                shutil.copy(launch, target / launch.name)
                entry["launch_file"] = launch.name
            out.append(entry)
        (target / "loop.json").write_text(json.dumps(out, indent=1) + "\n")
        table.extend(_line(name, entry) for entry in out)
        print(f"{target}: {len(out)} re-run(s)")
    (ROOT / "data" / "cluster" / "README.md").write_text(README.format(table="\n".join(table)))


def _line(folder: str, r: dict) -> str:
    change = f"links x{r['k']:g}" if "k" in r else f"{r['strategy']} (`{r.get('launch_file', '')}`)"
    return (f"| `{folder}` | {r['nodes']} x {r['cores']}, {r['bandwidth_bit_s'] / 1e6:g} Mbit/s"
            f"{', leaf switches of ' + str(r['switch_size']) if r['switch_size'] else ''} | {change} | "
            f"{r['bytes_predicted'] / 1e6:.1f} / {r['bytes_measured'] / 1e6:.1f} MB | "
            f"{r['elapsed_before_measured']:.2f} s | {r['elapsed_predicted']:.2f} s "
            f"[{r['elapsed_low']:.2f}, {r['elapsed_high']:.2f}] | {r['elapsed_measured']:.2f} s |")


README = """# Closed loops recorded on the testbed

Measured, not synthetic: the lab's exchange program (`perfkit.collect.lab.build.exchange_binary`, a
bulk-synchronous step of 20 ms compute, then every rank sends its messages of `pattern.txt` and
waits for its own; 15 steps after one warm-up step) run on `perfkit testbed` (8 emulated nodes of 2
cores, each node's link shaped to the rate given; Open MPI), profiled by `perfkit collect
--matrices` under block placement (`before.mpinside`), placed with `perfkit place`, predicted, and
re-run with the rankfile (`<strategy>.rankfile` -> `<strategy>.mpinside`), or re-run on links k
times faster (`after.mpinside`). Every profile and re-run was run three times and the run with the
median elapsed time is the one kept here (`elapsed_before_all`, `elapsed_after_all`: all three).
`loop.json` holds, per re-run, what was predicted and measured: inter-node bytes measured by the
kernel's counters of the nodes' links less the frames' headers, elapsed time from the end of
MPI_Init to the start of MPI_Finalize by the profiles. Notebook `05_placement.ipynb` section 7 reads
them; `tests/placement/test_network_prediction.py` checks them.

| folder | testbed | change | inter-node bytes predicted / measured | elapsed before | predicted [interval] | measured |
|---|---|---|---|---|---|---|
{table}

Recorded on a 2-core machine shared with other work (load average in `loop.json`). Regenerate
(root; the whole grid of `docs/placement.md` takes about 10 minutes):

```bash
python benchmarks/bench_closed_loop.py --keep /tmp/loops
python tools/bundle_cluster_data.py /tmp/loops
```

The same loop by hand, for one case:

```bash
perfkit testbed --nodes 8 --cores 2 --bandwidth 200mbit --report before.json -- \\
    perfkit collect --matrices -o before.mpinside -- mpirun -np 16 EXCHANGE pattern.txt steps=15 step=0.02
perfkit place before.mpinside --nodes 8 --ppn 2 --strategy scotch -o scotch.rankfile \\
    --prediction prediction.json --bandwidth 200mbit
perfkit testbed --nodes 8 --cores 2 --bandwidth 200mbit --report after.json -- \\
    perfkit collect --matrices -o scotch.mpinside -- \\
    mpirun -np 16 --rankfile scotch.rankfile EXCHANGE pattern.txt steps=15 step=0.02
```

where `EXCHANGE` is `python -c "from perfkit.collect.lab.build import exchange_binary; print(exchange_binary())"`.
`perfkit loop --nodes 8 --cores 2 --bandwidth 200mbit --strategy scotch round_robin --runs 3 -o loop/ --
EXCHANGE pattern.txt steps=15 step=0.02` does all of it, three runs of each, and writes `loop/loop.json`.
"""


if __name__ == "__main__":
    main(Path(sys.argv[1]))
