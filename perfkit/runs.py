"""Which runs of a Dataset a selector names: the one rule of every ``run=`` argument and ``--run`` option.

A selector is

* an ``int``: a position along ``run`` (negative ones count from the end, as in Python);
* a ``str`` equal to a run's label: that run (even when the label holds ``*``, ``?`` or ``[``);
* any other ``str`` holding ``*``, ``?`` or ``[``: a glob pattern (``fnmatch``, case-sensitive), every run
  whose label it matches, in the Dataset's order.

A selector that names no run raises ``ValueError`` saying where it was looked for and naming the runs
there are (``perfkit.text.names``); so does asking for one run where several (or none) are named.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from numbers import Integral
from typing import Any

from perfkit.text import names, plural

#: How many run labels an error names before saying how many more there are.
SHOWN = 8
_WILDCARDS = frozenset("*?[")


def run_labels(data: Any) -> list[str]:
    """The run labels of a Dataset or DataArray with a ``run`` dimension, as strings."""
    return [str(label) for label in data["run"].values]


def matches(labels: Sequence[str], selector: int | str) -> list[int]:
    """The positions ``selector`` names among ``labels`` (empty when none)."""
    if isinstance(selector, Integral) and not isinstance(selector, bool):
        i = int(selector)
        return [i % len(labels)] if -len(labels) <= i < len(labels) else []
    if not isinstance(selector, str):
        raise TypeError(f"a run is chosen by its label, a glob pattern or its position, got {selector!r}")
    if selector in labels:
        return [labels.index(selector)]
    if _WILDCARDS & set(selector):
        return [i for i, label in enumerate(labels) if fnmatch.fnmatchcase(label, selector)]
    return []


def select(labels: Sequence[str], selectors: Iterable[int | str], where: str = "the data") -> list[int]:
    """The positions the ``selectors`` name among ``labels``, each once, in the order named; ``ValueError``
    naming ``where`` and its runs for a selector that names none."""
    labels = list(labels)
    found: list[int] = []
    for selector in selectors:
        hit = matches(labels, selector)
        if not hit:
            raise ValueError(f"{where} has no run {_described(selector)}; its runs: {_shown(labels)}")
        found += hit
    return list(dict.fromkeys(found))


def select_one(labels: Sequence[str], selector: int | str | None, where: str = "the data",
               choose: str = "one with run=LABEL") -> int:
    """The position of the one run ``selector`` names among ``labels`` (None: the only run there is);
    ``ValueError`` naming the runs when it names none or several (``choose`` says how to pick one)."""
    labels = list(labels)
    found = list(range(len(labels))) if selector is None else select(labels, [selector], where)
    if len(found) != 1:
        which = "" if selector is None else f" matching {selector!r}"
        shown = f" ({_shown([labels[i] for i in found])})" if found else ""
        raise ValueError(f"{where} holds {plural(len(found), 'run')}{which}{shown}; choose {choose}")
    return found[0]


def _described(selector: int | str) -> str:
    if isinstance(selector, Integral):
        return f"at position {int(selector)}"
    return f"matching {selector!r}" if _WILDCARDS & set(selector) else repr(selector)


def _shown(labels: Sequence[str]) -> str:
    return names(list(labels), SHOWN) if labels else "none"
