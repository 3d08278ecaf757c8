"""An emulated cluster on one machine: build it, run a command on its first node, tear it down."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from perfkit.collect.run import stop_process_group
from perfkit.collect.testbed import cpu, netns
from perfkit.collect.testbed.launch import build_ucx_progress, mpi_environment, write_launch_files
from perfkit.collect.testbed.spec import TestbedSpec, auto_dilation

MTU = 9000  # jumbo frames, as on cluster networks: TCP/IP headers cost under 1% of the link


class Testbed:
    """``nodes`` network namespaces (``node000``...) with their own host names, joined through a switch,
    each node's processes in a CPU group of its own (a quota of ``cores / dilation`` of this machine's
    cores).

    Use as a context manager; leaving it (normally, by an exception, Ctrl-C or SIGTERM) removes every
    namespace, group, link and process it made. ``run(command)`` runs on ``node000`` with the environment
    that makes Open MPI's ``mpirun`` and MPICH's ``mpiexec.hydra`` span the nodes.

    ``dilation``: k >= 1, or ``"auto"`` (the smallest k at which the nodes' cores fit this machine's,
    ``spec.auto_dilation``); the links run k times slower too, so the emulated cluster is the real one
    k times slower. Default (None): ``"auto"`` when ``nodes × cores`` exceeds this machine's cores, else 1.
    """

    __test__ = False  # a name pytest would otherwise collect

    def __init__(self, nodes: int, cores: int, *, bandwidth: float | str = 200e6, latency: float | str = 0.0,
                 switch_size: int | None = None, uplink: float | str | None = None,
                 clock_skew: int = 0, dilation: float | str | None = None) -> None:
        from perfkit.placement.network import parse_rate, parse_time

        self.cpu = cpu.controller()
        self.notes: list[str] = []
        rate = parse_rate(bandwidth)
        self.spec = TestbedSpec(nodes, cores, rate, parse_time(latency), switch_size,
                                None if uplink is None else parse_rate(uplink), clock_skew,
                                self._dilation(nodes, cores, rate, dilation))
        self.tag = f"{os.getpid()}-{secrets.token_hex(3)}"
        self.state: Path | None = None
        self._spaces: list[str] = []
        self._groups: list[str] = []
        self._previous: dict[int, Any] = {}
        self.environment: dict[str, str] = {}

    def _dilation(self, nodes: int, cores: int, bandwidth: float, asked: float | str | None) -> float:
        """The dilation factor k of ``asked`` (None: ``"auto"`` when oversubscribed, else 1)."""
        if asked is None:
            if nodes * cores <= machine_cores():
                return 1.0
            if cpu.why_no_quota(self.cpu):
                self.notes.append(f"no CPU quotas ({cpu.why_no_quota(self.cpu)}): the nodes share this "
                                  "machine's cores, and a program that computes waits for one")
                return 1.0
            asked = "auto"
        if asked == "auto":
            return auto_dilation(nodes, cores, machine_cores(), bandwidth)
        try:
            return float(asked)
        except ValueError:
            raise ValueError(f"--dilation {asked!r}: expected 'auto' or a factor from 1 to 1000") from None

    # -- names -----------------------------------------------------------------------------------
    def namespace(self, node: str) -> str:
        """The network namespace of ``node`` (``node000``), or of a switch (``switch``, ``leaf00``)."""
        return f"{netns.PREFIX}{self.tag}-{node}"

    @property
    def oversubscribed(self) -> bool:
        """More emulated cores than this machine has."""
        return self.spec.nodes * self.spec.cores > machine_cores()

    @property
    def dilation(self) -> float:
        """k: the emulated cluster runs k times slower than the cluster it stands for."""
        return self.spec.dilation

    # -- life cycle --------------------------------------------------------------------------------
    def __enter__(self) -> Testbed:
        why = netns.why_unavailable()
        if why:
            raise RuntimeError(why)
        quota_why = cpu.why_no_quota(self.cpu)
        if quota_why and self.spec.dilation > 1:
            raise RuntimeError(f"time dilation needs CPU quotas: {quota_why}")
        spaces, folders = netns.leftovers()
        groups = cpu.leftovers(self.cpu) if not quota_why else []
        if spaces or folders or groups:
            netns.remove(spaces, folders)
            if groups:
                cpu.remove(self.cpu, groups)
            self.notes.append(f"removed {len(spaces)} namespace(s) and {len(groups)} CPU group(s) left by an "
                              "earlier testbed that was killed")
        held = cpu.held_by_others(self.cpu, self.namespace("")) if not quota_why else 0.0
        if held:
            self.notes.append(f"other testbeds running here may use {held:.2f} of this machine's {machine_cores()} "
                              "cores: this one's nodes may wait for cores beyond its dilation")
        for sig in (signal.SIGTERM, signal.SIGHUP):  # leave through __exit__, never with namespaces up
            try:
                self._previous[sig] = signal.signal(sig, _raise_interrupt)
            except ValueError:  # not the main thread: the caller handles signals
                pass
        try:
            self._build()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        # a second Ctrl-C or a SIGTERM waits until everything is removed, then comes as it would have
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, _STOPPING)
        try:
            try:
                netns.remove(self._spaces, [self.state] if self.state else [])
            finally:
                if self._groups:
                    cpu.remove(self.cpu, self._groups)
            self._spaces, self._groups = [], []
            for sig, handler in self._previous.items():
                signal.signal(sig, handler)
            self._previous = {}
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)

    def _build(self) -> None:
        spec = self.spec
        self.state = Path(tempfile.mkdtemp(prefix=f"{netns.PREFIX}{self.tag}-"))
        switch = self._add("switch")
        netns.bridge(switch)
        leaves = [self._add(f"leaf{s:02d}") for s in range(spec.switches)]
        for s, leaf in enumerate(leaves):
            netns.bridge(leaf)
            netns.link(switch, f"l{s:03d}", leaf, "up0", mtu=MTU)
            netns.run(["ip", "-n", leaf, "link", "set", "up0", "master", "br0"])
            netns.shape(switch, f"l{s:03d}", spec.uplink_rate, 0.0)
            netns.shape(leaf, "up0", spec.uplink_rate, 0.0)
        for i, name in enumerate(spec.node_names):
            node = self._add(name)
            above = switch if spec.switch_size is None else leaves[spec.switch_of(i)]
            port = f"n{i:03d}"
            netns.link(above, port, node, "eth0", mtu=MTU)
            netns.address(node, "eth0", f"{spec.address(i)}/16")
            # one way node to node crosses two shaped egresses: the node's and the switch port's
            netns.shape(node, "eth0", spec.link_rate, spec.link_latency / 2)
            netns.shape(above, port, spec.link_rate, spec.link_latency / 2)
        if self.cpu is not None and not cpu.why_no_quota(self.cpu):
            fits = spec.nodes * spec.node_cpu <= machine_cores()  # then first claim on the cores, as if alone
            for name in spec.node_names:
                cpu.create(self.cpu, self.namespace(name), spec.node_cpu, slots=spec.cores, heavy=fits)
                self._groups.append(self.namespace(name))
        procs = {n: self.cpu.procs_from_nodes(self.namespace(n)) for n in spec.node_names} if self._groups else {}
        write_launch_files(self.state, spec, self.namespace, procs)
        ucx_progress = build_ucx_progress(self.state)
        if ucx_progress is None:
            self.notes.append("no C compiler (cc): MPICH runs may hang in MPI_Finalize (its PMI barrier stops UCX "
                              "progress that peers still need)")
        self.environment = mpi_environment(self.state, spec, oversubscribed=self.oversubscribed,
                                           ucx_progress=ucx_progress)
        if self.oversubscribed:
            self.notes.append(f"{spec.nodes} nodes × {spec.cores} cores exceed this machine's {os.cpu_count()} "
                              "cores: idle MPI ranks yield the processor (Open MPI mpi_yield_when_idle=1; "
                              "MPICH MPIR_CVAR_POLLS_BEFORE_YIELD=1)")
        if spec.dilation > 1:
            self.notes.append(f"time dilation {spec.dilation:g}: each node computes on {spec.node_cpu:.3g} of this "
                              f"machine's cores and its link runs at {spec.link_rate / 1e6:.4g} Mbit/s; "
                              f"cluster time = wall time / {spec.dilation:g}")
        if self._groups and spec.nodes * spec.node_cpu > machine_cores():
            self.notes.append(f"the nodes' quotas ask for {spec.nodes * spec.node_cpu:.3g} cores of this machine's "
                              f"{machine_cores()} (dilation {spec.dilation:g}, auto would be "
                              f"{auto_dilation(spec.nodes, spec.cores, machine_cores(), spec.bandwidth):g}): "
                              "a program that computes waits for a core")

    def _add(self, name: str) -> str:
        ns = self.namespace(name)
        netns.add(ns)
        self._spaces.append(ns)
        return ns

    # -- use ---------------------------------------------------------------------------------------
    def command_on(self, node: str, command: Sequence[str]) -> list[str]:
        """``command`` wrapped to run on ``node`` (its network, host name and /etc/hosts)."""
        assert self.state is not None, "the testbed is not up"
        return [str(self.state / "enter"), node, *command]

    def clock_offsets(self) -> dict[str, int]:
        """Per node name, how far its monotonic clock reads ahead of this machine's [s] (``clock_skew``)."""
        return {name: self.spec.clock_offset(i) for i, name in enumerate(self.spec.node_names)}

    def counters(self) -> list[dict[str, Any]]:
        """Each node's link counters now (kernel: bytes and packets of its ``eth0``)."""
        return [{"name": name, **netns.counters(self.namespace(name))} for name in self.spec.node_names]

    def throttling(self) -> list[dict[str, Any]]:
        """Each node's CPU group counters now (``cpu.throttling``; empty without quotas)."""
        return [{"name": name, **cpu.throttling(self.cpu, self.namespace(name))}
                for name in self.spec.node_names] if self._groups else []

    def run(self, command: Sequence[str], *, env: Mapping[str, str] | None = None,
            cwd: str | os.PathLike | None = None, timeout: float | None = None, stdout: Any = None,
            stderr: Any = None) -> dict[str, Any]:
        """Run ``command`` on ``node000``; its output passes through. Returns the report: parameters,
        ``exit_status``, ``wall_s`` (measured: dilated), ``dilation`` k, ``cluster_s`` (``wall_s / k``, the
        emulated cluster's time), per node the link's bytes and packets over the run and (``cpu``) its
        CPU group's periods, throttled periods and time waited for its quota. ``stdout``, ``stderr``:
        files to send the command's output and errors to instead."""
        before, cpu_before = self.counters(), self.throttling()
        full_env = {**os.environ, **self.environment, **(env or {})}
        start = time.perf_counter()
        proc = subprocess.Popen(self.command_on("node000", command), env=full_env, cwd=cwd, stdout=stdout,
                                stderr=stderr, start_new_session=True)
        try:
            status = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            status = 124
        finally:
            if proc.poll() is None:
                stop_process_group(proc, term_grace=3.0)
        wall = time.perf_counter() - start
        netns.kill_all(self.namespace(n) for n in self.spec.node_names)  # nothing of the run outlives it
        nodes = [{"name": b["name"], **{k: a[k] - b[k] for k in ("tx_bytes", "rx_bytes", "tx_packets", "rx_packets")}}
                 for b, a in zip(before, self.counters())]
        used = [{"name": b["name"], **{k: a[k] - b[k] for k in ("periods", "throttled", "throttled_s")}}
                for b, a in zip(cpu_before, self.throttling())]
        if status < 0:
            status = 128 - status
        return {"parameters": self.spec.as_dict(), "command": list(command), "exit_status": status,
                "wall_s": wall, "dilation": self.dilation, "cluster_s": wall / self.dilation,
                "oversubscribed": self.oversubscribed, "notes": list(self.notes), "nodes": nodes, "cpu": used}


def machine_cores() -> int:
    """The cores this process may run on (its CPU affinity)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


_STOPPING = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)
