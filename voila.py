"""Voila's configuration when started from this directory (``voila notebooks/explorer.ipynb``, or JupyterLab's and
Binder's ``voila/render/...``): the page template ``perfkit`` (``share/jupyter/voila/templates/perfkit``), Voila's
lab page with no stylesheet linked from another machine. Its directory is added to the Jupyter data path, where
Voila looks for templates, so it is found in a clean clone with no install step."""

import os

data = os.path.join(os.path.dirname(os.path.abspath(__file__)), "share", "jupyter")
path = [entry for entry in os.environ.get("JUPYTER_PATH", "").split(os.pathsep) if entry]
if data not in path:
    os.environ["JUPYTER_PATH"] = os.pathsep.join([data, *path])

c.VoilaConfiguration.template = "perfkit"  # noqa: F821 (traitlets gives a configuration file its `c`)
