"""The lab's scenarios as OTF2 traces, with the zero-cost simulator's own event times.

``perfkit.collect.lab.simulate`` counts every MPI call when it completes, at the rank's clock of
that moment; recording those moments gives each call's leave time, and its enter time is the
previous operation's end (calls cost nothing, computes take their prescribed time).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from perfkit.collect.lab import simulate as sim
from perfkit.collect.lab.scenarios import SCENARIOS
from tests.io.otf2_writer import RESOLUTION, Call, Trace, write_trace


class _Leaves(defaultdict):
    """``Trace.calls`` that also records (call, leave time [s]) per rank as the simulator counts them."""

    def __init__(self, simulation: Any) -> None:
        super().__init__(int)
        self.simulation = simulation
        self.leaves: dict[int, list[tuple[str, float]]] = defaultdict(list)

    def __setitem__(self, key: tuple[int, str], value: int) -> None:
        rank, name = key
        if value:  # not the 0 a missing key starts from
            self.leaves[rank].append((name, self.simulation.ranks[rank].t))
        super().__setitem__(key, value)


def _tick(seconds: float) -> int:
    return round(seconds * RESOLUTION)


def lab_trace(directory: Path, scenario: str, nprocs: int, **params: Any) -> Path:
    """Write ``scenario`` at ``nprocs`` ranks as ``directory/traces.otf2``; return the anchor."""
    sc = SCENARIOS[scenario]
    program = sc.program(nprocs, sc.params(**params))
    simulation = sim._Simulation(program)
    leaves = _Leaves(simulation)
    simulation.trace.calls = leaves
    result = simulation.run()
    calls = {r: _calls(program[r], leaves.leaves[r], result.compute_intervals[r]) for r in range(nprocs)}
    return write_trace(directory, Trace(calls, end={r: _tick(t) for r, t in enumerate(result.end)}))


def _calls(ops: list[sim.Op], leaves: list[tuple[str, float]], computes: list[tuple[float, float]]) -> list[Call]:
    """One rank's MPI calls with enter and leave ticks and their message events."""
    out: list[Call] = []
    done, computed, t = iter(leaves), iter(computes), 0.0
    pending: list[tuple[int, int, int, int]] = []
    request = 0
    for op in ops:
        if isinstance(op, sim.Compute):
            t = next(computed)[1]
            continue
        name, leave = next(done)
        enter, t = _tick(t), leave
        if isinstance(op, sim.Isend):
            out.append(Call(name, enter, _tick(leave), isend=[(op.dest, op.tag, op.nbytes, request)]))
            request += 1
        elif isinstance(op, sim.Send):
            out.append(Call(name, enter, _tick(leave), send=[(op.dest, op.tag, op.nbytes)]))
        elif isinstance(op, sim.Irecv):
            out.append(Call(name, enter, _tick(leave), irecv_request=[request]))
            pending.append((op.source, op.tag, op.nbytes, request))
            request += 1
        elif isinstance(op, sim.Recv):
            out.append(Call(name, enter, _tick(leave), recv=[(op.source, op.tag, op.nbytes)]))
        elif isinstance(op, sim.Waitall):
            out.append(Call(name, enter, _tick(leave), irecv=pending))
            pending = []
        elif isinstance(op, sim.Collective):
            root = 0 if name == "MPI_Bcast" else None
            out.append(Call(name, enter, _tick(leave), root=root, sent=8, received=8))
        else:
            out.append(Call(name, enter, _tick(leave)))
    return out
