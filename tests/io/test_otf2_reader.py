"""OTF2 reader on real Score-P traces: traffic, agreement with Score-P's own profile, registration, bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import perfkit
from perfkit.analysis.waits import breakdown
from perfkit.errors import PerfkitFormatError
from perfkit.io.registry import sniff_format
from perfkit.model import combine_runs, read_warnings, validate

DATA = Path(__file__).parents[1] / "data" / "otf2"
PING_PONG = DATA / "pipit-ping-pong" / "traces.otf2"
CASITA = DATA / "casita-10-mpi-tags" / "traces.otf2"
CASITA_CUBE = DATA / "casita-10-mpi-tags" / "profile.cubex"


@pytest.fixture(scope="module")
def casita() -> xr.Dataset:
    return perfkit.open_profile(CASITA)


def test_ping_pong_bytes_matrix_is_pipits() -> None:
    ds = perfkit.open_profile(PING_PONG)
    traffic = ds["traffic"].isel(run=0)
    np.testing.assert_array_equal(traffic.sel(quantity="bytes").values, [[0, 4177920], [4177920, 0]])
    np.testing.assert_array_equal(traffic.sel(quantity="count").values, [[0, 8], [8, 0]])
    sent = ds["profile"].isel(run=0).sel(metric="bytes_sent").sum("function")
    np.testing.assert_array_equal(sent.values, traffic.sel(quantity="bytes").sum("receiver").values)
    assert ds["format"].item() == "otf2" and ds["nprocs"].item() == 2
    assert json.loads(ds.attrs["warnings"]) == []


def test_casita_times_agree_with_scorep_profile(casita: xr.Dataset) -> None:
    """Per rank and call, the trace's time equals Score-P's profile.cubex within 1% or 1 ms."""
    cube = perfkit.open_profile(CASITA_CUBE)["profile"].isel(run=0)
    trace = casita["profile"].isel(run=0).groupby("call").sum()
    for function in cube["function"].values:
        want = cube.sel(function=function, metric="time").values
        got = trace.sel(call=function, metric="time").values
        assert np.all(np.abs(got - want) <= np.maximum(0.01 * np.abs(want), 1e-3)), function
        calls = cube.sel(function=function, metric="calls").values
        if not np.isnan(calls).all():
            np.testing.assert_array_equal(casita["profile"].isel(run=0).sel(function=function, metric="calls"), calls)


def test_casita_late_senders_in_wrong_order(casita: xr.Dataset) -> None:
    """Rank 0 waits in two receives (for rank 1, then rank 4) while earlier-sent messages are queued."""
    prof = casita["profile"].isel(run=0)
    wait = prof.sel(function="w_MPI_Recv")
    assert wait.sel(metric="calls").values.tolist() == [2] + [0] * 9
    assert wait.sel(metric="time", rank=0).item() == pytest.approx(0.231347608, abs=1e-9)
    states = casita["wait_states"].isel(run=0).sel(rank=0)
    assert states.sel(state="late_sender_wrong_order").item() == states.sel(state="late_sender").item()
    # the call keeps the rest as transfer: together they are the time spent in MPI_Recv
    total = prof.sel(function=["MPI_Recv", "w_MPI_Recv"], metric="time", rank=0).sum().item()
    assert total == pytest.approx(0.2315044, abs=1e-6)
    assert casita["kind"].sel(function="w_MPI_Recv").item() == "wait_late_sender"


def test_wait_analyses_read_the_measured_waits(casita: xr.Dataset) -> None:
    parts = breakdown(casita)
    assert not parts["estimated"].item()
    assert parts["time"].sel(kind="wait_late_sender", rank=0).item() == pytest.approx(0.231347608, abs=1e-9)


def test_sniffed_engine_and_folder(tmp_path: Path) -> None:
    assert sniff_format(PING_PONG) == "otf2"
    assert sniff_format(PING_PONG.parent) == "otf2"
    ds = xr.open_dataset(PING_PONG, engine="otf2")
    validate(ds)
    assert perfkit.open_profile(PING_PONG.parent)["traffic"].sum().item() == ds["traffic"].sum().item()
    both = combine_runs([ds, perfkit.open_profile(CASITA)], labels=["ping-pong", "casita"])
    assert both.sizes["run"] == 2 and "w_MPI_Recv" in both["function"].values


def test_round_trip_netcdf(tmp_path: Path, casita: xr.Dataset) -> None:
    casita.to_netcdf(tmp_path / "c.nc")
    back = xr.load_dataset(tmp_path / "c.nc")
    xr.testing.assert_identical(back, casita)


# --- bad input -------------------------------------------------------------------------------


def _copy(tmp_path: Path, source: Path = PING_PONG) -> Path:
    target = tmp_path / "trace"
    shutil.copytree(source.parent, target)
    for path in target.rglob("*"):
        path.chmod(0o644 if path.is_file() else 0o755)
    return target / "traces.otf2"


def _refused(path: Path, *words: str) -> PerfkitFormatError:
    with pytest.raises(PerfkitFormatError) as info:
        perfkit.open_profile(path, format="otf2")
    message = str(info.value)
    assert "traces.otf2" in message or "traces/" in message, message
    for word in words:
        assert word in message, message
    return info.value


def test_missing_definitions(tmp_path: Path) -> None:
    anchor = _copy(tmp_path)
    anchor.with_suffix(".def").unlink()
    _refused(anchor, "traces.def", "expected")


def test_missing_events_folder(tmp_path: Path) -> None:
    anchor = _copy(tmp_path)
    shutil.rmtree(anchor.with_suffix(""))
    _refused(anchor, "traces/", "expected")


def test_missing_events_file(tmp_path: Path) -> None:
    anchor = _copy(tmp_path)
    (anchor.with_suffix("") / "1.evt").unlink()
    error = _refused(anchor, "rank 1", "expected")
    assert error.member == "traces/1.evt"


@pytest.mark.parametrize("member", ["traces/0.evt", "traces.def", "traces.otf2"])
def test_truncated_file(tmp_path: Path, member: str) -> None:
    anchor = _copy(tmp_path)
    path = anchor.parent / member
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    _refused(anchor, "expected")


def test_not_an_anchor(tmp_path: Path) -> None:
    path = tmp_path / "traces.otf2"
    path.write_text("not a trace\n")
    with pytest.raises(PerfkitFormatError, match="not a recognised profile format"):
        perfkit.open_profile(path)
    _refused(path, "no OTF2 anchor header", "expected")


def test_events_a_full_buffer_dropped_are_stated_not_invented(tmp_path: Path) -> None:
    """Rank 1's buffer was full for its second receive (3 events: enter, receive, leave): the reader
    says how many events each rank lost, keeps the send it saw, and invents no receive or wait."""
    from tests.io.otf2_writer import Call, Trace, write_trace

    calls = {0: [Call("MPI_Send", 10, 12, send=[(1, 0, 8)]), Call("MPI_Send", 20, 22, send=[(1, 0, 8)])],
             1: [Call("MPI_Recv", 5, 13, recv=[(0, 0, 8)])]}
    ds = perfkit.open_profile(write_trace(tmp_path, Trace(calls, end=40,
                                                          properties={1: {"perfkit::events_dropped": 3}})))
    warnings = " ".join(read_warnings(ds))
    assert "dropped 3 events" in warnings and "rank 1: 3" in warnings
    assert "1 sends and 0 receives have no partner" in warnings
    np.testing.assert_array_equal(ds["events_dropped"].isel(run=0).values, [0, 3])
    profile = ds["profile"].isel(run=0)
    assert profile.sel(rank=0, function="MPI_Send", metric="calls_sent").item() == 2
    assert profile.sel(rank=1, function="MPI_Recv", metric="calls_recv").item() == 1
    assert profile.sel(rank=1, function="MPI_Recv", metric="bytes_recv").item() == 8
    assert ds["traffic"].isel(run=0).sel(sender=0, receiver=1, quantity="count").item() == 2


def test_a_trace_that_lost_nothing_has_no_dropped_events(tmp_path: Path) -> None:
    from tests.io.otf2_writer import Call, Trace, write_trace

    calls = {0: [Call("MPI_Send", 10, 12, send=[(1, 0, 8)])], 1: [Call("MPI_Recv", 5, 13, recv=[(0, 0, 8)])]}
    none = {"perfkit::events_dropped": 0}
    ds = perfkit.open_profile(write_trace(tmp_path, Trace(calls, end=40, properties={0: none, 1: none})))
    assert "events_dropped" not in ds
    assert not any("dropped" in w for w in read_warnings(ds))
