"""Run ``perfkit`` commands in processes that can be killed at any moment, cheaply.

A warm process (``python -m tests.kill_harness``) imports perfkit once, runs a convert, an append and
a place to load every lazily imported module, then forks one child per command: the child runs
``perfkit.cli.main(argv)`` as the console script does (its own process, the default signal
dispositions, stdout and stderr to files) and exits with its status, so a kill costs only the work
done before it, not the 5 s of starting Python and importing perfkit under load. ``Forker`` drives it
over a pipe of JSON lines: ``start`` returns the child's pid (the test signals it directly), ``wait``
its status (``-N`` if signal N ended it, as ``subprocess`` reports).

Also: ``tree_hash`` (every file's relative path and bytes) and ``temporaries`` (what an interrupted
writer may leave).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"


def tree_hash(path: Path) -> str | None:
    """SHA-256 over every file under ``path`` (relative name and bytes; a file alone: its bytes); None if absent."""
    if not (path.exists() or path.is_symlink()):
        return None
    digest = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for file in files:
        digest.update(str(file.relative_to(path) if path.is_dir() else file.name).encode() + b"\0")
        digest.update(file.read_bytes() + b"\0")
    return digest.hexdigest()


def temporaries(folder: Path) -> list[Path]:
    """Temporaries of perfkit writers in ``folder``: ``.NAME.perfkit-tmp-<pid>[.old]``."""
    return sorted(folder.glob(".*.perfkit-tmp-*"))


class Forker:
    """The warm process, seen from the test."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.kill_harness"], cwd=ROOT, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, bufsize=1)
        ready = self.proc.stdout.readline()
        if json.loads(ready or "{}").get("ready") is not True:
            raise RuntimeError(f"kill harness did not start: {ready!r}")

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        self.proc.stdin.write(json.dumps(request) + "\n")
        return json.loads(self.proc.stdout.readline())

    def start(self, argv: list[str], out: Path, err: Path) -> int:
        """Fork a child running ``perfkit ARGV`` (stdout, stderr to ``out``, ``err``); its pid."""
        return int(self._ask({"op": "start", "argv": argv, "out": str(out), "err": str(err)})["pid"])

    def wait(self, pid: int) -> tuple[int, float]:
        """The child's exit status (``-N``: ended by signal N) and its wall time [s]."""
        answer = self._ask({"op": "wait", "pid": pid})
        return int(answer["status"]), float(answer["seconds"])

    def run(self, argv: list[str], out: Path, err: Path) -> tuple[int, float]:
        return self.wait(self.start(argv, out, err))

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def _child(argv: list[str], out: str, err: str) -> None:
    """In the forked child: run the command as the console script would, never return."""
    status = 1
    try:
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        for fd, name in ((1, out), (2, err)):
            os.dup2(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
        from perfkit.cli import main

        status = main(argv)
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else 1
    except KeyboardInterrupt:  # not caught by the command: die of SIGINT, as Python does
        traceback.print_exc()
        sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:
        traceback.print_exc()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)  # a signal after the command ended changes nothing
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


def _warm_up() -> None:
    """Run each command once here so that the children start with every module imported; then stop
    the threads that would not survive a fork (dask's pool)."""
    import dask.threaded

    from perfkit.cli import main

    with tempfile.TemporaryDirectory() as tmp:
        runs = sorted((DATA / "synthetic" / "48").glob("*.mpinside"))[:2]
        saved = {fd: os.dup(fd) for fd in (1, 2)}  # what the commands print is not the answer to the test
        for fd in saved:
            os.dup2(os.open(os.devnull, os.O_WRONLY), fd)
        try:
            main(["convert", str(runs[0]), "-o", f"{tmp}/a.zarr", "--workers", "1"])
            main(["convert", str(runs[1]), "-o", f"{tmp}/a.zarr", "--workers", "1", "--append"])
            main(["place", str(runs[0]), "--nodes", "2", "--ppn", "24", "-o", f"{tmp}/rankfile",
                  "--prediction", f"{tmp}/p.json"])
        finally:
            sys.stdout.flush()
            for fd, copy in saved.items():
                os.dup2(copy, fd)
    if dask.threaded.default_pool is not None:
        dask.threaded.default_pool.shutdown(wait=True)
        dask.threaded.default_pool = None
    dask.threaded.pools.clear()


def serve() -> None:
    """Answer ``start`` and ``wait`` requests on stdin, one JSON line each."""
    _warm_up()
    started: dict[int, float] = {}
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "start":
            pid = os.fork()
            if pid == 0:
                _child(request["argv"], request["out"], request["err"])
            started[pid] = time.perf_counter()
            print(json.dumps({"pid": pid}), flush=True)
        else:
            pid = request["pid"]
            _, code = os.waitpid(pid, 0)
            print(json.dumps({"status": os.waitstatus_to_exitcode(code),
                              "seconds": time.perf_counter() - started.pop(pid)}), flush=True)


if __name__ == "__main__":
    serve()
