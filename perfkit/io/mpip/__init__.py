"""mpiP text reports: ``read`` and ``sniff`` (the reader registered as format ``mpip``), ``callsites``, ``run_stem``.

``scan`` finds a report's sections as byte ranges, ``tables`` parses their rows, ``reader`` builds the
canonical Dataset from them.
"""

from perfkit.io.mpip.reader import callsites, read, run_stem, sniff

__all__ = ["callsites", "read", "run_stem", "sniff"]
