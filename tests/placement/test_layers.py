"""Imports inside perfkit.placement point one way (no cycle, also not through function-level imports)."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import perfkit.placement

PACKAGE = Path(perfkit.placement.__file__).parent
PREFIX = "perfkit.placement"


def placement_imports(path: Path) -> set[str]:
    """Sibling modules ``path`` imports anywhere in the file (top level, functions, TYPE_CHECKING)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        else:
            continue
        found |= {name.split(".")[2] for name in names if name.startswith(PREFIX + ".")}
    modules = {p.stem for p in PACKAGE.glob("*.py")}
    return (found & modules) - {path.stem}


def import_graph() -> dict[str, set[str]]:
    return {path.stem: placement_imports(path) for path in sorted(PACKAGE.glob("*.py"))}


def test_the_checker_sees_function_level_and_type_checking_imports(tmp_path: Path) -> None:
    source = tmp_path / "sample.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "from perfkit.placement.topology import Topology\n"
        "if TYPE_CHECKING:\n    from perfkit.placement.placement import Placement\n"
        "def f():\n    from perfkit.placement import strategies\n    import perfkit.placement.launch\n"
    )
    assert placement_imports(source) == {"topology", "placement", "strategies", "launch"}


def test_no_import_cycle() -> None:
    try:
        order = list(TopologicalSorter(import_graph()).static_order())
    except CycleError as cycle:
        raise AssertionError(f"import cycle in perfkit.placement: {cycle.args[1]}") from None
    position = {name: i for i, name in enumerate(order)}
    # the layers named in docs/placement.md, lower first
    for lower, upper in [("topology", "cost_model"), ("traffic", "cost_model"), ("cost_model", "placement"),
                         ("placement", "strategies"), ("strategies", "cost"), ("placement", "launch")]:
        assert position[lower] < position[upper], (lower, upper)


def test_model_layers_do_not_reach_up() -> None:
    graph = import_graph()
    assert not graph["cost_model"] & {"placement", "strategies", "cost", "launch"}
    assert not graph["placement"] & {"strategies", "cost", "launch"}
    assert not graph["strategies"] & {"cost", "launch"}
