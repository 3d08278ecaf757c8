"""Benchmark the IPM XML reader against a plain ``xml.etree.ElementTree.parse`` of the same bytes.

Runs are interleaved (reader, plain parse, defused parse) so that load from other processes hits
all of them alike; the median of the repeats is reported. Also records the reader's peak Python
memory (tracemalloc) relative to the file size. Writes ``benchmarks/results/ipm.json``.

Usage: python benchmarks/bench_ipm.py [--repeats N] [--file PATH]
"""

from __future__ import annotations

import argparse
import io
import json
import platform
import statistics
import time
import tracemalloc
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

from defusedxml.ElementTree import iterparse

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


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--file", type=Path, default=FIXTURE)
    args = parser.parse_args(argv)
    result = run(args.file, args.repeats)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    med = result["median_seconds"]
    print(f"{result['file']} ({result['file_bytes'] / 1e6:.1f} MB), median of {result['repeats']}:")
    print(f"  perfkit ipm.read        {med['perfkit_read'] * 1e3:8.1f} ms")
    print(f"  ElementTree.parse       {med['etree_parse'] * 1e3:8.1f} ms")
    print(f"  defusedxml iterparse    {med['defused_iterparse'] * 1e3:8.1f} ms (parser alone)")
    print(f"  ratio read / parse      {result['ratio_read_vs_etree']:8.2f}x (target <= {result['target_ratio']}x)")
    print(f"  peak memory             {result['peak_memory_vs_file_size']:8.2f}x the file size")
    print(f"results written to {RESULTS.relative_to(ROOT)}")
    return result


if __name__ == "__main__":
    main()
