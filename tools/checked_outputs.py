"""Keep the notebooks free of outputs except the reference outputs of the cells nbval checks.

A code cell whose source starts with ``# NBVAL_CHECK_OUTPUT`` is compared by nbval against the output
stored in the notebook; a cell stored without a run is not compared at all. This tool runs each notebook
(in its own directory, on the bundled data), keeps the text outputs of the checked cells as references
and removes every other output, execution count and widget state.

    python tools/checked_outputs.py notebooks/*.ipynb           # refresh the references
    python tools/checked_outputs.py --check notebooks/*.ipynb   # fail if a notebook is not in that state
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

MARKER = "# NBVAL_CHECK_OUTPUT"
#: Output data kept as references (pictures and scripts are neither checked nor kept).
KEPT_DATA = ("text/plain", "text/html")
#: Seconds a cell may run.
CELL_TIMEOUT = 600


def is_checked(cell: nbformat.NotebookNode) -> bool:
    return cell.cell_type == "code" and cell.source.lstrip().startswith(MARKER)


def reference_outputs(outputs: list[nbformat.NotebookNode]) -> list[nbformat.NotebookNode]:
    """Text results and streams of a checked cell, without metadata."""
    kept = []
    for output in outputs:
        if output.output_type == "stream":
            kept.append(output)
        elif output.output_type in ("execute_result", "display_data"):
            data = {key: value for key, value in output.data.items() if key in KEPT_DATA}
            if data:
                output.data, output.metadata = data, {}
                kept.append(output)
        else:
            raise ValueError(f"checked cell produced {output.output_type}: {output.get('ename', '')}")
    return kept


def refresh(path: Path) -> None:
    """Run ``path`` and store it with only the checked cells' reference outputs."""
    notebook = nbformat.read(path, as_version=4)
    NotebookClient(notebook, timeout=CELL_TIMEOUT, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    count = 0
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        if is_checked(cell):
            count += 1
            cell.outputs, cell.execution_count = reference_outputs(cell.outputs), count
        else:
            cell.outputs, cell.execution_count = [], None
        cell.metadata.pop("execution", None)
    notebook.metadata.pop("widgets", None)
    nbformat.write(notebook, path)


def problems(path: Path) -> list[str]:
    """What keeps ``path`` from the stored state: unchecked outputs, checked cells without a reference."""
    notebook = nbformat.read(path, as_version=4)
    found = ["widget state in the notebook metadata"] if "widgets" in notebook.metadata else []
    for number, cell in enumerate(notebook.cells, 1):
        if cell.cell_type != "code":
            continue
        if is_checked(cell) and (not cell.outputs or cell.execution_count is None):
            found.append(f"cell {number}: checked but has no reference output")
        if not is_checked(cell) and (cell.outputs or cell.execution_count is not None):
            found.append(f"cell {number}: output stored in a cell that is not checked")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--check", action="store_true", help="only report notebooks that need a refresh")
    args = parser.parse_args(argv)
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
