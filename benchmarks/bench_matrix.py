"""Text matrix reading (MatrixMarket coordinate, dense CSV) against pandas on the same bytes.

``perfkit.io.matrix.read_matrix`` (the validating parser) and ``pandas.read_csv`` are called in
turn in one process (medians); peak memory is measured in a fresh interpreter for each
(``timing.peak_memory``) and given per byte of the file.

Run: .venv/bin/python benchmarks/bench_matrix.py  (writes benchmarks/results/matrix.json)
"""

from __future__ import annotations

import io
import json
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
from timing import alternating_medians, peak_memory

from perfkit.io.matrix import read_matrix

RESULTS = Path(__file__).parent / "results" / "matrix.json"
#: pandas' reading of each layout: the same bytes, whitespace or comma separated, '%' comments.
REFERENCE = {"mtx": {"sep": r"\s+", "comment": "%"}, "csv": {"sep": ","}, "txt": {"sep": r"\s+"}}


def write_mtx(path: Path, n: int, nnz: int, seed: int = 0) -> Path:
    """A coordinate MatrixMarket file of ``nnz`` distinct (i, j) entries, byte counts as values."""
    rng = np.random.default_rng(seed)
    flat = np.unique(rng.integers(0, n * n, int(nnz * 1.02)))[:nnz]
    rng.shuffle(flat)
    frame = pd.DataFrame({"i": flat // n + 1, "j": flat % n + 1, "v": rng.integers(1, 10**9, flat.size)})
    with open(path, "w") as fh:
        fh.write(f"%%MatrixMarket matrix coordinate real general\n% bytes sent\n{n} {n} {flat.size}\n")
        frame.to_csv(fh, sep=" ", header=False, index=False, lineterminator="\n")
    return path


def write_dense(path: Path, n: int, sep: str, seed: int = 0) -> Path:
    """A dense ``n`` x ``n`` matrix of byte counts, one row a line."""
    rng = np.random.default_rng(seed)
    values = np.where(rng.random((n, n)) < 0.5, rng.integers(1, 10**9, (n, n)), 0)
    pd.DataFrame(values).to_csv(path, sep=sep, header=False, index=False, lineterminator="\n")
    return path


def pandas_reference(path: Path) -> None:
    """pandas parsing the file's bytes as a table of numbers."""
    pd.read_csv(io.BytesIO(path.read_bytes()), header=None, **REFERENCE[path.suffix[1:]])


def measure(path: Path, small: Path) -> dict[str, float]:
    size = path.stat().st_size
    t = alternating_medians({"perfkit": lambda: read_matrix(path), "pandas": lambda: pandas_reference(path)}, 5)
    setup = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import sparse, scipy.sparse; "
             "from pathlib import Path; from perfkit.io.matrix import read_matrix; "
             f"from bench_matrix import pandas_reference; path, small = Path({str(path)!r}), Path({str(small)!r}); "
             "read_matrix(small); pandas_reference(small)")
    runs = {"perfkit": "read_matrix(path)", "pandas": "pandas_reference(path)"}
    memory = {f"{who}_{kind}_per_file": round(peak / size, 2)
              for who, statement in runs.items() for kind, peak in peak_memory(setup, statement).items()}
    return {"file_MB": round(size / 1e6, 1), "perfkit_s": round(t["perfkit"], 4), "pandas_s": round(t["pandas"], 4),
            "ratio": round(t["perfkit"] / t["pandas"], 2), **memory}


def main() -> None:
    out: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        cases = {
            "mtx_16384_ranks_1M_nonzeros": (write_mtx(folder / "big.mtx", 16384, 10**6),
                                            write_mtx(folder / "small.mtx", 8, 10)),
            "csv_dense_1024_comma": (write_dense(folder / "big.csv", 1024, ","),
                                     write_dense(folder / "small.csv", 8, ",")),
            "txt_dense_1024_spaces": (write_dense(folder / "big.txt", 1024, " "),
                                      write_dense(folder / "small.txt", 8, " ")),
        }
        for name, (path, small) in cases.items():
            out[name] = result = measure(path, small)
            print(f"{name} ({result['file_MB']} MB): perfkit {result['perfkit_s']:.3f} s, pandas "
                  f"{result['pandas_s']:.3f} s, ratio {result['ratio']} (target <= 1.5); peak memory / file size: "
                  f"perfkit {result['perfkit_rss_per_file']} (RSS), {result['perfkit_traced_per_file']} "
                  f"(tracemalloc), pandas {result['pandas_rss_per_file']} (RSS) (target <= 3)")
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
