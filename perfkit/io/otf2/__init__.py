"""OTF2 trace reader: ``perfkit.open_profile("…/traces.otf2")`` or ``xr.open_dataset(..., engine="otf2")``.

``definitions`` reads ranks, communicators and regions; ``batches`` has the OTF2 library decode
each rank's events into integer fields (``layout``), ``events`` reduces them batch by batch into
per-region sums and per-message records; ``waits`` computes Scalasca's wait states from the
records, ``replay`` the runtime on an ideal network; ``reader`` builds the canonical Dataset.
"""

from perfkit.io.otf2.reader import read, sniff

__all__ = ["read", "sniff"]
