"""Mutation fuzzer for the perfkit readers: every reader, every mutated file, in a sandboxed child process.

Seeds are the real files of ``tests/data`` (and the bundled MPInside tables); each case is a seeded
mutation of one seed: byte flips, truncation, deleted or duplicated lines, a number replaced by a
huge / negative / NaN / inf / non-numeric token, encoding junk, a token replaced by 1-8 MB of text,
the file (mutated or not) gzip-, bzip2- or xz-compressed and sometimes cut short, and the intact file
truncated by a thread at a random moment while the reader reads it. For CUBE archives the members are
mutated and the archive rebuilt (and the raw archive bytes are mutated too). Each case runs in a
forked child of a worker process that has perfkit imported, under ``RLIMIT_AS`` (memory) and a wall
clock limit, so a segfault, a runaway allocation or a hang is an outcome, not a dead fuzzer.

Outcomes: ``accepted`` (read, and the result is sane), ``refused`` (a ``PerfkitFormatError`` naming
the file, or ``FileNotFoundError``/``PermissionError``), and the failures ``silent`` (read, but the
cube holds a value no profiler produces: ±inf, a negative time/byte/count, or fails ``validate``),
``foreign`` (any other exception type, or a ``PerfkitFormatError`` without ``.path``), ``noisy``
(read or refused, but a ``RuntimeWarning`` such as numpy's overflow was raised on the way: it would
reach the user's stderr), ``died`` (killed by a signal or non-zero exit) and ``timeout``.

    python tools/fuzz.py --cases 3000            # per format; prints a table, exits 1 on a failure
    python tools/fuzz.py --cases 200 --format mtx --seed 7 --keep /tmp/failures
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import re
import select
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
#: Memory ceiling of one case [B] (address space of the child, on top of the worker's own).
MEMORY_LIMIT = 2 * 1024**3
#: Wall-clock limit of one case [s].
TIME_LIMIT = 20.0
FAILURES = ("silent", "foreign", "noisy", "died", "timeout")

#: Tokens a corrupted number may become.
TOKENS = (
    "1e400", "-1e400", "99999999999999999999999", "18446744073709551617", "1e308", "-1", "-5.5", "-1e9",
    "NaN", "nan", "inf", "-inf", "Infinity", "+inf", "12abc", "1,5", "0x1F", "2.0E", "1e", "--", "",
    "1.2.3", "１２", "\u00a0", "-0", "4e9999",
)
JUNK = (b"\x00", b"\xff\xfe", b"\xef\xbb\xbf", b"\xc3\x28", b"\x80\x81", b"\x1b[31m", b"\r", b"\x0b", b"\xe9",
        b"\xf0\x9f\x92\xa9", b"\x7f", b"<", b"&", b"]]>")
NUMBER = re.compile(rb"(?<![\w.])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.])")


# --- seeds ----------------------------------------------------------------------------------------


def _seed_files() -> dict[str, list[Path]]:
    """Real files per reader format (small enough for many cases)."""
    mpip = sorted((DATA / "mpip").rglob("*.mpiP"))
    ipm = [p for p in sorted((DATA / "ipm").rglob("*.xml")) if p.stat().st_size < 200_000]
    cube = sorted((DATA / "cube").glob("*.cubex"))
    mpinside = [ROOT / "data" / "seed" / "mpinside_seed_tables.txt",
                ROOT / "data" / "synthetic" / "48" / "slt.mpinside"]
    csv = sorted((DATA / "matrices").glob("*.csv"))
    return {"mpinside": mpinside, "mpip": mpip, "ipm": ipm, "cube": cube, "csv": csv}


def matrix_seeds(directory: Path) -> dict[str, list[Path]]:
    """MatrixMarket, ``.npy`` and ``.npz`` versions of the real CSV matrices, written into ``directory``."""
    import numpy as np
    import scipy.io
    import scipy.sparse

    out: dict[str, list[Path]] = {"mtx": [], "npy": [], "npz": []}
    for k, csv in enumerate(sorted((DATA / "matrices").glob("*.csv"))[:4]):
        dense = np.loadtxt(csv, delimiter="," if b"," in csv.read_bytes()[:4096] else None)
        stem = directory / csv.stem
        coo = scipy.sparse.coo_matrix(dense)
        scipy.io.mmwrite(f"{stem}.general.mtx", coo, field="integer" if k % 2 else "real")
        sym = scipy.sparse.coo_matrix(dense + dense.T)
        scipy.io.mmwrite(f"{stem}.sym.mtx", sym, symmetry="symmetric")
        scipy.io.mmwrite(f"{stem}.array.mtx", dense[:16, :16])
        out["mtx"] += [Path(f"{stem}.general.mtx"), Path(f"{stem}.sym.mtx"), Path(f"{stem}.array.mtx")]
        np.save(f"{stem}.npy", dense)
        out["npy"].append(Path(f"{stem}.npy"))
        np.savez_compressed(f"{stem}.npz", bytes=dense)
        scipy.sparse.save_npz(f"{stem}.sparse.npz", scipy.sparse.csr_matrix(dense))
        out["npz"] += [Path(f"{stem}.npz"), Path(f"{stem}.sparse.npz")]
    return out


def seeds(directory: Path) -> dict[str, list[Path]]:
    """Every format's seed files (matrix seeds are written into ``directory``)."""
    return {**_seed_files(), **matrix_seeds(directory)}


# --- mutations ------------------------------------------------------------------------------------


def _lines(data: bytes) -> list[bytes]:
    return data.splitlines(keepends=True) or [data]


def flip_bytes(rng: random.Random, data: bytes) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        k = rng.randrange(len(buf))
        buf[k] = rng.randrange(256) if rng.random() < 0.5 else buf[k] ^ (1 << rng.randrange(8))
    return bytes(buf)


def truncate(rng: random.Random, data: bytes) -> bytes:
    return data[: rng.randrange(len(data))]


def delete_lines(rng: random.Random, data: bytes) -> bytes:
    lines = _lines(data)
    k = rng.randrange(len(lines))
    del lines[k: k + rng.choice((1, 1, 1, 2, 5))]
    return b"".join(lines)


def duplicate_lines(rng: random.Random, data: bytes) -> bytes:
    lines = _lines(data)
    k = rng.randrange(len(lines))
    n = rng.choice((1, 1, 2, 4))
    return b"".join(lines[: k + n] + lines[k: k + n] + lines[k + n:])


def replace_number(rng: random.Random, data: bytes) -> bytes:
    spans = [m.span() for m in NUMBER.finditer(data, 0, min(len(data), 4_000_000))]
    if not spans:
        return flip_bytes(rng, data)
    for _ in range(rng.choice((1, 1, 1, 3))):
        a, b = rng.choice(spans)
        token = rng.choice(TOKENS).encode()
        data = data[:a] + token + data[b:]
        delta = len(token) - (b - a)
        spans = [(x + delta, y + delta) if x > a else (x, y) for x, y in spans if (x, y) != (a, b)] or [(a, a)]
    return data


def encoding_junk(rng: random.Random, data: bytes) -> bytes:
    k = rng.randrange(len(data) + 1)
    if rng.random() < 0.2:
        return rng.choice(JUNK) + data  # a BOM or junk before everything
    return data[:k] + rng.choice(JUNK) * rng.choice((1, 1, 3)) + data[k:]


def oversized_token(rng: random.Random, data: bytes) -> bytes:
    """A token of the file (a name, a number, a header word) replaced by 1-8 MB of one letter."""
    tokens = [m.span() for m in re.finditer(rb"[A-Za-z_][\w.]*|\d+", data[: 1 << 20])]
    if not tokens:
        return data
    start, stop = rng.choice(tokens)
    return data[:start] + b"N" * rng.randint(1 << 20, 8 << 20) + data[stop:]


_PLAIN_MUTATIONS: dict[str, Callable[[random.Random, bytes], bytes]] = {
    "flip": flip_bytes, "truncate": truncate, "delete": delete_lines, "duplicate": duplicate_lines,
    "number": replace_number, "junk": encoding_junk, "token": oversized_token,
}


def compressed(rng: random.Random, data: bytes) -> bytes:
    """The file mutated otherwise (or not), then gzip-, bzip2- or xz-compressed; a quarter of them cut short."""
    import bz2
    import gzip
    import lzma

    if rng.random() < 0.7:
        data = _PLAIN_MUTATIONS[rng.choice(list(_PLAIN_MUTATIONS))](rng, data)
    packed = rng.choice((gzip.compress, bz2.compress, lzma.compress))(data)
    return packed[: rng.randrange(1, len(packed))] if rng.random() < 0.25 else packed


def untouched(rng: random.Random, data: bytes) -> bytes:
    """The file as it is: ``generate`` names it so that ``run_case`` truncates it while it is read."""
    return data


#: A case whose file name holds this is truncated by a thread of the case while the reader reads it.
CUT_WHILE_READ = "-cut-while-read"

MUTATIONS: dict[str, Callable[[random.Random, bytes], bytes]] = {
    **_PLAIN_MUTATIONS, "compressed": compressed, "cut-while-read": untouched,
}


def mutate_archive(rng: random.Random, data: bytes, how: str) -> bytes:
    """A CUBE archive with one member mutated (``anchor.xml`` mostly), rebuilt as a tar archive."""
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers() if m.isfile()]
    anchors = [k for k, (m, _) in enumerate(members) if m.name == "anchor.xml"]
    k = anchors[0] if anchors and rng.random() < 0.6 else rng.randrange(len(members))
    _, body = members[k]
    body = MUTATIONS[how](rng, body) if body else body
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for j, (m, b) in enumerate(members):
            b = body if j == k else b
            info = tarfile.TarInfo(m.name)
            info.size = len(b)
            tar.addfile(info, io.BytesIO(b))
    return out.getvalue()


@dataclass
class Case:
    """One mutated file: its format, seed, mutation and where it was written."""

    fmt: str
    seed: str
    mutation: str
    path: Path


def generate(seed_files: dict[str, list[Path]], cases: int, directory: Path, seed: int = 0,
             formats: list[str] | None = None) -> list[Case]:
    """``cases`` mutated files per format, written into ``directory`` (deterministic for ``seed``)."""
    out: list[Case] = []
    for fmt, files in seed_files.items():
        if formats and fmt not in formats:
            continue
        rng = random.Random(f"{seed}:{fmt}")
        contents = [(p, p.read_bytes()) for p in files]
        for n in range(cases):
            src, data = rng.choice(contents)
            how = rng.choice(list(MUTATIONS))
            if fmt == "cube" and rng.random() < 0.7:
                mutated, label = mutate_archive(rng, data, how), f"member-{how}"
            else:
                mutated, label = MUTATIONS[how](rng, data), how
            cut = CUT_WHILE_READ if how == "cut-while-read" else ""
            path = directory / fmt / f"{n:05d}{cut}{src.suffix}"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(mutated)
            out.append(Case(fmt, src.name, label, path))
    return out


# --- hostile files ----------------------------------------------------------------------------------

HOSTILE = DATA / "hostile"
#: Formats whose hostile files must be refused with a line number (IPM names the XML element instead).
TEXT_FORMATS = ("mpinside", "mpip", "csv", "mtx")


@dataclass
class Hostile:
    """A hand-made hostile file: its name, the reader format, the path, whether a line must be named."""

    name: str
    fmt: str
    path: Path
    needs_line: bool


def _gzip_of_zeros(size: int) -> bytes:
    """A gzip stream that inflates to ``size`` zero bytes, built in milliseconds (repeated flushed blocks)."""
    import zlib

    block = bytes(1 << 20)
    comp = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    first = comp.compress(block) + comp.flush(zlib.Z_FULL_FLUSH)
    again = comp.compress(block) + comp.flush(zlib.Z_FULL_FLUSH)
    return first + again * (size // len(block) - 1) + comp.flush()  # trailer CRC is wrong: never reached


def _tar(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, body in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    return out.getvalue()


def hostile_files(directory: Path) -> list[Hostile]:
    """The stored ``tests/data/hostile`` files and the large ones built here (bombs, huge declared sizes)."""
    cases = []
    for path in sorted(HOSTILE.iterdir()):
        if "__" not in path.name:
            continue
        fmt = path.name.split("__")[0]
        cases.append(Hostile(path.stem, fmt, path, fmt in TEXT_FORMATS))
    directory.mkdir(parents=True, exist_ok=True)
    kripke = DATA / "cube" / "pycubexr_kripke.p8.d2.g32.r1.profile.cubex"
    with tarfile.open(kripke) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    built: dict[str, tuple[str, bytes, bool]] = {
        # anchor.xml inflating to 6 GiB from 6 MB
        "cube__anchor_bomb.cubex": ("cube", _tar({**members, "anchor.xml": _gzip_of_zeros(6 << 30)}), False),
        # a .tar.gz whose tar inflates to 6 GiB, read as format="cube"
        "cube__targz_bomb.cubex": ("cube", _gzip_of_zeros(6 << 30), False),
        # a rank of 2**64 + 1
        "cube__rank_2_64_plus_1.cubex": ("cube", _tar({**members, "anchor.xml": re.sub(
            rb"<rank>\s*0\s*</rank>", b"<rank>18446744073709551617</rank>", members["anchor.xml"], count=1)}), True),
        # a dense CSV whose first row has 200,000 columns (a 320 GB matrix)
        "csv__first_row_200000_columns.csv": ("csv", b"0," * 199_999 + b"0\n0,0\n", True),
    }
    for name, (fmt, data, needs_line) in built.items():
        path = directory / name
        path.write_bytes(data)
        cases.append(Hostile(Path(name).stem, fmt, path, needs_line))
    # 1 GiB of junk after a valid mpiP header (a sparse file: no disk used)
    path = directory / "mpip__1gib_junk_after_header.mpiP"
    header = (DATA / "mpip" / "userguide" / "v3.5_report.mpiP").read_bytes()[:1500]
    with open(path, "wb") as fh:
        fh.write(header)
        fh.truncate(1 << 30)
    cases.append(Hostile(path.stem, "mpip", path, False))
    return cases


# --- the sandbox ----------------------------------------------------------------------------------

_WORKER = r"""
import json, os, resource, signal, sys, time, warnings
import numpy as np
sys.path.insert(0, sys.argv[1])
from tools.fuzz import run_case
import perfkit, perfkit.io.open, perfkit.io.matrix, perfkit.io.cube, perfkit.io.ipm, perfkit.io.mpip
import perfkit.io.mpinside, perfkit.model, scipy.io, scipy.sparse, sparse, pycubexr, defusedxml.ElementTree
import tarfile, gzip, zipfile
limit, timeout = int(sys.argv[2]), float(sys.argv[3])
print("ready", flush=True)
for line in sys.stdin:
    job = json.loads(line)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        code = 0
        try:
            with open("/proc/self/statm") as fh:
                base = int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
            resource.setrlimit(resource.RLIMIT_AS, (base + limit, base + limit))
            result = run_case(job["path"], job["fmt"])
        except BaseException as exc:  # the harness itself must answer
            result = {"outcome": "foreign", "type": type(exc).__name__, "message": str(exc)[:300]}
        os.write(w, json.dumps(result).encode()[:60000])
        os._exit(code)
    os.close(w)
    start = time.monotonic()
    status = None
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() - start > timeout:
            os.kill(pid, signal.SIGKILL)
            _, status, usage = os.wait4(pid, 0)
            status = "timeout"
            break
        time.sleep(0.002)
    payload = b""
    while chunk := os.read(r, 65536):
        payload += chunk
    os.close(r)
    if status == "timeout":
        result = {"outcome": "timeout"}
    elif os.WIFSIGNALED(status):
        result = {"outcome": "died", "type": signal.Signals(os.WTERMSIG(status)).name}
    elif not payload:
        result = {"outcome": "died", "type": f"exit {os.WEXITSTATUS(status)}"}
    else:
        result = json.loads(payload)
    result["seconds"] = time.monotonic() - start
    result["maxrss"] = usage.ru_maxrss * 1024
    print(json.dumps(result), flush=True)
"""


def _sane(ds: Any) -> str | None:
    """Why a dataset a reader returned holds a value no profiler produces, or None."""
    import numpy as np

    from perfkit.errors import ContractError
    from perfkit.model import validate

    try:
        validate(ds)
    except ContractError as exc:
        return f"validate: {exc}"
    for name in ("profile", "traffic", "sizes"):
        if name not in ds:
            continue
        data = ds[name].data
        values = np.asarray(getattr(data, "data", data) if type(data).__name__ == "COO" else data, dtype=np.float64)
        if np.isinf(values).any():
            return f"{name} holds ±inf"
        if (values < 0).any():
            return f"{name} holds a negative value ({np.nanmin(values):g})"
    if "size_bin" in ds.coords:
        bins = np.asarray(ds["size_bin"].values, dtype=np.float64)
        if not np.isfinite(bins).all() or (bins < 0).any():
            return "size_bin holds a non-finite or negative bin"
    for coord in ("nprocs", "nodes", "ppn", "threads", "elapsed"):
        if coord in ds.coords:
            v = np.asarray(ds[coord].values, dtype=np.float64)
            if np.isinf(v).any() or (v < 0).any():
                return f"run coordinate {coord} = {v.tolist()}"
    return None


def run_case(path: str, fmt: str) -> dict[str, Any]:
    """Read one file with the reader of ``fmt``; classify what happened (runs inside the sandbox)."""
    import warnings

    if CUT_WHILE_READ in Path(path).name:  # another process cuts the file short while it is read
        import threading

        rng = random.Random(path)
        size = os.path.getsize(path)
        threading.Timer(rng.uniform(0.0, 0.05), os.truncate, (path, rng.randrange(size // 8, size))).start()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = _read_case(path, fmt)
    noise = next((w for w in caught if issubclass(w.category, RuntimeWarning)), None)
    if noise is not None:
        return {"outcome": "noisy", "type": noise.category.__name__, "message": f"{noise.message} "
                f"({Path(noise.filename).name}:{noise.lineno}; then {result['outcome']})"[:300]}
    return result


def _read_case(path: str, fmt: str) -> dict[str, Any]:
    """The outcome of reading ``path`` as ``fmt``: accepted, refused, silent or foreign."""
    from perfkit.errors import PerfkitFormatError

    try:
        if fmt in ("csv", "mtx", "npy", "npz"):
            from perfkit.io.matrix import matrix_to_dataset, open_matrix

            ds = matrix_to_dataset(open_matrix(path, fmt=fmt))
        else:
            from perfkit.io.open import open_profile

            ds = open_profile(path, format=fmt)
    except PerfkitFormatError as exc:
        if exc.path is None:
            return {"outcome": "foreign", "type": "PerfkitFormatError without path", "message": str(exc)[:300]}
        return {"outcome": "refused", "type": type(exc).__name__, "line": exc.line,
                "member": getattr(exc, "member", None), "message": str(exc)[:300]}
    except (FileNotFoundError, PermissionError) as exc:
        return {"outcome": "refused", "type": type(exc).__name__, "message": str(exc)[:300]}
    except BaseException as exc:
        return {"outcome": "foreign", "type": type(exc).__name__, "message": str(exc)[:300]}
    why = _sane(ds)
    if why:
        return {"outcome": "silent", "type": "accepted", "message": why[:300]}
    return {"outcome": "accepted"}


@dataclass
class Sandbox:
    """A worker process with perfkit imported; each case runs in a fork of it under limits."""

    memory: int = MEMORY_LIMIT
    timeout: float = TIME_LIMIT
    proc: subprocess.Popen | None = field(default=None, init=False)

    def __enter__(self) -> Sandbox:
        self._start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()

    def _start(self) -> None:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
               "PYTHONWARNINGS": "ignore"}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(ROOT), str(self.memory), str(self.timeout)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True,
        )
        self.proc.stdin.write(json.dumps({"path": str(DATA / "mpip" / "userguide" / "v3.5_report.mpiP"),
                                          "fmt": "mpip"}) + "\n")  # import every reader once
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "ready"
        self.proc.stdout.readline()

    def run(self, path: Path, fmt: str) -> dict[str, Any]:
        """The outcome of reading ``path`` as ``fmt`` (a dict with ``outcome``, ``type``, ``message``)."""
        assert self.proc is not None and self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"path": str(path), "fmt": fmt}) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], self.timeout + 30)
        line = self.proc.stdout.readline() if ready else ""
        if not line:  # the worker itself is gone: restart it
            self.proc.kill()
            self.proc.wait()
            self._start()
            return {"outcome": "died", "type": "worker"}
        return json.loads(line)


# --- the driver -----------------------------------------------------------------------------------


def run_cases(cases: list[Case], sandbox: Sandbox) -> Iterator[tuple[Case, dict[str, Any]]]:
    """Each case with its outcome."""
    for case in cases:
        yield case, sandbox.run(case.path, case.fmt)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=300, help="mutated files per format")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--format", action="append", help="only this format (repeatable)")
    parser.add_argument("--timeout", type=float, default=TIME_LIMIT, help="seconds per case")
    parser.add_argument("--memory", type=float, default=MEMORY_LIMIT / 1024**3, help="GiB per case")
    parser.add_argument("--keep", type=Path, help="copy failing files into this folder")
    parser.add_argument("--hostile", action="store_true", help="only the hostile files, with their peak memory")
    args = parser.parse_args(argv)
    if args.hostile:
        return _run_hostile(args)
    counts: dict[str, Counter[str]] = {}
    kinds: Counter[tuple[str, str, str]] = Counter()
    peak: dict[str, int] = {}
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp, Sandbox(int(args.memory * 1024**3), args.timeout) as box:
        cases = generate(seeds(Path(tmp)), args.cases, Path(tmp) / "cases", args.seed, args.format)
        for case, result in run_cases(cases, box):
            counts.setdefault(case.fmt, Counter())[result["outcome"]] += 1
            peak[case.fmt] = max(peak.get(case.fmt, 0), result.get("maxrss", 0))
            if result["outcome"] in FAILURES:
                kinds[(case.fmt, result["outcome"], result.get("type", ""))] += 1
                print(f"{result['outcome']:8} {case.fmt:8} {case.seed} {case.mutation}: {result.get('type', '')} "
                      f"{result.get('message', '')[:160]}", file=sys.stderr)
                if args.keep:
                    args.keep.mkdir(parents=True, exist_ok=True)
                    target = args.keep / f"{case.fmt}-{case.path.stem}-{case.mutation}{case.path.suffix}"
                    target.write_bytes(case.path.read_bytes())
    outcomes = ("accepted", "refused", *FAILURES)
    print(f"{'format':10}" + "".join(f"{o:>10}" for o in outcomes) + f"{'peak MiB':>10}")
    for fmt, c in counts.items():
        print(f"{fmt:10}" + "".join(f"{c[o]:>10}" for o in outcomes) + f"{peak[fmt] / 2**20:>10.0f}")
    total = sum(counts.values(), Counter())
    print(f"{'total':10}" + "".join(f"{total[o]:>10}" for o in outcomes) +
          f"   ({sum(total.values())} cases, {time.monotonic() - start:.0f} s)")
    for (fmt, outcome, kind), n in sorted(kinds.items()):
        print(f"  {n:5} {outcome} {fmt}: {kind}")
    return 1 if any(total[o] for o in FAILURES) else 0


def _run_hostile(args: argparse.Namespace) -> int:
    failed = 0
    with tempfile.TemporaryDirectory() as tmp, Sandbox(int(args.memory * 1024**3), args.timeout) as box:
        for case in hostile_files(Path(tmp)):
            result = box.run(case.path, case.fmt)
            ok = result["outcome"] == "refused" and (result.get("line") is not None or not case.needs_line)
            failed += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {case.name:42} {result['outcome']:8} "
                  f"peak {result['maxrss'] / 2**20:6.0f} MiB {result['seconds']:5.2f} s  "
                  f"{result.get('type', '')}: {result.get('message', '')[:110]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
