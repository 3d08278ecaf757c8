"""Hostile and mutated files: every reader refuses them with a PerfkitFormatError, in bounded memory and time.

Each file is read in a forked child of a sandbox process (``tools/fuzz.py``) under an address-space
limit and a wall-clock limit, so a segfault, a runaway allocation or a hang fails a test instead of
killing pytest. ``tools/fuzz.py --cases 3000`` is the long run of the same fuzzer.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import scipy.sparse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import perfkit
from perfkit.errors import PerfkitFormatError, PerfkitWarning
from perfkit.io import matrix as mx
from perfkit.io.open import refused_files
from perfkit.options import set_options
from tools.fuzz import FAILURES, Hostile, Sandbox, generate, hostile_files, seeds

#: Peak resident memory allowed to any hostile case [B] (the sandbox's own ~150 MiB included).
PEAK = 2 * 1024**3
#: Mutated files per format in CI (8 formats; the whole fuzz test stays well under a minute).
CASES = 40


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with Sandbox(memory=3 * 1024**3, timeout=20.0) as box:
        yield box


_HOSTILE_DIR = Path(__file__).resolve().parents[1] / "data" / "hostile"


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Hostile]:
    return {case.name: case for case in hostile_files(tmp_path_factory.mktemp("hostile"))}


_NAMES = [
    *sorted(p.stem for p in _HOSTILE_DIR.iterdir() if "__" in p.name),
    "cube__anchor_bomb", "cube__targz_bomb", "cube__rank_2_64_plus_1", "csv__first_row_200000_columns",
    "mpip__1gib_junk_after_header",
]


@pytest.mark.parametrize("name", _NAMES)
def test_hostile_file_is_refused(name: str, hostile: dict[str, Hostile], sandbox: Sandbox) -> None:
    case = hostile[name]
    result = sandbox.run(case.path, case.fmt)
    assert result["outcome"] == "refused", result
    assert result["type"] == "PerfkitFormatError", result
    if case.needs_line:
        assert result["line"] is not None, result
    assert result["maxrss"] < PEAK, f"peak {result['maxrss'] / 2**20:.0f} MiB"
    assert result["seconds"] < 15, result


def test_mutated_real_files(tmp_path: Path, sandbox: Sandbox) -> None:
    """A seeded mutation corpus of the real files of every format: nothing but PerfkitFormatError escapes."""
    cases = generate(seeds(tmp_path), CASES, tmp_path / "cases", seed=2024)
    failures = []
    outcomes: dict[str, int] = {}
    for case in cases:
        result = sandbox.run(case.path, case.fmt)
        outcomes[result["outcome"]] = outcomes.get(result["outcome"], 0) + 1
        if result["outcome"] in FAILURES:
            failures.append(f"{case.fmt} {case.seed} {case.mutation} ({case.path.name}): {result['outcome']} "
                            f"{result.get('type', '')} {result.get('message', '')[:200]}")
    assert len(cases) == CASES * 8
    assert outcomes.get("refused", 0) > len(cases) // 2  # the mutations do break files
    assert not failures, "\n".join(failures)


# --- the MatrixMarket parser, in process --------------------------------------------------------------

_TOKENS = st.sampled_from(["1", "0", "2.5", "1e3", "-1", "inf", "nan", "1e400", "2.0E", "12abc", "1,5", "0x1F",
                           "", "18446744073709551617", "\x00", "é", "3"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(layout=st.sampled_from(["coordinate", "array"]), field=st.sampled_from(["real", "integer", "pattern"]),
       symmetry=st.sampled_from(["general", "symmetric", "skew-symmetric"]),
       size=st.lists(_TOKENS, min_size=0, max_size=4), rows=st.lists(st.lists(_TOKENS, max_size=4), max_size=6),
       cut=st.integers(0, 400))
def test_matrix_market_only_format_errors(tmp_path: Path, layout: str, field: str, symmetry: str, size: list[str],
                                          rows: list[list[str]], cut: int) -> None:
    text = f"%%MatrixMarket matrix {layout} {field} {symmetry}\n" + " ".join(size) + "\n"
    text += "".join(" ".join(r) + "\n" for r in rows)
    path = tmp_path / "m.mtx"
    path.write_bytes(text.encode("utf-8")[: max(cut, 40)])
    try:
        m = mx.read_matrix(path)
    except PerfkitFormatError as exc:
        assert exc.path == str(path)
        return
    values = m.data if hasattr(m, "coords") else np.asarray(m)
    assert np.isfinite(values).all() and (values >= 0).all()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(1, 9), density=st.floats(0, 1), symmetric=st.booleans(), coordinate=st.booleans(),
       seed=st.integers(0, 2**16))
def test_matrix_market_agrees_with_scipy(tmp_path: Path, n: int, density: float, symmetric: bool,
                                         coordinate: bool, seed: int) -> None:
    """On valid files (which scipy's reader handles) both readers give the same matrix."""
    rng = np.random.default_rng(seed)
    dense = np.round(rng.uniform(0, 1e6, (n, n)), 3) * (rng.random((n, n)) < density)
    if symmetric:
        dense = dense + dense.T
    path = tmp_path / "m.mtx"
    stored = scipy.sparse.coo_matrix(dense) if coordinate else dense
    scipy.io.mmwrite(path, stored, symmetry="symmetric" if symmetric else "general", precision=17)
    ours = mx.read_matrix(path)
    ours = ours.todense() if hasattr(ours, "todense") else ours
    theirs = scipy.io.mmread(path)
    theirs = theirs.toarray() if scipy.sparse.issparse(theirs) else theirs
    np.testing.assert_array_equal(ours, theirs)


def test_memory_ceiling_is_settable(tmp_path: Path) -> None:
    path = tmp_path / "m.mtx"
    path.write_text("%%MatrixMarket matrix array real general\n64 64\n" + "1\n" * 4096)
    with set_options(max_bytes=100_000), pytest.raises(PerfkitFormatError, match="max_bytes") as info:
        mx.read_matrix(path)
    assert info.value.line == 2
    assert mx.read_matrix(path).shape == (64, 64)  # the previous ceiling is back


# --- open_runs over many files with bad ones ---------------------------------------------------------

_MPIP = Path(__file__).resolve().parents[1] / "data" / "mpip" / "real" / "HPCCG-strong"


@pytest.fixture
def study(tmp_path: Path) -> list[Path]:
    """Four real mpiP reports and two broken files (truncated, and a MatrixMarket crash case)."""
    paths = []
    for n in (1, 2, 4, 8):
        src = next((_MPIP / str(n)).glob("*.mpiP"))
        paths.append(tmp_path / f"run{n}.mpiP")
        paths[-1].write_bytes(src.read_bytes())
    paths.append(tmp_path / "run16.mpiP")
    paths[-1].write_bytes(next((_MPIP / "16").glob("*.mpiP")).read_bytes()[:5000])
    paths.append(tmp_path / "run32.mpiP")
    paths[-1].write_bytes(b"@ mpiP\n@ Version : 3.5.0\n\x00\x01 junk\n")
    return paths


def test_open_runs_raises_by_default(study: list[Path]) -> None:
    with pytest.raises(PerfkitFormatError) as info:
        perfkit.open_runs(study, format="mpip")
    assert info.value.path in {str(p) for p in study[-2:]}


@pytest.mark.parametrize("errors", ["warn", "skip"])
def test_open_runs_returns_what_it_can_read(study: list[Path], errors: str) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds = perfkit.open_runs(study, format="mpip", errors=errors)
    assert list(ds["label"].values) == ["run1", "run2", "run4", "run8"]
    refused = refused_files(ds)
    assert [r["path"] for r in refused] == [str(p) for p in study[-2:]]
    assert all(r["error"] and r["line"] is not None for r in refused)
    mine = [w for w in caught if issubclass(w.category, PerfkitWarning) and "could not be read" in str(w.message)]
    if errors == "warn":
        assert len(mine) == 1 and all(str(p) in str(mine[0].message) for p in study[-2:])
        assert "2 of 6 files" in str(mine[0].message)
    else:
        assert not mine


def test_open_runs_nothing_readable_raises(study: list[Path]) -> None:
    with pytest.raises(PerfkitFormatError):
        perfkit.open_runs(study[-2:], format="mpip", errors="warn")
    with pytest.raises(ValueError, match="errors must be"):
        perfkit.open_runs(study, format="mpip", errors="ignore")


def test_cli_info_lists_refused_files(study: list[Path], capsys: pytest.CaptureFixture[str]) -> None:
    from perfkit.cli import main

    assert main(["info", "--format", "mpip", "--errors", "warn", *map(str, study)]) == 0
    err = capsys.readouterr().err
    assert all(f"refused: {p}" in err for p in study[-2:]) and "2 file(s) could not be read" in err


def test_a_numpy_warning_on_the_way_is_a_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    """A RuntimeWarning (numpy's overflow) would reach the user's stderr: the fuzzer calls the case noisy."""
    import perfkit.io.mpinside
    from tools.fuzz import run_case

    read = perfkit.io.mpinside.read

    def overflowing(*args, **kwargs):
        np.multiply(np.float64(1e308), 10.0)
        return read(*args, **kwargs)

    monkeypatch.setattr(perfkit.io.mpinside, "read", overflowing)
    result = run_case(str(_HOSTILE_DIR.parents[2] / "data" / "seed" / "mpinside_seed_tables.txt"), "mpinside")
    assert result["outcome"] == "noisy" and "noisy" in FAILURES
    assert result["type"] == "RuntimeWarning" and result["message"].startswith("overflow encountered in multiply")
    assert result["message"].endswith("; then accepted)")
