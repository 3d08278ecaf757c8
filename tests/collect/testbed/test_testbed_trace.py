"""``perfkit collect --trace`` across the testbed's nodes, whose monotonic clocks read whole seconds apart.

Each node runs in a time namespace of its own (``Testbed(clock_skew=2)``: node ``i`` reads ``2 i`` s
ahead), so the offsets the collector must find and remove are known exactly, by construction, and are
not those of one shared clock. Checked on a lab run with a known cause (dynamic imbalance: rank
``k mod n`` computes longer in step ``k``) on 4 nodes × 2 ranks:

* the offset the collector states for each rank equals its node's injected offset within the error
  bound it states;
* by the OTF2 library's own ``otf2-print`` (not our reader): no message is received before it was sent,
  on or across nodes, beyond that bound — two seconds of skew left in would show as seconds;
* the send-late time read from the trace equals the lab's truth of this very run (its compute intervals,
  put on one clock with the injected offsets) within 10 % or 2 ms per step;
* ``diagnose`` on the trace names the late rank of every step, where the profile cannot tell.
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from collections import defaultdict, deque

import numpy as np
import pytest

import perfkit
from perfkit.collect import lab
from perfkit.collect.lab.noise import exchange_delay
from perfkit.collect.testbed import Testbed
from perfkit.collect.testbed.collector import collect_on
from perfkit.collect.trace import trace_summary
from tests.collect.testbed.testbed_support import WHY_NO_OPENMPI, WHY_NO_TESTBED
from tests.helpers import skip_when_noisy, with_noise

NO_OTF2 = None if shutil.which("otf2-config") and shutil.which("otf2-print") else \
    "otf2-config or otf2-print not on PATH (Debian: apt install libotf2-trace-dev otf2-tools)"
pytestmark = [pytest.mark.skipif(WHY_NO_TESTBED is not None, reason=WHY_NO_TESTBED or ""),
              pytest.mark.skipif(WHY_NO_OPENMPI is not None, reason=WHY_NO_OPENMPI or ""),
              pytest.mark.skipif(NO_OTF2 is not None, reason=NO_OTF2 or ""),
              pytest.mark.timeout(900)]

NODES, CORES, SKEW = 4, 2, 2
NPROCS = NODES * CORES
CONFIG = {"steps": 16, "step_seconds": 0.01, "extra_seconds": 0.02}
WAIT_REL, WAIT_FLOOR_PER_STEP = 0.10, 0.002  # [-, s]


@pytest.fixture(scope="module")
def skewed_run(tmp_path_factory):
    """The dynamic-imbalance lab run on the skewed testbed, traced; its trace read back; the scheduling
    noise it ran in [s per step]; the injected offset of each rank's node [s]."""
    workdir = tmp_path_factory.mktemp("testbed-trace")
    # undilated: the lab's compute sleeps, so dilation would only slow its MPI calls (k times) against the
    # truth's zero-cost model, and the run would always be too noisy to check
    with Testbed(NODES, CORES, clock_skew=SKEW, dilation=1) as tb:
        offsets = tb.clock_offsets()
        run, noise = with_noise(lambda: lab.run("dynamic_imbalance", NPROCS, workdir=workdir, timeout=300, trace=True,
                                                collector=collect_on(tb), clock_offsets=offsets, **CONFIG),
                                exchange_delay)
    assert run.trace is not None and run.profile is not None, run.message
    hosts = [str(h) for h in run.profile["host"].isel(run=0).values]
    assert len(set(hosts)) == NODES, hosts
    return run, perfkit.open_profile(run.trace), noise, np.array([offsets[h] for h in hosts], dtype=float)


def test_the_collector_finds_each_nodes_clock_offset(skewed_run):
    run, _, _, injected = skewed_run
    summary = trace_summary(run.trace)
    assert injected.max() == SKEW * (NODES - 1)
    # the collector's offset is what it adds to a rank's clock to read rank 0's
    error = np.abs(summary.clock_offset + injected - injected[0])
    assert (error <= summary.clock_offset_bound).all(), (summary.clock_offset, summary.clock_offset_bound)
    assert summary.clock_offset_bound.max() < 0.01  # a round trip between nodes: milliseconds at most


_SEND = re.compile(r"^MPI_I?SEND\s+(\d+)\s+(\d+)\s+Receiver: (\d+) .*?Communicator: \"MPI_COMM_WORLD\".*?Tag: (\d+)",
                   re.M)
_RECV = re.compile(r"^MPI_I?RECV\s+(\d+)\s+(\d+)\s+Sender: (\d+) .*?Communicator: \"MPI_COMM_WORLD\".*?Tag: (\d+)",
                   re.M)


def test_no_message_arrives_before_it_was_sent(skewed_run):
    """Messages of one sender, receiver, communicator and tag arrive in order (MPI's non-overtaking rule), so
    the k-th receive completes after the k-th send began, whatever the clocks."""
    run, _, _, injected = skewed_run
    text = subprocess.run(["otf2-print", str(run.trace / "traces.otf2")], capture_output=True, text=True,
                          check=True).stdout
    sent: dict[tuple[int, int, int], deque[int]] = defaultdict(deque)
    for rank, time, peer, tag in _SEND.findall(text):
        sent[(int(rank), int(peer), int(tag))].append(int(time))
    resolution = 1e9  # ticks per second of the collector's archives
    gaps = {"same node": [], "across nodes": []}
    received = 0
    for rank, time, peer, tag in _RECV.findall(text):
        send = sent[(int(peer), int(rank), int(tag))].popleft()
        where = "same node" if injected[int(rank)] == injected[int(peer)] else "across nodes"
        gaps[where].append((int(time) - send) / resolution)
        received += 1
    assert received == sum(run.truth["traffic_count"].values.ravel())
    assert all(not q for q in sent.values()), "sends the trace never received"
    bound = float(trace_summary(run.trace).clock_offset_bound.max())
    for where, values in gaps.items():
        assert values, f"no message {where}"
        assert min(values) >= -bound, f"{where}: a message received {-min(values):.6f} s before it was sent"


def test_send_late_time_from_the_trace_equals_the_lab_truth(skewed_run):
    run, ds, noise, _ = skewed_run
    skip_when_noisy(noise, WAIT_FLOOR_PER_STEP)
    floor = WAIT_FLOOR_PER_STEP * CONFIG["steps"]
    measured = lab.measured(ds)["send_late"].sum("function").values
    for name, truth in (("realised", run.realised), ("prescribed", run.truth)):
        expected = truth["send_late"].sum("function").values
        off = [r for r in range(NPROCS) if lab.deviation(float(measured[r]), float(expected[r]), WAIT_REL, floor) > 0]
        if not off:
            return
        problems = ", ".join(f"rank {r}: trace {measured[r]:.4f} s, {name} truth {expected[r]:.4f} s" for r in off)
    pytest.fail(f"send-late time off both truths: {problems}")


def test_the_realised_truth_needs_the_offsets(skewed_run):
    """Without the injected offsets the recorded intervals of different nodes are seconds apart: the lab's
    own truth would be wrong by seconds, which is why ``clock_offsets`` exists."""
    run, _, _, _ = skewed_run
    intervals = lab.read_record(run.path.with_suffix(".compute"), NPROCS)
    unaligned = lab.truth("dynamic_imbalance", NPROCS, realised=intervals, **run.params)
    assert float(unaligned["send_late"].sum("function").max()) > SKEW
    assert math.isclose(float(run.realised["send_late"].sum()), float(run.truth["send_late"].sum()), rel_tol=0.5)


def test_diagnose_names_the_late_rank_of_every_step(skewed_run):
    run, ds, noise, _ = skewed_run
    skip_when_noisy(noise, WAIT_FLOOR_PER_STEP)
    late = ds["phases"].isel(run=0).sel(phase_stat="late_rank").to_pandas()
    waitall = late[late.index.str.startswith("MPI_Waitall#")]
    assert waitall.astype(int).tolist() == [k % NPROCS for k in range(CONFIG["steps"])]
    table = perfkit.diagnose(ds)
    assert "dynamic_imbalance" in set(table["category"])
    profile = perfkit.diagnose(run.profile)
    assert profile["text"].str.contains("cannot tell").any() or profile["title"].str.contains("cannot tell").any()
