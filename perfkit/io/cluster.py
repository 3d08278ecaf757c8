"""The active ``dask.distributed`` client, when there is one (readers, ``convert`` and the lazy analyses use it)."""

from __future__ import annotations

import sys
from typing import Any


def active_client() -> Any | None:
    """The client of the current ``dask.distributed`` session, or None (no session, or distributed not installed).

    A session needs ``distributed`` imported: when it is not, there is none (and importing it to ask, 0.4 s,
    is skipped)."""
    if "distributed" not in sys.modules:
        return None
    try:
        from distributed import get_client

        return get_client()
    except (ImportError, ValueError):
        return None
