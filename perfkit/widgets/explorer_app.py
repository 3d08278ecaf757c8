"""Serve the perfkit explorer in a browser with panel's server.

``python -m perfkit.widgets.explorer_app [FILES_OR_GLOBS ...] [--link-rate 200mbit] [--port 5006]``
reads the profiles once (stores ``perfkit convert`` wrote, ``.zarr`` or ``.nc``, are opened lazily) and
serves one dashboard per browser session; without files it serves the
bundled synthetic scaling series. ``panel serve perfkit/widgets/explorer_app.py`` serves the bundled
series too, or ``--args FILES_OR_GLOBS ... [--link-rate RATE]``. A closed loop's folder
(``before.mpinside`` and ``<strategy>.mpinside`` re-runs) shows predicted against measured in the
placement tab; ``--link-rate`` is each node's link rate the prediction assumes (default: unknown).
Panel's server hands out its JavaScript itself, so no internet access is needed. The page shows a
loading message with a spinner at once (:func:`app`) and the explorer in its place when it is built.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import panel as pn

if TYPE_CHECKING:
    import xarray as xr

#: The bundled synthetic series of a source checkout.
BUNDLED = str(Path(__file__).resolve().parents[2] / "data" / "synthetic" / "*" / "slt.mpinside")


@pn.cache
def load(paths: tuple[str, ...] = (BUNDLED,)) -> xr.Dataset:
    """The runs in ``paths`` (profiles, glob patterns, or stores perfkit wrote, opened lazily), read once per
    server process."""
    import perfkit
    from perfkit.io.open import expand_paths
    from perfkit.storage import STORE_SUFFIXES

    found = [path for pattern in paths for path in expand_paths(pattern)]
    parts = [perfkit.load(path, chunks={}) for path in found if path.suffix in STORE_SUFFIXES]
    files = [path for path in found if path.suffix not in STORE_SUFFIXES]
    if files or not parts:
        parts.append(perfkit.open_runs(files))
    return parts[0] if len(parts) == 1 else perfkit.combine_runs(parts)


#: What the page says while the profiles are read and the explorer is built.
LOADING = "Reading the profiles and building the explorer..."


def app(paths: tuple[str, ...] = (BUNDLED,), link_rate: str = "") -> pn.Column:
    """The served page: a spinner and :data:`LOADING` at once; once the page is shown in the browser
    (``pn.state.onload``), the explorer of the runs in ``paths`` replaces them."""
    page = pn.Column(pn.Row(pn.indicators.LoadingSpinner(value=True, size=32, name=""), pn.pane.Markdown(LOADING)),
                     sizing_mode="stretch_width")

    def build() -> None:
        from perfkit.widgets.explorer import explore  # imported here: the page with its message comes first

        page.objects = [explore(load(paths), link_rate=link_rate)]

    pn.state.onload(build)
    return page


def parser(serving: bool = False) -> argparse.ArgumentParser:
    """The options: files and link rate; host and port unless under ``panel serve`` (``serving``)."""
    parser = argparse.ArgumentParser(prog="python -m perfkit.widgets.explorer_app", description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="*",
                        help="profile files, glob patterns or stores (default: bundled synthetic series)")
    parser.add_argument("--link-rate", default="", help="each node's link rate for the placement tab's prediction, "
                        "e.g. 200mbit (default: unknown)")
    if not serving:
        parser.add_argument("--port", type=int, default=5006)
        parser.add_argument("--address", default="127.0.0.1")
        parser.add_argument("--show", action="store_true", help="open a browser tab")
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """Command line entry point: read the runs, then serve the explorer until interrupted."""
    args = parser().parse_args(argv)
    import perfkit.widgets.explorer  # noqa: F401  (before serving: the first page's build has it at hand)

    paths = tuple(args.paths) or (BUNDLED,)
    load(paths)  # read before serving: a bad file is reported here, not in a browser
    pn.serve(lambda: app(paths, link_rate=args.link_rate), port=args.port, address=args.address, show=args.show,
             title="perfkit explorer", websocket_origin=[f"{args.address}:{args.port}", f"localhost:{args.port}"])


if __name__ == "__main__":
    main()
elif __name__.startswith("bokeh"):
    served = parser(serving=True).parse_args(sys.argv[1:])
    app(tuple(served.paths) or (BUNDLED,), link_rate=served.link_rate).servable(title="perfkit explorer")
