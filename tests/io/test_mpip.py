"""mpiP reader: real reports against their own summary sections, user-guide excerpts, a report
writer for round trips (verbose and concise), and broken input."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import perfkit
from perfkit.errors import PerfkitFormatError
from perfkit.io import mpip
from perfkit.model import read_warnings, validate

DATA = Path(__file__).resolve().parents[1] / "data" / "mpip"
REAL = sorted((DATA / "real").glob("*/*/*.mpiP"))
HPCCG_2 = next(p for p in REAL if p.parts[-3:-1] == ("HPCCG-strong", "2"))
CLOVER_4 = next(p for p in REAL if p.parts[-3:-1] == ("CloverLeaf-strong", "4"))
GUIDE_28 = DATA / "userguide" / "v2.8.0_report.mpiP"
GUIDE_35 = DATA / "userguide" / "v3.5_report.mpiP"
RULE = "-" * 75


# ---------------------------------------------------------------- helpers reading the raw text


def section_rows(path: Path, title: str) -> list[list[str]]:
    """Whitespace-split rows of the section whose heading starts with ``title`` (header excluded)."""
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"@--- {title}"))
    rows = []
    for line in lines[start + 3:]:
        if line.startswith(RULE) or line.startswith("@---"):
            break
        if line.strip():
            rows.append(line.split())
    return rows


def half_ulp(x: float, digits: int = 3) -> float:
    """Half a unit in the last place of ``x`` printed with ``digits`` significant digits."""
    return 0.0 if x == 0 else 0.5 * 10 ** (math.floor(math.log10(abs(x))) - digits + 1)


# ---------------------------------------------------------------- real reports


def test_fixtures_present():
    assert len(REAL) == 10


@pytest.mark.parametrize("path", REAL, ids=lambda p: "/".join(p.parts[-3:-1]))
def test_rank_mpi_time_matches_mpi_time_section(path: Path):
    ds = validate(mpip.read(path, label="r"))
    assert read_warnings(ds) == []
    table = mpip.callsites(path)
    rows = table[~table["aggregate"]]
    mpi = ds["profile"].sel(run="r", metric="time").drop_sel(function="Compute").sum("function")
    for task, app, mpitime, _ in section_rows(path, "MPI Time"):
        if task == "*":
            continue
        rank = int(task)
        mine = rows[rows["rank"] == rank]
        slack = sum(c * half_ulp(m * 1e3) / 1e3 for c, m in zip(mine["count"], mine["time_mean"], strict=True))
        assert abs(float(mpi.sel(rank=rank)) - float(mpitime)) <= half_ulp(float(mpitime)) + slack
        compute = float(ds["profile"].sel(run="r", rank=rank, function="Compute", metric="time"))
        assert compute == pytest.approx(float(app) - float(mpitime))


@pytest.mark.parametrize("path", REAL, ids=lambda p: "/".join(p.parts[-3:-1]))
def test_star_rows_equal_sums_over_ranks(path: Path):
    table = mpip.callsites(path)
    for (_function, _site), group in table.groupby(["function", "site"]):
        ranks, star = group[~group["aggregate"]], group[group["aggregate"]].iloc[0]
        assert ranks["count"].sum() == star["count"]
        slack = sum(c * half_ulp(m * 1e3) / 1e3 for c, m in zip(ranks["count"], ranks["time_mean"], strict=True))
        slack += star["count"] * half_ulp(star["time_mean"] * 1e3) / 1e3
        assert abs(ranks["time"].sum() - star["time"]) <= slack
        assert ranks["time_max"].max() == star["time_max"]
        assert ranks["time_min"].min() == star["time_min"]
        if star["bytes_sent"] > 0:
            assert abs(ranks["bytes_sent"].sum() - star["bytes_sent"]) <= half_ulp(star["bytes_sent"], 4) + sum(
                half_ulp(b, 4) for b in ranks["bytes_sent"])
    tasks = section_rows(path, "MPI Time")
    star = next(r for r in tasks if r[0] == "*")
    for column in (1, 2):
        total = sum(float(r[column]) for r in tasks if r[0] != "*")
        assert abs(total - float(star[column])) <= half_ulp(float(star[column])) + sum(
            half_ulp(float(r[column])) for r in tasks if r[0] != "*")


@pytest.mark.parametrize("path", REAL, ids=lambda p: "/".join(p.parts[-3:-1]))
def test_aggregate_time_agrees_with_function_sums(path: Path):
    ds = mpip.read(path, label="r")
    table = mpip.callsites(path)
    ranks = table[~table["aggregate"]]
    per_function = ds["profile"].sel(run="r", metric="time").sum("rank")
    listed: dict[str, float] = {}
    for call, site, time_ms, *_ in section_rows(path, "Aggregate Time"):
        function, site = "MPI_" + call, int(site)
        mine = ranks[(ranks["function"] == function) & (ranks["site"] == site)]
        slack = sum(c * half_ulp(m * 1e3) for c, m in zip(mine["count"], mine["time_mean"], strict=True))
        assert abs(mine["time"].sum() * 1e3 - float(time_ms)) <= half_ulp(float(time_ms)) + slack
        listed[function] = listed.get(function, 0.0) + float(time_ms) / 1e3
    all_sites_listed = table["site"].nunique() <= 20
    for function, seconds in listed.items():
        total = float(per_function.sel(function=function))
        assert seconds <= total * (1 + 5e-3) + 1e-6
        if all_sites_listed:
            assert seconds == pytest.approx(total, rel=5e-3, abs=1e-6)


def test_run_metadata_from_file_wins():
    ds = mpip.read(HPCCG_2, label="h2", nprocs=99, system="laptop")
    assert float(ds["nprocs"][0]) == 2
    assert float(ds["nodes"][0]) == 1 and float(ds["ppn"][0]) == 2
    assert float(ds["elapsed"][0]) == 9.56
    assert str(ds["format"][0].values) == "mpip" and str(ds["system"][0].values) == "laptop"
    assert any("nprocs=99" in w for w in read_warnings(ds))
    assert ds.attrs["mpip_version"] == "3.5.0" and ds.attrs["mpip_options"] == "-k 2 -p -y"
    assert json.loads(ds.attrs["mpip_hosts"]) == ["vm", "vm"]


def test_known_values_hpccg_2():
    ds = mpip.read(HPCCG_2, label="h")
    p = ds["profile"].sel(run="h")
    # Send sites 2, 3, 6, 12, 17 on rank 0: counts 1+1+149+1+1, bytes 4+16380+4.882e6+4+32770
    assert float(p.sel(rank=0, function="MPI_Send", metric="calls")) == 153
    sent = float(p.sel(rank=0, function="MPI_Send", metric="bytes_sent"))
    assert sent == pytest.approx(4 + 1.638e4 + 4.882e6 + 4 + 3.277e4)
    assert float(p.sel(rank=1, function="MPI_Allreduce", metric="time_max")) == pytest.approx(0.118)
    assert np.isnan(p.sel(rank=0, function="Compute", metric="calls"))
    assert float(ds["coll_time_share"].sel(run="h", function="MPI_Allreduce", comm_bin=0, size_bin=8)) == 75.4
    assert float(ds["p2p_sent_share"].sel(run="h", function="MPI_Send", comm_bin=0, size_bin=32768)) == 99.6
    assert np.isnan(ds["p2p_sent_share"].sel(run="h", function="MPI_Send", comm_bin=0, size_bin=8))


def test_identical_looking_sites_are_kept_apart_by_id():
    table = mpip.callsites(CLOVER_4)
    waits = table[(table["function"] == "MPI_Waitall") & (table["parent"] == "__clover_module_MOD_clover_exchange")]
    sites = waits["site"].unique()
    assert len(sites) > 5  # same file, line and stack, different IDs
    assert waits[["file", "line", "stack"]].drop_duplicates().shape[0] == 1
    ds = mpip.read(CLOVER_4, label="c")
    total = waits[waits["rank"] == 2]["time"].sum()
    assert float(ds["profile"].sel(run="c", rank=2, function="MPI_Waitall", metric="time")) == pytest.approx(total)
    assert float(ds["profile"].sel(run="c", rank=2, function="MPI_Waitall", metric="calls")) == waits[
        waits["rank"] == 2]["count"].sum()


def test_parent_funct_with_spaces_commas_parentheses():
    table = mpip.callsites(HPCCG_2)
    site = table[(table["site"] == 5) & (table["rank"] == 0)].iloc[0]
    assert site["function"] == "MPI_Irecv"
    assert site["file"] == "exchange_externals.cpp" and site["line"] == 90
    assert site["parent"] == "exchange_externals(HPC_Sparse_Matrix_STRUCT*, double const*)"
    assert site["stack"] == ("exchange_externals(HPC_Sparse_Matrix_STRUCT*, double const*) (exchange_externals.cpp:90)"
                             " < HPCCG(HPC_Sparse_Matrix_STRUCT*, double const*, double*, int, double, int&, double&, "
                             "double*) (HPCCG.cpp:109)")


def test_open_dataset_engine_and_sniffing():
    ds = xr.open_dataset(HPCCG_2, engine="mpip")
    assert "profile" in ds and ds.attrs["reader"] == "perfkit.io.mpip"
    ds2 = perfkit.open_profile(HPCCG_2)
    assert str(ds2["format"][0].values) == "mpip"
    xr.testing.assert_identical(ds["profile"], ds2["profile"])
    assert mpip.sniff(HPCCG_2, HPCCG_2.read_bytes()[:4096])
    assert not mpip.sniff(HPCCG_2, b"<?xml version='1.0'?>\n<ipm>")


def test_open_runs_combines_scaling_series():
    ds = perfkit.open_runs([p for p in REAL if "HPCCG" in str(p)])
    assert ds.sizes["run"] == 5 and ds.sizes["rank"] == 16
    assert sorted(ds["nprocs"].values.tolist()) == [1, 2, 4, 8, 16]


# ---------------------------------------------------------------- user guide excerpts


def test_userguide_28_threshold_hides_rank_rows():
    ds = mpip.read(GUIDE_28, label="g")
    p = ds["profile"].sel(run="g")
    assert ds.attrs["mpip_version"] == "2.8.0"
    assert float(p.sel(rank=0, function="MPI_Barrier", metric="time")) == pytest.approx((0.107 + 0.136) / 1e3)
    assert np.isnan(p.sel(rank=1, function="MPI_Barrier", metric="time"))  # site 1 rows under -t 10.0
    assert float(p.sel(rank=2, function="MPI_Send", metric="bytes_sent")) == 4.8e5
    assert float(p.sel(rank=1, function="MPI_File_read", metric="bytes_io")) == 1280
    assert any("print threshold" in w for w in read_warnings(ds))
    assert list(ds["rank"].values) == [0, 1, 2, 3] and float(ds["nodes"][0]) == 2 and float(ds["ppn"][0]) == 2


def test_userguide_35_deep_stacks_count_column_and_histograms():
    ds = mpip.read(GUIDE_35, label="g")
    table = mpip.callsites(GUIDE_35)
    row = table[(table["site"] == 1) & (table["function"] == "MPI_Allreduce")].iloc[0]
    assert row["stack"].endswith("< main (amg.c:421)")
    assert float(ds["coll_time_share"].sel(run="g", function="MPI_Bcast", comm_bin=16, size_bin=0)) == 0.0155
    assert any("211 call sites announced" in w for w in read_warnings(ds))


def test_userguide_excerpts_verbatim_are_not_reports():
    for path in (DATA / "userguide").glob("*.txt"):
        with pytest.raises(PerfkitFormatError):
            mpip.read(path)


# ---------------------------------------------------------------- broken input


def broken(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bad.mpiP"
    path.write_text(text)
    return path


def lines_of(path: Path) -> list[str]:
    return path.read_text().splitlines()


@pytest.mark.parametrize(
    ("edit", "line", "words"),
    [
        (lambda ls: ls[:120], 120, "truncated"),
        (lambda ls: [ls[0], ls[1], "@ Version                  : 4.0.1", *ls[3:]], 3, "not supported"),
        (lambda ls: [ls[0], ls[1], *ls[3:]], 2, "Version"),
        (lambda ls: ["garbage", *ls], 1, "@ mpiP"),
        (lambda ls: [*ls[:19], "   0       9.56     2.2x    23.05", *ls[20:]], 20, "MPITime"),
        (lambda ls: [*ls[:19], "   0       9.56        2.2", *ls[20:]], 20, "expected 4 columns"),
        (lambda ls: [*ls[:126], "Allreduce            1    0      1   0.0748   0.0748   0.0748   0.00", *ls[127:]],
         127, "expected 9 columns"),
        (lambda ls: [*ls[:126], "Allreduce            1    0      1   0.0748   fast   0.0748   0.00   0.00", *ls[127:]],
         127, "Mean"),
        (lambda ls: [*ls[:126], "Allreduce            1    0.5    1   0.07   0.07   0.07   0.00   0.00", *ls[127:]],
         127, "integer"),
    ],
    ids=["truncated", "version", "no-version", "garbage", "text-number", "short-row", "short-site-row", "text-mean",
         "fractional-rank"],
)
def test_bad_input_names_file_line_and_expectation(tmp_path: Path, edit, line: int, words: str):
    path = broken(tmp_path, "\n".join(edit(lines_of(HPCCG_2))) + "\n")
    with pytest.raises(PerfkitFormatError) as info:
        mpip.read(path)
    assert info.value.path == str(path) and info.value.line == line
    assert words in str(info.value)


def test_row_line_numbers_are_those_of_the_file():
    assert lines_of(HPCCG_2)[126].startswith("Allreduce            1    0")
    assert lines_of(HPCCG_2)[19].startswith("   0       9.56")


def test_empty_and_blank_files(tmp_path: Path):
    for text in ("", "\n\n  \n"):
        with pytest.raises(PerfkitFormatError, match="empty"):
            mpip.read(broken(tmp_path, text))


def test_binary_garbage(tmp_path: Path):
    path = tmp_path / "x.mpiP"
    path.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(PerfkitFormatError, match="@ mpiP"):
        mpip.read(path)


def test_unknown_section_and_trailing_text_are_warned(tmp_path: Path):
    ls = lines_of(HPCCG_2)
    end = next(i for i, line in enumerate(ls) if "End of Report" in line)
    extra = [RULE, "@--- Something New (all) " + "-" * 50, RULE, "A B", "1 2"]
    path = broken(tmp_path, "\n".join([*ls[:end - 1], *extra, *ls[end - 1:], "stray text"]) + "\n")
    warnings = read_warnings(mpip.read(path))
    assert any("Something New" in w for w in warnings) and any("after '@--- End of Report'" in w for w in warnings)


# ---------------------------------------------------------------- a small mpiP report writer


def _num(x: float, fixed: bool, digits: int = 3) -> str:
    return f"{x:.3f}" if fixed else f"{x:.{digits}g}"


def _heading(title: str) -> list[str]:
    return [RULE, f"@--- {title} " + "-" * max(0, 75 - len(title) - 6), RULE]


def write_report(path: Path, nranks: int, sites: list[dict], *, style: str = "verbose", version: str = "3.5.0",
                 depth: int = 1, fixed: bool = False) -> Path:
    """An mpiP report of ``sites`` (id, op, parent, file, line, rows {rank: (count, mean_ms, bytes)})."""
    app = [10.0 + r for r in range(nranks)]
    mpi = [sum(c * m for s in sites for rk, (c, m, _b) in s["rows"].items() if rk == r) / 1e3 for r in range(nranks)]
    out = ["@ mpiP", "@ Command : ./app 1 2 ", f"@ Version                  : {version}",
           "@ MPIP env var             : " + ("-c" if style == "concise" else "") + (" -e" if fixed else "")]
    if style == "verbose":
        out += [f"@ MPI Task Assignment      : {r} node{r // 2}" for r in range(nranks)]
        out += ["", *_heading("MPI Time (seconds)"), "Task    AppTime    MPITime     MPI%"]
        out += [f"{r:4d} {_num(app[r], fixed):>10} {_num(mpi[r], fixed):>10}    {100 * mpi[r] / app[r]:5.2f}"
                for r in range(nranks)]
        out += [f"   * {_num(sum(app), fixed):>10} {_num(sum(mpi), fixed):>10}    {100 * sum(mpi) / sum(app):5.2f}"]
    else:
        out += ["", *_heading("Task Time Statistics (seconds)"), f"{'':10} {'AppTime':>17} {'MPITime':>17} "
                f"{'MPI%':>6} {'App Task':>10} {'MPI Task':>10}"]
        amax, amin = int(np.argmax(app)), int(np.argmin(app))
        mmax, mmin = int(np.argmax(mpi)), int(np.argmin(mpi))
        out += [f"{'Max':<10} {app[amax]:17f} {mpi[mmax]:17f} {'':6} {amax:10d} {mmax:10d}",
                f"{'Mean':<10} {np.mean(app):17f} {np.mean(mpi):17f}",
                f"{'Min':<10} {app[amin]:17f} {mpi[mmin]:17f} {'':6} {amin:10d} {mmin:10d}",
                f"{'Stddev':<10} {np.std(app, ddof=1) if nranks > 1 else 0:17f} {0:17f}",
                f"{'Aggregate':<10} {sum(app):17f} {sum(mpi):17f} {100 * sum(mpi) / sum(app):6.2f}"]
    if depth > 0:
        out += [*_heading(f"Callsites: {len(sites)}"),
                f" ID Lev {'File/Address':<20} Line {'Parent_Funct':<40} MPI_Call"]
        for s in sites:
            out.append(f"{s['id']:3d}   0 {s['file']:<20} {s['line']:4d} {s['parent']:<40} {s['op']}")
            out += [f"{s['id']:3d}   {lev} caller{lev}.c           {10 * lev:4d} {'outer(int, char**)':<40} "
                    for lev in range(1, depth)]
    head = "Call                 Site       Time    App%    MPI%" + ("      Count" if version.startswith("3.5") else "")
    out += [*_heading("Aggregate Time (top twenty, descending, milliseconds)"), head]
    for s in sites[:20]:
        total = sum(c * m for c, m, _b in s["rows"].values())
        count = sum(c for c, _m, _b in s["rows"].values())
        extra = f" {count:10d}" if version.startswith("3.5") else ""
        out.append(f"{s['op']:<20} {s['id']:4d} {_num(total, fixed):>10}  {0:6.2f}  {0:6.2f}{extra}")
    out += _time_section(sites, style, fixed) + _sent_section(sites, style, fixed)
    out += _heading("End of Report")
    path.write_text("\n".join(out) + "\n")
    return path


def _time_section(sites: list[dict], style: str, fixed: bool) -> list[str]:
    if style == "concise":
        out = [*_heading(f"Callsite Time statistics (all callsites, milliseconds): {len(sites)}"),
               "Name              Site   Tasks       Max      Mean       Min MaxRnk MinRnk"]
        for s in sites:
            totals = {r: c * m for r, (c, m, _b) in s["rows"].items()}
            hi, lo = max(totals, key=totals.get), min(totals, key=totals.get)
            mean = sum(totals.values()) / len(totals)
            out.append(f"{s['op']:<17} {s['id']:4d} {len(totals):7d} {_num(totals[hi], fixed, 4):>9} "
                       f"{_num(mean, fixed, 4):>9} {_num(totals[lo], fixed, 4):>9} {hi:6d} {lo:6d}")
        return out
    out = [*_heading("Callsite Time statistics (all, milliseconds): 0"),
           "Name              Site Rank  Count      Max     Mean      Min   App%   MPI%"]
    for s in sorted(sites, key=lambda s: (s["op"], s["id"])):
        for r, (c, m, _b) in sorted(s["rows"].items()):
            out.append(f"{s['op']:<17} {s['id']:4d} {r:4d} {c:6d} {_num(m, fixed):>8} {_num(m, fixed):>8} "
                       f"{_num(m, fixed):>8} {0:6.2f} {0:6.2f}")
        count = sum(c for c, _m, _b in s["rows"].values())
        mean = sum(c * m for c, m, _b in s["rows"].values()) / count
        out += [f"{s['op']:<17} {s['id']:4d}    * {count:6d} {_num(mean, fixed):>8} {_num(mean, fixed):>8} "
                f"{_num(mean, fixed):>8} {0:6.2f} {0:6.2f}", ""]
    return out


def _sent_section(sites: list[dict], style: str, fixed: bool) -> list[str]:
    senders = [s for s in sites if any(b for _c, _m, b in s["rows"].values())]
    if not senders:
        return []
    if style == "concise":
        out = [*_heading(f"Callsite Message Sent statistics (all callsites, sent bytes): {len(senders)}"),
               "Name              Site   Tasks       Max      Mean       Min MaxRnk MinRnk"]
        for s in senders:
            sent = {r: b for r, (_c, _m, b) in s["rows"].items()}
            hi, lo = max(sent, key=sent.get), min(sent, key=sent.get)
            mean = sum(sent.values()) / len(sent)
            out.append(f"{s['op']:<17} {s['id']:4d} {len(sent):7d} {sent[hi]:9d} {mean:9.4g} {sent[lo]:9d} "
                       f"{hi:6d} {lo:6d}")
        return out
    out = [*_heading("Callsite Message Sent statistics (all, sent bytes)"),
           "Name              Site Rank   Count       Max      Mean       Min       Sum"]
    for s in senders:
        for r, (c, _m, b) in sorted(s["rows"].items()):
            out.append(f"{s['op']:<17} {s['id']:4d} {r:4d} {c:7d} {b / c:9.4g} {b / c:9.4g} {b / c:9.4g} {b:9d}")
        out.append("")
    return out


PARENTS = ["main", "solve(Matrix*, double const*)", "ns::halo<3> (x, y)", "f (a, b), g", "__mod_MOD_sweep"]
OPS = ["Allreduce", "Send", "Isend", "Waitall", "Bcast"]


@st.composite
def reports(draw):
    """Random call-site tables: ranks, sites (op, parent) and per-rank (count, mean ms, bytes)."""
    nranks = draw(st.integers(1, 6))
    fixed = draw(st.booleans())
    three_digits = st.tuples(st.integers(100, 999), st.integers(-4, 2))
    means = (st.integers(1, 99_999).map(lambda k: k / 1000) if fixed else
             three_digits.map(lambda t: float(f"{t[0] * 10.0 ** (t[1] - 2):.3g}")))
    sites = []
    for site_id in range(1, draw(st.integers(1, 8)) + 1):
        op = draw(st.sampled_from(OPS))
        ranks = draw(st.sets(st.integers(0, nranks - 1), min_size=1))
        rows = {r: (draw(st.integers(1, 500)), draw(means),
                    draw(st.integers(0, 10**6)) if op in ("Send", "Isend", "Bcast") else 0) for r in sorted(ranks)}
        sites.append({"id": site_id, "op": op, "parent": draw(st.sampled_from(PARENTS)), "file": "src/x.c",
                      "line": draw(st.integers(1, 9999)), "rows": rows})
    return nranks, sites, fixed, draw(st.integers(0, 3)), draw(st.sampled_from(["3.5.0", "3.4.1", "2.8.0"]))


def expected(nranks: int, sites: list[dict]) -> dict[tuple[int, str], tuple[float, int, float]]:
    out: dict[tuple[int, str], list[float]] = {}
    for s in sites:
        for r, (c, m, b) in s["rows"].items():
            cell = out.setdefault((r, "MPI_" + s["op"]), [0.0, 0, 0.0])
            cell[0] += c * m / 1e3
            cell[1] += c
            cell[2] += b
    return {k: tuple(v) for k, v in out.items()}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=reports())
def test_writer_round_trip_verbose(tmp_path: Path, case):
    nranks, sites, fixed, depth, version = case
    path = write_report(tmp_path / "r.mpiP", nranks, sites, version=version, depth=depth, fixed=fixed)
    ds = validate(mpip.read(path, label="w"))
    assert read_warnings(ds) == []  # the report agrees with itself within its printed precision
    p = ds["profile"].sel(run="w")
    want = expected(nranks, sites)
    for function in {"MPI_" + s["op"] for s in sites}:
        for r in range(nranks):
            time, calls, sent = want.get((r, function), (0.0, 0, 0.0))
            assert float(p.sel(rank=r, function=function, metric="time")) == pytest.approx(time, rel=1e-9, abs=1e-12)
            assert float(p.sel(rank=r, function=function, metric="calls")) == calls
            assert float(p.sel(rank=r, function=function, metric="bytes_sent")) == sent
    table = mpip.callsites(path)
    for s in sites:
        row = table[(table["site"] == s["id"]) & table["aggregate"]].iloc[0]
        assert row["function"] == "MPI_" + s["op"]
        if depth > 0:
            assert row["parent"] == s["parent"] and row["line"] == s["line"]
            assert row["stack"].count(" < ") == depth - 1
        else:
            assert row["parent"] != row["parent"]  # NaN: no Callsites section with -k 0
    assert float(ds["nprocs"][0]) == nranks and float(ds["elapsed"][0]) == pytest.approx(10.0 + nranks - 1)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=reports())
def test_writer_round_trip_concise(tmp_path: Path, case):
    nranks, sites, fixed, depth, version = case
    path = write_report(tmp_path / "c.mpiP", nranks, sites, style="concise", version=version, depth=depth, fixed=fixed)
    ds = validate(mpip.read(path, label="c"))
    assert ds.attrs["mpip_style"] == "concise"
    assert bool(ds["profile"].isnull().all())  # no invented per-rank values
    assert float(ds["nprocs"][0]) == nranks and ds.sizes["rank"] == nranks
    want = expected(nranks, sites)
    summary = ds["summary"].sel(run="c", metric="time")
    for s in sites:
        function = "MPI_" + s["op"]
        total = sum(v[0] for (r, f), v in want.items() if f == function)
        # each site's total is its printed per-task Mean x Tasks: with -e the Mean has three decimals [ms]
        printed = sum(len(t["rows"]) for t in sites if t["op"] == s["op"]) * 5e-4 / 1e3 if fixed else 0.0
        got = float(summary.sel(function=function, stat="total"))
        assert got == pytest.approx(total, rel=2e-3, abs=1e-9 + printed)
        mean = float(summary.sel(function=function, stat="mean"))
        assert mean == pytest.approx(total / nranks, rel=2e-3, abs=(1e-9 + printed) / nranks)
        single = sum(t["op"] == s["op"] for t in sites) == 1
        assert np.isnan(summary.sel(function=function, stat="max")) != single
        if single:
            totals = {r: c * m for r, (c, m, _b) in s["rows"].items()}
            rank_of_max = float(ds["rank_of_max"].sel(run="c", function=function, metric="time"))
            assert rank_of_max == max(totals, key=totals.get)
    assert float(ds["task_time"].sel(run="c", task_metric="app", task_stat="max")) == 10.0 + nranks - 1
    assert "count" not in mpip.callsites(path).columns


def test_run_labels_drop_the_process_id_unless_only_it_tells_runs_apart(tmp_path: Path) -> None:
    strong = sorted((DATA / "real" / "HPCCG-strong").glob("*/*.mpiP"), key=lambda p: int(p.parent.name))
    runs = perfkit.open_runs(strong, progress=False)
    assert runs["run"].values.tolist() == [f"test_HPCCG.{p.parent.name}" for p in strong]
    assert mpip.run_stem(Path("ring.4.1234.1.mpiP")) == "ring.4" and mpip.run_stem(Path("a.4.1.mpiP")) == "a.4.1"
    assert mpip.run_stem(Path("x.4.1234.1.txt")) == "x.4.1234.1"
    report = strong[2].read_text()  # 4 ranks
    for folder, pid in (("before", "111"), ("after", "222")):  # two runs of one program: the folders tell them apart
        (tmp_path / folder).mkdir()
        (tmp_path / folder / f"test_HPCCG.4.{pid}.1.mpiP").write_text(report)
    (tmp_path / "after" / "test_HPCCG.4.333.1.mpiP").write_text(report.replace("27750", "333"))
    labels = perfkit.io.open.unique_labels(sorted(tmp_path.glob("*/*.mpiP")))
    assert labels == ["test_HPCCG.4.222.1", "test_HPCCG.4.333.1", "test_HPCCG.4.111.1"]  # only the pid does
    labels = perfkit.io.open.unique_labels([tmp_path / "after" / "test_HPCCG.4.222.1.mpiP",
                                            tmp_path / "before" / "test_HPCCG.4.111.1.mpiP"])
    assert labels == ["after/test_HPCCG.4", "before/test_HPCCG.4"]


@pytest.mark.parametrize(("column", "token"), [
    ("AppTime", "nan"), ("AppTime", "NaN"), ("AppTime", "inf"), ("AppTime", "-inf"), ("AppTime", "-9.51"),
    ("MPITime", "-0.168"), ("MPITime", "nan"), ("MPITime", "1e308"),
])
def test_a_task_time_no_clock_measures_is_refused_naming_line_and_token(column, token, tmp_path):
    """mpiP prints no NaN, negative or infinite time: refused at its line, the token read quoted (issue 37)."""
    source = DATA / "userguide" / "v3.5_report.mpiP"
    lines = source.read_text().splitlines()
    row = next(i for i, line in enumerate(lines) if line.split()[:1] == ["Task"]) + 2  # rank 1
    fields = lines[row].split()
    fields[1 if column == "AppTime" else 2] = token
    lines[row] = "   ".join(fields)
    path = tmp_path / "bad.mpiP"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(PerfkitFormatError) as err:
        perfkit.open_profile(path)
    assert str(err.value) == f"{path}, line {row + 1}: column {column!r}: expected a non-negative time, found {token!r}"
