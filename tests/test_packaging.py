"""The pip (pyproject.toml) and conda (environment.yml, binder/) dependency lists agree."""

from __future__ import annotations

import json
import re

import pytest
import tomllib
import yaml

from tests.helpers import ROOT

# pip name (extras stripped) -> conda-forge names that provide it
CONDA_NAMES = {"h5netcdf": ("h5netcdf", "h5py"), "dask": ("dask",)}
PINNED_TOGETHER = ("holoviews", "bokeh", "panel")


def _split(spec: str) -> tuple[str, str]:
    match = re.match(r"^([A-Za-z0-9_.\-]+)(\[[^\]]*\])?\s*(.*)$", spec.strip())
    return match.group(1).lower().replace("_", "-"), match.group(3).replace("==", "=").strip()


def pip_requirements() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = project["dependencies"] + project["optional-dependencies"]["notebooks"]
    return dict(_split(s) for s in specs)


def conda_requirements(path) -> dict[str, str]:
    deps = yaml.safe_load(path.read_text())["dependencies"]
    out: dict[str, str] = {}
    for dep in deps:
        if isinstance(dep, dict):
            out.update(_split(s) for s in dep["pip"] if not s.startswith("-"))
        elif not dep.startswith(("python=", "pip")):
            out.update([_split(dep)])
    return out


@pytest.mark.parametrize("env", ["environment.yml", "binder/environment.yml"])
def test_conda_and_pip_lists_agree(env):
    pip = pip_requirements()
    conda = conda_requirements(ROOT / env)
    expected: dict[str, str] = {}
    for name, version in pip.items():
        for conda_name in CONDA_NAMES.get(name, (name,)):
            expected[conda_name] = version if conda_name == name else ""
    assert conda == expected


def test_plotting_stack_is_pinned_together():
    pip = pip_requirements()
    for name in PINNED_TOGETHER:
        assert pip[name].startswith("="), f"{name} must be pinned to an exact version"


def test_binder_post_build_installs_the_package():
    text = (ROOT / "binder" / "postBuild").read_text()
    assert "set -e" in text and "pip install" in text


def test_wheel_installs_every_file_of_the_voila_template():
    """A non-editable install puts the page template voila.json names under <prefix>/share/jupyter."""
    data_files = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["data-files"]
    template = ROOT / "share" / "jupyter" / "voila" / "templates" / "perfkit"
    on_disk = sorted(str(p.relative_to(ROOT)) for p in template.rglob("*") if p.is_file())
    assert data_files == {str(template.relative_to(ROOT)): on_disk}


def test_lab_asks_no_other_machine_for_news_or_updates():
    """JupyterLab's own defaults in ./dev's and Binder's environments: no news feed, no update check (requests to
    another machine, and a pop-up over the tour asking about them)."""
    overrides = ROOT / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
    notification = json.loads(overrides.read_text())["@jupyterlab/apputils-extension:notification"]
    assert notification == {"fetchNews": "false", "checkForUpdates": False}
    relative = str(overrides.relative_to(ROOT))
    assert relative in (ROOT / "dev").read_text() and relative in (ROOT / "binder" / "postBuild").read_text()
