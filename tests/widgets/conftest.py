"""Each test's explorers end their background preparation with the test: it waits up to 30 s for a page that
never comes, then computes, and would otherwise run during the tests that follow."""

from __future__ import annotations

import pytest

from perfkit.widgets.warmup import Warmup


@pytest.fixture(autouse=True)
def background_preparation_ends_with_the_test(monkeypatch):
    started: list[Warmup] = []
    start = Warmup.start

    def recorded(self: Warmup) -> None:
        started.append(self)
        start(self)

    monkeypatch.setattr(Warmup, "start", recorded)
    yield
    for job in started:
        job.stop()
    for job in started:
        job.done.wait(30)
