"""notebooks/00_tour.ipynb in JupyterLab, in headless Chromium: runs top to bottom, its rank explorer answers.

The server gets private settings (no news check, no autosave, every cell in the page) and the
notebook file is checked, and restored if need be, so the run never leaves outputs in the repository.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from pathlib import Path

import pytest

from tests.browser.helpers import BIN, REPO, drag_upper_handle, free_port, wait_for_new_picture, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]

NOTEBOOK = "notebooks/00_tour.ipynb"
#: Seconds for the kernel to start and connect.
KERNEL_TIMEOUT = 60
#: Seconds for the kernel to run every cell of the tour.
RUN_TIMEOUT = 150
SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
}
#: Execution prompts of the code cells whose input is shown (a hidden input's prompt stays empty).
PROMPTS_JS = ("() => Array.from(document.querySelectorAll('.jp-CodeCell'))"
              ".filter(c => !c.querySelector('.jp-InputPlaceholder'))"
              ".map(c => c.querySelector('.jp-InputPrompt').textContent.trim())")
IDLE = re.compile(r"Python 3 \(ipykernel\) \| Idle")
#: The last rank the per-rank view's bands reach (their outline's source, named OUTLINE, holds ``x``) in the page.
LAST_BAND_RANK_JS = """() => Math.max(...Bokeh.documents.flatMap(doc => [...doc.all_models]).filter(
  m => m.type === "ColumnDataSource" && m.name === "rank outline").flatMap(m => Array.from(m.data.x)))"""


@pytest.fixture
def untouched_notebook() -> bytes:
    """The tour's bytes; put back (and the test failed) if the browser session changed them."""
    path = REPO / NOTEBOOK
    checkpoints = path.parent / ".ipynb_checkpoints"
    had_checkpoints = checkpoints.exists()
    original = path.read_bytes()
    yield original
    if not had_checkpoints and checkpoints.exists():
        (checkpoints / f"{path.stem}-checkpoint.ipynb").unlink(missing_ok=True)
        if not any(checkpoints.iterdir()):
            checkpoints.rmdir()
    if path.read_bytes() != original:
        path.write_bytes(original)
        pytest.fail(f"{NOTEBOOK} was modified by JupyterLab; restored")


def lab_settings(tmp_path: Path) -> Path:
    root = tmp_path / "lab-settings"
    for name, values in SETTINGS.items():
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(values))
    return root


def all_cells_ran(page) -> bool:
    """Every shown cell has its execution count and the kernel is idle (so hidden cells after them ran too)."""
    prompts = page.evaluate(PROMPTS_JS)
    ran = bool(prompts) and all(re.fullmatch(r"\[\d+\]:", p) for p in prompts)
    return ran and page.locator(".jp-StatusBar-Widget", has_text=IDLE).count() > 0


def test_tour_in_jupyterlab(page, serve, artifacts, tmp_path, untouched_notebook):
    port, token = free_port(), secrets.token_hex(16)
    workspaces = tmp_path / "workspaces"
    workspaces.mkdir()
    command = [str(BIN / "jupyter"), "lab", "--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
               "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={REPO}",
               f"--LabApp.user_settings_dir={lab_settings(tmp_path)}", f"--LabApp.workspaces_dir={workspaces}"]
    serve(command + (["--allow-root"] if os.geteuid() == 0 else []), port)
    page.goto(f"http://127.0.0.1:{port}/lab/tree/{NOTEBOOK}?reset&token={token}", timeout=60_000)
    page.locator(".jp-Notebook .jp-CodeCell").first.wait_for(timeout=60_000)
    # cells sent before the kernel is connected are dropped: wait for it
    page.locator(".jp-StatusBar-Widget", has_text=IDLE).first.wait_for(
        timeout=KERNEL_TIMEOUT * 1000)

    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()
    wait_until(lambda: all_cells_ran(page), RUN_TIMEOUT, "every cell of the tour to run", interval=1)
    page.screenshot(path=artifacts / "jupyterlab-tour.png")
    assert page.locator('[data-mime-type="application/vnd.jupyter.error"]').count() == 0, "a cell raised"

    explorer = page.locator(".jp-OutputArea-output").filter(has=page.locator(".noUi-handle")).first
    explorer.scroll_into_view_if_needed()
    plot = explorer.locator(".bk-Canvas").first
    plot.wait_for(timeout=30_000)
    title = explorer.locator(".bk-slider-title").filter(has_text="ranks")
    assert re.search(r"ranks: 0 \.\. 383", title.inner_text()), title.inner_text()
    before = wait_until(plot.screenshot, 10, "a picture of the rank explorer")

    drag_upper_handle(page, explorer, -500)
    wait_until(lambda: not title.inner_text().endswith("383"), 10, "the slider to move")
    upper = int(re.search(r"\.\. (\d+)", title.inner_text()).group(1))
    # the bands' data, not only a changed picture (the moving handle alone changes that); at most the upper rank
    # the title shows: the value released is the one plotted, and the title may show a later one (206 after 181)
    wait_until(lambda: page.evaluate(LAST_BAND_RANK_JS) <= min(upper, 382), 30, "the bands to follow the drag")
    wait_for_new_picture(plot, before, 30, "the plot to follow the rank range")
    explorer.screenshot(path=artifacts / "jupyterlab-rank-explorer.png")
    assert page.offsite == [], f"the notebook asked the internet for {page.offsite}"
