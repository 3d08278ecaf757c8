"""The explorer's findings rows: the ranks each finding names, selected by its button; words, not raw floats."""

from __future__ import annotations

import html
import re

import holoviews as hv
import pandas as pd
import panel as pn
import pytest
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import perfkit
from perfkit import text as fmt
from perfkit.analysis.diagnosis import SLOW_RANK
from perfkit.analysis.imbalance import slow_ranks
from perfkit.widgets.findings import SEVERITY_COLOURS, finding_ranks, findings_list, named_ranks
from perfkit.widgets.ranks import rank_state
from perfkit.widgets.selection import node_ranks
from tests.helpers import ROOT

hv.extension("bokeh")


@pytest.fixture(scope="module")
def ninety_six() -> xr.Dataset:
    return perfkit.open_runs([ROOT / "data" / "synthetic" / "96" / "slt.mpinside"]).drop_vars("traffic")


@pytest.fixture(scope="module")
def found(ninety_six) -> pd.DataFrame:
    return perfkit.diagnose(ninety_six, run=str(ninety_six["run"].values[0]))


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.sets(st.integers(0, 5000), min_size=1, max_size=40))
def test_named_ranks_reads_back_what_text_writes(ranks):
    finding = {"lead": f"Compute of {fmt.ranks(ranks, limit=100)} is high.", "details": "Nothing else."}
    assert named_ranks(finding).tolist() == sorted(ranks)


def test_named_ranks_of_lead_and_details():
    finding = {"lead": "Load balance 0.77 (measured): rank 50 computes 9.10 s.",
               "details": "Compute time of ranks 48-52, 80 is 12-30% above the mean (6 of 96 ranks)."}
    assert named_ranks(finding).tolist() == [48, 49, 50, 51, 52, 80]
    assert named_ranks({"lead": "MPI takes 40% of the time.", "details": ""}).size == 0


def test_a_slow_node_finding_names_the_node_s_ranks(ninety_six, found):
    run = str(ninety_six["run"].values[0])
    node = found[found["category"] == "slow_node"].iloc[0]
    number = int(node["title"].split()[-1])
    assert finding_ranks(ninety_six, node).tolist() == node_ranks(ninety_six, run)[number].tolist()


def test_a_cut_list_of_slow_ranks_selects_them_all(ninety_six):
    run = str(ninety_six["run"].values[0])
    slow = slow_ranks(ninety_six, run, threshold=SLOW_RANK)["rank"].to_numpy()
    cut = {"run": run, "category": "load_imbalance", "lead": f"Load balance 0.77: rank {slow[0]} computes most.",
           "details": f"Compute time of {fmt.ranks(slow, limit=1)} is high."}
    assert "more range" in cut["details"]
    assert set(finding_ranks(ninety_six, cut)) == set(slow.tolist())


def test_rows_select_the_ranks_they_name(ninety_six, found):
    run = str(ninety_six["run"].values[0])
    state = rank_state(ninety_six, run)
    rows = findings_list(ninety_six, found, state)
    cards = rows.select(pn.layout.Card)
    assert len(cards) == len(found)
    for row, card, (_, finding) in zip(rows.objects, cards, found.iterrows()):
        assert SEVERITY_COLOURS[finding["severity"]] in card.styles["border-left"]
        assert card.collapsed
        buttons = row.select(pn.widgets.Button)
        ranks = finding_ranks(ninety_six, finding)
        assert len(buttons) == (ranks.size > 0)
        if ranks.size:
            buttons[0].clicks += 1
            assert state.selected == ranks.tolist()
            assert state.selection_label == f"finding: {finding['title']}"


def test_rows_read_as_words(ninety_six, found):
    rows = findings_list(ninety_six, found, rank_state(ninety_six))
    shown = " ".join(str(pane.object) for pane in rows.select(pn.pane.HTML) + rows.select(pn.pane.Markdown))
    words = html.unescape(re.sub(r"<[^>]+>", " ", shown))  # what the reader sees, not the markup's colours
    assert fmt.unreadable(words) == []
    for _, finding in found.iterrows():
        assert finding["lead"] in words
        assert f"{finding['seconds']:.3f}" not in words
    notes = [pane.object for pane in rows.select(pn.pane.Markdown) if "Notes" in pane.object]
    keys = {k for c in found["caveats"] for k in c.split()}
    assert len(notes) == (1 if keys else 0)


def test_findings_after_the_first_rows_are_one_table_nothing_left_out(ninety_six, found, monkeypatch):
    from perfkit.widgets import findings as module

    monkeypatch.setattr(module, "CARDS", 2)
    assert len(found) > 2
    rows = findings_list(ninety_six, found, rank_state(ninety_six))
    leads = [pane.object for card in rows.select(pn.layout.Card) for pane in card.header.select(pn.pane.HTML)
             if "<b>" in pane.object]
    assert len(leads) == 2 and all(html.escape(lead) in shown for lead, shown in zip(found["lead"], leads))
    (table,) = (pane.object for pane in rows.select(pn.pane.DataFrame))
    rest = found.iloc[2:]
    assert table["lead"].tolist() == rest["lead"].tolist() and table["finding"].tolist() == rest["title"].tolist()
    assert table["at stake per rank"].tolist() == [fmt.seconds(v) if s != "info" else ""
                                                   for v, s in zip(rest["seconds"], rest["severity"])]
    assert f"{fmt.plural(len(rest), 'more finding')}" in " ".join(p.object for p in rows.select(pn.pane.Markdown))
    assert fmt.unreadable(" ".join(table.astype(str).to_numpy().ravel())) == []
