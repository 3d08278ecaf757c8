"""mpiP reader speed and memory against pandas on the same bytes. Writes ``benchmarks/results/mpip.json``.

* ``large``: 8,192- and 32,768-rank reports made by repeating the ranks of the largest real report
  (``replicate``): the reader against ``pandas.read_csv(sep=r"\\s+")`` of the per-rank sections it
  consumes (task assignment, MPI Time, the call-site time and bytes statistics), alternated in
  this process (median of ``--repeats``), and the reader's peak resident memory over its
  baseline after one small read, in a fresh process (``timing.peak_memory``), against the file
  size. Targets: ratio <= 1.5, memory <= 3x.
* ``single``: the largest real report against ``read_fwf`` of its call-site time section.
* ``open_runs``: ``open_runs`` over ``--files`` copies of the real reports.

Run: ``python benchmarks/bench_mpip.py [--files 1000] [--repeats 7] [--ranks 8192 32768]``.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import shutil
import tempfile
import time
from pathlib import Path

import pandas as pd
from timing import alternating_medians, median_seconds, peak_memory

import perfkit
from perfkit.io import mpip

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = sorted((ROOT / "tests" / "data" / "mpip" / "real").glob("*/*/*.mpiP"))
LARGEST = max(FIXTURES, key=lambda p: p.stat().st_size)
RESULTS = ROOT / "benchmarks" / "results" / "mpip.json"
#: Headings of the per-rank sections the reader consumes (and pandas parses in the reference).
PER_RANK = ("@--- MPI Time", "@--- Callsite Time statistics (all,", "@--- Callsite Message Sent statistics (all,",
            "@--- Callsite I/O statistics (all,", "@--- Callsite RMA statistics (all,")

_SITE_ROW = re.compile(r"^(\s*\S+\s+\S+\s+)(\S+)(.*)$")  # name, site | rank | rest
_TASK_ROW = re.compile(r"^(\s*)(\S+)(.*)$")  # | rank | rest


def replicate(path: Path, copies: int) -> bytes:
    """The report at ``path`` with its ranks repeated ``copies`` times, a valid mpiP report.

    Rank r of copy k is r + k * nranks: the task assignment, MPI Time rows and call-site
    statistics rows are copied with the new rank; ``*`` rows count ``copies`` times the calls and
    bytes with the same per-call statistics, the MPI Time ``*`` row sums the new ranks, and the
    top-twenty Aggregate Time / Sent tables scale likewise (other sections are kept as they are).
    """
    lines = path.read_text().splitlines()
    nranks = sum(line.startswith("@ MPI Task Assignment") for line in lines)
    site_ms = {(f[0], f[1]): int(f[3]) * float(f[5]) for f in map(str.split, lines) if len(f) == 9 and f[2] == "*"}
    out: list[str] = []
    group: list[str] = []
    section, seen_columns = "", False

    def copy_group() -> None:
        row = _TASK_ROW if section.startswith("@--- MPI Time") else _SITE_ROW
        for k in range(copies):
            for text in group:
                head, rank, rest = row.match(text).groups()
                out.append(head + str(int(rank) + k * nranks).rjust(len(rank)) + rest)
        group.clear()

    for line in lines:
        fields = line.split()
        if line.startswith("@ MPI Task Assignment"):
            key, _, value = line.partition(":")
            rank, host = value.split()
            if int(rank) == nranks - 1:
                out += [f"{key}: {r} {host}" for r in range(nranks * copies)]
        elif line.startswith("@---"):
            section, seen_columns = line, False
            counted = re.match(r"(@--- Callsite Time statistics \(all, milliseconds\): )(\d+)(.*)", line)
            out.append(f"{counted[1]}{int(counted[2]) * copies}{counted[3]}" if counted else line)
        elif not fields or line.startswith("-----") or not seen_columns:
            copy_group()
            seen_columns = seen_columns or (bool(fields) and not line.startswith("-----"))
            out.append(line)
        elif section.startswith(PER_RANK[0]) and fields[0] == "*":
            app, mpi = (copies * sum(float(text.split()[c]) for text in group) for c in (1, 2))
            copy_group()
            out.append(f"   * {app:10.6g} {mpi:10.6g} {fields[3]:>8}")
        elif section.startswith(PER_RANK) and not section.startswith(PER_RANK[0]) and fields[2] == "*":
            copy_group()
            fields[3] = str(int(fields[3]) * copies)
            if len(fields) == 8:  # bytes tables: Sum
                fields[7] = f"{float(fields[7]) * copies:.6g}"
            out.append(" ".join(fields))
        elif section.startswith(PER_RANK):
            group.append(line)
        elif section.startswith("@--- Aggregate Time"):
            fields[2] = f"{site_ms[(fields[0], fields[1])] * copies:.3g}"
            if len(fields) > 5:
                fields[5] = str(int(fields[5]) * copies)
            out.append(" ".join(fields))
        elif section.startswith("@--- Aggregate Sent"):
            fields[2], fields[3] = str(int(fields[2]) * copies), f"{float(fields[3]) * copies:.3g}"
            out.append(" ".join(fields))
        else:
            out.append(line)
    copy_group()
    return ("\n".join(out) + "\n").encode()


def per_rank_sections(data: bytes) -> list[bytes]:
    """The bytes pandas parses in the reference: the task assignment lines, then each per-rank
    section from its column header to the rule line that closes it."""
    lines = data.splitlines(keepends=True)
    blocks = [b"".join(line for line in lines if line.startswith(b"@ MPI Task Assignment"))]
    for i, line in enumerate(lines):
        if line.startswith(tuple(h.encode() for h in PER_RANK)):
            stop = next(j for j in range(i + 2, len(lines)) if lines[j].startswith(b"-----"))
            blocks.append(b"".join(lines[i + 2:stop]))
    return blocks


def pandas_reference(blocks: list[bytes]) -> None:
    """``pandas.read_csv`` of every per-rank section (column header included), as pandas infers it."""
    for block in blocks:
        pd.read_csv(io.BytesIO(block), sep=r"\s+", header=0 if not block.startswith(b"@") else None)


def bench_large(nranks: int, repeats: int, directory: Path) -> dict[str, object]:
    """Reader vs pandas on the same per-rank sections, alternated; peak memory in a fresh process."""
    source_ranks = int(mpip.read(LARGEST)["nprocs"][0])
    path = directory / f"replicated_{nranks}.mpiP"
    path.write_bytes(replicate(LARGEST, nranks // source_ranks))
    blocks = per_rank_sections(path.read_bytes())
    ds = mpip.read(path)
    assert ds.sizes["rank"] == nranks, ds.sizes
    times = alternating_medians({"read": lambda: mpip.read(path), "pandas": lambda: pandas_reference(blocks)},
                                repeats)
    setup = f"from pathlib import Path\nfrom perfkit.io import mpip\nmpip.read(Path({str(FIXTURES[0])!r}))"
    peak = peak_memory(setup, f"mpip.read(Path({str(path)!r}))")["rss"]
    size = path.stat().st_size
    return {"ranks": nranks, "source": str(LARGEST.relative_to(ROOT)), "file_MB": round(size / 1e6, 1),
            "sections_MB": round(sum(map(len, blocks)) / 1e6, 1), "read_s": round(times["read"], 3),
            "pandas_s": round(times["pandas"], 3), "ratio": round(times["read"] / times["pandas"], 2),
            "repeats": repeats, "peak_MB": round(peak / 1e6, 1), "peak_over_file": round(peak / size, 2),
            "dataset_MB": round(ds.nbytes / 1e6, 1)}


def callsite_time_bytes(path: Path) -> bytes:
    """The column header and rows of the "Callsite Time statistics" section."""
    lines = path.read_bytes().splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith(b"@--- Callsite Time statistics")) + 2
    stop = next(i for i in range(start, len(lines)) if lines[i].startswith(b"-----"))
    return b"".join(lines[start:stop])


def bench_single(repeats: int) -> dict[str, object]:
    """Reader vs read_fwf of the section bytes, on the largest fixture."""
    section = callsite_time_bytes(LARGEST)
    reader = median_seconds(lambda: mpip.read(LARGEST), repeats)
    fwf = median_seconds(lambda: pd.read_fwf(io.BytesIO(section)), repeats)
    return {"file": str(LARGEST.relative_to(ROOT)), "bytes": LARGEST.stat().st_size, "read_s": reader,
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
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--ranks", type=int, nargs="*", default=[8192, 32768])
    args = parser.parse_args()
    results: dict[str, object] = {"large": []}
    with tempfile.TemporaryDirectory() as tmp:
        for nranks in args.ranks:
            row = bench_large(nranks, args.repeats, Path(tmp))
            results["large"].append(row)
            print(f"{nranks} ranks ({row['file_MB']} MB): read {row['read_s']} s, pandas on the same sections "
                  f"{row['pandas_s']} s, ratio {row['ratio']} (target <= 1.5); peak {row['peak_MB']} MB = "
                  f"{row['peak_over_file']} x the file (target <= 3)")
    results["single"] = single = bench_single(3 * args.repeats)
    results["open_runs"] = many = bench_many(args.files)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"read {single['file']}: {single['read_s'] * 1e3:.1f} ms; read_fwf of its call-site section: "
          f"{single['read_fwf_section_s'] * 1e3:.1f} ms; ratio {single['ratio']:.2f}")
    print(f"open_runs over {many['files']} files: {many['seconds']:.1f} s, {many['files_per_s']:.1f} files/s")


if __name__ == "__main__":
    main()
