"""Plots drawn on the browser's 2D canvas rather than through WebGL.

HoloViews asks bokeh for WebGL output by default. Bokeh's WebGL draws none of the per-rank view's
polygons, text or images, and every repaint then copies each plot's WebGL canvas onto its 2D canvas:
in headless Chromium without a GPU that copy took 1.0-1.8 s of the 3.3-4.5 s the page worked after
one change of the per-rank view's metric at 2,048 ranks (every tab built, machine under load).
"""

from __future__ import annotations

import holoviews as hv


def use_canvas() -> None:
    """Have holoviews' bokeh renderer draw plots shown from now on to a 2D canvas (not WebGL)."""
    hv.renderer("bokeh").webgl = False
