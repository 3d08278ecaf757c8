"""Sliders moved as in a browser: a drag sets ``value`` at every step and ``value_throttled`` once, on release."""

from __future__ import annotations

import panel as pn
import param


def drag(slider: pn.widgets.IntRangeSlider, *values: tuple[int, int]) -> None:
    """Move ``slider`` through ``values`` (handle held), then release it on the last one."""
    for value in values:
        slider.value = value
    with param.edit_constant(slider):
        slider.value_throttled = values[-1]
