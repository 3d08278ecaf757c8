"""Benchmark the IPM XML reader against a plain ``xml.etree.ElementTree.parse`` of the same bytes.

Runs are interleaved (reader, plain parse, defused parse) so that load from other processes hits
all of them alike; the median of the repeats is reported. Also records the reader's peak Python
memory (tracemalloc) relative to the file size, and, on synthetic 2-D halo jobs of 4,096 and 8,192
ranks, the time against ``ElementTree.parse`` and the peak memory (fresh interpreters,
``timing.peak_memory``) with the traffic matrix chosen by non-zeros (``perfkit.model.dense_traffic``)
and, for comparison, by the former rank-count rule (dense up to 4,096 ranks).
Writes ``benchmarks/results/ipm.json``.

Usage: python benchmarks/bench_ipm.py [--repeats N] [--file PATH]
"""

from __future__ import annotations

import argparse
import io
import json
import platform
import statistics
import tempfile
import time
import tracemalloc
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

from defusedxml.ElementTree import iterparse
from timing import alternating_medians, peak_memory

import perfkit
from perfkit.io import ipm

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "data" / "ipm" / "ipm-hpc-v2_pin1008.xml"
RESULTS = ROOT / "benchmarks" / "results" / "ipm.json"


def _seconds(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _defused_scan(data: bytes) -> None:
    """The parser alone: a streaming defusedxml pass that keeps nothing (the reader's floor)."""
    for _event, elem in iterparse(io.BytesIO(data)):
        if elem.tag == "task":
            elem.clear()


def _peak_memory(path: Path) -> int:
    """Peak traced Python memory while reading ``path`` [B]."""
    tracemalloc.start()
    try:
        ipm.read(path)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def run(path: Path = FIXTURE, repeats: int = 15) -> dict:
    """Median seconds of the reader and of the plain parses, their ratios, and peak memory."""
    data = path.read_bytes()
    ipm.read(path)  # warm imports and caches
    runs: dict[str, list[float]] = {"perfkit_read": [], "etree_parse": [], "defused_iterparse": []}
    for _ in range(repeats):
        runs["perfkit_read"].append(_seconds(lambda: ipm.read(path)))
        runs["etree_parse"].append(_seconds(lambda: ET.parse(io.BytesIO(data))))
        runs["defused_iterparse"].append(_seconds(lambda: _defused_scan(data)))
    median = {name: statistics.median(values) for name, values in runs.items()}
    peak = _peak_memory(path)
    return {
        "file": str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path),
        "file_bytes": len(data),
        "repeats": repeats,
        "median_seconds": median,
        "ratio_read_vs_etree": median["perfkit_read"] / median["etree_parse"],
        "ratio_defused_parse_vs_etree": median["defused_iterparse"] / median["etree_parse"],
        "target_ratio": 2.0,
        "peak_memory_bytes": peak,
        "peak_memory_vs_file_size": peak / len(data),
        "perfkit_version": perfkit.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }


def write_halo(path: Path, nranks: int) -> Path:
    """An IPM 2 log of a 2-D periodic halo exchange: every rank sends to and receives from 4 neighbours."""
    side = 64
    lines = ['<?xml version="1.0" encoding="iso-8859-1"?>', "<ipm_job_profile>"]
    for rank in range(nranks):
        row, col = divmod(rank, side)
        rows = nranks // side
        partners = sorted({((row + dr) % rows) * side + (col + dc) % side
                           for dr, dc in ((0, 1), (0, -1), (1, 0), (-1, 0))} - {rank})
        hents = [(call, code, p) for p in partners for call, code in (("MPI_Isend", 9), ("MPI_Irecv", 14))]
        lines += [f'<task ipm_version="2.0.6" mpi_rank="{rank}" mpi_size="{nranks}" >',
                  f'<job nhosts="{nranks // 32}" ntasks="{nranks}" >halo</job>',
                  f'<host mach_name="x" >node{rank // 32}</host>',
                  '<perf wtime="1.00000e+01" mtime="2.00000e+00" omp_num_threads="1"></perf>',
                  '<regions n="1" >',
                  '<region label="ipm_noregion" nexits="1" wtime="1.00000e+01" mtime="2.00000e+00" id="0">',
                  f'<func name="MPI_Isend" count="{100 * len(partners)}" bytes="{8192e2 * len(partners):.4e}" '
                  '> 1.0000e+00 </func>',
                  f'<func name="MPI_Irecv" count="{100 * len(partners)}" bytes="{8192e2 * len(partners):.4e}" '
                  '> 1.0000e+00 </func>',
                  "</region>", "</regions>", f'<hash nlog="{200 * len(partners)}" nkey="{len(hents)}" >']
        lines += [f'<hent key="{code << 54:016X}{(8192 << 32) | p:016X}" call="{call}" bytes="8192" orank="{p}" '
                  f'region="0" count="100" >{1 / len(partners):.4e} 0.0000e+00 {1 / len(partners):.4e}</hent>'
                  for call, code, p in hents]
        lines += ["</hash>", "</task>"]
    lines.append("</ipm_job_profile>")
    path.write_text("\n".join(lines) + "\n")
    return path


def large_jobs(repeats: int = 3) -> dict:
    """Time against ElementTree.parse and peak memory / file size at 4,096 and 8,192 ranks, both traffic rules."""
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        small = write_halo(Path(tmp) / "small.xml", 128)
        for nranks in (4096, 8192):
            path = write_halo(Path(tmp) / f"halo{nranks}.xml", nranks)
            size = path.stat().st_size
            t = alternating_medians({"perfkit": lambda p=path: ipm.read(p),
                                     "etree": lambda p=path: ET.parse(io.BytesIO(p.read_bytes()))}, repeats)
            # the small job read once with sparse and once with dense traffic: first-use costs (imports,
            # sparse's compiled kernels) belong to the baseline
            setup = ("import io, xml.etree.ElementTree as ET; from pathlib import Path; import sparse; "
                     f"from perfkit import model; from perfkit.io import ipm; path = Path({str(path)!r}); "
                     f"small = Path({str(small)!r}); model.DENSE_TRAFFIC_BYTES, limit = 0, model.DENSE_TRAFFIC_BYTES; "
                     "ipm.read(small); model.DENSE_TRAFFIC_BYTES = limit; ipm.read(small)")
            rank_rule = "ipm.dense_traffic = lambda nrank, nonzeros: nrank <= 4096; "
            peaks = {"nonzero_rule": peak_memory(setup, "ipm.read(path)"),
                     "rank_rule_before": peak_memory(setup + "; " + rank_rule, "ipm.read(path)"),
                     "etree_parse": peak_memory(setup, "ET.parse(io.BytesIO(path.read_bytes()))")}
            out[f"halo_{nranks}_ranks"] = {
                "file_MB": round(size / 1e6, 1), "perfkit_s": round(t["perfkit"], 3),
                "etree_s": round(t["etree"], 3), "ratio": round(t["perfkit"] / t["etree"], 2),
                "traffic": type(ipm.read(path)["traffic"].data).__name__,
                **{f"{name}_rss_MB": round(peak["rss"] / 1e6, 1) for name, peak in peaks.items()},
                **{f"{name}_rss_per_file": round(peak["rss"] / size, 2) for name, peak in peaks.items()},
            }
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--file", type=Path, default=FIXTURE)
    args = parser.parse_args(argv)
    result = run(args.file, args.repeats)
    result["large_jobs"] = large_jobs()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    med = result["median_seconds"]
    print(f"{result['file']} ({result['file_bytes'] / 1e6:.1f} MB), median of {result['repeats']}:")
    print(f"  perfkit ipm.read        {med['perfkit_read'] * 1e3:8.1f} ms")
    print(f"  ElementTree.parse       {med['etree_parse'] * 1e3:8.1f} ms")
    print(f"  defusedxml iterparse    {med['defused_iterparse'] * 1e3:8.1f} ms (parser alone)")
    print(f"  ratio read / parse      {result['ratio_read_vs_etree']:8.2f}x (target <= {result['target_ratio']}x)")
    print(f"  peak memory             {result['peak_memory_vs_file_size']:8.2f}x the file size")
    for name, job in result["large_jobs"].items():
        print(f"{name} ({job['file_MB']} MB): perfkit {job['perfkit_s']:.3f} s, ElementTree.parse "
              f"{job['etree_s']:.3f} s (ratio {job['ratio']}); traffic {job['traffic']}; "
              f"peak RSS {job['nonzero_rule_rss_MB']} MB "
              f"({job['nonzero_rule_rss_per_file']}x the file), with the rank-count rule "
              f"{job['rank_rule_before_rss_MB']} MB, ElementTree.parse {job['etree_parse_rss_MB']} MB")
    print(f"results written to {RESULTS.relative_to(ROOT)}")
    return result


if __name__ == "__main__":
    main()
