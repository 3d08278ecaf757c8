"""Files that change or lie while they are read: truncated under the reader, cut inside a table,
oversized tokens, flipped bytes. Each is refused with a ``PerfkitFormatError`` naming the line."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import perfkit
from perfkit.errors import PerfkitFormatError
from tests.io.test_mpip_large import CLOVER_16, grow

ROOT = Path(__file__).resolve().parents[2]
MPINSIDE = ROOT / "data" / "synthetic" / "192" / "basic.mpinside"
IPM = next((ROOT / "tests" / "data" / "ipm").rglob("*.xml"))

#: A child (a SIGBUS kills it, not pytest) that reads ``big`` while a thread truncates it at random points.
TRUNCATING_READER = textwrap.dedent("""
    import os, random, shutil, sys, threading, time
    from perfkit.errors import PerfkitFormatError
    from perfkit.io import mpip

    big, path, tries = sys.argv[1], sys.argv[2], int(sys.argv[3])
    shutil.copyfile(big, path)
    start = time.perf_counter()
    mpip.read(path)
    whole = time.perf_counter() - start  # one read of the intact copy [s]
    size, rng = os.path.getsize(big), random.Random(23)
    refused = read = 0
    for k in range(tries):
        shutil.copyfile(big, path)
        at = rng.randrange(size // 8, size - 1)
        if k % 4 == 0:  # cut before the read: refused, naming the line
            os.truncate(path, at)
        cut = threading.Timer(rng.uniform(0.0, whole), os.truncate, (path, at))
        cut.start()
        try:
            mpip.read(path)
            read += 1
        except PerfkitFormatError as exc:
            said = str(exc)
            assert "\\n" not in said and path in said and ("truncated at line" in said or "changed while" in said)
            refused += 1
        cut.join()
    print(read, refused)
""")


def test_a_report_truncated_while_it_is_read_is_refused_not_a_sigbus(tmp_path: Path) -> None:
    big = tmp_path / "big.mpiP"
    big.write_text("\n".join(grow(CLOVER_16, 32)) + "\n")
    assert big.stat().st_size > 1 << 20  # the size the reader once mapped instead of reading
    done = subprocess.run([sys.executable, "-c", TRUNCATING_READER, str(big), str(tmp_path / "cut.mpiP"), "12"],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])  # -7: killed by SIGBUS
    read, refused = map(int, done.stdout.split())
    assert read + refused == 12 and refused >= 3


def _cut_at_line(source: Path, target: Path, line: int) -> int:
    """``target`` holds the first ``line`` lines of ``source`` (the last one cut in its middle); its line count."""
    lines = source.read_bytes().split(b"\n")
    target.write_bytes(b"\n".join([*lines[:line - 1], lines[line - 1][: len(lines[line - 1]) // 2]]))
    return line


@pytest.mark.parametrize("cut", ["rows", "between"])
def test_an_mpinside_file_cut_inside_its_size_tables_is_refused_naming_the_line(tmp_path: Path, cut: str) -> None:
    lines = MPINSIDE.read_text().split("\n")
    at = next(k for k, text in enumerate(lines) if "Rank 100 Sizes distribution" in text) + 1  # its header line
    path = tmp_path / "cut.mpinside"
    if cut == "rows":  # inside rank 100's table, at a line end: every row whole
        path.write_text("\n".join(lines[: at + 4]) + "\n")
        line = at + 4
    else:  # just before rank 100's second table
        path.write_text("\n".join(lines[: at + 12]) + "\n")
        line = at + 12
    assert perfkit.open_profile(MPINSIDE)["sizes"].notnull().any()  # the whole file reads
    with pytest.raises(PerfkitFormatError, match=f"truncated at line {line}: the file ends inside the size") as err:
        perfkit.open_profile(path)
    assert err.value.line == line and "\n" not in str(err.value)


def test_an_ipm_log_cut_short_is_named_truncated_at_its_last_line(tmp_path: Path) -> None:
    path = tmp_path / "cut.xml"
    line = _cut_at_line(IPM, path, 40)
    with pytest.raises(PerfkitFormatError, match=f"truncated at line {line}: ") as err:
        perfkit.open_profile(path, format="ipm")
    assert err.value.line == line


def test_a_5_mb_token_is_refused_in_one_short_line(tmp_path: Path) -> None:
    lines = CLOVER_16.read_text().split("\n")
    i = next(k for k, text in enumerate(lines) if text.startswith("@--- Callsite Time statistics")) + 2
    lines[i] = lines[i].replace("Name", "N" * 5_000_000, 1)
    path = tmp_path / "token.mpiP"
    path.write_text("\n".join(lines))
    with pytest.raises(PerfkitFormatError, match=f"line {i + 1} is longer than 65,536 bytes") as err:
        perfkit.open_profile(path)
    assert err.value.line == i + 1 and len(str(err.value)) < 300 and "\n" not in str(err.value)


@pytest.mark.parametrize("byte", [b"\xe9", b"\xc3\xa9", b"\x00", b"@"])
def test_a_flipped_byte_in_an_mpip_function_name_is_refused_naming_the_line(tmp_path: Path, byte: bytes) -> None:
    lines = CLOVER_16.read_bytes().split(b"\n")
    i = next(k for k, text in enumerate(lines) if text.startswith(b"@--- Callsite Time statistics")) + 4
    name = lines[i].split()[0]
    lines[i] = lines[i].replace(name, name[:2] + byte + name[3:], 1)
    path = tmp_path / "flipped.mpiP"
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(PerfkitFormatError, match="expected an MPI function name") as err:
        perfkit.open_profile(path)
    assert err.value.line == i + 1 and "\n" not in str(err.value)
