"""perfkit report: one self-contained page for every bundled profile, written atomically, never over a file
unless told."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from perfkit.analysis.diagnosis import CAVEATS, diagnose
from perfkit.cli import main
from perfkit.text import unreadable
from tests.analysis.test_finding_texts import GROUPS, open_group
from tests.helpers import ROOT

LAB = sorted((ROOT / "data" / "lab").glob("*.mpinside"))


def visible(page: str) -> str:
    """The page without its scripts and styles: what a reader sees (and the plots' placeholders)."""
    return re.sub(r"<(script|style)\b.*?</\1>", "", page, flags=re.DOTALL)


@pytest.mark.parametrize("files", GROUPS, ids=[str(g[0].parent.relative_to(ROOT)) for g in GROUPS])
def test_every_bundled_profile_gives_a_page(files: list[Path], tmp_path: Path) -> None:
    if open_group(files) is None:
        pytest.skip(f"{files[0].parent.relative_to(ROOT)} holds no profile (matrices, trace parts or tables)")
    out = tmp_path / "report.html"
    assert main(["report", *map(str, files), "-o", str(out), "--errors", "skip"]) == 0
    page = out.read_text(encoding="utf-8")
    shown = visible(page)
    assert "<h2>Findings</h2>" in shown and "<h2>POP efficiencies</h2>" in shown
    markup = re.sub(r"(<(script|style)\b[^>]*>).*?</\2>", r"\1</\2>", page, flags=re.DOTALL)  # tags, not code
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", markup), "a resource outside the page"
    assert not re.search(r"<(script|link)\b[^>]*\b(src|href)=", markup), "a script or stylesheet not inline"
    assert not unreadable(re.sub(r"<[^>]+>", " ", shown)), unreadable(re.sub(r"<[^>]+>", " ", shown))
    assert list(tmp_path.iterdir()) == [out]


def test_the_page_holds_every_finding_and_each_caveat_once(tmp_path: Path) -> None:
    out = tmp_path / "lab.html"
    assert main(["report", *map(str, LAB), "-o", str(out)]) == 0
    shown = visible(out.read_text(encoding="utf-8"))
    findings = diagnose(open_group(LAB))
    for lead in findings["lead"]:
        assert html.escape(lead) in shown
    used = {key for keys in findings["caveats"] for key in keys.split()}
    assert used, "the lab runs name caveats"
    for key in used:
        sentence = re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(CAVEATS[key]))
        assert shown.count(sentence) == 1, key
    assert shown.count("<!--plot:") == 0 and shown.count('class="plot"') == len(LAB)


def test_the_heatmaps_come_without_bokehs_sizing_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Heatmaps are sized by their data area: bokeh's check for a fixed size without width (W-1005) overlooks it,
    and its warning must not reach the user; the check itself is left as it was."""
    from bokeh.core.validation import check
    from bokeh.core.validation.warnings import FIXED_SIZING_MODE

    out = tmp_path / "synthetic.html"
    assert main(["report", *map(str, sorted((ROOT / "data" / "synthetic").glob("[0-9]*/slt.mpinside"))),
                 "-o", str(out)]) == 0
    assert visible(out.read_text(encoding="utf-8")).count('class="plot"') >= 10  # heatmaps among them
    assert [record.getMessage() for record in caplog.records if "W-1005" in record.getMessage()] == []
    assert FIXED_SIZING_MODE not in check.__silencers__


def test_an_existing_page_is_kept_without_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report.html"
    out.write_text("mine")
    assert main(["report", str(LAB[0]), "-o", str(out)]) == 1
    assert out.read_text() == "mine" and "--force" in capsys.readouterr().err
    assert main(["report", str(LAB[0]), "-o", str(out), "--force"]) == 0
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]


def test_a_file_that_cannot_be_read_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report.html"
    assert main(["report", str(tmp_path / "absent.mpinside"), "-o", str(out)]) == 1
    assert not out.exists() and "absent.mpinside" in capsys.readouterr().err
