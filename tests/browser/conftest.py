"""Real-browser fixtures: Debian's Chromium driven by Playwright, servers on free loopback ports.

No browser is ever downloaded: the tests skip, saying why, when ``/usr/bin/chromium`` is absent.
Every server runs in its own process group with private Jupyter directories; the fixtures stop it
(and the kernels it started) when the test ends, pass or fail. Screenshots go to ``test-artifacts/``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest

from tests.browser.helpers import BIN, REPO, start_server, stop_server

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
ARTIFACTS = REPO / "test-artifacts"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "browser: drives a real Chromium against a local server")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Keep each phase's report on the test item, so that fixtures can tell a failed test."""
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    """Headless Debian Chromium (session-wide)."""
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} not found: install Debian's chromium package (apt install chromium) "
                    "to run the browser tests")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, serve, request: pytest.FixtureRequest, artifacts: Path) -> Iterator[object]:
    """A fresh page; requests leaving the machine are refused and listed in ``page.offsite``."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    offsite: list[str] = []

    def route(request_route) -> None:
        url = request_route.request.url
        if urlparse(url).hostname in ("127.0.0.1", "localhost") or not url.startswith("http"):
            request_route.continue_()
        else:
            offsite.append(url)
            request_route.abort()

    context.route("**/*", route)
    new_page = context.new_page()
    new_page.offsite = offsite
    yield new_page
    report = getattr(request.node, "report_call", None)
    if report is not None and report.failed:
        new_page.screenshot(path=artifacts / f"{request.node.name}-failed.png", full_page=True)
    context.close()


@pytest.fixture
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture
def serve(tmp_path: Path, jupyter_env: dict[str, str], artifacts: Path) -> Iterator[object]:
    """``serve(command, port)`` starts a server; every one started is stopped when the test ends."""
    started: list[tuple[subprocess.Popen, Path]] = []

    def start(command: list[str], port: int) -> subprocess.Popen:
        log = tmp_path / f"{Path(command[0]).name}-{port}.log"
        proc = start_server(command, port, jupyter_env, log)
        started.append((proc, log))
        return proc

    yield start
    for proc, log in started:
        stop_server(proc)
        shutil.copy(log, artifacts / log.name)


@pytest.fixture
def jupyter_env(tmp_path: Path) -> dict[str, str]:
    """Environment with private Jupyter/IPython directories under ``tmp_path``."""
    env = dict(os.environ)
    for name in ("JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR", "IPYTHONDIR"):
        path = tmp_path / name.lower()
        path.mkdir()
        env[name] = str(path)
    env.pop("JUPYTER_PATH", None)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


