"""GROMACS, a real code nobody here wrote: its own time accounting read, and perfkit's diagnosis of it on one node,
where ranks share cores or do not (issue 34's held-out check, run by the suite)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import perfkit
from perfkit.apps import gromacs
from perfkit.collect import collect
from perfkit.collect.launch import mpirun_command
from perfkit.errors import PerfkitFormatError

DATA = Path(__file__).parents[1] / "data" / "gromacs"
NO_GROMACS = gromacs.missing()
CORES = len(os.sched_getaffinity(0))


def test_the_cycle_accounting_is_read_whole_and_its_parts_add_up_to_its_total():
    acc = gromacs.read_cycle_accounting(DATA / "md_4ranks_2cores.log")
    main = acc.parts[~acc.parts["pme_breakdown"]]
    assert acc.wall_s == 106.644 and acc.core_s == 426.577
    assert main["wall_s"].sum() == pytest.approx(acc.wall_s, abs=0.01)
    assert main["percent"].sum() == pytest.approx(100, abs=0.2)
    assert acc.parts.loc["Comm. coord.", "calls"] == 975 and acc.parts.loc["Rest", "calls"] == -1
    assert acc.parts.loc["PME 3D-FFT Comm.", "pme_breakdown"] and acc.parts.loc["PME 3D-FFT Comm.", "wall_s"] == 9.981


def test_a_log_without_the_accounting_is_refused(tmp_path):
    cut = tmp_path / "md.log"
    cut.write_text((DATA / "md_4ranks_2cores.log").read_text().split("R E A L")[0])
    with pytest.raises(PerfkitFormatError, match=r"md\.log.*no 'R E A L"):
        gromacs.read_cycle_accounting(cut)


@pytest.fixture(scope="module")
def tpr(tmp_path_factory) -> Path:
    if NO_GROMACS:
        pytest.skip(NO_GROMACS)
    return gromacs.water_box(tmp_path_factory.mktemp("gromacs"), steps=300)


def _diagnosed(tpr: Path, folder: Path, nprocs: int):
    result = collect(gromacs.mdrun_command(mpirun_command(nprocs, []), tpr, folder / "md.log"),
                     folder / "md.mpinside", timeout=600, cwd=folder)
    assert result.returncode == 0 and result.output is not None, result.message
    ds = perfkit.open_profile(result.output)
    return ds, perfkit.diagnose(ds), gromacs.read_cycle_accounting(folder / "md.log")


@pytest.mark.skipif(CORES != 2, reason=f"the held-out check is for a 2-core machine; this one has {CORES}")
def test_more_ranks_than_cores_is_named_first_and_no_finding_blames_the_network(tpr, tmp_path):
    """4 ranks on 2 cores: the top finding names ranks sharing cores (oversubscription); nothing advises a faster
    network (one node: transfers are shared memory). GROMACS's own wall time lies inside the profiled span."""
    ds, findings, acc = _diagnosed(tpr, tmp_path, 2 * CORES)
    top = findings.iloc[0]
    assert "oversubscription" in top["title"].lower(), findings[["title"]].to_string()
    assert not findings["text"].str.contains("faster network|network would help", case=False).any()
    assert acc.wall_s <= float(ds["elapsed"].item())


@pytest.mark.skipif(CORES != 2, reason=f"the held-out check is for a 2-core machine; this one has {CORES}")
def test_as_many_ranks_as_cores_is_not_oversubscription(tpr, tmp_path):
    ds, findings, acc = _diagnosed(tpr, tmp_path, CORES)
    assert not findings["title"].str.contains("oversubscription|sharing cores", case=False).any(), \
        findings[["title"]].to_string()
    assert not findings["text"].str.contains("faster network|network would help", case=False).any()
    assert acc.wall_s <= float(ds["elapsed"].item())
