"""Explorer round trips in a real browser at 2,048 ranks. Writes ``benchmarks/results/explorer_browser.json``.

``benchmarks/bench_explorer.py`` times the Python side of an interaction. This times what a user
waits for: the explorer runs under panel's server (``python -m perfkit.widgets.explorer_app``) on
the bundled 2,048-rank runs, headless Debian Chromium shows it, and each interaction is started in
the page (a widget's value set as a click would) and timed until the new plot data has arrived and
two animation frames have been drawn.

The placement tab is timed on the bundled 768-rank runs (the 2,048-rank ones carry no traffic):
each change of a control (strategy, nodes, sockets, leaf switch size) is timed in the page until
the tab shows the new placement (cost table, what-if, heatmaps) and its progress bar is gone. The
first pass over a control's new values maps (``cold``: Scotch in its worker process, cost, what-if,
drawing); later passes find the placement in the tab's cache (``warm``: everything but the map).
``map_s`` is the server's own mapping time of the cold steps, as the tab reports it. The per-rank
view's metric change on the same server is timed as the reference (``warm_over_reference``).

Run: ``python benchmarks/bench_explorer_browser.py [--repeats 7] [--only per_rank|placement]``
(needs /usr/bin/chromium); ``--only`` keeps the other section's last results.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from playwright.sync_api import sync_playwright  # noqa: E402

from tests.browser.helpers import BIN, free_port, start_server, stop_server  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "explorer_browser.json"
RUNS = [ROOT / "data" / "synthetic" / "2048" / f"{mode}.mpinside" for mode in ("slt", "basic")]
PLACEMENT_RUNS = [ROOT / "data" / "synthetic" / "768" / f"{mode}.mpinside" for mode in ("slt", "basic")]
CHROMIUM = "/usr/bin/chromium"
TARGET_MS = 200
PLACEMENT_TARGET_MS = 300

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


#: Set a widget model's value in the page and resolve with the milliseconds until some model's text
#: holds ``marker`` and none says "Mapping with" (the tab's progress line), plus two drawn frames;
#: also returns the text holding the marker.
PLACEMENT_JS = """
([kind, title, attribute, value, marker]) => new Promise((resolve, reject) => {
  const doc = Bokeh.documents[0];
  const named = (m) => m.title === title || (m.labels || []).includes(title);
  const widget = [...doc.all_models].find(m => m.type.endsWith(kind) && named(m));
  if (!widget) { reject(new Error(`no ${kind} titled or offering ${title}`)); return; }
  const texts = () => [...doc.all_models].filter(m => typeof m.text === "string").map(m => m.text);
  const start = performance.now();
  widget[attribute] = value;
  const poll = () => {
    const all = texts();
    const hit = all.find(t => t.includes(marker));
    if (hit && !all.some(t => t.includes("Mapping with"))) {
      requestAnimationFrame(() => requestAnimationFrame(() => resolve([performance.now() - start, hit])));
      return;
    }
    if (performance.now() - start > 60000) { reject(new Error(`no ${marker} within 60 s`)); return; }
    requestAnimationFrame(poll);
  };
  requestAnimationFrame(poll);
})
"""


def serve_explorer(runs: list[Path], log: str):
    """Start the explorer on ``runs``; returns the server process and its port."""
    port = free_port()
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    command = [str(BIN / "python"), "-m", "perfkit.widgets.explorer_app", *map(str, runs), f"--port={port}"]
    return start_server(command, port, env, ROOT / "benchmarks" / "results" / log), port


def placement(repeats: int) -> dict:
    """Round trips of the placement tab's controls on a 768-rank run (module docstring)."""
    server, port = serve_explorer(PLACEMENT_RUNS, "explorer_placement.log.tmp")
    nodes, cores, ranks = 32, 24, 768
    labels = ("block", "round-robin", "random", "Scotch", "Scotch node-level")
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"http://127.0.0.1:{port}/", timeout=120_000)
            page.locator(".bk-Canvas").first.wait_for(timeout=120_000)
            page.locator(".bk-tab", has_text=re.compile("^placement$")).click()
            page.locator("text=inter-node bytes >> visible=true").first.wait_for(timeout=120_000)

            def marker(n: int = nodes, strategy: str = "Scotch", sockets: int = 2, switch: int = 0) -> str:
                switches = f"{switch} nodes per switch" if switch else "one switch"
                return (f"{ranks} ranks on {n} nodes x {cores} cores ({sockets} socket{'s' * (sockets > 1)}, "
                        f"{switches}), {strategy};")

            # (widget kind, title, attribute, value, marker) per step; each step differs from the one before
            steps = {
                "strategy_ms": [("RadioButtonGroup", "Scotch", "active", i, marker(strategy=labels[i]))
                                for i in (0, 1, 4, 3)],
                "nodes_ms": [("Spinner", "nodes", "value", n, marker(n)) for n in (48, 64, nodes)],
                "sockets_ms": [("Spinner", "sockets per node", "value", k, marker(sockets=k)) for k in (1, 4, 2)],
                "switch_ms": [("Spinner", "nodes per switch", "value", k, marker(switch=k)) for k in (8, 4, 0)],
            }  # every cycle ends on the starting state: 32 nodes x 24 cores, 2 sockets, one switch, Scotch
            result: dict = {"ranks": ranks, "nodes": nodes, "cores": cores, "target_ms": PLACEMENT_TARGET_MS,
                            "repeats": repeats}
            for name, cycle in steps.items():
                cold, warm, map_s = [], [], []
                for i in range(len(cycle) * (1 + -(-repeats // len(cycle)))):
                    ms, text = page.evaluate(PLACEMENT_JS, list(cycle[i % len(cycle)]))
                    if i < len(cycle) - 1:  # not seen yet (the last step returns to the starting state)
                        cold.append(ms)
                        found = re.search(r"placed in ([0-9.e+-]+) s", text)
                        map_s.append(float(found[1]) if found else float("nan"))
                    else:
                        warm.append(ms)
                result[name] = {"cold_ms": statistics.median(cold), "warm_ms": statistics.median(warm),
                                "cold_minus_map_ms": statistics.median(c - 1e3 * m for c, m in zip(cold, map_s)),
                                "map_s": statistics.median(map_s)}
            # reference on the same server and load: the per-rank view's metric change (target 200 ms at 2,048 ranks)
            reference = [page.evaluate(ROUND_TRIP_JS, ["Select", "metric", "value", ("calls", "time")[i % 2]])
                         for i in range(2 * -(-repeats // 2))]
            result["reference_metric_change_ms"] = statistics.median(reference)
            for name in steps:
                result[name]["warm_over_reference"] = result[name]["warm_ms"] / result["reference_metric_change_ms"]
            browser.close()
    finally:
        stop_server(server)
    result["within_target"] = all(result[k]["warm_ms"] < PLACEMENT_TARGET_MS
                                  and result[k]["cold_minus_map_ms"] < PLACEMENT_TARGET_MS for k in steps)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--only", choices=("per_rank", "placement"))
    args = parser.parse_args()
    result = json.loads(RESULTS.read_text()) if args.only and RESULTS.exists() else {}
    load = os.getloadavg()[0]
    if args.only != "placement":
        result.update(per_rank(args.repeats))
        result["load_average_1min"] = [load, os.getloadavg()[0]]  # at start and end: the machine is shared
    if args.only != "per_rank":
        load = os.getloadavg()[0]
        result["placement"] = placement(args.repeats)
        result["placement"]["load_average_1min"] = [load, os.getloadavg()[0]]
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


def per_rank(repeats: int) -> dict:
    """Round trips of the shared controls and the per-rank view at 2,048 ranks."""
    server, port = serve_explorer(RUNS, "explorer_browser.log.tmp")
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
    return result


if __name__ == "__main__":
    main()
