"""What the collector's OTF2 archive states about itself: ranks, events, buffer flushes, events dropped, clocks.

Read from the global definitions only (the location definitions' event counts and the
``perfkit::*`` location properties the collector writes), never from the events.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from perfkit.errors import PerfkitFormatError

#: Location properties the collector writes for every rank.
PROPERTIES = ("perfkit::clock_offset_s", "perfkit::clock_offset_bound_s", "perfkit::buffer_flushes",
              "perfkit::events_dropped")


@dataclass(frozen=True)
class TraceSummary:
    """Per rank (in rank order): events written, clock offset to rank 0 applied [s] and its error bound [s],
    buffer flushes, events dropped; and their totals."""

    events_per_rank: np.ndarray
    clock_offset: np.ndarray
    clock_offset_bound: np.ndarray
    flushes_per_rank: np.ndarray
    dropped_per_rank: np.ndarray

    @property
    def ranks(self) -> int:
        return int(self.events_per_rank.size)

    @property
    def events(self) -> int:
        return int(self.events_per_rank.sum())

    @property
    def flushes(self) -> int:
        return int(self.flushes_per_rank.sum())

    @property
    def dropped(self) -> int:
        return int(self.dropped_per_rank.sum())


def trace_summary(archive: str | os.PathLike) -> TraceSummary:
    """The summary of the collector's archive ``archive`` (the folder or its ``traces.otf2``)."""
    import otf2

    path = Path(archive)
    anchor = path / "traces.otf2" if path.is_dir() else path
    try:
        reader = otf2.reader.Reader(str(anchor))
    except Exception as exc:  # the bindings raise their own error types
        raise PerfkitFormatError(anchor, None, f"cannot read the trace's definitions ({exc}); expected the "
                                 "collector's OTF2 archive") from exc
    try:
        defs = reader.definitions
        locations = sorted(defs.locations, key=lambda loc: loc._ref)
        index = {loc._ref: i for i, loc in enumerate(locations)}
        values = {name: np.full(len(locations), np.nan) for name in PROPERTIES}
        for prop in defs.location_properties:
            name = str(prop.name)
            if name in values:
                values[name][index[prop.location._ref]] = float(prop.value)
        events = np.array([loc.number_of_events for loc in locations], dtype=np.int64)
    finally:
        reader.close()
    missing = [name for name, v in values.items() if np.isnan(v).any()]
    if missing:
        raise PerfkitFormatError(anchor, None, f"location properties {missing} missing; expected an archive "
                                 "written by perfkit collect --trace")
    return TraceSummary(events, values[PROPERTIES[0]], values[PROPERTIES[1]],
                        values[PROPERTIES[2]].astype(np.int64), values[PROPERTIES[3]].astype(np.int64))
