"""The lab programs build with the MPI wrappers and run without the collector (no profile needed)."""

from __future__ import annotations

import pytest

from perfkit.collect import lab
from perfkit.collect.lab.build import binary, missing_tools

pytestmark = [
    pytest.mark.skipif(missing_tools("fortran") is not None, reason=f"MPI tools: {missing_tools('fortran')}"),
    pytest.mark.timeout(120),
]
FAST = {"steps": 3, "step_seconds": 0.002}


def test_binaries_are_cached_by_content():
    assert binary("c") == binary("c")
    assert binary("fortran", "use_mpi") != binary("fortran", "mpif_h")
    assert binary("c").stat().st_mode & 0o111


@pytest.mark.parametrize(
    ("scenario", "params"),
    [
        ("balanced", {}),
        ("static_imbalance", {"ppn": 2, "late_node": 1}),
        ("dynamic_imbalance", {}),
        ("pipeline", {}),
        ("collective_imbalance", {}),
        ("oversubscribed", {"work": 10_000}),
        ("any_source", {}),
        ("fortran_halo", {"interface": "use_mpi"}),
        ("fortran_halo", {"interface": "mpif_h"}),
    ],
)
def test_scenario_runs_to_its_end(scenario, params):
    res = lab.run_uninstrumented(scenario, 4, timeout=60, **FAST, **params)
    assert res.returncode == 0, res.output
    assert res.output.strip() == "", "lab programs print nothing"


@pytest.mark.parametrize("scenario", ["abort", "segfault"])
def test_failing_scenario_fails_without_hanging(scenario):
    res = lab.run_uninstrumented(scenario, 4, timeout=60, fail_rank=1, fail_step=1, **FAST)
    assert res.returncode not in (0, -1), res.output  # -1: timed out
    assert res.wall_seconds < 60


def test_the_program_refuses_unknown_arguments():
    import subprocess

    from perfkit.collect.launch import mpirun_command

    done = subprocess.run(mpirun_command(2, [str(binary("c")), "balanced", "nonsense=1"]), capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode != 0
    assert "unknown parameter" in done.stderr + done.stdout
