"""``collect`` refuses its outputs before anything runs (a missing folder is named, never created), and says
what its watchdog had to do to stop the launch."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from perfkit.collect import collect
from perfkit.collect.run import TIMED_OUT, _run
from perfkit.collect.watchdog import GRACE


def test_a_missing_output_folder_is_refused_before_the_launch(tmp_path: Path) -> None:
    ran = tmp_path / "ran"
    folder = tmp_path / "nowhere"
    with pytest.raises(FileNotFoundError) as exc:
        collect(["sh", "-c", f"touch {ran}"], folder / "out.mpinside")
    assert str(exc.value) == f"no such folder: {folder} (to write out.mpinside in)"
    assert not folder.exists() and not ran.exists()


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="the watchdog reads /proc")
def test_a_launch_that_outlives_its_sigterm_is_reported_after_collects_own_words(tmp_path: Path) -> None:
    """A timeout stops a launch that ignores SIGTERM: the watchdog's SIGKILL is in what collect returns."""
    script = f"trap '' TERM; echo $$ > {tmp_path}/pid; exec sleep 300"
    returncode, timed_out, told = _run(["sh", "-c", script], dict(os.environ), None, timeout=1.0)
    pid = int((tmp_path / "pid").read_text())
    assert (returncode, timed_out) == (TIMED_OUT, True)
    assert told == (f"watchdog: sent SIGTERM to 1 process (pid {pid}) of the launch; 1 process (pid {pid}) "
                    f"outlived it by {GRACE:g} s and was sent SIGKILL")
