"""The MPInside writer's number formatting: integers written in C print as ``%.0f`` would print them."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from perfkit.io.mpinside.writer import _as_written

NUMBERS = st.one_of(st.integers(-(2**63), 2**63 - 1).map(float), st.floats(allow_nan=True, allow_infinity=True),
                    st.sampled_from([0.0, -0.0, 0.5, 1.5, 2.5, 2.0**63, -(2.0**63), 1e300]))


@settings(max_examples=300, deadline=None)
@given(values=st.lists(NUMBERS, min_size=1, max_size=20), fmt=st.sampled_from(["%.0f", "%.6f"]))
def test_values_are_written_as_their_format_prints_them(values: list[float], fmt: str) -> None:
    array = np.array(values)
    expected = pd.DataFrame(array).to_csv(sep=" ", header=False, na_rep="-----", float_format=fmt)
    got = pd.DataFrame(_as_written(array, fmt)).to_csv(sep=" ", header=False, na_rep="-----", float_format=fmt)
    assert got == expected


def test_integers_become_int64_and_others_stay() -> None:
    assert _as_written(np.array([0.0, 3.0, 2.0**53]), "%.0f").dtype == np.int64
    for values in ([0.0, -0.0], [1.0, np.nan], [1.0, 0.5], [1.0, 2.0**63]):
        assert _as_written(np.array(values), "%.0f").dtype == np.float64
    assert _as_written(np.array([1.0]), "%.6f").dtype == np.float64
