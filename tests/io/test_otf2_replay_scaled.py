"""Replays of a trace on faster networks and with balanced compute (``perfkit.io.otf2.replay``).

Written traces have their runtime known by construction at every scale of the calls' own time; on
real traces (the bundled lab runs and Score-P traces) the replay as measured must give back the
trace's own runtime, and the runtime must be convex and non-decreasing in the scale (a maximum of
paths linear in it), which ``whatif`` relies on to bound networks between the replayed ones.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import perfkit
from perfkit.analysis.pop import pop_metrics
from perfkit.io.otf2.replay import TRANSFER_SCALES, balanced
from tests.helpers import ROOT
from tests.io.otf2_writer import RESOLUTION, Call, Trace, exchange_trace, pipeline_trace, write_trace

LAB = sorted((ROOT / "data" / "lab" / "traces").glob("*.otf2"))
SCORE_P = sorted((ROOT / "tests" / "data" / "otf2").glob("*/traces.otf2"))


def _replays(anchor: Path) -> tuple[np.ndarray, float]:
    ds = perfkit.open_profile(anchor)
    assert ds["transfer_scale"].values.tolist() == list(TRANSFER_SCALES)
    return ds["replay_network"].isel(run=0).values, float(ds["replay_balanced"].isel(run=0))


def test_a_balanced_exchange_takes_its_transfers_scaled(tmp_path: Path) -> None:
    """Each step every rank computes 200 ticks, sends both neighbours a message and receives theirs in an
    MPI_Recv of ``delay`` ticks that waits for no one: the run takes steps x (200 + scale x delay)."""
    nranks, steps, compute, delay = 3, 5, 200, 40
    network, _ = _replays(write_trace(tmp_path, exchange_trace(nranks, steps, compute, delay)))
    expected = [steps * (compute + scale * delay) / RESOLUTION for scale in TRANSFER_SCALES]
    assert network == pytest.approx(expected)


def test_a_pipeline_pays_each_hop_scaled(tmp_path: Path) -> None:
    """Rank r receives from r - 1, computes, sends on; each message arrives ``delay`` ticks after its send
    began: n x compute + (n - 1) x scale x delay."""
    nranks, compute, delay = 4, 1000, 32  # a whole number of ticks at every scale
    trace, _ = pipeline_trace(nranks, compute, delay)
    network, _ = _replays(write_trace(tmp_path, trace))
    expected = [(nranks * compute + (nranks - 1) * scale * delay) / RESOLUTION for scale in TRANSFER_SCALES]
    assert network == pytest.approx(expected)


@pytest.mark.parametrize("collective", ["MPI_Barrier", "MPI_Allreduce"])
def test_balanced_compute_removes_the_imbalance_before_a_collective(tmp_path: Path, collective: str) -> None:
    """Ranks compute 100, 200, 300 ticks, then a collective ends 5 ticks after the last enters: balanced, each
    computes 200, so a step takes 205 ticks instead of 305."""
    steps, slow = 4, 300
    calls = {r: [Call(collective, k * (slow + 5) + 100 * (r + 1), (k + 1) * (slow + 5)) for k in range(steps)]
             for r in range(3)}
    network, balance = _replays(write_trace(tmp_path, Trace(calls, end=steps * (slow + 5))))
    assert network[0] == pytest.approx(steps * (slow + 5) / RESOLUTION)
    assert balance == pytest.approx(steps * 205 / RESOLUTION)


def test_balanced_factors():
    assert balanced(np.array([100, 200, 300])) == pytest.approx([2.0, 1.0, 2 / 3])
    assert balanced(np.array([0, 200])).tolist() == [1.0, 0.5]


@pytest.mark.parametrize("anchor", LAB + SCORE_P, ids=lambda p: p.parent.name if p.name == "traces.otf2" else p.name)
def test_replay_as_measured_gives_back_the_runtime_and_is_convex(anchor: Path) -> None:
    network, _ = _replays(anchor)
    elapsed = float(pop_metrics(perfkit.open_profile(anchor))["elapsed"].isel(run=0))
    assert network[0] == pytest.approx(elapsed, rel=0.04)  # the lab's 0.6-3.5%, Score-P's 0-3%
    scales = np.array(TRANSFER_SCALES)
    assert (np.diff(network) <= 1e-9).all()  # scales fall: never slower
    # convex: each replay at or below the chord of its neighbours (1 us: each call's scaled time is rounded to a tick)
    a, b, c = scales[:-2], scales[1:-1], scales[2:]
    chord = network[:-2] + (network[2:] - network[:-2]) * (b - a) / (c - a)
    assert (network[1:-1] <= chord + 1e-6).all()
