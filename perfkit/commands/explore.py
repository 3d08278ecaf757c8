"""``perfkit explore FILES...``: the explorer dashboard of those runs (profiles or stores), served on this machine.

The runs are read once (``perfkit.widgets.explorer_app``); every browser session gets its own
dashboard. Panel's server hands out its JavaScript itself: no internet access is needed. The command
runs until interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

Runner = Any


def configure_explore(parser: argparse.ArgumentParser) -> Runner:
    parser.add_argument("paths", nargs="+", metavar="FILES",
                        help="profiles, glob patterns or stores perfkit convert wrote")
    from perfkit.cli import address, port

    parser.add_argument("--port", type=port, default=5006, help="the port to serve on, 1..65535 (default 5006)")
    parser.add_argument("--address", type=address, default="127.0.0.1",
                        help="the address to listen on: an IP address or a host name (default 127.0.0.1)")
    parser.add_argument("--show", action="store_true", help="open a browser tab")
    parser.add_argument("--link-rate", default="", metavar="RATE",
                        help="each node's link rate for the placement tab's prediction, e.g. 200mbit")
    parser.epilog = "exit status: 0 stopped, 1 a file could not be read, 2 usage error"
    return run_explore


def run_explore(args: argparse.Namespace) -> int:
    from perfkit.io.open import expand_paths
    from perfkit.text import plural
    from perfkit.widgets import explorer_app

    paths = tuple(str(path) for pattern in args.paths for path in expand_paths(pattern))  # a missing file fails here
    runs = explorer_app.load(paths)
    print(f"perfkit explore: {plural(runs.sizes['run'], 'run')} at http://{args.address}:{args.port}/ (Ctrl-C stops)",
          file=sys.stderr, flush=True)
    argv = [*paths, "--port", str(args.port), "--address", args.address, "--link-rate", args.link_rate]
    explorer_app.main([*argv, "--show"] if args.show else argv)
    return 0
