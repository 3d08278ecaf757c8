"""What an OTF2 archive defines: ranks, communicators in world ranks, regions and the clock."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from perfkit.errors import PerfkitFormatError
from perfkit.model import COMPUTE, KINDS, default_kind

#: The location property in which ``perfkit collect --trace`` states the events a full buffer lost.
DROPPED = "perfkit::events_dropped"
#: The metric member ``perfkit collect --trace`` records with every Enter and Leave: the thread's CPU time.
CPU_MEMBER = "cpu_time"
#: A metric mode's value property (its lower half-byte), and the property of accumulated metrics (OTF2_MetricMode).
VALUE_PROPERTY, ACCUMULATED = 0x0F, 0
EXPECTED = "an OTF2 trace (the anchor file traces.otf2 with traces.def and a traces/ folder beside it)"


@dataclass(frozen=True)
class CpuMetric:
    """The CPU time metric of a trace: the metric class ``ref`` whose one member is ``cpu_time``, an accumulated
    count of seconds recorded at every Enter and Leave; ``value_type`` its OTF2 type (``_otf2.Type``), ``scale``
    seconds per unit of its values."""

    ref: int
    value_type: int
    scale: float


@dataclass
class Definitions:
    """The global definitions of one trace, reduced to what the reader needs.

    ``world`` maps a location reference to its rank in MPI_COMM_WORLD; ``comm_ranks`` maps a
    communicator reference to the world ranks of its members, in communicator-rank order (an empty
    array for MPI_COMM_SELF: its only member is the calling rank). ``regions`` maps a region
    reference to its name. Timestamps are integer ticks, ``resolution`` per second; the trace
    starts at tick ``start`` and lasts ``length`` ticks (its clock properties). ``dropped``: per
    rank, the events its writer stated it dropped (``perfkit collect --trace``'s location property
    ``perfkit::events_dropped``; 0 when not stated). ``cpu``: the CPU time metric, if the trace has one.
    """

    path: Path
    resolution: int
    world: dict[int, int]
    comm_ranks: dict[int, np.ndarray]
    regions: dict[int, str]
    start: int = 0
    length: int = 0
    hosts: dict[int, str] = field(default_factory=dict)
    dropped: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    warnings: list[str] = field(default_factory=list)
    cpu: CpuMetric | None = None

    @property
    def nranks(self) -> int:
        """Number of MPI ranks."""
        return len(self.world)


def read_definitions(path: Path, trace: Any) -> Definitions:
    """``Definitions`` of an opened ``otf2.reader.Reader`` ``trace`` read from ``path``."""
    import otf2

    defs = trace.definitions
    clock = defs.clock_properties
    warnings: list[str] = []
    world_group = next((g for g in defs.groups if g.group_type == otf2.GroupType.COMM_LOCATIONS
                        and g.paradigm == otf2.Paradigm.MPI), None)
    locations = list(defs.locations)
    if world_group is not None and len(world_group.members):
        members = list(world_group.members)
    else:
        members = [loc for loc in locations if loc.type == otf2.LocationType.CPU_THREAD]
        warnings.append("the trace defines no MPI location group; every CPU thread location is taken as a rank "
                        "in definition order")
    if not members:
        raise PerfkitFormatError(path, None, f"the trace defines no locations; expected {EXPECTED}")
    world = {loc._ref: rank for rank, loc in enumerate(members)}
    others = [loc for loc in locations if loc._ref not in world and loc.number_of_events]
    if others:
        warnings.append(f"{len(others)} locations with events are not MPI ranks (threads, devices); their events "
                        "are not read")
    comm_ranks: dict[int, np.ndarray] = {}
    for comm in defs.comms:
        group = comm.group
        if group is None:
            continue
        ranks = [world.get(m._ref, -1) if hasattr(m, "_ref") else int(m) for m in group.members]
        if group.group_type == otf2.GroupType.COMM_SELF:
            ranks = []
        comm_ranks[comm._ref] = np.asarray(ranks, dtype=np.int64)
    dropped = np.zeros(len(world), dtype=np.int64)
    for prop in defs.location_properties:
        if str(prop.name) == DROPPED and prop.location._ref in world:
            dropped[world[prop.location._ref]] = int(prop.value)
    if dropped.any():
        lost = ", ".join(f"rank {r}: {int(n):,}" for r, n in enumerate(dropped) if n)
        warnings.append(f"the collector dropped {int(dropped.sum()):,} events its trace buffer could not hold "
                        f"({lost}); the calls, messages and waits of those events are missing, not estimated")
    hosts = {}
    for loc in members:
        node = getattr(loc.group, "system_tree_parent", None)
        hosts[world[loc._ref]] = node.name if node is not None else ""
    return Definitions(path=path, resolution=int(clock.timer_resolution), world=world, comm_ranks=comm_ranks,
                       regions={r._ref: str(r.name) for r in defs.regions}, start=int(clock.global_offset),
                       length=int(clock.trace_length), hosts=hosts, dropped=dropped, warnings=warnings,
                       cpu=_cpu_metric(defs, warnings))


def _cpu_metric(defs: Any, warnings: list[str]) -> CpuMetric | None:
    """The metric class of one member ``cpu_time`` in seconds, accumulated and recorded at every Enter and Leave
    (a warning names a ``cpu_time`` defined otherwise, which is not read)."""
    import otf2

    for metric in defs.metric_classes:
        if len(metric.members) != 1 or str(metric.members[0].name) != CPU_MEMBER:
            continue
        member = metric.members[0]
        value_types = (otf2.Type.UINT64, otf2.Type.INT64, otf2.Type.DOUBLE)
        problems = [text for wrong, text in (
            (str(member.unit) != "s", f"its unit is {str(member.unit)!r}, not 's'"),
            ((member.metric_mode.value & VALUE_PROPERTY) != ACCUMULATED,
             f"its mode is {member.metric_mode}, not accumulated"),
            (metric.occurrence.value != otf2.MetricOccurrence.SYNCHRONOUS_STRICT.value,
             f"its occurrence is {metric.occurrence}, not at every Enter and Leave (SYNCHRONOUS_STRICT)"),
            (member.value_type.value not in [t.value for t in value_types], f"its values are {member.value_type}"),
        ) if wrong]
        if problems:
            warnings.append(f"the trace's metric {CPU_MEMBER} is not read: {'; '.join(problems)}")
            continue
        base = 2 if member.base.value == otf2.Base.BINARY.value else 10
        return CpuMetric(ref=int(metric._ref), value_type=int(member.value_type.value),
                         scale=float(base) ** int(member.exponent))
    return None


def function_of(name: str) -> str:
    """The function label of a region: its name for an ``MPI_`` region, else ``Compute``."""
    return name if name.startswith("MPI_") and name[4:].isidentifier() else COMPUTE


def region_kinds(defs: Definitions) -> dict[int, int]:
    """``KINDS`` index of every region: its function's kind (non-MPI regions are compute)."""
    return {ref: KINDS.index(default_kind(function_of(name))) for ref, name in defs.regions.items()}
