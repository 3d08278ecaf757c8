"""How MPI reaches the testbed's nodes: an ``enter`` script, an ssh-like launch agent, host files and
the environment that points Open MPI's ``mpirun`` and MPICH's ``mpiexec.hydra`` at them."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from collections.abc import Callable, Mapping
from importlib import resources
from pathlib import Path

from perfkit.collect.testbed.spec import TestbedSpec

# $0 = the testbed's hosts file, $1 = the node's name, then the command: the node's CPU group, a UTS
# namespace of its own (the node's host name) and a mount namespace of its own (the node's /etc/hosts),
# inside the node's network namespace
_ENTER = """#!/bin/sh
# enter NODE COMMAND...: run COMMAND on NODE of this testbed (its CPU quota, network, host name and
# /etc/hosts, and with a clock skew its own monotonic clock: a time namespace, whose offset counts from
# this machine's clock wherever it is entered from, and which applies to the children of unshare)
node=$1; shift
procs=
case "$node" in
{cases}
  *) echo "testbed: no node '$node' (nodes: {names})" >&2; exit 255;;
esac
# this shell joins the node's CPU group before it execs: the command and all it starts inherit it
[ -z "$procs" ] || echo $$ > "$procs" || exit 255
exec ip netns exec "$ns" unshare --uts --mount --propagation private {clock}\\
    sh -c 'mount --bind "$0" /etc/hosts && hostname "$1" && shift && exec "$@"' {hosts} "$name" "$@"
"""

# called as ssh is (``agent [options] HOST COMMAND WORDS...``) by Open MPI's rsh launcher and hydra
_AGENT = """#!/bin/sh
# an ssh stand-in for mpirun and mpiexec.hydra: agent [ssh options] NODE COMMAND...
while [ $# -gt 0 ]; do
  case "$1" in -o|-p|-l|-i|-F) shift 2;; -*) shift;; *) break;; esac
done
host=$1; shift
exec {enter} "$host" sh -c "$*"
"""


def write_launch_files(state: Path, spec: TestbedSpec, namespace: Callable[[str], str],
                       procs: Mapping[str, Path] | None = None) -> None:
    """``enter``, ``agent``, ``hosts`` and the host files (``hostfile.openmpi``, ``hostfile.mpich``) in
    ``state``. ``procs``: per node name, the ``cgroup.procs`` file of its CPU group (none: no quotas)."""
    procs = procs or {}
    names = spec.node_names
    hosts = ["127.0.0.1 localhost", *(f"{spec.address(i)} {n}" for i, n in enumerate(names))]
    (state / "hosts").write_text("\n".join(hosts) + "\n")
    cases = "\n".join(f"  {n}|{spec.address(i)}) ns={shlex.quote(namespace(n))}; name={n}; "
                      f"skew={spec.clock_offset(i)};"
                      + (f" procs={shlex.quote(str(procs[n]))};" if n in procs else "") + ";"
                      for i, n in enumerate(names))
    # every node gets a time namespace of its own when clocks differ (offset 0 too: a node entered from
    # another must not keep that one's clock)
    clock = '--time --monotonic "$skew" --fork --kill-child ' if spec.clock_skew else ""
    enter = state / "enter"
    enter.write_text(_ENTER.format(cases=cases, names=f"{names[0]}..{names[-1]}", clock=clock,
                                   hosts=shlex.quote(str(state / "hosts"))))
    agent = state / "agent"
    agent.write_text(_AGENT.format(enter=shlex.quote(str(enter))))
    for script in (enter, agent):
        script.chmod(0o755)
    (state / "hostfile.openmpi").write_text("".join(f"{n} slots={spec.cores}\n" for n in names))
    (state / "hostfile.mpich").write_text("".join(f"{n}:{spec.cores}\n" for n in names))


def build_ucx_progress(state: Path) -> Path | None:
    """``pk_ucx_progress.so`` in ``state``, built with ``cc``: preloaded, it keeps UCX progressing while
    MPICH 4.0's ``MPI_Finalize`` waits in its PMI barrier (without it about one MPICH run in three on
    the testbed never returns). None when no C compiler is found."""
    cc = os.environ.get("CC") or "cc"
    if shutil.which(cc) is None:
        return None
    source = resources.files("perfkit.collect") / "src" / "pk_ucx_progress.c"
    library = state / "pk_ucx_progress.so"
    with resources.as_file(source) as path:
        done = subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(library), str(path), "-ldl", "-lpthread"],
                              capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"testbed: building {library.name} with {cc} failed: {done.stderr.strip()}")
    return library


def mpi_environment(state: Path, spec: TestbedSpec, *, oversubscribed: bool,
                    ucx_progress: Path | None = None) -> dict[str, str]:
    """The variables that make ``mpirun`` (Open MPI) and ``mpiexec.hydra`` (MPICH) span the testbed.

    Both launch through ``agent`` with the testbed's host file; messages between nodes go over each
    node's ``eth0`` (TCP), within a node over shared memory; Open MPI does not bind ranks to cores
    (every node would bind to the same few real cores). When the nodes hold more cores than the
    machine, idle ranks yield the processor (Open MPI ``mpi_yield_when_idle``; MPICH polls
    ``MPIR_CVAR_POLLS_BEFORE_YIELD`` times before a ``sched_yield``). ``ucx_progress`` (from
    ``build_ucx_progress``) is preloaded into every process the testbed starts.
    """
    env = {
        "PERFKIT_TESTBED": str(state),
        "PERFKIT_TESTBED_HOSTFILE_OPENMPI": str(state / "hostfile.openmpi"),
        "PERFKIT_TESTBED_HOSTFILE_MPICH": str(state / "hostfile.mpich"),
        # Open MPI
        "OMPI_MCA_plm_rsh_agent": str(state / "agent"),
        "OMPI_MCA_plm_rsh_no_tree_spawn": "1",
        "OMPI_MCA_orte_default_hostfile": str(state / "hostfile.openmpi"),
        "OMPI_MCA_pml": "ob1",
        "OMPI_MCA_btl": "self,vader,tcp",
        "OMPI_MCA_btl_tcp_if_include": "eth0",
        "OMPI_MCA_oob_tcp_if_include": "eth0",
        "OMPI_MCA_hwloc_base_binding_policy": "none",
        # MPICH (hydra, ch4:ucx)
        "HYDRA_LAUNCHER": "ssh",
        "HYDRA_LAUNCHER_EXEC": str(state / "agent"),
        "HYDRA_HOST_FILE": str(state / "hostfile.mpich"),
        "HYDRA_IFACE": "eth0",
        "UCX_NET_DEVICES": "eth0",
        "UCX_TLS": "tcp,self",  # UCX's shared memory (posix, sysv, cma) would reach ranks of other nodes
    }
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    if oversubscribed:
        env.update(OMPI_MCA_mpi_yield_when_idle="1", MPIR_CVAR_POLLS_BEFORE_YIELD="1")
    if ucx_progress is not None:
        env["LD_PRELOAD"] = " ".join(p for p in (str(ucx_progress), os.environ.get("LD_PRELOAD", "")) if p)
    return env
