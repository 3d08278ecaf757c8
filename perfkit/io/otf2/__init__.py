"""OTF2 trace reader: ``perfkit.open_profile("…/traces.otf2")`` or ``xr.open_dataset(..., engine="otf2")``.

``definitions`` reads ranks, communicators and regions; ``events`` streams each rank's events into
per-region sums and per-message records; ``waits`` computes Scalasca's wait states from the
records; ``reader`` builds the canonical Dataset.
"""

from perfkit.io.otf2.reader import read, sniff

__all__ = ["read", "sniff"]
