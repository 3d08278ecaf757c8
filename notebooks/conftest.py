"""nbval on output-free notebooks: give each checked cell its reference output from ``references/``.

A cell tagged ``nbval-check-output`` is compared with the output stored for it; the notebooks are
committed without outputs, so the references (written by ``tools/checked_outputs.py``) are put into
the collected cells here. A checked cell without a reference fails instead of passing unchecked.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from tools.checked_outputs import is_checked, read_references

MISSING = {"output_type": "stream", "name": "stdout",
           "text": "no reference output for this checked cell: run ./dev outputs on the notebook\n"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    references: dict[Path, dict] = {}
    for item in items:
        cell = getattr(item, "cell", None)
        if cell is None or item.path.suffix != ".ipynb" or not is_checked(cell):
            continue
        if item.path not in references:
            references[item.path] = read_references(item.path)
        reference = references[item.path].get(cell.get("id"))
        if reference is None:  # compared with this, the cell fails and says why
            reference = {"execution_count": 1, "outputs": [MISSING]}
        cell.execution_count = reference["execution_count"]
        cell.outputs = [nbformat.from_dict(output) for output in reference["outputs"]]
