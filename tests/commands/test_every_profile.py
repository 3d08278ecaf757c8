"""perfkit diagnose, pop, whatif and scaling from a shell on every bundled profile: exit status 0 and a table
with no NaN, exponent, numpy repr or None (the groups of ``tests/analysis/test_finding_texts.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfkit.cli import main
from tests.analysis.test_finding_texts import GROUPS, open_group
from tests.commands.test_analyses import UNREADABLE
from tests.helpers import ROOT


@pytest.mark.parametrize("files", GROUPS, ids=[str(g[0].parent.relative_to(ROOT)) for g in GROUPS])
def test_every_analysis_command_on_the_bundled_profiles(files: list[Path], capsys: pytest.CaptureFixture[str]) -> None:
    runs = open_group(files)
    if runs is None:
        pytest.skip("no profile among these files (trace definitions, notes)")
    capsys.readouterr()
    paths = [str(p) for p in files]
    commands = [["diagnose"], ["pop"], ["whatif", "network"]]
    if "nprocs" in runs.coords and runs.sizes["run"] >= 2 and len(set(runs["nprocs"].values.tolist())) >= 2:
        commands.append(["scaling"])
    for command in commands:
        status = main([*command, *paths, "--errors", "skip"])
        out, err = capsys.readouterr()
        assert status == 0, (command, err)
        assert out.strip(), command
        assert not UNREADABLE.search(out), (command, UNREADABLE.search(out), out[:2000])
