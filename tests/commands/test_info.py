"""perfkit info and place in words: the runs read, and a placement against block, with units and no NaN."""

from __future__ import annotations

from types import SimpleNamespace

import perfkit
from perfkit.commands.info import describe, placement_summary, prediction_line
from perfkit.text import unreadable
from tests.helpers import ROOT


def test_describe_says_what_the_runs_hold() -> None:
    ds = perfkit.open_runs(sorted((ROOT / "data" / "real" / "mpiP" / "HPCCG-strong").glob("*/*")), progress=False)
    text = describe(ds)
    assert text.startswith("5 runs\n") and "16 ranks; functions: " in text and "7.21 s" in text
    assert not unreadable(text), unreadable(text)
    assert "not in the profile" not in text  # every mpiP report states its elapsed time


def test_placement_summary_against_block() -> None:
    cost = SimpleNamespace(inter_node_bytes=1.274e9, hop_bytes=2.55e9, max_nic_bytes=3.19e8, time_s=0.0255,
                           inter_node_fraction=0.23)
    block = SimpleNamespace(inter_node_bytes=1.92e9, hop_bytes=3.84e9, max_nic_bytes=0.0, time_s=0.0513,
                            inter_node_fraction=0.35)
    lines = placement_summary("scotch", cost, block, {"decision": "chose scotch"}).splitlines()
    assert lines[1].split() == ["inter-node", "bytes", "1.27", "GB", "1.92", "GB", "-33.6%"]
    assert lines[3].split()[-1] == "n/a" and lines[4].split()[-3:] == ["51.3", "ms", "-50.3%"]
    assert lines[-2:] == ["inter-node share: 23% (scotch) vs 35% (block)", "chose scotch"]
    assert not unreadable("\n".join(lines))


def test_prediction_line_has_units() -> None:
    p = SimpleNamespace(inter_node_bytes_before=6.86e6, inter_node_bytes_after=1.2e6, elapsed_before=1.7,
                        elapsed_after=1.2, elapsed_after_low=1.1, elapsed_after_high=1.31, placement_before="block",
                        network=SimpleNamespace(sources={}))
    line = prediction_line(p, "p.json")
    assert "6.86 MB -> 1.20 MB" in line and "1.70 s -> 1.20 s [1.10 s, 1.31 s]" in line and "not stated" in line
