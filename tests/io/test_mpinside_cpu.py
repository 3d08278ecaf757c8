"""perfkit's CPU tables in MPInside text: round trip, and what a damaged table gets."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import perfkit
from perfkit.errors import PerfkitFormatError
from perfkit.io.mpinside import write
from perfkit.model import CPU_STATS, CPU_TIME, METRICS, make_run

TIME = """>>>> Communication time totals (s) <<<<
CPU Compute Send
0 1.0 0.5
1 1.5 0.25
"""


def _file(tmp_path, text: str):
    path = tmp_path / "run.mpinside"
    path.write_text(text)
    return path


@settings(max_examples=25, deadline=None)
@given(values=arrays(np.float64, (3, len(CPU_STATS)), elements=st.one_of(
    st.just(np.nan), st.floats(0, 1e12, allow_nan=False).map(lambda v: float(f"{v:.9g}")))),
    cpu=arrays(np.float64, (3, 2), elements=st.floats(0, 1e6).map(lambda v: round(v, 6))))
def test_cpu_time_and_rank_cpu_come_back_from_the_written_file(tmp_path_factory, values, cpu):
    profile = np.full((3, 2, len(METRICS) + 1), np.nan)
    profile[:, :, 0] = 1.0
    profile[:, :, -1] = cpu
    ds = make_run(profile, ranks=[0, 1, 2], functions=["Compute", "MPI_Send"], metrics=[*METRICS, CPU_TIME],
                  rank_cpu=values)
    path = tmp_path_factory.mktemp("cpu") / "run.mpinside"
    write(ds, path)
    back = perfkit.open_profile(path)
    np.testing.assert_array_equal(back["profile"].sel(metric=CPU_TIME).values, ds["profile"].sel(metric=CPU_TIME))
    if np.isnan(values).all():
        assert "rank_cpu" not in back  # nothing measured: no table
    else:
        np.testing.assert_array_equal(back["rank_cpu"].values, ds["rank_cpu"].values)
        assert back["cpu_stat_units"].sel(cpu_stat="run_delay").item() == "s"


def test_a_cpu_table_with_a_subset_of_columns_reads_nan_for_the_rest_and_says_so(tmp_path):
    ds = perfkit.open_profile(_file(tmp_path, TIME + ">>>> CPU per rank <<<<\nCPU run_delay cores_online\n"
                                                     "0 0.5 2\n1 0.75 2\n"))
    counters = ds["rank_cpu"].isel(run=0)
    np.testing.assert_array_equal(counters.sel(cpu_stat="run_delay"), [0.5, 0.75])
    assert np.isnan(counters.sel(cpu_stat="cores_allowed")).all()
    assert any("lacks columns" in w and "cores_allowed" in w for w in perfkit.model.read_warnings(ds))


@pytest.mark.parametrize(("table", "message"), [
    ("CPU run_delay speed\n0 0.5 1\n", "column 'speed' is none of"),
    ("CPU run_delay\n0 0.5\n7 0.5\n", r"ranks \[7\] that the time table lacks"),
    ("CPU run_delay\n0 -0.5\n", "negative"),
    ("CPU run_delay\n0 0.5 3\n", "expected 2 columns"),
    ("rank run_delay\n0 0.5\n", "expected first column 'CPU'"),
])
def test_a_damaged_cpu_table_is_refused_with_its_line(tmp_path, table, message):
    with pytest.raises(PerfkitFormatError, match=message) as err:
        perfkit.open_profile(_file(tmp_path, TIME + ">>>> CPU per rank <<<<\n" + table))
    assert "run.mpinside" in str(err.value) and "line" in str(err.value)


def test_a_second_cpu_table_is_refused(tmp_path):
    table = ">>>> CPU per rank <<<<\nCPU run_delay\n0 0.5\n"
    with pytest.raises(PerfkitFormatError, match="appears twice"):
        perfkit.open_profile(_file(tmp_path, TIME + table + table))
