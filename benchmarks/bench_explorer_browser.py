"""Explorer round trips in a real browser at 2,048 ranks. Writes ``benchmarks/results/explorer_browser.json``.

``benchmarks/bench_explorer.py`` times the Python side of an interaction. This times what a user
waits for: the explorer runs under panel's server (``python -m perfkit.widgets.explorer_app``) on
the bundled 2,048-rank runs, headless Debian Chromium shows it, and each interaction is started in
the page (a widget's value set as a click would) and timed until the new plot data has arrived and
two animation frames have been drawn.

Run: ``python benchmarks/bench_explorer_browser.py [--repeats 7]`` (needs /usr/bin/chromium).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from playwright.sync_api import sync_playwright  # noqa: E402

from tests.browser.helpers import BIN, free_port, start_server, stop_server  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "explorer_browser.json"
RUNS = [ROOT / "data" / "synthetic" / "2048" / f"{mode}.mpinside" for mode in ("slt", "basic")]
CHROMIUM = "/usr/bin/chromium"
TARGET_MS = 200

#: Set a widget model's value in the page and resolve with the milliseconds until a
#: ColumnDataSource changed and two frames were drawn.
ROUND_TRIP_JS = """
([kind, title, attribute, value]) => new Promise((resolve, reject) => {
  const doc = Bokeh.documents[0];
  const widget = [...doc.all_models].find(m => m.type.endsWith(kind) && (title === null || m.title === title));
  if (!widget) { reject(new Error(`no ${kind} titled ${title}`)); return; }
  const start = performance.now();
  const listener = (event) => {
    if (event.model && event.model.type === "ColumnDataSource") {
      doc.remove_on_change(listener);
      requestAnimationFrame(() => requestAnimationFrame(() => resolve(performance.now() - start)));
    }
  };
  doc.on_change(listener);
  widget[attribute] = value;
  setTimeout(() => reject(new Error("no plot update within 20 s")), 20000);
})
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    repeats = parser.parse_args().repeats
    port = free_port()
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    command = [str(BIN / "python"), "-m", "perfkit.widgets.explorer_app", *map(str, RUNS), f"--port={port}"]
    server = start_server(command, port, env, ROOT / "benchmarks" / "results" / "explorer_browser.log.tmp")
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"http://127.0.0.1:{port}/", timeout=120_000)
            page.locator(".bk-Canvas").first.wait_for(timeout=120_000)
            steps = {
                "rank_slider_ms": [("RangeSlider", "ranks", "value", v) for v in ([0, 1023], [512, 2047], [100, 1900])],
                "run_change_ms": [("Select", "run", "value", v) for v in ("basic", "slt")],
                "grouping_change_ms": [("RadioButtonGroup", None, "active", v) for v in (1, 2, 0)],
                "metric_change_ms": [("Select", "metric", "value", v) for v in ("calls", "time")],
            }
            result = {"ranks": 2048, "target_ms": TARGET_MS, "repeats": repeats}
            for name, cycle in steps.items():
                times = [page.evaluate(ROUND_TRIP_JS, list(cycle[i % len(cycle)])) for i in range(repeats)]
                result[name] = statistics.median(times)
            browser.close()
    finally:
        stop_server(server)
    result["within_target"] = all(result[k] < TARGET_MS for k in steps)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
