"""Time dilation: each node computes on its CPU quota (cores / k of this machine's) and its link runs k
times slower, so that a program that computes keeps its cluster time (wall / k) however many nodes
share the machine; the quota applies (the node is throttled, its ranks' CPU capped); the links still
reach their dilated rate; and the CPU groups go as the namespaces do."""

from __future__ import annotations

import os
import statistics
import subprocess
from pathlib import Path

import pytest

from perfkit.collect.testbed import Testbed, TestbedSpec, cpu
from perfkit.collect.testbed.cluster import machine_cores
from perfkit.collect.testbed.spec import HEADROOM_CORES, NETWORK_CORES_PER_BIT_S, auto_dilation
from tests.collect.testbed.testbed_support import WHY_NO_OPENMPI, WHY_NO_TESTBED, build_spin, spin_times, transfer

WHY_NO_QUOTA = WHY_NO_TESTBED or cpu.why_no_quota(cpu.controller())
with_quotas = pytest.mark.skipif(WHY_NO_QUOTA is not None, reason=WHY_NO_QUOTA or "")
SPIN = ("30000000", "4")  # iterations a step, steps: about 0.25 s of CPU a rank


def test_auto_dilation_fits_the_nodes_and_their_links_work_in_the_machines_cores_less_a_headroom():
    need = 4 * (2 + NETWORK_CORES_PER_BIT_S * 200e6)  # cores for the ranks, the kernel's work on the links
    assert auto_dilation(4, 2, 2, 200e6) == pytest.approx(need / (2 - HEADROOM_CORES), abs=0.01)
    assert auto_dilation(4, 2, 2, 200e6) >= need / (2 - HEADROOM_CORES)  # rounded up: never asking for more
    assert auto_dilation(4, 2, 2, 1e9) > auto_dilation(4, 2, 2, 200e6)
    assert auto_dilation(1, 1, 64, 200e6) == 1.0
    spec = TestbedSpec(4, 2, bandwidth=200e6, latency=1e-4, dilation=4.0)
    assert (spec.link_rate, spec.link_latency, spec.node_cpu) == (50e6, 4e-4, 0.5)
    assert spec.as_dict()["bandwidth"] == 200e6 and spec.as_dict()["link_rate"] == 50e6
    for bad in (0.5, "x"):
        with pytest.raises(ValueError, match="--dilation"):
            Testbed(2, 1, dilation=bad)


def test_the_cpu_controller_is_found_in_mountinfo(tmp_path):
    v1 = "33 25 0:29 / /sys/fs/cgroup/cpu rw,relatime shared:10 - cgroup cgroup rw,cpu\n"
    assert cpu.controller(v1) == cpu.Controller(Path("/sys/fs/cgroup/cpu"), 1)
    (tmp_path / "cgroup.subtree_control").write_text("cpuset cpu io memory pids\n")
    v2 = f"35 25 0:30 / {tmp_path} rw,relatime shared:11 - cgroup2 cgroup2 rw\n"
    assert cpu.controller(v1 + v2) == cpu.Controller(tmp_path, 2)  # v2 when it holds the controller
    (tmp_path / "cgroup.subtree_control").write_text("memory pids\n")
    assert cpu.controller(v1 + v2).version == 1
    assert cpu.controller("36 25 0:31 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n") is None
    assert cpu.period_for(0.01) == pytest.approx(0.1) and cpu.period_for(2) == cpu.PERIOD_S
    assert cpu.period_for(0.025) == pytest.approx(0.04)  # a quota of at least 1 ms


def test_without_a_cpu_controller_the_default_is_undilated_and_a_factor_is_refused(monkeypatch):
    from perfkit.collect.testbed import cluster

    monkeypatch.setattr(cpu, "controller", lambda: None)
    monkeypatch.setattr(cluster, "machine_cores", lambda: 2)
    tb = Testbed(4, 2)
    assert tb.dilation == 1 and any("no CPU quotas" in note for note in tb.notes)
    if WHY_NO_TESTBED is None:
        with pytest.raises(RuntimeError, match="time dilation needs CPU quotas"):
            Testbed(4, 2, dilation=2).__enter__()


@with_quotas
def test_leftovers_are_only_groups_of_dead_testbeds_and_running_ones_are_counted():
    ctl = cpu.controller()
    foreign = [f"{cpu.PREFIX}{os.getpid()}-abc123-node000", "pktbx-1-abc123-node000", f"{cpu.PREFIX}notours"]
    cpu.create(ctl, foreign[0], 0.5, slots=3, heavy=False)
    assert (ctl.group(foreign[0]) / ("cpu.shares" if ctl.version == 1 else "cpu.weight")).read_text().strip() == \
        ("3072" if ctl.version == 1 else "300")  # as three busy processes
    for name in foreign[1:]:
        ctl.group(name).mkdir()
    try:
        assert not set(foreign) & set(cpu.leftovers(ctl))
        assert foreign[0] in cpu.leftovers(ctl, owner_alive=lambda pid: False)  # its owner gone: it would go
        assert not set(foreign[1:]) & set(cpu.leftovers(ctl, owner_alive=lambda pid: False))
        # a running testbed's quota is seen by the others, not by itself
        only_this_process = {"owner_alive": lambda pid: pid == os.getpid()}  # not another session's testbed
        assert cpu.held_by_others(ctl, f"{cpu.PREFIX}0-000000-", **only_this_process) == 0.5
        assert cpu.held_by_others(ctl, f"{cpu.PREFIX}{os.getpid()}-abc123-", **only_this_process) == 0.0
    finally:
        for name in foreign:
            ctl.group(name).rmdir()


@with_quotas
def test_groups_go_with_the_testbed_on_an_exception():
    ctl = cpu.controller()
    with pytest.raises(RuntimeError, match="the command's own"):
        with Testbed(2, 1) as tb:
            groups = [ctl.group(tb.namespace(n)) for n in tb.spec.node_names]
            assert all(g.is_dir() for g in groups)
            period = cpu.period_for(tb.spec.node_cpu)
            assert cpu.quota(ctl, tb.namespace("node000")) == pytest.approx((tb.spec.node_cpu * period, period))
            raise RuntimeError("the command's own failure")
    assert not any(g.exists() for g in groups)


def _spin(tb: Testbed, exe: Path, tmp_path: Path) -> tuple[list[tuple[float, float]], dict]:
    nranks = tb.spec.nodes * tb.spec.cores
    log = tmp_path / f"spin-{tb.spec.nodes}-{tb.dilation:g}.out"
    with open(log, "w") as fh:
        report = tb.run(["mpirun", "-np", str(nranks), str(exe), *SPIN], stdout=fh, timeout=300)
    times = spin_times(log.read_text())
    assert report["exit_status"] == 0 and len(times) == nranks, log.read_text()
    return times, report


@with_quotas
@pytest.mark.skipif(WHY_NO_OPENMPI is not None, reason=WHY_NO_OPENMPI or "")
@pytest.mark.timeout(600)
def test_compute_time_stays_constant_in_cluster_time_and_the_quota_applies(tmp_path):
    """Each rank's compute time in cluster time on 1, 2 and 4 nodes × 2 cores (dilation auto) stays within
    25% of its CPU time (what it takes on a core of its own); without dilation it grows with the
    oversubscription (8 ranks on this machine's 2 cores). On 4 dilated nodes every node is throttled and
    its ranks together use at most its quota."""
    if machine_cores() != 2:
        pytest.skip(f"calibrated for 2 cores (this machine has {machine_cores()})")
    exe = build_spin(tmp_path)
    stretch = {}  # compute time in cluster time / CPU time, mean over ranks
    shared = []  # notes of other testbeds running meanwhile
    for nodes in (1, 2, 4):
        with Testbed(nodes, 2, dilation="auto") as tb:
            times, report = _spin(tb, exe, tmp_path)
            shared += [note for note in tb.notes if "other testbeds running" in note]
        stretch[nodes] = statistics.mean(w / report["dilation"] / c for w, c in times)
    assert report["dilation"] == auto_dilation(4, 2, 2, tb.spec.bandwidth)
    assert report["cluster_s"] == pytest.approx(report["wall_s"] / report["dilation"])
    for ranks_of_node, throttled in zip((times[0:2], times[2:4], times[4:6], times[6:8]), report["cpu"]):
        assert throttled["throttled"] > 0
        assert sum(c / w for w, c in ranks_of_node) < 1.15 * tb.spec.node_cpu  # CPU per wall second: capped
    with Testbed(4, 2, dilation=1) as tb:
        assert any("quotas ask for 8 cores" in note for note in tb.notes)
        plain, _ = _spin(tb, exe, tmp_path)
    undilated = statistics.mean(w / c for w, c in plain)
    if shared and not all(0.8 < s < 1.25 for s in stretch.values()):
        pytest.skip(f"another testbed took this one's cores ({shared[0]}): stretch {stretch}")
    assert all(0.8 < s < 1.25 for s in stretch.values()), (stretch, os.getloadavg())
    assert undilated > 2, (undilated, os.getloadavg())


@with_quotas
def test_a_transfer_between_dilated_nodes_reaches_its_dilated_rate():
    with Testbed(2, 2, bandwidth="200mbit", dilation="auto") as tb:
        assert tb.dilation > 1
        rate = transfer(tb, 20_000_000)
    assert 0.95 * tb.spec.link_rate < rate < 1.01 * tb.spec.link_rate, (rate, tb.spec.link_rate)


@with_quotas
def test_every_process_of_a_node_is_in_its_group_also_when_started_from_another_node():
    with Testbed(2, 1) as tb:
        nested = tb.command_on("node000", tb.command_on("node001", ["cat", "/proc/self/cgroup"]))
        out = subprocess.run(nested, capture_output=True, text=True, check=True).stdout
    assert f":cpu:/{tb.namespace('node001')}" in out or f"::/{tb.namespace('node001')}" in out


def test_perfkit_loop_passes_the_dilation_through(monkeypatch, tmp_path):
    import perfkit.collect.testbed as testbed
    from perfkit.cli import main
    from perfkit.collect.testbed import loop

    asked = {}
    monkeypatch.setattr(testbed, "why_unavailable", lambda: None)
    monkeypatch.setattr(loop, "place_and_rerun", lambda program, **kw: asked.update(kw) or [])
    for given, passed in (("3.5", 3.5), ("auto", "auto"), (None, None)):
        argv = ["--dilation", given] if given else []
        assert main(["loop", "--nodes", "2", "--cores", "1", "-o", str(tmp_path), *argv, "--", "true"]) == 0
        assert asked["dilation"] == passed
