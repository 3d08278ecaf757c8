"""IPM XML reader: real logs against IPM's own reports, traffic orientation, bad input, round trip."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import sparse
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import perfkit
from perfkit.errors import PerfkitFormatError
from perfkit.io import ipm
from perfkit.model import read_warnings, validate

DATA = Path(__file__).resolve().parents[1] / "data" / "ipm"
V206 = DATA / "ipm-hpc-v2_hunold.1491564090.960496.ipm.xml"
V0983 = DATA / "ipm-hpc-v2_pin1008.xml"
V200 = DATA / "IPM_test_fuerling.1372848898.ipm.xml"
REAL = sorted(DATA.glob("real/*/*/*.ipm.xml"))
ALL = [V206, V0983, V200, *REAL]


def _id(path: Path) -> str:
    return "/".join(path.parts[-3:-1]) if path.parent.name.isdigit() else path.name[:24]


# --------------------------------------------------------------------------- helpers


def per_rank(ds: xr.Dataset, metric: str, mpi_only: bool = False) -> np.ndarray:
    """Sum over functions of ``metric`` per rank (MPI functions only if asked)."""
    prof = ds["profile"].isel(run=0).sel(metric=metric)
    if mpi_only:
        prof = prof.sel(function=[f for f in ds["function"].values if str(f).startswith("MPI_")])
    return prof.sum("function").values


def function_totals(ds: xr.Dataset, metric: str) -> dict[str, float]:
    totals = ds["profile"].isel(run=0).sel(metric=metric).sum("rank")
    return {str(f): float(v) for f, v in zip(ds["function"].values, totals.values)}


def perf_attrs(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """perf@wtime and perf@mtime per task, in file order, read with a regex (not the reader)."""
    text = path.read_text(encoding="latin-1")
    pairs = re.findall(r'<perf wtime="([^"]+)"[^>]*?mtime="([^"]+)"', text)
    return np.array([float(w) for w, _ in pairs]), np.array([float(m) for _, m in pairs])


def close(actual: float, expected: float, rel: float, abs_: float = 1e-9) -> float:
    """Assert ``actual`` is within tolerance of ``expected``; return the relative deviation."""
    assert actual == pytest.approx(expected, rel=rel, abs=abs_)
    return abs(actual - expected) / max(abs(expected), 1e-300)


def parse_ipm_parse_full(path: Path) -> dict:
    """IPM's ``ipm_parse -full`` text report: header, job table, per-function rows, region table."""
    text = path.read_text()
    job, _, region = text.partition("# region :")
    out = {
        "wallclock": float(re.search(r"wallclock : ([\d.]+) sec", job)[1]),
        "ntasks": int(re.search(r"mpi_tasks : (\d+) on (\d+) nodes", job)[1]),
        "nodes": int(re.search(r"mpi_tasks : (\d+) on (\d+) nodes", job)[2]),
        "comm_pct": float(re.search(r"%comm\s+: ([\d.]+)", job)[1]),
    }
    for key, body in (("job", job), ("region", region)):
        rows = dict(re.findall(r"^# (wallclock|mpi)\s+([\d.e+-]+(?:\s+[\d.e+-]+){3})\s*$", body, re.M))
        out[key] = {name: [float(v) for v in vals.split()] for name, vals in rows.items()}
        out[key]["functions"] = {
            name: (float(t), int(c)) for name, t, c in re.findall(r"^# (MPI_\w+)\s+([\d.e+-]+)\s+(\d+)", body, re.M)
        }
    out["region_name"] = region.split()[0]
    return out


def parse_banner(path: Path) -> dict:
    """IPM's end-of-run banner (the last ``##IPMv`` block of the job's stdout)."""
    block = path.read_text().rsplit("##IPMv", 1)[1]
    nums = r"((?:\s+[\d.]+)+)"
    mpi_rows = [[float(v) for v in m.split()] for m in re.findall(r"^#\s+MPI\s+:" + nums, block, re.M)]
    return {
        "wallclock": float(re.search(r"wallclock : ([\d.]+)", block)[1]),
        "ntasks": int(re.search(r"mpi_tasks : (\d+) on (\d+) nodes", block)[1]),
        "nodes": int(re.search(r"mpi_tasks : (\d+) on (\d+) nodes", block)[2]),
        "comm_pct": float(re.search(r"%comm\s+: ([\d.]+)", block)[1]),
        "wall_row": [float(v) for v in re.search(r"^# wallclock :" + nums, block, re.M)[1].split()],
        "mpi_row": mpi_rows[0],
        "mpi_pct_row": next(r for r in mpi_rows if len(r) == 3),
        "calls_row": next(r for r in mpi_rows[1:] if len(r) == 4),
        "functions": {name: (float(t), int(c))
                      for name, t, c in re.findall(r"^# (MPI_\w+)\s+([\d.]+)\s+(\d+)\s+[\d.]+\s*$", block, re.M)},
    }


def stats(values: np.ndarray) -> list[float]:
    return [float(values.sum()), float(values.mean()), float(values.min()), float(values.max())]


# --------------------------------------------------------------------------- real files


@pytest.mark.parametrize("path", ALL, ids=_id)
def test_reads_into_a_valid_dataset(path: Path) -> None:
    ds = validate(ipm.read(path))
    assert ds["format"].item() == "ipm"
    assert ds.attrs["reader"] == "perfkit.io.ipm"
    assert set(ds["kind"].values) <= {"compute", "transfer", "other"}
    assert ds["units"].sel(metric="bytes").item() == "B"


@pytest.mark.parametrize(("path", "nprocs", "nodes", "ppn"), [
    (V206, 27, 27, 1), (V0983, 168, 42, 4), (V200, 4, 1, 4),
], ids=["2.0.6", "0.983", "2.0.0"])
def test_run_metadata_from_the_file(path: Path, nprocs: int, nodes: int, ppn: int) -> None:
    ds = ipm.read(path)
    assert (ds["nprocs"].item(), ds["nodes"].item(), ds["ppn"].item()) == (nprocs, nodes, ppn)
    wtime, _ = perf_attrs(path)
    assert ds["elapsed"].item() == wtime.max()


@pytest.mark.parametrize("path", ALL, ids=_id)
def test_mpi_time_per_rank_equals_perf_mtime(path: Path) -> None:
    """Sum of the MPI functions' seconds per rank = perf@mtime, within print precision."""
    ds = ipm.read(path)
    wtime, mtime = perf_attrs(path)
    prof = ds["profile"].isel(run=0).sel(metric="time")
    mpi = prof.sel(function=[f for f in ds["function"].values if str(f).startswith("MPI_")])
    total = mpi.sum("function").values
    slack = 5e-5 * np.abs(mpi).sum("function").values + 5e-6 * mtime + 1e-12
    assert np.all(np.abs(total - mtime) <= slack)
    # and Compute is the rest of the wall time
    np.testing.assert_allclose(prof.sel(function="Compute").values, wtime - mtime, rtol=1e-12)
    np.testing.assert_allclose(prof.sum("function").values, wtime, rtol=1e-4)


@pytest.mark.parametrize("path", REAL, ids=_id)
def test_job_totals_equal_ipm_parse_full(path: Path) -> None:
    report = parse_ipm_parse_full(path.parent / "ipm_parse_full.txt")
    ds = ipm.read(path)
    wall, mpi = per_rank(ds, "time"), per_rank(ds, "time", mpi_only=True)
    assert ds["nprocs"].item() == report["ntasks"] and ds["nodes"].item() == report["nodes"]
    close(ds["elapsed"].item(), report["wallclock"], rel=2e-6)
    close(100 * mpi.mean() / ds["elapsed"].item(), report["comm_pct"], rel=0, abs_=0.0051)
    for got, want in zip(stats(wall), report["job"]["wallclock"]):
        close(got, want, rel=2e-5)
    for got, want in zip(stats(mpi), report["job"]["mpi"]):
        close(got, want, rel=1e-4)
    seconds, calls = function_totals(ds, "time"), function_totals(ds, "calls")
    for name, (t, c) in report["job"]["functions"].items():
        close(seconds[name], t, rel=2e-5)
        assert calls[name] == c


@pytest.mark.parametrize("path", REAL, ids=_id)
def test_region_totals_equal_ipm_parse_full(path: Path) -> None:
    report = parse_ipm_parse_full(path.parent / "ipm_parse_full.txt")
    ds = ipm.read(path, region=report["region_name"])
    for got, want in zip(stats(per_rank(ds, "time")), report["region"]["wallclock"]):
        close(got, want, rel=2e-5)
    for name, (t, c) in report["region"]["functions"].items():
        close(function_totals(ds, "time")[name], t, rel=2e-5)
        assert function_totals(ds, "calls")[name] == c


@pytest.mark.parametrize("path", REAL, ids=_id)
def test_job_totals_equal_the_ipm_banner(path: Path) -> None:
    """The banner is printed at MPI_Finalize from the main region: compare with region=ipm_noregion."""
    banner = parse_banner(path.parent / "mpirun.stdout.txt")
    ds = ipm.read(path, region="ipm_noregion")
    wall, mpi = per_rank(ds, "time"), per_rank(ds, "time", mpi_only=True)
    half = 0.005 + 1e-9
    assert ds["nprocs"].item() == banner["ntasks"] and ds["nodes"].item() == banner["nodes"]
    close(wall.max(), banner["wallclock"], rel=0, abs_=half)
    close(100 * mpi.sum() / wall.sum(), banner["comm_pct"], rel=0, abs_=half)
    for got, want in zip(stats(wall), banner["wall_row"]):
        close(got, want, rel=0, abs_=half)
    for got, want in zip(stats(mpi), banner["mpi_row"]):
        close(got, want, rel=0, abs_=half)
    pct = 100 * mpi / wall
    for got, want in zip([pct.mean(), pct.min(), pct.max()], banner["mpi_pct_row"]):
        close(got, want, rel=0, abs_=half)
    calls = per_rank(ds, "calls", mpi_only=True)
    total, avg, low, high = banner["calls_row"]
    assert (calls.sum(), calls.min(), calls.max()) == (total, low, high)
    assert avg == np.floor(calls.mean())  # the banner truncates the average to an integer
    for name, (t, c) in banner["functions"].items():
        close(function_totals(ds, "time")[name], t, rel=0, abs_=half)
        assert function_totals(ds, "calls")[name] == c


@pytest.mark.parametrize("path", [V206, V0983, *REAL], ids=_id)
def test_traffic_is_point_to_point_only(path: Path) -> None:
    """Rows of the matrix add up to the bytes of the send calls; collectives add nothing."""
    ds = ipm.read(path)
    traffic = ds["traffic"].isel(run=0)
    sent = per_rank(ds, "bytes_sent")
    np.testing.assert_allclose(traffic.sel(quantity="bytes").sum("receiver").values, sent, rtol=1e-12)
    np.testing.assert_allclose(traffic.sel(quantity="count").sum("receiver").values, per_rank(ds, "calls_sent"))
    assert (traffic.values >= 0).all()


def test_hpccg_two_ranks_exchange_halo_both_ways() -> None:
    ds = ipm.read(DATA / "real/HPCCG-strong/2/unknown.1795313444.547330.ipm.xml")
    t = ds["traffic"].isel(run=0).sel(quantity="bytes").values
    assert t[0, 1] == t[1, 0] == 32768 * 150 + 16384 + 4 * 2
    assert t[0, 0] == t[1, 1] == 0
    assert any("MPI_ANY_SOURCE" in w for w in read_warnings(ds))


def test_sizes_histogram_counts_every_logged_call() -> None:
    ds = ipm.read(V206)
    counts = ds["sizes"].isel(run=0).sel(stat="count").sum("size_bin")
    calls = ds["profile"].isel(run=0).sel(metric="calls")
    mpi = [f for f in ds["function"].values if f != "Compute"]
    np.testing.assert_array_equal(counts.sel(function=mpi).values, calls.sel(function=mpi).values)
    assert ds["sizes"].sel(function="Compute").isnull().all()
    assert 8192 in ds["size_bin"].values


def test_0983_funcs_without_bytes_take_them_from_the_hash() -> None:
    ds = ipm.read(V0983)
    sent = ds["profile"].sel(function="MPI_Send", metric="bytes_sent").isel(run=0)
    assert (sent > 0).all() and not ds["profile"].sel(function="MPI_Send", metric="bytes").isnull().any()
    assert any("hardware counters" in w for w in read_warnings(ds))


def test_terse_log_has_no_traffic_and_says_so() -> None:
    ds = ipm.read(V200)
    assert "traffic" not in ds and "sizes" not in ds
    assert any("no <hash>" in w for w in read_warnings(ds))


# --------------------------------------------------------------------------- a writer for small logs

CALL_IDS = {"MPI_Send": 5, "MPI_Isend": 9, "MPI_Recv": 13, "MPI_Irecv": 14, "MPI_Allreduce": 47, "MPI_Wait": 17}
ANY_SOURCE = 0x3FFFFFFD


def hent(call: str, nbytes: int, orank: int, count: int, total: float, *, key: str = "hex",
         key_rank: int | None = None, region: int = 0) -> dict:
    return dict(call=call, bytes=nbytes, orank=orank, count=count, total=total, key=key,
                key_rank=orank if key_rank is None else key_rank, region=region)


def write_ipm(path: Path, tasks: list[dict], *, version: str = "2.0.6", ntasks: int | None = None) -> Path:
    """A small IPM-like XML log. ``tasks``: rank, host, wtime, funcs [(name, count, bytes, s)],
    hents [hent(...)], optional ``regions`` (XML text replacing the default single region)."""
    lines = ['<?xml version="1.0" encoding="iso-8859-1"?>', "<ipm_job_profile>"]
    n = len(tasks) if ntasks is None else ntasks
    for t in tasks:
        mtime = sum(float(f"{s:.4e}") for name, _, _, s in t["funcs"] if name.startswith("MPI_"))
        lines += [
            f'<task ipm_version="{version}" mpi_rank="{t["rank"]}" mpi_size="{n}" >',
            f'<job nhosts="1" ntasks="{n}" >x</job>',
            f'<host mach_name="x" >{t.get("host", "node0")}</host>',
            f'<perf wtime="{t["wtime"]:.5e}" mtime="{t.get("mtime", mtime):.5e}" omp_num_threads="1"></perf>',
        ]
        funcs = "\n".join(f'<func name="{name}" count="{c}" bytes="{b:.4e}" > {s:.4e} </func>'
                          for name, c, b, s in t["funcs"])
        lines.append(t.get("regions") or
                     f'<regions n="1" >\n<region label="ipm_noregion" nexits="1" wtime="{t["wtime"]:.5e}" '
                     f'mtime="{t.get("mtime", mtime):.5e}" id="0">\n{funcs}\n</region>\n</regions>')
        if "hents" in t:
            lines.append(f'<hash nlog="{sum(h["count"] for h in t["hents"])}" nkey="{len(t["hents"])}" >')
            lines += [_hent_xml(h) for h in t["hents"]]
            lines.append("</hash>")
        lines.append("</task>")
    lines.append("</ipm_job_profile>")
    path.write_text("\n".join(lines) + "\n")
    return path


def _hent_xml(h: dict) -> str:
    if h["key"] == "hex":
        key = f'{CALL_IDS[h["call"]] << 54:016X}{(h["bytes"] << 32) | h["key_rank"]:016X}'
    else:
        key = str((CALL_IDS[h["call"]] << 48) | (h["key_rank"] << 32) | h["bytes"])
    return (f'<hent key="{key}" call="{h["call"]}" bytes="{h["bytes"]}" orank="{h["orank"]}" '
            f'region="{h["region"]}" count="{h["count"]}" >{h["total"]:.4e} 0.0000e+00 {h["total"]:.4e}</hent>')


def task(rank: int, hents: list[dict], wtime: float = 10.0, **extra) -> dict:
    """A task whose <func> entries are the sums of its hash entries."""
    funcs: dict[str, list[float]] = {}
    for h in hents:
        f = funcs.setdefault(h["call"], [0, 0, 0.0])
        f[0] += h["count"]
        f[1] += h["bytes"] * h["count"]
        f[2] += float(f"{h['total']:.4e}")
    return dict(rank=rank, wtime=wtime, hents=hents, funcs=[(n, *v) for n, v in funcs.items()], **extra)


# --------------------------------------------------------------------------- traffic semantics


def test_a_receive_counts_for_partner_to_me(tmp_path: Path) -> None:
    path = write_ipm(tmp_path / "recv.xml", [
        task(0, [hent("MPI_Allreduce", 8, 0, 5, 0.1)]),
        task(1, [hent("MPI_Recv", 1000, 0, 3, 0.2), hent("MPI_Allreduce", 8, 0, 5, 0.1)]),
        task(2, [hent("MPI_Irecv", 64, 1, 2, 0.01)]),
    ])
    t = ipm.read(path)["traffic"].isel(run=0)
    assert t.sel(sender=0, receiver=1, quantity="bytes").item() == 3000
    assert t.sel(sender=0, receiver=1, quantity="count").item() == 3
    assert t.sel(sender=1, receiver=2, quantity="bytes").item() == 128
    assert t.sel(quantity="bytes").sum().item() == 3128  # the Allreduce (orank 0) adds nothing


def test_send_side_is_preferred_and_time_adds_both_sides(tmp_path: Path) -> None:
    path = write_ipm(tmp_path / "both.xml", [
        task(0, [hent("MPI_Isend", 100, 1, 4, 0.5)]),
        task(1, [hent("MPI_Irecv", 128, 0, 4, 0.25)]),  # posted a bigger buffer than was sent
    ])
    ds = ipm.read(path)
    t = ds["traffic"].isel(run=0).sel(sender=0, receiver=1)
    assert t.sel(quantity="bytes").item() == 400
    assert t.sel(quantity="time").item() == pytest.approx(0.75)
    assert any("other bytes than the send side" in w for w in read_warnings(ds))


def test_wildcard_partners_are_left_out_and_reported(tmp_path: Path) -> None:
    path = write_ipm(tmp_path / "any.xml", [
        task(0, [hent("MPI_Send", 10, 1, 1, 0.1)]),
        task(1, [hent("MPI_Irecv", 10, 0, 7, 0.1, key_rank=ANY_SOURCE)]),
    ])
    ds = ipm.read(path)
    t = ds["traffic"].isel(run=0).sel(quantity="count")
    assert t.sel(sender=0, receiver=1).item() == 1  # only what the sender logged
    assert any("7 calls, 70 B" in w and "MPI_ANY_SOURCE" in w for w in read_warnings(ds))


def test_decimal_orank_zero_needs_rank_zero_to_agree(tmp_path: Path) -> None:
    path = write_ipm(tmp_path / "dec.xml", version="0.983", tasks=[
        task(0, [hent("MPI_Send", 16, 1, 2, 0.1, key="dec")]),
        task(1, [hent("MPI_Recv", 16, 0, 2, 0.1, key="dec")]),   # confirmed by rank 0's send
        task(2, [hent("MPI_Recv", 16, 0, 9, 0.1, key="dec")]),   # rank 0 never sent to 2
    ])
    ds = ipm.read(path)
    t = ds["traffic"].isel(run=0).sel(quantity="count")
    assert t.sel(sender=0, receiver=1).item() == 2
    assert t.sel(sender=0, receiver=2).item() == 0
    assert any("left out 1 point-to-point" in w and "9 calls" in w for w in read_warnings(ds))


def test_sparse_traffic_chosen_by_non_zeros(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the small-array allowance, a neighbour pattern (few non-zeros) is sparse, same values."""
    path = DATA / "real/HPCCG-strong/16/unknown.1795313459.30979.ipm.xml"
    dense = ipm.read(path)
    assert isinstance(dense["traffic"].data, np.ndarray)  # 16 ranks: a few KiB
    monkeypatch.setattr(perfkit.model, "DENSE_TRAFFIC_BYTES", 0)
    ds = ipm.read(path)
    assert isinstance(ds["traffic"].data, sparse.COO)
    np.testing.assert_array_equal(ds["traffic"].data.todense(), dense["traffic"].values)


def test_dense_traffic_when_most_pairs_talk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """All-to-all: every element non-zero, so dense is the smaller storage even without the allowance."""
    monkeypatch.setattr(perfkit.model, "DENSE_TRAFFIC_BYTES", 0)
    n = 6
    path = write_ipm(tmp_path / "a2a.xml", [task(r, [hent("MPI_Send", 8, p, 1, 0.1) for p in range(n) if p != r])
                                             for r in range(n)])
    traffic = ipm.read(path)["traffic"]
    assert isinstance(traffic.data, np.ndarray)
    assert traffic.isel(run=0).sel(quantity="count").values.sum() == n * (n - 1)


def test_dense_traffic_rule() -> None:
    from perfkit.model import dense_traffic

    assert dense_traffic(400, 0)  # 3.7 MiB dense: small
    assert not dense_traffic(4096, 6 * 4096 * 3)  # a 2-D halo at 4,096 ranks: 403 MB dense, 2.4 MB sparse
    assert dense_traffic(4096, 4096 * 4096 * 3 // 4)  # a quarter non-zero: dense is no larger
    assert not dense_traffic(8192, 4096 * 4096)


# --------------------------------------------------------------------------- regions


def test_region_selection_includes_sub_regions(tmp_path: Path) -> None:
    def region(label: str, rid: int, wtime: float, mtime: float, body: str) -> str:
        return f'<region label="{label}" wtime="{wtime}" mtime="{mtime}" id="{rid}">{body}</region>'

    inner = region("inner", 2, 2.0, 0.5, '<func name="MPI_Send" count="1" bytes="8" > 5.0000e-01 </func>')
    outer = region("outer", 1, 5.0, 1.5, '<func name="MPI_Send" count="3" bytes="24" > 1.5000e+00 </func>'
                   f"<regions n=\"1\">{inner}</regions>")
    rest = region("ipm_noregion", 0, 5.0, 1.0, '<func name="MPI_Send" count="2" bytes="16" > 1.0000e+00 </func>')
    hents = [hent("MPI_Send", 8, 1, 2, 1.0, region=0), hent("MPI_Send", 8, 1, 2, 1.0, region=1),
             hent("MPI_Send", 8, 1, 1, 0.5, region=2)]
    t0 = dict(rank=0, wtime=10.0, mtime=2.5, funcs=[], hents=hents, regions=f"<regions n=\"2\">{outer}{rest}</regions>")
    path = write_ipm(tmp_path / "regions.xml", [t0, task(1, [])])
    whole, outer_ds = ipm.read(path), ipm.read(path, region="outer")
    assert whole["profile"].sel(rank=0, function="MPI_Send", metric="calls").item() == 5
    assert outer_ds["profile"].sel(rank=0, function="MPI_Send", metric="calls").item() == 3
    assert outer_ds["profile"].sel(rank=0, function="Compute", metric="time").item() == pytest.approx(3.5)
    assert outer_ds["traffic"].sel(sender=0, receiver=1, quantity="count").item() == 3  # regions 1 and 2
    assert ipm.read(path, region="inner")["traffic"].sel(sender=0, receiver=1, quantity="count").item() == 1
    with pytest.raises(ValueError, match="no IPM region 'nowhere'"):
        ipm.read(path, region="nowhere")


# --------------------------------------------------------------------------- bad input


def test_empty_file(tmp_path: Path) -> None:
    (tmp_path / "empty.xml").write_bytes(b"")
    with pytest.raises(PerfkitFormatError, match="empty"):
        ipm.read(tmp_path / "empty.xml")


@pytest.mark.parametrize(("text", "line"), [
    ("this is not XML at all\n", 1),
    ('<?xml version="1.0"?>\n<ipm_job_profile>\n<task ipm_version="2.0.6" mpi_rank="0">\n<perf wtime="1" <<\n', 4),
], ids=["garbage", "broken-tag"])
def test_not_xml_names_file_and_line(tmp_path: Path, text: str, line: int) -> None:
    path = tmp_path / "bad.xml"
    path.write_text(text)
    with pytest.raises(PerfkitFormatError) as err:
        ipm.read(path)
    assert err.value.line == line and err.value.path == str(path)
    assert str(path) in str(err.value)


def test_truncated_file_names_the_last_line(tmp_path: Path) -> None:
    data = REAL[0].read_bytes()
    path = tmp_path / "cut.xml"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(PerfkitFormatError, match="truncated") as err:
        ipm.read(path)
    assert err.value.line == path.read_bytes().count(b"\n") + 1


@pytest.mark.parametrize(("xml", "match"), [
    ('<?xml version="1.0"?>\n<cubexml version="4"><x/></cubexml>\n', "root element is <cubexml>"),
    ("<ipm_job_profile></ipm_job_profile>", "no <task>"),
    ('<ipm_job_profile><task ipm_version="9.1" mpi_rank="0"/></ipm_job_profile>', "ipm_version='9.1'"),
    ('<ipm_job_profile><task ipm_version="2.0.6"/></ipm_job_profile>', r"task\[1\]: attribute mpi_rank=None"),
    ('<ipm_job_profile><task ipm_version="2.0.6" mpi_rank="0"/><task ipm_version="2.0.6" mpi_rank="0"/>'
     "</ipm_job_profile>", "mpi_rank 0 occurs in more than one"),
    ('<ipm_job_profile><task ipm_version="2.0.6" mpi_rank="0"><regions><region label="r" id="0">'
     '<func name="MPI_Send" count="many">1.0</func></region></regions></task></ipm_job_profile>',
     r"task\[1\]\[@mpi_rank=0\]/regions/region\[@label='r'\]/func\[@name='MPI_Send'\]: count='many'"),
    ('<ipm_job_profile><task ipm_version="2.0.6" mpi_rank="0"><hash><hent call="MPI_Send" bytes="8" orank="1" '
     'count="1">0.1 0.1</hent></hash></task></ipm_job_profile>', r"hash/hent\[1\]: text '0.1 0.1'"),
], ids=["wrong-root", "no-task", "version", "no-rank", "duplicate-rank", "bad-count", "bad-hent"])
def test_wrong_content_is_refused_with_its_place(tmp_path: Path, xml: str, match: str) -> None:
    path = tmp_path / "wrong.xml"
    path.write_text(xml)
    with pytest.raises(PerfkitFormatError, match=match):
        ipm.read(path)


def test_xml_bomb_is_refused(tmp_path: Path) -> None:
    lols = "".join(f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10}">\n' for i in range(1, 10))
    path = tmp_path / "bomb.xml"
    path.write_text(f'<?xml version="1.0"?>\n<!DOCTYPE ipm_job_profile [\n<!ENTITY lol0 "lol">\n{lols}]>\n'
                    "<ipm_job_profile>&lol9;</ipm_job_profile>\n")
    with pytest.raises(PerfkitFormatError, match="refused") as err:
        ipm.read(path)
    assert err.value.line == 3


def test_external_entity_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "xxe.xml"
    path.write_text('<?xml version="1.0"?>\n<!DOCTYPE ipm_job_profile [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>\n'
                    '<ipm_job_profile><task ipm_version="2.0.6" mpi_rank="0"><host>&xxe;</host></task>'
                    "</ipm_job_profile>\n")
    with pytest.raises(PerfkitFormatError, match="refused"):
        ipm.read(path)


def test_missing_tasks_are_nan_and_reported(tmp_path: Path) -> None:
    path = write_ipm(tmp_path / "partial.xml", [task(0, []), task(2, [])], ntasks=4)
    ds = ipm.read(path)
    assert list(ds["rank"].values) == [0, 1, 2, 3]
    assert ds["profile"].sel(rank=[1, 3]).isnull().all()
    assert any("ranks 1, 3 have no <task>" in w for w in read_warnings(ds))
    assert np.isnan(ds["ppn"].item())


# --------------------------------------------------------------------------- entry points and metadata


def test_xarray_backend_and_sniffing() -> None:
    path = REAL[0]
    ds = xr.open_dataset(path, engine="ipm")
    assert ds["format"].item() == "ipm" and ds["label"].item() == path.stem
    assert perfkit.io.registry.sniff_format(path) == "ipm"
    assert perfkit.open_profile(path)["nprocs"].item() == ds["nprocs"].item()


def test_file_metadata_wins_and_the_rest_is_filled(tmp_path: Path) -> None:
    ds = perfkit.open_profile(REAL[0], nprocs=99, system="laptop", mode="basic")
    assert ds["nprocs"].item() == 1 and ds["system"].item() == "laptop" and ds["mode"].item() == "basic"
    assert any("nprocs=99" in w for w in read_warnings(ds))
    assert perfkit.open_profile(V0983, threads=6)["threads"].item() == 6  # the 0.983 file does not say


# --------------------------------------------------------------------------- round trip property

sends = st.lists(st.tuples(st.integers(0, 3), st.sampled_from([8, 1024, 65536]), st.integers(1, 50),
                           st.floats(1e-6, 1.0)), max_size=6)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(nranks=st.integers(1, 4), plan=st.lists(sends, min_size=4, max_size=4), hex_keys=st.booleans(),
       wtimes=st.lists(st.floats(10.0, 100.0), min_size=4, max_size=4))
def test_round_trip(tmp_path: Path, nranks: int, plan: list, hex_keys: bool, wtimes: list[float]) -> None:
    tasks = []
    expect = np.zeros((nranks, nranks, 3))
    for r in range(nranks):
        hents = [hent("MPI_Allreduce", 8, 0, 3, 0.01, key="hex" if hex_keys else "dec")]
        for p, nbytes, count, secs in plan[r]:
            if p >= nranks:
                continue
            hents.append(hent("MPI_Isend", nbytes, p, count, secs, key="hex" if hex_keys else "dec"))
            if hex_keys or p != 0:  # decimal keys cannot tell rank 0 from a wildcard
                expect[r, p] += [nbytes * count, count, float(f"{secs:.4e}")]
        tasks.append(task(r, hents, wtime=wtimes[r]))
    path = write_ipm(tmp_path / "rt.xml", tasks, version="2.0.6" if hex_keys else "0.983")
    ds = validate(ipm.read(path))
    prof = ds["profile"].isel(run=0)
    for r, t in enumerate(tasks):
        for name, count, nbytes, secs in t["funcs"]:
            assert prof.sel(rank=r, function=name, metric="calls").item() == count
            assert prof.sel(rank=r, function=name, metric="bytes").item() == nbytes
            assert prof.sel(rank=r, function=name, metric="time").item() == pytest.approx(float(f"{secs:.4e}"))
        mtime = float(f"{sum(float(f'{s:.4e}') for *_, s in t['funcs']):.5e}")
        assert prof.sel(rank=r, function="Compute", metric="time").item() == pytest.approx(
            float(f"{t['wtime']:.5e}") - mtime)
    np.testing.assert_allclose(ds["traffic"].isel(run=0).values, expect, rtol=1e-12)
    counts = ds["sizes"].isel(run=0).sel(stat="count").sum("size_bin")
    mpi = [f for f in ds["function"].values if f != "Compute"]
    np.testing.assert_array_equal(counts.sel(function=mpi).values, prof.sel(function=mpi, metric="calls").values)


@pytest.mark.parametrize("token", ["nan", "NaN", "-0.168", "inf", "-inf", "1e308"])
@pytest.mark.parametrize(("old", "template", "said"), [
    ('<perf wtime="4.53140e-02"', '<perf wtime="{}"', "/perf: wtime: expected a non-negative time"),
    ('wtime="3.16331e-02"', 'wtime="{}"',
     "/regions/region[@label='ipm_noregion']: wtime: expected a non-negative time"),
    ('count="1" bytes="0.0000e+00" > 0.0000e+00 </func>', 'count="1" bytes="0.0000e+00" > {} </func>',
     "/func[@name='MPI_Init']: seconds: expected a non-negative time"),
    ('<func name="MPI_Init" count="1"', '<func name="MPI_Init" count="{}"', "func[@name='MPI_Init']: count: expected "
                                                                             "a non-negative count"),
])
def test_a_value_no_profiler_measures_is_refused_naming_element_and_token(old, template, said, token, tmp_path):
    """NaN written out, negative, infinite or too large: refused, the token quoted (an absent value is NaN)."""
    text = V200.read_text(encoding="latin-1")
    assert old in text
    path = tmp_path / "bad.ipm.xml"
    path.write_text(text.replace(old, template.format(token), 1), encoding="latin-1")
    with pytest.raises(PerfkitFormatError) as err:
        perfkit.open_profile(path)
    assert str(err.value).startswith(f"{path}: /ipm_job_profile/task[1][@mpi_rank=")
    assert str(err.value).endswith(f"{said}, found {token!r}")


def test_an_absent_time_is_not_measured_not_refused(tmp_path):
    path = tmp_path / "absent.ipm.xml"
    path.write_text(V200.read_text(encoding="latin-1").replace('wtime="3.16331e-02" ', "", 1), encoding="latin-1")
    assert perfkit.open_profile(path).sizes["rank"] > 0


@pytest.mark.parametrize(("old", "new", "said"), [
    ('bytes="32768" orank="0"', 'bytes="-1" orank="0"', "bytes: expected a non-negative byte count, found '-1'"),
    ('count="2031" tid="0" >5.9917e-03', 'count="2031" tid="0" >inf', "total time: expected a non-negative time, "
                                                                      "found 'inf'"),
])
def test_a_hash_entry_no_profiler_measures_is_refused(old, new, said, tmp_path):
    path = tmp_path / "bad.ipm.xml"
    path.write_text(V206.read_text(encoding="latin-1").replace(old, new, 1), encoding="latin-1")
    with pytest.raises(PerfkitFormatError, match=re.escape(f"/hash/hent[1]: {said}")):
        perfkit.open_profile(path)


def test_a_token_of_megabytes_is_parsed_in_few_reads(tmp_path):
    """iterparse asks 16 KiB a read; expat rescans a token cut by a read: the reader hands it 4 MiB a time."""
    import io

    assert len(ipm._LargeReads(io.BytesIO(bytes(10 << 20))).read(16 * 1024)) == ipm.READ_SIZE
    path = tmp_path / "long_attribute.ipm.xml"
    path.write_text(V200.read_text(encoding="latin-1").replace('gflop="0.00000e+00"', f'gflop="{"N" * (8 << 20)}"',
                                                               1), encoding="latin-1")
    assert perfkit.open_profile(path).sizes["rank"] > 0
