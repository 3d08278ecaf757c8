"""Run a function in a separate, killable Python process (a crash or hang there cannot take the caller down).

The worker is a fresh isolated interpreter (``python -I``) started with ``subprocess``: it works
from Jupyter, from scripts without an ``if __name__ == "__main__"`` guard and from the command
line alike, and starts fast because it loads only the file that defines the function (not the
perfkit package). The module path, function name and arguments go over stdin as a pickle; the
result comes back over the worker's original stdout, while anything printed to stdout there (C
libraries included) is redirected to stderr, whose last lines are kept for error messages.

The worker dies with its caller however the caller ends (a killed or restarted Jupyter kernel
leaves no orphan under PID 1): the kernel's parent-death signal (``PR_SET_PDEATHSIG``, Linux;
it fires when the thread that started the worker ends, and that thread waits for the worker), and
a thread in the worker that exits as soon as its parent pid changes (any POSIX system).
"""

from __future__ import annotations

import inspect
import os
import pickle
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from typing import Any

_BOOT = """
import importlib.util, os, pickle, sys
# Die with the parent, whatever kills it (SIGKILL included): the kernel's parent-death signal on
# Linux, and a thread watching the parent pid (also catches a parent that died before prctl ran).
parent = int(sys.argv[1])
try:
    import ctypes, signal
    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
except (OSError, AttributeError):
    pass
if os.getppid() != parent:
    os._exit(70)
def _watch_parent():
    import time
    while os.getppid() == parent:
        time.sleep(0.25)
    os._exit(70)
import threading
threading.Thread(target=_watch_parent, name="perfkit-parent-watch", daemon=True).start()
result_stream = os.fdopen(os.dup(1), "wb")
os.dup2(2, 1)
sys.stdout = sys.stderr
path, name, args = pickle.load(sys.stdin.buffer)
spec = importlib.util.spec_from_file_location("_perfkit_worker_task", path)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
try:
    result = ("ok", getattr(module, name)(*args))
except BaseException as exc:
    result = ("error", f"{type(exc).__name__}: {exc}")
pickle.dump(result, result_stream, protocol=pickle.HIGHEST_PROTOCOL)
result_stream.close()
"""


class WorkerError(RuntimeError):
    """The worker process crashed or raised; the message says which and why."""


class WorkerTimeout(WorkerError, TimeoutError):
    """The worker did not finish within its time limit and was killed."""


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def run_isolated(
    func: Callable[..., Any],
    *args: Any,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
) -> Any:
    """Return ``func(*args)`` computed in a fresh Python process.

    ``func`` must be a top-level function of a module file that imports without perfkit, and
    ``args`` plain picklable data (numbers, tuples, numpy arrays). ``env`` is added to the
    worker's environment. Raises ``WorkerTimeout`` after ``timeout`` seconds and
    ``WorkerError`` if the worker dies (segfault, abort, kill) or ``func`` raises. The worker is
    killed on every exit path, including ``KeyboardInterrupt`` in the caller.
    """
    path = inspect.getsourcefile(func) if inspect.isfunction(func) else None
    if path is None or func.__qualname__ != func.__name__:
        raise ValueError(f"{func!r} is not a top-level function defined in a Python file")
    name = func.__name__
    payload = pickle.dumps((path, name, args), protocol=pickle.HIGHEST_PROTOCOL)
    proc = subprocess.Popen(
        [sys.executable, "-I", "-c", _BOOT, str(os.getpid())],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )
    try:
        out, err = proc.communicate(payload, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise WorkerTimeout(f"worker running {name} exceeded {timeout:g} s and was killed") from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    tail = err.decode(errors="replace").strip().splitlines()[-5:]
    detail = ("; stderr: " + " | ".join(tail)) if tail else ""
    if proc.returncode != 0 or not out:
        raise WorkerError(f"worker running {name} died ({_describe_exit(proc.returncode)}){detail}")
    status, value = pickle.loads(out)
    if status == "error":
        raise WorkerError(f"worker running {name} failed: {value}")
    return value
