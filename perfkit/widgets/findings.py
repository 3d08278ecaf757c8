"""The explorer's findings: one row per finding of :func:`perfkit.diagnose`, its lead beside a severity colour,
the details behind it (a collapsed card), and a button that selects the ranks or the node it names.

The ranks a finding names are read from its lead and details (``rank 50``, ``ranks 48-71, 80``, as
:func:`perfkit.text.ranks` writes them); a load-imbalance finding whose list of slow ranks was cut
selects all of them (:func:`perfkit.analysis.imbalance.slow_ranks` at diagnose's threshold). Caveats
shared by several findings are said once, under the list. Numbers are written by :mod:`perfkit.text`. The first
``CARDS`` findings are rows; those after them (a run of 100,000 ranks has a thousand slow nodes: as rows, 17 s
of the server's time to draw) are one table.
"""

from __future__ import annotations

import html
import re
from typing import Any

import numpy as np
import pandas as pd
import panel as pn
import xarray as xr

from perfkit import text as fmt
from perfkit.analysis.diagnosis import CAVEATS, SLOW_RANK
from perfkit.analysis.imbalance import slow_ranks
from perfkit.widgets.ranks import RankState
from perfkit.widgets.selection import select

#: Severity colours: the band left of each finding and its card header's tint.
SEVERITY_COLOURS = {"high": "#d62728", "medium": "#ff9f1c", "low": "#9e9e9e", "info": "#4a90d9"}
SEVERITY_TINTS = {"high": "#fde2e2", "medium": "#fff1dc", "low": "#f2f2f2", "info": "#e8f1fb"}
#: A card's style in a row: it takes the width the button beside it leaves (a stretched card alone takes it all).
BESIDE = {"flex": "1 1 0", "min-width": "0"}
#: Findings shown as rows (card and button); the others are rows of one table under them.
CARDS = 40
#: ``rank 3`` or ``ranks 0-3, 7, 9-12`` (and the ranges that follow) in a finding's text.
RANK_LIST = re.compile(r"\branks? (\d+(?:-\d+)?(?:, \d+(?:-\d+)?)*)", re.IGNORECASE)
#: A list of ranks cut by :func:`perfkit.text.rank_ranges`.
CUT = re.compile(r"and \d+ more ranges?")


def named_ranks(finding: pd.Series | dict[str, Any]) -> np.ndarray:
    """Every rank the lead and details of ``finding`` (a row of :func:`perfkit.diagnose`) name, sorted."""
    found: list[int] = []
    for listed in RANK_LIST.findall(f"{finding['lead']} {finding['details']}"):
        for part in listed.split(", "):
            first, _, last = part.partition("-")
            found.extend(range(int(first), int(last or first) + 1))
    return np.unique(np.asarray(found, dtype=np.int64))


def finding_ranks(ds: xr.Dataset, finding: pd.Series | dict[str, Any]) -> np.ndarray:
    """The ranks ``finding`` names (:func:`named_ranks`), all the slow ranks of its run when it is a load
    imbalance whose list was cut."""
    ranks = named_ranks(finding)
    if finding["category"] == "load_imbalance" and CUT.search(str(finding["details"])):
        run = str(finding["run"])  # its run alone: on a lazy store of 100 runs the whole cube took 18 s
        slow = slow_ranks(ds.sel(run=[run]), run, threshold=SLOW_RANK)["rank"].to_numpy(dtype=np.int64)
        ranks = np.union1d(ranks, slow)
    return ranks


def findings_list(ds: xr.Dataset, findings: pd.DataFrame, state: RankState | None = None) -> pn.Column:
    """``findings`` (:func:`perfkit.diagnose` of ``ds``) as rows: severity, lead, time at stake; details in a
    collapsed card; with ``state``, a button selecting the ranks the finding names. After the first ``CARDS``, the
    others as one table (:func:`rest_table`). Shared caveats once, at the end."""
    if findings.empty:
        return pn.Column(pn.pane.Markdown("No finding: nothing in these ranks stands out."))
    rows = [_finding_row(ds, finding, state) for _, finding in findings.iloc[:CARDS].iterrows()]
    if len(findings) > CARDS:
        rest = findings.iloc[CARDS:]
        rows += [pn.pane.Markdown(f"**{fmt.plural(len(rest), 'more finding')}**, less at stake:",
                                  sizing_mode="stretch_width"),
                 pn.pane.DataFrame(rest_table(rest), index=False, justify="left", sizing_mode="stretch_width",
                                   max_height=400)]
    keys = list(dict.fromkeys(k for caveats in findings["caveats"].astype(str) for k in caveats.split() if k))
    notes = [pn.pane.Markdown("**Notes** (shared by the findings above): " + fmt.sentences(*(CAVEATS[k] for k in keys)),
                              sizing_mode="stretch_width")] if keys else []
    return pn.Column(*rows, *notes, sizing_mode="stretch_width")


def rest_table(findings: pd.DataFrame) -> pd.DataFrame:
    """``findings`` in words, a row each: severity, title, lead, time at stake per rank and share of the run."""
    stake = findings["severity"].astype(str) != "info"
    return pd.DataFrame({
        "severity": findings["severity"].astype(str), "finding": findings["title"].astype(str),
        "lead": findings["lead"].astype(str),
        "at stake per rank": [fmt.seconds(v) if s else "" for v, s in zip(findings["seconds"], stake)],
        "of the run": [fmt.percent(v) if s else "" for v, s in zip(findings["share"], stake)]})


def _finding_row(ds: xr.Dataset, finding: pd.Series, state: RankState | None) -> pn.Row:
    """A collapsed card (severity, title and lead; the details inside) and, with ``state``, the button selecting
    the ranks the finding names beside it."""
    severity = str(finding["severity"])
    colour = SEVERITY_COLOURS.get(severity, SEVERITY_COLOURS["info"])
    stake = "" if severity == "info" else (f" · {fmt.seconds(finding['seconds'])} per rank at stake, "
                                           f"{fmt.percent(finding['share'])} of the run")
    badge = pn.pane.HTML(f'<span style="background:{colour};color:white;border-radius:3px;padding:1px 6px;'
                         f'font-size:85%">{html.escape(severity)}</span>', width=70, margin=(8, 5))
    lead = pn.pane.HTML(f"<b>{html.escape(str(finding['title']))}</b>: {html.escape(str(finding['lead']))}"
                        f'<span style="color:#666">{html.escape(stake)}</span>', sizing_mode="stretch_width",
                        margin=(8, 5), styles={"text-align": "left"})
    details = pn.pane.Markdown(str(finding["details"]) or "No details.", sizing_mode="stretch_width")
    card = pn.layout.Card(details, header=pn.Row(badge, lead, sizing_mode="stretch_width"), collapsed=True,
                          header_background=SEVERITY_TINTS.get(severity, SEVERITY_TINTS["info"]),
                          styles={"border-left": f"6px solid {colour}", **BESIDE}, sizing_mode="stretch_width",
                          margin=(3, 5))
    ranks = finding_ranks(ds, finding) if state is not None else np.empty(0, dtype=np.int64)
    if not ranks.size:
        return pn.Row(card, pn.Spacer(width=200), sizing_mode="stretch_width")
    button = pn.widgets.Button(label=f"select {fmt.ranks(ranks, limit=3)}", color="light", width=190,
                               margin=(6, 5), description="select these ranks: every tab shows them")
    how = f"finding: {finding['title']}"
    button.on_click(lambda _: select(state, ranks, how))
    return pn.Row(card, button, sizing_mode="stretch_width")
