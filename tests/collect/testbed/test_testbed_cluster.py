"""The testbed's life cycle: nodes with their own host names, and nothing left behind, whatever happens."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perfkit.collect.testbed import Testbed, TestbedSpec, cpu, netns, parse_rate, parse_time
from tests.collect.testbed.testbed_support import WHY_NO_TESTBED

root_only = pytest.mark.skipif(WHY_NO_TESTBED is not None, reason=WHY_NO_TESTBED or "")
PERFKIT = [str(Path(sys.executable).with_name("perfkit"))]


def _host_links() -> list[str]:
    out = subprocess.run(["ip", "-j", "link", "show"], capture_output=True, text=True, check=True).stdout
    return sorted(link["ifname"] for link in json.loads(out))


def _ours(tag: str) -> list[str]:
    return [n for n in netns.namespaces() if n.startswith(f"{netns.PREFIX}{tag}")]


def _groups(tag: str) -> list[str]:
    """CPU groups of testbed ``tag`` (none without a cpu controller)."""
    ctl = cpu.controller()
    return sorted(p.name for p in ctl.root.glob(f"{netns.PREFIX}{tag}*")) if ctl else []


def _processes_with(marker: str) -> list[int]:
    """Processes whose command line is exactly ``marker``."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip() == marker:
                    found.append(int(proc.name))
            except OSError:
                pass
    return found


def _signals_as_from_a_shell() -> None:
    """In the child before exec: SIGINT, SIGTERM and SIGHUP at their defaults and not blocked, as a shell
    starts a command (a disposition or mask that another test left in this process must not carry over)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})


def _wait_for(condition, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.05)


def test_rates_and_latencies_parse_with_units():
    assert parse_rate("200mbit") == 200e6 and parse_rate("1gbit") == 1e9 and parse_rate("25mbps") == 200e6
    assert parse_time("50us") == pytest.approx(50e-6) and parse_time("1ms") == 1e-3 and parse_time("0") == 0
    for bad in ("fast", "200 parsecs", "-3mbit", "1kbit"):
        with pytest.raises(ValueError, match="link rate"):
            parse_rate(bad)
    with pytest.raises(ValueError, match="--nodes"):
        TestbedSpec(0, 2)
    with pytest.raises(ValueError, match="--switch-size"):
        TestbedSpec(4, 2, switch_size=5)
    assert TestbedSpec(3, 2).node_names == ["node000", "node001", "node002"]
    assert [TestbedSpec(5, 1, switch_size=2).switch_of(i) for i in range(5)] == [0, 0, 1, 1, 2]
    assert [TestbedSpec(3, 1, clock_skew=7).clock_offset(i) for i in range(3)] == [0, 7, 14]
    for bad in (-1, 1.5, 3601):
        with pytest.raises(ValueError, match="--clock-skew"):
            TestbedSpec(3, 1, clock_skew=bad)


@root_only
def test_each_node_reads_its_own_clock_with_a_skew():
    """Node i's CLOCK_MONOTONIC reads i x skew ahead of this machine's: read in the node between two readings
    here, also when the node is entered from another node."""
    read = [sys.executable, "-c", "import time; print(repr(time.monotonic()))"]
    with Testbed(3, 1, clock_skew=5) as tb:
        assert tb.clock_offsets() == {"node000": 0, "node001": 5, "node002": 10}
        for i, node in enumerate(tb.spec.node_names):
            before = time.monotonic()
            inside = float(subprocess.run(tb.command_on(node, read), capture_output=True, text=True,
                                          check=True).stdout)
            after = time.monotonic()
            assert before + 5 * i <= inside <= after + 5 * i
            # a node entered from another node reads its own clock, not the other's
            nested = float(subprocess.run(tb.command_on("node002", [*tb.command_on(node, read)]),
                                          capture_output=True, text=True, check=True).stdout)
            assert time.monotonic() + 5 * i >= nested >= after + 5 * i


@root_only
def test_up_and_down_leaves_no_namespace_interface_or_process(capfd):
    links = _host_links()
    with Testbed(4, 2, bandwidth="100mbit", switch_size=2) as tb:
        assert len(_ours(tb.tag)) == 4 + 1 + 2  # nodes, the spine, two leaf switches
        assert _groups(tb.tag) == ([tb.namespace(n) for n in tb.spec.node_names] if cpu.controller() else [])
        report = tb.run(["sh", "-c", "hostname; sleep 300 & echo started"])
        state = tb.state
        assert _host_links() == links, "the machine's own namespace got an interface"
    out = capfd.readouterr().out
    assert out.splitlines()[0] == "node000"
    assert report["exit_status"] == 0 and [n["name"] for n in report["nodes"]] == tb.spec.node_names
    assert _ours(tb.tag) == [] and _groups(tb.tag) == [] and not state.exists()
    assert _processes_with("sleep 300") == [], "a process started on a node outlived the run"
    assert _host_links() == links


@root_only
def test_each_node_has_its_own_host_name_and_resolves_the_others(capfd):
    with Testbed(3, 1) as tb:
        for node in tb.spec.node_names:
            subprocess.run(tb.command_on(node, ["sh", "-c", "hostname; getent hosts node002"]), check=True)
    lines = capfd.readouterr().out.split()
    assert lines[::3] == ["node000", "node001", "node002"]
    assert lines[1::3] == ["198.18.0.3"] * 3


@root_only
def test_sigkill_of_the_command_leaves_nothing_running():
    marker = "sleep 301"
    with Testbed(2, 1) as tb:
        def kill_the_command():
            _wait_for(lambda: len(_processes_with(marker)) >= 2)
            shell = [p for p in netns.pids_in(tb.namespace("node000")) if "sh -c" in _cmdline(p)]
            os.kill(shell[0], signal.SIGKILL)

        import threading
        killer = threading.Thread(target=kill_the_command)
        killer.start()
        # the command starts a process on the other node and one on its own, then waits
        report = tb.run(["sh", "-c", f"{tb.state}/enter node001 {marker} & {marker} & wait"], timeout=60)
        killer.join()
    assert report["exit_status"] == 128 + signal.SIGKILL
    assert _processes_with(marker) == []
    assert _ours(tb.tag) == []


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@root_only
@pytest.mark.parametrize("sig, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGHUP, 129)])
def test_a_signal_to_perfkit_testbed_tears_everything_down(sig, status):
    marker = f"sleep 30{sig.value}"
    proc = subprocess.Popen([*PERFKIT, "testbed", "--nodes", "2", "--cores", "1", "--", "sh", "-c", marker],
                            stderr=subprocess.PIPE, text=True, preexec_fn=_signals_as_from_a_shell)
    try:
        _wait_for(lambda: len(_processes_with(marker)) >= 1)
        tag = f"{proc.pid}-"
        assert _ours(tag) and len(_groups(tag)) == (2 if cpu.controller() else 0)
        proc.send_signal(sig)
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            status_lines = Path(f"/proc/{proc.pid}/status").read_text().splitlines()
            raise AssertionError(f"{sig.name} did not stop perfkit testbed: "
                                 f"{[line for line in status_lines if line.startswith('Sig')]}") from None
    finally:
        proc.kill()
    assert proc.returncode == status, err
    assert "every node removed" in err and "Traceback" not in err
    assert _ours(tag) == [] and _groups(tag) == [] and _processes_with(marker) == []


@root_only
def test_a_killed_testbed_is_cleaned_up_by_the_next():
    marker = "sleep 309"
    proc = subprocess.Popen([*PERFKIT, "testbed", "--nodes", "2", "--cores", "1", "--", "sh", "-c", marker])
    _wait_for(lambda: len(_processes_with(marker)) >= 1)
    proc.kill()  # SIGKILL: no chance to clean up
    proc.wait()
    tag = f"{proc.pid}-"
    assert len(_ours(tag)) == 3 and _processes_with(marker)
    assert len(_groups(tag)) == (2 if cpu.controller() else 0)
    with Testbed(1, 1) as tb:
        assert any("left by an earlier testbed" in note for note in tb.notes)
        assert _ours(tag) == [] and _groups(tag) == [] and _processes_with(marker) == []
    assert not list(Path("/tmp").glob(f"{netns.PREFIX}{tag}*"))


@root_only
def test_command_status_and_report(tmp_path):
    report = tmp_path / "tb.json"
    done = subprocess.run([*PERFKIT, "testbed", "--nodes", "2", "--cores", "1", "--bandwidth", "50mbit",
                           "--dilation", "2.5", "--report", str(report), "--", "sh", "-c", "echo out; exit 7"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 7 and done.stdout == "out\n"
    data = json.loads(report.read_text())
    assert data["exit_status"] == 7 and data["wall_s"] > 0
    assert data["dilation"] == 2.5 and data["cluster_s"] == pytest.approx(data["wall_s"] / 2.5)
    assert data["parameters"]["link_rate"] == 20e6 and data["parameters"]["node_cpu"] == 0.4
    assert [n["name"] for n in data["cpu"]] == ["node000", "node001"]
    assert data["parameters"]["bandwidth"] == 50e6 and data["parameters"]["nodes"] == 2
    assert [set(n) for n in data["nodes"]] == [{"name", "tx_bytes", "rx_bytes", "tx_packets", "rx_packets"}] * 2


@root_only
def test_latency_needs_netem_and_says_so():
    if netns.netem_available():
        with Testbed(2, 1, latency="1ms") as tb:
            assert tb.spec.latency == 1e-3
    else:
        with pytest.raises(RuntimeError, match="netem"):
            Testbed(2, 1, latency="1ms").__enter__()
    assert not [n for n in netns.namespaces() if n.startswith(f"{netns.PREFIX}{os.getpid()}-")]


def test_without_root_it_says_why(monkeypatch, capsys):
    from perfkit.cli import main

    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert netns.why_unavailable().startswith("the testbed needs root")
    assert main(["testbed", "--nodes", "2", "--cores", "1", "--", "true"]) == 1
    assert "needs root" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["testbed", "--nodes", "0", "--cores", "1"],
                                  ["testbed", "--nodes", "2", "--cores", "two"],
                                  ["loop", "--nodes", "2", "--cores", "1", "-o", "x", "--runs", "0"],
                                  ["loop", "--nodes", "2", "--cores", "1", "-o", "x", "--switch-size", "-1"],
                                  ["testbed", "--nodes", "2", "--cores", "1", "--clock-skew", "0.5"],
                                  ["testbed", "--nodes", "2", "--cores", "1", "--dilation", "0.5"],
                                  ["loop", "--nodes", "2", "--cores", "1", "-o", "x", "--dilation", "fast"],
                                  ["loop", "--nodes", "2", "--cores", "1", "-o", "x", "--strategy", "round-robin"]])
def test_counts_are_checked_before_anything_runs(argv, capsys):
    from perfkit.cli import main

    with pytest.raises(SystemExit) as stopped:
        main([*argv, "--", "true"])
    assert stopped.value.code == 2
    assert re.search("expected a whole number|expected whole seconds|expected 'auto'|expected one of block",
                     capsys.readouterr().err)
