"""Launch files for a placement, and readers for them (to check round trips and reuse old files).

Formats (``FORMATS``):

* ``permutation``: as SGI mpiplace wrote it, one rank per line in placement order: line k holds
  the rank that runs on the k-th core of the node list (each node repeated ``cores`` times);
* ``rankfile``: Open MPI, ``rank N=host slot=S:C`` (socket S, core C within the socket);
* ``machinefile``: MPICH / Intel MPI, one host per line in rank order (``compact``: ``host:n``
  lines for runs of consecutive ranks on one host);
* ``mpt``: HPE/SGI MPT host list for ``mpirun``: ``host 1, host 1, ...`` in rank order
  (``compact``: ``host n`` for runs);
* ``cray``: Cray ``MPICH_RANK_ORDER`` (with ``MPICH_RANK_REORDER_METHOD=3``): the ranks in
  placement order, comma separated, ranges ``a-b`` allowed; one line per node.

``permutation`` and ``cray`` describe ranks on consecutive cores of full nodes, so they need a
placement that occupies the first N cores (all perfkit strategies do); ``machinefile`` and
``mpt`` carry no core numbers: reading them back assigns each node's cores in rank order.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from os import PathLike
from pathlib import Path

import numpy as np

from perfkit import atomic
from perfkit.placement.launch_format import FORMATS, check_format, format_positions, host_names
from perfkit.placement.placement import Placement
from perfkit.placement.topology import Topology

__all__ = ["FORMATS", "format_launch", "host_names", "parse_launch", "read_hosts", "read_launch", "write_launch"]
_RANKFILE_LINE = re.compile(r"^rank\s+(\d+)\s*=\s*(\S+)\s+slot\s*=\s*(\d+):(\d+)\s*$")


def read_hosts(path: str | PathLike) -> list[str]:
    """Host names from a file: one per line, '#' comments and ``host:n`` suffixes ignored."""
    lines = Path(path).read_text().splitlines()
    return [line.split("#")[0].split(":")[0].strip() for line in lines if line.split("#")[0].strip()]


def format_launch(
    placement: Placement, fmt: str, hosts: Sequence[str] | None = None, compact: bool = False
) -> str:
    """Text of the launch file for ``placement`` in format ``fmt``."""
    return format_positions(placement.node, placement.core, placement.topology, fmt, hosts=hosts, compact=compact)


def write_launch(
    placement: Placement,
    fmt: str,
    path: str | PathLike | None = None,
    hosts: Sequence[str] | None = None,
    compact: bool = False,
    *,
    overwrite: bool = True,
) -> str:
    """Return the launch file text and write it to ``path`` when given, atomically (a temporary beside it,
    renamed); ``overwrite=False`` refuses an existing ``path``."""
    text = format_launch(placement, fmt, hosts=hosts, compact=compact)
    if path is not None:
        atomic.check_output(path, overwrite=overwrite, option="overwrite=True")
        atomic.write_text(path, text)
    return text


def read_launch(
    path: str | PathLike, fmt: str, topology: Topology, hosts: Sequence[str] | None = None
) -> Placement:
    """Placement described by the launch file at ``path``."""
    return parse_launch(Path(path).read_text(), fmt, topology, hosts=hosts)


def parse_launch(text: str, fmt: str, topology: Topology, hosts: Sequence[str] | None = None) -> Placement:
    """Placement described by launch file text in format ``fmt`` on ``topology``."""
    check_format(fmt)
    if fmt in ("permutation", "cray"):
        order = _parse_permutation(text) if fmt == "permutation" else _parse_rank_order(text)
        if sorted(order) != list(range(len(order))):
            raise ValueError(f"{fmt} file does not list each rank 0..{len(order) - 1} exactly once")
        if len(order) > topology.capacity:
            raise ValueError(f"{len(order)} ranks exceed the {topology.capacity} cores of the topology")
        slot = np.empty(len(order), dtype=np.int64)
        slot[np.asarray(order, dtype=np.int64)] = np.arange(len(order))
        return Placement.from_slots(slot, topology, strategy=f"from {fmt}")
    index = {name: i for i, name in enumerate(host_names(topology.nodes, hosts))}
    if fmt == "rankfile":
        return _parse_rankfile(text, topology, index)
    entries = _parse_machinefile(text) if fmt == "machinefile" else _parse_mpt(text)
    node = []
    for host, count in entries:
        if host not in index:
            raise ValueError(f"host {host!r} is not in the host list {list(index)[:4]}...")
        node += [index[host]] * count
    node_arr = np.asarray(node, dtype=np.int64)
    core = np.zeros_like(node_arr)
    seen = np.zeros(topology.nodes, dtype=np.int64)
    for rank, n in enumerate(node_arr):
        core[rank] = seen[n]
        seen[n] += 1
    if seen.max() > topology.cores:
        raise ValueError(f"a host receives {seen.max()} ranks but has {topology.cores} cores")
    return Placement(node=node_arr, core=core, topology=topology, strategy=f"from {fmt}")


def _content_lines(text: str) -> list[tuple[int, str]]:
    """(line number, text) of non-empty lines, '#' comments removed."""
    stripped = ((i, line.split("#")[0].strip()) for i, line in enumerate(text.splitlines(), 1))
    return [(i, line) for i, line in stripped if line]


def _parse_int(token: str, lineno: int) -> int:
    if not token.isdigit():
        raise ValueError(f"line {lineno}: expected a rank number, got {token!r}")
    return int(token)


def _parse_permutation(text: str) -> list[int]:
    return [_parse_int(line, i) for i, line in _content_lines(text)]


def _parse_rank_order(text: str) -> list[int]:
    order: list[int] = []
    for i, line in _content_lines(text):
        for token in filter(None, (t.strip() for t in line.split(","))):
            first, _, last = token.partition("-")
            low, high = _parse_int(first, i), _parse_int(last, i) if last else None
            order += [low] if high is None else list(range(low, high + 1))
    return order


def _parse_rankfile(text: str, topology: Topology, index: dict[str, int]) -> Placement:
    found: dict[int, tuple[int, int]] = {}
    cps = topology.cores_per_socket
    for i, line in _content_lines(text):
        match = _RANKFILE_LINE.match(line)
        if not match:
            raise ValueError(f"line {i}: expected 'rank N=host slot=S:C', got {line!r}")
        rank, host, socket, core = int(match[1]), match[2], int(match[3]), int(match[4])
        if host not in index:
            raise ValueError(f"line {i}: host {host!r} is not in the host list")
        if socket >= topology.sockets or core >= cps or rank in found:
            raise ValueError(f"line {i}: duplicate rank or slot {socket}:{core} outside {topology.sockets}x{cps}")
        found[rank] = (index[host], socket * cps + core)
    if sorted(found) != list(range(len(found))):
        raise ValueError("rankfile does not list ranks 0..N-1")
    node, core = (np.array(v, dtype=np.int64) for v in zip(*(found[r] for r in range(len(found)))))
    return Placement(node=node, core=core, topology=topology, strategy="from rankfile")


def _parse_machinefile(text: str) -> list[tuple[str, int]]:
    entries = []
    for i, line in _content_lines(text):
        host, _, count = line.partition(":")
        entries.append((host.strip(), _parse_int(count.split(":")[0].strip(), i) if count else 1))
    return entries


def _parse_mpt(text: str) -> list[tuple[str, int]]:
    entries = []
    for chunk in " ".join(line for _, line in _content_lines(text)).split(","):
        tokens = chunk.split()
        pair = next(
            (
                (tokens[k], int(tokens[k + 1]))
                for k in range(len(tokens) - 1)
                if tokens[k + 1].isdigit() and not tokens[k].startswith("-") and tokens[k] != "mpirun"
            ),
            None,
        )
        if pair is None:
            raise ValueError(f"MPT host list entry {chunk.strip()!r} is not 'host count'")
        entries.append(pair)
    return entries
