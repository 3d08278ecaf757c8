"""Reference outputs of the notebook cells nbval checks, kept beside the notebooks, which stay output-free.

nbval compares a cell tagged ``nbval-check-output`` (cell metadata, out of the learners' sight) with
the output stored in the notebook, and does not compare a cell stored without a run. The notebooks are
committed without outputs, so their checked cells' reference outputs live in
``notebooks/references/<notebook>.json`` (by cell id); the notebooks' ``conftest.py`` puts them into the
cells nbval collects.

Notebooks are stored as the git filter ``nbstripout`` (:data:`STRIP`) leaves them: no outputs, no
execution counts, no metadata that depends on the machine that saved them. ``./dev`` installs the filter
in the clone (``--install-filter``), so a notebook opened and run in JupyterLab stays clean in git.

    python tools/checked_outputs.py notebooks/00_tour.ipynb     # run it; store its references; strip it
    python tools/checked_outputs.py --check notebooks/*.ipynb   # report notebooks and references out of step
    python tools/checked_outputs.py --install-filter            # git add strips notebooks in this clone
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient

#: Cell tag of the cells whose output nbval compares.
TAG = "nbval-check-output"
#: nbval's marker comment, which the notebooks do not use: it would sit in the learners' code.
MARKER = "# NBVAL_CHECK_OUTPUT"
#: Output data kept as references (pictures and scripts are neither checked nor kept).
KEPT_DATA = ("text/plain", "text/html")
#: The notebook filter: outputs, counts, and the saving machine's Python version are not kept. The
#: kernel's display name stays (nbformat requires it): notebooks carry JupyterLab's, :data:`KERNEL_NAME`.
STRIP = [sys.executable, "-m", "nbstripout", "--keep-id", "--extra-keys", "metadata.language_info"]
KERNEL_NAME = "Python 3 (ipykernel)"
#: Seconds a cell may run.
CELL_TIMEOUT = 600


def is_checked(cell: nbformat.NotebookNode) -> bool:
    """Whether nbval compares ``cell``'s output with a stored reference."""
    if cell.cell_type != "code":
        return False
    return TAG in cell.get("metadata", {}).get("tags", [])


def references_path(notebook: Path) -> Path:
    return notebook.parent / "references" / f"{notebook.stem}.json"


def read_references(notebook: Path) -> dict[str, dict[str, Any]]:
    """Reference outputs by cell id: ``{"execution_count": n, "outputs": [...]}``; empty if none are stored."""
    path = references_path(notebook)
    return json.loads(path.read_text()) if path.exists() else {}


def reference_outputs(outputs: list[nbformat.NotebookNode]) -> list[dict[str, Any]]:
    """Text results and streams of a checked cell, without metadata."""
    kept = []
    for output in outputs:
        if output.output_type == "stream":
            kept.append(dict(output))
        elif output.output_type in ("execute_result", "display_data"):
            data = {key: value for key, value in output.data.items() if key in KEPT_DATA}
            if data:
                kept.append(dict(output, data=data, metadata={}))
        else:
            raise ValueError(f"checked cell produced {output.output_type}: {output.get('ename', '')}")
    return kept


def refresh(path: Path) -> None:
    """Run ``path``, store its checked cells' outputs as references and the notebook without outputs."""
    notebook = nbformat.read(path, as_version=4)
    NotebookClient(notebook, timeout=CELL_TIMEOUT, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    checked = [cell for cell in notebook.cells if is_checked(cell)]
    references = {cell.id: {"execution_count": number, "outputs": reference_outputs(cell.outputs)}
                  for number, cell in enumerate(checked, 1)}
    target = references_path(path)
    if references:
        target.parent.mkdir(exist_ok=True)
        target.write_text(json.dumps(references, indent=1, ensure_ascii=False) + "\n")
    else:
        target.unlink(missing_ok=True)
    nbformat.write(notebook, path)
    path.write_text(stripped(path))


def stripped(path: Path) -> str:
    """``path`` as the notebook filter stores it."""
    return subprocess.run([*STRIP, "--textconv", str(path)], check=True, capture_output=True, text=True).stdout


def install_filter() -> None:
    """Configure this clone's git to store notebooks through :data:`STRIP` (``.gitattributes`` names it)."""
    command = " ".join(f"'{part}'" for part in STRIP)
    subprocess.run(["git", "config", "filter.nbstripout.clean", command], check=True)
    subprocess.run(["git", "config", "filter.nbstripout.smudge", "cat"], check=True)
    subprocess.run(["git", "config", "diff.ipynb.textconv", f"{command} --textconv"], check=True)


def problems(path: Path) -> list[str]:
    """What is out of step: stored outputs, checked cells without a reference, references to no checked cell."""
    notebook = nbformat.read(path, as_version=4)
    references = read_references(path)
    found = [] if path.read_text() == stripped(path) else ["not stored as the notebook filter leaves it"]
    try:
        nbformat.validate(notebook)
    except nbformat.ValidationError as exc:
        found.append(f"not a valid notebook: {exc.message}")
    if notebook.metadata.get("kernelspec", {}).get("display_name") != KERNEL_NAME:
        found.append(f"kernel display name is not {KERNEL_NAME!r} (what JupyterLab writes on save)")
    checked = set()
    for number, cell in enumerate(notebook.cells, 1):
        if cell.cell_type != "code":
            continue
        if MARKER in cell.source:
            found.append(f"cell {number}: {MARKER} in the learners' code: tag the cell {TAG} instead")
        if is_checked(cell):
            checked.add(cell.id)
            if not references.get(cell.id, {}).get("outputs"):
                found.append(f"cell {number}: checked but {references_path(path).name} has no reference for it")
    found += [f"reference for cell id {key}, which is no checked cell" for key in sorted(set(references) - checked)]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--check", action="store_true", help="only report what is out of step")
    parser.add_argument("--install-filter", action="store_true", help="git add stores notebooks stripped (this clone)")
    args = parser.parse_args(argv)
    if args.install_filter:
        install_filter()
    failed = False
    for path in args.notebooks:
        if args.check:
            for problem in problems(path):
                print(f"{path}: {problem}")
                failed = True
        else:
            refresh(path)
            print(f"{path}: references refreshed")
    return int(failed)


if __name__ == "__main__":
    sys.exit(main())
