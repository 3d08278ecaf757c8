"""Stopping a command cleanly: SIGINT, SIGTERM and SIGHUP become ``KeyboardInterrupt``.

Inside ``stopping()`` the first of these signals raises ``KeyboardInterrupt(name)`` in the main
thread, so that ``finally`` blocks and context managers remove temporaries as the exception
unwinds; later ones are ignored until the block is left (cleaning up is not interrupted). The
command then reports it: one line on stderr and the shell's status, 128 + the
signal's number (SIGINT 130, SIGTERM 143, SIGHUP 129); ``run`` does both.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_held: list[str] | None = None  # inside ``deferred()``: the signals received, raised at its end
#: Inside ``stopping()``, once its interrupt was raised: raises it again (for a stop Python swallowed).
_again: Callable[[], None] | None = None
#: Whether a signal has stopped this process's work: the ``perfkit`` command's unraisable hook then prints no
#: finalizer's failure of what the stop cut short (as soon as the signal came, not once it has unwound).
_stopped = False


@contextmanager
def stopping() -> Iterator[None]:
    """Turn SIGINT, SIGTERM and SIGHUP into ``KeyboardInterrupt(name)`` inside the block (main thread only)."""
    global _again
    previous = {}

    def interrupt(signum: int, frame: FrameType | None) -> None:
        for sig in previous:  # the first signal stops; the clean-up that follows is not interrupted again
            signal.signal(sig, signal.SIG_IGN)
        if _held is not None:
            _held.append(signal.Signals(signum).name)
            return
        raise _stop(signum, interrupt)

    try:
        for sig in SIGNALS:
            previous[sig] = signal.signal(sig, interrupt)
    except ValueError:  # not the main thread: the caller handles signals
        pass
    try:
        yield
    finally:
        _again = None
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def deferred() -> Iterator[None]:
    """Inside ``stopping()``, a signal received in the block is raised when the block ends: a write that
    other threads carry out (zarr's I/O loop, dask's pool) is never cut short, to go on writing after its
    temporary was removed. Keep the block to one bounded write (one run, one batch)."""
    global _held
    if _held is not None or threading.current_thread() is not threading.main_thread():
        yield
        return
    _held = []
    try:
        yield
    finally:
        held, _held = _held, None
        if held:
            raise KeyboardInterrupt(held[0])


@contextmanager
def ignored_by_children() -> Iterator[None]:
    """Processes started inside the block ignore SIGINT, SIGTERM and SIGHUP (an ignored disposition survives
    ``exec``, and Python then keeps it): a pool's readers leave stopping to this process, which shuts them
    down, instead of each dying with a traceback of its own at Ctrl-C. This process ignores them too while
    the block runs (keep it to starting the processes: a signal then is lost, the next one stops). They are
    not blocked: a blocked mask would be inherited by every thread started in the block (a pool's manager
    and feeder threads, a library's workers) and by every process those threads start later, which would
    then never see a Ctrl-C. Main thread only (else a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def quiet_start() -> None:
    """When this process is the ``perfkit`` command, let Ctrl-C before the command runs (while Python
    imports perfkit and its libraries, seconds on a loaded machine) end it with one line on stderr and
    status 130 instead of a traceback. Called when this module is imported, first thing in ``import perfkit``;
    a no-op in any other
    process (a notebook, a test), whose SIGINT handling is left alone. ``perfkit.cli.main`` takes over."""
    if not _is_command() or not _is_main_thread():
        return
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _stopped_while_starting)
    sys.unraisablehook = _interrupt_where_it_can_stop(sys.unraisablehook)


def _interrupt_where_it_can_stop(
        hook: Callable[[sys.UnraisableHookArgs], object]) -> Callable[[sys.UnraisableHookArgs], None]:
    """``hook`` but for a Ctrl-C that came while Python ran a callback it cannot raise from (an import lock's
    clean-up, a ``__del__``): Python would print "Exception ignored ... KeyboardInterrupt" and go on. The
    signal is raised again instead, to stop the command where ``perfkit.cli.main`` reports it in one line;
    inside ``stopping()`` (whose handler ignores the signals that follow) its interrupt is raised again."""

    def unraisable(args: sys.UnraisableHookArgs) -> None:
        if isinstance(args.exc_value, KeyboardInterrupt) and _is_main_thread():
            if _again is not None:
                _again()
                return
            if signal.getsignal(signal.SIGINT) in (signal.default_int_handler, _stopped_while_starting, _stop_once):
                signal.raise_signal(signal.SIGINT)
                return
        if _stopped:  # a finalizer of what the stop cut short (an event loop stopped while being made): not printed
            return
        hook(args)

    return unraisable


def _is_command() -> bool:
    """Whether this process is the ``perfkit`` console script (not a notebook, a test or a library user)."""
    return os.path.basename(getattr(sys.modules.get("__main__"), "__file__", None) or "") == "perfkit"


def _is_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _stopped_while_starting(signum: int, frame: FrameType | None) -> None:
    """Nothing is written yet: end at once (no import is left half-done to unwind with a traceback)."""
    os.write(2, b"perfkit: stopped by SIGINT while starting\n")
    os._exit(status("SIGINT"))


def started() -> None:
    """The command line runs: SIGINT is a ``KeyboardInterrupt`` again (``perfkit.cli.main`` reports it), the
    signals that follow it ignored (:func:`_stop_once`)."""
    if _is_main_thread() and signal.getsignal(signal.SIGINT) is _stopped_while_starting:
        signal.signal(signal.SIGINT, _stop_once)


def _stop_once(signum: int, frame: FrameType | None) -> None:
    """The command's first stop: ``KeyboardInterrupt``, and the signals that follow ignored from this moment (a second
    Ctrl-C while the first one unwinds, before ``perfkit.cli.main`` could call :func:`ignore_further`, interrupted
    its report with a traceback); if Python swallows this one, the command's hook raises it again (``_again``)."""
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    raise _stop(signum, _stop_once)


def _stop(signum: int, handler: Callable[[int, FrameType | None], None]) -> KeyboardInterrupt:
    """The stop by ``signum`` that ``handler`` raises, kept (``_again``) for the command's hook to raise again, with
    ``handler`` back in place, if Python swallows it."""
    global _again, _stopped
    _again = lambda: (signal.signal(signum, handler), signal.raise_signal(signum))  # noqa: E731
    _stopped = _stopped or _is_command()  # the command's process ends stopped; another (a notebook) goes on
    return KeyboardInterrupt(signal.Signals(signum).name)


def ignore_further() -> None:
    """Stopped by a signal: the ones that follow (a second Ctrl-C) are ignored while the command says so and
    exits, so it ends with its status, not killed by SIGINT at Python's shutdown. Only in the ``perfkit``
    command's main thread: a process that called ``perfkit.cli.main`` keeps its own handling."""
    if _is_command() and _is_main_thread():
        for sig in SIGNALS:
            signal.signal(sig, signal.SIG_IGN)


def status(name: str) -> int:
    """The exit status for the signal ``name``: 128 + its number."""
    return 128 + signal.Signals[name].value


def run(command: str, body: Callable[[], int], fate: Callable[[], str]) -> int:
    """``body()`` inside ``stopping()``; if a signal stops it, print ``perfkit COMMAND: stopped by SIGNAME;
    FATE`` (``fate()``, called once the temporaries are removed) on stderr, then each note the interrupt
    carries on a line of its own, and return 128 + its number.

    What the signal interrupted is released quietly: zarr's coroutines cut short warn "never awaited", and an
    object cut short while being made (an event loop without its self-pipe yet) fails in its finalizer, which
    the command's unraisable hook no longer prints from the moment the signal came (``_stopped``)."""
    with warnings.catch_warnings():
        with stopping():
            try:
                return body()
            except KeyboardInterrupt as exc:
                warnings.filterwarnings("ignore", "coroutine .* was never awaited", RuntimeWarning)
                name = str(exc) if str(exc) in signal.Signals.__members__ else "SIGINT"
                notes = list(getattr(exc, "__notes__", ()))
        gc.collect()
    print(f"perfkit {command}: stopped by {name}; {fate()}", file=sys.stderr)
    for note in notes:  # what the stopping found (e.g. the collect watchdog's report), a line each
        print(f"perfkit {command}: {note}", file=sys.stderr)
    return status(name)


quiet_start()  # at import, before ``perfkit`` imports its libraries
