"""Notebook set-up under which every plot and widget renders with no internet access.

``hv.extension("bokeh", inline=True)`` and ``pn.extension(inline=True)`` put the JavaScript in the
notebook, and panel inlines the stylesheets of the objects it displays itself. Plots that holoviews
displays directly still point their layout and theme stylesheets at panel's CDN; the hook installed
here swaps those for the copies shipped inside the panel package, whenever panel is in inline mode.
Objects built after the page has loaded (a tab's first visit) would link panel's CDN too: with ipywidgets
comms (Voila), their models reach the page as they are made, before any hook could patch them. So the
set-up also makes panel give every model it builds the inline copies from the start (:func:`inline_properties`).
The logos come without holoviews' "extension loaded" info sign (a character most fonts lack, drawn as
a box). Plots are drawn on a 2D canvas, not WebGL (:mod:`perfkit.plots.canvas`).

In a kernel, holoviews' extension imports ``nbformat`` for its notebook archive (unused here) if it can:
through jsonschema that compiles 39 grammars of ``rfc3987_syntax``, 2.3 s of a notebook's first cell
on this project's reference machine. The set-up loads the extension without it unless it is imported already.

In a kernel Voila started (a dashboard: no one types ``help()`` there), two costs of a notebook are left out:

- param's tables of every parameter in the docstring of every Parameterized class, built as panel, bokeh and
  holoviews are imported (about 0.4 s of CPU); the default is restored once they are, so classes made later
  are described as usual. Likewise the signatures bokeh builds for the constructor of each of its models
  (about 0.1 s).
- the extension JavaScript (3 MB) published a second time under holoviews' own MIME type beside
  ``application/javascript``. Voila runs the latter only (JupyterLab's holoviews extension does not load in
  Voila's page), so the page and the kernel's messages carry it once. In JupyterLab both are kept.
- BokehJS's WebGL part (``bokeh-gl``), which plots drawn on the canvas do not use.
"""

from __future__ import annotations

import functools
import os
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal

import param

from perfkit.imports import unimportable


def in_voila() -> bool:
    """Whether this process is a kernel Voila started (Voila sets ``VOILA_KERNEL_ID`` in each of its kernels)."""
    return "VOILA_KERNEL_ID" in os.environ


@contextmanager
def param_docstrings(described: bool) -> Iterator[None]:
    """Parameterized classes created inside the block get param's parameter tables in their docstrings only
    when ``described`` (param's own default: in IPython, yes); the setting before is restored after."""
    before = param.parameterized.docstring_describe_params
    param.parameterized.docstring_describe_params = described and before
    try:
        yield
    finally:
        param.parameterized.docstring_describe_params = before


@contextmanager
def bokeh_signatures(described: bool) -> Iterator[None]:
    """bokeh model classes created inside the block get the signature of their constructor, built from every
    property by bokeh's ``Model.__init_subclass__`` (about 0.1 s of importing panel and holoviews), and their
    docstring's example only when ``described``; bokeh's hook is restored after."""
    if described:
        yield
        return
    from bokeh.model import Model

    hook = Model.__dict__["__init_subclass__"]

    def undescribed(cls: type[Model]) -> None:
        super(Model, cls).__init_subclass__()

    Model.__init_subclass__ = classmethod(undescribed)  # type: ignore[assignment]
    try:
        yield
    finally:
        Model.__init_subclass__ = hook  # type: ignore[method-assign]


with param_docstrings(not in_voila()), bokeh_signatures(not in_voila()):
    import holoviews as hv
    import holoviews.plotting.bokeh  # hv.extension("bokeh") imports it: its classes are made here, undescribed
    import panel as pn
    from bokeh.document import Document
    from bokeh.models import ImportedStyleSheet, Model, UIElement
    from panel.io.notebook import LOAD_MIME, patch_inline_stylesheets, replace_inline_css
    from panel.io.resources import CDN_DIST
    from panel.reactive import Reactive
    from panel.viewable import Viewable

    from perfkit.plots.canvas import use_canvas


def setup_notebook(comms: Literal["default", "ipywidgets"] = "default") -> None:
    """Load the bokeh plotting and panel widget extensions with all resources inline.

    ``comms="ipywidgets"`` is for notebooks served by Voila, where widgets talk through ipywidgets.
    """
    with scripts_once(in_voila()), canvas_bundle(in_voila()):
        with environment(HV_HIDE_TOOLTIP_LOGO="1"), unimportable("nbformat"):
            hv.extension("bokeh", inline=True)
        pn.extension(inline=True, comms=comms)
    use_canvas()
    if inline_cdn_stylesheets not in Viewable._preprocessing_hooks:
        Viewable._preprocessing_hooks.append(inline_cdn_stylesheets)
    if not getattr(Reactive._get_properties, "inlines_stylesheets", False):
        Reactive._get_properties = inline_properties(Reactive._get_properties)


#: Per document, the inline copy of each of panel's stylesheets, by the URL it replaces (one model per
#: document, shared by every model that uses the sheet: the page receives its text once).
_INLINE_SHEETS: weakref.WeakKeyDictionary[Document, dict[str, Any]] = weakref.WeakKeyDictionary()


def inline_properties(get_properties: Callable[[Reactive, Document | None], dict[str, Any]]
                      ) -> Callable[[Reactive, Document | None], dict[str, Any]]:
    """``get_properties`` (panel's properties of a new model) with the stylesheets linked from panel's CDN
    replaced by their inline copies, in inline mode and outside panel's server (which hands them out itself:
    its documents carry a ``dist_url``)."""

    @functools.wraps(get_properties)
    def get(self: Reactive, doc: Document | None = None) -> dict[str, Any]:
        properties = get_properties(self, doc)
        sheets = properties.get("stylesheets")
        served = doc is not None and "dist_url" in doc._template_variables
        if sheets and pn.config.inline and not served:
            properties["stylesheets"] = [inline_copy(sheet, doc) for sheet in sheets]
        return properties

    get.inlines_stylesheets = True  # type: ignore[attr-defined]
    return get


def inline_copy(sheet: Any, doc: Document | None) -> Any:
    """The inline copy of ``sheet`` when it is linked from panel's CDN (one per document), else ``sheet``."""
    if not (isinstance(sheet, ImportedStyleSheet) and sheet.url.startswith(CDN_DIST)):
        return sheet
    if doc is None:
        return replace_inline_css(sheet)
    copies = _INLINE_SHEETS.setdefault(doc, {})
    if sheet.url not in copies:
        copies[sheet.url] = replace_inline_css(sheet)
    return copies[sheet.url]


def inline_cdn_stylesheets(viewable: Viewable, root: Model) -> None:
    """Replace stylesheets linked from panel's CDN in ``root``'s models by their inline copies (inline mode only)."""
    if not pn.config.inline:
        return
    for model in root.select({"type": UIElement}):
        if any(isinstance(sheet, ImportedStyleSheet) and sheet.url.startswith(CDN_DIST) for sheet in model.stylesheets):
            patch_inline_stylesheets(model)


def without_load_copy(data: dict[str, Any]) -> dict[str, Any]:
    """A display bundle without holoviews' load MIME type when it repeats the bundle's ``application/javascript``."""
    if LOAD_MIME in data and data[LOAD_MIME] == data.get("application/javascript"):
        return {key: value for key, value in data.items() if key != LOAD_MIME}
    return data


@contextmanager
def scripts_once(once: bool = True) -> Iterator[None]:
    """Inside the block (when ``once``), JavaScript published through ``IPython.display.publish_display_data``
    goes out as ``application/javascript`` only, not a second time under holoviews' load MIME type."""
    if not once:
        yield
        return
    import IPython.display  # panel publishes through it (looked up at each call)

    publish = IPython.display.publish_display_data

    def publish_once(data: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        publish(without_load_copy(data), *args, **kwargs)

    IPython.display.publish_display_data = publish_once
    try:
        yield
    finally:
        IPython.display.publish_display_data = publish


@contextmanager
def canvas_bundle(canvas_only: bool = True) -> Iterator[None]:
    """Inside the block (when ``canvas_only``), panel's notebook set-up inlines BokehJS without its WebGL part
    (``bokeh-gl``, 190 kB of the 3 MB): the plots here draw on a 2D canvas (:mod:`perfkit.plots.canvas`), and a
    plot that asks for WebGL where the part is missing is drawn on the canvas instead."""
    if not canvas_only:
        yield
        return
    import panel.io.notebook  # load_notebook looks its INLINE resources up at each call

    inline = panel.io.notebook.INLINE
    panel.io.notebook.INLINE = inline.clone(components=[c for c in inline.components if c != "bokeh-gl"])
    try:
        yield
    finally:
        panel.io.notebook.INLINE = inline


@contextmanager
def environment(**values: str) -> Iterator[None]:
    """Environment variables set to ``values`` inside the block, restored after."""
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
