"""An explorer tab shown as in a browser: a tab whose result is not computed yet shows a placeholder at once and
is drawn when the result is there (:class:`perfkit.widgets.offloop.OffLoop`)."""

from __future__ import annotations

import time

import panel as pn


def show(layout: pn.viewable.Viewable, name: str, timeout_s: float = 60.0) -> pn.viewable.Viewable:
    """The tab ``name`` of the explorer ``layout``, made the active one and drawn (its placeholder gone)."""
    tabs = layout.select(pn.Tabs)[0]
    tabs.active = list(tabs._names).index(name)
    deadline = time.monotonic() + timeout_s
    while drawing(tabs[tabs.active]):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the {name} tab was not drawn within {timeout_s} s")
        time.sleep(0.02)
    return tabs[tabs.active]


def drawing(view: pn.viewable.Viewable) -> bool:
    """Whether ``view`` shows a placeholder while its result is computed."""
    return bool(view.select(pn.indicators.LoadingSpinner))
