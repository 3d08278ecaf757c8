"""The lab's exchange program with compute that needs a core (``programs/spin_compute.c``), for ground-truth
runs of predictions on the testbed when ranks outnumber the machine's cores."""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

from perfkit.collect.build import cache_dir, compiler, wrapper_configuration
from perfkit.collect.lab.build import PROGRAMS

SOURCES = (PROGRAMS / "exchange.c", Path(__file__).with_name("programs") / "spin_compute.c")


def busy_exchange_binary(late_factor: float = 1.0) -> Path:
    """``exchange`` whose ``step=S`` is S seconds of CPU work per step (a spin; rank 0's ``late_factor`` times
    more), built with ``$MPICC`` (else mpicc) once per source, factor and compiler version."""
    cc = compiler("c")
    flags = ["-O2", f"-DPK_LATE_FACTOR={late_factor!r}"]
    digest = hashlib.sha256(repr((cc, flags, wrapper_configuration(cc))).encode())
    for source in SOURCES:
        digest.update(source.read_bytes())
    target = cache_dir() / "lab" / digest.hexdigest()[:20] / "busy_exchange"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        out = Path(tmp) / target.name
        done = subprocess.run([*cc, *flags, "-o", str(out), *map(str, SOURCES)], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"building {target.name} failed:\n{done.stdout}{done.stderr}")
        os.replace(out, target)  # atomic: concurrent builders leave one complete file
    return target
