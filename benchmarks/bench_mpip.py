"""mpiP reader speed: the largest fixture vs ``pandas.read_fwf`` of its call-site time section,
and ``open_runs`` over 1,000 report copies. Writes ``benchmarks/results/mpip.json``.

Run: ``python benchmarks/bench_mpip.py [--files 1000] [--repeats 15]``.
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import tempfile
import time
from pathlib import Path

import pandas as pd
from timing import median_seconds

import perfkit
from perfkit.io import mpip

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = sorted((ROOT / "tests" / "data" / "mpip" / "real").glob("*/*/*.mpiP"))
RESULTS = ROOT / "benchmarks" / "results" / "mpip.json"



def callsite_time_bytes(path: Path) -> bytes:
    """The column header and rows of the "Callsite Time statistics" section."""
    lines = path.read_bytes().splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith(b"@--- Callsite Time statistics")) + 2
    stop = next(i for i in range(start, len(lines)) if lines[i].startswith(b"-----"))
    return b"".join(lines[start:stop])


def bench_single(repeats: int) -> dict[str, object]:
    """Reader vs read_fwf of the section bytes, on the largest fixture."""
    path = max(FIXTURES, key=lambda p: p.stat().st_size)
    section = callsite_time_bytes(path)
    reader = median_seconds(lambda: mpip.read(path), repeats)
    fwf = median_seconds(lambda: pd.read_fwf(io.BytesIO(section)), repeats)
    return {"file": str(path.relative_to(ROOT)), "bytes": path.stat().st_size, "read_s": reader,
            "read_fwf_section_s": fwf, "ratio": reader / fwf}


def bench_many(n_files: int) -> dict[str, object]:
    """``open_runs`` over ``n_files`` copies of the fixtures in a temporary directory [files/s]."""
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for i in range(n_files):
            src = FIXTURES[i % len(FIXTURES)]
            dst = Path(tmp) / f"run{i:05d}.mpiP"
            shutil.copyfile(src, dst)
            paths.append(dst)
        start = time.perf_counter()
        ds = perfkit.open_runs(paths, format="mpip", progress=False)
        seconds = time.perf_counter() - start
    return {"files": n_files, "seconds": seconds, "files_per_s": n_files / seconds, "runs": int(ds.sizes["run"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    results = {"single": bench_single(args.repeats), "open_runs": bench_many(args.files)}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    single, many = results["single"], results["open_runs"]
    print(f"read {single['file']}: {single['read_s'] * 1e3:.1f} ms; read_fwf of its call-site section: "
          f"{single['read_fwf_section_s'] * 1e3:.1f} ms; ratio {single['ratio']:.2f} (target <= 2)")
    print(f"open_runs over {many['files']} files: {many['seconds']:.1f} s, {many['files_per_s']:.1f} files/s")


if __name__ == "__main__":
    main()
