"""Every finding reads like an engineer wrote it: on every bundled profile (data/ and tests/data/), the
recorded lab runs, a concise mpiP report and synthetic runs drawn by hypothesis, no NaN, None,
exponent or numpy repr in words; a lead of one sentence within ``LEAD_CHARS``; times with units;
nouns agreeing with their counts; the caveats a finding names are ``CAVEATS``."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import perfkit
from perfkit import synthetic
from perfkit.analysis.diagnosis import CAVEATS, LEAD_CHARS, diagnose
from perfkit.errors import PerfkitFormatError
from perfkit.text import unreadable
from tests.helpers import ROOT

NOUNS = "rank|run|call|phase|message|node|range"
#: A count above 1 with a singular noun, or 1 with a plural one (``4 rank``, ``1 ranks``).
DISAGREES = re.compile(rf"(?<![\d.,])(?:[2-9]|[1-9][\d,]+) (?:{NOUNS})\b|(?<![\d.,])1 (?:{NOUNS})s\b")
#: ``ranks`` before a single rank number (``ranks 0``, not ``ranks 0-3`` or ``ranks 0, 2``).
ONE_RANK_PLURAL = re.compile(r"\branks \d+(?![\d,-]| and)")
#: A bare number where a time is meant: ``0.3 per rank``, ``takes 12``, ``would be about 3 shorter``.
NO_UNIT = re.compile(r"\d (?:per rank|per call|shorter|over the run|of waiting)|"
                     r"(?:takes|waits|spends|computes|elapsed|compute|about) -?\d[\d.,]*(?![\d.,])"
                     r"(?!%| ?(?:µs|ms|s|min|h|[kMGTP]?B)\b| of \d)")


def _profile_groups() -> list[list[Path]]:
    """The bundled profiles, one group per directory (a directory's files are the runs of one study)."""
    groups: dict[Path, list[Path]] = {}
    for base in (ROOT / "data", ROOT / "tests" / "data"):
        for path in sorted(base.rglob("*")):
            if path.is_file() and "hostile" not in path.parts and path.suffix not in {".md", ".json", ".cfg",
                                                                                      ".rankfile", ".csv"}:
                groups.setdefault(path.parent, []).append(path)
    return list(groups.values())


GROUPS = _profile_groups()


def open_group(files: list[Path]) -> object:
    """The runs of ``files`` that are profiles (trace definitions and notes are not), or None."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return perfkit.open_runs(files, progress=False, errors="skip")
        except PerfkitFormatError:
            return None


def check_texts(findings: pd.DataFrame) -> None:
    """The rules every finding's words keep (see the module docstring)."""
    assert len(findings), "no findings"
    for row in findings.to_dict("records"):
        words = " ".join(str(row[k]) for k in ("title", "lead", "details", "text"))
        where = f"{row['run']}/{row['category']}: {words}"
        assert not unreadable(words), (unreadable(words), where)
        lead = row["lead"]
        assert 0 < len(lead) <= LEAD_CHARS and lead.endswith("."), where
        assert not re.search(r"[.:;] [A-Z]", lead.rstrip(".")), f"more than one sentence: {lead}"
        assert not DISAGREES.search(words), (DISAGREES.search(words), where)
        assert not ONE_RANK_PLURAL.search(words), (ONE_RANK_PLURAL.search(words), where)
        assert not NO_UNIT.search(words), (NO_UNIT.search(words), where)
        keys = str(row["caveats"]).split()
        assert set(keys) <= set(CAVEATS), where
        assert all(CAVEATS[k] in row["text"] for k in keys) and not any(CAVEATS[k] in row["details"] for k in keys)


@pytest.mark.parametrize("files", GROUPS, ids=[str(g[0].parent.relative_to(ROOT)) for g in GROUPS])
def test_bundled_profiles(files: list[Path]) -> None:
    ds = open_group(files)
    if ds is None:
        pytest.skip(f"{files[0].parent.relative_to(ROOT)} holds no profile (matrices, trace parts or tables)")
    check_texts(diagnose(ds))


def test_recorded_lab_runs_name_their_measured_waits() -> None:
    ds = open_group(sorted((ROOT / "data" / "lab").glob("*.mpinside")))
    findings = diagnose(ds)
    check_texts(findings)
    waits = findings[findings["category"] == "wait_late_sender"]
    assert len(waits) == 2 and waits["lead"].str.contains(r"late-sender wait \(measured\), \d").all()


def test_a_concise_mpip_report_states_its_mpi_share(tmp_path: Path) -> None:
    from tests.io.test_mpip import write_report

    sites = [{"id": 1, "op": "Allreduce", "parent": "main", "file": "a.c", "line": 10,
              "rows": {0: (10, 50.0, 8), 1: (10, 250.0, 8), 2: (10, 120.0, 8)}}]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = perfkit.open_profile(write_report(tmp_path / "c.mpiP", 3, sites, style="concise"))
    findings = diagnose(ds)
    check_texts(findings)
    (lead,) = findings["lead"]
    stated = float(ds["mpi_pct"].item())
    assert f"MPI takes {stated:.2g}%" in lead or f"MPI takes {stated:.0f}%" in lead, (stated, lead)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nprocs=st.integers(2, 40), ppn=st.integers(1, 8), steps=st.integers(3, 30), seed=st.integers(0, 10**6),
       mode=st.sampled_from(synthetic.MODES), slow=st.floats(1.0, 1.6), serial=st.floats(0, 1e-3),
       matrices=st.booleans())
def test_synthetic_runs(nprocs: int, ppn: int, steps: int, seed: int, mode: str, slow: float, serial: float,
                        matrices: bool) -> None:
    model = synthetic.CrashModel(slow_node_factor=slow, serial_per_step=serial)
    ds, _ = synthetic.generate_run(nprocs, mode, ppn=ppn, steps=steps, seed=seed, model=model, matrices=matrices,
                                   sizes=matrices)
    check_texts(diagnose(ds))


def test_a_series_across_scales_reads_well() -> None:
    runs = [synthetic.generate_run(n, "slt", ppn=4, steps=10, seed=1)[0] for n in (4, 8, 16, 32)]
    check_texts(diagnose(perfkit.combine_runs(runs)))


@pytest.mark.parametrize("text", ["MPI takes 0.3 per rank.", "Rank 2 takes 12 more.", "4 rank", "1 ranks",
                                  "ranks 7 wait", "nan% of it", "1.2e+03 s"])
def test_the_checks_catch_what_they_describe(text: str) -> None:
    row = {"run": "r", "category": "c", "title": "t", "lead": "Lead.", "details": text, "caveats": "", "text": text}
    with pytest.raises(AssertionError):
        check_texts(pd.DataFrame([row]))
