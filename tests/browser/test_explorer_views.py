"""The explorer under ``panel serve`` in headless Chromium: a loading message before the first plot, findings rows
whose button selects the ranks they name."""

from __future__ import annotations

import re

import pytest

from perfkit.widgets.explorer_app import LOADING
from tests.browser.helpers import APP_RENDER_TIMEOUT, BIN, free_port, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

#: Whether a model of the page's document shows ``text`` (panel's panes render in shadow roots).
SHOWN_JS = """
(text) => typeof Bokeh !== "undefined" && Bokeh.documents.length > 0 && [...Bokeh.documents[0].all_models].some(
  m => typeof m.text === "string" && m.text.includes(text))
"""


def test_loading_message_then_findings_select_their_ranks(page, serve, artifacts):
    port = free_port()
    serve([str(BIN / "panel"), "serve", "perfkit/widgets/explorer_app.py", f"--port={port}", "--address=127.0.0.1",
           f"--allow-websocket-origin=127.0.0.1:{port}"], port)
    page.goto(f"http://127.0.0.1:{port}/explorer_app", wait_until="commit", timeout=APP_RENDER_TIMEOUT * 1000)
    page.wait_for_function(SHOWN_JS, arg=LOADING, timeout=APP_RENDER_TIMEOUT * 1000)
    assert page.locator(".bk-Canvas").count() == 0, "the loading message came after the plot"
    page.screenshot(path=artifacts / "explorer-loading.png")
    page.locator(".bk-Canvas").first.wait_for(timeout=APP_RENDER_TIMEOUT * 1000)

    page.locator(".bk-tab", has_text=re.compile("^findings$")).click()
    button = page.get_by_role("button", name=re.compile(r"^select ranks? \d")).first
    button.wait_for(timeout=60_000)
    named = button.inner_text().removeprefix("select ").strip()
    page.locator(".card-header").first.click()  # a finding's details open under its lead
    page.screenshot(path=artifacts / "explorer-findings.png", full_page=True)
    button.click()
    status = page.locator("p", has_text=re.compile(r"^selection\b")).first
    line = wait_until(lambda: "finding:" in (text := status.inner_text()) and text, 30, "the finding's ranks selected")
    ranks = named.split(" ", 1)[1]
    assert ranks in line, (named, line)
    page.get_by_text(re.compile(r"^Findings for 48/slt on \d+ ranks? in view")).wait_for(timeout=60_000)
    page.screenshot(path=artifacts / "explorer-findings-selected.png", full_page=True)
    assert page.offsite == []
