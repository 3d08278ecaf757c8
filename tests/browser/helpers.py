"""Helpers of the browser tests: servers on free loopback ports, polling, bokeh widgets in the page."""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]
#: The virtual environment's scripts (jupyter, voila).
BIN = Path(sys.executable).parent
#: Seconds a server may take to accept connections.
START_TIMEOUT = 60
#: Seconds for ``panel serve`` to draw the explorer app's first plot.
APP_RENDER_TIMEOUT = 120


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def open_explorer_app(page, serve):
    """Serve ``perfkit/widgets/explorer_app.py`` under ``panel serve`` (through the ``serve`` fixture), open it in
    ``page`` and wait for its first plot; returns that plot's locator."""
    port = free_port()
    serve([str(BIN / "panel"), "serve", "perfkit/widgets/explorer_app.py", f"--port={port}", "--address=127.0.0.1",
           f"--allow-websocket-origin=127.0.0.1:{port}"], port)
    page.goto(f"http://127.0.0.1:{port}/explorer_app", timeout=APP_RENDER_TIMEOUT * 1000)
    plot = page.locator(".bk-Canvas").first
    plot.wait_for(timeout=APP_RENDER_TIMEOUT * 1000)
    return plot


def _die_with_parent() -> None:
    """In the server's process before it runs: SIGTERM when the test process dies (a killed pytest left a
    panel server running under PID 1 for an hour)."""
    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG


def start_server(command: list[str], port: int, env: dict[str, str], log: Path) -> subprocess.Popen:
    """Start ``command`` in its own process group and wait until ``port`` accepts connections."""
    with log.open("wb") as out:
        proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=_die_with_parent)
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            stop_server(proc)
            raise RuntimeError(f"{command[0]} exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc
        except OSError:
            time.sleep(0.3)
    stop_server(proc)
    raise TimeoutError(f"{command[0]} did not listen on port {port} within {START_TIMEOUT} s:\n"
                       f"{log.read_text()[-3000:]}")


def stop_server(proc: subprocess.Popen) -> None:
    """Terminate the server, its process group and any process it started (kernels), then kill what is left."""
    try:
        family = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        family = []
    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        for child in family:
            try:
                child.send_signal(sig)
            except psutil.NoSuchProcess:
                pass
        _, alive = psutil.wait_procs(family, timeout=wait)
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        if not alive:
            return


def wait_until(condition, timeout: float, what: str, interval: float = 0.25):
    """Poll ``condition()`` until it returns something truthy; fail with ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def drag_upper_handle(page, scope, dx: float) -> None:
    """Drag the upper handle of the first bokeh range slider inside ``scope`` by ``dx`` pixels."""
    handle = scope.locator(".noUi-handle-upper").first
    handle.scroll_into_view_if_needed()
    box = handle.bounding_box()
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    page.mouse.move(x, y)
    page.mouse.down()
    page.mouse.move(x + dx, y, steps=8)
    page.mouse.up()


def wait_for_new_picture(locator, before: bytes, timeout: float, what: str) -> bytes:
    """Poll screenshots of ``locator`` until they differ from ``before``; return the new one. While the plot is
    redrawn its canvas may be hidden for a moment (playwright then refuses the screenshot): that is "not yet"."""
    from playwright.sync_api import Error

    def new_picture() -> bytes | None:
        try:
            shot = locator.screenshot(timeout=5_000)
        except Error:
            return None
        return shot if shot != before else None

    return wait_until(new_picture, timeout, what, interval=0.5)
