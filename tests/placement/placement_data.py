"""MapLib matrices for the placement tests, read with numpy (no perfkit reader involved)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

MATRICES = Path(__file__).resolve().parents[1] / "data" / "matrices"
APPS = ("amg", "btmz", "cg", "lulesh")


def maplib(app: str, quantity: str = "size") -> np.ndarray:
    """A 64 x 64 MapLib matrix (``size``: bytes, ``count``: messages)."""
    return np.loadtxt(MATRICES / f"MapLib_{app}_64_p2p.{quantity}.csv", delimiter=",")
