"""The closed loop's repeats: the run with the median elapsed time is kept, its files copied to the name asked."""

from __future__ import annotations

import pytest

from perfkit.collect.testbed import loop


def _runs_taking(times):
    """A stand-in for ``profiled_run`` whose runs take ``times`` in turn, writing a profile and a log."""
    times = iter(times)

    def run(tb, launch, output, timeout):
        elapsed = next(times)
        output.write_text(f"profile {elapsed}")
        output.with_suffix(".out").write_text(f"log {elapsed}")
        return {"elapsed": elapsed}

    return run


def test_the_median_run_is_kept_and_copied(tmp_path, monkeypatch):
    monkeypatch.setattr(loop, "profiled_run", _runs_taking([2.4, 1.9, 2.1, 3.0]))
    out = tmp_path / "before.mpinside"
    got = loop.repeated_run(None, ["true"], out, 10, repeats=3)
    assert got["elapsed"] == 2.1 and got["elapsed_all"] == [2.4, 1.9, 2.1]
    assert out.read_text() == "profile 2.1" and out.with_suffix(".out").read_text() == "log 2.1"
    assert sorted(p.name for p in tmp_path.glob("before-*.mpinside")) == [f"before-{i}.mpinside" for i in (1, 2, 3)]
    assert loop._spread(got["elapsed_all"]) == pytest.approx(0.3 / 2.1)


def test_even_repeats_keep_the_lower_middle_and_one_run_is_plain(tmp_path, monkeypatch):
    monkeypatch.setattr(loop, "profiled_run", _runs_taking([5.0, 1.0, 4.0, 2.0, 7.0]))
    assert loop.repeated_run(None, ["true"], tmp_path / "a.mpinside", 10, repeats=4)["elapsed"] == 2.0
    one = loop.repeated_run(None, ["true"], tmp_path / "b.mpinside", 10)
    assert one == {"elapsed": 7.0, "elapsed_all": None} and loop._spread(None) is None
    with pytest.raises(ValueError, match="repeats"):
        loop.repeated_run(None, ["true"], tmp_path / "c.mpinside", 10, repeats=0)
