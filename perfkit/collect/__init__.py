"""The open collector: profile any MPI program into MPInside tables (send-late time, collective wait, matrices).

``collect(["mpirun", "-np", "4", "./app"], "run.mpinside", slt=True)`` builds the PMPI library with
the MPI's own compiler wrappers (once, cached), runs the launch with it preloaded, and writes the
profile; ``perfkit collect`` is the same from a shell. See ``docs/collector.md``.
"""

from perfkit.collect.build import CollectorBuildError, build_library, compiler
from perfkit.collect.run import CollectResult, collect

__all__ = ["CollectResult", "CollectorBuildError", "build_library", "collect", "compiler"]
