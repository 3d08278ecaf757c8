"""One colour per name (function, call, kind, system...), the same in every plot, run and view.

A name's colour never depends on which other names are drawn with it:

* the ``kind`` vocabulary and ``Compute`` have fixed colours (compute blue, transfer green, waits
  orange and red);
* common MPI calls have fixed colours; a call's wait part (``w_MPI_Recv``: late-sender wait,
  ``b_MPI_Bcast``: collective wait) is a lighter shade of the call's colour;
* any other name is hashed (CRC-32 of its UTF-8 bytes, stable across processes) into a
  qualitative palette that leaves out the fixed colours. Drawn together (:func:`colours`), hashed
  names that fall on a colour already taken move to the next free one, in name order: only then
  does a colour depend on the other names.

Holoviews takes the result of :func:`colours` as ``cmap`` of a categorical colour mapping. Legends and hover
text show names in words (:func:`label`: ``w_MPI_Recv`` is ``MPI_Recv (late-sender wait)``); a plot whose
categories are those words takes :func:`labelled_colours`, the same colours keyed by the words.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

from bokeh.palettes import Category20b, Category20c, Dark2

KIND_COLOURS = {
    "compute": "#1f77b4",
    "transfer": "#2ca02c",
    "wait_late_sender": "#ff7f0e",
    "wait_late_receiver": "#ffbb78",
    "wait_collective": "#d62728",
    "io": "#8c564b",
    "other": "#7f7f7f",
}

FUNCTION_COLOURS = {
    "Compute": KIND_COLOURS["compute"],
    "MPI_Send": "#2ca02c",
    "MPI_Recv": "#ff7f0e",
    "MPI_Isend": "#17becf",
    "MPI_Irecv": "#bcbd22",
    "MPI_Sendrecv": "#637939",
    "MPI_Wait": "#8c564b",
    "MPI_Waitall": "#e377c2",
    "MPI_Waitany": "#ce6dbd",
    "MPI_Bcast": "#d62728",
    "MPI_Allreduce": "#9467bd",
    "MPI_Reduce": "#5254a3",
    "MPI_Barrier": "#843c39",
    "MPI_Alltoall": "#8c6d31",
    "MPI_Alltoallv": "#bd9e39",
    "MPI_Allgather": "#7b4173",
    "MPI_Allgatherv": "#a55194",
    "MPI_Gather": "#393b79",
    "MPI_Scatter": "#6b6ecf",
    "MPI_Init": "#7f7f7f",
    "MPI_Init_thread": "#7f7f7f",
    "MPI_Finalize": "#525252",
}

#: Colour of reference lines (ideal scaling, efficiency 1) and of fitted models.
REFERENCE = "#555555"
FIT = "#222222"
#: Wait parts of a call: the prefix and how far its colour is mixed with white (0-1).
WAIT_PREFIXES = ("w_", "r_", "b_")
LIGHTEN = 0.5
#: Each kind in words (legends, hover text, colour bars).
KIND_WORDS = {"compute": "compute", "transfer": "transfer", "wait_late_sender": "late-sender wait",
              "wait_late_receiver": "late-receiver wait", "wait_collective": "collective wait", "io": "I/O",
              "other": "other MPI"}
#: The wait part of a call in words, by its prefix (``w_MPI_Recv``: the late-sender wait of ``MPI_Recv``).
WAIT_WORDS = {"w_": "late-sender wait", "r_": "late-receiver wait", "b_": "collective wait"}

_FIXED = {**KIND_COLOURS, **FUNCTION_COLOURS}
#: Colours of the names that have no fixed one: Dark2 and the two darker shades of each hue of
#: Category20b/c (the lighter ones are too pale for lines on white); fixed colours and greys (the
#: colour of "other") left out.
HASHED = tuple(dict.fromkeys(c for c in (*Dark2[8], *(c for palette in (Category20b[20], Category20c[20])
                                                      for i, c in enumerate(palette) if i % 4 < 2))
                             if c not in set(_FIXED.values()) and len({c[1:3], c[3:5], c[5:7]}) > 1))


def colour(name: str) -> str:
    """The colour of ``name`` as ``#rrggbb`` (fixed, a lighter shade of its call, or hashed)."""
    name = str(name)
    fixed = _fixed(name)
    return fixed if fixed is not None else HASHED[_slot(name)]


def colours(names: Iterable[str]) -> dict[str, str]:
    """``{name: colour}`` for each distinct name, in the order given (a holoviews ``cmap``).

    Hashed names never share a colour with another name of ``names`` while free colours remain.
    """
    unique = list(dict.fromkeys(str(name) for name in names))
    out = {name: _fixed(name) for name in unique}
    taken = {c for c in out.values() if c is not None}
    for name in sorted(n for n, c in out.items() if c is None):
        start = _slot(name)
        order = [HASHED[(start + i) % len(HASHED)] for i in range(len(HASHED))]
        out[name] = next((c for c in order if c not in taken), order[0])
        taken.add(out[name])
    return {name: str(out[name]) for name in unique}


def label(name: str) -> str:
    """``name`` (a function, call or kind) in words: ``w_MPI_Recv`` -> ``MPI_Recv (late-sender wait)``,
    ``b_MPI_Allreduce`` -> ``MPI_Allreduce (collective wait)``, ``wait_late_sender`` -> ``late-sender wait``;
    any other name as it is."""
    name = str(name)
    if name in KIND_WORDS:
        return KIND_WORDS[name]
    for prefix, words in WAIT_WORDS.items():
        if name.startswith(prefix) and len(name) > len(prefix):
            return f"{name[len(prefix):]} ({words})"
    return name


def labelled_colours(names: Iterable[str]) -> dict[str, str]:
    """:func:`colours` of ``names`` keyed by their words (:func:`label`): the ``cmap`` of a plot whose
    categories are the words; each keeps the colour of its name."""
    return {label(name): tint for name, tint in colours(names).items()}


def _fixed(name: str) -> str | None:
    """The fixed colour of ``name`` (its own or a lighter shade of its call's), None if it has none."""
    if name in _FIXED:
        return _FIXED[name]
    for prefix in WAIT_PREFIXES:
        if name.startswith(prefix) and len(name) > len(prefix):
            call = _fixed(name[len(prefix):])
            return lighten(call if call is not None else HASHED[_slot(name[len(prefix):])])
    return None


def _slot(name: str) -> int:
    return zlib.crc32(name.encode()) % len(HASHED)


def lighten(hex_colour: str, amount: float = LIGHTEN) -> str:
    """``hex_colour`` mixed with white: 0 keeps it, 1 gives white."""
    rgb = [int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(c + (255 - c) * amount):02x}" for c in rgb)
