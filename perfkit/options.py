"""Settable limits that keep a hostile or oversized file from eating the machine.

``max_bytes`` [B] is the most memory a reader may commit to one file for what the file declares or
inflates to: a declared matrix, an archive member after decompression, a text file held decoded.
A file that needs more is refused with a ``PerfkitFormatError`` that names the setting; raise it
for legitimately huge inputs with ``perfkit.set_options(max_bytes=16 * 2**30)`` or the environment
variable ``PERFKIT_MAX_BYTES``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: Default ceiling [B] for what one file may make a reader allocate or inflate.
DEFAULT_MAX_BYTES = 1 << 30

_OPTIONS: dict[str, Any] = {"max_bytes": int(os.environ.get("PERFKIT_MAX_BYTES", DEFAULT_MAX_BYTES))}


def get_options() -> dict[str, Any]:
    """A copy of the current options."""
    return dict(_OPTIONS)


def max_bytes() -> int:
    """The current memory ceiling per file [B]."""
    return int(_OPTIONS["max_bytes"])


@contextmanager
def _restore(previous: dict[str, Any]) -> Iterator[None]:
    try:
        yield
    finally:
        _OPTIONS.update(previous)


def set_options(*, max_bytes: int | None = None) -> Any:
    """Set options; also usable as a context manager that restores the previous values on exit.

    ``max_bytes`` [B] must be a positive integer.
    """
    previous = get_options()
    if max_bytes is not None:
        if int(max_bytes) <= 0:
            raise ValueError(f"max_bytes must be a positive number of bytes, got {max_bytes!r}")
        _OPTIONS["max_bytes"] = int(max_bytes)
    return _restore(previous)


def too_big(needed: float, what: str) -> str | None:
    """The refusal message when ``needed`` [B] exceeds ``max_bytes``, else None."""
    limit = max_bytes()
    if needed <= limit:
        return None
    return (f"{what} needs {needed / 2**20:,.0f} MiB, more than the limit of {limit / 2**20:,.0f} MiB "
            "(raise it with perfkit.set_options(max_bytes=...) or PERFKIT_MAX_BYTES)")
