"""The CPU time metric of a trace (``cpu_time`` at every Enter and Leave, as ``perfkit collect --trace`` writes it):
read into the profile's ``cpu_time`` exactly, batch by batch; a trace without it reads as before; a metric that
is missing, misplaced, not a number or going backwards is named and its rank's CPU time is NaN."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import otf2
import pytest
import xarray as xr
from otf2.enums import GroupType, MetricMode, MetricOccurrence, Paradigm, RecorderKind, RegionRole, Type

import perfkit
from perfkit.io.otf2 import events
from perfkit.model import CPU_TIME, read_warnings

RESOLUTION = 10**6  # ticks per second
NS = 1e-9

#: Per rank: ("enter" | "leave", tick, region, CPU reading [ns] or None for no metric), ("send" | "recv", tick, peer),
#: ("cpu", tick, value): a metric on its own, ("papi", tick, value): a metric of another class.
Event = tuple
RANKS: dict[int, list[Event]] = {
    0: [("enter", 0, "main", 0), ("enter", 10, "MPI_Send", 5000), ("send", 10, 1), ("leave", 12, "MPI_Send", 5300),
        ("enter", 20, "MPI_Barrier", 9000), ("leave", 30, "MPI_Barrier", 9100), ("leave", 40, "main", 12000)],
    1: [("enter", 0, "main", 0), ("enter", 5, "MPI_Recv", 1000), ("recv", 15, 0), ("leave", 15, "MPI_Recv", 1800),
        ("enter", 16, "MPI_Barrier", 2000), ("leave", 30, "MPI_Barrier", 2500), ("leave", 40, "main", 4000)],
}
#: What RANKS gives [ns]: each call's reading at its Leave less its Enter's, Compute the rest.
EXPECTED = {0: {"MPI_Send": 300, "MPI_Barrier": 100, "Compute": 12000 - 400},
            1: {"MPI_Recv": 800, "MPI_Barrier": 500, "Compute": 4000 - 1300}}


def write(directory: Path, ranks: dict[int, list[Event]], *, cpu: bool = True, value_type: Type = Type.UINT64,
          unit: str = "s", mode: MetricMode = MetricMode.ACCUMULATED_START, exponent: int = -9) -> Path:
    """A trace of ``ranks`` (``Event``) with the cpu_time metric defined as given (none without ``cpu``)."""
    with otf2.writer.open(str(directory), timer_resolution=RESOLUTION) as archive:
        defs = archive.definitions
        node = defs.system_tree_node("node0")
        locations = [defs.location("Master thread", group=defs.location_group(f"MPI Rank {r}", system_tree_parent=node))
                     for r in range(len(ranks))]
        defs.group("", group_type=GroupType.COMM_LOCATIONS, paradigm=Paradigm.MPI, members=locations)
        world = defs.comm("MPI_COMM_WORLD", group=defs.group("MPI_COMM_WORLD", group_type=GroupType.COMM_GROUP,
                                                             paradigm=Paradigm.MPI, members=locations))
        metrics = {}
        if cpu:
            member = defs.metric_member("cpu_time", metric_mode=mode, value_type=value_type, exponent=exponent,
                                        unit=unit)
            metrics["cpu"] = defs.metric_class([member], occurrence=MetricOccurrence.SYNCHRONOUS_STRICT,
                                               recorder_kind=RecorderKind.CPU)
            papi = defs.metric_member("PAPI_TOT_INS", metric_mode=MetricMode.ACCUMULATED_START,
                                      value_type=Type.UINT64, unit="instructions")
            metrics["papi"] = defs.metric_class([papi], occurrence=MetricOccurrence.SYNCHRONOUS_STRICT,
                                                recorder_kind=RecorderKind.CPU)
        regions: dict[str, object] = {}
        for rank, rank_events in ranks.items():
            writer = archive.event_writer_from_location(locations[rank])
            for kind, tick, *rest in rank_events:
                if kind in ("enter", "leave"):
                    name, reading = rest
                    if name not in regions:
                        mpi = name.startswith("MPI_")
                        regions[name] = defs.region(name, paradigm=Paradigm.MPI if mpi else Paradigm.USER,
                                                    region_role=RegionRole.FUNCTION)
                    if cpu and reading is not None:
                        writer.metric(tick, metrics["cpu"], reading)
                    getattr(writer, kind)(tick, regions[name])
                elif kind in metrics:
                    writer.metric(tick, metrics[kind], rest[0])
                elif kind == "send":
                    writer.mpi_send(tick, rest[0], world, 0, 8)
                elif kind == "recv":
                    writer.mpi_recv(tick, rest[0], world, 0, 8)
    return directory / "traces.otf2"


def cpu_time(ds: xr.Dataset) -> xr.DataArray:
    return ds["profile"].isel(run=0).sel(metric=CPU_TIME)


@pytest.mark.parametrize("value_type", [Type.UINT64, Type.INT64])
def test_each_call_holds_its_cpu_time_and_compute_the_rest(tmp_path, value_type):
    ds = perfkit.open_profile(write(tmp_path, RANKS, value_type=value_type))
    assert ds["units"].sel(metric=CPU_TIME).item() == "s"
    for rank, functions in EXPECTED.items():
        for function, ns in functions.items():
            assert cpu_time(ds).sel(rank=rank, function=function).item() == pytest.approx(ns * NS, rel=1e-12)
    assert cpu_time(ds).sel(rank=0, function="MPI_Recv").item() == 0  # a call the rank did not make
    waits = [f for f, c in zip(ds["function"].values, ds["call"].values) if f != c]
    assert waits and np.isnan(cpu_time(ds).sel(function=waits)).all()  # a call's CPU time is on its own row
    assert read_warnings(ds) == []


def test_the_metric_changes_nothing_else_and_without_it_there_is_no_cpu_time(tmp_path):
    with_cpu = perfkit.open_profile(write(tmp_path / "cpu", RANKS))
    without = perfkit.open_profile(write(tmp_path / "none", RANKS, cpu=False))
    assert CPU_TIME not in without["metric"].values
    xr.testing.assert_identical(with_cpu.drop_sel(metric=CPU_TIME).drop_vars("source"), without.drop_vars("source"))


def test_other_metrics_between_the_cpu_metric_and_its_event_are_ignored(tmp_path):
    ranks = {r: [e for ev in evs for e in ([("papi", ev[1], 7 * ev[1])] if ev[0] in ("enter", "leave") else []) + [ev]]
             for r, evs in RANKS.items()}
    ds = perfkit.open_profile(write(tmp_path, ranks))
    assert cpu_time(ds).sel(rank=1, function="MPI_Recv").item() == pytest.approx(800 * NS, rel=1e-12)
    assert read_warnings(ds) == []


@pytest.mark.parametrize("batch", [1, 2, 3, 5, 8])
def test_any_batch_size_gives_the_same_cpu_time(tmp_path, monkeypatch, batch):
    """A metric read at the end of one batch belongs to the Enter or Leave that starts the next."""
    anchor = write(tmp_path, RANKS)
    whole = perfkit.open_profile(anchor)
    monkeypatch.setattr(events, "BATCH", batch)
    xr.testing.assert_identical(perfkit.open_profile(anchor), whole)


def test_values_in_double_seconds_are_read_with_their_scale(tmp_path):
    ranks = {r: [(*ev[:3], ev[3] * NS) if ev[0] in ("enter", "leave") else ev for ev in evs]
             for r, evs in RANKS.items()}
    ds = perfkit.open_profile(write(tmp_path, ranks, value_type=Type.DOUBLE, exponent=0))
    assert cpu_time(ds).sel(rank=0, function="Compute").item() == pytest.approx(11600 * NS, rel=1e-9)


def _changed(rank0: list[Event]) -> dict[int, list[Event]]:
    return {0: rank0, 1: RANKS[1]}


#: Rank 0's events broken, the problem named and the OTF2 event position (1-based, metric events included) of the
#: first event in question.
HOSTILE = {
    "backwards": (_changed([*RANKS[0][:3], ("leave", 12, "MPI_Send", 4000), *RANKS[0][4:]]),
                  "cpu_time goes backwards", 6),
    "missing": (_changed([*RANKS[0][:4], ("enter", 20, "MPI_Barrier", None), *RANKS[0][5:]]),
                "an Enter or Leave without its cpu_time metric", 8),
    "before a send": (_changed([*RANKS[0][:2], ("cpu", 10, 5100), *RANKS[0][2:]]),
                      "a cpu_time metric not followed by an Enter or Leave at its tick", 5),
    "at another tick": (_changed([*RANKS[0][:4], ("cpu", 19, 9000), ("enter", 20, "MPI_Barrier", None),
                                  *RANKS[0][5:]]),
                        "a cpu_time metric not followed by an Enter or Leave at its tick", 8),
    "last": (_changed([*RANKS[0], ("cpu", 50, 13000)]),
             "a cpu_time metric not followed by an Enter or Leave at its tick", 14),
}


@pytest.mark.parametrize("case", HOSTILE)
@pytest.mark.parametrize("batch", [2, 65536])
def test_a_broken_metric_is_named_and_its_ranks_cpu_time_is_nan(tmp_path, monkeypatch, case, batch):
    ranks, problem, position = HOSTILE[case]
    monkeypatch.setattr(events, "BATCH", batch)
    anchor = write(tmp_path, ranks)
    ds = perfkit.open_profile(anchor)
    assert np.isnan(cpu_time(ds).sel(rank=0)).all()
    assert cpu_time(ds).sel(rank=1, function="MPI_Recv").item() == pytest.approx(800 * NS, rel=1e-12)
    (warning,) = [w for w in read_warnings(ds) if "cpu_time" in w]
    assert warning.startswith(f"{tmp_path / 'traces' / '0.evt'} (rank 0): {problem} (event {position}, tick ")
    assert warning.endswith("; the rank's cpu_time is NaN")
    time = ds["profile"].isel(run=0).sel(metric="time")
    assert time.sel(rank=0, function="MPI_Barrier").item() == pytest.approx(10 / RESOLUTION)  # the rest is read


def test_a_value_that_is_not_a_number_is_named(tmp_path):
    ranks = {r: [(*ev[:3], ev[3] * NS) if ev[0] in ("enter", "leave") else ev for ev in evs]
             for r, evs in RANKS.items()}
    ranks[1][3] = ("leave", 15, "MPI_Recv", float("nan"))
    ds = perfkit.open_profile(write(tmp_path, ranks, value_type=Type.DOUBLE, exponent=0))
    assert np.isnan(cpu_time(ds).sel(rank=1)).all() and not np.isnan(cpu_time(ds).sel(rank=0, function="Compute"))
    assert any("1.evt (rank 1): a cpu_time metric that is not a number" in w for w in read_warnings(ds))


@pytest.mark.parametrize(("options", "reason"), [({"unit": "J"}, "its unit is 'J'"),
                                                 ({"mode": MetricMode.ABSOLUTE_POINT}, "not accumulated")])
def test_a_cpu_time_metric_defined_otherwise_is_not_read(tmp_path, options, reason):
    ds = perfkit.open_profile(write(tmp_path, RANKS, **options))
    assert CPU_TIME not in ds["metric"].values
    assert any("metric cpu_time is not read" in w and reason in w for w in read_warnings(ds))
