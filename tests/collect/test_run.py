"""``collect`` refuses its outputs before anything runs: a missing folder is named, never created."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfkit.collect import collect


def test_a_missing_output_folder_is_refused_before_the_launch(tmp_path: Path) -> None:
    ran = tmp_path / "ran"
    folder = tmp_path / "nowhere"
    with pytest.raises(FileNotFoundError) as exc:
        collect(["sh", "-c", f"touch {ran}"], folder / "out.mpinside")
    assert str(exc.value) == f"no such folder: {folder} (to write out.mpinside in)"
    assert not folder.exists() and not ran.exists()
