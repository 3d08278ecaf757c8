"""perfkit.signals: SIGINT, SIGTERM and SIGHUP stop a command's body through KeyboardInterrupt."""

from __future__ import annotations

import os
import signal

import pytest

from perfkit import signals


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_signal_stops_the_body_cleans_up_and_gives_the_shell_status(sig, status, capsys):
    before = signal.getsignal(sig)
    cleaned = []

    def body() -> int:
        try:
            os.kill(os.getpid(), sig)
            signal.pause()  # the handler raises before this returns
            return 0
        finally:
            os.kill(os.getpid(), sig)  # a second signal while cleaning up is ignored
            cleaned.append(True)

    assert signals.run("convert", body, lambda: "out.zarr left as it was") == status
    assert cleaned == [True]
    assert capsys.readouterr().err == f"perfkit convert: stopped by {sig.name}; out.zarr left as it was\n"
    assert signal.getsignal(sig) == before  # handlers restored


def test_a_body_that_ends_returns_its_status(capsys):
    assert signals.run("place", lambda: 3, lambda: "never said") == 3
    assert capsys.readouterr().err == ""


def test_a_signal_in_a_deferred_write_stops_the_command_when_the_write_ends(capsys):
    steps = []

    def body() -> int:
        with signals.deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            steps.append("write completed")
        steps.append("never reached")
        return 0

    assert signals.run("convert", body, lambda: "out.zarr left as it was") == 143
    assert steps == ["write completed"]
    assert capsys.readouterr().err == "perfkit convert: stopped by SIGTERM; out.zarr left as it was\n"
