"""``diagnose`` on traces of the lab's scenarios (written with the zero-cost simulator's event times):
what a profile cannot tell apart, the trace names."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import perfkit
from perfkit.analysis.diagnosis import diagnose
from tests.analysis.lab_otf2 import lab_trace
from tests.io.otf2_writer import Call, Trace, write_trace

TRACE_CATEGORIES = {"dynamic_imbalance", "static_imbalance", "serialisation", "late_receiver", "collective_imbalance"}


def _diagnose(tmp: Path, scenario: str, nprocs: int, **params: object) -> tuple[xr.Dataset, pd.DataFrame]:
    ds = perfkit.open_profile(lab_trace(tmp, scenario, nprocs, **params))
    return ds, diagnose(ds)


def _categories(table: pd.DataFrame) -> set[str]:
    return set(table["category"]) & TRACE_CATEGORIES


def _cannot_tell(table: pd.DataFrame) -> bool:
    return table["text"].str.contains("cannot tell").any() or table["title"].str.contains("cannot tell").any()


@pytest.mark.parametrize("nprocs", [4, 8])
def test_dynamic_imbalance_names_the_late_rank_of_each_step(tmp_path: Path, nprocs: int) -> None:
    ds, table = _diagnose(tmp_path, "dynamic_imbalance", nprocs, steps=10)
    late = ds["phases"].isel(run=0).sel(phase_stat="late_rank").to_pandas()
    steps = late[late.index.str.startswith("MPI_Waitall")]
    assert steps.tolist() == [k % nprocs for k in range(10)]
    assert _categories(table) == {"dynamic_imbalance"}
    (text,) = table.loc[table["category"] == "dynamic_imbalance", "text"]
    assert "MPI_Waitall#0: rank 0, #1: rank 1, #2: rank 2, #3: rank 3" in text
    assert not _cannot_tell(table)
    first = table.iloc[0]
    assert first["category"] == "efficiency" and "dynamic imbalance" in first["title"]


@pytest.mark.parametrize("nprocs", [4, 8])
def test_pipeline_is_serialisation(tmp_path: Path, nprocs: int) -> None:
    """Every rank computes 10 ms per step while the token goes round: elapsed - 10 x 10 ms is serialisation,
    less the first phase, where rank 0 alone computes before the first receive (the pipeline filling,
    an excess of 10 ms x (n - 1) / n).
    """
    ds, table = _diagnose(tmp_path, "pipeline", nprocs, steps=10)
    assert "serialisation" in _categories(table) and "dynamic_imbalance" not in _categories(table)
    (seconds,) = table.loc[table["category"] == "serialisation", "seconds"]
    elapsed = float(ds["elapsed"].item())
    assert elapsed == pytest.approx(10 * nprocs * 0.01, abs=1e-5)
    assert seconds == pytest.approx(elapsed - 0.1 - 0.01 * (nprocs - 1) / nprocs, abs=1e-5)
    (text,) = table.loc[table["category"] == "serialisation", "text"]
    assert " -> ".join(map(str, [*range(nprocs), 0])) in text
    assert not _cannot_tell(table)


def test_pipeline_profile_alone_cannot_tell(tmp_path: Path) -> None:
    ds, _ = _diagnose(tmp_path, "pipeline", 4)
    table = diagnose(ds.drop_vars(["phases", "timeline"]))
    assert _cannot_tell(table) and not _categories(table) - {"late_receiver"}


def test_static_imbalance_is_the_same_rank_every_step(tmp_path: Path) -> None:
    _, table = _diagnose(tmp_path, "static_imbalance", 4, late_rank=2)
    assert _categories(table) == {"static_imbalance"}
    (title,) = table.loc[table["category"] == "static_imbalance", "title"]
    assert "rank 2" in title


def test_collective_waits_name_the_rank_computing_before_them(tmp_path: Path) -> None:
    """Rank n-1 computes most before every MPI_Allreduce, rank 0 alone before every MPI_Bcast."""
    _, table = _diagnose(tmp_path, "collective_imbalance", 4)
    rows = table[table["category"] == "collective_imbalance"].set_index("title")
    assert set(rows.index) == {"MPI_Allreduce: rank 3 late before the collective",
                               "MPI_Bcast: rank 0 late before the collective"}
    assert rows["seconds"].tolist() == pytest.approx([10 * 0.01 * (1 - 0.5), 10 * 0.005 * 0.75], abs=1e-5)
    assert "dynamic_imbalance" not in set(table["category"]) and not _cannot_tell(table)


def test_balanced_run_has_no_trace_findings(tmp_path: Path) -> None:
    _, table = _diagnose(tmp_path, "balanced", 4)
    assert not _categories(table)


def test_late_receiver(tmp_path: Path) -> None:
    """Rank 0's blocking sends wait 300 ticks each for rank 1 to post its receive."""
    calls: dict[int, list[Call]] = {0: [], 1: []}
    for k in range(10):
        t = 1000 * k
        calls[0].append(Call("MPI_Send", t + 100, t + 500, send=[(1, k, 65536)]))
        calls[1].append(Call("MPI_Recv", t + 400, t + 500, recv=[(0, k, 65536)]))
    ds = perfkit.open_profile(write_trace(tmp_path, Trace(calls, end=10_000)))
    table = diagnose(ds)
    (text,) = table.loc[table["category"] == "late_receiver", "text"]
    assert "rank 0 waits" in text
    np.testing.assert_allclose(table.loc[table["category"] == "late_receiver", "seconds"], 10 * 300e-6 / 2)
