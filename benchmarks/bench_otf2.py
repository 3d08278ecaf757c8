"""OTF2 reader speed and memory against Debian's ``otf2-print``. Writes ``benchmarks/results/otf2.json``.

The trace is written with ``otf2.writer`` definitions and the library's own event writer calls:
``--ranks`` ranks in a ring exchanging halos, each step of every rank a ``compute`` region, two
``MPI_Irecv`` (MpiIrecvRequest), two ``MPI_Isend`` (MpiIsend, one to each neighbour), an
``MPI_Waitall`` completing both receives (MpiIrecv) and an ``MPI_Allreduce`` (collective begin
and end): 22 events and two messages per rank and step. ``otf2-print``
(C, every event formatted as a line, written to ``/dev/null``) and ``perfkit.open_profile`` (the
default 100-bin timeline included) are timed alternately (median of ``--repeats``). Peak resident
memory of the reader, in a fresh process (``timing.peak_memory``), on the full trace and on one a
tenth its size gives the memory per event and per message.

Run: ``python benchmarks/bench_otf2.py [--events 10000000] [--ranks 16] [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from pathlib import Path

import otf2
from otf2.enums import CollectiveOp, GroupType, Paradigm, RegionRole
from timing import alternating_medians, peak_memory

import perfkit

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "otf2.json"
OTF2_PRINT = "/usr/bin/otf2-print"
EVENTS_PER_STEP = 22
STEP_TICKS = 1000


def write_halo(directory: Path, ranks: int, steps: int) -> Path:
    """A halo-exchange trace of ``ranks`` x ``steps`` x ``EVENTS_PER_STEP`` events at ``directory/traces.otf2``."""
    import _otf2

    with otf2.writer.open(str(directory), timer_resolution=10**9) as archive:
        defs = archive.definitions
        node = defs.system_tree_node("node0")
        locations = [defs.location("Master thread", group=defs.location_group(f"MPI Rank {r}", system_tree_parent=node))
                     for r in range(ranks)]
        defs.group("", group_type=GroupType.COMM_LOCATIONS, paradigm=Paradigm.MPI, members=locations)
        group = defs.group("world", group_type=GroupType.COMM_GROUP, paradigm=Paradigm.MPI, members=locations)
        comm = defs.comm("MPI_COMM_WORLD", group=group)._ref
        compute = defs.region("compute", region_role=RegionRole.FUNCTION, paradigm=Paradigm.USER)._ref
        irecv, isend, waitall = (defs.region(name, region_role=RegionRole.POINT2POINT, paradigm=Paradigm.MPI)._ref
                                 for name in ("MPI_Irecv", "MPI_Isend", "MPI_Waitall"))
        allreduce = defs.region("MPI_Allreduce", region_role=RegionRole.COLL_ALL2ALL, paradigm=Paradigm.MPI)._ref
        for rank in range(ranks):
            handle = archive.event_writer_from_location(locations[rank])._handle
            peers = ((rank - 1) % ranks, (rank + 1) % ranks)
            for step in range(steps):
                t = step * STEP_TICKS + rank
                _otf2.EvtWriter_Enter(handle, None, t, compute)
                _otf2.EvtWriter_Leave(handle, None, t + 600, compute)
                for k in range(2):
                    _otf2.EvtWriter_Enter(handle, None, t + 600 + 3 * k, irecv)
                    _otf2.EvtWriter_MpiIrecvRequest(handle, None, t + 601 + 3 * k, 2 * step + k)
                    _otf2.EvtWriter_Leave(handle, None, t + 602 + 3 * k, irecv)
                for k, peer in enumerate(peers):
                    _otf2.EvtWriter_Enter(handle, None, t + 610 + 3 * k, isend)
                    _otf2.EvtWriter_MpiIsend(handle, None, t + 611 + 3 * k, peer, comm, k, 4096, 2 * step + k)
                    _otf2.EvtWriter_Leave(handle, None, t + 612 + 3 * k, isend)
                _otf2.EvtWriter_Enter(handle, None, t + 620, waitall)
                for k, peer in enumerate(peers):  # the left neighbour's message went right (tag 1)
                    _otf2.EvtWriter_MpiIrecv(handle, None, t + 800 + k, peer, comm, 1 - k, 4096, 2 * step + k)
                _otf2.EvtWriter_Leave(handle, None, t + 802, waitall)
                _otf2.EvtWriter_Enter(handle, None, t + 850, allreduce)
                _otf2.EvtWriter_MpiCollectiveBegin(handle, None, t + 851)
                _otf2.EvtWriter_MpiCollectiveEnd(handle, None, t + 950, CollectiveOp.ALLREDUCE, comm, 2**32 - 1, 8, 8)
                _otf2.EvtWriter_Leave(handle, None, t + 951, allreduce)
    return directory / "traces.otf2"


def otf2_print(anchor: Path) -> None:
    """Every event of the trace printed by ``otf2-print`` into ``/dev/null``."""
    subprocess.run([OTF2_PRINT, str(anchor)], check=True, stdout=subprocess.DEVNULL)


def peak(anchor: Path) -> dict[str, int]:
    """Peak memory [B] of reading ``anchor`` in a fresh process."""
    return peak_memory(f"import sys; sys.path.insert(0, {str(ROOT)!r}); import perfkit",
                       f"perfkit.open_profile({str(anchor)!r})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--ranks", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    steps = -(-args.events // (args.ranks * EVENTS_PER_STEP))
    with tempfile.TemporaryDirectory() as tmp:
        anchor = write_halo(Path(tmp) / "full", args.ranks, steps)
        small = write_halo(Path(tmp) / "tenth", args.ranks, steps // 10)
        events = args.ranks * steps * EVENTS_PER_STEP
        times = alternating_medians({"read": lambda: perfkit.open_profile(anchor),
                                     "otf2_print": lambda: otf2_print(anchor)}, args.repeats)
        memory = {"full": peak(anchor), "tenth": peak(small)}
        size = sum(p.stat().st_size for p in anchor.parent.rglob("*") if p.is_file())
    small_events = args.ranks * (steps // 10) * EVENTS_PER_STEP
    grown = memory["full"]["rss"] - memory["tenth"]["rss"]
    result = {
        "events": events, "ranks": args.ranks, "messages": 2 * args.ranks * steps, "trace_MB": round(size / 1e6, 1),
        "read_s": round(times["read"], 2), "otf2_print_s": round(times["otf2_print"], 2),
        "read_events_per_s": round(events / times["read"]),
        "otf2_print_events_per_s": round(events / times["otf2_print"]),
        "ratio_read_over_print": round(times["read"] / times["otf2_print"], 2), "repeats": args.repeats,
        "peak_MB": round(memory["full"]["rss"] / 1e6, 1), "peak_tenth_MB": round(memory["tenth"]["rss"] / 1e6, 1),
        "peak_B_per_event": round(memory["full"]["rss"] / events, 1),
        "growth_B_per_event": round(grown / (events - small_events), 1),
        "growth_B_per_message": round(grown / (2 * args.ranks * (steps - steps // 10)), 1),
        "traced_peak_MB": round(memory["full"]["traced"] / 1e6, 1),
    }
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
