"""Notebook set-up for offline rendering: no stylesheet of a displayed plot points at a CDN."""

from __future__ import annotations

import re

import holoviews as hv
import panel as pn
import pytest
from bokeh.document import Document
from bokeh.models import ImportedStyleSheet, InlineStyleSheet
from panel.io.notebook import LOAD_MIME
from panel.io.resources import CDN_DIST
from panel.viewable import Viewable

from perfkit.plots.offline import (
    canvas_bundle,
    inline_cdn_stylesheets,
    param_docstrings,
    setup_notebook,
    without_load_copy,
)


def linked_sheets(root) -> set[str]:
    return {sheet.url for model in root.references() for sheet in getattr(model, "stylesheets", None) or []
            if isinstance(sheet, ImportedStyleSheet) and sheet.url.startswith(CDN_DIST)}


def render(obj):
    """Render as holoviews does for a notebook cell: a panel layout, no stylesheet patching of its own."""
    return pn.Column(obj)._render_model(Document(), pn.state._comm_manager.get_server_comm())


@pytest.fixture
def inline_mode():
    before = pn.config.inline
    setup_notebook()
    yield
    pn.config.inline = before


def test_setup_installs_the_hook_once(inline_mode):
    setup_notebook()
    assert Viewable._preprocessing_hooks.count(inline_cdn_stylesheets) == 1
    assert pn.config.inline


def test_stylesheets_are_inlined_in_inline_mode(inline_mode):
    root = render(hv.Curve([1, 3, 2]))
    assert linked_sheets(root) == set()
    assert any(isinstance(sheet, InlineStyleSheet) for model in root.references()
               for sheet in getattr(model, "stylesheets", None) or [])


def test_a_view_built_after_the_page_loaded_gets_inline_stylesheets_as_it_is_made(inline_mode):
    """A tab's first visit in Voila: its models reach the page as panel makes them (ipywidgets comms), so they must
    not link panel's CDN even before any hook runs; each sheet is one model per document."""
    doc = Document()
    root = pn.Column().get_root(doc)
    markdown = pn.pane.Markdown("findings")._get_model(doc, root)
    select = pn.widgets.Select(options=["a", "b"])._get_model(doc, root)
    assert linked_sheets(markdown) == set() and linked_sheets(select) == set()
    inline = {id(sheet) for sheet in markdown.stylesheets if isinstance(sheet, InlineStyleSheet)}
    assert len(inline) >= 3 and inline & {id(sheet) for sheet in select.stylesheets}  # loading.css, theme: shared


def test_panels_server_keeps_its_links(inline_mode):
    """Served by panel (its documents carry ``dist_url``), the links point at the server itself: left alone."""
    doc = Document()
    doc._template_variables["dist_url"] = "/static/extensions/panel/"
    model = pn.pane.Markdown("x")._get_model(doc, pn.Column().get_root(doc))
    assert any(isinstance(sheet, ImportedStyleSheet) for sheet in model.stylesheets)


def test_links_are_kept_outside_inline_mode(inline_mode):
    pn.config.inline = False
    assert linked_sheets(render(hv.Curve([1, 3, 2])))  # panel serve hands these out itself


def test_logos_come_without_a_glyph_fonts_lack(monkeypatch):
    """In a kernel, the set-up cell shows the logos and no U+24D8 (drawn as a box without a font for it)."""
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient

    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell("from perfkit.plots.offline import setup_notebook\nsetup_notebook()"),
                      nbformat.v4.new_code_cell("import os\nprint(os.environ.get('HV_HIDE_TOOLTIP_LOGO'))")]
    monkeypatch.setenv("CI", "0")  # holoviews hides the sign itself on CI
    monkeypatch.delenv("HV_HIDE_TOOLTIP_LOGO", raising=False)
    NotebookClient(notebook, timeout=120, kernel_name="python3").execute()
    html = "".join(o.get("data", {}).get("text/html", "") for o in notebook.cells[0].outputs)
    assert "logo-block" in html and "\u24d8" not in html
    assert notebook.cells[1].outputs[0]["text"] == "None\n"  # the environment is left as it was


def test_the_extension_loads_in_a_kernel_without_importing_nbformat():
    """nbformat imports jsonschema's grammar checkers (2.3 s); the set-up does without it, and it imports after."""
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient

    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell("import sys\nfrom perfkit.plots.offline import setup_notebook\n"
                                                "setup_notebook()\nprint('nbformat' in sys.modules)"),
                      nbformat.v4.new_code_cell("import nbformat\nprint(nbformat.v4.new_notebook().nbformat)")]
    NotebookClient(notebook, timeout=120, kernel_name="python3").execute()
    printed = [o["text"] for cell in notebook.cells for o in cell.outputs if o.get("name") == "stdout"]
    assert printed == ["False\n", "4\n"]
    assert "logo-block" in "".join(o.get("data", {}).get("text/html", "") for o in notebook.cells[0].outputs)


def run_setup(monkeypatch, voila: bool) -> list[dict]:
    """Outputs of a kernel's set-up cell and, last, what it prints: whether panel's Select is described in its
    docstring, param's setting after the set-up, whether bokeh's Plot has its constructor's signature, and the
    name of bokeh's hook for new model classes after the set-up."""
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient

    if voila:
        monkeypatch.setenv("VOILA_KERNEL_ID", "kernel-of-a-test")
    else:
        monkeypatch.delenv("VOILA_KERNEL_ID", raising=False)
    notebook = nbformat.v4.new_notebook()
    check = ("import panel as pn, param, bokeh.models\nfrom param import parameterized\nfrom bokeh.model import Model\n"
             "print('Parameter docstrings' in pn.widgets.Select.__doc__, parameterized.docstring_describe_params, "
             "hasattr(bokeh.models.Plot.__init__, '__signature__'), "
             "Model.__dict__['__init_subclass__'].__func__.__qualname__)")
    notebook.cells = [nbformat.v4.new_code_cell("import perfkit\nperfkit.setup_notebook(comms='ipywidgets')"),
                      nbformat.v4.new_code_cell(check)]
    NotebookClient(notebook, timeout=120, kernel_name="python3").execute()
    return [*notebook.cells[0].outputs, notebook.cells[1].outputs[0]]


def bundles(script: str) -> list[str]:
    """The BokehJS bundles a load script inlines, by the markers panel puts around each."""
    return re.findall(r"/\* BEGIN ([\w.-]+) \*/", script)


def test_a_voila_kernel_gets_each_script_once_no_webgl_part_parameter_tables_or_signatures(monkeypatch):
    *outputs, printed = run_setup(monkeypatch, voila=True)
    scripts = [o["data"] for o in outputs if "application/javascript" in o.get("data", {})]
    assert len(scripts) == 4 and sum(len(s["application/javascript"]) for s in scripts) > 2_000_000
    assert not any(LOAD_MIME in o.get("data", {}) for o in outputs)
    inlined = [b for s in scripts for b in bundles(s["application/javascript"])]
    assert "bokeh.min.js" in inlined and "bokeh-widgets.min.js" in inlined and "bokeh-gl.min.js" not in inlined
    # panel's classes undescribed, bokeh's without signatures; param's default and bokeh's hook back for later classes
    assert printed["text"] == "False True False Model.__init_subclass__\n"


def test_a_notebook_kernel_keeps_both_script_types_webgl_parameter_tables_and_signatures(monkeypatch):
    *outputs, printed = run_setup(monkeypatch, voila=False)
    scripts = [o["data"] for o in outputs if "application/javascript" in o.get("data", {})]
    assert len(scripts) == 4 and all(s[LOAD_MIME] == s["application/javascript"] for s in scripts)
    assert "bokeh-gl.min.js" in [b for s in scripts for b in bundles(s["application/javascript"])]
    assert printed["text"] == "True True True Model.__init_subclass__\n"


def test_the_canvas_bundle_restores_panels_resources():
    import panel.io.notebook

    before = panel.io.notebook.INLINE
    with canvas_bundle():
        assert "bokeh-gl" not in panel.io.notebook.INLINE.components and "bokeh-gl" in before.components
    assert panel.io.notebook.INLINE is before


def test_only_a_repeated_load_script_is_dropped():
    assert without_load_copy({"application/javascript": "a", LOAD_MIME: "a"}) == {"application/javascript": "a"}
    assert without_load_copy({"application/javascript": "a", LOAD_MIME: "b"}) == {"application/javascript": "a",
                                                                                  LOAD_MIME: "b"}
    assert without_load_copy({LOAD_MIME: "a"}) == {LOAD_MIME: "a"}


def test_param_docstrings_restores_the_setting():
    import param

    before = param.parameterized.docstring_describe_params
    with param_docstrings(False):
        assert param.parameterized.docstring_describe_params is False
    assert param.parameterized.docstring_describe_params == before
