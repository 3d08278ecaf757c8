"""One rule for naming runs (``perfkit.runs``): labels, glob patterns and positions, and one error text, the
same from ``pick_run``, ``perfkit place --run``, the analyses' ``--run`` and ``pop_metrics(reference=)``."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import perfkit
from perfkit.analysis.traffic import traffic_matrix
from perfkit.cli import main
from perfkit.runs import matches, select, select_one

LABELS = ["96/basic", "96/slt", "192/basic", "192/slt"]
SYNTH = Path(__file__).resolve().parents[1] / "data" / "synthetic" / "384"
labels = st.lists(st.text(st.sampled_from("ab*?[]/-1"), min_size=1, max_size=5), min_size=1, max_size=8,
                  unique=True)


def test_labels_patterns_and_positions():
    assert select(LABELS, ["192/slt"]) == [3]
    assert select(LABELS, ["*/slt", "96/*"]) == [1, 3, 0]  # in the order named, each once
    assert select(LABELS, [0, -1, "9?/basic"]) == [0, 3]
    assert select(LABELS, ["[1]*"]) == [2, 3]
    assert select_one(LABELS, "192/b*") == 2
    assert select_one(["only"], None) == 0
    assert matches(["a*", "ab"], "a*") == [0]  # a label holding a wildcard names itself, not a pattern
    with pytest.raises(TypeError, match="label, a glob pattern or its position"):
        matches(LABELS, 1.0)  # type: ignore[arg-type]


def test_what_names_no_run_or_several_says_where_and_names_the_runs():
    many = [f"run{i:02d}" for i in range(12)]
    with pytest.raises(ValueError) as exc:
        select(many, ["nope"], "study.zarr")
    assert str(exc.value) == ("study.zarr has no run 'nope'; its runs: run00, run01, run02, run03, run04, run05, "
                              "run06, run07 and 4 more")
    with pytest.raises(ValueError, match=r"^the data has no run matching 'x\*'; its runs: 96/basic, 96/slt, "):
        select(LABELS, ["x*"])
    with pytest.raises(ValueError, match=r"^the data has no run at position 4; its runs"):
        select(LABELS, [4])
    with pytest.raises(ValueError) as exc:
        select_one(LABELS, "*/slt", "s.zarr", "one with --run LABEL")
    assert str(exc.value) == "s.zarr holds 2 runs matching '*/slt' (96/slt, 192/slt); choose one with --run LABEL"
    with pytest.raises(ValueError) as exc:
        select_one(LABELS, None)
    assert str(exc.value) == "the data holds 4 runs (96/basic, 96/slt, 192/basic, 192/slt); choose one with run=LABEL"


@given(labels, st.data())
def test_every_selector_names_what_the_rule_says(names, data):
    """Each label names itself; a position its run; a pattern (not a label) the labels fnmatch takes."""
    assert select(names, names) == list(range(len(names)))
    i = data.draw(st.integers(-len(names), len(names) - 1))
    assert select(names, [i]) == [i % len(names)]
    pattern = data.draw(st.text(st.sampled_from("ab*?/"), min_size=1, max_size=4))
    expected = ([names.index(pattern)] if pattern in names
                else [k for k, n in enumerate(names) if fnmatch.fnmatchcase(n, pattern)] if re.search(r"[*?]", pattern)
                else [])
    assert matches(names, pattern) == expected


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("runs") / "study.zarr"
    assert main(["convert", str(SYNTH / "basic.mpinside"), str(SYNTH / "slt.mpinside"), "-o", str(path)]) == 0
    return path


def test_the_commands_and_functions_name_runs_alike(store: Path, capsys: pytest.CaptureFixture[str]):
    said = f"{store} has no run 'nope'; its runs: basic, slt"
    capsys.readouterr()
    place = ["place", str(store), "--nodes", "16", "--ppn", "24", "--strategy", "block", "--format", "permutation"]
    assert main([*place, "--run", "nope"]) == 1
    assert said in capsys.readouterr().err
    assert main(["pop", str(store), "--run", "nope"]) == 1
    assert said in capsys.readouterr().err
    with pytest.raises(ValueError) as exc:
        traffic_matrix(perfkit.load(store), run="nope")
    assert str(exc.value) == said.replace(str(store), "the data")
    with pytest.raises(ValueError) as exc:
        perfkit.pop_metrics(perfkit.load(store), reference="nope")
    assert str(exc.value) == said.replace(str(store), "the data")
    assert main([*place, "--run", "s*"]) == 0  # a pattern naming one run
    assert main(["pop", str(store), "--run", "*", "-f", "json"]) == 0
    assert '"run": "basic"' in capsys.readouterr().out
    assert traffic_matrix(perfkit.load(store), run=-1).nnz == traffic_matrix(perfkit.load(store), run="slt").nnz
