"""MPInside column names -> canonical function label, MPI call and kind."""

from __future__ import annotations

from functools import lru_cache

from perfkit.model import COMPUTE, default_kind

#: libc I/O columns shown with MPINSIDE_SHOW_READ_WRITE (kept under their own names, kind ``io``).
LIBC_IO = frozenset({"read", "write", "open", "close", "fread", "fwrite", "pread", "pwrite", "lseek"})


@lru_cache(maxsize=4096)
def column_function(column: str) -> tuple[str, str, str]:
    """(function label, call, kind) for an MPInside column such as ``Recv``, ``w_MPI_Recv``, ``b_Bcast``.

    ``w_<f>`` is send-late time of ``<f>`` (kind ``wait_late_sender``); ``b_<f>`` is the barrier
    MPInside inserts before collective ``<f>`` (kind ``wait_collective``). ``r_<f>``, late-receiver
    wait (``wait_late_receiver``), is not an MPInside column but comes back from tables written from
    traces.
    """
    if column.lower() in ("compute", "comput"):
        return COMPUTE, COMPUTE, "compute"
    for prefix, kind in (("w_", "wait_late_sender"), ("r_", "wait_late_receiver"), ("b_", "wait_collective")):
        if column.startswith(prefix) and len(column) > 2:
            call = mpi_name(column[2:])
            return prefix + call, call, kind
    call = mpi_name(column)
    return call, call, default_kind(call)


def mpi_name(name: str) -> str:
    """``Recv`` -> ``MPI_Recv``; names already spelled ``MPI_...`` and libc I/O calls are kept."""
    if name.startswith("MPI_") or name in LIBC_IO:
        return name
    if name.lower().startswith("mpi_"):
        return "MPI_" + name[4:]
    return "MPI_" + name


def column_name(function: str, kind: str) -> str:
    """The MPInside spelling of a canonical function label (inverse of ``column_function``)."""
    if kind == "wait_collective":
        return "b_" + function[len("b_MPI_"):]
    if kind in ("wait_late_sender", "wait_late_receiver", "compute", "io", "other") or not function.startswith("MPI_"):
        return function
    return function[len("MPI_"):]
