"""Files that change or lie while they are read: truncated under the reader, cut inside a table,
oversized tokens, flipped bytes. Each is refused with a ``PerfkitFormatError`` naming the line."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tests.io.test_mpip_large import CLOVER_16, grow

ROOT = Path(__file__).resolve().parents[2]

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
