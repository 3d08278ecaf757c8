"""The notebooks as a course: numbered, each with its question, what it teaches, an exercise checked
in a following cell and nbval-checked cells; stored without outputs, their references in step."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from perfkit.text import unreadable
from tests.helpers import ROOT
from tools.checked_outputs import is_checked, problems, read_references, stripped

NOTEBOOKS = ROOT / "notebooks"
COURSE = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def read(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


def test_the_course_is_numbered_without_gaps():
    assert [path.name[:2] for path in COURSE] == [f"{i:02d}" for i in range(9)]
    assert COURSE[-1].name == "08_traces.ipynb"


@pytest.mark.parametrize("path", COURSE, ids=lambda p: p.name)
def test_opens_with_its_question_and_what_it_teaches(path):
    first = read(path).cells[0]
    assert first.cell_type == "markdown"
    assert first.source.startswith(f"# {path.name[:2]} · ")
    assert "**The question this notebook answers:**" in first.source
    assert "**What you will learn" in first.source


@pytest.mark.parametrize("path", COURSE, ids=lambda p: p.name)
def test_has_an_exercise_checked_in_a_following_cell(path):
    cells = read(path).cells
    exercises = [i for i, cell in enumerate(cells)
                 if cell.cell_type == "markdown" and re.search(r"^#+ Exercise", cell.source, re.MULTILINE)]
    assert exercises, "no exercise heading"
    for i in exercises:
        following = [cell for cell in cells[i + 1:i + 4] if cell.cell_type == "code"]
        assert any(re.search(r"^\s*assert ", cell.source, re.MULTILINE) for cell in following), \
            f"the exercise at cell {i + 1} is not checked in the cells after it"


@pytest.mark.parametrize("path", COURSE, ids=lambda p: p.name)
def test_has_checked_cells_and_ends_with_your_own_files(path):
    notebook = read(path)
    assert any(is_checked(cell) for cell in notebook.cells)
    assert "own files" in "".join(cell.source for cell in notebook.cells[-3:] if cell.cell_type == "markdown").lower()


#: A cell whose output shows NaN on purpose (to teach what it means) says so in its source.
NAN_ON_PURPOSE = "NaN on purpose"


@pytest.mark.parametrize("path", COURSE, ids=lambda p: p.name)
def test_outputs_read_as_numbers_not_nan_or_exponents(path):
    """What the checked cells print has no NaN, None, inf, ``1e+09`` or ``np.float64`` in it (:func:`unreadable`),
    unless the cell says it shows NaN on purpose."""
    sources = {cell.get("id"): cell.source for cell in read(path).cells}
    for cell_id, cell in read_references(path).items():
        if NAN_ON_PURPOSE in sources.get(cell_id, ""):
            continue
        for output in cell.get("outputs", []):
            shown = output.get("text") or output.get("data", {}).get("text/plain") or ""
            assert not unreadable("".join(shown)), f"cell {cell_id} prints {unreadable(''.join(shown))[:5]}"


@pytest.mark.parametrize("path", sorted(NOTEBOOKS.glob("*.ipynb")), ids=lambda p: p.name)
def test_stored_without_outputs_with_references_in_step(path):
    assert problems(path) == [], "run: python tools/checked_outputs.py " + str(path.relative_to(ROOT))


def test_a_notebook_run_and_saved_in_jupyterlab_stays_clean_in_git(tmp_path):
    """What a JupyterLab save adds (outputs, counts, language version) is what the git filter strips, so
    git sees the committed bytes again."""
    original = (NOTEBOOKS / "00_tour.ipynb").read_text()
    notebook = nbformat.reads(original, as_version=4)
    notebook.metadata["language_info"] = {"name": "python", "version": "3.12.1"}
    for count, cell in enumerate((c for c in notebook.cells if c.cell_type == "code"), 1):
        cell.execution_count = count
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="ran\n")]
    saved = tmp_path / "00_tour.ipynb"
    nbformat.write(notebook, saved)
    assert saved.read_text() != original
    assert stripped(saved) == original
    attributes = (ROOT / ".gitattributes").read_text()
    assert re.search(r"^\*\.ipynb filter=nbstripout", attributes, re.MULTILINE)


def is_test(cell: nbformat.NotebookNode) -> bool:
    """A hidden cell asserting what the narrative states."""
    return cell.cell_type == "code" and "test" in cell.get("metadata", {}).get("tags", [])


@pytest.mark.parametrize("path", COURSE, ids=lambda p: p.name)
def test_exercises_arrive_unsolved_and_numbers_are_asserted(path):
    cells = read(path).cells
    assert any(is_test(cell) for cell in cells), "no hidden test cell asserts the narrative's numbers"
    assert all(cell.metadata.get("jupyter", {}).get("source_hidden") for cell in cells if is_test(cell))
    for i, cell in enumerate(cells):
        if cell.cell_type == "markdown" and re.search(r"^#+ Exercise", cell.source, re.MULTILINE):
            exercise = next(c for c in cells[i + 1:] if c.cell_type == "code")
            assert re.search(r"^\w+ = None  # your answer", exercise.source, re.MULTILINE), exercise.source


def _nbval(notebook: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "--nbval-lax", "-p", "no:cacheprovider", "-q",
                           str(notebook)], cwd=notebook.parent, capture_output=True, text=True, timeout=600)


def test_a_changed_number_fails_the_narrative_that_states_it(tmp_path):
    """The tour's first section on a copy of the seed's tables: as bundled, its hidden test cell passes;
    with rank 0's compute time rewritten (868.5 s -> 968.5 s) the same cell fails, not a compared output
    (the copy has none), so the sentence stating 67.5 % compute is what no longer holds."""
    notebook = read(NOTEBOOKS / "00_tour.ipynb")
    first_test = next(i for i, cell in enumerate(notebook.cells) if is_test(cell))
    assert "67.5 %" in notebook.cells[first_test + 1].source  # the sentence its assertions back
    notebook.cells = notebook.cells[:first_test + 1]
    for cell in notebook.cells:
        if not is_test(cell):
            cell.metadata.pop("tags", None)
    (tmp_path / "notebooks").mkdir()
    copy = tmp_path / "notebooks" / "tour.ipynb"
    nbformat.write(notebook, copy)
    seed = tmp_path / "data" / "seed" / "mpinside_seed_tables.txt"
    seed.parent.mkdir(parents=True)
    shutil.copy(ROOT / "data" / "seed" / seed.name, seed)

    as_bundled = _nbval(copy)
    assert as_bundled.returncode == 0, as_bundled.stdout[-3000:]

    text = seed.read_text()
    assert text.count("868.484133") == 1
    seed.write_text(text.replace("868.484133", "968.484133"))
    changed = _nbval(copy)
    assert changed.returncode == 1, changed.stdout[-3000:]
    failed = re.findall(r"^FAILED .*::Cell (\d+)", changed.stdout, re.MULTILINE)
    code_cells = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert [is_test(code_cells[int(n)]) for n in failed] == [True], changed.stdout[-3000:]
    assert "compute %" in changed.stdout
