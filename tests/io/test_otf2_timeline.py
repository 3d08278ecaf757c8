"""The OTF2 timeline on traces written with exact timestamps: each bin's seconds per kind equal their definition."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

import perfkit
from perfkit.io.otf2 import events
from perfkit.model import KINDS
from tests.io.otf2_writer import RESOLUTION, Call, Trace, write_trace

K = {kind: i for i, kind in enumerate(KINDS)}


def _ticks(ds: xr.Dataset) -> np.ndarray:
    """(rank, bin, kind) timeline in ticks."""
    return np.rint(ds["timeline"].isel(run=0).values * RESOLUTION).astype(int)


def _binned(kinds_per_tick: np.ndarray, nbins: int, width: int) -> np.ndarray:
    """(rank, bin, kind) ticks of a per-tick kind table (rank, tick); -1 = no kind."""
    nranks, length = kinds_per_tick.shape
    padded = np.full((nranks, nbins * width), -1)
    padded[:, :length] = kinds_per_tick
    out = np.zeros((nranks, nbins, len(KINDS)), dtype=int)
    for k in range(len(KINDS)):
        out[..., k] = (padded == k).reshape(nranks, nbins, width).sum(axis=2)
    return out


def test_late_sender_bins(tmp_path: Path) -> None:
    """Rank 1 waits in MPI_Recv from 100 (its enter) to 400 (the send's enter), then transfers to 600."""
    trace = Trace({0: [Call("MPI_Send", 400, 450, send=[(1, 7, 64)])],
                   1: [Call("MPI_Recv", 100, 600, recv=[(0, 7, 64)])]}, end=1000)
    ds = perfkit.open_profile(write_trace(tmp_path, trace), timeline_bins=4)
    got = _ticks(ds)
    assert got[0, :, K["compute"]].tolist() == [250, 200, 250, 250]
    assert got[0, :, K["transfer"]].tolist() == [0, 50, 0, 0]
    assert got[1, :, K["wait_late_sender"]].tolist() == [150, 150, 0, 0]
    assert got[1, :, K["transfer"]].tolist() == [0, 100, 100, 0]
    assert got[1, :, K["compute"]].tolist() == [100, 0, 150, 250]
    assert ds["time"].isel(run=0).values.tolist() == pytest.approx([125e-6, 375e-6, 625e-6, 875e-6])
    assert ds["time_bin_width"].item() == pytest.approx(250e-6)
    assert ds["timeline"].attrs["units"] == "s"


def test_late_receiver_and_collective_bins(tmp_path: Path) -> None:
    """MPI_Send blocked from 100 until the receive was posted at 400; barrier waits up to the last enter."""
    trace = Trace({
        0: [Call("MPI_Send", 100, 700, send=[(1, 1, 4096)]), Call("MPI_Barrier", 800, 950)],
        1: [Call("MPI_Recv", 400, 700, recv=[(0, 1, 4096)]), Call("MPI_Barrier", 900, 950)],
    }, end=1000)
    ds = perfkit.open_profile(write_trace(tmp_path, trace), timeline_bins=10)
    got = _ticks(ds)
    assert got[0, :, K["wait_late_receiver"]].tolist() == [0, 100, 100, 100, 0, 0, 0, 0, 0, 0]
    assert got[0, :, K["transfer"]].tolist() == [0, 0, 0, 0, 100, 100, 100, 0, 0, 50]
    assert got[0, :, K["wait_collective"]].tolist() == [0] * 8 + [100, 0]
    assert got[1, :, K["wait_collective"]].tolist() == [0] * 10
    np.testing.assert_array_equal(got.sum(axis=2), 100)


@settings(max_examples=15, deadline=None, phases=[Phase.explicit, Phase.generate])
@given(steps=st.lists(st.tuples(st.integers(0, 60), st.integers(0, 60), st.integers(0, 60)), min_size=1,
                      max_size=4),
       nbins=st.integers(1, 23))
def test_bins_equal_their_definition(steps: list[tuple[int, int, int]], nbins: int) -> None:
    """Per step: rank 0 computes then sends to rank 1, which receives; then all three meet at a barrier.

    The reference classifies every tick by hand (late sender from the receive's enter to the send's,
    late receiver from the send's enter to the receive's when the send had not left, barrier wait
    until the last enter) and bins the ticks; the reader must agree in every bin.
    """
    calls: dict[int, list[Call]] = {0: [], 1: [], 2: []}
    t = 0
    end_steps = []
    for delay0, delay1, delay2 in steps:
        send, recv = t + 10 + delay0, t + 10 + delay1
        recv_leave = max(send, recv) + 5
        calls[0].append(Call("MPI_Send", send, send + 3, send=[(1, 0, 8)]))
        calls[1].append(Call("MPI_Recv", recv, recv_leave, recv=[(0, 0, 8)]))
        enters = [send + 5, recv_leave + 2, t + 10 + delay2]
        leave = max(enters) + 4
        for r, e in enumerate(enters):
            calls[r].append(Call("MPI_Barrier", e, leave))
        end_steps.append((send, recv, recv_leave, enters, leave))
        t = leave
    end = t + 7
    ref = np.full((3, end), K["compute"])
    for send, recv, recv_leave, enters, leave in end_steps:
        ref[0, send:send + 3] = K["transfer"]
        if send < recv < send + 3:  # the send was still inside MPI_Send when the receive was posted
            ref[0, send:recv] = K["wait_late_receiver"]
        ref[1, recv:recv_leave] = K["transfer"]
        ref[1, recv:max(send, recv)] = K["wait_late_sender"]
        for r, e in enumerate(enters):
            ref[r, e:leave] = K["transfer"]
            ref[r, e:max(enters)] = K["wait_collective"]
    with tempfile.TemporaryDirectory() as tmp:
        ds = perfkit.open_profile(write_trace(Path(tmp), Trace(calls, end=end)), timeline_bins=nbins)
    width = -(-end // nbins)
    np.testing.assert_array_equal(_ticks(ds), _binned(ref, nbins, width))


def test_transitions_folded_in_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Folding the buffered transitions every few events gives the same bins as folding them once."""
    calls = {r: [Call("MPI_Barrier", 10 + 20 * k + 3 * r, 25 + 20 * k) for k in range(40)] for r in range(2)}
    anchor = write_trace(tmp_path, Trace(calls, end=1000))
    once = _ticks(perfkit.open_profile(anchor, timeline_bins=7))
    monkeypatch.setattr(events, "BATCH", 3)
    np.testing.assert_array_equal(_ticks(perfkit.open_profile(anchor, timeline_bins=7)), once)


def test_no_timeline_when_zero_bins(tmp_path: Path) -> None:
    anchor = write_trace(tmp_path, Trace({0: [Call("MPI_Barrier", 1, 2)], 1: [Call("MPI_Barrier", 1, 2)]}, end=5))
    ds = perfkit.open_profile(anchor, timeline_bins=0)
    assert "timeline" not in ds and "time_bin" not in ds.dims
    with pytest.raises(ValueError, match="timeline_bins"):
        perfkit.open_profile(anchor, timeline_bins=-1)


def test_combined_and_stored_runs_keep_the_timeline(tmp_path: Path) -> None:
    """Runs with different lengths and bin counts combine along run (NaN past a run's bins) and round-trip."""
    a = write_trace(tmp_path / "a", Trace({0: [Call("MPI_Barrier", 100, 300)], 1: [Call("MPI_Barrier", 200, 300)]},
                                          end=400))
    b = write_trace(tmp_path / "b", Trace({r: [Call("MPI_Barrier", 50 * r, 400)] for r in range(3)}, end=1000))
    runs = [perfkit.open_profile(a, timeline_bins=4, label="a"), perfkit.open_profile(b, timeline_bins=5, label="b")]
    both = perfkit.combine_runs(runs)
    assert both["timeline"].dims == ("run", "rank", "time_bin", "timeline_kind")
    for run in runs:
        label = str(run["run"].item())
        sel = both.sel(run=label, rank=run["rank"], time_bin=run["time_bin"])
        np.testing.assert_array_equal(sel["timeline"].values, run["timeline"].isel(run=0).values)
        np.testing.assert_array_equal(sel["time"].values, run["time"].isel(run=0).values)
    assert np.isnan(both["time"].sel(run="a", time_bin=4)) and np.isnan(both["timeline"].sel(run="a", rank=2)).all()
    for name in ("both.nc", "both.zarr"):
        back = perfkit.load(perfkit.save(both, tmp_path / name))
        xr.testing.assert_identical(back["timeline"], both["timeline"])
        xr.testing.assert_identical(back["time"], both["time"])
