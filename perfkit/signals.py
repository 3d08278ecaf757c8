"""Stopping a command cleanly: SIGINT, SIGTERM and SIGHUP become ``KeyboardInterrupt``.

Inside ``stopping()`` the first of these signals raises ``KeyboardInterrupt(name)`` in the main
thread, so that ``finally`` blocks and context managers remove temporaries as the exception
unwinds; later ones are ignored until the block is left (cleaning up is not interrupted). The
command then reports it with ``stopped``: one line on stderr and the shell's status, 128 + the
signal's number (SIGINT 130, SIGTERM 143, SIGHUP 129).
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def stopping() -> Iterator[None]:
    """Turn SIGINT, SIGTERM and SIGHUP into ``KeyboardInterrupt(name)`` inside the block (main thread only)."""
    previous = {}

    def interrupt(signum: int, frame: FrameType | None) -> None:
        for sig in previous:  # the first signal stops; the clean-up that follows is not interrupted again
            signal.signal(sig, signal.SIG_IGN)
        raise KeyboardInterrupt(signal.Signals(signum).name)

    try:
        for sig in SIGNALS:
            previous[sig] = signal.signal(sig, interrupt)
    except ValueError:  # not the main thread: the caller handles signals
        pass
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def status(exc: KeyboardInterrupt) -> int:
    """The exit status for the signal that raised ``exc``: 128 + its number (a bare interrupt is SIGINT)."""
    name = str(exc) if str(exc) in signal.Signals.__members__ else "SIGINT"
    return 128 + signal.Signals[name].value


def stopped(command: str, exc: KeyboardInterrupt, what: str) -> int:
    """Print ``perfkit COMMAND: stopped by SIGNAME; WHAT`` on stderr and return the exit status."""
    name = str(exc) if str(exc) in signal.Signals.__members__ else "SIGINT"
    print(f"perfkit {command}: stopped by {name}; {what}", file=sys.stderr)
    return status(exc)
