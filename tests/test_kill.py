"""perfkit convert, convert --append and place killed at random moments (SIGTERM, SIGINT, SIGHUP, SIGKILL):
the output is the old one byte for byte or the complete new one, load never returns a store with runs
missing, a stopped command says so in one line with status 128 + N and leaves no temporaries, and the
run after a SIGKILL removes the temporaries it left, saying so. The commands run in forked children of
a warm process (tests/kill_harness.py); one test signals the real console script."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import perfkit
from tests.kill_harness import DATA, Forker, temporaries, tree_hash

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the kill harness forks its children")

SEED = 20261125
KILLS = 15  # per command, convert and append: 30 random kills in all
STOPPED = {signal.SIGTERM: 143, signal.SIGINT: 130, signal.SIGHUP: 129}
SIGNALS = [signal.SIGTERM, signal.SIGINT, signal.SIGKILL]
#: What a Ctrl-C says before the command began (while starting, parsing its arguments or importing its modules).
EARLY_SIGINT = r"perfkit( [a-z]+)?: stopped by SIGINT( while starting)?\n"


@pytest.fixture(scope="module")
def forker():
    warm = Forker()
    yield warm
    warm.close()


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, str]:
    """The four 48-rank synthetic MPInside runs (with their sidecars) under distinct names."""
    folder = tmp_path_factory.mktemp("runs")
    out = {}
    for mode in ("basic", "slt", "collective_wait", "perfect"):
        for suffix in ("", ".perfkit.json"):
            shutil.copy(DATA / "synthetic" / "48" / f"{mode}.mpinside{suffix}", folder / f"48-{mode}.mpinside{suffix}")
        out[mode] = str(folder / f"48-{mode}.mpinside")
    return out


class Kills:
    """Runs of one command killed at random moments, checked one by one."""

    def __init__(self, forker: Forker, folder: Path, seed: int) -> None:
        self.forker, self.folder, self.rng = forker, folder, np.random.default_rng(seed)
        self.outcomes: Counter[str] = Counter()
        self.left_by_kill: list[Path] = []

    def attempts(self, kills: int = KILLS) -> Iterator[int]:
        """Attempt numbers until ``kills`` signals have stopped a running command (one that finished before
        its signal does not count), at most three times as many attempts."""
        for attempt in range(3 * kills):
            if attempt - self.outcomes["finished first"] >= kills:
                return
            yield attempt
        raise AssertionError(f"{self.outcomes['finished first']} of {3 * kills} commands finished before their signal")

    def run(self, argv: list[str]) -> tuple[int, float, str]:
        status, seconds = self.forker.run(argv, self.folder / "out", self.folder / "err")
        return status, seconds, (self.folder / "err").read_text()

    def kill(self, argv: list[str], duration: float, sig: signal.Signals) -> tuple[int, str]:
        """Start ``argv``, send ``sig`` after a random part of ``duration`` [s]; status and stderr."""
        earlier = temporaries(self.folder)
        pid = self.forker.start(argv, self.folder / "out", self.folder / "err")
        time.sleep(self.rng.uniform(0.0, 1.0) * duration)
        os.kill(pid, sig)  # a child that has ended is a zombie until waited for: the signal is lost
        status, _ = self.forker.wait(pid)
        err = (self.folder / "err").read_text()
        lines = err.splitlines()
        removed = [path for path in earlier if not path.exists()]  # none if killed before its sweep
        if removed and status != -signal.SIGKILL:  # temporaries of an earlier SIGKILL: removed, and said so
            assert any(line.startswith("perfkit: removing ") for line in lines), err
            assert all(path.name in err for path in removed), err
        if status == 0:
            self.outcomes["finished first"] += 1
        elif status == -sig and sig != signal.SIGKILL:  # before the command set its handlers: nothing begun
            assert not set(temporaries(self.folder)) - set(earlier), err
            self.outcomes[f"{sig.name} before the command began"] += 1
        elif sig == signal.SIGINT and status == STOPPED[sig] and re.fullmatch(EARLY_SIGINT, err):
            # Ctrl-C while the arguments are parsed or the command's modules imported: one line, nothing begun
            assert not set(temporaries(self.folder)) - set(earlier), err
            self.outcomes["SIGINT before the command began"] += 1
        elif sig == signal.SIGKILL:
            assert status == -signal.SIGKILL, err
            self.outcomes["SIGKILL"] += 1
        else:
            assert status == STOPPED[sig], err
            stop = [line for line in lines if not line.startswith("perfkit: removing ")]
            assert len(stop) == 1 and stop[0].startswith(f"perfkit {argv[0]}: stopped by {sig.name}; "), err
            assert stop[0].endswith("temporary files removed"), err
            assert not temporaries(self.folder), err
            self.outcomes[sig.name] += 1
        return status, err


def assert_temporary_stores_are_refused_or_complete(left: list[Path], complete: xr.Dataset, scratch: Path) -> int:
    """A store a SIGKILL left half-written must not load as if complete: load refuses it, or it is whole."""
    refused = 0
    for path in left:
        if not (path.is_dir() and (path / ".zgroup").exists()):
            continue
        copy = scratch / f"left{refused}.zarr"
        shutil.copytree(path, copy)
        try:
            back = perfkit.load(copy)
        except perfkit.PerfkitFormatError as exc:
            assert "perfkit_complete" in str(exc) or ".zmetadata" in str(exc)
            refused += 1
        else:
            xr.testing.assert_identical(back, complete)
        shutil.rmtree(copy)
    return refused


def test_convert_killed_anywhere_leaves_the_old_store_or_the_complete_new_one(forker, runs, tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    store = folder / "study.zarr"
    sets = {"x": [runs["basic"], runs["slt"]], "y": [runs["collective_wait"], runs["perfect"]]}
    argv = {name: ["convert", *files, "-o", str(store), "--workers", "1", "--force"] for name, files in sets.items()}
    kills = Kills(forker, folder, SEED)
    expected, durations = {}, []
    for name in ("y", "x"):  # references: each set converted without interruption; the store ends as x
        status, seconds, err = kills.run(argv[name])
        assert status == 0, err
        expected[name] = tree_hash(store), perfkit.load(store)
        durations.append(seconds)
    xr.testing.assert_identical(expected["x"][1], perfkit.open_runs(sets["x"]))
    now, scratch = "x", tmp_path / "scratch"
    scratch.mkdir()
    refused = 0
    for k in kills.attempts():
        new = "y" if now == "x" else "x"
        kills.kill(argv[new], max(durations), SIGNALS[k % 3])
        found = tree_hash(store)
        assert found in (expected[now][0], expected[new][0]), f"kill {k}: the store is neither old nor new"
        if found == expected[new][0]:
            kills.outcomes["new"] += 1
            now = new
        else:
            kills.outcomes["old"] += 1
        xr.testing.assert_identical(perfkit.load(store), expected[now][1])
        refused += assert_temporary_stores_are_refused_or_complete(temporaries(folder), expected[new][1], scratch)
    status, _, err = kills.run(argv["x"])
    assert status == 0 and not temporaries(folder), err
    print(f"convert: {dict(kills.outcomes)}; half-written stores refused by load: {refused}")


def test_append_killed_anywhere_leaves_the_old_store_or_the_complete_new_one(forker, runs, tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    store, pristine = folder / "study.zarr", tmp_path / "pristine.zarr"
    kills = Kills(forker, folder, SEED + 1)
    status, _, err = kills.run(["convert", runs["basic"], runs["slt"], "-o", str(store), "--workers", "1"])
    assert status == 0, err
    shutil.copytree(store, pristine)
    old = tree_hash(store), perfkit.load(store)
    append = ["convert", runs["perfect"], "-o", str(store), "--workers", "1", "--append"]
    status, duration, err = kills.run(append)
    assert status == 0, err
    new = tree_hash(store), perfkit.load(store)
    xr.testing.assert_identical(new[1], perfkit.open_runs([runs["basic"], runs["slt"], runs["perfect"]]))
    assert new[1].sizes["run"] == 3 and old[1].sizes["run"] == 2
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    refused = 0
    for k in kills.attempts():
        if tree_hash(store) != old[0]:  # back to the two-run store, byte for byte
            shutil.rmtree(store)
            shutil.copytree(pristine, store)
        kills.kill(append, duration, SIGNALS[(k + 1) % 3])
        found = tree_hash(store)
        assert found in (old[0], new[0]), f"kill {k}: the store is neither the old one nor the complete new one"
        kills.outcomes["new" if found == new[0] else "old"] += 1
        xr.testing.assert_identical(perfkit.load(store), new[1] if found == new[0] else old[1])
        refused += assert_temporary_stores_are_refused_or_complete(temporaries(folder), new[1], scratch)
    shutil.rmtree(store)
    shutil.copytree(pristine, store)
    status, _, err = kills.run(append)
    assert status == 0 and not temporaries(folder) and tree_hash(store) == new[0], err
    print(f"append: {dict(kills.outcomes)}; half-written stores refused by load: {refused}")


def test_place_killed_anywhere_leaves_old_or_new_files(forker, runs, tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    launch, prediction = folder / "rankfile", folder / "prediction.json"
    kills = Kills(forker, folder, SEED + 2)
    common = [runs["basic"], "--nodes", "2", "--ppn", "24", "-o", str(launch), "--prediction", str(prediction),
              "--force"]
    status, _, err = kills.run(["place", *common, "--strategy", "block"])
    assert status == 0, err
    old = launch.read_bytes(), prediction.read_bytes()
    status, duration, err = kills.run(["place", *common, "--strategy", "scotch"])
    assert status == 0, err
    new = launch.read_bytes(), prediction.read_bytes()
    assert new[0] != old[0] and json.loads(new[1]) != json.loads(old[1])
    for k, sig in enumerate([signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGKILL]):
        launch.write_bytes(old[0])
        prediction.write_bytes(old[1])
        kills.kill(["place", *common, "--strategy", "scotch"], duration, sig)
        assert launch.read_bytes() in old[:1] + new[:1], f"kill {k}: launch file neither old nor new"
        assert prediction.read_bytes() in old[1:] + new[1:], f"kill {k}: prediction neither old nor new"
    status, _, err = kills.run(["place", *common, "--strategy", "scotch"])
    assert status == 0 and not temporaries(folder), err
    print(f"place: {dict(kills.outcomes)}")


SCRIPT = Path(sys.executable).with_name("perfkit")


@pytest.mark.skipif(not SCRIPT.exists(), reason="console script not installed next to the interpreter")
def test_the_console_script_stopped_mid_convert(runs, tmp_path):
    """The real entry point: SIGTERM as soon as the temporaries appear, i.e. in the middle of the work."""
    store = tmp_path / "study.zarr"
    proc = subprocess.Popen([str(SCRIPT), "convert", runs["basic"], runs["slt"], "-o", str(store), "--workers", "1"],
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not temporaries(tmp_path) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert err == f"perfkit convert: stopped by SIGTERM; {store} not written, temporary files removed\n"
    assert not store.exists() and not temporaries(tmp_path)


@pytest.mark.skipif(not SCRIPT.exists(), reason="console script not installed next to the interpreter")
def _readers(psutil, pid: int) -> list:  # type: ignore[no-untyped-def]
    """The reader processes of the convert ``pid``: forked (its command line) or spawned (``spawn_main``)."""
    try:
        command = psutil.Process(pid).cmdline()
        children = psutil.Process(pid).children()
    except psutil.Error:
        return []
    out = []
    for child in children:
        try:
            line = child.cmdline()
        except psutil.Error:  # ended meanwhile
            continue
        if line == command or "spawn_main" in " ".join(line):
            out.append(child)
    return out


def test_ctrl_c_to_the_terminal_stops_a_convert_with_reader_processes_in_one_line(runs, tmp_path):
    """Ctrl-C reaches every process of the terminal's group: the readers, started ignoring it, leave the stop
    to convert, which shuts them down (no traceback from a reader still importing, none left running)."""
    psutil = pytest.importorskip("psutil")
    store = tmp_path / "study.zarr"
    proc = subprocess.Popen([str(SCRIPT), "convert", *runs.values(), "-o", str(store), "--workers", "2"],
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    readers: list = []
    while len(readers) < 2 and proc.poll() is None and time.monotonic() < deadline:
        readers = _readers(psutil, proc.pid)
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert err == f"perfkit convert: stopped by SIGINT; {store} not written, temporary files removed\n"
    assert not store.exists() and not temporaries(tmp_path)
    gone, alive = psutil.wait_procs(readers, timeout=30)
    assert len(gone) == 2 and not alive
