"""MPInside text tables: ``read`` and ``sniff`` (the reader registered as format ``mpinside``), ``write``.

``reader`` parses a file into the canonical Dataset, ``writer`` writes one run back in the same layout,
``names`` maps MPInside's column spellings to canonical function labels and back.
"""

from perfkit.io.mpinside.reader import read, sniff
from perfkit.io.mpinside.writer import host_runs, write

__all__ = ["host_runs", "read", "sniff", "write"]
