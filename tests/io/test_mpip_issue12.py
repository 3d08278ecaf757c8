"""mpiP fixes of issue 12: ``-e`` rounding tolerance, concise reports (what they state, what is
unavailable), duplicate concise/verbose reports of one run, ``mpip_*`` attrs when combining."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfkit.io import mpip
from perfkit.model import read_warnings, validate
from tests.io.test_mpip import write_report


def _tiny_mean_site(count: int, mean_ms: float) -> list[dict]:
    return [{"id": 1, "op": "Allreduce", "parent": "main", "file": "a.c", "line": 3, "rows": {0: (count, mean_ms, 0)}}]


def test_fixed_point_report_tolerates_count_times_rounding(tmp_path: Path):
    # 3,000 calls of 0.0004 ms: the -e report prints the mean as 0.000 and the site total as 1.200 ms
    path = write_report(tmp_path / "e.mpiP", 1, _tiny_mean_site(3000, 0.0004), fixed=True)
    assert "0.000" in path.read_text() and "1.200" in path.read_text()
    ds = validate(mpip.read(path, label="e"))
    assert not [w for w in read_warnings(ds) if "Aggregate Time" in w]


def test_fixed_point_report_still_flags_a_real_disagreement(tmp_path: Path):
    path = write_report(tmp_path / "e.mpiP", 1, _tiny_mean_site(3000, 0.0004), fixed=True)
    path.write_text(path.read_text().replace("     1.200", "     9.200"))
    assert any("Aggregate Time of site 1" in w for w in read_warnings(mpip.read(path, label="e")))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sites=st.lists(st.tuples(st.integers(1, 20_000), st.floats(1e-5, 0.05)), min_size=1, max_size=4))
def test_fixed_point_reports_agree_with_themselves(tmp_path: Path, sites):
    rows = [{"id": i + 1, "op": "Allreduce", "parent": "main", "file": "a.c", "line": 3, "rows": {0: (*site, 0)}}
            for i, site in enumerate(sites)]
    path = write_report(tmp_path / "e.mpiP", 1, rows, fixed=True)
    assert read_warnings(mpip.read(path, label="e")) == []


# ---------------------------------------------------------------- mpip_* attrs when combining

DATA = Path(__file__).resolve().parents[1] / "data"
MPIP_HPCCG_2 = next((DATA / "mpip" / "real" / "HPCCG-strong" / "2").glob("*.mpiP"))
IPM_HPCCG_2 = next((DATA / "ipm" / "real" / "HPCCG-strong" / "2").glob("*.ipm.xml"))


def test_mpip_attrs_do_not_leak_into_runs_of_other_formats():
    import perfkit

    alone = perfkit.open_profile(MPIP_HPCCG_2)
    assert alone.attrs["mpip_version"] == "3.5.0"
    for ds in (perfkit.open_runs([MPIP_HPCCG_2, IPM_HPCCG_2]),
               perfkit.combine_runs([alone, perfkit.open_profile(IPM_HPCCG_2)])):
        assert sorted(ds["format"].values.tolist()) == ["ipm", "mpip"]
        assert not [k for k in ds.attrs if k.startswith(("mpip_", "ipm_"))]
    both = perfkit.combine_runs([alone, perfkit.open_profile(MPIP_HPCCG_2, label="again")])
    assert both.attrs["mpip_version"] == "3.5.0"  # what every run states stays


# ---------------------------------------------------------------- concise reports

SITES = [{"id": 1, "op": "Allreduce", "parent": "main", "file": "a.c", "line": 3,
          "rows": {0: (100, 50.0, 0), 1: (100, 60.0, 0), 2: (100, 70.0, 0)}},
         {"id": 2, "op": "Send", "parent": "main", "file": "a.c", "line": 9,
          "rows": {0: (10, 1.0, 800), 1: (10, 2.0, 800), 2: (10, 3.0, 800)}}]


def test_concise_report_states_task_times_and_mpi_share_and_marks_the_rest_unavailable(tmp_path: Path):
    path = write_report(tmp_path / "c.mpiP", 3, SITES, style="concise")
    ds = validate(mpip.read(path, label="c"))
    assert ds["detail"].values.tolist() == ["summary"]
    assert bool(ds["profile"].isnull().all())  # nothing per rank invented
    task = ds["task_time"].sel(run="c")
    # the writer's ranks: AppTime 10, 11, 12 s; MPITime 5.01, 6.02, 7.03 s
    assert float(task.sel(task_metric="mpi", task_stat="mean")) == 6.02
    assert float(task.sel(task_metric="app", task_stat="max")) == 12.0
    printed = next(line.split()[-1] for line in path.read_text().splitlines() if line.startswith("Aggregate "))
    assert float(ds["mpi_pct"].sel(run="c")) == float(printed) == 54.73
    note = [w for w in read_warnings(ds) if w.startswith("concise report (-c)")]
    assert len(note) == 1 and "unavailable" in note[0] and "54.73%" in note[0] and "6.02 s" in note[0]


def test_verbose_report_has_no_summary_detail():
    ds = mpip.read(MPIP_HPCCG_2, label="v")
    assert "detail" not in ds.coords and "mpi_pct" not in ds
    assert ds.attrs["mpip_pid"] == "27686"


# ---------------------------------------------------------------- duplicate reports of one run

HPCCG = sorted((DATA / "mpip" / "real" / "HPCCG-strong").glob("*/*.mpiP"))


def test_a_copied_report_is_one_run_not_a_repetition(tmp_path: Path):
    import shutil

    import pytest

    import perfkit

    for path in HPCCG:
        shutil.copy(path, tmp_path / path.name)
    shutil.copy(HPCCG[-1], tmp_path / ("copy_of_" + HPCCG[-1].name))  # the N = 8 report, twice
    with pytest.warns(perfkit.PerfkitWarning, match="2 files are reports of the same run"):
        ds = perfkit.open_runs(sorted(tmp_path.glob("*.mpiP")))
    assert sorted(ds["nprocs"].values.tolist()) == [1, 2, 4, 8, 16]
    assert any("collector PID 27832" in w for w in read_warnings(ds))
    fit = perfkit.fit_amdahl(ds)
    assert fit.quality.n_points == 5  # no invented repetition


def _header(path: Path, start: str, pid: int) -> Path:
    text = path.read_text().replace("@ Version", f"@ Start time               : {start}\n"
                                                 f"@ Collector PID            : {pid}\n@ Version", 1)
    path.write_text(text)
    return path


def test_concise_and_verbose_reports_of_one_run_are_combined(tmp_path: Path):
    import pytest

    import perfkit

    verbose = _header(write_report(tmp_path / "app.3.1234.1.mpiP", 3, SITES), "2026 11 22 02:06:45", 1234)
    concise = _header(write_report(tmp_path / "app.3.1234.2.mpiP", 3, SITES, style="concise"),
                      "2026 11 22 02:06:45", 1234)
    other = _header(write_report(tmp_path / "app.3.999.1.mpiP", 3, SITES), "2026 11 22 03:00:00", 999)
    with pytest.warns(perfkit.PerfkitWarning, match="same run"):
        ds = perfkit.open_runs([concise, verbose, other])
    assert ds.sizes["run"] == 2
    run = str(ds["run"].values[ds["source"].values.tolist().index(str(verbose))])
    assert "detail" not in ds.coords  # the verbose report's per-rank profile is kept...
    assert float(ds["profile"].sel(run=run, rank=2, function="MPI_Allreduce", metric="time")) == 7.0
    assert float(ds["task_time"].sel(run=run, task_metric="mpi", task_stat="mean")) == 6.02  # ...filled
    assert float(ds["mpi_pct"].sel(run=run)) == 54.73
    assert any(str(concise) in w and "kept" in w for w in read_warnings(ds))


def test_combining_reports_of_one_run_keeps_the_functions_of_either(tmp_path: Path):
    import numpy as np
    import pytest

    import perfkit

    bcast = {"id": 3, "op": "Bcast", "parent": "main", "file": "a.c", "line": 5,
             "rows": {0: (4, 2.0, 64), 1: (4, 1.0, 64), 2: (4, 1.5, 64)}}
    verbose = _header(write_report(tmp_path / "app.3.77.1.mpiP", 3, SITES), "2026 11 22 02:06:45", 77)
    concise = _header(write_report(tmp_path / "app.3.77.2.mpiP", 3, [*SITES, bcast], style="concise"),
                      "2026 11 22 02:06:45", 77)
    alone = perfkit.open_runs([concise])
    with pytest.warns(perfkit.PerfkitWarning, match="same run"):
        ds = perfkit.open_runs([verbose, concise])
    assert ds.sizes["run"] == 1
    functions = set(map(str, ds["function"].values))
    assert {"MPI_Allreduce", "MPI_Send", "MPI_Bcast"} <= functions
    got = ds["profile"].isel(run=0).sel(function="MPI_Bcast", metric="time").values
    want = alone["profile"].isel(run=0).sel(function="MPI_Bcast", metric="time").values
    np.testing.assert_array_equal(got, want)
    assert str(ds["kind"].sel(function="MPI_Bcast").values) == str(alone["kind"].sel(function="MPI_Bcast").values)
    assert float(ds["profile"].isel(run=0).sel(rank=2, function="MPI_Allreduce", metric="time")) == 7.0
