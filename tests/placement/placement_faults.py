"""Functions that misbehave inside a worker process (loaded there by file path)."""

from __future__ import annotations

import ctypes
import os
import signal
import time


def segfault(*_args: object) -> None:
    ctypes.string_at(0)


def hang(*_args: object) -> None:
    time.sleep(600)


def kill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def sleep(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def fail(message: str) -> None:
    raise ValueError(message)


def echo(value: object) -> object:
    print("noise on stdout that must not corrupt the result")
    return value


def environment(name: str) -> str | None:
    return os.environ.get(name)
