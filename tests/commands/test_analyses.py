"""perfkit diagnose|whatif|pop|scaling|compare: the numbers of the Python analyses, in every output format."""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import perfkit
from perfkit.cli import main

ROOT = Path(__file__).resolve().parents[2]
LAB = str(ROOT / "data" / "lab" / "*.mpinside")
SYNTHETIC = [str(ROOT / "data" / "synthetic" / n / "basic.mpinside") for n in ("48", "96", "192")]
MPIP = str(ROOT / "tests" / "data" / "mpip" / "userguide" / "v3.5_report.mpiP")
CLUSTER = ROOT / "data" / "cluster" / "stencil2d-shuffled"
#: What no table may show: NaN, exponents, numpy reprs, None.
UNREADABLE = re.compile(r"\bnan\b|\d[eE][+-]?\d|np\.|None|\binf\b", re.IGNORECASE)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture(scope="module")
def lab() -> xr.Dataset:
    return perfkit.open_runs(LAB, progress=False)


def test_diagnose_prints_the_findings_of_diagnose(lab: xr.Dataset, capsys: pytest.CaptureFixture[str]) -> None:
    expected = perfkit.diagnose(lab)
    status, out, _ = run(capsys, "diagnose", LAB, "--format", "json")
    assert status == 0
    found = json.loads(out)["findings"]
    assert [f["title"] for f in found] == expected["title"].tolist()
    assert np.allclose([f["seconds"] for f in found], expected["seconds"])
    assert [f["number"] for f in found] == list(range(1, len(expected) + 1))
    status, out, _ = run(capsys, "diagnose", LAB, "--top", "3", "--brief")
    assert status == 0
    lines = out.splitlines()
    assert lines[0] == "Findings: 3 findings for 2 runs, most time at stake first"
    assert all(title in out for title in expected["title"][:3]) and not UNREADABLE.search(out)
    status, out, _ = run(capsys, "diagnose", LAB, "--top", "2", "--run", "pipeline-np4")
    assert "for 1 run," in out and "  1. " in out and "  2. " in out and "dynamic_imbalance" not in out


def test_whatif_prints_the_prediction_of_whatif(lab: xr.Dataset, capsys: pytest.CaptureFixture[str]) -> None:
    expected = perfkit.whatif(lab, "network", 4.0)
    status, out, _ = run(capsys, "whatif", "network", LAB, "-k", "4", "--format", "csv")
    assert status == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [r["run"] for r in rows] == list(expected["run"].values)
    for name in ("elapsed_before", "elapsed_after", "speedup", "speedup_low", "speedup_high"):
        assert np.allclose([float(r[name]) for r in rows], expected[name].values)
    status, out, _ = run(capsys, "whatif", "drop_slowest", LAB, "--ranks", "1,2")
    assert status == 0 and out.startswith("What if ranks 1, 2 were left out")
    assert not UNREADABLE.search(out)
    status, out, _ = run(capsys, "whatif", "drop_slowest", LAB, "-k", "1")
    assert out.startswith("What if the 1 rank with most compute were left out")


def test_pop_prints_pop_metrics_and_marks_modelled_values(capsys: pytest.CaptureFixture[str]) -> None:
    paths = [*SYNTHETIC, MPIP]
    expected = perfkit.pop_metrics(perfkit.open_runs(paths, progress=False))
    status, out, _ = run(capsys, "pop", *paths, "--format", "json")
    assert status == 0
    rows = json.loads(out)["pop"]
    for name in ("global_efficiency", "load_balance", "transfer_efficiency", "elapsed"):
        assert np.allclose([r[name] for r in rows], expected[name].values)
    assert [r["nprocs"] for r in rows] == [48, 96, 192, 4]
    assert rows[0]["transfer_efficiency_evidence"] == "modelled"
    status, out, _ = run(capsys, "pop", *paths)
    assert status == 0 and not UNREADABLE.search(out)
    assert re.search(r"48/basic\s+48\s+19\.4 s", out) and "*" in out and "* modelled" in out
    status, out, _ = run(capsys, "pop", *paths, "--format", "markdown")
    table = [line for line in out.splitlines() if line.startswith("|")]
    assert len(table) == 2 + 4 and all(line.count("|") == table[0].count("|") for line in table)


def test_scaling_prints_the_scaling_table(capsys: pytest.CaptureFixture[str]) -> None:
    expected = perfkit.scaling(perfkit.open_runs(SYNTHETIC, progress=False))
    status, out, _ = run(capsys, "scaling", *SYNTHETIC, "--format", "json")
    assert status == 0
    rows = json.loads(out)["scaling"]
    assert np.allclose([r["speedup"] for r in rows], expected["speedup"])
    assert np.allclose([r["efficiency"] for r in rows], expected["efficiency"])
    assert [r["nprocs"] for r in rows] == [48, 96, 192]
    status, out, _ = run(capsys, "scaling", *SYNTHETIC, "--base", "96", "--kind", "strong")
    assert status == 0 and "against the runs at 96 ranks; strong scaling" in out and not UNREADABLE.search(out)


def test_compare_subtracts_b_from_a_per_function_and_rank(capsys: pytest.CaptureFixture[str]) -> None:
    a_path, b_path = CLUSTER / "before.mpinside", CLUSTER / "scotch.mpinside"
    status, out, _ = run(capsys, "compare", str(a_path), str(b_path), "--format", "json")
    assert status == 0
    data = json.loads(out)
    a, b = perfkit.open_profile(a_path), perfkit.open_profile(b_path)
    summary = {row["quantity"]: row for row in data["summary"]}
    elapsed = float(a["elapsed"][0] - b["elapsed"][0])
    assert summary["elapsed"]["difference"] == pytest.approx(elapsed)
    regions = [float(perfkit.pop_metrics(ds)["elapsed"][0]) for ds in (a, b)]
    assert summary["parallel region"]["difference"] == pytest.approx(regions[0] - regions[1])
    functions = {row["function"]: row for row in data["functions"]}
    assert "Compute" not in functions
    time = [ds["profile"].sel(function="MPI_Waitall", metric="time").mean("rank").item() for ds in (a, b)]
    assert functions["MPI_Waitall"]["time_difference"] == pytest.approx(time[0] - time[1])
    sent = a["profile"].sel(function="MPI_Isend", metric="bytes_sent").sum().item()
    assert functions["MPI_Isend"]["bytes_a"] == pytest.approx(sent) and functions["MPI_Isend"]["bytes_difference"] == 0
    mpi = [ds["profile"].sel(metric="time").where(ds["kind"] != "compute").sum("function").isel(run=0).values
           for ds in (a, b)]
    assert np.allclose([row["time_difference"] for row in data["ranks"]], mpi[0] - mpi[1])
    assert [row["rank"] for row in data["ranks"]] == list(range(16))
    status, out, _ = run(capsys, "compare", str(a_path), str(b_path))
    assert status == 0 and out.startswith("A - B: A = before, B = scotch") and not UNREADABLE.search(out)
    waitall = next(line for line in out.splitlines() if line.startswith("MPI_Waitall"))
    # the text row says the JSON's numbers with units: seconds and a signed change in percent
    assert re.fullmatch(r"MPI_Waitall\s+[\d.]+ m?s\s+[\d.]+ m?s\s+[+-][\d.]+ m?s\s+[+-][\d.]+%.*", waitall)
    change = 100 * (time[0] / time[1] - 1)
    assert f"{change:+.0f}%" in waitall
    rows = list(csv.DictReader(io.StringIO(run(capsys, "compare", str(a_path), str(b_path), "-f", "csv")[1])))
    assert {r["table"] for r in rows} == {"summary", "functions", "ranks"}


def test_a_converted_store_gives_the_numbers_of_its_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "lab.zarr"
    assert main(["convert", LAB, "-o", str(store)]) == 0
    capsys.readouterr()
    from_files = json.loads(run(capsys, "pop", LAB, "-f", "json")[1])
    from_store = json.loads(run(capsys, "pop", str(store), "-f", "json")[1])
    # the store is reduced chunk by chunk: the same numbers, summed in another order (last digit)
    assert [r.keys() for r in from_store["pop"]] == [r.keys() for r in from_files["pop"]]
    for got, want in zip(from_store["pop"], from_files["pop"]):
        assert got == {k: pytest.approx(v, rel=1e-12) if isinstance(v, float) else v for k, v in want.items()}
    status, out, _ = run(capsys, "compare", str(store), str(store), "--run-a", "pipeline-np4",
                         "--run-b", "dynamic_imbalance-np4", "-f", "json")
    assert status == 0 and json.loads(out)["summary"][0]["a"] > json.loads(out)["summary"][0]["b"]
    status, _, err = run(capsys, "compare", str(store), LAB)
    assert status == 1 and "holds 2 runs (dynamic_imbalance-np4, pipeline-np4); choose one with --run-a" in err


def test_exit_status_says_what_went_wrong(capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run(capsys, "pop", str(ROOT / "no-such.mpiP"))
    assert status == 1 and "no such file" in err
    status, _, err = run(capsys, "diagnose", LAB, "--run", "nope")
    assert status == 1 and f"{LAB} has no run 'nope'; its runs: dynamic_imbalance-np4, pipeline-np4" in err
    status, _, err = run(capsys, "whatif", "balance", LAB, "--ranks", "1")
    assert status == 1 and "--ranks applies to the drop_slowest scenario only" in err
    for argv in (["whatif", "faster", LAB], ["whatif", "network", LAB, "-k", "0"], ["pop", LAB, "--format", "yaml"],
                 ["compare", LAB], ["diagnose", LAB, "--top", "0"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2


def test_the_console_script_runs_on_an_mpip_report() -> None:
    script = Path(sys.executable).with_name("perfkit")
    done = subprocess.run([str(script), "diagnose", MPIP, "--brief"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Findings: ") and not UNREADABLE.search(done.stdout)
    done = subprocess.run([str(script), "pop", "--help"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "exit status: 0 printed, 1" in done.stdout


def _zero_times(source: Path, target: Path) -> Path:
    """``source`` with every time of its time table 0 (a run in which no time was measured)."""
    lines, in_times = [], False
    for line in source.read_text().splitlines():
        if line.startswith(">>>>"):
            in_times, header = "time totals" in line, True
        elif in_times and not header and line.strip():
            rank, *values = line.split()
            line = " ".join([rank, *("0" if v != "-----" else v for v in values)])
        else:
            header = False
        lines.append(line)
    target.write_text("\n".join(lines) + "\n")
    return target


@pytest.mark.parametrize("fmt", ["json", "csv", "text"])
def test_a_run_of_zero_elapsed_time_is_marked_not_infinite(fmt: str, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    zero = str(_zero_times(Path(SYNTHETIC[0]), tmp_path / "ZERO.mpinside"))
    status, out, _ = run(capsys, "scaling", zero, *SYNTHETIC[:2], "--format", fmt)
    assert status == 0 and "Infinity" not in out and not re.search(r"\binf\b", out)
    note = "elapsed time is 0 s (no time measured): left out of the speed-ups and the base"
    if fmt == "json":
        zero_row, base, other = json.loads(out)["scaling"]
        assert zero_row["elapsed"] == 0 and zero_row["speedup"] is None and zero_row["jobs_per_day"] is None
        assert zero_row["note"] == note and base["note"] is None
        assert base["speedup"] == 1.0 and other["speedup"] == pytest.approx(1.6669, abs=1e-4)
    elif fmt == "csv":
        row = next(r for r in csv.DictReader(io.StringIO(out)) if r["elapsed"] == "0.0")
        assert row["speedup"] == row["efficiency"] == row["jobs_per_day"] == "" and row["note"] == note
    else:
        assert f"ZERO: {note}" in out
    status, _, err = run(capsys, "scaling", zero)
    assert status == 1 and err.endswith("ZERO: elapsed time is 0 s (no time measured); there is no time to scale "
                                        "against\n")


@pytest.mark.parametrize(("option", "said"), [
    (["--ranks", "99"], "--ranks 99: the run has ranks 0..3; at most 3 of them can be left out"),
    (["--ranks", "0,1,2,3"], "--ranks 0,1,2,3: the run has ranks 0..3; at most 3 of them can be left out"),
    (["-k", "4"], "-k 4: drop_slowest leaves out 1..3 ranks (the run has 4 ranks)"),
])
def test_drop_slowest_of_ranks_the_run_lacks_is_a_usage_error(option: list[str], said: str,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "whatif", "drop_slowest", str(ROOT / "data" / "lab" / "pipeline-np4.mpinside"),
                           *option)
    assert (status, out, err) == (2, "", f"perfkit whatif: error: {said}\n")
    status, _, err = run(capsys, "whatif", "drop_slowest", LAB, "--ranks", "4")
    assert status == 2 and err.endswith("every run has ranks 0..3; at most 3 of them can be left out\n")
