"""Give freed memory back to the operating system while a trace is read.

The reader frees many arrays of a few hundred kilobytes (a batch's temporaries, a rank's tables once
copied into the records). glibc keeps such blocks in its heap for reuse, so the process's resident
memory stays at its high-water mark even when later, larger arrays (allocated apart, with ``mmap``)
could not reuse them. ``malloc_trim`` returns every whole free page of the heap to the system. On a
C library without it (not glibc), nothing is done.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import cache


@cache
def _trim() -> object | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None


def give_back() -> None:
    """Return the free pages of the C heap to the operating system (glibc's ``malloc_trim(0)``)."""
    trim = _trim()
    if trim is not None:
        trim(0)
